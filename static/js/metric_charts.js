// Monitoring charts: one Chart.js line chart per endpoint x panel, one line per variant,
// plus the endpoint's SLO as a dashed line where the panel has one. Titles, units, scales
// and SLOs come from monitoring/display/charts.py (the #chart-config JSON); the data from
// /api/v1/metrics/ (the same selectors as the API and the judge). Every panel of the page
// covers the same [now - range, now] and times are a 24-hour UTC clock, as in the tables.
(function () {
  const cfgNode = document.getElementById("chart-config");
  if (!cfgNode || !window.Chart) return;
  const cfg = JSON.parse(cfgNode.textContent);
  const palette = ["#2f5bea", "#f79009", "#12805c", "#7a5af8", "#0e9384", "#667085"];
  const variantNames = { none: "refused before routing" };
  const panels = Object.fromEntries(cfg.panels.map((p) => [p.metric, p]));
  const rangeMs = cfg.range_seconds * 1000;
  // ticks on round UTC times: every 3 min over 15 min, 10 min over 1 h, 1 h over 6 h, 4 h over 24 h
  const tickStep = [[15 * 60e3, 3 * 60e3], [3600e3, 10 * 60e3], [6 * 3600e3, 3600e3]]
    .find(([range]) => rangeMs <= range)?.[1] || 4 * 3600e3;
  const charts = {};

  // 24-hour UTC clock: HH:MM, or HH:MM:SS where a tooltip needs the second.
  function clock(ms, withSeconds) {
    const iso = new Date(ms).toISOString();
    return withSeconds ? iso.slice(11, 19) : iso.slice(11, 16);
  }
  window.MetricCharts = { clock: clock };

  function roundTicks(axis) {
    const ticks = [];
    for (let t = Math.ceil(axis.min / tickStep) * tickStep; t <= axis.max; t += tickStep) ticks.push({ value: t });
    axis.ticks = ticks;
  }

  function format(panel, value) {
    return value.toFixed(panel.decimals) + " " + panel.unit;
  }

  function chartFor(canvas) {
    const key = canvas.closest(".endpoint-charts").dataset.endpoint + "/" + canvas.dataset.metric;
    if (!charts[key]) {
      const panel = panels[canvas.dataset.metric];
      charts[key] = new Chart(canvas, {
        type: "line",
        data: { datasets: [] },
        options: {
          animation: false, parsing: false, normalized: true,
          elements: { point: { radius: 0 }, line: { borderWidth: 1.5 } },
          interaction: { mode: "nearest", intersect: false },
          scales: {
            x: { type: "linear", title: { display: true, text: "time (UTC)" },
                 afterBuildTicks: roundTicks, ticks: { maxRotation: 0, callback: (v) => clock(v, false) } },
            y: { beginAtZero: true, ticks: { callback: (v) => v + " " + panel.unit } },
          },
          plugins: {
            legend: { position: "bottom" },
            tooltip: { callbacks: {
              title: (items) => items.length ? clock(items[0].parsed.x, true) + " UTC" : "",
              label: (item) => item.dataset.label + ": " + format(panel, item.parsed.y),
            } },
          },
        },
      });
    }
    return charts[key];
  }

  async function refresh(card) {
    const canvases = card.querySelectorAll("canvas[data-metric]");
    const until = Date.now();
    const since = until - rangeMs;
    const query = new URLSearchParams({
      endpoint: card.dataset.endpoint, metric: Array.from(canvases).map((c) => c.dataset.metric).join(","),
      since: new Date(since).toISOString(), until: new Date(until).toISOString(),
    });
    const response = await fetch(cfg.metrics_url + "?" + query, { credentials: "same-origin", headers: { Accept: "application/json" } });
    if (!response.ok) return;
    const body = await response.json();
    const slos = cfg.slos[card.dataset.endpoint] || {};
    canvases.forEach((canvas) => {
      const panel = panels[canvas.dataset.metric];
      const chart = chartFor(canvas);
      const series = body.series.filter((s) => s.metric === panel.metric && s.variant !== "all");
      const datasets = series.map((s, i) => ({
        label: variantNames[s.variant] || s.variant,
        borderColor: palette[i % palette.length], backgroundColor: palette[i % palette.length],
        data: s.points.map((p) => ({ x: Date.parse(p.time), y: p.value * panel.scale })),
      }));
      const slo = slos[panel.metric];
      if (slo !== undefined) {
        datasets.push({
          label: "SLO " + format(panel, slo), slo: true, borderColor: "#c01048", backgroundColor: "#c01048",
          borderDash: [6, 4], borderWidth: 1, data: [{ x: since, y: slo }, { x: until, y: slo }],
        });
      }
      chart.data.datasets = datasets;
      chart.options.scales.x.min = since;
      chart.options.scales.x.max = until;
      chart.update("none");
    });
  }

  function tick() { document.querySelectorAll(".endpoint-charts").forEach(refresh); }
  tick();
  setInterval(tick, 5000);
})();
