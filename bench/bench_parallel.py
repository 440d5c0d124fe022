"""Parallel candidates: a 6-round session with ``run.parallel: 2`` vs 1, in one run.

A private daemon runs the same project twice (random policy, unsafe, local
backend), whose rounds burn ~1.5 s of one CPU each (pure Python: no BLAS threads
to blur the picture). With K=1 the six rounds run one after another; with K=2 the
baseline runs alone, then steps of two candidates run at once. On 2 CPUs the ideal
ratio is 4 round-times / 6 = 0.67 (baseline, 2 + 2, and the 6th round alone).

Printed: each session's wall time (the store's created_at -> finished_at), the
ratio K=2 / K=1 and the ideal ratio. Run: ``.venv/bin/python bench/bench_parallel.py``
(BENCH_WORK_SEC=N to change the work per round). ``BENCH_BACKENDS=local,slurm,ray``
also measures on a single-node Slurm and a Ray head with 2 CPUs, started on loopback
by the test harnesses of ``tests/cluster`` (needs `make test-cluster`'s packages).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import select
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Iterator
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


def _project(parent: Path, k: int, backend: dict[str, Any]) -> Path:
    root = parent / f"{backend['type']}-k{k}"
    (root / ".trainee").mkdir(parents=True)
    (root / "train.py").write_text(TRAIN_PY.format(work=WORK_SEC))
    text = PROJECT_YAML.format(rounds=ROUNDS, k=k)
    text += f"  backend: {json.dumps(backend)}\n"  # JSON is YAML
    (root / ".trainee" / "project.yaml").write_text(text)
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


@contextlib.contextmanager
def _engine(name: str) -> Iterator[tuple[dict[str, Any], dict[str, str]]]:
    """``advanced.backend`` and the client environment of a backend, with its engine up."""
    if name == "local":
        yield {"type": "local"}, {}
        return
    base = Path(tempfile.mkdtemp(prefix=f"tb{name[0]}-", dir="/tmp"))
    try:
        if name == "slurm":
            from tests.cluster.slurm_harness import SlurmCluster

            with SlurmCluster(base, cpus=2) as slurm:
                yield {"type": "slurm", "cpus": 1, "poll_interval_sec": 0.3}, dict(slurm.env)
        elif name == "ray":
            from tests.cluster.ray_harness import RayCluster

            with RayCluster(base, num_cpus=2) as ray:
                yield {"type": "ray", "address": ray.address, "poll_interval_sec": 0.3}, {}
        else:
            raise SystemExit(f"unknown backend {name!r} in BENCH_BACKENDS")
    finally:
        shutil.rmtree(base, ignore_errors=True)


def main() -> int:
    cpus = len(os.sched_getaffinity(0))
    backends = [b.strip() for b in os.environ.get("BENCH_BACKENDS", "local").split(",") if b]
    runtime = Path(tempfile.mkdtemp(prefix="tr-bench-", dir="/tmp"))
    work = Path(tempfile.mkdtemp(prefix="tr-bench-par-"))
    env = _env(runtime)
    proc = _start_daemon(env, runtime / "daemon.log")
    ratios: dict[str, float] = {}
    try:
        with RpcClient(str(runtime / "trainee.sock")) as client:
            for name in backends:
                with _engine(name) as (backend, extra):
                    walls: dict[int, float] = {}
                    for k in (1, 2):
                        project = _project(work, k, backend)
                        state = _session(client, project, {**env, **extra})
                        session = state["session"]
                        walls[k] = session["finished_at"] - session["created_at"]
                        steps = sorted({r["batch"] for r in state["rounds"]})
                        print(
                            f"{name} K={k}: {ROUNDS} rounds in {len(steps)} steps, "
                            f"session wall time {walls[k]:.2f} s"
                        )
                    ratios[name] = walls[2] / walls[1]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        shutil.rmtree(runtime, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)
    ideal = (1 + math.ceil((ROUNDS - 1) / 2)) / ROUNDS
    print(f"CPUs available: {cpus}; work per round {WORK_SEC:g} s of CPU")
    failed = False
    for name, ratio in ratios.items():
        print(f"{name}: wall time K=2 / K=1: {ratio:.2f}x (ideal on 2+ CPUs: {ideal:.2f}x)")
        if cpus >= 2 and ratio >= 0.9:
            print(f"FAIL: {name}: two candidates at once did not save clear wall time")
            failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
