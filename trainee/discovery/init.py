"""``trainee init`` and ``trainee prepare``: create and fill a project's ``.trainee/`` files.

``init_project`` writes a commented, valid project.yaml from discovery (environment,
command, data flags, fixed training limits; never tunables or output paths), an empty
tuning.yaml, context.md, a README.md saying what was detected and why, the runtime
folders and a .gitignore for them. Existing files are kept unless ``force``. Everything
is rendered and validated before the first byte is written.

``prepare_project`` validates the project, fills an empty tuning.yaml from
:mod:`trainee.discovery.tunables` and writes context.md when it is missing.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import msgspec

from trainee.discovery.context import build_context, write_context
from trainee.discovery.metrics import MetricProposal, propose_metrics, training_metric_advice
from trainee.discovery.scan import (
    Discovery,
    Entrypoint,
    discover,
    is_data_option,
    resolve_root,
)
from trainee.discovery.tunables import (
    DEFAULT_LIMIT,
    ConstraintSuggestion,
    Excluded,
    Skipped,
    Suggestion,
    apply_suggestions,
    suggest_tunables_report,
)
from trainee.errors import ConfigError
from trainee.spec import (
    ArgSpec,
    ArgStyle,
    DataSpec,
    Environment,
    LaunchSpec,
    MetricsSpec,
    ProjectFileSpec,
    RunSpec,
    TuningFileSpec,
    check_project,
    load_project,
    load_project_file,
)

__all__ = [
    "GITIGNORE",
    "InitResult",
    "PrepareResult",
    "init_project",
    "prepare_project",
]

GITIGNORE = """\
# Runtime outputs of trainee. project.yaml, tuning.yaml, context.md and README.md
# describe the project and are worth committing.
runtime.sqlite3*
artifacts/
runs/
logs/
cache/
"""

TUNING_YAML = """\
# Parameters the agent may change (a whitelist). `trainee prepare` fills an empty list
# from discovery; `trainee tunables discover` shows suggestions with their reasons.
# Review every entry: only what is listed here can change between rounds.
version: 1

params: []
"""

_RUNTIME_DIRS = ("logs", "runs", "artifacts")
_SUFFIXES_OK = (".yaml", ".yml", ".json")


class InitResult(msgspec.Struct, kw_only=True):
    """What ``trainee init`` did. Paths are relative to the project root."""

    project_root: str
    created: list[str]
    kept: list[str]
    rewritten: list[str]
    discovery: Discovery
    baseline_config: str | None = None
    entrypoint: str | None = None
    notes: list[str] = msgspec.field(default_factory=list)
    metrics: list[MetricProposal] = msgspec.field(default_factory=list)
    """The metric specs written to project.yaml (the first is the primary metric)."""


class PrepareResult(msgspec.Struct, kw_only=True):
    """What ``trainee prepare`` did with tuning.yaml and context.md."""

    project_root: str
    tuning: Literal["filled", "replaced", "kept", "empty"]
    context: Literal["created", "rewritten", "kept"]
    params_written: list[str] = msgspec.field(default_factory=list)
    suggestions: list[Suggestion] = msgspec.field(default_factory=list)
    skipped: list[Skipped] = msgspec.field(default_factory=list)
    excluded: list[Excluded] = msgspec.field(default_factory=list)
    entrypoint: str | None = None
    notes: list[str] = msgspec.field(default_factory=list)
    constraints: list[ConstraintSuggestion] = msgspec.field(default_factory=list)
    """The constraints written to tuning.yaml (with the code that says so)."""
    metrics: list[str] = msgspec.field(default_factory=list)
    """The metric specs of project.yaml, primary first (``val_loss (min)``)."""


# -- init ------------------------------------------------------------------------------------


def init_project(
    root: Path | str, *, baseline_config: str | None = None, force: bool = False
) -> InitResult:
    """Create ``<root>/.trainee/``; keep existing files unless ``force``.

    ``baseline_config`` must be an existing YAML/JSON file inside the project
    (ConfigError naming it otherwise, and nothing is written).
    """
    root_path = resolve_root(root)
    trainee_dir = root_path / ".trainee"
    _check_trainee_dir(root_path, trainee_dir)
    baseline = _check_baseline(root_path, baseline_config) if baseline_config else None
    discovery = discover(root_path)
    plan = _plan(root_path, discovery, baseline)
    project_text = _render_project_yaml(plan)
    project = _validate(root_path, project_text, plan)
    notes = list(plan.notes)

    pfile = trainee_dir / "project.yaml"
    existing_project: ProjectFileSpec | None = project
    if _exists(pfile) and not force:
        existing_project = _try_load(pfile)
        if baseline is not None:
            notes.append(
                "project.yaml already exists and was kept, so --baseline-config was not "
                "recorded; set launch.baseline_config in it or run init with --force"
            )
    files: list[tuple[str, str]] = [
        ("project.yaml", project_text),
        ("tuning.yaml", TUNING_YAML),
        ("context.md", build_context(root_path, discovery, existing_project)),
        ("README.md", _render_readme(discovery, plan)),
        (".gitignore", GITIGNORE),
    ]
    created: list[str] = []
    kept: list[str] = []
    rewritten: list[str] = []
    if not _exists(trainee_dir):
        trainee_dir.mkdir()
        created.append(".trainee/")
    for name in _RUNTIME_DIRS:
        path = trainee_dir / name
        if path.is_dir():
            kept.append(f".trainee/{name}/")
        else:
            path.mkdir(exist_ok=False)
            created.append(f".trainee/{name}/")
    from trainee.spec.yamlio import atomic_write

    for name, text in files:
        path = trainee_dir / name
        rel = f".trainee/{name}"
        if _exists(path):
            if not force:
                kept.append(rel)
                continue
            if path.is_symlink() or not path.is_file():
                raise ConfigError(
                    f"{path}: not a regular file; remove it and run init again",
                    file=str(path),
                    reason="not a regular file",
                )
            atomic_write(path, text.encode("utf-8"))
            rewritten.append(rel)
        else:
            atomic_write(path, text.encode("utf-8"))
            created.append(rel)
    return InitResult(
        project_root=str(root_path),
        created=created,
        kept=kept,
        rewritten=rewritten,
        discovery=discovery,
        baseline_config=baseline,
        entrypoint=plan.entrypoint.path if plan.entrypoint else None,
        notes=notes,
        metrics=plan.metrics,
    )


def _exists(path: Path) -> bool:
    return path.exists() or path.is_symlink()


def _check_trainee_dir(root: Path, trainee_dir: Path) -> None:
    if not _exists(trainee_dir):
        return
    if trainee_dir.is_symlink():
        try:
            target = trainee_dir.resolve(strict=True)
        except (OSError, RuntimeError):
            target = None
        if target is None or not target.is_relative_to(root):
            raise ConfigError(
                f"{trainee_dir}: a symlink that leaves the project; refusing to write there",
                file=str(trainee_dir),
                reason="symlink out of the project",
            )
    if not trainee_dir.is_dir():
        raise ConfigError(
            f"{trainee_dir}: exists and is not a directory",
            file=str(trainee_dir),
            reason="not a directory",
        )
    for name in _RUNTIME_DIRS:
        path = trainee_dir / name
        if _exists(path) and not path.is_dir():
            raise ConfigError(
                f"{path}: exists and is not a directory", file=str(path), reason="not a directory"
            )


def _check_baseline(root: Path, raw: str) -> str:
    """The baseline config as a path relative to the root, or ConfigError naming it."""

    def fail(reason: str) -> ConfigError:
        return ConfigError(
            f"--baseline-config {raw}: {reason}",
            file=raw,
            field="launch.baseline_config",
            reason=reason,
        )

    if not raw.strip() or "\x00" in raw:
        raise fail("not a usable path")
    candidate = Path(raw) if Path(raw).is_absolute() else root / raw
    lexical = Path(os.path.normpath(candidate))
    if not lexical.is_relative_to(root) and Path(raw).is_absolute():
        # the caller may spell the root through a symlink (/tmp -> /private/tmp)
        with contextlib.suppress(OSError, RuntimeError):
            lexical = lexical.parent.resolve(strict=True) / lexical.name
        candidate = lexical
    if not lexical.is_relative_to(root):
        raise fail("must point to a file inside the project")
    try:
        resolved = candidate.resolve(strict=True)
    except FileNotFoundError:
        raise fail("does not exist") from None
    except (OSError, RuntimeError) as exc:
        raise fail(f"cannot be resolved ({exc})") from None
    if not resolved.is_relative_to(root):
        raise fail("resolves (through a symlink) to a file outside the project")
    if not resolved.is_file():
        raise fail("is not a file")
    rel = lexical.relative_to(root).as_posix()
    if rel.startswith(".trainee/"):
        raise fail("must not be inside .trainee/ (each round writes its own copy there)")
    if not rel.lower().endswith(_SUFFIXES_OK):
        raise fail("must be a YAML (.yaml/.yml) or JSON (.json) file")
    from trainee.spec.yamlio import YamlDocument

    try:
        YamlDocument.load(resolved)
    except ConfigError as exc:
        raise fail(f"cannot be read as a config: {exc.reason or exc.message}") from None
    return rel


def _try_load(path: Path) -> ProjectFileSpec | None:
    from trainee.spec import load_project_file

    try:
        return load_project_file(path)
    except ConfigError:
        return None


# -- the plan of project.yaml ----------------------------------------------------------------


@dataclass
class _Item:
    value: Any
    comment: str = ""


@dataclass
class _Plan:
    entrypoint: Entrypoint | None
    environment: str
    environment_comment: str
    env_name: str | None
    command: list[str]
    command_comment: str
    baseline: str | None
    baseline_hint: str | None
    arg_style: str | None
    data: list[tuple[_Item, _Item | None]] = field(default_factory=list)
    fixed_args: list[tuple[_Item, _Item]] = field(default_factory=list)
    metric_name: str | None = None
    metrics: list[MetricProposal] = field(default_factory=list)
    output_hint: str | None = None
    notes: list[str] = field(default_factory=list)


def _plan(root: Path, d: Discovery, baseline: str | None) -> _Plan:
    ep = d.best
    notes: list[str] = []
    env, env_comment, env_name = d.environment, d.environment_reason, d.env_name
    if env == "conda" and not env_name:
        notes.append(
            "a conda environment file names no environment, so launch.environment is "
            "system; set environment: conda and env_name: <name> in project.yaml"
        )
        env, env_comment = "system", f"conda file found but unnamed ({d.environment_reason})"
    if ep is not None:
        command, command_comment = list(ep.command), ep.reason
    else:
        command, command_comment = ["python", "train.py"], "no entrypoint found: edit this"
        notes.append("no training entrypoint was found; set launch.command in project.yaml")
    plan = _Plan(
        entrypoint=ep,
        environment=env,
        environment_comment=env_comment,
        env_name=env_name if env == "conda" else None,
        command=command,
        command_comment=command_comment,
        baseline=baseline,
        baseline_hint=None,
        arg_style="equals" if ep is not None and ep.framework == "configurator" else None,
        notes=notes,
    )
    if baseline is None:
        first = next((c for c in d.config_files if c.kind in ("yaml", "json")), None)
        if first is not None:
            plan.baseline_hint = first.path
    _plan_data(root, d, ep, plan)
    if ep is not None:
        for limit in d.fixed_limit_flags:
            if limit.entrypoint != ep.path or limit.value is None:
                continue
            plan.fixed_args.append(
                (_Item(limit.flag, "training budget, the same in every round"), _Item(limit.value))
            )
        if ep.kind == "pyproject_script" and env != "uv":
            plan.notes.append(
                f"launch.command runs the installed script {ep.script_name}: install the "
                "project into the environment first (pip install -e .)"
            )
        plan.metric_name = next(
            (m for m in ep.metric_names if m not in ("loss", "total_loss")), None
        )
        _plan_metrics(root, ep, plan)
        if (
            baseline is not None
            and ep.framework != "none"
            and not any("--config" in o.flags for o in ep.options)
        ):
            plan.notes.append(
                f"{ep.path} has no --config option, but trainee passes the baseline config "
                "as --config <path>; check that the command accepts it"
            )
        if ep.hydra_config_path is not None or ep.framework == "hydra":
            plan.notes.append(
                f"{ep.path} uses Hydra: leave launch.baseline_config unset and tune with "
                "`override:` params (trainee prepare suggests them). Hydra writes to "
                "outputs/ by default, which guarded mode does not allow: add a launch.args "
                "entry such as `hydra.run.dir` under .trainee/ or use security_mode: unsafe"
            )
    if baseline is not None:
        plan.output_hint = _output_key_hint(root / baseline)
    return plan


def _plan_metrics(root: Path, ep: Entrypoint, plan: _Plan) -> None:
    """The metric specs: the primary (a validation or test metric the code prints) and
    up to two more that are not training metrics; none when only a training loss is
    printed (the built-in ``loss`` covers it)."""
    report = propose_metrics(root, ep)
    plan.notes += report.notes
    primary = report.primary
    if primary is None:
        if report.proposals:
            plan.notes.append(
                f"{ep.path} prints only training metrics ({report.proposals[0].name}); rounds "
                "are ranked by the training loss: print a validation metric and add it "
                "first in metrics.specs"
            )
        return
    others = [p for p in report.proposals[1:] if p.split != "train" and p is not primary]
    plan.metrics = [primary, *[p for p in others if p.split != "other" or p.goal == "max"][:2]]
    plan.notes.append(
        f"primary metric {primary.name} ({primary.split}, {primary.goal}): {primary.reason}"
    )


def _plan_data(root: Path, d: Discovery, ep: Entrypoint | None, plan: _Plan) -> None:
    usable = [x for x in d.data_dirs if not x.outside]
    for x in d.data_dirs:
        if x.outside:
            plan.notes.append(
                f"{x.path}/ is a symlink to a folder outside the project; it is not listed in "
                "data (paths must stay inside the project)"
            )
    flag_for: dict[str, tuple[str, str]] = {}
    if ep is not None:
        for option in ep.options:
            if not is_data_option(option.dest) or option.type not in ("str", "path", None):
                continue
            target = _data_target(option.default, option.default_source, usable)
            if target is None and len(usable) == 1 and option.default is None:
                target = usable[0].path
                why = f"{ep.path} option {option.flag} takes the data folder"
            elif target is None:
                continue
            else:
                shown = option.default if option.default is not None else option.default_source
                why = f"{ep.path} option {option.flag} takes the data folder (default {shown})"
            flag_for.setdefault(target, (option.flag, why))
    for x in usable[:5]:
        flag = flag_for.get(x.path)
        plan.data.append(
            (_Item(x.path, x.reason), _Item(flag[0], flag[1]) if flag is not None else None)
        )


def _data_target(default: Any, source: str | None, usable: list[Any]) -> str | None:
    if isinstance(default, str):
        norm = os.path.normpath(default).replace("\\", "/").rstrip("/")
        for x in usable:
            if norm == x.path:
                return str(x.path)
    if source:
        for x in usable:
            if re.search(rf"""['"]{re.escape(x.path)}/?['"]""", source):
                return str(x.path)
    return None


def _output_key_hint(path: Path) -> str | None:
    """A likely output-folder key of the baseline config, for a comment only."""
    from trainee.spec.yamlio import YamlDocument

    try:
        data, _ = YamlDocument.load(path).to_plain()
    except ConfigError:
        return None
    pattern = re.compile(r"^(?:output|out|save|log|run|exp)_?(?:dir|root|path|folder)?$|^root$")

    def walk(node: Any, prefix: str, under_output: bool) -> str | None:
        if not isinstance(node, dict):
            return None
        for key, value in node.items():
            if not isinstance(key, str):
                continue
            dotted = f"{prefix}.{key}" if prefix else key
            if isinstance(value, str) and (
                (under_output and pattern.match(key.lower()))
                or re.match(r"^(?:output|out|save)_(?:dir|root|path)$", key.lower())
            ):
                return dotted
            found = walk(value, dotted, under_output or key.lower() in ("output", "outputs"))
            if found:
                return found
        return None

    return walk(data, "", False)


# -- rendering project.yaml -----------------------------------------------------------------

_PLAIN = re.compile(r"^(?:--?(?=[A-Za-z]))?[A-Za-z0-9_./@+][A-Za-z0-9_./@+\-]*$")
_RESERVED = re.compile(
    r"^(?:true|false|yes|no|on|off|y|n|null|~|[-+]?(?:\.inf|\.nan)|[-+]?[0-9][0-9_.eE+\-]*)$",
    re.I,
)


def _scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    text = str(value)
    if _PLAIN.match(text) and not _RESERVED.match(text):
        return text
    return json.dumps(text, ensure_ascii=False)


def _comment(text: str) -> str:
    return ("  # " + " ".join(text.split())) if text else ""


def _render_project_yaml(plan: _Plan) -> str:
    """The commented project.yaml text of a plan."""
    ep = plan.entrypoint
    out = [
        "# Trainee project config, written by `trainee init` from a static read of this folder",
        "# (no project code was run). .trainee/README.md says what was detected and why.",
        "# Review every value, then run `trainee prepare`, `trainee doctor` and",
        "# `trainee run --dry-run`.",
        "version: 1",
        "",
    ]
    if plan.data:
        out.append("data:")
        for path, flag in plan.data:
            out.append(f"  - path: {_scalar(path.value)}{_comment(path.comment)}")
            if flag is not None:
                out.append(f"    flag: {_scalar(flag.value)}{_comment(flag.comment)}")
        out.append("")
    else:
        out += [
            "# data:            # no data folder found; list data folders here",
            "#   - path: data",
            "",
        ]
    out.append("launch:")
    out.append(f"  environment: {_scalar(plan.environment)}{_comment(plan.environment_comment)}")
    if plan.env_name:
        out.append(f"  env_name: {_scalar(plan.env_name)}")
    out.append(f"  command:{_comment(plan.command_comment)}")
    out += [f"    - {_scalar(word)}" for word in plan.command]
    if plan.baseline is not None:
        out.append(
            f"  baseline_config: {_scalar(plan.baseline)}"
            + _comment("copied for each round and passed as --config <copy>")
        )
    elif plan.baseline_hint is not None:
        out.append(
            f"  # baseline_config: {_scalar(plan.baseline_hint)}"
            "  # a detected config file: a suggestion, not chosen automatically"
        )
    if plan.arg_style is not None:
        out.append(
            f"  arg_style: {plan.arg_style}" + _comment("the configurator reads --name=value")
        )
    out += [
        "  # args:            # constant arguments for every round, for example",
        "  #   - flag: --seed",
        "  #     value: 0",
        "",
        "run:",
        "  max_rounds: 3     # start small; raise it once a round works",
        "  timeout_minutes: 60  # the only hard limit on a running round",
    ]
    if plan.fixed_args:
        out.append("  fixed_args:")
        for flag, value in plan.fixed_args:
            out.append(f"    - flag: {_scalar(flag.value)}{_comment(flag.comment)}")
            out.append(f"      value: {_scalar(value.value)}")
    out.append("")
    hint = plan.output_hint or "output.root"
    out += [
        "# output:",
        f"#   config_path: {hint}  # the baseline config key holding the output folder;"
        " trainee sets it per round",
        "",
        "metrics:",
    ]
    if plan.metrics:
        out += _render_metrics(plan.metrics)
    else:
        out.append(
            "  # No custom metric yet: trainee parses the built-in `loss` / `total_loss` values."
        )
    name = plan.metric_name or "val_loss"
    where = f"{ep.path} prints {name}; " if ep is not None and plan.metric_name else ""
    if not plan.metrics:
        out += [
            f"  # {where}to select rounds on a printed metric, for example:",
            "  # specs:",
            f"  #   - name: {name}",
            "  #     source: stdout_regex",
            f"  #     key_or_pattern: '{name}=(?P<value>-?\\d+(?:\\.\\d+)?(?:[eE][-+]?\\d+)?)'",
            "  #     goal: min",
            "  #     required: true",
            "  specs: []",
        ]
    out += [
        "",
        "advanced:",
        "  security_mode: guarded  # the project is read-only to the job; only .trainee/ is"
        " writable",
        "  working_dir: .",
    ]
    return "\n".join(out) + "\n"


def _render_metrics(proposals: list[MetricProposal]) -> list[str]:
    out = [
        "  # Proposed from the code (never run): the first spec is the primary metric rounds",
        "  # are ranked by. Each pattern was checked against the line the code prints.",
        "  specs:",
    ]
    for i, p in enumerate(proposals):
        better = "lower" if p.goal == "min" else "higher"
        out.append(f"    - name: {_scalar(p.name)}{_comment(f'{p.split}, {better} is better')}")
        out.append(f"      # {p.reason}; e.g. {' '.join(p.sample.split())[:160]}")
        out.append(f"      source: {p.source}")
        out.append(f"      key_or_pattern: {_single_quoted(p.key_or_pattern)}")
        if p.path is not None:
            out.append(f"      path: {_single_quoted(p.path)}")
        out.append(f"      goal: {p.goal}")
        out.append(f"      required: {'true' if i == 0 else 'false'}")
    return out


def _single_quoted(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _expected(plan: _Plan) -> ProjectFileSpec:
    return ProjectFileSpec(
        data=tuple(
            DataSpec(path=p.value, flag=f.value if f is not None else None) for p, f in plan.data
        ),
        launch=LaunchSpec(
            environment=Environment(plan.environment),
            env_name=plan.env_name,
            command=tuple(plan.command),
            baseline_config=plan.baseline,
            arg_style=ArgStyle(plan.arg_style) if plan.arg_style else ArgStyle.SPACE,
        ),
        run=RunSpec(
            max_rounds=3,
            timeout_minutes=60.0,
            fixed_args=tuple(ArgSpec(flag=f.value, value=v.value) for f, v in plan.fixed_args),
        ),
        metrics=MetricsSpec(
            specs=tuple(p.to_spec(required=i == 0) for i, p in enumerate(plan.metrics))
        ),
    )


def _validate(root: Path, text: str, plan: _Plan) -> ProjectFileSpec:
    """Parse the rendered text back, compare it with the plan and run the project checks."""
    from trainee.spec.files import decode_file
    from trainee.spec.yamlio import YamlDocument

    file = str(root / ".trainee" / "project.yaml")
    data, lines = YamlDocument.from_text(text, path=file, allow_aliases=False).to_plain(
        str_keys=True
    )
    spec = decode_file(data, ProjectFileSpec, file=file, lines=lines)
    if spec != _expected(plan):
        raise ConfigError(
            f"{file}: the generated text does not read back as planned",
            file=file,
            reason="internal rendering mismatch",
        )
    check_project(root, spec, TuningFileSpec())
    return spec


# -- README.md --------------------------------------------------------------------------------


def _render_readme(d: Discovery, plan: _Plan) -> str:
    ep = plan.entrypoint
    out = [
        "# .trainee/",
        "",
        "Trainee's files for this project. `trainee init` wrote them from a static read of",
        "the project: Python files were parsed, never imported or run.",
        "",
        "| file | what it is |",
        "|---|---|",
        "| `project.yaml` | how to run the project: environment, command, data, fixed "
        "arguments, metrics |",
        "| `tuning.yaml` | the parameters the agent may change (filled by `trainee prepare`) |",
        "| `context.md` | trainee's summary of the project; goes into every decision prompt |",
        "| `logs/`, `runs/`, `artifacts/` | runtime outputs (ignored by `.gitignore`) |",
        "",
        "## What was detected, and why",
        "",
        f"**Environment:** `{d.environment}`: {d.environment_reason}.",
    ]
    if plan.environment != d.environment:
        out.append(f"project.yaml uses `{plan.environment}` instead (see notes).")
    out += ["", "**Entrypoints** (best first):", ""]
    if not d.entrypoints:
        out.append(
            "- none found (looked for train*.py, main.py, `__main__.py` and "
            "pyproject scripts); set `launch.command` by hand"
        )
    for i, e in enumerate(d.entrypoints[:10]):
        mark = " **(used for launch.command)**" if i == 0 else ""
        opts = f", {len(e.options)} {e.framework} options" if e.options else ""
        src = f" read from `{e.options_from}`" if e.options_from else ""
        out.append(f"- `{' '.join(e.command)}` (`{e.path}`): {e.reason}{opts}{src}{mark}")
        out.extend(f"  - note: {n}" for n in e.notes)
    out += ["", "**Fixed training limits** (proposed as `run.fixed_args`):", ""]
    limits = [x for x in d.fixed_limit_flags if ep is not None and x.entrypoint == ep.path]
    if not limits:
        out.append("- none found among the entrypoint's options")
    for lim in limits:
        written = "" if lim.value is not None else " (not written: no default value)"
        out.append(f"- `{lim.flag}` = `{lim.value}`: {lim.reason}{written}")
    out += ["", "**Data folders:**", ""]
    if not d.data_dirs:
        out.append("- none found")
    flags = {p.value: f for p, f in plan.data}
    for x in d.data_dirs:
        flag = flags.get(x.path)
        via = f"; passed with `{flag.value}` ({flag.comment})" if flag is not None else ""
        out.append(f"- `{x.path}/`: {x.reason}{via}")
    out += [
        "",
        "**Config files** (suggestions only: trainee never picks a baseline config by itself):",
        "",
    ]
    if not d.config_files:
        out.append("- none found")
    for c in d.config_files[:20]:
        out.append(f"- `{c.path}` ({c.kind}): {c.reason}")
    if plan.baseline:
        out += ["", f"**Baseline config:** `{plan.baseline}` (given with --baseline-config)."]
    out += ["", "**Metrics** (`metrics.specs`, the first is the primary metric):", ""]
    if not plan.metrics:
        out.append("- none proposed: rounds are ranked by the built-in training `loss`")
    for m in plan.metrics:
        out.append(f"- `{m.name}` ({m.split}, goal {m.goal}): {m.reason}; sample `{m.sample}`")
    notes = [*plan.notes, *d.notes]
    if notes:
        out += ["", "## Notes", ""]
        out += [f"- {n}" for n in notes]
    out += [
        "",
        "## Next steps",
        "",
        "1. Review `project.yaml`: command, environment, data, fixed arguments.",
        "2. If the training reads a config file, set `launch.baseline_config` (or rerun "
        "`trainee init --force --baseline-config PATH`), and set `output.config_path` to the "
        "key holding its output folder.",
        "3. Run `trainee prepare`, then review `tuning.yaml`: only safe parameters belong there.",
        "4. Make sure a metric can be parsed (`metrics.specs`, or a printed `loss`).",
        "5. Run `trainee doctor` and `trainee run --dry-run`; start with few rounds.",
        "",
    ]
    return "\n".join(out)


# -- prepare ----------------------------------------------------------------------------------


def prepare_project(
    root: Path | str, *, replace: bool = False, limit: int = DEFAULT_LIMIT
) -> PrepareResult:
    """Validate the project, fill an empty tuning.yaml from discovery, write context.md
    when missing. ``replace`` regenerates both (the old tuning.yaml is not checked: it may
    no longer fit project.yaml, which is when it needs regenerating)."""
    if replace:
        root_path = resolve_root(root)
        spec = check_project(
            root_path, load_project_file(root_path / ".trainee" / "project.yaml"), TuningFileSpec()
        )
    else:
        spec = load_project(root)
    project = spec.to_project_file()
    root_path = Path(spec.project_root)
    discovery = discover(root_path)
    result = PrepareResult(project_root=spec.project_root, tuning="kept", context="kept")
    if spec.tunables and not replace:
        result.notes.append(
            f"tuning.yaml already lists {len(spec.tunables)} params and was kept "
            "(--replace regenerates it)"
        )
        result.entrypoint = None
    else:
        report = suggest_tunables_report(root_path, project, discovery, limit=limit)
        result.suggestions = report.suggestions
        result.excluded = report.excluded
        result.entrypoint = report.entrypoint
        result.notes += report.notes
        if report.suggestions or replace:
            applied = apply_suggestions(
                root_path, report.suggestions, replace=True, constraints=report.constraints
            )
            result.params_written = applied.written
            result.skipped = applied.skipped
            result.constraints = [c for c in report.constraints if c.expr in applied.constraints]
        if replace:
            result.tuning = "replaced"
        else:
            result.tuning = "filled" if result.params_written else "empty"
        if result.params_written:
            result.notes.append(
                f"wrote {len(result.params_written)} params to tuning.yaml; review them: only "
                "safe parameters belong there"
            )
        else:
            result.notes.append("no tunable parameters were found; tuning.yaml has no params")
    result.metrics = [f"{m.name} ({m.goal}, {m.source})" for m in project.metrics.specs]
    advice = training_metric_advice(root_path, project)
    if advice is not None:
        result.notes.append(f"{advice[0]}; fix: {advice[1]}")
    ctx = root_path / ".trainee" / "context.md"
    existed = ctx.exists() or ctx.is_symlink()
    if replace or not existed:
        if existed and (ctx.is_symlink() or not ctx.is_file()):
            raise ConfigError(
                f"{ctx}: not a regular file; remove it to regenerate",
                file=str(ctx),
                reason="not a regular file",
            )
        write_context(root_path, discovery, project)
        result.context = "rewritten" if existed else "created"
    if project.launch.baseline_config and project.output.config_path is None:
        hint = _output_key_hint(root_path / project.launch.baseline_config)
        if hint:
            result.notes.append(
                f"output.config_path is not set; if '{hint}' in "
                f"{project.launch.baseline_config} is the output folder, set "
                f"output.config_path: {hint}"
            )
    return result
