// Settings: the LLM provider (keys masked, environment overrides shown, timeout,
// temperature, live test), debug recording, the global system prompt, prompt presets
// and the prompt preview. ``testOnly`` is the /llm-test page: the test runs on load.

import { call } from "../api.js";
import { fmtNum, h, replace, tag } from "../dom.js";
import { errorBox, loadProjects, sessionsOf } from "./common.js";

export function mountSettings(el, ctx, { testOnly = false }) {
  const provider = h("section.panel", { "aria-label": "LLM provider" }, h("p.muted", {}, "Loading…"));
  const test = h("section.panel", { "aria-label": "live test" });
  const parts = testOnly
    ? [provider, test]
    : [
        provider,
        test,
        h("section.panel", { "aria-label": "system prompt" }, systemPrompt(ctx)),
        h("section.panel", { "aria-label": "prompt preview" }, promptPreview(ctx)),
      ];
  replace(
    el,
    h(
      "div.page-head",
      {},
      h(
        "div",
        {},
        h("h1", {}, testOnly ? "LLM test" : "Settings"),
        h("p.muted", {}, "Saved in ~/.trainee/config.json; environment variables of the daemon take precedence."),
      ),
    ),
    parts,
  );
  renderProvider(provider, ctx);
  renderTest(test, testOnly);
  return null;
}

async function renderProvider(box, ctx) {
  let view;
  try {
    view = await call("runtime_provider_get");
  } catch (err) {
    replace(box, errorBox(err, "Cannot read the provider settings"));
    return;
  }
  const active = view.provider;
  const current = view.providers[active] || {};
  const overrides = Object.entries(view.overrides || {});
  const select = h("select", { name: "provider" }, view.available_providers.map((p) => h("option", { value: p }, p)));
  select.value = active;
  const model = h("input", { type: "text", name: "model", value: current.model || "" });
  const baseUrl = h("input", { type: "text", name: "base_url", value: current.base_url || "", placeholder: "provider default" });
  const key = h("input", { type: "password", name: "api_key", autocomplete: "off", placeholder: current.api_key_set ? `set (${current.api_key}) — leave empty to keep` : "not set" });
  const timeout = h("input", { type: "number", min: "1", step: "any", name: "llm_timeout_sec", value: view.llm_timeout_sec });
  const temperature = h("input", { type: "number", min: "0", max: "2", step: "0.05", name: "llm_temperature", value: view.llm_temperature });
  const debug = h("input", { type: "checkbox", checked: view.debug });
  const makeActive = h("input", { type: "checkbox", name: "make_active", checked: true });
  const failover = h("input", {
    type: "text",
    name: "failover",
    value: (view.failover || []).join(", "),
    placeholder: "e.g. openai_compatible, anthropic",
  });
  const out = h("div.form-out");
  select.addEventListener("change", () => {
    const p = view.providers[select.value] || {};
    model.value = p.model || "";
    baseUrl.value = p.base_url || "";
    key.placeholder = p.api_key_set ? `set (${p.api_key}) — leave empty to keep` : "not set";
    makeActive.checked = select.value === active;
  });
  debug.addEventListener("change", async () => {
    try {
      const r = await call("runtime_debug_update", { enabled: debug.checked });
      ctx.toast(`Debug recording ${r.enabled ? "on: full prompts and raw responses are kept" : "off"}`, "ok");
    } catch (err) {
      debug.checked = !debug.checked;
      ctx.toast(err.message, "bad");
    }
  });
  const form = h(
    "form.settings-form",
    {
      onsubmit: async (e) => {
        e.preventDefault();
        // "make it the active provider" unticked: save this provider as a backup
        // (failover) without switching the active one
        const fields = { model: model.value.trim(), base_url: baseUrl.value.trim() };
        if (key.value) fields.api_key = key.value;
        const update = makeActive.checked
          ? { provider: select.value, ...fields }
          : select.value === "none"
            ? {}
            : { providers: { [select.value]: fields } };
        update.failover = failover.value
          .split(",")
          .map((s) => s.trim())
          .filter(Boolean);
        if (timeout.value) update.llm_timeout_sec = Number(timeout.value);
        if (temperature.value) update.llm_temperature = Number(temperature.value);
        try {
          await call("runtime_provider_update", update);
          key.value = "";
          ctx.toast("Provider settings saved", "ok");
          renderProvider(box, ctx);
        } catch (err) {
          replace(out, errorBox(err, "Not saved"));
        }
      },
    },
    h("div.grid2", {}, field("Provider", select), field("Model", model), field("Base URL", baseUrl), field("API key", key), field("Timeout (s)", timeout), field("Temperature", temperature), field("Failover order", failover)),
    h("label.check", {}, makeActive, " Make it the active provider (unticked: save it as a backup for failover)"),
    h("label.check", {}, debug, " Debug recording (keep full prompts and raw responses)"),
    h("div.row", {}, h("button.btn.primary", { type: "submit" }, "Save provider settings")),
    out,
  );
  replace(
    box,
    h("h2", {}, "LLM provider"),
    h(
      "p",
      {},
      "Active: ",
      h("strong", {}, active),
      current.model ? ` · ${current.model}` : "",
      current.api_key_set ? ` · key ${current.api_key}` : "",
      ` · failover: ${(view.failover_order || []).join(" → ") || "none"}`,
    ),
    overrides.length
      ? h(
          "div.overrides",
          { role: "note" },
          h("strong", {}, "Environment overrides in effect"),
          h("p.muted.small", {}, "These variables of the daemon's environment win over the saved settings."),
          h("ul", {}, overrides.map(([k, v]) => h("li", {}, h("code", {}, k), " = ", h("code", {}, v)))),
        )
      : h("p.muted.small", {}, "No environment override: the saved settings apply."),
    form,
  );
}

function field(label, input) {
  return h("label.field", {}, h("span.field-label", {}, label), input);
}

function renderTest(box, auto) {
  const out = h("div.test-out", { role: "status" });
  const run = async () => {
    button.disabled = true;
    replace(out, h("span.muted", {}, "Sending a tiny real request…"));
    try {
      const r = await call("llm_test");
      replace(
        out,
        r.ok
          ? h(
              "div.ok-box",
              {},
              tag("ok", "ok"),
              ` ${r.provider} · ${r.model} answered a structured request (${r.response_format}) in ${fmtNum(r.latency_sec, 3)} s`,
              r.refused_formats && r.refused_formats.length ? h("div.muted.small", {}, `refused: ${r.refused_formats.join(", ")}`) : null,
              r.reply ? h("div.muted.small", {}, `reply: ${r.reply}`) : null,
            )
          : h("div.error-box", {}, tag("bad", "test failed"), ` ${r.provider}${r.model ? ` · ${r.model}` : ""}: ${r.error}`),
      );
    } catch (err) {
      replace(out, errorBox(err, "Test failed"));
    } finally {
      button.disabled = false;
    }
  };
  const button = h("button.btn", { type: "button", onclick: run }, "Run live test");
  replace(box, h("h2", {}, "Live test"), h("p.muted", {}, "One short structured request to the active provider, negotiated as a decision's is."), button, out);
  if (auto) run();
}

function systemPrompt(ctx) {
  const area = h("textarea.prompt-area", { rows: 12, "aria-label": "global system prompt" });
  const state = h("span.muted", {});
  const out = h("div.form-out");
  const presets = h("div.presets");
  const name = h("input", { type: "text", placeholder: "preset name", "aria-label": "preset name", maxlength: "100" });
  const load = async () => {
    try {
      const r = await call("runtime_system_prompt_get");
      area.value = r.prompt;
      state.textContent = r.is_default ? "(the default)" : "(customised)";
    } catch (err) {
      replace(out, errorBox(err, "Cannot read the system prompt"));
    }
  };
  const save = async (prompt) => {
    try {
      const r = await call("runtime_system_prompt_update", { prompt });
      area.value = r.prompt;
      state.textContent = r.is_default ? "(the default)" : "(customised)";
      replace(out, h("span.ok", {}, "Saved: the next decisions use it."));
    } catch (err) {
      replace(out, errorBox(err, "Not saved"));
    }
  };
  const listPresets = async () => {
    try {
      const r = await call("prompt_presets_list");
      const entries = Object.entries(r.presets);
      replace(
        presets,
        entries.length
          ? h(
              "ul.preset-list",
              {},
              entries.map(([n, p]) =>
                h(
                  "li",
                  {},
                  h("strong", {}, n),
                  h("span.muted", {}, ` ${p.kind} · ${p.prompt.length} characters `),
                  h("button.btn.small", { type: "button", onclick: () => { area.value = p.prompt; replace(out, h("span.muted", {}, `Loaded “${n}” into the editor: save to apply it.`)); } }, "Load"),
                  h("button.btn.small", { type: "button", onclick: () => save(p.prompt) }, "Apply"),
                ),
              ),
            )
          : h("p.muted.small", {}, "No preset saved yet."),
      );
    } catch (err) {
      replace(presets, errorBox(err, "Presets unavailable"));
    }
  };
  load();
  listPresets();
  return h(
    "div",
    {},
    h("h2", {}, "Global decision system prompt ", state),
    area,
    h(
      "div.row",
      {},
      h("button.btn.primary", { type: "button", onclick: () => save(area.value) }, "Save prompt"),
      h("button.btn", { type: "button", onclick: () => save("") }, "Restore default"),
    ),
    out,
    h("h3", {}, "Presets"),
    presets,
    h(
      "form.row",
      {
        onsubmit: async (e) => {
          e.preventDefault();
          try {
            await call("prompt_presets_save", { name: name.value.trim(), prompt: area.value, kind: "system" });
            ctx.toast(`Preset “${name.value.trim()}” saved`, "ok");
            name.value = "";
            listPresets();
          } catch (err) {
            replace(out, errorBox(err, "Preset not saved"));
          }
        },
      },
      name,
      h("button.btn", { type: "submit" }, "Save editor text as preset"),
    ),
  );
}

function promptPreview(ctx) {
  const project = h("select", { "aria-label": "project" });
  const session = h("select", { "aria-label": "session" }, h("option", { value: "" }, "no history (first decision)"));
  const out = h("div.preview-out");
  const fillSessions = async () => {
    replace(session, h("option", { value: "" }, "no history (first decision)"));
    if (!project.value) return;
    const list = await sessionsOf(project.value).catch(() => []);
    for (const s of list) session.append(h("option", { value: s.id }, `${s.id} (${s.status}, ${s.roundCount} rounds)`));
  };
  loadProjects(ctx)
    .then((list) => {
      replace(project, list.map((p) => h("option", { value: p.root }, p.root)));
      if (ctx.selectedProject) project.value = ctx.selectedProject;
      fillSessions();
    })
    .catch((err) => replace(out, errorBox(err, "No projects")));
  project.addEventListener("change", fillSessions);
  const show = async () => {
    replace(out, h("p.muted", {}, "Composing…"));
    try {
      const params = { project_root: project.value };
      if (session.value) params.session = session.value;
      const r = await call("prompt_preview", params);
      replace(
        out,
        h(
          "p.muted",
          {},
          `${r.policy} decision for round ${r.round} (${r.plans} plan${r.plans === 1 ? "" : "s"}) · ` +
            `${r.provider ? `${r.provider} ${r.model || ""}, ${r.response_format}` : "no provider"} · ` +
            `${r.messages.length} messages · ${r.chars.toLocaleString()} characters (nothing was sent)`,
        ),
        r.note ? h("p.muted", {}, r.note) : null,
        r.messages.map((m) => h("details.message", { open: m.role !== "system" }, h("summary", {}, `${m.role} · ${String(m.content).length.toLocaleString()} characters`), h("pre", {}, String(m.content)))),
        h("details.message", {}, h("summary", {}, "Response schema"), h("pre", {}, JSON.stringify(r.schema, null, 2))),
      );
    } catch (err) {
      replace(out, errorBox(err, "No preview"));
    }
  };
  return h(
    "div",
    {},
    h("h2", {}, "Prompt preview"),
    h("p.muted", {}, "The next decision's request exactly as the session would send it: its settings, journal, budget and response format."),
    h("div.row", {}, project, session, h("button.btn", { type: "button", onclick: show }, "Preview")),
    out,
  );
}
