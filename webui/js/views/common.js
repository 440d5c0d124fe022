// Data helpers shared by the views: projects, session summaries, error display.

import { call } from "../api.js";
import { badge, fmtChange, fmtNum, h } from "../dom.js";
import { needsProvider, policyNames } from "../states.js";

/** The start form's choice when the project's policy needs a provider and none is set. */
const OFFLINE_DEFAULT = "random";

/** Projects the daemon knows plus those this browser added, the selected one first known. */
export async function loadProjects(ctx) {
  const server = await call("projects_list");
  const byRoot = new Map(server.projects.map((p) => [p.root, p]));
  for (const root of [ctx.selectedProject, ...ctx.localProjects()]) {
    if (root && !byRoot.has(root)) {
      byRoot.set(root, { root, name: root.split("/").filter(Boolean).pop() || root, running: [], local: true });
    }
  }
  return [...byRoot.values()];
}

const projectInfo = new Map();

/** A project's ``project_get`` result (cached; null when it does not load). */
export async function projectOf(root) {
  if (!projectInfo.has(root)) {
    projectInfo.set(root, call("project_get", { project_root: root }).catch(() => null));
  }
  return projectInfo.get(root);
}

export function forgetProject(root) {
  projectInfo.delete(root);
}

/** Sessions of a project (newest first) with round counts and best vs baseline. */
export async function sessionsOf(root) {
  const runs = await call("runs_list", { project_root: root, limit: 10000 });
  const rounds = new Map();
  for (const r of runs.rounds) {
    if (!rounds.has(r.session_id)) rounds.set(r.session_id, []);
    rounds.get(r.session_id).push(r);
  }
  return runs.sessions
    .map((s) => {
      const own = rounds.get(s.id) || [];
      const at = (index) => own.find((r) => r.index === index);
      return {
        ...s,
        rounds: own,
        roundCount: own.length,
        baselineMetric: s.baseline_round ? at(s.baseline_round)?.primary_metric ?? null : null,
        bestMetric: s.best_round ? at(s.best_round)?.primary_metric ?? null : null,
      };
    })
    .reverse();
}

export function bestVsBaseline(best, baseline) {
  if (best === null || best === undefined) return h("span.muted", {}, "no metric yet");
  const change = best === baseline ? "" : fmtChange(baseline, best);
  return h(
    "span.best",
    {},
    h("strong", {}, fmtNum(best)),
    baseline === best ? h("span.muted", {}, " (baseline)") : baseline !== null && baseline !== undefined ? h("span.muted", {}, ` vs ${fmtNum(baseline)}`) : null,
    change ? h("span.change", {}, ` ${change}`) : null,
  );
}

export function statusLine(session) {
  return h(
    "span.status-line",
    {},
    badge(session.status),
    session.stop_reason ? h("span.muted", {}, ` ${session.stop_reason.replaceAll("_", " ")}`) : null,
  );
}

/** An error as a readable block: message, field, hint. */
export function errorBox(err, title = "Failed") {
  const details = (err && err.details) || {};
  return h(
    "div.error-box",
    { role: "alert" },
    h("strong", {}, `${title}: `),
    (err && err.message) || String(err),
    details.field ? h("div.muted", {}, `field: ${details.field}`) : null,
    details.file ? h("div.muted", {}, `file: ${details.file}${details.line ? `:${details.line}` : ""}`) : null,
    details.hint ? h("div.hint", {}, details.hint) : null,
  );
}

/** A start-session form for a project. */
export function startForm(ctx, root, { onStarted } = {}) {
  const policy = h(
    "select",
    { name: "policy", "aria-label": "Decision policy" },
    policyNames().map((p) => h("option", { value: p }, p)),
  );
  const policyNote = h("div.muted.small.policy-note");
  let touched = false;
  policy.addEventListener("change", () => {
    touched = true;
    policyNote.replaceChildren();
  });
  const mode = h(
    "select",
    { name: "mode", "aria-label": "Security mode" },
    h("option", { value: "", title: "the security mode of project.yaml" }, "project's mode"),
    h("option", { value: "guarded" }, "guarded (bwrap)"),
    h("option", { value: "unsafe" }, "unsafe"),
  );
  const rounds = h("input", { type: "number", min: "1", name: "rounds", placeholder: "rounds", "aria-label": "Max rounds" });
  const out = h("div.form-out");
  // enabled once the policy is chosen (a click before would start the first one listed)
  const button = h("button.btn.primary", { type: "submit", disabled: true }, "Start session");
  const form = h(
    "form.start-form",
    {
      onsubmit: async (e) => {
        e.preventDefault();
        button.disabled = true;
        out.replaceChildren(h("span.muted", {}, "Starting…"));
        try {
          const params = { project_root: root, policy: policy.value };
          if (mode.value) params.security_mode = mode.value;
          if (rounds.value) params.max_rounds = Number(rounds.value);
          const started = await call("loop_start", params);
          out.replaceChildren();
          ctx.toast(`${started.session} started on ${root}`, "ok");
          ctx.selectProject(root);
          ctx.refreshSidebar();
          if (onStarted) onStarted(started);
          ctx.navigate(ctx.sessionHash(root, started.session));
        } catch (err) {
          out.replaceChildren(errorBox(err, "Could not start"));
        } finally {
          button.disabled = false;
        }
      },
    },
    h("div.row", {}, policy, mode, rounds, button),
    policyNote,
    out,
  );
  // The project's policy when it can run here, else one that needs no provider.
  Promise.all([projectOf(root), call("runtime_provider_get").catch(() => null)]).then(([got, view]) => {
    if (touched) return;
    const p = got && got.project;
    const own = (p && p.decision && p.decision.policy) || null;
    const configured = Boolean(view) && view.failover_order.some((n) => view.providers[n] && view.providers[n].configured);
    const runnable = (name) => policyNames().includes(name) && (!needsProvider(name) || configured);
    const chosen = own && runnable(own) ? own : policyNames().find((n) => n === OFFLINE_DEFAULT && runnable(n)) || policyNames().find(runnable);
    if (chosen) policy.value = chosen;
    if (own && chosen !== own) {
      policyNote.replaceChildren(`The project's policy, ${own}, needs an LLM provider and none is configured (Settings): ${chosen} instead.`);
    }
  }).finally(() => {
    button.disabled = false;
  });
  return form;
}
