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

from trainee.errors import ConfigError, ProviderError, SandboxError, TraineeError
from trainee.launch.backends import make_backend
from trainee.launch.layout import ProjectLayout
from trainee.launch.render import command_prefix
from trainee.launch.sandbox import check_bwrap
from trainee.metrics.extract import Extractor
from trainee.policies import needs_provider
from trainee.spec import Environment, MetricSource, ProjectSpec, SecurityMode, load_project

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
    script = next((a for a in argv[1:] if a.endswith(".py")), None)
    if script and not (Path(spec.working_dir) / script).exists():
        return _check(
            "launcher",
            "fail",
            f"{script} not found in {spec.working_dir}",
            "fix launch.command or advanced.working_dir",
        )
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


def check_output(spec: ProjectSpec) -> Check:
    if spec.output.config_path:
        return _check(
            "output", "pass", f"output.{spec.output.config_path} found in the baseline config"
        )
    if spec.baseline_config:
        return _check(
            "output",
            "warn",
            "output.config_path is not set: the job's outputs go wherever its config says",
            "set output.config_path to the baseline config key of the output folder",
        )
    return _check("output", "pass", "no baseline config")


def _finished_ok(layout: ProjectLayout, log: Path) -> bool:
    """A round log whose round ended with exit code 0 (not running, stopped or failed)."""
    exit_file = layout.runs / log.parent.name / log.stem / "exit.json"
    try:
        info = json.loads(exit_file.read_text())
    except (OSError, ValueError):
        return False
    return isinstance(info, dict) and info.get("returncode") == 0 and not info.get("stopped")


def check_metrics_on_last_log(spec: ProjectSpec) -> Check:

    layout = ProjectLayout.for_root(spec.project_root)
    logs = sorted(
        (p for p in layout.artifacts.glob("session-*/round-*.log") if _finished_ok(layout, p)),
        key=lambda p: p.stat().st_mtime,
    )
    if not logs:
        return _check("metrics", "pass", "no finished round log to try the metric specs on")
    last = logs[-1]
    shown = f"{last.parent.name}/{last.name}"
    extractor = Extractor(spec.metrics.specs, placeholders={}, project_root=spec.project_root)
    with open(last, encoding="utf-8", errors="replace") as fh:
        extractor.feed_output(fh.read(8 * 2**20))
    found = extractor.result().finals
    checked = [m for m in spec.metrics.specs if m.source == MetricSource.STDOUT_REGEX]
    silent = [m.name for m in checked if m.name not in found]
    if silent:
        return _check(
            "metrics",
            "fail",
            f"on {shown}: no match for {', '.join(silent)}; matched {', '.join(sorted(found)) or 'nothing'}",
            "fix metrics.specs[].key_or_pattern against that log",
        )
    return _check(
        "metrics",
        "pass",
        f"on {shown}: matched {', '.join(sorted(found)) or '(no stdout specs)'}",
    )


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
    from trainee.llm.client import live_test
    from trainee.llm.settings import load_settings

    try:
        settings = load_settings(env)
        result = await live_test(settings)
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
    return _check("provider", "pass", f"{result.get('provider')} {result.get('model')} answered")


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
    root: str, *, env: Mapping[str, str], skip_provider_test: bool, security_mode: str | None = None
) -> DoctorReport:
    spec, config = check_config(root)
    checks = [config]
    if spec is not None:
        mode = security_mode or str(spec.advanced.security_mode)
        sync_checks: list[tuple[str, Callable[[], Check]]] = [
            ("data", lambda: check_data(spec)),
            ("paths", lambda: check_paths(spec)),
            ("output", lambda: check_output(spec)),
            ("metrics", lambda: check_metrics_on_last_log(spec)),
            ("environment", lambda: check_environment(spec, env)),
            ("launcher", lambda: check_launcher(spec, env)),
            ("sandbox", lambda: check_sandbox(spec, mode)),
        ]
        for name, fn in sync_checks:
            if name == "launcher" and checks[-1].status == "fail":
                checks.append(_check(name, "warn", "not checked: the environment is not ready"))
                continue
            try:
                checks.append(await anyio.to_thread.run_sync(fn))
            except (OSError, TraineeError) as exc:
                checks.append(_check(name, "fail", str(exc), _FIXES.get(name, "")))
        checks.append(await check_backend(spec, env))
        checks.append(await check_provider(env, skip_provider_test, str(spec.decision.policy)))
    ok = all(c.status != "fail" for c in checks)
    return DoctorReport(project_root=str(root), ok=ok, checks=checks)
