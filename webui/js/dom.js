// Tiny DOM helpers and formatters. Text always goes in as text nodes, never as HTML.

const SVG_NS = "http://www.w3.org/2000/svg"; // a namespace name, never fetched

/** h("div.card#id", {onclick, class, ...}, child, ...) — children: nodes, strings, arrays, null. */
export function h(spec, attrs, ...children) {
  const [, tag, rest] = spec.match(/^([a-z0-9-]+)(.*)$/i);
  const el = document.createElement(tag);
  for (const part of rest.match(/[.#][^.#]+/g) || []) {
    if (part[0] === ".") el.classList.add(part.slice(1));
    else el.id = part.slice(1);
  }
  setAttrs(el, attrs);
  append(el, children);
  return el;
}

/** An SVG element with attributes. */
export function s(tag, attrs, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== null && v !== undefined && v !== false) el.setAttribute(k, String(v));
  }
  append(el, children);
  return el;
}

function setAttrs(el, attrs) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2), v);
    else if (k === "class") el.className += (el.className ? " " : "") + v;
    else if (k === "dataset") Object.assign(el.dataset, v);
    else if (k === "value" || k === "checked" || k === "selected") el[k] = v;
    else el.setAttribute(k, v === true ? "" : String(v));
  }
}

export function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

export function clear(el) {
  while (el.firstChild) el.removeChild(el.firstChild);
  return el;
}

export function replace(el, ...children) {
  clear(el);
  return append(el, children);
}

// -- formatting ------------------------------------------------------------------------------

export function fmtNum(value, digits = 4) {
  if (value === null || value === undefined || Number.isNaN(value)) return "–";
  if (typeof value !== "number") return String(value);
  if (Number.isInteger(value) && Math.abs(value) < 1e6) return String(value);
  const abs = Math.abs(value);
  if (abs !== 0 && (abs < 1e-3 || abs >= 1e6)) return value.toExponential(2);
  return Number(value.toPrecision(digits)).toString();
}

export function fmtValue(value) {
  if (typeof value === "number") return fmtNum(value);
  if (value === null || value === undefined) return "–";
  if (typeof value === "object") return JSON.stringify(value);
  return String(value);
}

export function fmtDuration(seconds) {
  if (seconds === null || seconds === undefined || Number.isNaN(seconds)) return "–";
  const s = Math.max(0, Math.round(seconds));
  const hh = Math.floor(s / 3600);
  const mm = Math.floor((s % 3600) / 60);
  const ss = s % 60;
  if (hh) return `${hh}h ${String(mm).padStart(2, "0")}m`;
  if (mm) return `${mm}m ${String(ss).padStart(2, "0")}s`;
  return `${ss}s`;
}

export function fmtTime(ts) {
  if (!ts) return "–";
  const d = new Date(ts * 1000);
  return d.toLocaleString(undefined, { dateStyle: "short", timeStyle: "medium" });
}

/** "−16.9 %" for an improvement of a metric towards its goal, signed as the metric moved. */
export function fmtChange(baseline, value) {
  if (baseline === null || baseline === undefined || value === null || value === undefined) return "";
  if (baseline === 0) return "";
  const pct = ((value - baseline) / Math.abs(baseline)) * 100;
  const sign = pct > 0 ? "+" : pct < 0 ? "−" : "±";
  return `${sign}${Math.abs(pct).toFixed(1)} %`;
}

export function better(a, b, goal) {
  return goal === "max" ? a > b : a < b;
}

/** Status → badge class. */
export function badge(status, text) {
  const kind =
    {
      running: "run",
      pending: "run",
      stopping: "run",
      completed: "ok",
      finished: "ok",
      kept: "ok",
      baseline: "info",
      neutral: "muted",
      completed_without_metrics: "warn",
      stopped: "muted",
      timed_out: "bad",
      failed: "bad",
      lost: "bad",
      rejected: "bad",
    }[status] || "muted";
  return h(`span.badge.badge-${kind}`, {}, text || (status || "–").replaceAll("_", " "));
}

export function emptyState(title, ...body) {
  return h("div.empty", {}, h("strong", {}, title), ...body.map((b) => h("p", {}, b)));
}
