// Training-run charts (experiments pages): one Chart.js chart per metric, each with its own
// y axis, from the JSON in #training-charts: [{metric, kind: "bar"|"line", labels?, values?, series?}].
(function () {
  const source = document.getElementById("training-charts");
  if (!source || !window.Chart) return;
  const palette = ["#2f5bea", "#f79009", "#12b76a", "#d92d20", "#7a5af8", "#0ba5ec"];
  const round = (v) => (typeof v === "number" ? Number(v.toPrecision(4)) : v);
  JSON.parse(source.textContent).forEach((chart, index) => {
    const canvas = document.getElementById(`training-chart-${index}`);
    if (!canvas) return;
    let data, scales;
    if (chart.series) {  // several runs on one metric: a line per run over steps, or a bar per run
      if (chart.kind === "line") {
        data = {datasets: chart.series.map((s, i) => ({label: s.label, data: s.points, borderColor: palette[i % palette.length],
                                                     backgroundColor: palette[i % palette.length], pointRadius: 2, borderWidth: 2}))};
        scales = {x: {type: "linear", title: {display: true, text: "step"}}};
      } else {
        data = {labels: chart.series.map((s) => s.label),
                datasets: [{label: chart.metric, data: chart.series.map((s) => (s.points.length ? s.points[s.points.length - 1].y : null)),
                            backgroundColor: chart.series.map((s, i) => palette[i % palette.length])}]};
      }
    } else if (chart.points) {  // one run's history of one metric
      data = {datasets: [{label: chart.metric, data: chart.points, borderColor: palette[0], pointRadius: 2, borderWidth: 2}]};
      scales = {x: {type: "linear", title: {display: true, text: "step"}}};
    } else {  // one value per run
      data = {labels: chart.labels, datasets: [{label: chart.metric, data: chart.values, backgroundColor: palette[0]}]};
    }
    new Chart(canvas, {
      type: chart.kind || (chart.points ? "line" : "bar"), data,
      options: {animation: false, maintainAspectRatio: false, scales: {...(scales || {}), y: {title: {display: true, text: chart.metric}}},
                plugins: {title: {display: true, text: chart.metric}, legend: {display: !!chart.series && chart.kind === "line"},
                          tooltip: {callbacks: {label: (ctx) => `${ctx.dataset.label}: ${round(ctx.parsed.y)}`}}}},
    });
  });
})();
