"""The likely fix for a round that failed, read from the end of its log.

Used when a session ends because its baseline failed: the user sees what went wrong
and which field of project.yaml fixes it, instead of a loop proposing changes to a
command that cannot run. Each rule looks for one well-known message (Python's, argparse's,
Hydra's, PyTorch's, the shell's) in the last lines; the first rule that matches gives
the hint. Pure functions over text.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from trainee.spec import ConfigStyle, ProjectSpec
from trainee.states import RoundStatus

__all__ = ["failure_hint"]

_Rule = Callable[[re.Match[str], ProjectSpec], str]


def _missing_module(m: re.Match[str], spec: ProjectSpec) -> str:
    module = m.group(1).split(".")[0]
    env = str(spec.launch.environment)
    where = {
        "system": "the python found on the caller's PATH",
        "uv": "the project's uv environment (uv add / uv sync)",
        "venv": "the project's .venv",
        "conda": f"the conda environment {spec.launch.env_name}",
    }.get(env, env)
    return (
        f"the module '{module}' is not installed where the command runs ({where}): install it "
        "there (e.g. pip install it into that environment) or fix launch.environment"
    )


def _read_only(m: re.Match[str], spec: ProjectSpec) -> str:
    path = m.group("path")
    what = f"'{path}'" if path else "a path"
    if spec.output.flag is None and spec.output.config_path is None:
        return (
            f"the job writes {what} inside the project, which guarded rounds see read-only: "
            "pass the round's outputs folder to the option that sets that path with "
            "output.flag (e.g. output.flag: --out_dir), or write the value {outputs_dir} "
            "in run.fixed_args (output.config_path for a key of the baseline config)"
        )
    return (
        f"the job writes {what}, outside the folders a guarded round may write (the round's "
        "folder, .trainee/cache, .trainee/logs): point the option that sets it at "
        "{outputs_dir} or {round_dir} in run.fixed_args"
    )


def _ambiguous_config(m: re.Match[str], spec: ProjectSpec) -> str:
    return (
        "this is a Hydra app, which takes no --config flag: set launch.config_style: hydra "
        "(the round config is then passed as --config-path/--config-name)"
    )


def _unknown_argument(m: re.Match[str], spec: ProjectSpec) -> str:
    words = m.group(1).split()
    flags = [w.split("=", 1)[0] for w in words if w.startswith("-")] or words[:1]
    fields = sorted({f for flag in flags for f in _fields_of(spec, flag)})
    where = f" (set by {', '.join(fields)})" if fields else ""
    return (
        f"the command does not accept {' '.join(flags) or m.group(1)}{where}: fix or remove that "
        "flag; `trainee run --dry-run` shows the exact command"
    )


def _required_argument(m: re.Match[str], spec: ProjectSpec) -> str:
    return (
        f"the command needs {m.group(1).strip()}: add it to launch.args "
        "(or run.fixed_args for a training limit)"
    )


def _hydra_new_key(m: re.Match[str], spec: ProjectSpec) -> str:
    key = m.group(1)
    fields = _fields_of(spec, key)
    where = f" ({', '.join(fields)})" if fields else ""
    return (
        f"the override {key}{where} names a key the config does not have: write +{key} to add "
        f"it or ++{key} to add or set it"
    )


def _no_cuda(m: re.Match[str], spec: ProjectSpec) -> str:
    return (
        "the job asks for a GPU and there is none it can use here: make it run on the CPU "
        "(e.g. a device option in run.fixed_args: --device cpu) or run the rounds where a GPU "
        "is (advanced.backend)"
    )


def _out_of_memory(m: re.Match[str], spec: ProjectSpec) -> str:
    return "the job ran out of memory: lower the batch or model size of the baseline"


def _no_script(m: re.Match[str], spec: ProjectSpec) -> str:
    return (
        f"{m.group(1)} does not exist in {spec.working_dir}: fix launch.command or "
        "advanced.working_dir"
    )


def _not_found(m: re.Match[str], spec: ProjectSpec) -> str:
    return (
        f"'{m.group(1)}' was not found (No such file or directory): check data[] paths, "
        f"advanced.working_dir (the command runs in {spec.working_dir}) and the paths in "
        "launch.args / run.fixed_args"
    )


def _no_command(m: re.Match[str], spec: ProjectSpec) -> str:
    return f"'{m.group(1)}' is not on PATH: fix launch.command or launch.environment"


_RULES: tuple[tuple[re.Pattern[str], _Rule], ...] = (
    (re.compile(r"No module named '([^']+)'"), _missing_module),
    (re.compile(r"Read-only file system(?:: '(?P<path>[^']*)')?"), _read_only),
    (re.compile(r"ambiguous option: --config could match --config-"), _ambiguous_config),
    (re.compile(r"error: unrecognized arguments?: (.+)$"), _unknown_argument),
    (re.compile(r"(?:Error: )?No such option: (\S+)"), _unknown_argument),
    (re.compile(r"error: the following arguments are required: (.+)$"), _required_argument),
    (re.compile(r"Could not override '([^']+)'"), _hydra_new_key),
    (re.compile(r"Key '([^']+)' is not in struct"), _hydra_new_key),
    (
        re.compile(
            r"Torch not compiled with CUDA enabled|No CUDA GPUs are available|"
            r"Found no NVIDIA driver|CUDA driver version is insufficient|"
            r"no CUDA-capable device is detected|CUDA is not available"
        ),
        _no_cuda,
    ),
    (re.compile(r"CUDA out of memory|MemoryError|Cannot allocate memory"), _out_of_memory),
    (re.compile(r"can't open file '([^']+)': \[Errno 2\]"), _no_script),
    (re.compile(r"No such file or directory: '([^']+)'"), _not_found),
    (re.compile(r"(?:^|: )([^\s:]+): (?:command )?not found$"), _no_command),
)


def _fields_of(spec: ProjectSpec, flag: str) -> list[str]:
    """The project.yaml / tuning.yaml fields that pass ``flag`` (or override key)."""
    key = flag.lstrip("+~")
    out: list[str] = []
    for i, arg in enumerate(spec.launch.args):
        if arg.flag.lstrip("+~") == key:
            out.append(f"launch.args[{i}]")
    for i, arg in enumerate(spec.run.fixed_args):
        if arg.flag.lstrip("+~") == key:
            out.append(f"run.fixed_args[{i}]")
    for i, item in enumerate(spec.data):
        if item.flag and item.flag.lstrip("+~") == key:
            out.append(f"data[{i}].flag")
    if spec.output.flag and spec.output.flag.lstrip("+~") == key:
        out.append("output.flag")
    flag_style = ConfigStyle(spec.launch.config_style) == ConfigStyle.FLAG
    if spec.baseline_config and flag_style and key == spec.launch.config_flag:
        out.append("launch.config_flag")
    for i, t in enumerate(spec.tunables):
        if t.key.lstrip("+~") == key:
            out.append(f"tuning.yaml params[{i}] ({t.name})")
    return out


def failure_hint(
    spec: ProjectSpec,
    tail: Sequence[str],
    *,
    status: str,
    returncode: int | None = None,
    signal: str | None = None,
) -> str:
    """The likely fix for a failed round, from the last lines of its log."""
    if status == RoundStatus.TIMED_OUT:
        return (
            f"it ran past run.timeout_minutes ({spec.run.timeout_minutes:g}): raise it, or lower "
            "the training limit (epochs, steps) in run.fixed_args"
        )
    for line in reversed(tail):
        for pattern, rule in _RULES:
            m = pattern.search(line)
            if m is not None:
                return rule(m, spec)
    if signal == "SIGKILL" or returncode in (-9, 137):
        return "it was killed (SIGKILL), most often for using too much memory"
    return (
        "see the end of its log below; run the command of `trainee run --dry-run` by hand "
        "until it finishes"
    )
