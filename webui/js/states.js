// Statuses and stop reasons as the daemon publishes them (``daemon_hello``'s ``states``,
// from trainee/states.py), the event kinds (``events_schema``, from trainee/events.py)
// and the decision policies with whether they need a provider.
// The only module of the page that spells a status out: the others ask it.
// (tests/unit/test_webui_status_literals.py keeps it that way; an event kind is
// ``Kind.ROUND_STARTED``, never a string: tests/unit/test_webui_event_kinds.py.)

import { call } from "./api.js";

let published = null;
let policies = {};

/** Named values of a published list: ``Round.RUNNING`` is "running", ``Kind.ROUND_STARTED``
 * is "round.started"; a name the daemon does not publish is a programming error, thrown at
 * once (not a silent undefined). */
function named(values, what = "status") {
  const table = Object.fromEntries(values.map((v) => [v.toUpperCase().replaceAll(".", "_"), v]));
  return new Proxy(table, {
    get(target, key) {
      if (typeof key !== "string" || key in target || !published) return target[key];
      throw new Error(`the daemon publishes no ${what} ${key.toLowerCase()}`);
    },
  });
}

export let Round = named([]);
export let Session = named([]);
export let Stop = named([]);
/** The event kinds: the discriminator of the event schema the daemon serves. */
export let Kind = named([]);

/** Fetch the published states once, before any view renders. */
export async function loadStates() {
  const [hello, events] = await Promise.all([call("daemon_hello"), call("events_schema")]);
  published = hello.states;
  Kind = named(Object.keys(events.schema.discriminator.mapping), "event kind");
  policies = hello.policies || {};
  Round = named(published.round_statuses);
  Session = named(published.session_statuses);
  Stop = named(Object.keys(published.stop_reasons));
  for (const status of [...published.round_statuses, ...published.session_statuses]) {
    if (!(status in KIND)) console.warn(`no badge kind for status ${status}`);
  }
}

/** A round still under way (pending or running): not in the finished set. */
export function roundActive(status) {
  return Boolean(published) && published.round_statuses.includes(status) && !published.round_finished.includes(status);
}

/** A session not yet ended. */
export function sessionActive(status) {
  return Boolean(published) && published.session_statuses.includes(status) && !published.session_ended.includes(status);
}

export function sessionEnded(status) {
  return Boolean(published) && published.session_ended.includes(status);
}

/** The policy names the daemon knows, in its order. */
export function policyNames() {
  return Object.keys(policies);
}

/** Whether ``policy`` asks an LLM provider (unknown names: assume it does). */
export function needsProvider(policy) {
  return policies[policy] !== false;
}

// How a status reads on a badge (the class of its colour).
const KIND = {
  pending: "run",
  running: "run",
  completed: "ok",
  finished: "ok",
  completed_without_metrics: "warn",
  pruned: "muted",
  stopped: "muted",
  timed_out: "bad",
  failed: "bad",
};

/** The badge kind of a status, or null when ``status`` is not one. */
export function statusKind(status) {
  return KIND[status] || null;
}
