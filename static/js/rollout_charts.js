// The endpoint page's charts of a rollout: reads /api/v1/metrics/ (the same selector as the
// API and the judge) every 2 s and redraws three Chart.js line charts. From #chart-config
// (deployments.selectors.rollout_page.chart_config): one time range for all three charts,
// and the rollout's arms: only their variants are drawn, each in its ROLE's colour
// (stable, baseline, candidate, shadow: the same colours in every rollout). A gap in the
// data stays a gap: a null point breaks the line where samples are missing.
(function () {
  const node = document.getElementById("chart-config");
  if (!node || !window.Chart) return;
  const cfg = JSON.parse(node.textContent);
  const metrics = {request_rate: "requests / s", error_rate: "error rate", latency_p99_ms: "p99 latency (ms)"};
  const arms = Object.fromEntries(cfg.arms.map((a) => [a.variant, a]));
  const order = cfg.arms.map((a) => a.variant);
  const since = Date.parse(cfg.since);
  const clock = (v) => new Date(v).toISOString().slice(11, 19);
  const charts = {};
  for (const [metric, title] of Object.entries(metrics)) {
    charts[metric] = new Chart(document.getElementById(`chart-${metric}`), {
      type: "line",
      data: {datasets: []},
      options: {animation: false, parsing: false, maintainAspectRatio: false, spanGaps: false,
                plugins: {title: {display: true, text: title}, legend: {position: "bottom"}},
                scales: {x: {type: "linear", min: since, ticks: {maxRotation: 0, callback: clock}, title: {display: true, text: "time (UTC)"}},
                         y: {beginAtZero: true}}},
    });
  }

  // Points with a null where consecutive samples are further apart than 3x the usual step.
  function withGaps(points) {
    if (points.length < 3) return points;
    const steps = points.slice(1).map((p, i) => p.x - points[i].x).sort((a, b) => a - b);
    const limit = Math.max(3 * steps[Math.floor(steps.length / 2)], 5000);
    const out = [points[0]];
    for (let i = 1; i < points.length; i++) {
      if (points[i].x - points[i - 1].x > limit) out.push({x: (points[i].x + points[i - 1].x) / 2, y: null});
      out.push(points[i]);
    }
    return out;
  }

  async function refresh() {
    const until = cfg.until ? Date.parse(cfg.until) : Date.now();
    const params = new URLSearchParams({endpoint: cfg.endpoint, metric: Object.keys(metrics).join(","),
                                        since: new Date(since).toISOString(), until: new Date(until).toISOString()});
    const response = await fetch(`/api/v1/metrics/?${params}`, {credentials: "same-origin"});
    if (!response.ok) return;
    const body = await response.json();
    for (const metric of Object.keys(metrics)) {
      const series = body.series.filter((s) => s.metric === metric && arms[s.variant]);
      series.sort((a, b) => order.indexOf(a.variant) - order.indexOf(b.variant));
      charts[metric].data.datasets = series.map((s) => ({
        label: `${arms[s.variant].role} (${s.variant})`, role: arms[s.variant].role,
        borderColor: arms[s.variant].color, backgroundColor: arms[s.variant].color, pointRadius: 0, borderWidth: 2,
        data: withGaps(s.points.map((p) => ({x: Date.parse(p.time), y: p.value}))),
      }));
      charts[metric].options.scales.x.min = since;
      charts[metric].options.scales.x.max = until;
      charts[metric].update("none");
    }
  }
  refresh();
  if (!cfg.until) setInterval(refresh, 2000);
})();
