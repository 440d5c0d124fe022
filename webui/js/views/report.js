// The session report: written now by session_report, shown as simple Markdown, with
// the downloads beside it.

import { call, fileUrl } from "../api.js";
import { h, replace } from "../dom.js";
import { errorBox } from "./common.js";

export function openReport(ctx, project, session) {
  const body = h("div.report.dialog-body", {}, h("p.muted", {}, "Writing the report…"));
  const dialog = h(
    "dialog.report-dialog",
    { "aria-label": `${session} report` },
    h(
      "div.dialog-head",
      {},
      h("h2", {}, `${session} report`),
      h("a.btn.small", { href: fileUrl(project, session, "report.md"), download: "" }, "Download report.md"),
      h("button.btn.small", { type: "button", onclick: () => dialog.close() }, "Close"),
    ),
    body,
  );
  dialog.addEventListener("close", () => dialog.remove());
  document.body.append(dialog);
  dialog.showModal();
  call("session_report", { project_root: project, session })
    .then((res) => replace(body, renderMarkdown(res.markdown, (src) => fileUrl(project, session, src, true))))
    .catch((err) => replace(body, errorBox(err, "No report")));
}

/** A small, safe Markdown renderer: headings, tables, lists, code, images, emphasis. */
export function renderMarkdown(text, resolve) {
  const out = [];
  const lines = text.split("\n");
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    if (line.startsWith("```")) {
      const code = [];
      for (i++; i < lines.length && !lines[i].startsWith("```"); i++) code.push(lines[i]);
      out.push(h("pre", {}, code.join("\n")));
      i++;
    } else if (/^#{1,6} /.test(line)) {
      const level = Math.min(6, line.match(/^#+/)[0].length + 1);
      out.push(h(`h${level}`, {}, inline(line.replace(/^#+ /, ""), resolve)));
      i++;
    } else if (line.startsWith("|")) {
      const rows = [];
      for (; i < lines.length && lines[i].startsWith("|"); i++) rows.push(lines[i]);
      out.push(table(rows, resolve));
    } else if (/^\s*[-*] /.test(line)) {
      const items = [];
      for (; i < lines.length && /^\s*[-*] /.test(lines[i]); i++) items.push(lines[i].replace(/^\s*[-*] /, ""));
      out.push(h("ul", {}, items.map((t) => h("li", {}, inline(t, resolve)))));
    } else if (!line.trim()) {
      i++;
    } else {
      const para = [];
      for (; i < lines.length && lines[i].trim() && !/^(#|\||```|\s*[-*] )/.test(lines[i]); i++) para.push(lines[i]);
      out.push(h("p", {}, inline(para.join(" "), resolve)));
    }
  }
  return out;
}

function cells(row) {
  return row.replace(/^\|/, "").replace(/\|\s*$/, "").split(/(?<!\\)\|/).map((c) => c.trim().replaceAll("\\|", "|"));
}

function table(rows, resolve) {
  const [head, sep, ...body] = rows;
  const hasHead = sep && /^\|[\s:|-]+\|?$/.test(sep);
  const bodyRows = hasHead ? body : rows.slice(1);
  return h(
    "div.table-wrap",
    {},
    h(
      "table",
      {},
      h("thead", {}, h("tr", {}, cells(head).map((c) => h("th", {}, inline(c, resolve))))),
      h("tbody", {}, bodyRows.map((r) => h("tr", {}, cells(r).map((c) => h("td", {}, inline(c, resolve)))))),
    ),
  );
}

/** `code`, **bold**, ![alt](relative.svg) — everything else stays text. */
function inline(text, resolve) {
  const parts = [];
  const re = /`([^`]+)`|\*\*([^*]+)\*\*|!\[([^\]]*)\]\(([^)\s]+)\)/g;
  let at = 0;
  for (let m = re.exec(text); m; m = re.exec(text)) {
    parts.push(text.slice(at, m.index));
    if (m[1] !== undefined) parts.push(h("code", {}, m[1]));
    else if (m[2] !== undefined) parts.push(h("strong", {}, m[2]));
    else if (/^[\w.-]+$/.test(m[4])) parts.push(h("img", { src: resolve(m[4]), alt: m[3] || m[4], class: "report-img" }));
    else parts.push(m[0]);
    at = re.lastIndex;
  }
  parts.push(text.slice(at));
  return parts;
}
