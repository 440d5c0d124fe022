// The projects sidebar: each project with its sessions (status, stop reason, round n/N,
// best metric vs baseline), a start form, and a field to add a project by path.

import { call } from "../api.js";
import { h, replace } from "../dom.js";
import { sessionActive } from "../states.js";
import { bestVsBaseline, errorBox, loadProjects, sessionsOf, startForm, statusLine } from "./common.js";

const REFRESH_MS = 5000;
const SESSIONS_SHOWN = 6;

export class Sidebar {
  constructor(el, ctx) {
    this.el = el;
    this.ctx = ctx;
    this.list = h("div.projects");
    this.current = { project: null, session: null };
    this.busy = false;
    this.cards = new Map();
    replace(el, h("div.side-head", {}, h("h2", {}, "Projects")), this.list, this.addForm());
    setInterval(() => !document.hidden && this.refresh(), REFRESH_MS);
  }

  addForm() {
    const input = h("input", { type: "text", placeholder: "/absolute/path/to/project", "aria-label": "Project folder", required: true });
    const out = h("div.form-out");
    return h(
      "details.add-project",
      {},
      h("summary", {}, "Add a project"),
      h(
        "form",
        {
          onsubmit: async (e) => {
            e.preventDefault();
            const root = input.value.trim().replace(/\/+$/, "");
            if (!root.startsWith("/")) {
              out.replaceChildren(errorBox({ message: "give the absolute path of the project folder" }, "Not added"));
              return;
            }
            try {
              await call("project_get", { project_root: root });
              out.replaceChildren();
            } catch (err) {
              out.replaceChildren(
                errorBox(err, "Not ready"),
                h("a", { href: `#/project?root=${encodeURIComponent(root)}` }, "Register it in the project editor"),
              );
            }
            this.ctx.selectProject(root);
            input.value = "";
            this.refresh();
          },
        },
        h("div.row", {}, input, h("button.btn", { type: "submit" }, "Add")),
        out,
      ),
    );
  }

  highlight(project, session) {
    this.current = { project, session };
    for (const el of this.list.querySelectorAll("[data-session]")) {
      const on = el.dataset.project === project && el.dataset.session === session;
      el.classList.toggle("current", on);
      if (on) el.setAttribute("aria-current", "page");
      else el.removeAttribute("aria-current");
    }
  }

  async refresh() {
    if (this.busy) return;
    this.busy = true;
    try {
      const projects = await loadProjects(this.ctx);
      const cards = await Promise.all(projects.map((p) => this.card(p)));
      if (!cards.length) {
        replace(this.list, h("p.muted", {}, "No project yet: add one below, or run `trainee webui /path/to/project`."));
      } else {
        replace(this.list, cards); // the same nodes: open forms keep what was typed
      }
      this.highlight(this.current.project, this.current.session);
    } catch (err) {
      replace(this.list, errorBox(err, "Projects unavailable"));
    } finally {
      this.busy = false;
    }
  }

  /** The card of a project, built once and updated in place. */
  async card(project) {
    const root = project.root;
    let sessions = [];
    let problem = null;
    try {
      sessions = await sessionsOf(root);
    } catch (err) {
      problem = err;
    }
    let card = this.cards.get(root);
    if (!card) {
      card = this.buildCard(project);
      this.cards.set(root, card);
    }
    const running = sessions.some((s) => sessionActive(s.status));
    card.el.classList.toggle("selected", this.ctx.selectedProject === root);
    card.dot.hidden = !running;
    // the bound project and one with a running session stay on the daemon's list
    card.remove.hidden = Boolean(project.bound) || (project.running || []).length > 0 || running;
    card.start.hidden = running;
    if (running) card.start.open = false;
    if (!sessions.length && this.ctx.selectedProject === root && !card.touched) card.start.open = true;
    replace(card.note, problem && problem.status !== 404 ? problem.message : "");
    const rows = sessions.slice(0, SESSIONS_SHOWN).map((s) =>
      h(
        "a.session-row",
        {
          href: this.ctx.sessionHash(root, s.id),
          dataset: { project: root, session: s.id },
          onclick: () => this.ctx.selectProject(root),
        },
        h("span.sid", { title: s.id }, `#${s.index}`),
        statusLine(s),
        h("span.rounds", { title: "rounds run / max rounds" }, `${s.roundCount}/${s.max_rounds}`),
        bestVsBaseline(s.bestMetric, s.baselineMetric),
      ),
    );
    replace(card.sessions, rows.length ? rows : h("p.muted.small", {}, "No session yet."));
    return card.el;
  }

  buildCard(project) {
    const root = project.root;
    const dot = h("span.dot-live", { title: "a session is running", hidden: true });
    const sessions = h("div.sessions");
    const note = h("div.muted.small");
    const start = h("details.start", {}, h("summary", {}, "Start a session"), startForm(this.ctx, root));
    const remove = h(
      "button.link",
      {
        type: "button",
        title: "take this project off the daemon's list (its files stay)",
        onclick: async () => {
          try {
            await this.ctx.forgetProject(root);
          } catch (err) {
            this.ctx.toast(`Not removed: ${err.message}`, "bad");
          }
          this.cards.delete(root);
          this.refresh();
        },
      },
      "Remove",
    );
    const card = { dot, sessions, note, start, remove, touched: false };
    start.addEventListener("toggle", () => (card.touched = true));
    card.el = h(
      "section.project-card",
      { "aria-label": `project ${project.name}` },
      h(
        "div.project-head",
        {},
        h("h3", {}, project.name, dot),
        h(
          "span.project-links",
          {},
          h("a", { href: `#/project?root=${encodeURIComponent(root)}`, title: "edit project.yaml and tuning.yaml" }, "Edit"),
          remove,
        ),
      ),
      h("div.path", { title: root }, shortPath(root)),
      note,
      sessions,
      start,
    );
    return card;
  }
}

/** The end of a long path, which is the part that tells projects apart. */
function shortPath(path, max = 44) {
  return path.length <= max ? path : `…${path.slice(path.length - max + 1)}`;
}
