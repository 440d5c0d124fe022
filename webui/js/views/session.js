// One session, live: header and summary, the running round (elapsed, activity, its log),
// charts (metric per round, the running round's curves) and the rounds table.
//
// The event stream opens first; its ``ready`` event triggers the snapshot (loop_get),
// and the events that arrive meanwhile are applied on top, so nothing falls between.

import { ApiError, call, EventStream, roundLog, roundMetrics, fileUrl } from "../api.js";
import { curveChart, roundChart } from "../charts.js";
import { badge, emptyState, fmtChange, fmtDuration, fmtNum, fmtTime, fmtValue, h, replace, tag } from "../dom.js";
import { LogView } from "../logview.js";
import { errorBox } from "./common.js";
import { openReport } from "./report.js";
import { AnalysisPanel } from "./analysis.js";
import { openRound } from "./round.js";
import { Kind, Round, Session, roundActive, sessionActive, sessionEnded } from "../states.js";

const LIVE_TAIL_LINES = 500;
const CURVE_MS = 500;
const ACTIVE_SEC = 5;
const QUIET_WARN_SEC = 60;
const NOISE_DIGITS = 3; // a card is narrow: "0.0558 ± 0.0178" (report.md has every digit)
const DOWNLOADS = [
  ["report.md", "Report (Markdown)"],
  ["result_ledger.csv", "Ledger (CSV)"],
  ["result_ledger.jsonl", "Ledger (JSONL)"],
  ["research_state.json", "Research state"],
  ["report_chart.svg", "Chart (SVG)"],
];

export function mountSession(el, ctx, { project, session, round }) {
  if (!project || !session) {
    replace(el, emptyState("No session chosen", "Pick a session in the sidebar."));
    return null;
  }
  ctx.selectProject(project);
  const view = new SessionView(el, ctx, project, session);
  if (round) view.pendingRound = Number(round);
  return {
    unmount: () => view.destroy(),
    update: (query) => {
      const n = Number(query.get("round"));
      if (n) view.showRound(n);
      else view.closeRound();
    },
  };
}

export class SessionView {
  constructor(el, ctx, project, session) {
    this.el = el;
    this.ctx = ctx;
    this.project = project;
    this.sessionId = session;
    this.session = null;
    this.rounds = new Map();
    this.running = false;
    this.info = { name: "metric", goal: "min" };
    this.live = { round: null, loading: false, points: new Map(), lastOutput: null };
    this.decision = null;
    this.loaded = false;
    this.queue = [];
    this.dirty = new Set();
    this.pendingRound = null;
    this.build();
    this.stream = new EventStream(project, session, {
      onReady: () => this.ready(),
      onEvents: (batch) => this.onEvents(batch),
      onState: (state) => ctx.setConnection(state),
      onGap: () => this.reload(),
    });
    this.timer = setInterval(() => this.tick(), 1000);
  }

  destroy() {
    this.stream.close();
    clearInterval(this.timer);
    clearTimeout(this.reloadTimer);
    clearTimeout(this.curveTimer);
    this.analysis.destroy();
    this.closeRound();
  }

  // -- layout --------------------------------------------------------------------------

  build() {
    const name = this.project.split("/").filter(Boolean).pop();
    this.title = h("h1", {}, `${name} · ${this.sessionId}`);
    this.status = h("div.session-status");
    this.actions = h("div.actions");
    this.cards = h("div.cards");
    this.liveCard = h("section.live-card", { "aria-label": "running round" });
    this.roundChartBox = h("div.chart-slot");
    this.curveChartBox = h("div.chart-slot");
    this.logTitle = h("h2", {}, "Log");
    this.log = new LogView({ maxLines: 2000, label: "live round log" });
    this.table = h("div.table-wrap");
    this.errors = h("div");
    this.analysis = new AnalysisPanel(this.ctx, this.project, this.sessionId);
    replace(
      this.el,
      h("div.page-head", {}, h("div", {}, this.title, this.status), this.actions),
      this.errors,
      this.cards,
      this.liveCard,
      h("div.charts", {}, h("section.panel", { "aria-label": "metric per round" }, this.roundChartBox), h("section.panel", { "aria-label": "live metric curve" }, this.curveChartBox)),
      h("section.panel.log-panel", { "aria-label": "log" }, this.logTitle, this.log.el),
      h("section.panel", { "aria-label": "rounds" }, h("h2", {}, "Rounds"), this.table),
      this.analysis.el,
    );
  }

  // -- data ----------------------------------------------------------------------------

  async ready() {
    if (this.loaded || this.loading) return; // a reconnect resumes by id: nothing to reload
    await this.reload();
  }

  async reload() {
    this.loading = true;
    try {
      const at = { project_root: this.project, session: this.sessionId };
      const [state, noise] = await Promise.all([call("loop_get", at), call("session_noise", at).catch(() => null)]);
      this.info = state.metric;
      this.session = state.session;
      this.running = state.running;
      this.rounds = new Map(state.rounds.map((r) => [r.index, r]));
      this.noise = (noise && noise.noise) || null;
      this.errors.replaceChildren();
      this.loaded = true;
      this.analysis.refreshSoon();
      const queued = this.queue;
      this.queue = [];
      const current = state.current_round || state.rounds[state.rounds.length - 1] || null;
      if (current && current.index !== this.live.round) await this.loadLive(current.index, queued);
      this.applyAll(queued);
      this.renderAll();
      if (this.pendingRound) {
        const n = this.pendingRound;
        this.pendingRound = null;
        this.showRound(n);
      }
    } catch (err) {
      this.errors.replaceChildren(errorBox(err, "Cannot load the session"));
    } finally {
      this.loading = false;
    }
  }

  /** The log tail and metric points of a round; queued output of it is already in the tail. */
  async loadLive(index, queued = []) {
    this.live = { round: index, loading: true, points: new Map(), lastOutput: null };
    this.log.clear();
    this.logTitle.textContent = `Log · round ${index}`;
    try {
      const [tail, metrics] = await Promise.all([
        roundLog(this.project, this.sessionId, index, { tail: LIVE_TAIL_LINES }).catch(() => null),
        roundMetrics(this.project, this.sessionId, index).catch(() => ({ points: [] })),
      ]);
      if (tail) this.log.setText(tail.data);
      for (const p of metrics.points) this.addPoint(p);
    } finally {
      this.live.loading = false;
    }
    // output already queued for this round was written before the tail was read
    for (const e of queued) if (e.kind === Kind.OUTPUT && e.data.round === index) e.seen = true;
    this.dirty.add("curve");
  }

  onEvents(batch) {
    if (!this.loaded) {
      this.queue.push(...batch);
      return;
    }
    this.applyAll(batch);
    this.render();
  }

  applyAll(events) {
    for (const e of events) this.apply(e);
  }

  apply(e) {
    const d = e.data || {};
    const round = d.round ? this.rounds.get(d.round) : null;
    switch (e.kind) {
      case Kind.SESSION_STARTED:
        if (this.session) this.session.status = Session.RUNNING;
        this.running = true;
        this.dirty.add("head");
        break;
      case Kind.DECISION:
        this.decision = d;
        this.dirty.add("live");
        this.reloadSoon(); // tokens and cost live in the session record
        break;
      case Kind.ROUND_STARTED:
        this.rounds.set(d.round, {
          ...(round || {}),
          index: d.round,
          status: Round.RUNNING,
          params: d.params,
          diff: d.diff,
          hypothesis: d.hypothesis,
          command: d.command,
          attempt: d.attempt,
          batch: d.batch ?? (round ? round.batch : 0),
          rung: d.rung ?? (round ? round.rung : 0),
          budget: d.budget ?? (round ? round.budget : null),
          promoted_from: d.promoted_from ?? (round ? round.promoted_from : null),
          backend: d.backend || "local",
          job_id: d.job_id ?? null,
          engine_state: "",
          started_at: e.ts,
          ended_at: null,
          primary_metric: null,
          verdict: null,
          verdict_reason: "",
          expected: round ? round.expected : this.decision && this.decision.round === d.round ? this.decision.expected : "",
        });
        if (this.live.round !== d.round || d.attempt) {
          this.live = { round: d.round, loading: false, points: new Map(), lastOutput: null };
          this.log.clear();
          this.logTitle.textContent = `Log · round ${d.round}`;
        }
        this.running = true;
        ["head", "live", "table", "chart", "curve"].forEach((k) => this.dirty.add(k));
        break;
      case Kind.OUTPUT:
        if (d.round === this.live.round && !this.live.loading && !e.seen) {
          this.log.append(d.lines || [], d.skipped || 0);
          this.live.lastOutput = e.ts;
        }
        break;
      case Kind.METRIC:
        if (d.round === this.live.round) {
          for (const p of d.points || []) this.addPoint(p);
          this.dirty.add("curve");
        }
        break;
      case Kind.ACTIVITY:
        if (round) round.last_activity_at = d.last_activity_at;
        break;
      case Kind.ROUND_STATE:
        // a cluster job's state: queued (with the engine's reason), running, ...
        if (round) round.engine_state = d.detail || d.state;
        this.dirty.add("live");
        break;
      case Kind.ROUND_FINISHED:
        this.rounds.set(d.round, {
          ...(round || { index: d.round }),
          status: d.status,
          primary_metric: d.metric,
          finals: d.finals,
          verdict: d.verdict,
          verdict_reason: d.verdict_reason,
          returncode: d.returncode,
          ended_at: e.ts,
          duration_sec: d.duration_sec,
          best_after: d.best_round || null,
          prune_reason: d.status === Round.PRUNED ? d.error : null,
        });
        if (this.noise) this.reloadSoon(); // a seed measured: session_noise has the new spread
        if (this.session && d.best_round) this.session.best_round = d.best_round;
        if (this.session && d.round === 1) this.session.baseline_round = 1;
        ["head", "live", "table", "chart"].forEach((k) => this.dirty.add(k));
        this.analysis.refreshSoon();
        break;
      case Kind.ROUND_READOPTED:
      case Kind.ROUND_RERUN:
        this.reloadSoon();
        break;
      case Kind.SESSION_FINISHED:
        if (this.session) {
          this.session.status = d.status;
          this.session.stop_reason = d.stop_reason;
          this.session.error = d.error;
          this.session.best_round = d.best_round;
          this.session.finished_at = this.session.finished_at || e.ts;
        }
        this.running = false;
        ["head", "live", "table", "chart"].forEach((k) => this.dirty.add(k));
        this.reloadSoon();
        this.analysis.refreshSoon();
        this.ctx.refreshSidebar();
        break;
      default:
        break;
    }
  }

  reloadSoon() {
    clearTimeout(this.reloadTimer);
    this.reloadTimer = setTimeout(() => {
      this.loaded = false;
      this.reload();
    }, 300);
  }

  addPoint([name, value, step, seq]) {
    if (!this.live.points.has(name)) this.live.points.set(name, new Map());
    this.live.points.get(name).set(seq, [step, value]);
  }

  // -- rendering -------------------------------------------------------------------------

  renderAll() {
    ["head", "live", "table", "chart", "curve"].forEach((k) => this.dirty.add(k));
    this.render();
  }

  render() {
    if (!this.session) return;
    if (this.dirty.has("head")) this.renderHead();
    if (this.dirty.has("live")) this.renderLive();
    if (this.dirty.has("table")) this.renderTable();
    if (this.dirty.has("table") && this.roundDialog) this.roundDialog.update(this.rounds.get(this.roundDialog.index));
    if (this.dirty.has("chart")) this.renderRoundChart();
    if (this.dirty.has("curve")) this.renderCurveSoon();
    this.dirty.clear();
  }

  sortedRounds() {
    return [...this.rounds.values()].sort((a, b) => a.index - b.index);
  }

  metricOf(index) {
    const r = index ? this.rounds.get(index) : null;
    return r && typeof r.primary_metric === "number" ? r.primary_metric : null;
  }

  renderHead() {
    const s = this.session;
    const stopping = this.stopping && this.running;
    replace(
      this.status,
      badge(s.status),
      stopping ? h("span.stopping", { role: "status" }, " ", tag("run", "stopping…")) : null,
      s.stop_reason ? h("span.stop-reason", {}, ` stop reason: ${s.stop_reason.replaceAll("_", " ")}`) : null,
      h("span.muted", {}, ` · policy ${s.policy} · ${s.security_mode} · started ${fmtTime(s.created_at)}`),
    );
    const stop = h(
      "button.btn.danger",
      { type: "button", disabled: stopping, "aria-busy": stopping ? "true" : null, onclick: () => this.stop() },
      stopping ? "Stopping…" : "Stop session",
    );
    const downloads = h(
      "details.menu",
      {},
      h("summary.btn", {}, "Downloads"),
      h(
        "div.menu-items",
        {},
        DOWNLOADS.map(([file, label]) => h("a", { href: fileUrl(this.project, this.sessionId, file), download: "" }, label)),
      ),
    );
    replace(
      this.actions,
      this.running ? stop : null,
      h("button.btn", { type: "button", onclick: () => openReport(this.ctx, this.project, this.sessionId) }, "Report"),
      downloads,
    );
    const rounds = this.sortedRounds();
    const best = this.metricOf(s.best_round);
    const baseline = this.metricOf(s.baseline_round || 1);
    const elapsed = (s.finished_at || Date.now() / 1000) - s.created_at;
    this.elapsedEl = h("div.card-value", {}, fmtDuration(elapsed));
    replace(
      this.cards,
      card("Round", h("div.card-value", {}, `${rounds.length} / ${s.max_rounds}`), this.running ? "in progress" : s.status),
      card(
        `Best ${this.info.name}`,
        h("div.card-value", {}, fmtNum(best)),
        best === null ? "no metric yet" : s.best_round === (s.baseline_round || 1) ? "the baseline so far" : `${fmtChange(baseline, best)} vs baseline · round ${s.best_round}`,
      ),
      card("Baseline", h("div.card-value", {}, fmtNum(baseline)), `round 1 · ${this.info.goal === "max" ? "higher" : "lower"} is better`),
      noiseCard(this.noise),
      card("Session time", this.elapsedEl, s.finished_at ? `ended ${fmtTime(s.finished_at)}` : "in progress"),
      card("LLM use", h("div.card-value", {}, `${(s.tokens || 0).toLocaleString()} tok`), s.cost_usd ? `$${s.cost_usd.toFixed(4)}` : "no cost recorded"),
    );
    if (this.stopError) this.errors.replaceChildren(errorBox({ message: this.stopError }, "The session did not stop"));
    else if (s.error) this.errors.replaceChildren(errorBox({ message: s.error }, "Session error"));
  }

  /** Stop the session: pending (button and status) until it has ended, an error if not. */
  async stop() {
    this.stopping = true;
    this.stopError = null;
    this.dirty.add("head");
    this.render();
    let problem = null;
    try {
      const res = await call("loop_stop", { project_root: this.project, session: this.sessionId });
      const after = res.state && res.state.session;
      if (after && !sessionEnded(after.status)) problem = `${this.sessionId} is still ${after.status}: ${res.message}`;
      else if (after && this.session && after.id === this.session.id) {
        this.session.status = after.status;
        this.session.stop_reason = after.stop_reason;
        this.running = false;
      }
    } catch (err) {
      problem = err instanceof ApiError ? err.message : `no answer from the daemon (${err.message})`;
    }
    this.stopping = false;
    if (problem) {
      this.stopError = problem;
      this.ctx.toast(`Stop failed: ${problem}`, "bad");
    } else {
      this.ctx.toast(`${this.sessionId} stopped`, "ok");
      this.reloadSoon();
    }
    ["head", "live"].forEach((k) => this.dirty.add(k));
    this.render();
  }

  renderLive() {
    const rounds = this.sortedRounds();
    const current = rounds.find((r) => roundActive(r.status));
    if (!current) {
      const last = rounds.length ? rounds[rounds.length - 1].index : 0;
      const next = this.running && this.decision && this.decision.round > last ? this.decision : null;
      replace(
        this.liveCard,
        h("h2", {}, this.running ? "Deciding the next round…" : "No round running"),
        next ? h("p", {}, h("strong", {}, `Next (round ${next.round}): `), next.hypothesis) : null,
        this.running ? null : h("p.muted", {}, sessionActive(this.session.status) ? "" : `The session ${this.session.status}.`),
      );
      this.liveCard.classList.remove("live");
      this.liveEls = null;
      return;
    }
    this.liveCard.classList.add("live");
    const together = rounds.filter((r) => roundActive(r.status));
    const step =
      together.length > 1
        ? h(
            "p.step",
            {},
            h("strong", {}, `Step ${current.batch || ""}: ${together.length} candidates at once · `),
            ...together.map((r, i) => [i ? ", " : "", h("a", { href: this.ctx.sessionHash(this.project, this.sessionId, r.index) }, `round ${r.index}`)]).flat(),
          )
        : null;
    const where = current.backend && current.backend !== "local" ? h("p.muted", {}, `${current.backend} job ${current.job_id || "…"}${current.engine_state ? ` · ${current.engine_state}` : ""}`) : null;
    const elapsed = h("span.elapsed", {}, "");
    const activity = h("span.activity", {}, "");
    this.liveEls = { round: current, elapsed, activity };
    replace(
      this.liveCard,
      step,
      h(
        "div.live-head",
        {},
        h("h2", {}, `Round ${current.index}`, current.attempt ? h("span.muted", {}, ` (attempt ${current.attempt + 1})`) : null),
        badge(current.status),
        h("span.live-meta", {}, "elapsed ", elapsed, " · ", activity),
        h("a.btn.small", { href: this.ctx.sessionHash(this.project, this.sessionId, current.index) }, "Details"),
      ),
      where,
      h("p.hypothesis", {}, current.hypothesis || "–"),
      diffChips(current.diff, current.index),
      current.command ? h("details.command", {}, h("summary", {}, "Command"), h("code", {}, current.command)) : null,
    );
    this.tick();
  }

  tick() {
    const now = Date.now() / 1000;
    if (this.session && this.elapsedEl && !this.session.finished_at) {
      this.elapsedEl.textContent = fmtDuration(now - this.session.created_at);
    }
    for (const [r, cell] of this.tickingCells || []) {
      if (r.started_at) cell.textContent = fmtDuration(now - r.started_at);
    }
    if (!this.liveEls) return;
    const r = this.liveEls.round;
    const el = this.liveEls.activity;
    if (!r.started_at) {
      // launched but not yet started (a queued job, a round being set up)
      this.liveEls.elapsed.textContent = "–";
      el.classList.remove("active", "quiet");
      el.textContent = "not started yet";
      return;
    }
    this.liveEls.elapsed.textContent = fmtDuration(now - r.started_at);
    const last = Math.max(r.last_activity_at || 0, this.live.round === r.index ? this.live.lastOutput || 0 : 0, r.started_at || 0);
    const quiet = now - last;
    el.classList.toggle("active", quiet < ACTIVE_SEC);
    el.classList.toggle("quiet", quiet >= QUIET_WARN_SEC);
    el.textContent = quiet < ACTIVE_SEC ? "● active" : `quiet for ${fmtDuration(quiet)}`;
  }

  renderTable() {
    const rounds = this.sortedRounds();
    if (!rounds.length) {
      replace(this.table, h("p.muted", {}, "No round yet."));
      return;
    }
    // With parallel candidates, a Step column shows which rounds ran together.
    const sizes = new Map();
    for (const r of rounds) if (r.batch > 0) sizes.set(r.batch, (sizes.get(r.batch) || 0) + 1);
    const steps = [...sizes.values()].some((n) => n > 1);
    // With run.screen, a Rung column: each round's rung and budget, and its promotions.
    const rungs = Math.max(0, ...rounds.map((r) => r.rung || 0));
    const promotedTo = new Map(rounds.filter((r) => r.promoted_from != null).map((r) => [r.promoted_from, r.index]));
    this.tickingCells = [];
    const rows = rounds.map((r) => {
      const active = roundActive(r.status);
      const duration = active ? (r.started_at ? Date.now() / 1000 - r.started_at : null) : r.duration_sec ?? (r.started_at && r.ended_at ? r.ended_at - r.started_at : null);
      const durationCell = h("td.num.duration", {}, fmtDuration(duration));
      if (active) this.tickingCells.push([r, durationCell]);
      return h(
        `tr${r.index === this.session.best_round ? ".best-row" : ""}`,
        { dataset: { round: String(r.index), step: String(r.batch || 0) } },
        steps ? h("td.num", {}, String(r.batch || 0)) : null,
        rungs ? h("td.rung", {}, rungCell(r, rungs, promotedTo)) : null,
        h("td", {}, h("a", { href: this.ctx.sessionHash(this.project, this.sessionId, r.index), "aria-label": `round ${r.index} details` }, String(r.index))),
        h("td", {}, badge(r.status), pruneLine(r)),
        h("td", {}, diffChips(r.diff, r.index)),
        h("td.text", {}, r.hypothesis || "–"),
        h("td.text", {}, r.expected ? h("div", {}, h("span.muted", {}, "expected: "), r.expected) : null, r.verdict ? h("div", {}, badge(r.verdict), " ", r.verdict_reason || "") : null),
        h("td.num.metric", {}, fmtNum(r.primary_metric)),
        durationCell,
      );
    });
    replace(
      this.table,
      h(
        "table.rounds",
        {},
        h("thead", {}, h("tr", {}, [...(steps ? ["Step"] : []), ...(rungs ? ["Rung"] : []), "#", "Status", "Params vs baseline", "Hypothesis", "Expected → outcome", this.info.name, "Duration"].map((t) => h("th", { scope: "col" }, t)))),
        h("tbody", {}, rows),
      ),
    );
  }

  renderRoundChart() {
    const rounds = this.sortedRounds().map((r) => ({ index: r.index, metric: r.primary_metric, best: this.metricOf(r.best_after), verdict: r.verdict, status: r.status }));
    replace(
      this.roundChartBox,
      roundChart({
        rounds,
        baseline: this.metricOf(this.session.baseline_round || 1),
        goal: this.info.goal,
        metricName: this.info.name,
        maxRounds: this.session.max_rounds,
      }),
    );
  }

  /** The curve is redrawn at most every CURVE_MS: points can come by the hundred a second. */
  renderCurveSoon() {
    if (this.curveTimer) return;
    const wait = Math.max(0, (this.curveAt || 0) + CURVE_MS - performance.now());
    this.curveTimer = setTimeout(() => {
      this.curveTimer = null;
      this.curveAt = performance.now();
      this.renderCurve();
    }, wait);
  }

  renderCurve() {
    // metrics with steps are curves; a value without a step (a final line) is listed
    const series = new Map();
    const finals = new Map();
    for (const [name, bySeq] of this.live.points) {
      const points = [...bySeq.entries()].sort((a, b) => a[0] - b[0]).map((e) => e[1]);
      const stepped = points.filter((p) => p[0] !== null && p[0] !== undefined);
      if (stepped.length) series.set(name, stepped);
      else if (points.length) finals.set(name, points[points.length - 1][1]);
    }
    const selected = this.curveMetric || this.info.name;
    const onSelect = (name) => {
      this.curveMetric = name;
      this.renderCurve();
    };
    replace(this.curveChartBox, curveChart({ series, finals, round: this.live.round, selected, onSelect }));
  }

  showRound(index) {
    if (!this.loaded) {
      this.pendingRound = index;
      return;
    }
    this.closeRound();
    this.roundDialog = openRound(this.ctx, this.project, this.sessionId, index, this.rounds.get(index), () => {
      this.roundDialog = null;
      this.ctx.navigate(this.ctx.sessionHash(this.project, this.sessionId));
    });
  }

  closeRound() {
    if (this.roundDialog) this.roundDialog.close();
    this.roundDialog = null;
  }
}

function card(label, value, note) {
  return h("div.card", {}, h("div.card-label", {}, label), value, note ? h("div.card-note", {}, note) : null);
}

/** ``run.noise``'s measurement (``session_noise``): the baseline's mean ± spread over
 * its seeds and the floor a new best must beat; nothing without run.noise. */
function noiseCard(noise) {
  if (!noise) return null;
  const measured = noise.mean !== null && noise.mean !== undefined;
  const value = measured ? `${fmtNum(noise.mean, NOISE_DIGITS)} ± ${fmtNum(noise.spread, NOISE_DIGITS)}` : "–";
  const seeds = `${noise.seeds} seed${noise.seeds === 1 ? "" : "s"} of the baseline`;
  const floor = noise.floor !== null && noise.floor !== undefined ? ` · floor ${fmtNum(noise.floor, NOISE_DIGITS)}` : "";
  const el = card("Seed noise", h("div.card-value.noise-value", { title: noise.text }, value), measured ? `${seeds}${floor}` : "not measured yet");
  el.dataset.noise = "";
  return el;
}

/** A pruned round's one-line reason (``pruned: median rule: ...``), under its status. */
export function pruneLine(r) {
  return r.prune_reason ? h("div.prune-reason", {}, r.prune_reason) : null;
}

/** Params that differ from the baseline, as "name old → new" chips. */
export function diffChips(diff, index) {
  const entries = Object.entries(diff || {});
  if (!entries.length) return h("span.muted", {}, index === 1 ? "baseline" : "= baseline");
  return h(
    "span.chips",
    {},
    entries.map(([name, change]) => {
      const from = change && typeof change === "object" && "from" in change ? change.from : undefined;
      const to = change && typeof change === "object" && "to" in change ? change.to : change;
      return h("span.chip", { title: `${name}: ${fmtValue(from)} → ${fmtValue(to)}` }, h("b", {}, name), " ", from !== undefined ? `${fmtValue(from)} → ` : "", fmtValue(to));
    }),
  );
}

/** run.screen: "1 of 2 · budget 2", "→ #5" when promoted from it, "↑ from #3" when promoted. */
function rungCell(r, rungs, promotedTo) {
  if (!r.rung) return "–";
  const full = r.rung === rungs ? " (full)" : "";
  const parts = [h("span", {}, `${r.rung} of ${rungs} · budget ${fmtNum(r.budget)}${full}`)];
  if (r.promoted_from != null) parts.push(h("div.muted", {}, `↑ promoted from #${r.promoted_from}`));
  if (promotedTo.has(r.index)) parts.push(h("div.muted", {}, `→ promoted to #${promotedTo.get(r.index)}`));
  return parts;
}
