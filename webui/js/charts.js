// Plain SVG charts: the final metric per round (with the baseline and the best-so-far
// step line) and a round's live metric curves. Drawn from scratch on each update.

import { fmtNum, h, s } from "./dom.js";

const W = 560;
const H = 240;
const PAD = { left: 58, right: 16, top: 14, bottom: 34 };
const COLORS = ["#2563eb"];
// Each marker of the round chart, as the legend names it (a verdict, or none yet).
const MARKERS = [
  ["baseline", "pt-baseline", "baseline round"],
  ["kept", "pt-kept", "kept"],
  ["neutral", "pt-neutral", "neutral (within tolerance)"],
  ["rejected", "pt-rejected", "rejected"],
  [null, "pt-other", "not judged"],
];
const MARKER_OF = new Map(MARKERS.map(([verdict, cls]) => [verdict, cls]));

/** About ``count`` round numbers covering [low, high]. */
export function niceTicks(low, high, count = 5) {
  if (!Number.isFinite(low) || !Number.isFinite(high)) return [];
  if (low === high) {
    const pad = Math.abs(low) * 0.1 || 1;
    low -= pad;
    high += pad;
  }
  const raw = (high - low) / count;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((st) => st >= raw) || raw;
  const ticks = [];
  const first = Math.ceil(low / step - 1e-9);
  const last = Math.floor(high / step + 1e-9);
  for (let k = first; k <= last; k++) ticks.push(Number((k * step).toPrecision(12)));
  return ticks;
}

/** Tick labels of one axis in one format: as many decimals as the step needs (0.2,
 * 0.25, 0.3 → "0.20", "0.25", "0.30"), or one exponent form for very large or small. */
export function tickLabels(ticks) {
  if (!ticks.length) return [];
  const step = ticks.length > 1 ? Math.abs(ticks[1] - ticks[0]) : Math.abs(ticks[0]) || 1;
  const big = Math.max(...ticks.map(Math.abs));
  if (big >= 1e6 || (big > 0 && big < 1e-3)) {
    const digits = Math.max(0, Math.min(6, Math.ceil(Math.log10(big / step) - 1e-9)));
    return ticks.map((t) => (t === 0 ? "0" : t.toExponential(digits)));
  }
  const decimals = Math.max(0, ...ticks.map((t) => decimalsOf(t)), decimalsOf(step));
  return ticks.map((t) => t.toFixed(Math.min(decimals, 10)));
}

function decimalsOf(x) {
  const text = Number(x.toPrecision(12)).toString();
  if (text.includes("e")) return 0;
  const dot = text.indexOf(".");
  return dot < 0 ? 0 : text.length - dot - 1;
}

function frame(title, xTicks, yTicks, sx, sy, xLabel) {
  const g = s("g", { class: "axes" });
  const yLabels = tickLabels(yTicks);
  yTicks.forEach((t, i) => {
    g.append(
      s("line", { x1: PAD.left, x2: W - PAD.right, y1: sy(t), y2: sy(t), class: "grid" }),
      s("text", { x: PAD.left - 6, y: sy(t) + 4, "text-anchor": "end" }, yLabels[i]),
    );
  });
  const xLabels = tickLabels(xTicks);
  xTicks.forEach((t, i) => {
    g.append(s("text", { x: sx(t), y: H - PAD.bottom + 16, "text-anchor": "middle" }, xLabels[i]));
  });
  g.append(
    s("line", { x1: PAD.left, x2: W - PAD.right, y1: H - PAD.bottom, y2: H - PAD.bottom, class: "axis" }),
    s("text", { x: W - PAD.right, y: H - 4, "text-anchor": "end", class: "label" }, xLabel),
  );
  const svg = s("svg", {
    viewBox: `0 0 ${W} ${H}`,
    class: "chart",
    role: "img",
    "aria-label": title,
    preserveAspectRatio: "xMidYMid meet",
  });
  svg.append(s("title", {}, title), g);
  return svg;
}

function scales(xs, ys, { padY = 0.08 } = {}) {
  let [x0, x1] = [Math.min(...xs), Math.max(...xs)];
  let [y0, y1] = [Math.min(...ys), Math.max(...ys)];
  if (x0 === x1) {
    x0 -= 1;
    x1 += 1;
  }
  // a metric that is never negative gets no negative axis
  const floor = y0 >= 0 ? 0 : -Infinity;
  const span = y1 - y0 || Math.abs(y1) * 0.1 || 1;
  y0 = Math.max(floor, y0 - span * padY);
  y1 += span * padY;
  let yTicks = niceTicks(y0, y1, 4);
  if (yTicks.length > 1) {
    // widen to whole tick steps so every point sits between two labelled lines
    const step = yTicks[1] - yTicks[0];
    y0 = Math.max(floor, Math.floor(y0 / step + 1e-9) * step);
    y1 = Math.ceil(y1 / step - 1e-9) * step;
    yTicks = niceTicks(y0, y1, Math.max(1, Math.round((y1 - y0) / step))).filter((t) => t >= floor);
  }
  const sx = (x) => PAD.left + ((x - x0) / (x1 - x0)) * (W - PAD.left - PAD.right);
  const sy = (y) => H - PAD.bottom - ((y - y0) / (y1 - y0)) * (H - PAD.top - PAD.bottom);
  return { sx, sy, yTicks, x0, x1 };
}

/**
 * Final metric per round. ``rounds``: [{index, metric, best, verdict, status}] (``best``: the
 * session's best metric once the round finished), ``baseline``:
 * the baseline's metric or null, ``goal``: "min" | "max".
 */
export function roundChart({ rounds, baseline, goal, metricName, maxRounds }) {
  const scored = rounds.filter((r) => typeof r.metric === "number");
  const title = `${metricName || "metric"} per round (${goal === "max" ? "higher" : "lower"} is better)`;
  if (!scored.length) {
    return h("div.chart-empty", {}, h("strong", {}, title), h("p", {}, "No round has a metric yet."));
  }
  const xs = [1, Math.max(maxRounds || 1, ...rounds.map((r) => r.index))];
  const ys = scored.map((r) => r.metric).concat(baseline ?? []);
  const { sx, sy, yTicks } = scales(xs, ys);
  const xTicks = niceTicks(xs[0], xs[1], Math.min(10, xs[1] - xs[0] || 1)).filter(Number.isInteger);
  const svg = frame(title, xTicks, yTicks, sx, sy, "round");
  const shown = new Set();
  if (typeof baseline === "number") {
    svg.append(
      s("line", { x1: PAD.left, x2: W - PAD.right, y1: sy(baseline), y2: sy(baseline), class: "baseline" }),
      s("text", { x: W - PAD.right - 4, y: sy(baseline) - 5, "text-anchor": "end", class: "baseline-label" }, "baseline"),
    );
  }
  // best so far: a step line through the session's best after each round (``best``,
  // decided by the daemon: goal, tolerance and noise floor; the page compares nothing)
  let best = null;
  const d = [];
  for (const r of scored) {
    if (typeof r.best !== "number") continue;
    const x = sx(r.index).toFixed(1);
    if (best === null) d.push(`M${x},${sy(r.best).toFixed(1)}`);
    else {
      d.push(`H${x}`);
      if (r.best !== best) d.push(`V${sy(r.best).toFixed(1)}`);
    }
    best = r.best;
  }
  if (best === null) d.length = 0;
  if (d.length) {
    d.push(`H${sx(xs[1]).toFixed(1)}`);
    svg.append(s("path", { d: d.join(" "), class: "best-line" }));
  }
  for (const r of scored) {
    const marker = MARKER_OF.get(r.verdict || null) || "pt-other";
    shown.add(marker);
    const dot = s("circle", {
      cx: sx(r.index),
      cy: sy(r.metric),
      r: 5,
      class: `pt ${marker}`,
    });
    dot.append(s("title", {}, `round ${r.index}: ${fmtNum(r.metric)}${r.verdict ? ` (${r.verdict})` : ""}`));
    svg.append(dot);
  }
  const legend = h(
    "div.legend",
    {},
    h("span.key.key-best", {}, "best so far"),
    typeof baseline === "number" ? h("span.key.key-baseline", {}, "baseline") : null,
    MARKERS.filter(([, cls]) => shown.has(cls)).map(([, cls, label]) => h(`span.key.key-dot.${cls}`, {}, label)),
  );
  return h(
    "figure.chart-box",
    { dataset: { chart: "rounds", points: String(scored.length) } },
    h("figcaption", {}, title),
    svg,
    legend,
  );
}

function thin(points, limit = 800) {
  if (points.length <= limit) return points;
  const stride = Math.ceil(points.length / limit);
  const out = points.filter((_, i) => i % stride === 0);
  if (out[out.length - 1] !== points[points.length - 1]) out.push(points[points.length - 1]);
  return out;
}

/**
 * One round's live curve of one metric: ``series`` is Map(name -> [[x, y], ...]),
 * ``selected`` the metric drawn (the session's primary metric unless the reader chose
 * another in the select, which calls ``onSelect(name)``); ``finals`` lists values
 * without a step.
 */
export function curveChart({ series, finals = new Map(), round, selected, onSelect }) {
  const names = [...series.keys()].filter((n) => series.get(n).length);
  const name = names.includes(selected) ? selected : null;
  const title = round ? `Round ${round}: ${name || selected || "metrics"} by step` : "Live metrics";
  const finalKeys = [...finals].map(([n, value]) => h("span.key.key-final", {}, `${n} ${fmtNum(value)} (final)`));
  const picker = names.length
    ? h(
        "select.curve-metric",
        { "aria-label": "Metric shown", onchange: (e) => onSelect && onSelect(e.target.value) },
        [...new Set([...(name ? [] : [selected]), ...names])].filter(Boolean).map((n) =>
          h("option", { value: n, selected: n === (name || selected) }, names.includes(n) ? n : `${n} (${finals.has(n) ? "final only" : "no steps yet"})`),
        ),
      )
    : null;
  const head = h("figcaption", {}, title, picker ? " " : null, picker);
  if (!name) {
    return h(
      "div.chart-empty",
      { dataset: { chart: "curve", metric: selected || "" } },
      head,
      h("p", {}, names.length
          ? finals.has(selected)
            ? `${selected} has only a final value in this round (below), no value by step: pick another metric to see a curve.`
            : `${selected} has no value by step in this round yet: pick another metric to see a curve.`
          : finals.size ? "No metric with steps in this round." : "No metric points yet."),
      finalKeys.length ? h("div.legend", {}, finalKeys) : null,
    );
  }
  const pts = thin(series.get(name));
  const { sx, sy, yTicks, x0, x1 } = scales(
    pts.map((p) => p[0]),
    pts.map((p) => p[1]),
  );
  const svg = frame(title, niceTicks(x0, x1, 6), yTicks, sx, sy, "step");
  const color = COLORS[0];
  if (pts.length === 1) {
    svg.append(s("circle", { cx: sx(pts[0][0]), cy: sy(pts[0][1]), r: 4, fill: color }));
  } else {
    const d = pts.map((p, j) => `${j ? "L" : "M"}${sx(p[0]).toFixed(1)},${sy(p[1]).toFixed(1)}`).join("");
    svg.append(s("path", { d, class: "curve", stroke: color }));
  }
  const all = series.get(name);
  const last = all[all.length - 1];
  const key = h("span.key", {}, `${name} ${fmtNum(last[1])} at step ${fmtNum(last[0])}`);
  key.style.setProperty("--key", color);
  const legend = h("div.legend", {}, key, finalKeys);
  return h("figure.chart-box", { dataset: { chart: "curve", metric: name, points: String(all.length) } }, head, svg, legend);
}
