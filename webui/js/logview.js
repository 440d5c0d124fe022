// A log view that stays fast under a flood: it keeps the last ``maxLines`` lines (in
// memory and in the DOM), follows the end unless paused or scrolled up, and filters
// by a search term.

import { h } from "./dom.js";

export class LogView {
  constructor({ maxLines = 2000, label = "log", live = true } = {}) {
    this.maxLines = maxLines;
    this.lines = []; // {text, err}
    this.paused = false;
    this.follow = true;
    this.term = "";
    this.pending = 0;
    this.skipped = 0;
    this.total = 0;

    this.body = h("div.log-body", {
      role: "log",
      "aria-live": "off",
      "aria-label": label,
      tabindex: "0",
      onscroll: () => this.onScroll(),
    });
    this.count = h("span.log-count", {}, "");
    this.followBox = h("input", {
      type: "checkbox",
      checked: true,
      onchange: () => this.setFollow(this.followBox.checked),
    });
    this.pauseBtn = h("button.btn.small", { type: "button", onclick: () => this.togglePause() }, "Pause");
    this.search = h("input.log-search", {
      type: "search",
      placeholder: "Search log",
      "aria-label": "Search log",
      oninput: () => this.setTerm(this.search.value),
    });
    const controls = [
      live ? h("label.check", {}, this.followBox, " Follow") : null,
      live ? this.pauseBtn : null,
      this.search,
      this.count,
    ];
    this.toolbar = h("div.log-toolbar", {}, controls);
    this.el = h("div.logview", {}, this.toolbar, this.body);
    this.updateCount();
  }

  /** Add lines ([{stream, text}] or strings); ``skipped`` = lines the server left out. */
  append(lines, skipped = 0) {
    this.skipped += skipped;
    for (const line of lines) {
      this.pushLine(typeof line === "string" ? { text: line } : { text: line.text, err: line.stream === "stderr" });
    }
    this.total += lines.length;
    if (this.paused) {
      this.pending += lines.length;
      this.updateCount();
      return;
    }
    this.renderTail(Math.min(lines.length, this.maxLines));
  }

  /** Replace everything by ``text`` (a chunk of a log file). */
  setText(text, { partialFirst = false } = {}) {
    const rows = text.split("\n");
    if (rows.length && rows[rows.length - 1] === "") rows.pop();
    if (partialFirst && rows.length > 1) rows.shift();
    this.lines = rows.slice(-this.maxLines).map((t) => ({ text: t }));
    this.total = rows.length;
    this.pending = 0;
    this.renderAll();
  }

  /** Put older lines in front (``Load earlier``). */
  prepend(text) {
    const rows = text.split("\n");
    if (rows.length && rows[rows.length - 1] === "") rows.pop();
    // scrolling back: the newest lines make room when the view is full
    this.lines = rows.map((t) => ({ text: t })).concat(this.lines).slice(0, this.maxLines);
    this.total += rows.length;
    const keep = this.follow;
    this.follow = false;
    this.renderAll();
    this.body.scrollTop = 0;
    this.follow = keep;
  }

  clear() {
    this.lines = [];
    this.pending = 0;
    this.skipped = 0;
    this.total = 0;
    this.renderAll();
  }

  pushLine(line) {
    this.lines.push(line);
    if (this.lines.length > this.maxLines) this.lines.splice(0, this.lines.length - this.maxLines);
  }

  matches(line) {
    return !this.term || line.text.toLowerCase().includes(this.term);
  }

  row(line) {
    const el = h(`div.log-line${line.err ? ".err" : ""}`);
    if (!this.term) {
      el.textContent = line.text || "\u00a0";
      return el;
    }
    const lower = line.text.toLowerCase();
    let at = 0;
    for (let i = lower.indexOf(this.term); i >= 0; i = lower.indexOf(this.term, at)) {
      el.append(line.text.slice(at, i), h("mark", {}, line.text.slice(i, i + this.term.length)));
      at = i + this.term.length;
    }
    el.append(line.text.slice(at));
    return el;
  }

  renderAll() {
    const frag = document.createDocumentFragment();
    for (const line of this.lines) if (this.matches(line)) frag.append(this.row(line));
    this.body.replaceChildren(frag);
    this.afterRender();
  }

  renderTail(fresh) {
    const frag = document.createDocumentFragment();
    for (const line of this.lines.slice(-fresh)) if (this.matches(line)) frag.append(this.row(line));
    this.body.append(frag);
    const extra = this.body.childElementCount - this.maxLines;
    for (let i = 0; i < extra; i++) this.body.firstElementChild.remove();
    this.afterRender();
  }

  afterRender() {
    if (this.follow && !this.paused) this.body.scrollTop = this.body.scrollHeight;
    this.updateCount();
  }

  updateCount() {
    const shown = this.body.childElementCount;
    let text = `${this.lines.length.toLocaleString()} lines kept`;
    if (this.term) text = `${shown.toLocaleString()} matching · ` + text;
    if (this.pending) text += ` · ${this.pending.toLocaleString()} new while paused`;
    if (this.skipped) text += ` · ${this.skipped.toLocaleString()} not shown live (in the full log)`;
    this.count.textContent = text;
  }

  onScroll() {
    const atEnd = this.body.scrollHeight - this.body.scrollTop - this.body.clientHeight < 24;
    if (atEnd !== this.follow && !this.paused) this.setFollow(atEnd, false);
  }

  setFollow(on, scroll = true) {
    this.follow = on;
    this.followBox.checked = on;
    if (on && scroll) this.body.scrollTop = this.body.scrollHeight;
  }

  togglePause() {
    this.paused = !this.paused;
    this.pauseBtn.textContent = this.paused ? "Resume" : "Pause";
    this.pauseBtn.setAttribute("aria-pressed", String(this.paused));
    this.el.classList.toggle("paused", this.paused);
    if (!this.paused) {
      this.pending = 0;
      this.renderAll();
    } else {
      this.updateCount();
    }
  }

  setTerm(term) {
    this.term = term.trim().toLowerCase();
    this.renderAll();
  }
}
