// A round in detail (a modal dialog): its log, the decision that chose it (prompt and raw
// response), the agent trace (validation, repair, outcome) and W&B links found in the log.

import { call, fileUrl, roundLog } from "../api.js";
import { badge, fmtDuration, fmtNum, fmtTime, fmtValue, h, replace } from "../dom.js";
import { LogView } from "../logview.js";
import { errorBox } from "./common.js";
import { roundActive } from "../states.js";

const CHUNK = 256 * 1024;
const FOLLOW_MS = 1000;
// W&B run pages printed by wandb ("View run at ..."): the scheme is matched, not written out.
const WANDB_RE = /\bhttps?:\/\/[^\s"'<>]*wandb[^\s"'<>]*/g;

export function openRound(ctx, project, session, index, round, onClose) {
  const tabs = ["Log", "Decision", "Agent trace", "W&B"];
  const panels = new Map(tabs.map((t) => [t, h("div.tab-panel", { role: "tabpanel", "aria-label": t })]));
  const buttons = tabs.map((t) =>
    h("button.tab", { type: "button", role: "tab", "aria-selected": "false", onclick: () => select(t) }, t),
  );
  let timer = null;
  let ticker = null;
  let following = false;
  const badgeSlot = h("span.round-status");
  const summarySlot = h("div.round-summary");
  const dialog = h(
    "dialog.round-dialog",
    { "aria-label": `round ${index}` },
    h(
      "div.dialog-head",
      {},
      h("h2", {}, `Round ${index}`, badgeSlot),
      h("button.btn.small", { type: "button", onclick: () => dialog.close(), "aria-label": "Close" }, "Close"),
    ),
    h("div.dialog-body", {}, summarySlot, h("div.tabs", { role: "tablist" }, buttons), [...panels.values()]),
  );
  function select(name) {
    buttons.forEach((b, i) => b.setAttribute("aria-selected", String(tabs[i] === name)));
    for (const [t, p] of panels) p.hidden = t !== name;
  }
  let closedByPage = false;
  /** Closed by the page (navigation): no onClose, which would navigate again. */
  function close() {
    closedByPage = true;
    clearTimeout(timer);
    clearInterval(ticker);
    if (dialog.open) dialog.close();
    dialog.remove();
  }
  dialog.addEventListener("close", () => {
    clearTimeout(timer);
    clearInterval(ticker);
    dialog.remove();
    if (!closedByPage) onClose();
  });
  document.body.append(dialog);
  dialog.showModal();
  select("Log");

  // -- log: the last 256 KiB, older chunks on demand, followed while the round runs
  const log = new LogView({ maxLines: 50000, label: `round ${index} log`, live: false });
  let first = null;
  let next = null;
  const more = h("button.btn.small", { type: "button", hidden: true, onclick: () => earlier() }, "Load earlier");
  const wandbLinks = new Set();
  const noteLinks = (text) => {
    for (const url of text.match(WANDB_RE) || []) wandbLinks.add(url.replace(/[).,;]+$/, ""));
    renderWandb();
  };
  replace(
    panels.get("Log"),
    h("div.row", {}, more, h("a.btn.small", { href: fileUrl(project, session, `round-${String(index).padStart(4, "0")}.log`), download: "" }, "Download full log")),
    log.el,
  );
  async function load() {
    try {
      const res = await roundLog(project, session, index, { offset: -CHUNK, length: CHUNK });
      first = res.offset;
      next = res.next_offset;
      log.setText(res.data, { partialFirst: res.offset > 0 });
      more.hidden = first === 0;
      noteLinks(res.data);
      if (round && roundActive(round.status)) follow();
      else following = false;
    } catch (err) {
      replace(panels.get("Log"), errorBox(err, "No log"));
    }
  }
  async function earlier() {
    const start = Math.max(0, first - CHUNK);
    const res = await roundLog(project, session, index, { offset: start, length: first - start });
    first = start;
    more.hidden = first === 0;
    log.prepend(res.data);
    noteLinks(res.data);
  }
  let carry = ""; // a line not yet ended waits for its end
  let tail = 0; // reads since the round ended
  async function follow() {
    following = true;
    const over = !(round && roundActive(round.status));
    let got = false;
    try {
      const res = await roundLog(project, session, index, { offset: next, length: CHUNK });
      if (res.data) {
        got = true;
        const parts = (carry + res.data).split("\n");
        carry = parts.pop();
        if (parts.length) log.append(parts);
        noteLinks(res.data);
      }
      next = res.next_offset;
    } catch {
      /* the round may be over: keep what we have */
    }
    // once the round is over, read until the log has nothing more (its last lines)
    tail = over ? tail + 1 : 0;
    if (over && (!got || tail > 10)) {
      if (carry) log.append([carry]);
      carry = "";
      following = false;
    } else if (dialog.isConnected) timer = setTimeout(follow, over ? 200 : FOLLOW_MS);
  }
  load();

  // -- the header and the facts follow the round (the session view passes each change)
  function show(r) {
    const was = round;
    round = r || round;
    if (!round) return;
    replace(badgeSlot, " ", badge(round.status));
    replace(summarySlot, summary(round));
    clearInterval(ticker);
    if (roundActive(round.status)) ticker = setInterval(() => replace(summarySlot, summary(round)), 1000);
    if (was && roundActive(was.status) && !roundActive(round.status)) {
      // it just ended: the final log lines, and the trace with its outcome
      if (!following && next !== null) follow();
      loadDecision();
    }
  }
  show(round);

  // -- decision and trace
  function renderWandb() {
    replace(
      panels.get("W&B"),
      wandbLinks.size
        ? h("ul.links", {}, [...wandbLinks].map((url) => h("li", {}, h("a", { href: url, target: "_blank", rel: "noreferrer noopener" }, url))))
        : h("p.muted", {}, "No Weights & Biases run link in this round's log."),
    );
  }
  renderWandb();
  replace(panels.get("Decision"), h("p.muted", {}, "Loading…"));
  function loadDecision() {
    decisionOf(project, session, index)
      .then((found) => {
        replace(panels.get("Decision"), decisionView(found, index));
        replace(panels.get("Agent trace"), traceView(found, round));
      })
      .catch((err) => {
        replace(panels.get("Decision"), errorBox(err, "No decision"));
        replace(panels.get("Agent trace"), traceView(null, round));
      });
  }
  loadDecision();

  return { close, update: show, index };
}

/** The round's record and decision through runs_list (run ids) and runs_get. */
async function decisionOf(project, session, index) {
  const runs = await call("runs_list", { project_root: project, session, limit: 10000 });
  const run = runs.rounds.find((r) => r.index === index);
  if (!run) return { round: null, decision: null };
  return call("runs_get", { project_root: project, run_id: run.run_id });
}

function summary(r) {
  const end = roundActive(r.status) ? Date.now() / 1000 : r.ended_at;
  const duration = roundActive(r.status) || r.duration_sec === null || r.duration_sec === undefined ? (r.started_at && end ? end - r.started_at : null) : r.duration_sec;
  return h(
    "dl.facts",
    {},
    fact("Hypothesis", r.hypothesis || "–"),
    fact("Expected", r.expected || "–"),
    fact("Outcome", r.verdict ? h("span", {}, badge(r.verdict), " ", r.verdict_reason || "") : "–"),
    r.prune_reason ? fact("Ended early", r.prune_reason) : null,
    fact("Metric", fmtNum(r.primary_metric)),
    r.rung ? fact("Rung", `rung ${r.rung} · budget ${fmtNum(r.budget)}${r.promoted_from != null ? ` · promoted from round ${r.promoted_from}` : ""}`) : null,
    fact("Started", fmtTime(r.started_at)),
    fact("Duration", fmtDuration(duration)),
  );
}

function fact(label, value) {
  return [h("dt", {}, label), h("dd", { dataset: { fact: label } }, value)];
}

function decisionView(found, index) {
  const d = found && found.decision;
  if (!d) {
    return h(
      "div",
      {},
      h("p", {}, index === 1 ? "The baseline round runs the project's own parameters: no decision was asked." : "No decision was recorded for this round."),
      found && found.round ? paramsTable(found.round.params, found.round.diff) : null,
    );
  }
  const plan = d.plan || {};
  const prompt = d.prompt || [];
  const redacted = prompt.length && prompt.every((m) => "sha256" in m && !("content" in m));
  const asked = prompt.length > 0 || Boolean(d.raw_response || d.model) || d.prompt_tokens > 0; // an LLM was asked
  return h(
    "div.decision",
    {},
    h(
      "dl.facts",
      {},
      fact("Policy", `${d.policy}${d.provider ? ` · ${d.provider}` : ""}${d.model ? ` · ${d.model}` : ""}`),
      asked ? fact("Tokens", `${d.prompt_tokens} in · ${d.completion_tokens} out`) : null,
      asked ? fact("Latency", `${fmtNum(d.latency_sec, 3)} s`) : null,
      asked ? fact("Cost", d.cost_usd === null || d.cost_usd === undefined ? "–" : `$${d.cost_usd.toFixed(5)}`) : null,
      asked ? fact("Repaired", d.repaired ? "yes (one repair round-trip)" : "no") : null,
    ),
    asked ? null : h("p.muted.no-prompt", {}, `The ${d.policy} policy chose these parameters itself: no prompt, no LLM.`),
    h("h3", {}, "Plan"),
    h(
      "dl.facts",
      {},
      fact("Hypothesis", plan.hypothesis || "–"),
      fact("Change", plan.change_summary || "–"),
      fact("Expected", plan.expected || "–"),
      plan.stop ? fact("Stop", plan.stop_reason || "yes") : null,
    ),
    paramsTable(plan.params || {}, found.round ? found.round.diff : {}),
    asked ? h("h3", {}, "Prompt") : null,
    !asked ? null : redacted
      ? h(
          "div",
          {},
          h("p.muted", {}, "Only digests of the prompt were kept. Switch on debug recording in Settings to keep full prompts and raw responses."),
          h("ul", {}, prompt.map((m) => h("li", {}, `${m.role}: ${m.length.toLocaleString()} characters, sha256 ${String(m.sha256).slice(0, 12)}…`))),
        )
      : prompt.map((m) => h("details.message", {}, h("summary", {}, `${m.role} · ${String(m.content || "").length.toLocaleString()} characters`), h("pre", {}, String(m.content || "")))),
    asked ? h("h3", {}, "Raw response") : null,
    !asked ? null : d.raw_response ? h("pre.raw", {}, d.raw_response) : h("p.muted", {}, "No raw response kept."),
  );
}

function paramsTable(params, diff) {
  const names = Object.keys(params || {});
  if (!names.length) return null;
  return h(
    "table.params",
    {},
    h("thead", {}, h("tr", {}, h("th", {}, "Param"), h("th", {}, "Value"), h("th", {}, "Baseline"))),
    h(
      "tbody",
      {},
      names.map((n) => {
        const change = diff && diff[n];
        return h(
          `tr${change ? ".changed" : ""}`,
          {},
          h("td", {}, n),
          h("td.num", {}, fmtValue(params[n])),
          h("td.num", {}, change && typeof change === "object" && "from" in change ? fmtValue(change.from) : change ? "–" : "same"),
        );
      }),
    ),
  );
}

function traceView(found, round) {
  const d = found && found.decision;
  const steps = [];
  if (d && !(d.prompt || []).length && !d.provider) {
    steps.push([`Proposed by the ${d.policy} policy`, d.plan ? d.plan.change_summary || "" : ""]);
  } else if (d) {
    const prompt = d.prompt || [];
    steps.push(["Prompt composed", `${prompt.length} messages`]);
    steps.push(["Asked", `${d.provider || d.policy}${d.model ? ` / ${d.model}` : ""} · ${fmtNum(d.latency_sec, 3)} s`]);
    if ((d.problems || []).length) {
      steps.push([
        d.repaired ? "First answer failed validation; repair requested" : "Answer failed validation",
        h("ul", {}, d.problems.map((p) => h("li", {}, h("code", {}, p.field), ": ", p.reason))),
      ]);
    }
    steps.push([d.accepted ? "Plan accepted" : "Plan not accepted", d.plan ? d.plan.change_summary || "" : ""]);
  } else {
    steps.push(["No decision", "baseline parameters"]);
  }
  const r = (found && found.round) || round;
  if (r) {
    if (r.command) steps.push(["Launched", h("code", {}, r.command)]);
    steps.push(["Finished", h("span", {}, badge(r.status), r.returncode !== null && r.returncode !== undefined ? ` exit ${r.returncode}` : "", r.signal ? ` signal ${r.signal}` : "")]);
    for (const w of r.warnings || []) steps.push(["Warning", w]);
    if (r.verdict) steps.push(["Judged", h("span", {}, badge(r.verdict), " ", r.verdict_reason || "")]);
    if ((r.failure_tail || []).length) steps.push(["Last lines before the failure", h("pre", {}, r.failure_tail.join("\n"))]);
  }
  return h("ol.trace", {}, steps.map(([title, body]) => h("li", {}, h("strong", {}, title), body ? h("div", {}, body) : null)));
}
