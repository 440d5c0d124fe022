// The project editor: project.yaml and tuning.yaml as forms, saved through
// project_register (which validates everything first and writes nothing on an error);
// the server's messages are shown beside the field they name. Tunable suggestions go
// through an explicit review step before anything is written.

import { call } from "../api.js";
import { fmtValue, h, replace } from "../dom.js";
import { errorBox, forgetProject } from "./common.js";

const NEW_PROJECT = {
  version: 1,
  data: [],
  launch: { environment: "system", env_name: null, command: ["python", "train.py"], baseline_config: null, args: [], arg_style: "space" },
  run: { max_rounds: 3, timeout_minutes: 60, fixed_args: [], max_session_minutes: null },
  output: { config_path: null },
  metrics: { specs: [], prompt: "" },
  advanced: { security_mode: "guarded", working_dir: "." },
};

export function mountProject(el, ctx, { root }) {
  const editor = new ProjectEditor(el, ctx, root || ctx.selectedProject || "");
  return () => editor.destroy();
}

/** "3" -> 3, "true" -> true, "a" -> "a", "" -> null: a YAML-ish scalar from a text field. */
export function parseScalar(text) {
  const t = String(text).trim();
  if (t === "") return null;
  if (t === "true" || t === "false") return t === "true";
  if (/^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/.test(t)) return Number(t);
  return t;
}

function get(obj, path) {
  return path.split(".").reduce((o, k) => (o == null ? undefined : o[k]), obj);
}

function set(obj, path, value) {
  const keys = path.split(".");
  const last = keys.pop();
  const target = keys.reduce((o, k) => (o[k] ??= {}), obj);
  target[last] = value;
}

class ProjectEditor {
  constructor(el, ctx, root) {
    this.el = el;
    this.ctx = ctx;
    this.root = root;
    this.inputs = new Map(); // error path -> input
    this.rootInput = h("input", { type: "text", value: root, placeholder: "/absolute/path/to/project", "aria-label": "Project folder", size: 48 });
    this.status = h("div.form-out");
    this.body = h("div.editor");
    replace(
      el,
      h(
        "div.page-head",
        {},
        h("div", {}, h("h1", {}, "Project"), h("p.muted", {}, "Edit .trainee/project.yaml and .trainee/tuning.yaml; the CLI uses the same files.")),
      ),
      h(
        "form.row.root-form",
        { onsubmit: (e) => { e.preventDefault(); this.open(this.rootInput.value.trim()); } },
        this.rootInput,
        h("button.btn", { type: "submit" }, "Open"),
      ),
      this.status,
      this.body,
    );
    if (root) this.open(root);
  }

  destroy() {}

  async open(root) {
    if (!root.startsWith("/")) {
      replace(this.status, errorBox({ message: "give the absolute path of the project folder" }, "Cannot open"));
      return;
    }
    this.root = root.replace(/\/+$/, "") || "/";
    if (location.hash !== `#/project?root=${encodeURIComponent(this.root)}`) {
      history.replaceState(null, "", `#/project?root=${encodeURIComponent(this.root)}`);
    }
    replace(this.status, h("span.muted", {}, "Loading…"));
    try {
      const p = await call("project_get", { project_root: this.root });
      this.model = { project: p.project, tuning: p.tuning };
      this.registered = true;
      replace(this.status);
    } catch (err) {
      this.model = { project: structuredClone(NEW_PROJECT), tuning: { version: 1, params: [] } };
      this.registered = false;
      replace(
        this.status,
        errorBox(err, "Not loaded"),
        h(
          "p",
          {},
          "Fill in the form and save to register the project, or let trainee look at it first: ",
          h("button.btn.small", { type: "button", onclick: () => this.init() }, "Detect with trainee init"),
        ),
      );
    }
    this.ctx.rememberProject(this.root);
    this.render();
  }

  async init() {
    replace(this.status, h("span.muted", {}, "Running trainee init…"));
    try {
      await call("project_init", { project_root: this.root, skip_provider_test: true });
      this.ctx.toast("trainee init wrote .trainee/: review it below", "ok");
      await this.open(this.root);
    } catch (err) {
      replace(this.status, errorBox(err, "init failed"));
    }
  }

  // -- form building -----------------------------------------------------------------------

  render() {
    this.inputs.clear();
    const p = this.model.project;
    this.saveOut = h("div.form-out");
    replace(
      this.body,
      h(
        "form.project-form",
        { onsubmit: (e) => { e.preventDefault(); this.save(); }, novalidate: true },
        section(
          "Launch",
          this.text("Command (one argument per line)", "launch.command", { lines: true }),
          this.select("Environment", "launch.environment", ["system", "uv", "venv", "conda"]),
          this.text("Environment name (conda/venv)", "launch.env_name"),
          this.text("Baseline config (path in the project)", "launch.baseline_config"),
          this.select("Config style (hydra: a @hydra.main app)", "launch.config_style", ["flag", "hydra"]),
          this.select("Argument style", "launch.arg_style", ["space", "equals"]),
        ),
        section(
          "Data",
          this.rows("data", p.data, [["path", "Path"], ["flag", "Flag"]], { path: "", flag: null }),
        ),
        section(
          "Run",
          this.number("Max rounds", "run.max_rounds", { int: true }),
          this.number("Round timeout (minutes)", "run.timeout_minutes"),
          this.number("Session budget (minutes, empty: none)", "run.max_session_minutes"),
          h("h4", {}, "Fixed arguments (same in every round)"),
          this.rows("run.fixed_args", p.run.fixed_args, [["flag", "Flag"], ["value", "Value", "scalar"]], { flag: "--", value: null }),
          this.text("Round config path (output.config_path)", "output.config_path"),
          this.text("Outputs folder flag (output.flag, e.g. -o)", "output.flag"),
        ),
        section(
          "Metrics",
          this.rows(
            "metrics.specs",
            p.metrics.specs,
            [
              ["name", "Name"],
              ["source", "Source", ["stdout_regex", "log_regex", "log_file_regex", "jsonl", "wandb_summary"]],
              ["goal", "Goal", ["min", "max"]],
              ["required", "Required", "bool"],
              ["key_or_pattern", "Key or pattern", null, 1],
              ["path", "Path", null, 1],
            ],
            { name: "", source: "stdout_regex", key_or_pattern: "", path: null, goal: "min", required: false },
          ),
          this.text("How to read the metrics (prompt)", "metrics.prompt", { area: true }),
        ),
        section(
          "Advanced",
          this.select("Security mode", "advanced.security_mode", ["guarded", "unsafe"]),
          this.text("Working folder", "advanced.working_dir"),
          this.text("Tuning advice for the agent", "advanced.tuning_prompt", { area: true }),
          this.text("Extra log paths (one per line)", "advanced.log_paths", { lines: true }),
          this.check("W&B enabled", "advanced.wandb_enabled"),
          this.check("Network inside the sandbox", "advanced.network"),
          this.number("Stop grace (seconds)", "advanced.stop_grace_sec"),
        ),
        section(
          "Tunable parameters (tuning.yaml)",
          h("p.muted", {}, "The only parameters the agent may change, with their bounds."),
          this.rows(
            "params",
            this.model.tuning.params,
            [
              ["name", "Name"],
              ["flag", "Flag"],
              ["type", "Type", ["float", "int", "bool", "choice"]],
              ["default", "Default", "scalar"],
              ["min_value", "Min", "number"],
              ["max_value", "Max", "number"],
              ["log", "Log", "bool"],
              ["config_path", "Config path", null, 1],
              ["choices", "Choices (comma)", "list", 1],
              ["description", "Description", null, 2],
            ],
            { name: "", flag: null, config_path: null, type: "float", default: null, min_value: null, max_value: null, choices: null, log: false, description: "" },
            { root: this.model.tuning },
          ),
          this.suggestions(),
        ),
        h(
          "div.save-bar",
          {},
          h("button.btn.primary", { type: "submit" }, this.registered ? "Save project" : "Register project"),
          h("button.btn", { type: "button", onclick: () => this.doctor() }, "Doctor"),
          h("button.btn", { type: "button", onclick: () => this.dryRun() }, "Dry run"),
          this.saveOut,
        ),
      ),
      this.checkOut = h("div.check-out"),
    );
  }

  /** A labelled input with its error line (outside the label, so the name stays short). */
  label(text, input, path) {
    const id = `f-${path.replace(/[^\w]/g, "-")}`;
    const err = h("div.field-error", { hidden: true, id: `${id}-err` });
    input.id = id;
    input.dataset.path = path;
    input.setAttribute("aria-describedby", err.id);
    this.inputs.set(path, { input, err });
    return h("div.field", {}, h("label.field-label", { for: id }, text), input, err);
  }

  text(label, path, { lines = false, area = false } = {}) {
    const value = get(this.model.project, path);
    const shown = lines ? (value || []).join("\n") : value ?? "";
    const input = lines || area ? h("textarea", { rows: lines ? 3 : 2, value: shown }) : h("input", { type: "text", value: shown });
    input.addEventListener("input", () => {
      const v = input.value;
      set(this.model.project, path, lines ? v.split("\n").map((s) => s.trim()).filter(Boolean) : v.trim() === "" && !area ? null : v);
    });
    return this.label(label, input, path);
  }

  number(label, path, { int = false } = {}) {
    const input = h("input", { type: "number", step: int ? "1" : "any", value: get(this.model.project, path) ?? "" });
    input.addEventListener("input", () => set(this.model.project, path, input.value === "" ? null : Number(input.value)));
    return this.label(label, input, path);
  }

  select(label, path, options) {
    const input = h("select", {}, options.map((o) => h("option", { value: o }, o)));
    input.value = get(this.model.project, path) ?? options[0];
    input.addEventListener("change", () => set(this.model.project, path, input.value));
    return this.label(label, input, path);
  }

  check(label, path) {
    const input = h("input", { type: "checkbox", checked: Boolean(get(this.model.project, path)) });
    input.addEventListener("change", () => set(this.model.project, path, input.checked));
    return this.label(label, input, path);
  }

  /** An editable table of objects (data, fixed args, metric specs, params). A column
   * with a line number (its 4th entry) goes on that line under its row, full width, so
   * long values (patterns, descriptions) are not cut in a narrow cell. */
  rows(path, items, columns, blank, { root } = {}) {
    const inline = columns.filter((c) => !c[3]);
    const lines = [...new Set(columns.map((c) => c[3]).filter(Boolean))].sort();
    const holder = h("div.rows");
    const list = items || [];
    if (!root) set(this.model.project, path, list);
    else root[path] = list;
    const draw = () => {
      const body = list.flatMap((item, i) => [
        h(
          `tr${lines.length ? ".has-below" : ""}`,
          {},
          inline.map(([key, label, kind]) => h("td", {}, this.cell(item, key, label, kind, `${path}[${i}].${key}`))),
          h("td", {}, h("button.link", { type: "button", "aria-label": `remove row ${i + 1}`, onclick: () => { list.splice(i, 1); draw(); } }, "Remove")),
        ),
        ...lines.map((line) =>
          h(
            "tr.below",
            {},
            h(
              "td",
              { colspan: String(inline.length + 1) },
              h(
                "div.below-fields",
                {},
                columns
                  .filter((c) => c[3] === line)
                  .map(([key, label, kind]) => h("label.below-field", {}, h("span.muted", {}, label), this.cell(item, key, label, kind, `${path}[${i}].${key}`))),
              ),
            ),
          ),
        ),
      ]);
      replace(
        holder,
        h(
          "div.table-wrap",
          {},
          h(
            "table.edit",
            {},
            h("thead", {}, h("tr", {}, inline.map(([, label]) => h("th", { scope: "col" }, label)), h("th", {}, ""))),
            h("tbody", {}, body.length ? body : h("tr", {}, h("td.muted", { colspan: String(inline.length + 1) }, "None."))),
          ),
        ),
        h("button.btn.small", { type: "button", onclick: () => { list.push(structuredClone(blank)); draw(); } }, "Add row"),
        h("div.field-error", { hidden: true, dataset: { rows: path } }),
      );
    };
    draw();
    return holder;
  }

  cell(item, key, label, kind, path) {
    let input;
    if (Array.isArray(kind)) {
      input = h("select", { "aria-label": label }, kind.map((o) => h("option", { value: o }, o)));
      input.value = item[key] ?? kind[0];
      input.addEventListener("change", () => (item[key] = input.value));
    } else if (kind === "bool") {
      input = h("input", { type: "checkbox", "aria-label": label, checked: Boolean(item[key]) });
      input.addEventListener("change", () => (item[key] = input.checked));
    } else {
      const shown = kind === "list" ? (item[key] || []).map(fmtValue).join(", ") : item[key] === null || item[key] === undefined ? "" : String(item[key]);
      input = h("input", { type: "text", "aria-label": label, value: shown, size: kind ? 8 : 14 });
      input.addEventListener("input", () => {
        const v = input.value;
        if (kind === "number") item[key] = v.trim() === "" ? null : Number(v);
        else if (kind === "scalar") item[key] = parseScalar(v);
        else if (kind === "list") item[key] = v.trim() === "" ? null : v.split(",").map(parseScalar).filter((x) => x !== null);
        else item[key] = v.trim() === "" && key !== "name" && key !== "description" ? null : v;
      });
    }
    input.dataset.path = path;
    const err = h("div.field-error", { hidden: true });
    this.inputs.set(path, { input, err });
    return h("div.cell", {}, input, err);
  }

  // -- saving ------------------------------------------------------------------------------

  clearErrors() {
    for (const { input, err } of this.inputs.values()) {
      input.removeAttribute("aria-invalid");
      err.hidden = true;
      err.textContent = "";
    }
  }

  showError(err) {
    const field = String(err.field || "").replace(/^\$\./, "");
    let target = null;
    for (let path = field; path; ) {
      target = this.inputs.get(path);
      const parent = path.replace(/(\.[^.[\]]*|\[\d+\])$/, "");
      if (target || parent === path) break;
      path = parent;
    }
    if (target) {
      target.input.setAttribute("aria-invalid", "true");
      target.err.hidden = false;
      target.err.textContent = err.details.reason || err.message;
      target.input.scrollIntoView({ block: "center" });
      target.input.focus();
    }
    replace(this.saveOut, errorBox(err, "Not saved (nothing was written)"));
  }

  async save() {
    this.clearErrors();
    replace(this.saveOut, h("span.muted", {}, "Validating and saving…"));
    try {
      const params = { ...this.model.project, tuning: this.model.tuning, project_root: this.root };
      const p = await call("project_register", params);
      this.model = { project: p.project, tuning: p.tuning };
      this.registered = true;
      forgetProject(this.root);
      this.render();
      replace(this.saveOut, h("span.ok", { role: "status" }, "Saved project.yaml and tuning.yaml."));
      replace(this.status);
      this.ctx.selectProject(this.root);
      this.ctx.refreshSidebar();
    } catch (err) {
      this.showError(err);
    }
  }

  async doctor() {
    replace(this.checkOut, h("p.muted", {}, "Checking…"));
    try {
      const report = await call("project_doctor", { project_root: this.root, skip_provider_test: false });
      const checks = report.checks || [];
      replace(
        this.checkOut,
        h("h2", {}, "Doctor"),
        h(
          "table.checks",
          {},
          h("tbody", {}, checks.map((c) => h("tr", {}, h("td", {}, h(`span.badge.badge-${{ pass: "ok", warn: "warn", fail: "bad" }[c.status] || "muted"}`, {}, c.status)), h("td", {}, c.name), h("td", {}, c.detail || "", c.fix ? h("div.hint", {}, c.fix) : null)))),
        ),
      );
    } catch (err) {
      replace(this.checkOut, errorBox(err, "Doctor failed"));
    }
  }

  async dryRun() {
    replace(this.checkOut, h("p.muted", {}, "Rendering the baseline command…"));
    try {
      const d = await call("loop_dry_run", { project_root: this.root });
      replace(
        this.checkOut,
        h("h2", {}, "Dry run"),
        h("p", {}, `mode ${d.security_mode} · in ${d.cwd}`),
        h("pre", {}, d.command),
        d.config_diff ? h("pre", {}, d.config_diff) : null,
      );
    } catch (err) {
      replace(this.checkOut, errorBox(err, "Dry run failed"));
    }
  }

  // -- tunables suggestions with a review step ------------------------------------------------

  suggestions() {
    const box = h("div.suggest");
    const start = h(
      "button.btn",
      {
        type: "button",
        onclick: async () => {
          replace(box, h("p.muted", {}, "Looking at the entrypoint and the baseline config…"));
          try {
            const res = await call("tunables_discover", { project_root: this.root });
            this.pick(box, res);
          } catch (err) {
            replace(box, errorBox(err, "No suggestions"));
          }
        },
      },
      "Suggest parameters",
    );
    return h("div", {}, start, box);
  }

  pick(box, res) {
    if (!res.suggestions.length) {
      replace(box, h("p.muted", {}, "No suggestion: nothing looked like a hyperparameter."), notes(res));
      return;
    }
    const existing = new Set(this.model.tuning.params.map((p) => p.name));
    const boxes = res.suggestions.map((s) => h("input", { type: "checkbox", checked: !existing.has(s.name), "aria-label": `select ${s.name}` }));
    const review = h("button.btn.primary", { type: "button", onclick: () => this.review(box, res, res.suggestions.filter((_, i) => boxes[i].checked)) }, "Review selected");
    replace(
      box,
      h("h4", {}, "Suggestions (nothing is written yet)"),
      h(
        "div.table-wrap",
        {},
        h(
          "table.edit",
          {},
          h("thead", {}, h("tr", {}, ["", "Name", "From", "Type", "Default", "Range", "Why"].map((t) => h("th", {}, t)))),
          h(
            "tbody",
            {},
            res.suggestions.map((s, i) =>
              h(
                "tr",
                {},
                h("td", {}, boxes[i]),
                h("td", {}, s.name, existing.has(s.name) ? h("div.muted.small", {}, "already listed") : null),
                h("td", {}, s.flag || s.config_path || s.override || s.source),
                h("td", {}, s.type),
                h("td.num", {}, fmtValue(s.default)),
                h("td.num", {}, s.choices ? s.choices.map(fmtValue).join(" | ") : `${fmtValue(s.min_value)} … ${fmtValue(s.max_value)}${s.log ? " (log)" : ""}`),
                h("td.text", {}, s.reason),
              ),
            ),
          ),
        ),
      ),
      notes(res),
      review,
    );
  }

  review(box, res, chosen) {
    if (!chosen.length) return;
    const names = new Set(this.model.tuning.params.map((p) => p.name));
    const toParam = (s) => ({
      name: s.name,
      flag: s.flag ?? null,
      config_path: s.config_path ?? null,
      override: s.override ?? null,
      type: s.type,
      default: s.source === "config" ? null : s.default ?? null,
      min_value: s.min_value ?? null,
      max_value: s.max_value ?? null,
      choices: s.choices ?? null,
      log: Boolean(s.log),
      description: s.description || "",
    });
    const out = h("div.form-out");
    replace(
      box,
      h("h4", {}, "Review: tuning.yaml after saving"),
      h(
        "ul.review",
        {},
        chosen.map((s) =>
          h(
            "li",
            {},
            h("strong", {}, names.has(s.name) ? "replace " : "add "),
            h("code", {}, s.name),
            ` ${s.type}`,
            s.flag ? ` via ${s.flag}` : s.config_path ? ` at ${s.config_path}` : "",
            s.choices ? ` one of ${s.choices.map(fmtValue).join(", ")}` : ` in [${fmtValue(s.min_value)}, ${fmtValue(s.max_value)}]${s.log ? " log scale" : ""}`,
          ),
        ),
      ),
      h("p.muted", {}, `${this.model.tuning.params.length - chosen.filter((s) => names.has(s.name)).length} listed parameters stay as they are. Saving validates both files first.`),
      h(
        "div.row",
        {},
        h("button.btn", { type: "button", onclick: () => this.pick(box, res) }, "Back"),
        h(
          "button.btn.primary",
          {
            type: "button",
            onclick: async () => {
              const params = this.model.tuning.params.filter((p) => !chosen.some((s) => s.name === p.name));
              this.model.tuning.params = [...params, ...chosen.map(toParam)];
              await this.save();
            },
          },
          "Save to tuning.yaml",
        ),
      ),
      out,
    );
  }
}

function section(title, ...children) {
  return h("fieldset.section", {}, h("legend", {}, title), children);
}

function notes(res) {
  return (res.notes || []).length ? h("ul.muted.small", {}, res.notes.map((n) => h("li", {}, n))) : null;
}
