// The session's analysis views: parameter importance (Optuna's fANOVA), parallel
// coordinates, metric-vs-parameter slices and two rounds (or two sessions) side by side.
// All drawn from one registry method, session_analysis, asked again as rounds finish.
// report.md carries the same views as SVG files (trainee/store/report_views.py).

import { call } from "../api.js";
import { badge, fmtNum, fmtValue, h, replace, s } from "../dom.js";
import { errorBox } from "./common.js";

const TABS = ["Importance", "Parallel coordinates", "Slices", "Compare"];
const GOOD = [31, 111, 209]; // best metric: blue
const BAD = [230, 140, 40]; // worst metric: orange
const REFRESH_MS = 400;

/** The panel's stylesheet, a file of its own (the page's CSP allows no inline style). */
function addStyle() {
  if (document.getElementById("analysis-style")) return;
  document.head.append(h("link#analysis-style", { rel: "stylesheet", href: "/static/css/analysis.css" }));
}

/** The Analysis panel of a session view; ``refreshSoon()`` when a round finished. */
export class AnalysisPanel {
  constructor(ctx, project, session) {
    addStyle();
    this.ctx = ctx;
    this.project = project;
    this.session = session;
    this.data = null;
    this.tab = TABS[0];
    this.pick = { left: null, rightSession: session, right: null };
    this.sessions = null;
    this.body = h("div.tab-panel", { role: "tabpanel" });
    this.buttons = TABS.map((t) =>
      h("button.tab", { type: "button", role: "tab", "aria-selected": String(t === this.tab), onclick: () => this.select(t) }, t),
    );
    this.el = h(
      "section.panel.analysis",
      { "aria-label": "analysis" },
      h("h2", {}, "Analysis"),
      h("div.tabs", { role: "tablist" }, this.buttons),
      this.body,
    );
    this.load();
  }

  destroy() {
    clearTimeout(this.timer);
    this.gone = true;
  }

  refreshSoon() {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.load(), REFRESH_MS);
  }

  select(tab) {
    this.tab = tab;
    this.buttons.forEach((b, i) => b.setAttribute("aria-selected", String(TABS[i] === tab)));
    if (tab === "Compare") this.loadSessions();
    this.render();
  }

  async loadSessions() {
    try {
      const res = await call("sessions_list", { project_root: this.project });
      this.sessions = res.sessions.map((x) => x.id);
    } catch {
      this.sessions = [this.session];
    }
    this.render();
  }

  async load() {
    const params = { project_root: this.project, session: this.session, compare: true };
    if (this.pick.left) params.left_round = this.pick.left;
    if (this.pick.right) params.right_round = this.pick.right;
    if (this.pick.rightSession !== this.session) params.right_session = this.pick.rightSession;
    try {
      const data = await call("session_analysis", params);
      if (this.gone) return;
      this.data = data;
      if (this.pick.rightSession !== this.session) {
        const other = await call("loop_get", { project_root: this.project, session: this.pick.rightSession });
        this.otherRounds = other.rounds.map((r) => r.index);
      } else this.otherRounds = null;
      this.error = null;
    } catch (err) {
      this.error = err;
    }
    if (!this.gone) this.render();
  }

  render() {
    if (this.error && !this.data) {
      replace(this.body, errorBox(this.error, "No analysis"));
      return;
    }
    if (!this.data) {
      replace(this.body, h("p.muted", {}, "Loading the analysis…"));
      return;
    }
    const a = this.data;
    this.el.dataset.rounds = String(a.rounds.length);
    const view = {
      Importance: () => importanceView(a),
      "Parallel coordinates": () => parallelView(a),
      Slices: () => slicesView(a),
      Compare: () => this.compareView(a),
    }[this.tab]();
    replace(this.body, this.error ? errorBox(this.error, "Cannot update the analysis") : null, view);
  }

  compareView(a) {
    const rounds = a.rounds.map((r) => r.index);
    const c = a.comparison;
    const option = (value, label, selected) => h("option", { value: String(value), selected }, label);
    const leftSel = h(
      "select",
      { "aria-label": "Left round", onchange: (e) => this.choose({ left: Number(e.target.value) }) },
      rounds.map((i) => option(i, `round ${i}`, c && c.left.round === i)),
    );
    const sessions = this.sessions || [this.session];
    const sessionSel = h(
      "select",
      { "aria-label": "Right session", onchange: (e) => this.choose({ rightSession: e.target.value, right: null }) },
      sessions.map((id) => option(id, id, id === this.pick.rightSession)),
    );
    const rightRounds = this.otherRounds || rounds;
    const rightSel = h(
      "select",
      { "aria-label": "Right round", onchange: (e) => this.choose({ right: Number(e.target.value) }) },
      rightRounds.map((i) => option(i, `round ${i}`, c && c.right.round === i)),
    );
    const pick = h(
      "div.compare-pick",
      {},
      h("label", {}, `${this.session}`, leftSel),
      h("span", {}, "against"),
      h("label", {}, "session", sessionSel),
      h("label", {}, "round", rightSel),
    );
    if (!c) return [pick, h("p.muted", {}, "No round to compare yet.")];
    const names = [...new Set([...Object.keys(c.left.curves), ...Object.keys(c.right.curves)])].sort();
    const shown = names.includes(this.pick.curve) ? this.pick.curve : c.curve_metric;
    const curveSel = names.length
      ? h(
          "label.curve-pick",
          {},
          "Curves of ",
          h(
            "select",
            { "aria-label": "Curve metric", onchange: (e) => ((this.pick.curve = e.target.value), this.render()) },
            names.map((n) => option(n, n, n === shown)),
          ),
        )
      : null;
    return [pick, compareTable(a, c), curveSel, curvesChart(c, shown)];
  }

  choose(change) {
    Object.assign(this.pick, change);
    this.load();
  }
}

// -- scales ------------------------------------------------------------------------------

const numeric = (v) => typeof v === "number" && Number.isFinite(v);

/** [position 0..1 (null: off the axis), ticks [[pos, label]]] as report_views.axis_scale. */
export function axisScale(t, values) {
  const present = values.filter((v) => v !== null && v !== undefined);
  if (t.choices || !present.every(numeric)) {
    const labels = (t.choices || []).map(String);
    for (const v of present) if (!labels.includes(String(v))) labels.push(String(v));
    const n = Math.max(1, labels.length - 1);
    const spot = new Map(labels.map((l, i) => [l, labels.length > 1 ? i / n : 0.5]));
    const pos = (v) => (v === null || v === undefined || !spot.has(String(v)) ? null : spot.get(String(v)));
    return [pos, [...spot].map(([l, p]) => [p, l])];
  }
  const seen = present.map(Number);
  let lo = t.min_value ?? Math.min(...seen);
  let hi = t.max_value ?? Math.max(...seen);
  lo = Math.min(lo, ...seen);
  hi = Math.max(hi, ...seen);
  const log = t.log && lo > 0;
  const f = log ? Math.log10 : (x) => x;
  const [a, b] = [f(lo), f(hi)];
  const pos = (v) => (!numeric(v) || (log && v <= 0) ? null : b === a ? 0.5 : (f(v) - a) / (b - a));
  let ticks;
  if (log) {
    ticks = [];
    for (let e = Math.ceil(a - 1e-9); e <= Math.floor(b + 1e-9); e++) ticks.push(10 ** e);
    if (ticks.length < 2) ticks = [lo, hi];
  } else ticks = b === a ? [lo] : [0, 1, 2, 3, 4].map((i) => lo + ((hi - lo) * i) / 4);
  return [pos, ticks.map((v) => [pos(v), fmtNum(v, 3)]).filter(([p]) => p !== null)];
}

function colorOf(a) {
  const values = a.rounds.map((r) => r.metric).filter(numeric);
  const lo = Math.min(...values);
  const hi = Math.max(...values);
  return (v) => {
    if (!numeric(v)) return "#bbbbbb";
    let t = hi === lo ? 0.5 : (v - lo) / (hi - lo);
    if (a.goal === "max") t = 1 - t;
    return `rgb(${GOOD.map((g, i) => Math.round(g + (BAD[i] - g) * t)).join(",")})`;
  };
}

function legend(a) {
  const values = a.rounds.map((r) => r.metric).filter(numeric);
  if (!values.length) return null;
  const color = colorOf(a);
  const [best, worst] = a.goal === "max" ? [Math.max(...values), Math.min(...values)] : [Math.min(...values), Math.max(...values)];
  const sw = (c) => s("svg", { class: "swatch", viewBox: "0 0 12 12", width: 12, height: 12 }, s("rect", { width: 12, height: 12, fill: c }));
  return h(
    "div.legend",
    {},
    h("span", {}, sw(color(best)), `best ${a.metric} ${fmtNum(best)}`),
    h("span", {}, sw(color(worst)), `worst ${fmtNum(worst)}`),
    h("span", {}, sw("#111"), `best round ${a.best_round ?? "–"} (thick)`),
    h("span", {}, `baseline round ${a.baseline_round ?? "–"} (dashed)`),
  );
}

const label = (a, r) => `round ${r.index}: ${a.metric} = ${r.metric === null ? r.status : fmtNum(r.metric)}`;

// -- views --------------------------------------------------------------------------------

function importanceView(a) {
  const imp = a.importance;
  if (!imp.available) return h("p.muted.importance-note", {}, `Parameter importance: ${imp.note}`);
  const items = Object.entries(imp.values).sort((x, y) => y[1] - x[1]);
  const W = 720;
  const left = 160;
  const top = Math.max(...items.map(([, v]) => v)) || 1;
  const svg = s("svg", { viewBox: `0 0 ${W} ${items.length * 30 + 16}`, role: "img", "aria-label": "parameter importance", "data-view": "importance" });
  items.forEach(([name, v], i) => {
    const y = 8 + i * 30;
    const w = ((W - left - 80) * v) / top;
    svg.append(
      s("text", { x: left - 8, y: y + 15, "text-anchor": "end" }, name),
      s("rect", { x: left, y, width: w, height: 22, fill: "#1f6fd1", "data-param": name }, s("title", {}, `${name}: ${v.toFixed(3)}`)),
      s("text", { x: left + w + 6, y: y + 15 }, `${Math.round(v * 100)} %`),
    );
  });
  const n = a.rounds.filter((r) => numeric(r.metric)).length;
  return [svg, h("p.muted", {}, `Share of the variation in ${a.metric} over ${n} completed rounds (Optuna ${imp.evaluator}).`)];
}

function parallelView(a) {
  if (!a.rounds.length || !a.tunables.length) return h("p.muted", {}, "No round over the tunables yet.");
  const axes = [...a.tunables, { name: a.metric, type: "float", log: false, min_value: null, max_value: null, choices: null }];
  const W = Math.max(720, 150 * axes.length);
  const H = 360;
  const [left, right, top, bottom] = [60, 80, 34, 24];
  const ph = H - top - bottom;
  const gap = (W - left - right) / Math.max(1, axes.length - 1);
  const last = axes.length - 1;
  const value = (r, i) => (i === last ? r.metric : r.params[axes[i].name]);
  const scales = axes.map((t, i) => axisScale(t, a.rounds.map((r) => value(r, i))));
  const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": "parallel coordinates", "data-view": "parallel" });
  axes.forEach((t, i) => {
    const x = left + gap * i;
    svg.append(
      s("line", { x1: x, x2: x, y1: top, y2: top + ph, stroke: "#444" }),
      s("text", { x, y: top - 12, "text-anchor": "middle", "font-weight": "bold", class: "axis-name" }, t.name + (t.log ? " (log)" : "")),
    );
    for (const [p, l] of scales[i][1]) {
      const y = top + (1 - p) * ph;
      svg.append(s("line", { x1: x - 3, x2: x + 3, y1: y, y2: y, stroke: "#444" }), s("text", { x: x + 6, y: y + 4, fill: "#5b6472", "font-size": 10 }, l));
    }
  });
  const color = colorOf(a);
  const order = [...a.rounds].sort((x, y) => (x.index === a.best_round) - (y.index === a.best_round) || (x.index === a.baseline_round) - (y.index === a.baseline_round));
  for (const r of order) {
    const pts = [];
    axes.forEach((t, i) => {
      const p = scales[i][0](value(r, i));
      if (p !== null) pts.push(`${(left + gap * i).toFixed(1)},${(top + (1 - p) * ph).toFixed(1)}`);
    });
    if (!pts.length) continue;
    const best = r.index === a.best_round;
    const base = r.index === a.baseline_round;
    svg.append(
      s(
        "polyline",
        {
          points: pts.join(" "),
          fill: "none",
          stroke: best ? "#111" : color(r.metric),
          "stroke-width": best ? 3.5 : base ? 2 : 1.6,
          "stroke-dasharray": base && !best ? "6 3" : null,
          "stroke-opacity": best || base ? 1 : 0.85,
          class: `round${best ? " best" : ""}${base ? " baseline" : ""}`,
          "data-round": r.index,
        },
        s("title", {}, label(a, r)),
      ),
    );
  }
  return [legend(a), svg];
}

function slicesView(a) {
  const scored = a.rounds.filter((r) => numeric(r.metric));
  if (!scored.length || !a.tunables.length) return h("p.muted", {}, "No round with a metric yet.");
  const [W, H] = [240, 190];
  const [px, py, pw, ph] = [50, 10, W - 62, H - 44];
  const [mpos, mticks] = axisScale({ name: a.metric, log: false, choices: null, min_value: null, max_value: null }, scored.map((r) => r.metric));
  const color = colorOf(a);
  const figures = a.tunables.map((t) => {
    const [pos, ticks] = axisScale(t, scored.map((r) => r.params[t.name]));
    const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": `${a.metric} against ${t.name}` });
    svg.append(s("rect", { x: px, y: py, width: pw, height: ph, fill: "none", stroke: "#999" }));
    const step = Math.max(1, Math.ceil(ticks.length / 5));
    ticks.filter((_, i) => i % step === 0).forEach(([p, l]) => svg.append(s("text", { x: px + p * pw, y: py + ph + 14, "text-anchor": "middle", fill: "#5b6472", "font-size": 10 }, l)));
    mticks.filter((_, i) => i % 2 === 0).forEach(([p, l]) => svg.append(s("text", { x: px - 4, y: py + (1 - p) * ph + 3, "text-anchor": "end", fill: "#5b6472", "font-size": 10 }, l)));
    for (const r of scored) {
      const x = pos(r.params[t.name]);
      const y = mpos(r.metric);
      if (x === null || y === null) continue;
      const ring = r.index === a.best_round ? "#111" : r.index === a.baseline_round ? "#888" : null;
      svg.append(
        s(
          "circle",
          { cx: px + x * pw, cy: py + (1 - y) * ph, r: 4.5, fill: color(r.metric), stroke: ring, "stroke-width": ring ? 2 : null, "data-round": r.index },
          s("title", {}, `${label(a, r)}, ${t.name} = ${fmtValue(r.params[t.name])}`),
        ),
      );
    }
    svg.append(s("text", { x: px + pw / 2, y: H - 4, "text-anchor": "middle" }, t.name + (t.log ? " (log)" : "")));
    return h("figure.slice", { dataset: { param: t.name, points: String(svg.querySelectorAll("circle").length) } }, svg);
  });
  return [h("p.muted", {}, `y: ${a.metric}; black ring: best round, grey ring: baseline.`), h("div.slices", {}, figures)];
}

function side(c, r) {
  return `${r.session === c.left.session && r.session === c.right.session ? "" : `${r.session} · `}round ${r.round}`;
}

function compareTable(a, c) {
  const row = (name, l, r, changed = false) => h(`tr${changed ? ".changed" : ""}`, { dataset: { name } }, h("th", {}, name), h("td", {}, l), h("td", {}, r));
  return h(
    "table.compare",
    { "aria-label": "two rounds compared" },
    h("thead", {}, h("tr", {}, h("th", {}, ""), h("th", {}, side(c, c.left)), h("th", {}, side(c, c.right)))),
    h(
      "tbody",
      {},
      row(a.metric, fmtNum(c.left.metric), fmtNum(c.right.metric)),
      row("status", badge(c.left.status), badge(c.right.status)),
      row("verdict", c.left.verdict ? badge(c.left.verdict) : "–", c.right.verdict ? badge(c.right.verdict) : "–"),
      row("verdict reason", c.left.verdict_reason || "–", c.right.verdict_reason || "–"),
      row("hypothesis", c.left.hypothesis || "–", c.right.hypothesis || "–"),
      c.params.map((d) => row(d.name, fmtValue(d.left), fmtValue(d.right), d.changed)),
    ),
  );
}

function curvesChart(c, name) {
  const left = c.left.curves[name] || [];
  const right = c.right.curves[name] || [];
  const all = [...left, ...right];
  if (!all.length) return h("p.muted", {}, `No ${name} curve recorded for these rounds.`);
  const [W, H] = [720, 260];
  const [pl, pr, top, bottom] = [60, 16, 24, 34];
  const xs = all.map(([x]) => x);
  const ys = all.map(([, y]) => y);
  let [x0, x1, y0, y1] = [Math.min(...xs), Math.max(...xs), Math.min(...ys), Math.max(...ys)];
  if (x0 === x1) [x0, x1] = [x0 - 1, x1 + 1];
  if (y0 === y1) [y0, y1] = [y0 - (Math.abs(y0) * 0.1 || 1), y1 + (Math.abs(y1) * 0.1 || 1)];
  const sx = (x) => pl + ((x - x0) / (x1 - x0)) * (W - pl - pr);
  const sy = (y) => top + ((y1 - y) / (y1 - y0)) * (H - top - bottom);
  const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": `${name} curves overlaid`, "data-view": "curves", "data-metric": name });
  svg.append(s("line", { x1: pl, x2: W - pr, y1: H - bottom, y2: H - bottom, stroke: "#444" }), s("line", { x1: pl, x2: pl, y1: top, y2: H - bottom, stroke: "#444" }));
  for (let i = 0; i < 5; i++) {
    const y = y0 + ((y1 - y0) * i) / 4;
    const x = x0 + ((x1 - x0) * i) / 4;
    svg.append(
      s("text", { x: pl - 6, y: sy(y) + 4, "text-anchor": "end", "font-size": 10, fill: "#5b6472" }, fmtNum(y, 3)),
      s("text", { x: sx(x), y: H - bottom + 14, "text-anchor": "middle", "font-size": 10, fill: "#5b6472" }, fmtNum(x, 4)),
    );
  }
  svg.append(s("text", { x: W - pr, y: H - 4, "text-anchor": "end" }, "step"));
  [
    [c.left, left, "#1f6fd1"],
    [c.right, right, "#e68c28"],
  ].forEach(([r, curve, color], k) => {
    if (curve.length === 1) {
      const [[x, y]] = curve;
      svg.append(s("circle", { cx: sx(x), cy: sy(y), r: 4, fill: color, class: "curve", "data-side": k ? "right" : "left" }));
    } else if (curve.length) {
      svg.append(
        s("polyline", { points: curve.map(([x, y]) => `${sx(x).toFixed(1)},${sy(y).toFixed(1)}`).join(" "), fill: "none", stroke: color, "stroke-width": 2, class: "curve", "data-side": k ? "right" : "left" }),
      );
    }
    svg.append(s("line", { x1: pl + 10 + k * 260, x2: pl + 32 + k * 260, y1: 10, y2: 10, stroke: color, "stroke-width": 2 }), s("text", { x: pl + 38 + k * 260, y: 14 }, `${side(c, r)} ${name}`));
  });
  return h("figure.curves", {}, svg);
}
