"""The CLI is a thin client: its start-up imports none of the daemon's heavy modules."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("litellm", "anyio", "aiosqlite", "starlette", "uvicorn", "watchfiles", "ruamel")

PROBE = f"""
import runpy, sys
sys.argv = ['trainee'] + sys.argv[1:]
try:
    runpy.run_module('trainee', run_name='__main__')
except SystemExit:
    pass
heavy = sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r}))
sys.stderr.write('HEAVY:' + ','.join(heavy) + '\\n')
"""


def _heavy_after(*args: str) -> list[str]:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=60
    )
    line = [ln for ln in proc.stderr.splitlines() if ln.startswith("HEAVY:")][-1]
    return [m for m in line.removeprefix("HEAVY:").split(",") if m]


def test_help_imports_nothing_heavy() -> None:
    assert _heavy_after("--help") == []


def test_subcommand_help_and_version_import_nothing_heavy() -> None:
    for args in (["version"], ["run", "--help"], ["call", "--help"], ["tools", "--help"]):
        assert _heavy_after(*args) == [], args


def test_python_dash_m_trainee_help_works() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "trainee", "--help"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0
    for command in (
        "init",
        "prepare",
        "tunables",
        "doctor",
        "run",
        "webui",
        "serve",
        "tools",
        "call",
        "report",
        "status",
        "stop",
        "attach",
        "logs",
        "daemon",
        "version",
    ):
        assert command in proc.stdout, command
