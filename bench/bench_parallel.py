"""Parallel candidates: a 6-round session with ``run.parallel: 2`` vs 1, in one run.

A private daemon runs the same project twice (random policy, unsafe, local
backend), whose rounds burn ~1.5 s of one CPU each (pure Python: no BLAS threads
to blur the picture). With K=1 the six rounds run one after another; with K=2 the
baseline runs alone, then steps of two candidates run at once. On 2 CPUs the ideal
ratio is 4 round-times / 6 = 0.67 (baseline, 2 + 2, and the 6th round alone).

Printed: each session's wall time (the store's created_at -> finished_at), the
ratio K=2 / K=1 and the ideal ratio. Run: ``.venv/bin/python bench/bench_parallel.py``
(BENCH_WORK_SEC=N to change the work per round).
"""

from __future__ import annotations

import math
import os
import select
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent))
sys.path.insert(0, str(BENCH))

from bench_round_overhead import TUNING_YAML, _env, _start_daemon  # noqa: E402

from trainee.rpc.client import RpcClient  # noqa: E402

ROUNDS = 6
WORK_SEC = float(os.environ.get("BENCH_WORK_SEC", "1.5"))

TRAIN_PY = """\
import sys, time
lr = float(sys.argv[sys.argv.index("--lr") + 1])
end = time.process_time() + {work}
x = 0
while time.process_time() < end:  # CPU time, so a shared CPU makes the round longer
    for i in range(10000):
        x += i * i
print(f"final val_loss={{(lr - 0.01) ** 2 + 0.1:.6f}}")
"""

PROJECT_YAML = """\
version: 1
launch:
  command: [python, train.py]
run:
  max_rounds: {rounds}
  timeout_minutes: 5
  parallel: {k}
metrics:
  specs:
    - name: val_loss
      source: stdout_regex
      key_or_pattern: 'final val_loss=(?P<value>-?\\d+(?:\\.\\d+)?)'
      goal: min
      required: true
advanced:
  security_mode: unsafe
"""


def _project(parent: Path, k: int) -> Path:
    root = parent / f"k{k}"
    (root / ".trainee").mkdir(parents=True)
    (root / "train.py").write_text(TRAIN_PY.format(work=WORK_SEC))
    (root / ".trainee" / "project.yaml").write_text(PROJECT_YAML.format(rounds=ROUNDS, k=k))
    (root / ".trainee" / "tuning.yaml").write_text(TUNING_YAML)
    return root


def _session(client: RpcClient, project: Path, env: dict[str, str]) -> dict[str, Any]:
    params = {
        "project_root": str(project),
        "env": env,
        "cwd": str(project),
        "policy": "random",
        "security_mode": "unsafe",
    }
    started = client.call("loop_start", params)
    get = {"project_root": str(project), "session": started["session"]}
    deadline = time.monotonic() + 60 + ROUNDS * (WORK_SEC * 4 + 5)
    while True:
        state: dict[str, Any] = client.call("loop_get", get)
        if state["session"]["status"] != "running" and not state["running"]:
            break
        if time.monotonic() > deadline:
            raise SystemExit(f"{project.name}: the session did not finish in time")
        select.select([], [], [], 0.1)
    if state["session"]["stop_reason"] != "max_rounds" or len(state["rounds"]) != ROUNDS:
        raise SystemExit(f"{project.name}: unexpected end {state['session']}")
    return state


def main() -> int:
    cpus = len(os.sched_getaffinity(0))
    runtime = Path(tempfile.mkdtemp(prefix="tr-bench-", dir="/tmp"))
    work = Path(tempfile.mkdtemp(prefix="tr-bench-par-"))
    env = _env(runtime)
    proc = _start_daemon(env, runtime / "daemon.log")
    walls: dict[int, float] = {}
    try:
        with RpcClient(str(runtime / "trainee.sock")) as client:
            for k in (1, 2):
                state = _session(client, _project(work, k), env)
                session = state["session"]
                walls[k] = session["finished_at"] - session["created_at"]
                steps = sorted({r["batch"] for r in state["rounds"]})
                print(
                    f"K={k}: {ROUNDS} rounds in {len(steps)} steps, "
                    f"session wall time {walls[k]:.2f} s"
                )
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        shutil.rmtree(runtime, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)
    ideal = (1 + math.ceil((ROUNDS - 1) / 2)) / ROUNDS
    ratio = walls[2] / walls[1]
    print(f"CPUs available: {cpus}; work per round {WORK_SEC:g} s of CPU")
    print(f"wall time K=2 / K=1: {ratio:.2f}x (ideal on 2+ CPUs: {ideal:.2f}x)")
    if cpus >= 2 and ratio >= 0.9:
        print("FAIL: two candidates at once did not save clear wall time")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
