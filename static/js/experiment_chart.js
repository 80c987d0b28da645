// The experiment page's lift chart: each candidate's relative lift (%) over the analysis
// ticks with its always-valid band drawn as a filled area between lower and upper. Reads the
// chart data the live part renders (the same analysis rows as the table) and redraws after
// every htmx swap of that part.
(function () {
  const el = document.getElementById("lift-chart");
  if (!el || !window.Chart) return;
  const palette = ["54,162,235", "247,144,9", "18,183,106", "240,68,56"];
  const pct = (v) => (v === null || v === undefined ? null : 100 * v);
  const chart = new Chart(el, {
    type: "line",
    data: {labels: [], datasets: []},
    options: {
      animation: false,
      plugins: {title: {display: true, text: "Relative lift (%) with its always-valid band, per analysis tick"},
                legend: {labels: {filter: (item) => !item.text.endsWith(" band")}}},
      scales: {y: {title: {display: true, text: "lift %"}}, x: {title: {display: true, text: "analysis tick (UTC)"}}},
    },
  });
  function draw() {
    const node = document.getElementById("lift-chart-data");
    if (!node) return;
    const data = JSON.parse(node.textContent);
    const datasets = [];
    Object.entries(data.series).forEach(([name, points], i) => {
      const rgb = palette[i % palette.length];
      datasets.push({label: name + " upper band", data: points.map((p) => pct(p[2])), borderWidth: 0, pointRadius: 0, fill: "+1", backgroundColor: `rgba(${rgb},0.2)`});
      datasets.push({label: name + " lower band", data: points.map((p) => pct(p[1])), borderWidth: 0, pointRadius: 0, fill: false});
      datasets.push({label: name + " lift %", data: points.map((p) => pct(p[0])), borderColor: `rgb(${rgb})`, pointRadius: 2, fill: false});
    });
    datasets.push({label: "0 % band", data: data.labels.map(() => 0), borderColor: "#98a2b3", borderDash: [4, 4], pointRadius: 0, borderWidth: 1, fill: false});
    chart.data.labels = data.labels;
    chart.data.datasets = datasets;
    chart.update();
    el.dataset.points = String(data.labels.length);
  }
  draw();
  document.body.addEventListener("htmx:afterSwap", (event) => {
    if (event.detail && event.detail.target && event.detail.target.id === "experiment-live") draw();
  });
  document.body.addEventListener("htmx:afterSettle", draw);
})();
