// netmon's charts (dashboard/chartjs.py): what a JSON configuration cannot hold.
// netmonDraw(id) draws the chart whose canvas is #netmon-chart-<id> from its configuration
// (#netmon-chart-config-<id>, dashboard.chartjs.config's output), after destroying the charts
// whose canvas has left the page (a page's charts are replaced at every refresh: a tab left open
// for days must not keep them), and marks the canvas data-drawn="1" once drawn.
// netmonChart(canvas, config) draws a Chart.js chart from a configuration:
// - scales with netmonFormat "time" (epoch ms, shown in UTC) or "percent" get tick and tooltip
//   formatters;
// - options.plugins.netmonLines.lines: horizontal lines across the plot, dashed, each with its label
//   (Plotly's add_hline);
// - datasets' netmonLegend: whether the legend lists it; netmonExtra: a tooltip line per point.
(function () {
  "use strict";
  const pad = (n) => String(n).padStart(2, "0");
  function timeText(ms, span) {
    const d = new Date(ms);
    const hms = `${pad(d.getUTCHours())}:${pad(d.getUTCMinutes())}`;
    const day = `${d.getUTCFullYear()}-${pad(d.getUTCMonth() + 1)}-${pad(d.getUTCDate())}`;
    if (span === undefined) return `${day} ${hms}:${pad(d.getUTCSeconds())}`;
    if (span <= 600e3) return `${hms}:${pad(d.getUTCSeconds())}`;
    if (span <= 86400e3) return hms;
    return `${day.slice(5)} ${hms}`;
  }
  // Time ticks at round instants (Chart.js's linear ticks would fall at any millisecond).
  const STEPS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200,
    86400].map((s) => s * 1000);
  function timeTicks(scale) {
    const span = scale.max - scale.min;
    const step = STEPS.find((s) => span / s <= 8) || Math.ceil(span / 8 / 86400e3) * 86400e3;
    const ticks = [];
    for (let t = Math.ceil(scale.min / step) * step; t <= scale.max; t += step) ticks.push({ value: t });
    scale.ticks = ticks;
  }
  const number = (v) =>
    typeof v === "number" ? v.toLocaleString("en-US", { maximumFractionDigits: 3 }) : String(v);
  function formatter(kind) {
    if (kind === "time") return (v) => timeText(v);
    if (kind === "percent") return (v) => `${Math.round(v * 100)}%`;
    return number;
  }
  const lines = {
    id: "netmonLines",
    afterDatasetsDraw(chart, _args, opts) {
      const { ctx, chartArea } = chart;
      for (const line of (opts && opts.lines) || []) {
        const scale = chart.scales[line.scale];
        if (!scale || line.y === null) continue;
        const y = scale.getPixelForValue(line.y);
        if (y < chartArea.top || y > chartArea.bottom) continue;
        ctx.save();
        ctx.strokeStyle = line.color;
        ctx.lineWidth = 2;
        ctx.setLineDash(line.dash);
        ctx.beginPath();
        ctx.moveTo(chartArea.left, y);
        ctx.lineTo(chartArea.right, y);
        ctx.stroke();
        if (line.text) {
          ctx.fillStyle = line.color;
          ctx.font = "12px system-ui, sans-serif";
          ctx.textAlign = "right";
          ctx.fillText(line.text, chartArea.right - 4, y - 4);
        }
        ctx.restore();
      }
    },
  };
  window.netmonChart = function (canvas, config) {
    const formats = {};
    for (const [id, scale] of Object.entries(config.options.scales)) {
      const kind = scale.netmonFormat;
      formats[id] = formatter(kind);
      if (kind === "time") {
        scale.ticks = Object.assign({}, scale.ticks, {
          callback: function (v) {
            return timeText(v, this.max - this.min);
          },
          maxRotation: 0,
          autoSkipPadding: 24,
        });
        scale.afterBuildTicks = timeTicks;
      } else if (kind === "percent") {
        scale.ticks = Object.assign({}, scale.ticks, { callback: formats[id] });
      }
    }
    const index = config.options.indexAxis;
    const valueAxis = index === "x" ? "y" : "x";
    config.options.plugins.legend.labels = {
      filter: (item, data) => data.datasets[item.datasetIndex].netmonLegend,
    };
    config.options.plugins.tooltip = {
      callbacks: {
        title(items) {
          if (!items.length) return "";
          const it = items[0];
          const scale = config.options.scales[index];
          if (scale.type === "category") return it.label;
          return formats[index](it.parsed[index]);
        },
        label(it) {
          const ds = it.dataset;
          const axis = ds.yAxisID && index === "x" ? ds.yAxisID : valueAxis;
          const raw = it.raw[valueAxis];
          const f = formats[axis] || number;
          const value = Array.isArray(raw) ? `${f(raw[0])} → ${f(raw[1])}` : f(raw);
          return ds.label ? `${ds.label}: ${value}` : value;
        },
        afterLabel(it) {
          const extra = it.dataset.netmonExtra;
          return extra ? extra[it.dataIndex] : "";
        },
      },
    };
    if (config.options.netmonGap !== null && config.options.netmonGap !== undefined) {
      for (const ds of config.data.datasets) {
        if (ds.type === "bar") Object.assign(ds, { barPercentage: 1, categoryPercentage: 1 - config.options.netmonGap });
      }
    }
    config.plugins = [lines];
    return new Chart(canvas, config);
  };
  window.netmonDraw = function (id) {
    for (const chart of Object.values(Chart.instances)) {
      if (!chart.canvas || !chart.canvas.isConnected) chart.destroy();
    }
    const canvas = document.getElementById(`netmon-chart-${id}`);
    const source = document.getElementById(`netmon-chart-config-${id}`);
    if (!canvas || !source || Chart.getChart(canvas)) return;
    window.netmonChart(canvas, JSON.parse(source.textContent));
    requestAnimationFrame(() => {
      canvas.dataset.drawn = "1";
    });
  };
})();
