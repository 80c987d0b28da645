// The endpoint page's charts of a rollout: reads /api/v1/metrics/ (the same selector as the
// API and the judge) every 2 s and redraws one Chart.js line chart per panel. From
// #chart-config (deployments.selectors.rollout_page.chart_config with the panels of
// monitoring.display.charts.rollout_panels): one time range for every chart, the metrics the judge
// decides on for the endpoint's kind (TTFT and ITL on an LLM endpoint) with their unit,
// scale and SLO line, and the rollout's arms: only their variants are drawn, each in its
// ROLE's colour (stable, baseline, candidate, shadow). A gap in the data stays a gap.
// The page's live part is swapped by htmx every 2 s: the charts of one rollout are kept
// (hx-preserve), and when another rollout is shown (a release's canary starting) they are
// drawn anew on its canvases, without a reload.
(function () {
  if (!window.Chart) return;
  const clock = (v) => new Date(v).toISOString().slice(11, 19);
  let state = null; // {rollout, charts: {metric: Chart}}

  function config() {
    const node = document.getElementById("chart-config");
    return node ? JSON.parse(node.textContent) : null;
  }

  function format(panel, value) {
    return value.toFixed(panel.decimals) + " " + panel.unit;
  }

  function build(cfg) {
    const charts = {};
    for (const panel of cfg.panels) {
      const canvas = document.querySelector(`#rollout-charts-${cfg.rollout} canvas[data-metric="${panel.metric}"]`);
      if (!canvas) continue;
      const existing = Chart.getChart(canvas);
      if (existing) existing.destroy();
      charts[panel.metric] = new Chart(canvas, {
        type: "line",
        data: {datasets: []},
        options: {
          animation: false, parsing: false, maintainAspectRatio: false, spanGaps: false,
          interaction: {mode: "nearest", intersect: false},
          plugins: {legend: {position: "bottom", labels: {boxWidth: 12}},
                    tooltip: {callbacks: {title: (items) => items.length ? clock(items[0].parsed.x) + " UTC" : "",
                                          label: (item) => item.dataset.label + ": " + format(panel, item.parsed.y)}}},
          scales: {
            x: {type: "linear", ticks: {maxRotation: 0, autoSkip: true, maxTicksLimit: 4, callback: clock},
                title: {display: true, text: "time (UTC)"}},
            y: {beginAtZero: true, ticks: {maxTicksLimit: 6, callback: (v) => `${+v.toFixed(panel.decimals)} ${panel.unit}`}},
          },
        },
      });
    }
    return {rollout: cfg.rollout, charts: charts};
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
    const cfg = config();
    if (!cfg || !cfg.rollout) return;
    if (!state || state.rollout !== cfg.rollout || !document.body.contains(Object.values(state.charts)[0]?.canvas)) {
      state = build(cfg);
    }
    const current = state;
    const arms = Object.fromEntries(cfg.arms.map((a) => [a.variant, a]));
    const order = cfg.arms.map((a) => a.variant);
    const since = Date.parse(cfg.since);
    const until = cfg.until ? Date.parse(cfg.until) : Date.now();
    const params = new URLSearchParams({endpoint: cfg.endpoint, metric: cfg.panels.map((p) => p.metric).join(","),
                                        since: new Date(since).toISOString(), until: new Date(until).toISOString()});
    const response = await fetch(`/api/v1/metrics/?${params}`, {credentials: "same-origin"});
    if (!response.ok || state !== current) return;
    const body = await response.json();
    for (const panel of cfg.panels) {
      const chart = current.charts[panel.metric];
      if (!chart) continue;
      const series = body.series.filter((s) => s.metric === panel.metric && arms[s.variant]);
      series.sort((a, b) => order.indexOf(a.variant) - order.indexOf(b.variant));
      const datasets = series.map((s) => ({
        label: `${arms[s.variant].role} (${s.variant})`, role: arms[s.variant].role,
        borderColor: arms[s.variant].color, backgroundColor: arms[s.variant].color, pointRadius: 0, borderWidth: 2,
        data: withGaps(s.points.map((p) => ({x: Date.parse(p.time), y: p.value * panel.scale}))),
      }));
      if (panel.slo !== null && panel.slo !== undefined) {
        datasets.push({label: "SLO " + format(panel, panel.slo), slo: true, borderColor: "#c01048",
                       backgroundColor: "#c01048", borderDash: [6, 4], borderWidth: 1, pointRadius: 0,
                       data: [{x: since, y: panel.slo}, {x: until, y: panel.slo}]});
      }
      chart.data.datasets = datasets;
      chart.options.scales.x.min = since;
      chart.options.scales.x.max = until;
      chart.update("none");
    }
    current.drawnUntil = cfg.until;
  }

  refresh();
  // live: every 2 s; once the rollout is over, one last draw up to the end of its range
  setInterval(() => {
    const cfg = config();
    if (cfg && (!cfg.until || !state || state.rollout !== cfg.rollout || state.drawnUntil !== cfg.until)) refresh();
  }, 2000);
  document.body.addEventListener("htmx:afterSettle", () => {
    const cfg = config();
    if (cfg && (!state || state.rollout !== cfg.rollout)) refresh();
  });
})();
