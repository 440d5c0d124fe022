// The dashboard: the session that matters now (a running one, else the selected
// project's latest) shown live, or a start form when there is none.

import { emptyState, h, replace } from "../dom.js";
import { errorBox, loadProjects, sessionsOf, startForm } from "./common.js";
import { SessionView } from "./session.js";

export function mountDashboard(el, ctx) {
  let view = null;
  let gone = false;
  replace(el, h("p.muted", {}, "Loading…"));
  (async () => {
    try {
      const projects = await loadProjects(ctx);
      const running = projects.find((p) => p.running && p.running.length);
      let project = running ? running.root : ctx.selectedProject;
      let session = running ? running.running[running.running.length - 1] : null;
      if (!project && projects.length) project = projects[0].root;
      if (project && !session) {
        const sessions = await sessionsOf(project).catch(() => []);
        session = sessions.length ? sessions[0].id : null;
      }
      if (gone) return;
      if (project && session) {
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
        project ? h("section.panel", {}, h("h2", {}, project), startForm(ctx, project)) : h("a.btn.primary", { href: "#/project" }, "Register a project"),
      );
    } catch (err) {
      if (!gone) replace(el, errorBox(err, "Cannot load the dashboard"));
    }
  })();
  return () => {
    gone = true;
    if (view) view.destroy();
  };
}
