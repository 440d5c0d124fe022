"""``trainee doctor``: every readiness check in one table, each with a one-line fix."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Literal

import anyio
import msgspec

from trainee.discovery import runplan
from trainee.discovery.metrics import training_metric_advice
from trainee.errors import ConfigError, InvalidParams, ProviderError, SandboxError, TraineeError
from trainee.ids import parse_round, parse_session
from trainee.jobfiles import read_bounded
from trainee.launch import gpus
from trainee.launch.backends import make_backend
from trainee.launch.layout import ProjectLayout
from trainee.launch.render import command_prefix
from trainee.launch.sandbox import check_bwrap
from trainee.metrics.extract import Extractor
from trainee.metrics.tb_source import INSTALL_HINT as TB_INSTALL_HINT
from trainee.metrics.tb_source import tensorboard_available
from trainee.monitor.tail import INDEX_SUFFIX, READ_CAP, FileTail
from trainee.policies import POLICIES, needs_provider
from trainee.spec import (
    Environment,
    MetricSource,
    ProjectSpec,
    SecurityMode,
    load_project,
)
from trainee.spec.goals import infer_goal

Status = Literal["pass", "warn", "fail"]

_FIXES = {
    "environment": "create the environment (python -m venv .venv, uv sync, conda env create) or fix launch.environment",
    "launcher": "fix launch.command or the environment",
    "sandbox": "apt-get install bubblewrap, or run with --unsafe",
    "metrics": "fix metrics.specs[] against the last round log",
}


class Check(msgspec.Struct, kw_only=True):
    name: str
    status: Status
    detail: str
    fix: str = ""


class DoctorReport(msgspec.Struct, kw_only=True):
    project_root: str
    ok: bool
    checks: list[Check]


def _check(name: str, status: Status, detail: str, fix: str = "") -> Check:
    return Check(name=name, status=status, detail=detail, fix=fix)


def check_config(root: str) -> tuple[ProjectSpec | None, Check]:
    try:
        spec = load_project(root)
    except ConfigError as exc:
        where = exc.file or ".trainee/project.yaml"
        return None, _check(
            "config",
            "fail",
            exc.message,
            f"edit {where}" + (f" line {exc.line}" if exc.line else ""),
        )
    return spec, _check(
        "config",
        "pass",
        f"{len(spec.tunables)} tunable params, {len(spec.metrics.specs)} metric specs",
    )


def check_data(spec: ProjectSpec) -> Check:
    missing = [d.path for d in spec.data if not (spec.root_path / d.path).exists()]
    if missing:
        return _check(
            "data", "fail", f"missing: {', '.join(missing)}", "create them or fix data[].path"
        )
    if not spec.data:
        return _check("data", "pass", "no data entries configured")
    return _check("data", "pass", f"{len(spec.data)} data paths exist inside the project")


def check_environment(spec: ProjectSpec, env: Mapping[str, str]) -> Check:
    path = env.get("PATH", os.defpath)
    kind = spec.launch.environment
    if kind == Environment.VENV:
        py = spec.root_path / ".venv" / "bin" / "python"
        if not py.exists():
            return _check(
                "environment",
                "fail",
                f"{py} does not exist",
                "python -m venv .venv (and install the project)",
            )
        return _check("environment", "pass", f"venv interpreter {py}")
    if kind == Environment.UV:
        if shutil.which("uv", path=path) is None:
            return _check(
                "environment", "fail", "uv is not on PATH", "install uv or set launch.environment"
            )
        return _check("environment", "pass", "uv found")
    if kind == Environment.CONDA:
        conda = shutil.which("conda", path=path)
        if conda is None:
            return _check(
                "environment",
                "fail",
                "conda is not on PATH",
                "activate conda or set launch.environment",
            )
        return _check("environment", "pass", f"conda found; env {spec.launch.env_name}")
    return _check("environment", "pass", "system environment (the caller's PATH)")


def check_launcher(spec: ProjectSpec, env: Mapping[str, str]) -> Check:
    if spec.advanced.shell_command:
        return _check("launcher", "pass", "advanced.shell_command runs through /bin/sh")
    argv = command_prefix(spec)
    exe = argv[0]
    found = (
        exe
        if os.path.isabs(exe) and os.access(exe, os.X_OK)
        else shutil.which(exe, path=env.get("PATH"))
    )
    if found is None:
        return _check(
            "launcher",
            "fail",
            f"{exe!r} is not found on PATH",
            "fix launch.command or the environment",
        )
    # whether the script or module exists is the entrypoint row's
    return _check("launcher", "pass", f"{exe} -> {found}")


def check_sandbox(spec: ProjectSpec, mode: str) -> Check:
    if mode != SecurityMode.GUARDED:
        return _check(
            "sandbox",
            "warn",
            "unsafe mode: no isolation",
            "use guarded mode when the job writes only under .trainee/",
        )
    if spec.advanced.backend.type != "local":
        return _check(
            "sandbox",
            "pass",
            f"guarded on {spec.advanced.backend.type}: each job runs bwrap on its node "
            "and fails at once with a clear message where it is missing",
        )
    try:
        check_bwrap()
    except SandboxError as exc:
        return _check(
            "sandbox", "fail", exc.message, "apt-get install bubblewrap, or run with --unsafe"
        )
    return _check("sandbox", "pass", "bwrap runs a trivial command")


def check_paths(spec: ProjectSpec) -> Check:
    trainee = spec.trainee_path
    for sub in ("logs", "runs", "artifacts"):
        path = trainee / sub
        if path.is_symlink():
            return _check(
                "paths",
                "fail",
                f".trainee/{sub} is a symlink",
                f"replace .trainee/{sub} by a real folder",
            )
    if not os.access(trainee, os.W_OK):
        return _check("paths", "fail", f"{trainee} is not writable", "fix its permissions")
    return _check(
        "paths", "pass", ".trainee/ is writable; log, signal and metric paths checked by the loader"
    )


def check_entrypoint(spec: ProjectSpec) -> Check:
    """The command's script or module exists in the project."""
    status, detail, fix = runplan.check_entrypoint(spec.project_root, spec.to_project_file())
    return _check("entrypoint", status, detail, fix)


def check_output(spec: ProjectSpec, mode: str = SecurityMode.GUARDED) -> Check:
    """A guarded round must not write into the read-only project unredirected."""
    if spec.output.config_path:
        return _check(
            "output", "pass", f"output.{spec.output.config_path} found in the baseline config"
        )
    project = spec.to_project_file()
    status, detail, fix = runplan.check_output(spec.project_root, project, mode)
    if status == "pass" and spec.baseline_config and not spec.output.flag:
        return _check(
            "output",
            "warn",
            "output.config_path is not set: the job's outputs go wherever its config says",
            "set output.config_path to the baseline config key of the output folder",
        )
    return _check("output", status, detail, fix)


def check_limits(spec: ProjectSpec) -> Check:
    """The training budget of a round is set and finite."""
    status, detail, fix = runplan.check_limits(spec.project_root, spec.to_project_file())
    return _check("limits", status, detail, fix)


def check_gpus(spec: ProjectSpec) -> Check:
    """``launch.gpus``: the GPUs NVML sees, and a CUDA_VISIBLE_DEVICES of launch.env
    that would keep every round on the same GPUs."""
    probe = gpus.probe_gpus()
    devices, note = gpus.wanted_gpus(spec, probe)
    per_gpu, parallel = spec.launch.rounds_per_gpu, spec.run.parallel
    if gpus.GPU_ENV in spec.launch.env:
        return _check(
            "gpus",
            "warn",
            f"launch.env sets {gpus.GPU_ENV}, so trainee leaves it as it is: every round "
            "sees the same GPUs whatever its slot",
            f"remove {gpus.GPU_ENV} from launch.env (trainee sets it per round)",
        )
    if not devices:
        return _check(
            "gpus",
            "warn",
            note,
            "pip install 'trainee[gpu]' where the daemon runs, or list the GPUs in launch.gpus",
        )
    free = probe.free_mib or {}
    unknown = [d for d in devices if probe.free_mib is not None and d not in free]
    if unknown:
        return _check(
            "gpus",
            "warn",
            f"launch.gpus names GPU {unknown[0]}, which NVML does not report "
            f"(it sees {', '.join(map(str, sorted(free)))})",
            "fix launch.gpus",
        )
    slots = len(devices) * per_gpu
    listed = ", ".join(f"{d} ({free[d]} MiB free)" if d in free else str(d) for d in devices)
    detail = f"{slots} round slot(s) on GPUs {listed}, {per_gpu} round(s) each"
    if probe.free_mib is None:
        detail += f"; {probe.note}: the GPUs are used as listed, in that order"
    if parallel > slots:
        detail += f"; run.parallel {parallel}: rounds beyond {slots} wait for a free slot"
    return _check("gpus", "pass", detail)


def _finished_ok(layout: ProjectLayout, log: Path) -> bool:
    """A round log whose round ended with exit code 0 (not running, stopped or failed).

    Its ``exit.json`` is in the control folder (in the round's workspace for rounds
    launched before it existed), read as the daemon reads it: never blocking."""
    for exit_file in (
        layout.control / log.parent.name / log.stem / "exit.json",
        layout.runs / log.parent.name / log.stem / "exit.json",
    ):
        try:
            data, _ = read_bounded(exit_file, 1 << 20, within=[exit_file.parent], deny=())
            info = json.loads(data)
        except (OSError, ValueError):
            continue
        return isinstance(info, dict) and info.get("returncode") == 0 and not info.get("stopped")
    return False


def _feed_round_log(extractor: Extractor, log: Path) -> None:
    """Feed a round log to ``extractor`` exactly as the runtime does: through the tail
    reader (stdout and stderr told apart, ``\r`` progress lines and ANSI codes
    stripped), batch by batch."""
    index = log.with_name(log.name + INDEX_SUFFIX)
    tail = FileTail(str(log), index=str(index) if index.exists() else None)
    try:
        while True:
            lines = tail.read(READ_CAP)
            done = not tail.backlog
            if done:
                lines += tail.flush()
            text = "\n".join(line.text for line in lines if not line.marker)
            if text:
                extractor.feed_output(text)
            if done:
                return
    finally:
        tail.close()


def check_metrics_on_last_log(spec: ProjectSpec) -> Check:
    """The metric specs tried on the last finished round: its log for the stdout
    specs, its files for the file sources (jsonl, tensorboard, csv, wandb_summary)."""
    if any(m.source == MetricSource.TENSORBOARD for m in spec.metrics.specs) and not (
        tensorboard_available()
    ):
        return _check("metrics", "fail", TB_INSTALL_HINT, "pip install 'trainee[tensorboard]'")
    contradicted = _goal_contradictions(spec)
    layout = ProjectLayout.for_root(spec.project_root)
    logs = sorted(
        (p for p in layout.artifacts.glob("session-*/round-*.log") if _finished_ok(layout, p)),
        key=lambda p: p.stat().st_mtime,
    )
    if not logs:
        if contradicted:
            return _check("metrics", "warn", contradicted, _GOAL_FIX)
        return _with_primary_advice(
            spec, _check("metrics", "pass", "no finished round log to try the metric specs on")
        )
    last = logs[-1]
    shown = f"{last.parent.name}/{last.name}"
    rnd = layout.session(parse_session(last.parent.name)).round(parse_round(last.stem))
    extractor = Extractor(
        spec.metrics.specs,
        placeholders=rnd.placeholders(),
        project_root=spec.project_root,
        wandb_dirs=(str(layout.cache_dirs()["WANDB_DIR"]), spec.working_dir),
    )
    _feed_round_log(extractor, last)
    extractor.read_files()
    result = extractor.result()
    found = result.finals
    checked = [m for m in spec.metrics.specs if m.source in _CHECKED_SOURCES]
    silent = [m.name for m in checked if m.name not in found]
    if silent:
        why = [f"{w.metric}: {w.message}" for w in result.warnings if w.metric in silent]
        return _check(
            "metrics",
            "fail",
            f"on {shown}: no value for {', '.join(silent)}; matched "
            f"{', '.join(sorted(found)) or 'nothing'}"
            + (f" ({'; '.join(why[:3])})" if why else ""),
            "fix metrics.specs[].key_or_pattern (and path) against that round's log and files",
        )
    if contradicted:
        return _check(
            "metrics",
            "warn",
            f"on {shown}: matched {', '.join(sorted(found))}; {contradicted}",
            _GOAL_FIX,
        )
    return _with_primary_advice(
        spec,
        _check(
            "metrics",
            "pass",
            f"on {shown}: matched {', '.join(sorted(found)) or '(no stdout or file specs)'}",
        ),
    )


def _with_primary_advice(spec: ProjectSpec, check: Check) -> Check:
    """A passing metrics row becomes a warning when the primary metric is a training
    metric; its fix names the validation metric the code prints, if any."""
    advice = training_metric_advice(spec.project_root, spec.to_project_file())
    if advice is None:
        return check
    detail, fix = advice
    return _check("metrics", "warn", f"{detail}; {check.detail}", fix)


_CHECKED_SOURCES = (
    MetricSource.STDOUT_REGEX,
    MetricSource.JSONL,
    MetricSource.TENSORBOARD,
    MetricSource.CSV,
    MetricSource.WANDB_SUMMARY,
)
"""Sources doctor can try on a finished round (log_regex specs read live logs only)."""

_GOAL_FIX = "check metrics.specs[].goal (min: lower is better, max: higher is better)"


def _goal_contradictions(spec: ProjectSpec) -> str:
    """The specs whose goal contradicts their name (``val_acc`` with goal min), said once."""
    wrong = []
    for m in spec.metrics.specs:
        named = infer_goal(m.name)
        if named is not None and named != m.goal:
            wrong.append(f"{m.name} has goal {m.goal} but its name says {named}")
    return "; ".join(wrong)


async def check_provider(env: Mapping[str, str], skip: bool, policy: str) -> Check:
    if not needs_provider(policy):  # whether the test is skipped or not
        return _check("provider", "pass", f"policy {policy} needs no provider")
    if skip:
        return _check(
            "provider",
            "warn",
            "live test skipped (--skip-provider-test)",
            "run trainee doctor without it before trainee run",
        )
    from trainee.llm.client import live_test_all
    from trainee.llm.settings import load_settings

    try:
        settings = load_settings(env)
        result = await live_test_all(settings)
    except (ProviderError, ConfigError) as exc:
        return _check(
            "provider",
            "fail",
            exc.message,
            "configure a provider (TRAINEE_LLM_PROVIDER, *_API_KEY, *_MODEL)",
        )
    if not result.get("ok"):
        return _check(
            "provider", "fail", str(result.get("error")), "check the provider settings and key"
        )
    detail = (
        f"{result.get('provider')} {result.get('model')} answered a structured request "
        f"({result.get('response_format')})"
    )
    if result.get("refused_formats"):
        detail += f"; refused: {', '.join(map(str, result['refused_formats']))}"
    if result.get("note"):
        return _check("provider", "warn", f"{detail}; {result['note']}", "fix the active provider")
    return _check("provider", "pass", detail)


async def check_backend(spec: ProjectSpec, env: Mapping[str, str]) -> Check:
    """Where rounds run: the cluster engine must answer (a bounded call)."""
    backend = make_backend(spec.advanced.backend, env)
    try:
        detail = await backend.probe()
    except TraineeError as exc:
        fix = {
            "slurm": "check sbatch/sinfo on PATH and SLURM_CONF, or advanced.backend.partition",
            "ray": "check advanced.backend.address and that the Ray head runs "
            "(pip install 'trainee[ray]' on this machine)",
        }.get(backend.name, "")
        return _check("backend", "fail", f"{backend.name}: {exc.message}", fix)
    guarded = str(spec.advanced.security_mode) == SecurityMode.GUARDED
    if backend.name != "local" and guarded:
        detail += "; guarded mode: each job checks for bwrap on its node"
    return _check("backend", "pass", f"{backend.name}: {detail}")


async def run_doctor(
    root: str,
    *,
    env: Mapping[str, str],
    skip_provider_test: bool,
    security_mode: str | None = None,
    policy: str | None = None,
) -> DoctorReport:
    """Every check; ``policy`` (default: decision.policy) decides whether a provider is
    needed."""
    if policy is not None and policy not in POLICIES:
        raise InvalidParams(
            f"--policy {policy!r}: unknown decision policy; choose one of {', '.join(POLICIES)}",
            {"field": "policy", "reason": "unknown"},
        )
    spec, config = check_config(root)
    checks = [config]
    if spec is not None:
        mode = security_mode or str(spec.advanced.security_mode)
        sync_checks: list[tuple[str, Callable[[], Check]]] = [
            ("data", lambda: check_data(spec)),
            ("paths", lambda: check_paths(spec)),
            ("entrypoint", lambda: check_entrypoint(spec)),
            ("output", lambda: check_output(spec, mode)),
            ("limits", lambda: check_limits(spec)),
            ("metrics", lambda: check_metrics_on_last_log(spec)),
            ("environment", lambda: check_environment(spec, env)),
            ("launcher", lambda: check_launcher(spec, env)),
            ("sandbox", lambda: check_sandbox(spec, mode)),
        ]
        if spec.launch.gpus != "none":
            sync_checks.append(("gpus", lambda: check_gpus(spec)))
        for name, fn in sync_checks:
            if name == "launcher" and checks[-1].status == "fail":
                checks.append(_check(name, "warn", "not checked: the environment is not ready"))
                continue
            try:
                checks.append(await anyio.to_thread.run_sync(fn))
            except (OSError, TraineeError) as exc:
                checks.append(_check(name, "fail", str(exc), _FIXES.get(name, "")))
        checks.append(await check_backend(spec, env))
        chosen = policy or str(spec.decision.policy)
        checks.append(await check_provider(env, skip_provider_test, chosen))
    ok = all(c.status != "fail" for c in checks)
    return DoctorReport(project_root=str(root), ok=ok, checks=checks)
