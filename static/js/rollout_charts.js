// Candidate vs stable charts of the endpoint page: reads /api/v1/metrics/ (the same
// selector as the API and the judge) every 2 s and redraws three Chart.js line charts.
(function () {
  const cfg = document.getElementById("chart-config");
  if (!cfg || !window.Chart) return;
  const metrics = {request_rate: "requests / s", error_rate: "error rate", latency_p99_ms: "p99 latency (ms)"};
  const colors = {[cfg.dataset.stable]: "#2f5bea", [cfg.dataset.candidate]: "#f79009"};
  const charts = {};
  for (const [metric, title] of Object.entries(metrics)) {
    charts[metric] = new Chart(document.getElementById(`chart-${metric}`), {
      type: "line",
      data: {datasets: []},
      options: {animation: false, parsing: false, maintainAspectRatio: false, plugins: {title: {display: true, text: title}},
                scales: {x: {type: "linear", ticks: {callback: (v) => new Date(v).toLocaleTimeString([], {hour12: false})}}, y: {beginAtZero: true}}},
    });
  }
  async function refresh() {
    const params = new URLSearchParams({endpoint: cfg.dataset.endpoint, metric: Object.keys(metrics).join(","), since: cfg.dataset.since});
    const response = await fetch(`/api/v1/metrics/?${params}`, {credentials: "same-origin"});
    if (!response.ok) return;
    const body = await response.json();
    for (const metric of Object.keys(metrics)) {
      charts[metric].data.datasets = body.series.filter((s) => s.metric === metric).map((s) => ({
        label: s.variant, borderColor: colors[s.variant] || "#667085", pointRadius: 0, borderWidth: 2,
        data: s.points.map((p) => ({x: Date.parse(p.time), y: p.value})),
      }));
      charts[metric].update();
    }
  }
  refresh();
  setInterval(refresh, 2000);
})();
