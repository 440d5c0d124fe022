// The daemon's HTTP API: every request is a registry method (POST /api/tools/<name>),
// like any other client's, except the two byte streams a browser needs a URL for: a
// session's events (SSE) and a file download (the stream of session_file).
// Every request relies on the HttpOnly access cookie; nothing here holds a secret.

export class ApiError extends Error {
  constructor(status, error) {
    super((error && error.message) || `HTTP ${status}`);
    this.status = status;
    this.code = error && error.code;
    const details = (error && error.data && error.data.details) || (error && error.data) || {};
    this.details = typeof details === "object" && details !== null ? details : {};
    this.field = this.details.field || null;
  }
}

const listeners = new Set();

/** Called with (status) whenever a request is refused for want of the access token. */
export function onAuthProblem(fn) {
  listeners.add(fn);
  return () => listeners.delete(fn);
}

async function unwrap(response) {
  let body = null;
  const text = await response.text();
  try {
    body = text ? JSON.parse(text) : null;
  } catch {
    body = null;
  }
  if (!response.ok) {
    if (response.status === 401) listeners.forEach((fn) => fn(response.status));
    throw new ApiError(response.status, (body && body.error) || { message: text || response.statusText });
  }
  return body;
}

/** POST /api/tools/<name> with params; resolves to the method's result. */
export async function call(name, params = {}) {
  const response = await fetch(`/api/tools/${encodeURIComponent(name)}`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(params),
    credentials: "same-origin",
  });
  const body = await unwrap(response);
  return body.result;
}

export function apiUrl(path, query = {}) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(query)) {
    if (v !== null && v !== undefined && v !== "") q.set(k, String(v));
  }
  const qs = q.toString();
  return qs ? `${path}?${qs}` : path;
}

const sessionPath = (session) => `/api/sessions/${encodeURIComponent(session)}`;

/** logs_tail: a round's log from { offset, length } or its last { tail } lines. */
export function roundLog(project, session, round, query) {
  return call("logs_tail", { project_root: project, session, round, ...query });
}

/** round_metrics: every point of a round as [name, value, step, seq]. */
export function roundMetrics(project, session, round) {
  return call("round_metrics", { project_root: project, session, round });
}

/** The download URL of a session file: session_file's stream (a link needs a URL). */
export function fileUrl(project, session, name, inline = false) {
  return apiUrl(`${sessionPath(session)}/files/${encodeURIComponent(name)}`, {
    project_root: project,
    inline: inline ? 1 : null,
  });
}

/**
 * A session's live events over SSE. Events are handed over in batches, at most once
 * per animation frame (or every 250 ms while the tab is hidden), so a round printing
 * thousands of lines a second costs one DOM update per frame. The browser reconnects
 * by itself with Last-Event-ID; if the stream is closed for good it is reopened here
 * with ?since= the last id seen, so no event is lost either way.
 */
export class EventStream {
  constructor(project, session, { onEvents, onReady, onState, onGap } = {}) {
    this.project = project;
    this.session = session;
    this.onEvents = onEvents || (() => {});
    this.onReady = onReady || (() => {});
    this.onState = onState || (() => {});
    this.onGap = onGap || (() => {});
    this.lastId = null;
    this.queue = [];
    this.scheduled = false;
    this.closed = false;
    this.retry = null;
    this.open();
  }

  open() {
    const url = apiUrl(`${sessionPath(this.session)}/events`, {
      project_root: this.project,
      since: this.lastId,
    });
    const source = new EventSource(url);
    this.source = source;
    this.onState("connecting");
    source.addEventListener("ready", (e) => {
      if (e.lastEventId) this.lastId = e.lastEventId;
      this.onState("live");
      this.onReady(JSON.parse(e.data));
    });
    source.addEventListener("gap", (e) => this.onGap(JSON.parse(e.data)));
    source.onmessage = (e) => {
      this.lastId = e.lastEventId;
      this.queue.push(JSON.parse(e.data));
      this.schedule();
    };
    source.onerror = () => {
      if (this.closed) return;
      if (source.readyState === EventSource.CLOSED) {
        this.onState("offline");
        clearTimeout(this.retry);
        this.retry = setTimeout(() => !this.closed && this.open(), 3000);
      } else {
        this.onState("reconnecting");
      }
    };
  }

  schedule() {
    if (this.scheduled) return;
    this.scheduled = true;
    const flush = () => {
      this.scheduled = false;
      const batch = this.queue;
      this.queue = [];
      if (batch.length && !this.closed) this.onEvents(batch);
    };
    if (document.hidden) setTimeout(flush, 250);
    else requestAnimationFrame(flush);
  }

  close() {
    this.closed = true;
    clearTimeout(this.retry);
    if (this.source) this.source.close();
  }
}
