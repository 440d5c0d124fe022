"""What a project's rounds really run with: an entrypoint read together with its
command and the constant arguments of project.yaml.

``trainee init`` uses it to write ``run.fixed_args`` and ``output.flag``; ``trainee
doctor`` uses the same functions for its ``entrypoint``, ``output`` and ``limits``
rows, so both always agree.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import msgspec

from trainee.discovery.hydra import HydraConfig, compose_hydra, leaves
from trainee.discovery.limits import Budget, analyse_budget, is_limit_key, is_tied_key
from trainee.discovery.options import EntryOption, normalize_name
from trainee.discovery.outputs import OutputOption, is_output_key, output_options
from trainee.discovery.scan import Entrypoint, command_settings, script_index
from trainee.spec.files import uses_scratch_cwd
from trainee.spec.kinds import scalar_type

TYPE_CHECKING = False
if TYPE_CHECKING:
    from trainee.spec import ArgSpec, ProjectFileSpec

__all__ = [
    "PLACEHOLDER_SCRIPT",
    "RunView",
    "check_entrypoint",
    "check_limits",
    "check_output",
    "command_target",
    "entry_words",
    "project_view",
    "run_view",
]


PLACEHOLDER_SCRIPT = "YOUR_TRAINING_SCRIPT.py"
"""What launch.command runs when init found no entrypoint: one obvious word to replace
(doctor's entrypoint row fails until it names a real script)."""


class RunView(msgspec.Struct, kw_only=True):
    """An entrypoint as one command runs it.

    ``options`` are the entrypoint's options (for a Hydra app: the leaves of the
    composed config, as ``key`` overrides); ``settings`` maps an option's dest / flag
    to ``(value, where)`` for every value the run sets; ``hydra`` is the composed
    config of a Hydra app."""

    entrypoint: Entrypoint
    options: list[EntryOption]
    settings: dict[str, tuple[Any, str]]
    budget: Budget
    outputs: list[OutputOption]
    hydra: HydraConfig | None = None
    hydra_chdir: bool = False


def _value_type(value: Any) -> Any:
    return "str" if value is None else scalar_type(value)


def _hydra_options(cfg: HydraConfig) -> list[EntryOption]:
    out: list[EntryOption] = []
    for key, value in leaves(cfg.data):
        if key.startswith("hydra.") or isinstance(value, list | dict):
            continue
        kind = _value_type(value)
        if kind is None:
            continue
        if not (is_limit_key(key) or is_tied_key(key) or is_output_key(key)):
            continue
        if isinstance(value, str) and "${" in value:
            continue  # an interpolation: follows another key
        out.append(
            EntryOption(
                flag=key,
                dest=key,
                flags=[key],
                type=kind,
                default=value,
                help=f"from {cfg.sources.get(key, cfg.primary)}",
            )
        )
    return out


def run_view(
    root: Path | str,
    ep: Entrypoint,
    command: Sequence[str],
    args: Sequence[ArgSpec] = (),
    *,
    extra_overrides: Sequence[str] = (),
) -> RunView:
    """``ep`` as ``command`` plus the constant ``args`` (launch.args, run.fixed_args,
    data flags) run it."""
    root_path = Path(root).resolve()
    settings: dict[str, tuple[Any, str]] = {}
    for key, text in command_settings(ep, command).items():
        settings[key] = (text, "launch.command")
    overrides = [w for w in entry_words(ep, command) if "=" in w and not w.startswith("-")]
    for arg in args:
        value: Any = "true" if arg.value is None else arg.value
        shown = value if not isinstance(value, bool) else ("true" if value else "false")
        if arg.flag.startswith("-"):
            settings[arg.flag] = (shown, "project.yaml")
            settings[normalize_name(arg.flag)] = (shown, "project.yaml")
        else:
            key = arg.flag.lstrip("+~")
            settings[key] = (shown, "project.yaml")
            overrides.append(f"{arg.flag}={shown}" if arg.value is not None else arg.flag)
    hydra: HydraConfig | None = None
    chdir = False
    if ep.hydra_config_name is not None or ep.hydra_config_path is not None:
        hydra = compose_hydra(root_path, ep, [*overrides, *extra_overrides])
    if hydra is not None:
        options = _hydra_options(hydra)
        chdir = hydra.get("hydra.job.chdir") is True
        for key, where in hydra.sources.items():
            if where == "<override>" and key not in settings:
                settings[key] = (hydra.get(key), "override")
    else:
        options = list(ep.options)
    budget = analyse_budget(options, settings)
    outputs = output_options(options)
    return RunView(
        entrypoint=ep,
        options=options,
        settings=settings,
        budget=budget,
        outputs=outputs,
        hydra=hydra,
        hydra_chdir=chdir,
    )


def command_target(
    root: Path | str, command: Sequence[str], working_dir: str = "."
) -> tuple[str, str | None, bool | None]:
    """(kind, target, exists) of what a command runs: ``("script", "train.py", True)``,
    ``("module", "pkg.train", False)``, ``("module", "pip", None)`` for a module that is
    not in the project (it may be installed), or ``("other", None, None)`` when it names
    no Python script or module (a console script: the launcher check covers it)."""
    root_path = Path(root).resolve()
    base = root_path / working_dir
    words = [
        w.replace("{project_root}", str(root_path)).replace("{working_dir}", str(base))
        for w in command
    ]
    for i, word in enumerate(words):
        if "{" in word and "}" in word:
            continue  # a per-round placeholder ({round_dir}...): not known before the round
        if word == "-m" and i + 1 < len(words):
            module = words[i + 1]
            if module.startswith(("torch.distributed", "accelerate")):
                continue
            parts = module.split(".")
            for prefix in (base, base / "src", root_path, root_path / "src"):
                stem = prefix.joinpath(*parts)
                if (stem.with_suffix(".py")).is_file() or (stem / "__main__.py").is_file():
                    return "module", module, True
                if (stem / "__init__.py").is_file():
                    return "module", module, False
            return "module", module, None
        if word.endswith(".py") and not word.startswith("-"):
            path = Path(os.path.normpath(base / word))
            return "script", word, path.is_file()
    return "other", None, None


def entry_words(ep: Entrypoint, command: Sequence[str]) -> list[str]:
    """The words after the entrypoint in a command."""
    index = script_index(ep, command)
    return list(command[index + 1 :]) if index is not None else []


# -- readiness checks (trainee doctor's entrypoint, output and limits rows) ----------------------

Verdict = tuple[Literal["pass", "warn", "fail"], str, str]
"""(status ``pass``/``warn``/``fail``, detail, fix)."""


def _words_of(project: ProjectFileSpec, root: Path | str | None = None) -> list[str]:
    """The command's words (``advanced.shell_command`` split like a shell), with
    ``{project_root}`` / ``{working_dir}`` filled in when ``root`` is given."""
    import shlex

    shell = project.advanced.shell_command
    if shell:
        try:
            words = shlex.split(shell)
        except ValueError:
            words = shell.split()
    else:
        words = list(project.launch.command or ())
    if root is None:
        return words
    top = str(Path(root).resolve())
    base = os.path.normpath(os.path.join(top, project.advanced.working_dir))
    return [w.replace("{project_root}", top).replace("{working_dir}", base) for w in words]


def project_view(root: Path | str, project: ProjectFileSpec) -> RunView | None:
    """The run view of a project's entrypoint with every constant argument, or None
    when its command runs no script or module of the project."""
    from trainee.discovery.scan import discover, entrypoint_for_command

    words = _words_of(project, root)
    discovery = discover(root)
    ep = entrypoint_for_command(root, discovery, words, project.advanced.working_dir)
    if ep is None:
        return None
    return run_view(root, ep, words, [*project.launch.args, *project.run.fixed_args])


def check_entrypoint(root: Path | str, project: ProjectFileSpec) -> Verdict:
    """Does the command's script or module exist?"""
    words = _words_of(project)
    kind, target, exists = command_target(root, words, project.advanced.working_dir)
    fix = "set launch.command to the training command, or run trainee init --force --command '...'"
    if target == PLACEHOLDER_SCRIPT:
        return "fail", "launch.command still runs the placeholder " + PLACEHOLDER_SCRIPT, fix
    if exists is False:
        where = project.advanced.working_dir
        what = "script" if kind == "script" else "module (no .py file or __main__.py)"
        return "fail", f"{target}: no such {what} in {where!r} of the project", fix
    if exists is None and kind == "module":
        return "warn", f"module {target} is not in the project; it must be installed", ""
    if exists is None:
        return "pass", f"{words[0] if words else '?'} runs no Python file of the project", ""
    return "pass", f"{kind} {target} exists", ""


def check_output(root: Path | str, project: ProjectFileSpec, mode: str) -> Verdict:
    """Would a guarded round write into the read-only project, with nothing redirecting
    it? An output option left unredirected fails; files the entrypoint writes at
    relative paths (``savefig("loss.png")``) warn."""
    if mode != "guarded":
        return "pass", "unsafe mode: the job may write anywhere it can", ""
    view = project_view(root, project)
    scratch = _scratch_folder(root, project)
    verdict = _check_output_options(project, view, scratch)
    if verdict[0] != "pass" or view is None:
        return verdict
    writes = _check_relative_writes(root, project, view.entrypoint, scratch)
    return writes if writes is not None else verdict


def _scratch_folder(root: Path | str, project: ProjectFileSpec) -> Path | None:
    """The working folder whose entries a guarded round's scratch folder links to
    (``advanced.scratch_cwd``, on by default when it is the project root), or None."""
    work = Path(root) / project.advanced.working_dir
    return work if uses_scratch_cwd(project.advanced, root, guarded=True) else None


def _lands_in_scratch(scratch: Path | None, value: str) -> bool:
    """Whether a guarded round writing to relative ``value`` writes its scratch folder
    (a new entry there), not a link to an existing, read-only entry of the project."""
    if scratch is None or os.path.isabs(value):
        return False
    first = Path(os.path.normpath(value)).parts[0] if value else ""
    return bool(first) and first != ".." and not (scratch / first).exists()


def _check_output_options(
    project: ProjectFileSpec, view: RunView | None, scratch: Path | None
) -> Verdict:
    if project.output.flag:
        return "pass", f"{project.output.flag} receives each round's outputs folder", ""
    if project.output.config_path:
        return "pass", f"output.{project.output.config_path} is set per round", ""
    if view is None:
        return "pass", "no entrypoint of the project is known: output not checked", ""
    ep = view.entrypoint
    if project.launch.config_style == "hydra":
        return "pass", "Hydra's run folder (hydra.run.dir) is each round's outputs folder", ""
    if view.hydra is not None or ep.framework == "hydra":
        if "hydra.run.dir" in view.settings:
            return "pass", "hydra.run.dir is set by the project's arguments", ""
        if _lands_in_scratch(scratch, "outputs"):
            return (
                "warn",
                f"{ep.path} is a Hydra app: its run folder goes under outputs/ of the round's "
                "scratch working folder ({round_dir}/cwd), not its outputs folder",
                "set output.flag: hydra.run.dir (or launch.config_style: hydra) in project.yaml",
            )
        return (
            "fail",
            f"{ep.path} is a Hydra app: it writes its run folder under outputs/ in the "
            "read-only project (and a folder under /tmp vanishes with the sandbox)",
            "set output.flag: hydra.run.dir (or launch.config_style: hydra) in project.yaml",
        )
    for o in view.outputs:
        given = view.settings.get(o.flag) or view.settings.get(o.name)
        value = given[0] if given else o.default
        if not isinstance(value, str) or not value or "{outputs_dir}" in value:
            continue
        if "{round_dir}" in value or "{trainee_dir}" in value or "{session_dir}" in value:
            continue
        where = f" ({given[1]})" if given else " (its default)"
        name = os.path.basename(value) if o.is_file else o.name
        fix = (
            f"set output.flag: {o.flag} in project.yaml"
            if o.primary
            else f"add to run.fixed_args: flag {o.flag}, value '{{outputs_dir}}/{name}'"
        )
        if _lands_in_scratch(scratch, value):
            return (
                "warn",
                f"{ep.path} writes to {value!r} through {o.flag}{where}: in a guarded round "
                "that is the round's scratch working folder ({round_dir}/cwd), not its "
                "outputs folder",
                fix,
            )
        return (
            "fail",
            f"{ep.path} writes to {value!r} through {o.flag}{where}: inside the project, "
            "which guarded rounds cannot write",
            fix,
        )
    return "pass", "no output option writes into the project", ""


def _check_relative_writes(
    root: Path | str, project: ProjectFileSpec, ep: Entrypoint, scratch: Path | None
) -> Verdict | None:
    """Files the entrypoint writes at paths relative to the working directory: the
    read-only project in a guarded round, unless the command runs from a round folder
    (its scratch folder, or one a shell command enters), where they land. None when
    there is nothing to say."""
    from trainee.discovery.outputs import relative_writes

    shell = project.advanced.shell_command or ""
    if re.search(r"\bcd\s+['\"]?\{(?:round_dir|outputs_dir)\}", shell):
        return None  # the command runs from the round's folder
    try:
        text = (Path(root) / ep.path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    writes = relative_writes(text[: 1 << 20])
    if not writes:
        return None
    blocked = [(line, path) for line, path in writes if not _lands_in_scratch(scratch, path)]
    if scratch is not None and not blocked:
        shown = ", ".join(f"line {line} {path!r}" for line, path in writes[:3])
        return (
            "pass",
            f"{ep.path} writes files relative to its working folder ({shown}): a guarded "
            "round runs in its scratch folder ({round_dir}/cwd), where they land",
            "",
        )
    writes = blocked if scratch is not None else writes
    shown = ", ".join(f"line {line} {path!r}" for line, path in writes[:3])
    script = f"{{project_root}}/{ep.path}" if ep.kind == "script" else " ".join(ep.command[1:])
    return (
        "warn",
        f"{ep.path} writes files relative to the working directory ({shown}): the "
        "read-only project in a guarded round",
        "run it from the round's folder: advanced.shell_command: 'cd {round_dir} && exec "
        f"python {script} {{extra_args}}' (or make the code write under its output folder)",
    )


def check_limits(root: Path | str, project: ProjectFileSpec) -> Verdict:
    """Is the training budget of a round bounded and reasonable?"""
    from trainee.discovery.limits import tied_mismatches

    view = project_view(root, project)
    if view is None:
        return "pass", "no entrypoint of the project is known: limits not checked", ""
    budget = view.budget
    if not budget.limits:
        return (
            "warn",
            f"no training-limit option found in {view.entrypoint.path}: a round ends when "
            "the script does, or at run.timeout_minutes",
            "",
        )
    problems = budget.problems
    if problems or not budget.bounded:
        first = budget.primary if not budget.bounded else problems[0]
        assert first is not None
        detail = "; ".join(p.problem or "" for p in problems) or (
            f"{first.flag} is {first.value}: no limit"
        )
        return (
            "fail",
            detail,
            f"set run.fixed_args {first.flag} to a finite value in project.yaml (a short "
            "budget: every round trains as long)",
        )
    mismatch = tied_mismatches(budget)
    shown = ", ".join(f"{x.flag} = {x.value}" for x in budget.limits if x.value is not None)
    if mismatch:
        return "warn", "; ".join(mismatch), "set the tied schedule lengths with the limit"
    return "pass", f"bounded: {shown}", ""
