""".trainee/context.md: trainee's written understanding of the project, from a static read.

Built from the README (a bounded excerpt), the entrypoint's docstring and options, the
keys of the baseline config (or of the top detected config file, labelled as a
suggestion), the data folders and the environment. Every part is size-capped so a
huge README or config cannot blow up the decision prompt.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainee.atomic import write_atomic
from trainee.discovery.scan import Discovery, Entrypoint, entrypoint_for_command
from trainee.errors import ConfigError
from trainee.spec import ProjectFileSpec

__all__ = [
    "MAX_CONTEXT_CHARS",
    "build_context",
    "write_context",
    "write_context_if_missing",
]

MAX_README_CHARS = 4_000
MAX_DOC_CHARS = 1_500
MAX_OPTIONS = 60
MAX_CONFIG_KEYS = 80
MAX_CONTEXT_CHARS = 32_000
_README_READ = 256 << 10


def build_context(
    root: Path | str, discovery: Discovery, project_file: ProjectFileSpec | None = None
) -> str:
    """The markdown text of context.md."""
    root_path = Path(root).resolve()
    chosen = _chosen(root_path, discovery, project_file)
    out: list[str] = [
        "# Project context",
        "",
        "_Written by trainee from a static read of the project (no project code was run). "
        "Edit it freely: trainee keeps an existing context.md, and it goes into every "
        "decision prompt._",
        "",
    ]
    readme = _readme_excerpt(root_path, discovery.readme)
    if readme:
        out += [f"## From {discovery.readme}", "", readme, ""]
    out += ["## Environment", "", f"- `{discovery.environment}`: {discovery.environment_reason}"]
    if discovery.env_name:
        out.append(f"- conda environment: `{discovery.env_name}`")
    out.append("")
    if project_file is not None:
        out += _launch_section(project_file)
    if chosen is not None:
        out += _entrypoint_section(chosen, is_chosen=True)
    others = [e for e in discovery.entrypoints if chosen is None or e.path != chosen.path][:2]
    for ep in others:
        out += _entrypoint_section(ep, is_chosen=False)
    out += _config_section(root_path, discovery, project_file)
    if discovery.data_dirs:
        out += ["## Data", ""]
        out += [f"- `{d.path}/`: {d.reason}" for d in discovery.data_dirs]
        out.append("")
    text = "\n".join(out).rstrip("\n") + "\n"
    if len(text) > MAX_CONTEXT_CHARS:
        text = text[:MAX_CONTEXT_CHARS].rsplit("\n", 1)[0] + "\n\n_(cut to stay short)_\n"
    return text


def write_context(
    root: Path | str, discovery: Discovery, project_file: ProjectFileSpec | None = None
) -> Path:
    """(Re)write ``.trainee/context.md``; returns its path."""
    path = Path(root).resolve() / ".trainee" / "context.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, build_context(root, discovery, project_file))
    return path


def write_context_if_missing(
    root: Path | str, discovery: Discovery, project_file: ProjectFileSpec | None = None
) -> bool:
    """Write ``.trainee/context.md`` only when it does not exist; True when written."""
    path = Path(root).resolve() / ".trainee" / "context.md"
    if path.exists() or path.is_symlink():
        return False
    write_context(root, discovery, project_file)
    return True


# -- parts ---------------------------------------------------------------------------------


def _chosen(
    root: Path, discovery: Discovery, project_file: ProjectFileSpec | None
) -> Entrypoint | None:
    if project_file is not None:
        found = entrypoint_for_command(
            root, discovery, project_file.launch.command or (), project_file.advanced.working_dir
        )
        if found is not None:
            return found
    return discovery.best


def _readme_excerpt(root: Path, name: str | None) -> str:
    if name is None:
        return ""
    try:
        with (root / name).open("rb") as fh:
            raw = fh.read(_README_READ)
    except OSError:
        return ""
    text = raw.decode("utf-8", "replace").replace("\r\n", "\n").strip()
    if not text:
        return ""
    cut = len(text) > MAX_README_CHARS
    if cut:
        head = text[:MAX_README_CHARS]
        para = head.rfind("\n\n")
        text = head[:para] if para > MAX_README_CHARS // 2 else head
    if name.lower().endswith(".md"):
        lines = []
        fenced = False
        for line in text.split("\n"):
            if line.lstrip().startswith("```"):
                fenced = not fenced
            if not fenced and line.startswith("#"):
                line = "##" + line
            lines.append(line)
        if fenced:
            lines.append("```")
        text = "\n".join(lines)
    else:
        text = "```text\n" + text.replace("```", "'''") + "\n```"
    return text + ("\n\n_(excerpt)_" if cut else "")


def _launch_section(project: ProjectFileSpec) -> list[str]:
    launch = project.launch
    command = " ".join(launch.command) if launch.command else project.advanced.shell_command
    out = ["## How trainee runs it", "", f"- command: `{command}`"]
    if launch.baseline_config:
        out.append(f"- baseline config: `{launch.baseline_config}` (passed as `--config <copy>`)")
    for a in launch.args:
        out.append(f"- constant argument: `{a.flag}` = `{a.value}`")
    for d in project.data:
        flag = f" via `{d.flag}`" if d.flag else ""
        out.append(f"- data: `{d.path}`{flag}")
    for a in project.run.fixed_args:
        out.append(f"- fixed every round: `{a.flag}` = `{a.value}`")
    if project.output.config_path:
        out.append(f"- output folder key: `{project.output.config_path}` (set by trainee)")
    out.append("")
    return out


def _cell(value: Any, limit: int = 120) -> str:
    text = " ".join(str(value).split())
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return text.replace("|", "\\|")


def _entrypoint_section(ep: Entrypoint, *, is_chosen: bool) -> list[str]:
    label = "Entrypoint" if is_chosen else "Other candidate entrypoint"
    out = [f"## {label}: `{ep.path}` ({ep.framework})", "", f"_{ep.reason}._", ""]
    if ep.docstring:
        doc = ep.docstring
        if len(doc) > MAX_DOC_CHARS:
            doc = doc[:MAX_DOC_CHARS].rsplit("\n", 1)[0] + "\n..."
        out += ["```text", doc.replace("```", "'''"), "```", ""]
    if ep.options and is_chosen:
        source = f" (read from `{ep.options_from}`)" if ep.options_from else ""
        out += [f"Options{source}:", "", "| option | type | default | help |", "|---|---|---|---|"]
        for o in ep.options[:MAX_OPTIONS]:
            default = o.default if o.default is not None else (o.default_source or "")
            kind: str = o.type or "custom"
            if o.choices:
                kind += f" {o.choices}"
            out.append(
                f"| `{o.flag}` | {_cell(kind, 60)} | {_cell(default, 40)} | {_cell(o.help)} |"
            )
        if len(ep.options) > MAX_OPTIONS:
            out.append(f"| ... | | | {len(ep.options) - MAX_OPTIONS} more |")
        out.append("")
    elif ep.options:
        out += ["Options: " + ", ".join(f"`{o.flag}`" for o in ep.options[:20]), ""]
    if ep.hydra_config_path is not None or ep.hydra_config_name is not None:
        out += [
            f"Hydra: config_path `{ep.hydra_config_path}`, config_name "
            f"`{ep.hydra_config_name}`; values change through `key=value` overrides.",
            "",
        ]
    return out


def _config_section(root: Path, discovery: Discovery, project: ProjectFileSpec | None) -> list[str]:
    baseline = project.launch.baseline_config if project is not None else None
    if baseline:
        rel, title = baseline, f"## Baseline config: `{baseline}`"
    else:
        first = next((c for c in discovery.config_files if c.kind in ("yaml", "json")), None)
        if first is None:
            return []
        rel = first.path
        title = f"## Config file `{rel}` (detected; not chosen as the baseline)"
    from trainee.spec.yamlio import YamlDocument

    try:
        data, _ = YamlDocument.load(root / rel).to_plain()
    except ConfigError as exc:
        return [title, "", f"_Could not be read: {exc}_", ""]
    leaves = list(_flat(data, ""))
    out = [title, "", "| key | value |", "|---|---|"]
    for key, value in leaves[:MAX_CONFIG_KEYS]:
        out.append(f"| `{_cell(key, 80)}` | {_cell(value, 60)} |")
    if len(leaves) > MAX_CONFIG_KEYS:
        out.append(f"| ... | {len(leaves) - MAX_CONFIG_KEYS} more keys |")
    others = [c.path for c in discovery.config_files if c.path != rel][:10]
    if others:
        out += ["", "Other config files found: " + ", ".join(f"`{p}`" for p in others)]
    out.append("")
    return out


def _flat(node: Any, prefix: str) -> Any:
    if isinstance(node, dict) and node:
        for key, value in node.items():
            yield from _flat(value, f"{prefix}.{key}" if prefix else str(key))
    elif prefix:
        yield prefix, node
