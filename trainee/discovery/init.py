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

from trainee.atomic import write_atomic
from trainee.discovery.context import build_context, write_context
from trainee.discovery.metrics import MetricProposal, propose_metrics, training_metric_advice
from trainee.discovery.options import normalize_name
from trainee.discovery.runplan import PLACEHOLDER_SCRIPT, command_target, run_view
from trainee.discovery.scan import (
    Discovery,
    Entrypoint,
    LimitFlag,
    discover,
    entrypoint_for_command,
    is_data_option,
    limit_flags,
    resolve_root,
    with_command,
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
    AdvancedSpec,
    ArgSpec,
    ArgStyle,
    ConfigStyle,
    DataSpec,
    Environment,
    LaunchSpec,
    MetricsSpec,
    OutputSpec,
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
    command: list[str] = msgspec.field(default_factory=list)
    output_flag: str | None = None
    limits: list[LimitFlag] = msgspec.field(default_factory=list)
    kept_fields: list[FieldChange] = msgspec.field(default_factory=list)
    """project.yaml fields ``--force`` left as the user had changed them."""
    replaced_fields: list[FieldChange] = msgspec.field(default_factory=list)
    """project.yaml fields ``--force`` replaced although they differed (see ``backup``)."""
    backup: str | None = None
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
    root: Path | str,
    *,
    baseline_config: str | None = None,
    force: bool = False,
    command: str | None = None,
    env: dict[str, str] | None = None,
) -> InitResult:
    """Create ``<root>/.trainee/``; keep existing files unless ``force``.

    ``baseline_config`` must be an existing YAML/JSON file inside the project and
    ``command`` (split like a shell) must run a script or module that exists
    (ConfigError naming it otherwise, and nothing is written). With ``force``,
    project.yaml is regenerated but every field the user changed since init wrote it
    is kept (see :func:`_merge_forced`); a field replaced anyway is listed in
    ``replaced`` and the old file is kept as ``project.yaml.~N~``.
    """
    root_path = resolve_root(root)
    trainee_dir = root_path / ".trainee"
    _check_trainee_dir(root_path, trainee_dir)
    baseline = _check_baseline(root_path, baseline_config) if baseline_config else None
    words = _command_words(root_path, command) if command is not None else None
    discovery = discover(root_path)
    plan = _plan(root_path, discovery, baseline, words, env)
    generated = _render_project_yaml(plan)
    project = _validate(root_path, generated, plan)
    notes = list(plan.notes)

    pfile = trainee_dir / "project.yaml"
    project_text = generated
    merged = MergeReport()
    existing_project: ProjectFileSpec | None = project
    if _exists(pfile) and not force:
        existing_project = _try_load(pfile)
        if baseline is not None or words is not None:
            given = "--baseline-config" if baseline is not None else "--command"
            notes.append(
                f"project.yaml already exists and was kept, so {given} was not recorded; "
                "run trainee init --force to merge it in (your edits are kept)"
            )
    elif _exists(pfile):
        explicit = {"launch.command"} if words is not None else set()
        if baseline is not None:
            explicit.add("launch.baseline_config")
        project_text, merged = _merge_forced(root_path, pfile, generated, explicit)
        existing_project = _try_load_text(root_path, project_text) or project
    created: list[str] = []
    kept: list[str] = []
    rewritten: list[str] = []
    tuning_path = trainee_dir / "tuning.yaml"
    keep_tuning = force and _exists(tuning_path) and _user_tuning(tuning_path)
    context_text = build_context(root_path, discovery, existing_project)
    context_path = trainee_dir / "context.md"
    keep_context = (
        force
        and _exists(context_path)
        and _user_changed(context_path, trainee_dir / _BASE_DIR / "context.md")
    )
    files: list[tuple[str, str, bool]] = [
        ("project.yaml", project_text, False),
        ("tuning.yaml", TUNING_YAML, keep_tuning),
        ("context.md", context_text, keep_context),
        ("README.md", _render_readme(discovery, plan), False),
        (".gitignore", GITIGNORE, False),
    ]
    if keep_tuning:
        notes.append(
            "tuning.yaml lists params and was kept (trainee prepare --replace regenerates it)"
        )
    if keep_context:
        notes.append(
            "context.md was edited since init wrote it and was kept (trainee prepare "
            "--replace regenerates it)"
        )
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
    for name, text, keep in files:
        path = trainee_dir / name
        rel = f".trainee/{name}"
        if _exists(path):
            if not force or keep:
                kept.append(rel)
                continue
            if path.is_symlink() or not path.is_file():
                raise ConfigError(
                    f"{path}: not a regular file; remove it and run init again",
                    file=str(path),
                    reason="not a regular file",
                )
            if name == "project.yaml" and merged.backup is not None:
                write_atomic(trainee_dir / merged.backup, path.read_bytes())
            write_atomic(path, text)
            rewritten.append(rel)
        else:
            write_atomic(path, text)
            created.append(rel)
    wrote = set(created) | set(rewritten)
    if ".trainee/project.yaml" in wrote:
        _write_base(
            trainee_dir,
            generated,
            context_text,
            wrote_context=".trainee/context.md" in wrote,
        )
    return InitResult(
        project_root=str(root_path),
        created=created,
        kept=kept,
        rewritten=rewritten,
        discovery=discovery,
        baseline_config=baseline,
        entrypoint=plan.entrypoint.path if plan.entrypoint else None,
        command=list(plan.command),
        output_flag=plan.output_flag.value if plan.output_flag else None,
        limits=plan.limits,
        kept_fields=merged.kept,
        replaced_fields=merged.replaced,
        backup=f".trainee/{merged.backup}" if merged.backup else None,
        notes=notes,
        metrics=plan.metrics,
    )


# -- init --force: keep what the user changed -------------------------------------------------

_BASE_DIR = ".init"
"""``.trainee/.init/``: the files exactly as init last generated them, the common
ancestor of a three-way merge when ``init --force`` runs again."""

_MISSING: Any = object()


class FieldChange(msgspec.Struct, kw_only=True):
    """A project.yaml field init --force did not simply regenerate."""

    field: str
    yours: Any = None
    generated: Any = None
    reason: str = ""


class MergeReport(msgspec.Struct, kw_only=True):
    kept: list[FieldChange] = msgspec.field(default_factory=list)
    replaced: list[FieldChange] = msgspec.field(default_factory=list)
    backup: str | None = None


def _flat_fields(node: Any, prefix: str = "") -> dict[str, Any]:
    """Dotted field -> value; mappings are walked, lists and scalars are one field."""
    out: dict[str, Any] = {}
    if isinstance(node, dict):
        for key, value in node.items():
            dotted = f"{prefix}.{key}" if prefix else str(key)
            if isinstance(value, dict) and value:
                out.update(_flat_fields(value, dotted))
            else:
                out[dotted] = value
    return out


def _plain_text(text: str) -> Any:
    from trainee.spec.yamlio import YamlDocument

    data, _ = YamlDocument.from_text(text, allow_aliases=False).to_plain(str_keys=True)
    return data


def _merge_forced(
    root: Path, pfile: Path, generated: str, explicit: set[str]
) -> tuple[str, MergeReport]:
    """The project.yaml text of ``init --force``: the newly generated file, except that
    every field the user changed since init generated the last one (a three-way
    compare with ``.trainee/.init/project.yaml``) keeps the user's value. Fields
    named by ``explicit`` (given on the command line) always take the new value.
    Without that record, or when the kept edits no longer make a valid file, the
    new file wins: every field it changes is listed and the old file is backed up."""
    from trainee.spec.yamlio import YamlDocument

    report = MergeReport()
    try:
        current = _plain_text(pfile.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ConfigError):
        current = None
    base_path = pfile.parent / _BASE_DIR / "project.yaml"
    try:
        base = _plain_text(base_path.read_text(encoding="utf-8")) if base_path.is_file() else None
    except (OSError, UnicodeDecodeError, ConfigError):
        base = None
    new = _plain_text(generated)
    if not isinstance(current, dict):
        report.replaced.append(
            FieldChange(field="(whole file)", reason="the old file could not be read as YAML")
        )
        report.backup = _backup_name(pfile)
        return generated, report
    ours, theirs = _flat_fields(current), _flat_fields(new)
    ancestor = _flat_fields(base) if isinstance(base, dict) else None
    doc = YamlDocument.from_text(generated, allow_aliases=False)
    replaced: list[FieldChange] = []
    for key in sorted(set(ours) | set(theirs)):
        mine, gen = ours.get(key, _MISSING), theirs.get(key, _MISSING)
        if mine == gen:
            continue
        shown_mine = None if mine is _MISSING else mine
        shown_gen = None if gen is _MISSING else gen
        if any(key == e or key.startswith(e + ".") for e in explicit):
            replaced.append(
                FieldChange(
                    field=key,
                    yours=shown_mine,
                    generated=shown_gen,
                    reason="given on the command line",
                )
            )
            continue
        if ancestor is None:
            replaced.append(
                FieldChange(
                    field=key,
                    yours=shown_mine,
                    generated=shown_gen,
                    reason="no record of what init wrote last time, so edits cannot be told apart",
                )
            )
            continue
        if ancestor.get(key, _MISSING) == mine:
            continue  # untouched by the user: the new value is taken
        report.kept.append(
            FieldChange(field=key, yours=shown_mine, generated=shown_gen, reason="you changed it")
        )
        if mine is _MISSING:
            doc.delete(key)
        else:
            doc.set(key, mine)
    text = doc.dump()
    if report.kept and _try_load_text(root, text) is None:
        for change in report.kept:
            change.reason = "your value no longer makes a valid project.yaml with the new fields"
        replaced += report.kept
        report.kept = []
        text = generated
    report.replaced = replaced
    if any(c.reason != "given on the command line" for c in replaced):
        report.backup = _backup_name(pfile)
    return text, report


def _backup_name(pfile: Path) -> str:
    """``project.yaml.~N~`` with the first free N (GNU cp's numbered backups)."""
    n = 1
    while _exists(pfile.with_name(f"{pfile.name}.~{n}~")):
        n += 1
    return f"{pfile.name}.~{n}~"


def _try_load_text(root: Path, text: str) -> ProjectFileSpec | None:
    from trainee.spec.files import decode_file
    from trainee.spec.yamlio import YamlDocument

    file = str(root / ".trainee" / "project.yaml")
    try:
        data, lines = YamlDocument.from_text(text, path=file, allow_aliases=False).to_plain(
            str_keys=True
        )
        spec = decode_file(data, ProjectFileSpec, file=file, lines=lines)
        check_project(root, spec, TuningFileSpec())
    except ConfigError:
        return None
    return spec


def _user_tuning(path: Path) -> bool:
    """A tuning.yaml that lists params (written by prepare and reviewed, or by hand)."""
    try:
        data = _plain_text(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ConfigError):
        return True
    return not (isinstance(data, dict) and not data.get("params"))


def _user_changed(path: Path, base: Path) -> bool:
    """``path`` differs from the copy init last wrote (no copy: assume it was edited)."""
    try:
        return path.read_bytes() != base.read_bytes()
    except OSError:
        return True


def _write_base(
    trainee_dir: Path, project_text: str, context_text: str, *, wrote_context: bool
) -> None:
    base = trainee_dir / _BASE_DIR
    if base.is_symlink() or (base.exists() and not base.is_dir()):
        return
    base.mkdir(exist_ok=True)
    write_atomic(base / "project.yaml", project_text)
    if wrote_context:
        write_atomic(base / "context.md", context_text)


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
    output_flag: _Item | None = None
    config_style: str | None = None
    limits: list[LimitFlag] = field(default_factory=list)
    launch_args: list[tuple[ArgSpec, str]] = field(default_factory=list)
    launch_env: list[tuple[str, str, str]] = field(default_factory=list)
    read_only: list[tuple[str, str]] = field(default_factory=list)
    """Folders outside the project the entrypoint reads (path from the root, why)."""
    docs_limits: list[ArgSpec] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _command_words(root: Path, command: str) -> list[str]:
    """``--command`` split like a shell would; its script or module must exist."""
    import shlex

    def fail(reason: str) -> ConfigError:
        return ConfigError(
            f"--command {command!r}: {reason}",
            field="launch.command",
            reason=reason,
        )

    try:
        words = shlex.split(command)
    except ValueError as exc:
        raise fail(f"cannot be split into words ({exc})") from None
    if not words:
        raise fail("is empty")
    kind, target, exists = command_target(root, words)
    if exists is False:
        raise fail(f"runs {target}, which is not a {kind} of the project")
    return words


_MACHINE_FLAG = re.compile(
    r"^(?:fp16|bf16|fp16_\w+|half|amp|cuda|no_cuda|use_cuda|gpu|gpus|gpu_ids?|device|devices|"
    r"accel|accelerator|compile|report_to|wandb\w*|use_wandb|push_to_hub|hub_\w+|deepspeed|"
    r"local_rank|distributed|world_size|nproc_per_node|dataloader_num_workers|num_workers|"
    r"workers|tf32|mps|xla|tpu\w*|trainer\.(?:accelerator|devices|precision|strategy))$"
)
"""Flags of the docs' command that depend on the machine it ran on (GPU, precision,
logging services), left out of launch.args."""
_FULLY_KNOWN = ("argparse", "click", "typer", "configurator", "jsonargparse")
"""Frameworks whose every option discovery reads (HfArgumentParser and LightningCLI
options partly live in the library)."""
_UNRESOLVED = re.compile(r"[$<>{}`*]|\.\.\.")


@dataclass
class _DocsCommand:
    """What the docs' own command adds to the entrypoint: positional files for
    launch.command, constant flags for launch.args, limit values for run.fixed_args."""

    files: list[str] = field(default_factory=list)
    args: list[ArgSpec] = field(default_factory=list)
    limits: list[ArgSpec] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)


def _docs_command(root: Path, ep: Entrypoint) -> _DocsCommand:
    """The docs' first command for ``ep`` (``python makemore.py -i names.txt -o names``):
    positional project files, then each ``--flag value``. Output options are left to
    output.flag, budget options go to run.fixed_args; words with placeholders
    (``$DATA``, ``<path>``) are dropped and named."""
    from trainee.discovery.limits import is_limit_key, is_tied_key, parse_value
    from trainee.discovery.outputs import output_options

    out = _DocsCommand()
    words = list(ep.readme_args)
    i = 0
    while i < len(words) and not words[i].startswith("-") and "=" not in words[i]:
        rel = os.path.normpath(words[i])
        if rel.startswith("..") or os.path.isabs(rel) or not (root / rel).is_file():
            break
        out.files.append(words[i])
        i += 1
    if ep.framework == "hydra" or ep.hydra_config_name is not None:
        return out  # the primary config is the baseline; README overrides are variations
    by_flag = {f: o for o in ep.options for f in o.flags}
    outputs = {f for o in output_options(ep.options) for f in by_flag if by_flag[f].dest == o.name}
    while i < len(words):
        word = words[i]
        i += 1
        if not word.startswith("-") or word in ("-", "--"):
            out.dropped.append(word)
            continue
        flag, eq, value = word.partition("=")
        option = by_flag.get(flag)
        val: str | None = value if eq else None
        takes_value = option is None or option.type != "bool" or option.action is None
        if not eq and i < len(words) and not words[i].startswith("-") and takes_value:
            val = words[i]
            i += 1
        shown = f"{flag} {val}" if val is not None else flag
        if _UNRESOLVED.search(shown):
            out.dropped.append(shown)
            continue
        if flag in outputs:
            out.dropped.append(f"{shown} (output.flag gives each round its own folder)")
            continue
        if _MACHINE_FLAG.match(normalize_name(flag)):
            out.dropped.append(f"{shown} (depends on the machine)")
            continue
        if option is None and ep.options and ep.framework in _FULLY_KNOWN:
            out.dropped.append(f"{shown} (not an option of {ep.path})")
            continue
        parsed = parse_value(val) if val is not None else None
        if not isinstance(parsed, int | float | str) and val is not None:
            parsed = val
        spec = ArgSpec(flag=flag, value=parsed)
        dest = option.dest if option is not None else flag
        if is_limit_key(dest) or is_tied_key(dest):
            out.limits.append(spec)
        else:
            out.args.append(spec)
    return out


def _plan(
    root: Path,
    d: Discovery,
    baseline: str | None,
    command: list[str] | None = None,
    caller_env: dict[str, str] | None = None,
) -> _Plan:
    notes: list[str] = []
    env, env_comment, env_name = d.environment, d.environment_reason, d.env_name
    if env == "conda" and caller_env is not None:
        import shutil

        path = caller_env.get("PATH", os.defpath)
        if not any(shutil.which(x, path=path) for x in ("conda", "mamba", "micromamba")):
            notes.append(
                f"{d.environment_reason}, but conda is not on PATH: launch.environment is "
                "system (the python on your PATH); set environment: conda once conda is "
                "installed"
            )
            env, env_comment, env_name = "system", "conda file found, conda not on PATH", None
    if env == "conda" and not env_name:
        notes.append(
            "a conda environment file names no environment, so launch.environment is "
            "system; set environment: conda and env_name: <name> in project.yaml"
        )
        env, env_comment = "system", f"conda file found but unnamed ({d.environment_reason})"
    ep: Entrypoint | None
    if command is not None:
        ep = entrypoint_for_command(root, d, command)
        docs = _DocsCommand()
        command_comment = "given with --command"
        if ep is None:
            notes.append(
                "the --command names no Python script or module of the project; its "
                "options, limits and outputs are unknown to trainee"
            )
    elif d.best is not None:
        ep = d.best
        docs = _docs_command(root, ep)
        command = [*ep.command, *docs.files]
        command_comment = ep.reason
        if docs.files:
            command_comment += f"; {' '.join(docs.files)} as in {ep.readme_refs[0]}"
        ep = with_command(root, ep, command)
        if docs.dropped:
            notes.append(
                f"{ep.readme_refs[0]} also passes {', '.join(docs.dropped)}: not copied "
                "into project.yaml"
            )
    else:
        ep = None
        docs = _DocsCommand()
        command = ["python", PLACEHOLDER_SCRIPT]
        command_comment = (
            "NO TRAINING ENTRYPOINT FOUND: replace this with your training command "
            "(or run trainee init --force --command '...')"
        )
        notes.append(
            "no training entrypoint was found (no script reading the command line, and "
            f"none run by the README): launch.command runs {PLACEHOLDER_SCRIPT}, a "
            "placeholder; replace it in project.yaml or rerun trainee init --force "
            "--command 'python your_script.py ...'"
        )
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
    where = ep.readme_refs[0] if ep is not None and ep.readme_refs else "the docs"
    plan.launch_args = [(a, f"as {where} runs it") for a in docs.args]
    plan.docs_limits = docs.limits
    if baseline is None:
        first = next((c for c in d.config_files if c.kind in ("yaml", "json")), None)
        if first is not None and (ep is None or ep.hydra_config_name is None):
            plan.baseline_hint = first.path
    _plan_data(root, d, ep, plan)
    if ep is not None:
        _plan_run(root, ep, plan)
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
            and ep.framework not in ("none", "hydra")
            and not any("--config" in o.flags for o in ep.options)
        ):
            plan.notes.append(
                f"{ep.path} has no --config option, but trainee passes the baseline config "
                "as --config <path>; check that the command accepts it"
            )
    if baseline is not None:
        plan.output_hint = _output_key_hint(root / baseline)
    return plan


def has_cuda() -> bool:
    """Whether this machine shows an NVIDIA GPU (a device node or nvidia-smi)."""
    import shutil

    return any(Path("/dev").glob("nvidia[0-9]*")) or shutil.which("nvidia-smi") is not None


def _machine_args(ep: Entrypoint, options: list[Any]) -> list[tuple[ArgSpec, str]]:
    """Constant arguments this machine needs: on a machine without a GPU, a device
    option defaulting to CUDA gets ``cpu`` (and a configurator's ``compile = True``
    gets False: torch.compile needs a compiler toolchain and is slow to start); a Hugging
    Face Trainer gets ``--report_to none`` (else it reports to every integration
    installed, which may write into the project)."""
    out: list[tuple[ArgSpec, str]] = []
    if ep.framework == "hf_argparser" and any(o.dest == "report_to" for o in options):
        out.append(
            (
                ArgSpec(flag="--report_to", value="none"),
                "the Trainer otherwise reports to every installed integration (mlflow, wandb...)",
            )
        )
    if has_cuda():
        return out
    for o in options:
        leaf = normalize_name(o.dest).rsplit(".", 1)[-1]
        default = o.default
        if (
            leaf == "device"
            and isinstance(default, str)
            and default.lower().startswith(("cuda", "gpu"))
        ):
            if o.choices and "cpu" not in o.choices:
                continue
            out.append(
                (
                    ArgSpec(flag=o.flag, value="cpu"),
                    f"the default {default!r} needs a GPU; none here",
                )
            )
        elif leaf == "compile" and default is True and ep.framework == "configurator":
            out.append(
                (
                    ArgSpec(flag=o.flag, value=False),
                    "no GPU here: torch.compile only slows a short round",
                )
            )
    return out


_MLFLOW = re.compile(r"^\s*(?:import\s+mlflow|from\s+mlflow\b)", re.M)


def _tracking_env(root: Path, ep: Entrypoint) -> list[tuple[str, str, str]]:
    """``launch.env`` entries that keep an experiment tracker's files in the round: MLflow
    writes ./mlruns (or mlflow.db) into the working directory, which guarded rounds
    cannot write."""
    try:
        text = (root / ep.path).read_text(encoding="utf-8", errors="replace")[: 1 << 20]
    except OSError:
        return []
    if not _MLFLOW.search(text) or "set_tracking_uri" in text:
        return []
    why = f"{ep.path} uses MLflow: its runs go into the round's outputs, not ./mlruns"
    return [
        ("MLFLOW_TRACKING_URI", "file:{outputs_dir}/mlruns", why),
        ("MLFLOW_ALLOW_FILE_STORE", "true", "recent MLflow refuses a file store without it"),
    ]


def _outside_reads(root: Path, ep: Entrypoint) -> list[tuple[str, str]]:
    """Existing folders or files outside the project that the entrypoint reaches through
    its own location (``dirname(__file__)/../../Datasets``): a guarded round sees them
    only when ``advanced.read_only_paths`` names them."""
    from trainee.discovery.outputs import file_relative_paths

    if ep.kind != "script":
        return []
    try:
        text = (root / ep.path).read_text(encoding="utf-8", errors="replace")[: 1 << 20]
    except OSError:
        return []
    real_root = os.path.realpath(root)
    out: list[tuple[str, str]] = []
    for line, rel in file_relative_paths(text):
        target = os.path.realpath(os.path.join(root, os.path.dirname(ep.path), rel))
        inside = target == real_root or target.startswith(real_root.rstrip("/") + "/")
        if inside or not os.path.exists(target):
            continue
        shown = os.path.relpath(target, real_root)
        if shown not in (p for p, _ in out):
            why = f"{ep.path} reads it through its own location (line {line}), outside the project"
            out.append((shown, why))
    return out


def _plan_run(root: Path, ep: Entrypoint, plan: _Plan) -> None:
    """Hydra style, the output flag and the pinned budget of ``plan``'s command."""
    constant = [a for a, _ in plan.launch_args]
    view = run_view(root, ep, plan.command, [*constant, *plan.docs_limits])
    set_in_command = {k for k, (_, where) in view.settings.items() if where == "launch.command"}
    if view.hydra is not None or ep.framework == "hydra":
        plan.config_style = "hydra"
        plan.output_flag = _Item("hydra.run.dir", "Hydra's run folder: each round's outputs folder")
        if plan.baseline is not None:
            plan.notes.append(
                f"{ep.path} is a Hydra app: the baseline config is passed as "
                "--config-path/--config-name, never --config"
            )
        if view.hydra is None:
            plan.notes.append(
                f"{ep.path} uses @hydra.main but its primary config was not found in the "
                "project; limits and outputs of the config are unknown"
            )
        else:
            plan.notes.extend(view.hydra.notes)
    plan.launch_env = _tracking_env(root, ep)
    plan.read_only = _outside_reads(root, ep)
    given = {a.flag for a in constant} | set(set_in_command)
    for arg, why in _machine_args(ep, view.options):
        if arg.flag not in given and normalize_name(arg.flag) not in given:
            plan.launch_args.append((arg, why))
    outputs = [o for o in view.outputs if o.name not in set_in_command]
    primary = next((o for o in outputs if o.primary), None)
    output_args: list[tuple[_Item, _Item]] = []
    if plan.output_flag is None and primary is not None:
        plan.output_flag = _Item(primary.flag, f"{primary.reason}; each round's outputs folder")
    for o in outputs:
        if o is primary and plan.config_style != "hydra":
            continue
        if not isinstance(o.default, str) or not o.default or "${" in o.default:
            continue
        if view.hydra is not None and view.hydra_chdir:
            continue  # relative paths land in the run folder, which trainee sets
        leaf = normalize_name(o.name).rsplit(".", 1)[-1]
        name = os.path.basename(o.default) if o.is_file else leaf
        output_args.append(
            (
                _Item(o.flag, f"{o.reason} (default {o.default!r}); kept inside the round"),
                _Item(f"{{outputs_dir}}/{name}"),
            )
        )
    limits = [
        lim
        for lim in limit_flags(root, ep, plan.command, [*constant, *plan.docs_limits])
        if lim.flag not in {a.flag for a in constant}
    ]
    plan.limits = limits
    budget = view.budget
    choose: LimitFlag | None = None
    if not budget.bounded and budget.limits:
        primary_limit = budget.primary
        choose = next((x for x in limits if primary_limit and x.flag == primary_limit.flag), None)
    for lim in limits:
        if lim.value is None and lim is not choose:
            continue
        value = lim.value if lim.value is not None else 0
        if lim.problem or lim is choose:
            problem = lim.problem or "no value: choose a finite training limit"
            plan.notes.append(
                f"choose the training limit: {problem} (run.fixed_args {lim.flag} in "
                "project.yaml; trainee doctor fails until it is set)"
            )
            plan.fixed_args.append(
                (_Item(lim.flag, "training budget"), _Item(value, f"CHOOSE A VALUE: {problem}"))
            )
            continue
        if lim.kind == "tied":
            comment = "schedule length tied to the training limit: pinned with it, change both"
        else:
            comment = "training budget, the same in every round"
        plan.fixed_args.append((_Item(lim.flag, comment), _Item(value)))
    plan.fixed_args += output_args
    if not budget.limits:
        plan.notes.append(
            f"no training-limit option found in {ep.path}: make sure a round ends by itself "
            "(run.timeout_minutes stops it otherwise)"
        )


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
            if isinstance(option.default, str) and os.path.normpath(option.default or ".") == ".":
                continue  # '' or '.': a dataset name or the current folder
            bare = normalize_name(option.dest) in ("data", "dataset", "train_data", "train_dataset")
            is_dir = isinstance(option.default, str) and (root / option.default).is_dir()
            if bare and not _FOLDER_HELP.search(option.help or "") and not is_dir:
                continue  # --dataset imagenet: a name, not a folder
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


_FOLDER_HELP = re.compile(r"\b(?:dir|directory|folder|path|root|location)\b", re.I)


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
    words = ", ".join(_scalar(word) for word in plan.command)
    out.append(f"  command: [{words}]{_comment(plan.command_comment)}")
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
    if plan.config_style is not None:
        out.append(
            f"  config_style: {plan.config_style}"
            + _comment("a @hydra.main app: overrides are key=value")
        )
    if plan.launch_env:
        out.append("  env:")
        for env_name, env_value, why in plan.launch_env:
            out.append(f"    {env_name}: {_scalar(env_value)}{_comment(why)}")
    if plan.launch_args:
        out.append("  args:")
        for arg, why in plan.launch_args:
            out.append(f"    - flag: {_scalar(arg.flag)}{_comment(why)}")
            if arg.value is not None:
                out.append(f"      value: {_scalar(arg.value)}")
        out.append("")
    else:
        out += [
            "  # args:            # constant arguments for every round, for example",
            "  #   - flag: --seed",
            "  #     value: 0",
            "",
        ]
    out += [
        "run:",
        "  max_rounds: 3     # start small; raise it once a round works",
        "  timeout_minutes: 60  # the only hard limit on a running round",
    ]
    if plan.fixed_args:
        out.append("  fixed_args:")
        for flag, value in plan.fixed_args:
            out.append(f"    - flag: {_scalar(flag.value)}{_comment(flag.comment)}")
            out.append(f"      value: {_scalar(value.value)}{_comment(value.comment)}")
    out.append("")
    hint = plan.output_hint or "output.root"
    if plan.output_flag is not None:
        out += [
            "output:",
            f"  flag: {_scalar(plan.output_flag.value)}{_comment(plan.output_flag.comment)}",
            "",
        ]
    else:
        out += [
            "# output:",
            f"#   config_path: {hint}  # the baseline config key holding the output folder;"
            " trainee sets it per round",
            "#   flag: --out_dir  # or the flag that takes the output folder",
            "",
        ]
    out += [
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
    if plan.read_only:
        out.append(
            "  read_only_paths:  # outside the project, readable (never writable) in a round"
        )
        out += [f"    - {_single_quoted(p)}{_comment(why)}" for p, why in plan.read_only]
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
            config_style=ConfigStyle(plan.config_style or "flag"),
            args=tuple(a for a, _ in plan.launch_args),
            env={name: value for name, value, _ in plan.launch_env},
        ),
        run=RunSpec(
            max_rounds=3,
            timeout_minutes=60.0,
            fixed_args=tuple(ArgSpec(flag=f.value, value=v.value) for f, v in plan.fixed_args),
        ),
        output=OutputSpec(flag=plan.output_flag.value if plan.output_flag else None),
        metrics=MetricsSpec(
            specs=tuple(p.to_spec(required=i == 0) for i, p in enumerate(plan.metrics))
        ),
        advanced=AdvancedSpec(read_only_paths=tuple(p for p, _ in plan.read_only)),
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
            "- none found (looked for scripts that read the command line under a "
            "`__main__` guard, train*.py, main.py, `__main__.py`, pyproject scripts and "
            "the commands of the README and docs); set `launch.command` by hand or run "
            "`trainee init --force --command '...'`"
        )
    for i, e in enumerate(d.entrypoints[:10]):
        mark = " **(used for launch.command)**" if i == 0 else ""
        opts = f", {len(e.options)} {e.framework} options" if e.options else ""
        src = f" read from `{e.options_from}`" if e.options_from else ""
        out.append(f"- `{' '.join(e.command)}` (`{e.path}`): {e.reason}{opts}{src}{mark}")
        out.extend(f"  - note: {n}" for n in e.notes)
    out += ["", "**Fixed training limits** (proposed as `run.fixed_args`):", ""]
    written_flags = {f.value for f, _ in plan.fixed_args}
    if not plan.limits:
        out.append("- none found among the entrypoint's options")
    for lim in plan.limits:
        written = "" if lim.flag in written_flags else " (not written: no default value)"
        problem = f" **Must be chosen:** {lim.problem}" if lim.problem else ""
        out.append(f"- `{lim.flag}` = `{lim.value}` ({lim.kind}): {lim.reason}{written}{problem}")
    out += ["", "**Output folder:**", ""]
    if plan.output_flag is not None:
        out.append(
            f"- `output.flag: {plan.output_flag.value}`: {plan.output_flag.comment}; every "
            "round writes into `.trainee/runs/session-N/round-N/outputs/`"
        )
    else:
        out.append(
            "- no output option found; if the training writes files, set `output.flag` "
            "(or `output.config_path`): guarded rounds cannot write into the project"
        )
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
