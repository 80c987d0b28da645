// A build's latency by batch size per variant (the version page's build panel), from the
// JSON the template writes with json_script ("latency-data").
(function () {
  const source = document.getElementById("latency-data");
  const canvas = document.getElementById("latency-chart");
  if (!source || !canvas || typeof Chart === "undefined") return;
  const data = JSON.parse(source.textContent);
  const colors = ["#2f5bea", "#12805c", "#b54708", "#c01048", "#667085"];
  new Chart(canvas, {
    type: "line",
    data: {
      labels: data.batch_sizes,
      datasets: data.series.map((s, i) => ({label: s.label, data: s.p50_ms, borderColor: colors[i % colors.length], tension: 0.2})),
    },
    options: {scales: {x: {title: {display: true, text: "batch size"}}, y: {type: "logarithmic", title: {display: true, text: "p50 latency (ms)"}}}},
  });
})();
