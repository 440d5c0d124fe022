// The dashboard shell: routing (#/view?query), the header, the projects sidebar, toasts.

import { call, onAuthProblem } from "./api.js";
import { loadStates } from "./states.js";
import { h, replace } from "./dom.js";
import { Sidebar } from "./views/sidebar.js";
import { mountDashboard } from "./views/dashboard.js";
import { mountSession } from "./views/session.js";
import { mountProject } from "./views/project.js";
import { mountSettings } from "./views/settings.js";

const main = document.getElementById("main");
const conn = document.getElementById("conn");
const banner = document.getElementById("banner");
const toasts = document.getElementById("toasts");

const SELECTED_KEY = "trainee.project";
/** Where this page once kept its own list of projects; moved to the daemon's (projects_add). */
const OLD_LIST_KEY = "trainee.projects";

/** Shared by the views. */
const ctx = {
  navigate(hash) {
    if (location.pathname !== "/") location.assign(`/${hash}`);
    else location.hash = hash;
  },
  sessionHash(project, session, round) {
    const q = new URLSearchParams({ project, id: session });
    if (round) q.set("round", String(round));
    return `#/session?${q}`;
  },
  /** The one thing this browser keeps: which project is selected. */
  get selectedProject() {
    return localStorage.getItem(SELECTED_KEY) || null;
  },
  selectProject(root) {
    if (!root) return;
    localStorage.setItem(SELECTED_KEY, root);
    ctx.rememberProject(root);
  },
  /** Add a project to the daemon's list (projects_add); resolves to it as listed, or null
   * when the daemon refuses the folder (it stays selectable in this browser). */
  async rememberProject(root) {
    if (!root) return null;
    try {
      const { project, added } = await call("projects_add", { project_root: root });
      if (added) ctx.refreshSidebar();
      return project;
    } catch {
      return null;
    }
  },
  /** Take a project off the daemon's list (projects_remove) and unselect it. */
  async forgetProject(root) {
    if (ctx.selectedProject === root) localStorage.removeItem(SELECTED_KEY);
    return call("projects_remove", { project_root: root });
  },
  setConnection(state) {
    conn.textContent = { live: "● live", connecting: "connecting…", reconnecting: "reconnecting…", offline: "offline" }[state] || "";
    conn.dataset.state = state || "";
  },
  toast(message, kind = "info") {
    const el = h(`div.toast.toast-${kind}`, { role: kind === "bad" ? "alert" : "status" }, message);
    toasts.append(el);
    setTimeout(() => el.remove(), kind === "bad" ? 9000 : 4000);
  },
  refreshSidebar() {
    sidebar.refresh();
  },
};

const sidebar = new Sidebar(document.getElementById("sidebar"), ctx);

onAuthProblem(() => {
  banner.hidden = false;
  replace(
    banner,
    h("strong", {}, "No access. "),
    "This page needs the daemon's access token: run ",
    h("code", {}, "trainee webui"),
    " in a terminal; it opens the dashboard with access.",
  );
});

function parseRoute() {
  if (location.pathname === "/llm-test") return { view: "llmtest", query: new URLSearchParams() };
  const raw = location.hash.replace(/^#\/?/, "");
  const [name, qs] = raw.split("?");
  return { view: name || "dashboard", query: new URLSearchParams(qs || "") };
}

let mounted = null; // {view, key, unmount, update}

function route() {
  const { view, query } = parseRoute();
  const key = view === "session" ? `${query.get("project")}|${query.get("id")}` : null;
  for (const a of document.querySelectorAll("nav a[data-nav]")) {
    const current = a.dataset.nav === view || (view === "session" && a.dataset.nav === "dashboard");
    if (current) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  sidebar.highlight(query.get("project"), query.get("id"));
  if (mounted && key && mounted.key === key && mounted.update) {
    mounted.update(query); // the same session: only its round dialog changes
    return;
  }
  if (mounted && mounted.unmount) mounted.unmount();
  mounted = null;
  ctx.setConnection("");
  const views = {
    dashboard: () => mountDashboard(main, ctx),
    session: () => mountSession(main, ctx, { project: query.get("project"), session: query.get("id"), round: query.get("round") }),
    project: () => mountProject(main, ctx, { root: query.get("root") }),
    settings: () => mountSettings(main, ctx, {}),
    llmtest: () => mountSettings(main, ctx, { testOnly: true }),
  };
  const handle = (views[view] || views.dashboard)();
  mounted = { view, key, ...(typeof handle === "function" ? { unmount: handle } : handle || {}) };
}

// `trainee webui /path` opens /?project=/path: select it, then tidy the address.
const opened = new URLSearchParams(location.search).get("project");
if (opened) {
  ctx.selectProject(opened);
  history.replaceState(null, "", location.pathname + location.hash);
}

/** Projects an older page kept in this browser go to the daemon's list, once. */
async function moveOldList() {
  const raw = localStorage.getItem(OLD_LIST_KEY);
  if (raw === null) return;
  let list = [];
  try {
    list = JSON.parse(raw);
  } catch {
    list = [];
  }
  for (const root of Array.isArray(list) ? list : []) {
    if (typeof root === "string") await ctx.rememberProject(root);
  }
  localStorage.removeItem(OLD_LIST_KEY);
}

// the published states first: every view reads statuses through states.js
loadStates()
  .then(moveOldList)
  .catch(() => {}) // no access: the banner says so; the views show their own errors
  .finally(() => {
    window.addEventListener("hashchange", route);
    sidebar.refresh();
    route();
  });
