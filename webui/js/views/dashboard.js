// The dashboard: the session that matters now (a running one, else the selected
// project's latest) shown live, or a start form when there is none. It keeps looking:
// a session started elsewhere (the CLI, another tab) takes the stage when it starts.

import { emptyState, h, replace } from "../dom.js";
import { errorBox, loadProjects, sessionsOf, startForm } from "./common.js";
import { SessionView } from "./session.js";

const LOOK_MS = 3000;

export function mountDashboard(el, ctx) {
  let view = null;
  let shown = null; // "root|session" on stage, or "" for the empty state
  let gone = false;
  let timer = null;
  replace(el, h("p.muted", {}, "Loading…"));

  async function pick() {
    const projects = await loadProjects(ctx);
    const running = projects.find((p) => p.running && p.running.length);
    if (running) return { project: running.root, session: running.running[running.running.length - 1], running: true };
    let project = ctx.selectedProject || (projects.length ? projects[0].root : null);
    if (view && shown) project = shown.split("|")[0];
    if (!project) return { project: null, session: null };
    const sessions = await sessionsOf(project).catch(() => []);
    return { project, session: sessions.length ? sessions[0].id : null };
  }

  async function look() {
    try {
      const { project, session, running } = await pick();
      if (gone) return;
      const key = project && session ? `${project}|${session}` : "";
      // keep what is on stage unless a (different) session is running now
      if (shown !== null && key === shown) return;
      if (view && !running) return;
      if (view) view.destroy();
      view = null;
      shown = key;
      if (key) {
        ctx.selectProject(project);
        view = new SessionView(el, ctx, project, session);
        return;
      }
      replace(
        el,
        emptyState(
          project ? "No session yet" : "Welcome to trainee",
          project
            ? "Start the first session on this project:"
            : "Add a training project in the sidebar, or register one in the project editor.",
        ),
        project
          ? h("section.panel", {}, h("h2", {}, project), startForm(ctx, project))
          : h("a.btn.primary", { href: "#/project" }, "Register a project"),
      );
    } catch (err) {
      if (!gone && !view) replace(el, errorBox(err, "Cannot load the dashboard"));
    } finally {
      if (!gone) timer = setTimeout(look, LOOK_MS);
    }
  }

  look();
  return () => {
    gone = true;
    clearTimeout(timer);
    if (view) view.destroy();
  };
}
