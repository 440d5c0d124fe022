"""What the cluster tests share: a tiny project whose rounds can be held running, a
private daemon, and the calls that drive a session through the real CLI."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path
from typing import Any

import yaml  # type: ignore[import-untyped]

from tests.support.daemon import run_cli
from tests.support.loop import SESSION
from tests.support.projects import HOLD_PROJECT_YAML, LR_TUNING_YAML

HOLD_LR = 0.3
"""A round with this lr prints steps while the project's ``hold`` file exists."""
FAIL_LR = 0.7
"""A round with this lr fails: a message on stderr and exit status 3."""
BUSY_LR = (0.5, 0.7)
"""A round with an lr in this range works for BUSY_SEC seconds."""
BUSY_SEC = 4

TRAIN_PY = f"""\
import argparse, os, signal, sys, time
def on_term(signum, frame):  # a polite job: saves for a moment, then exits
    print("stop requested: saving", flush=True)
    time.sleep(1.5)
    print("checkpoint saved", flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
p = argparse.ArgumentParser()
p.add_argument("--lr", type=float, default=0.1)
p.add_argument("--data-root")
args = p.parse_args()
root = os.path.dirname(os.path.abspath(__file__))
print(f"start lr={{args.lr}} host={{os.uname().nodename}}", flush=True)
print(f"has MY_API_KEY={{'MY_API_KEY' in os.environ}}", flush=True)
if args.lr == {FAIL_LR}:
    print("RuntimeError: CUDA out of memory (simulated)", file=sys.stderr, flush=True)
    sys.exit(3)
step = 0
deadline = time.monotonic() + 120
while args.lr == {HOLD_LR} and os.path.exists(os.path.join(root, "hold")):
    if time.monotonic() > deadline:
        break
    print(f"step {{step}} loss={{1.0 / (step + 1):.4f}}", flush=True)
    step += 1
    time.sleep(0.1)
if {BUSY_LR[0]} <= args.lr < {BUSY_LR[1]}:
    time.sleep({BUSY_SEC})
for i in range(3):
    print(f"step {{step + i}} loss={{(args.lr - 0.05) ** 2 + 0.1 + 0.01 * (2 - i):.6f}}", flush=True)
    time.sleep(0.05)
print(f"final val_loss={{(args.lr - 0.05) ** 2 + 0.1:.6f}}", flush=True)
"""


def make_project(root: Path, backend: dict[str, Any], **run: Any) -> Path:
    """The hold project in ``root`` with ``advanced.backend`` and ``run`` overrides."""
    (root / ".trainee").mkdir(parents=True)
    (root / "data").mkdir()
    (root / "train.py").write_text(TRAIN_PY)
    (root / "hold").touch()
    spec = yaml.safe_load(textwrap.dedent(HOLD_PROJECT_YAML))
    spec["advanced"]["backend"] = backend
    # the one secret-named variable the job may get (a Slurm job does; Ray never shows it
    # on its dashboard)
    spec["launch"]["env_passthrough"] = ["MY_API_KEY"]
    spec["run"].update(run)
    (root / ".trainee" / "project.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    (root / ".trainee" / "tuning.yaml").write_text(LR_TUNING_YAML)
    return root


def set_backend(project: Path, backend: dict[str, Any]) -> None:
    """Change only ``advanced.backend`` of a project's project.yaml (any example)."""
    path = project / ".trainee" / "project.yaml"
    spec = yaml.safe_load(path.read_text())
    spec.setdefault("advanced", {})["backend"] = backend
    path.write_text(yaml.safe_dump(spec, sort_keys=False))


def client_env(daemon_env: dict[str, str], extra: dict[str, str]) -> dict[str, str]:
    env = dict(daemon_env)
    env.update(extra)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    return env


def start_session(project: Path, env: dict[str, str], *args: str) -> None:
    result = run_cli("run", str(project), "--detach", *args, env=env, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == SESSION


def rpc(env: dict[str, str], method: str, params: dict[str, Any]) -> Any:
    result = run_cli("call", method, "--input", json.dumps(params), env=env)
    assert result.returncode == 0, f"{method}: {result.stderr}"
    return result.json()


def round_log(project: Path, index: int) -> str:
    path = project / ".trainee" / "artifacts" / SESSION / f"round-{index:04d}.log"
    return path.read_text(errors="replace") if path.exists() else ""
