// Plain SVG charts: the final metric per round (with the baseline and the best-so-far
// step line) and a round's live metric curves. Drawn from scratch on each update.

import { better, fmtNum, h, s } from "./dom.js";

const W = 560;
const H = 240;
const PAD = { left: 58, right: 16, top: 14, bottom: 34 };
const COLORS = ["#2563eb", "#d97706", "#7c3aed", "#059669", "#db2777"];
const VERDICT_CLASS = { kept: "pt-kept", rejected: "pt-rejected", baseline: "pt-baseline" };

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

function frame(title, xTicks, yTicks, sx, sy, xLabel) {
  const g = s("g", { class: "axes" });
  for (const t of yTicks) {
    g.append(
      s("line", { x1: PAD.left, x2: W - PAD.right, y1: sy(t), y2: sy(t), class: "grid" }),
      s("text", { x: PAD.left - 6, y: sy(t) + 4, "text-anchor": "end" }, fmtNum(t, 3)),
    );
  }
  for (const t of xTicks) {
    g.append(s("text", { x: sx(t), y: H - PAD.bottom + 16, "text-anchor": "middle" }, fmtNum(t, 4)));
  }
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
  const span = y1 - y0 || Math.abs(y1) * 0.1 || 1;
  y0 -= span * padY;
  y1 += span * padY;
  let yTicks = niceTicks(y0, y1, 4);
  if (yTicks.length > 1) {
    // widen to whole tick steps so every point sits between two labelled lines
    const step = yTicks[1] - yTicks[0];
    y0 = Math.floor(y0 / step + 1e-9) * step;
    y1 = Math.ceil(y1 / step - 1e-9) * step;
    yTicks = niceTicks(y0, y1, Math.max(1, Math.round((y1 - y0) / step)));
  }
  const sx = (x) => PAD.left + ((x - x0) / (x1 - x0)) * (W - PAD.left - PAD.right);
  const sy = (y) => H - PAD.bottom - ((y - y0) / (y1 - y0)) * (H - PAD.top - PAD.bottom);
  return { sx, sy, yTicks, x0, x1 };
}

/**
 * Final metric per round. ``rounds``: [{index, metric, verdict, status}], ``baseline``:
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
  if (typeof baseline === "number") {
    svg.append(
      s("line", { x1: PAD.left, x2: W - PAD.right, y1: sy(baseline), y2: sy(baseline), class: "baseline" }),
      s("text", { x: W - PAD.right - 4, y: sy(baseline) - 5, "text-anchor": "end", class: "baseline-label" }, "baseline"),
    );
  }
  // best so far: a step line through the running best
  let best = null;
  const d = [];
  for (const r of scored) {
    const x = sx(r.index).toFixed(1);
    if (best === null) {
      best = r.metric;
      d.push(`M${x},${sy(best).toFixed(1)}`);
    } else {
      d.push(`H${x}`);
      if (better(r.metric, best, goal)) {
        best = r.metric;
        d.push(`V${sy(best).toFixed(1)}`);
      }
    }
  }
  d.push(`H${sx(xs[1]).toFixed(1)}`);
  svg.append(s("path", { d: d.join(" "), class: "best-line" }));
  for (const r of scored) {
    const dot = s("circle", {
      cx: sx(r.index),
      cy: sy(r.metric),
      r: 5,
      class: `pt ${VERDICT_CLASS[r.verdict] || "pt-other"}`,
    });
    dot.append(s("title", {}, `round ${r.index}: ${fmtNum(r.metric)}${r.verdict ? ` (${r.verdict})` : ""}`));
    svg.append(dot);
  }
  const legend = h(
    "div.legend",
    {},
    h("span.key.key-best", {}, "best so far"),
    h("span.key.key-baseline", {}, "baseline"),
    h("span.key.key-kept", {}, "kept"),
    h("span.key.key-rejected", {}, "rejected"),
  );
  return h("figure.chart-box", { dataset: { chart: "rounds", points: String(scored.length) } }, svg, legend);
}

function thin(points, limit = 800) {
  if (points.length <= limit) return points;
  const stride = Math.ceil(points.length / limit);
  const out = points.filter((_, i) => i % stride === 0);
  if (out[out.length - 1] !== points[points.length - 1]) out.push(points[points.length - 1]);
  return out;
}

/** Live metric curves of one round: ``series`` is Map(name -> [[x, y], ...]). */
export function curveChart({ series, finals = new Map(), title }) {
  const names = [...series.keys()].filter((n) => series.get(n).length);
  const finalKeys = [...finals].map(([name, value]) => h("span.key.key-final", {}, `${name} ${fmtNum(value)} (final)`));
  if (!names.length) {
    return h(
      "div.chart-empty",
      {},
      h("strong", {}, title),
      h("p", {}, finals.size ? "No metric with steps in this round." : "No metric points yet."),
      finalKeys.length ? h("div.legend", {}, finalKeys) : null,
    );
  }
  const all = names.flatMap((n) => series.get(n));
  const { sx, sy, yTicks, x0, x1 } = scales(
    all.map((p) => p[0]),
    all.map((p) => p[1]),
  );
  const svg = frame(title, niceTicks(x0, x1, 6), yTicks, sx, sy, "step");
  names.forEach((name, i) => {
    const pts = thin(series.get(name));
    const color = COLORS[i % COLORS.length];
    if (pts.length === 1) {
      svg.append(s("circle", { cx: sx(pts[0][0]), cy: sy(pts[0][1]), r: 4, fill: color }));
    } else {
      const d = pts.map((p, j) => `${j ? "L" : "M"}${sx(p[0]).toFixed(1)},${sy(p[1]).toFixed(1)}`).join("");
      svg.append(s("path", { d, class: "curve", stroke: color }));
    }
  });
  const legend = h(
    "div.legend",
    {},
    names.map((name, i) => {
      const last = series.get(name)[series.get(name).length - 1];
      const key = h("span.key", {}, `${name} ${fmtNum(last[1])}`);
      key.style.setProperty("--key", COLORS[i % COLORS.length]);
      return key;
    }),
    finalKeys,
  );
  return h("figure.chart-box", { dataset: { chart: "curve", points: String(all.length) } }, svg, legend);
}
