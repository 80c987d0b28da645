// The build page's tune charts: one point per config tried, p99 latency (x) against
// throughput within the SLO (y), the Pareto front joined, the best config ringed and the
// SLO as a dashed vertical line. Data: the JSON script each canvas names (registry/selectors/tuning.py).
(function () {
  function draw() {
    if (!window.Chart) return;
    document.querySelectorAll("canvas.tune-chart").forEach((canvas) => {
      const source = document.getElementById(canvas.dataset.source);
      if (!source || canvas.dataset.drawn) return;
      canvas.dataset.drawn = "1";
      const chart = JSON.parse(source.textContent);
      const points = chart.points;
      const top = Math.max(1, ...points.map((p) => p.y)) * 1.1;
      const front = points.filter((p) => p.pareto).sort((a, b) => a.x - b.x);
      const datasets = [
        {label: "configs tried", data: points.filter((p) => !p.pareto), backgroundColor: "#98a2b3", pointRadius: 4},
        {label: "Pareto front", data: front, showLine: true, borderColor: "#2f5bea", backgroundColor: "#2f5bea", pointRadius: 5},
        {label: "best within the SLO", data: points.filter((p) => p.best), backgroundColor: "#12b76a", borderColor: "#12b76a",
         pointRadius: 9, pointStyle: "circle", borderWidth: 3, fill: false},
      ];
      if (chart.slo_p99_ms) {
        datasets.push({label: `SLO p99 ${chart.slo_p99_ms} ms`, data: [{x: chart.slo_p99_ms, y: 0}, {x: chart.slo_p99_ms, y: top}],
                       showLine: true, borderColor: "#d92d20", borderDash: [6, 4], pointRadius: 0});
      }
      new Chart(canvas, {
        type: "scatter", data: {datasets},
        options: {animation: false, maintainAspectRatio: false,
                  scales: {x: {type: "logarithmic", title: {display: true, text: "p99 latency (ms), log scale"}},
                           y: {min: 0, title: {display: true, text: "throughput within the SLO (req/s)"}}},
                  plugins: {tooltip: {callbacks: {label: (ctx) => {
                    const p = ctx.raw; return p.config ? `#${p.trial} ${p.label ? p.label + ": " : ""}${p.config}: ${Math.round(p.y)} req/s, p99 ${p.x} ms` : ctx.dataset.label;
                  }}}}},
      });
    });
  }
  draw();
  document.body.addEventListener("htmx:afterSettle", draw);
})();
