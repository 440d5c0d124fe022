// Tiny DOM helpers and formatters. Text always goes in as text nodes, never as HTML.

import { statusKind } from "./states.js";

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

/** A number with up to ``digits`` significant digits (6: metric values that decide keep
 * their precision, 0.21996 not 0.22), trailing zeros dropped. */
export function fmtNum(value, digits = 6) {
  if (value === null || value === undefined || Number.isNaN(value)) return "–";
  if (typeof value !== "number") return String(value);
  if (Number.isInteger(value) && Math.abs(value) < 1e6) return String(value);
  const abs = Math.abs(value);
  const rounded = Number(value.toPrecision(digits));
  if (abs !== 0 && (abs < 1e-3 || abs >= 1e6)) return rounded.toExponential();
  return rounded.toString();
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

// A verdict's badge kind (verdicts are the judge's words, not statuses).
const VERDICT_KIND = { kept: "ok", baseline: "info", neutral: "muted", rejected: "bad" };

/** A status's or a verdict's badge. */
export function badge(status, text) {
  const kind = statusKind(status) || VERDICT_KIND[status] || "muted";
  return tag(kind, text || (status || "–").replaceAll("_", " "));
}

/** A badge of a kind: run, ok, info, warn, bad, muted. */
export function tag(kind, text) {
  return h(`span.badge.badge-${kind}`, {}, text);
}

export function emptyState(title, ...body) {
  return h("div.empty", {}, h("strong", {}, title), ...body.map((b) => h("p", {}, b)));
}
