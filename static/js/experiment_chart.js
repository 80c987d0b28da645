// The experiment page's lift chart: each candidate's relative lift (%) per analysis tick as a
// line, and its always-valid band as a bar from the lower to the upper bound at every tick, so
// the band shows from the first tick (a filled area between lines needs two). Reads the chart
// data the live part renders (the same analysis rows as the table) and redraws after every
// htmx swap of that part.
(function () {
  const el = document.getElementById("lift-chart");
  if (!el || !window.Chart) return;
  const palette = ["54,162,235", "247,144,9", "18,183,106", "240,68,56"];
  const pct = (v) => (v === null || v === undefined ? null : 100 * v);
  const chart = new Chart(el, {
    type: "bar",
    data: {labels: [], datasets: []},
    options: {
      animation: false, maintainAspectRatio: false,
      plugins: {title: {display: true, text: "Relative lift (%) per analysis tick; bars: its always-valid band (lower to upper bound)"},
                tooltip: {callbacks: {label: (item) => item.dataset.band
                  ? `${item.dataset.label}: ${item.raw[0].toFixed(1)} % to ${item.raw[1].toFixed(1)} %`
                  : `${item.dataset.label}: ${item.raw === null ? "—" : item.raw.toFixed(1) + " %"}`}}},
      scales: {y: {title: {display: true, text: "lift %"}, ticks: {maxTicksLimit: 6}},
               x: {title: {display: true, text: "analysis tick (UTC)"}, ticks: {maxRotation: 0, autoSkip: true, maxTicksLimit: 6}}},
    },
  });
  function draw() {
    const node = document.getElementById("lift-chart-data");
    if (!node) return;
    const data = JSON.parse(node.textContent);
    const datasets = [];
    Object.entries(data.series).forEach(([name, points], i) => {
      const rgb = palette[i % palette.length];
      datasets.push({type: "line", label: name + " lift", data: points.map((p) => pct(p[0])), borderColor: `rgb(${rgb})`,
                     backgroundColor: `rgb(${rgb})`, pointRadius: 3, fill: false, order: 0});
      datasets.push({type: "bar", band: true, label: name + " band", order: 1, barPercentage: 0.5, categoryPercentage: 0.8,
                     data: points.map((p) => (p[1] === null || p[2] === null || p[1] === undefined ? null : [pct(p[1]), pct(p[2])])),
                     backgroundColor: `rgba(${rgb},0.25)`, borderColor: `rgba(${rgb},0.6)`, borderWidth: 1});
    });
    datasets.push({type: "line", label: "0 % (no lift)", data: data.labels.map(() => 0), borderColor: "#98a2b3",
                   borderDash: [4, 4], pointRadius: 0, borderWidth: 1, fill: false, order: 2});
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
