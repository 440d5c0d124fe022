"""Per-round overhead of the session loop, measured in one run on this machine.

A tiny project whose command is ``python train.py --lr X`` (stdlib only, prints its
metric and exits) runs a session of ROUNDS rounds in a private daemon, in three
set-ups: unsafe + random policy, unsafe + llm policy answered at once by the fake
LLM server, guarded (bwrap) + random policy. For each pair of consecutive rounds:

    cycle    = start of round n+1 - start of round n        (the store's started_at)
    overhead = cycle - bare command time                      (goal <= 100 ms unsafe,
                                                               <= 250 ms guarded)

where the bare command time is the median wall time of the same command run
directly with subprocess. The first cycle is dropped (it imports the policy).
Also printed: the command's time as the round monitor measured it (exit.json),
so the cost of launching through the monitor and bwrap can be told apart.

Run: ``.venv/bin/python bench/bench_round_overhead.py`` (BENCH_ROUNDS=N to change N).
"""

from __future__ import annotations

import itertools
import json
import os
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.fakes.llm_server import FakeLLM  # noqa: E402
from trainee.rpc.client import RpcClient  # noqa: E402

ROUNDS = int(os.environ.get("BENCH_ROUNDS", "12"))
BARE_RUNS = 15
VENDOR_PREFIXES = ("TRAINEE_", "OPENAI_", "ANTHROPIC_", "MOONSHOT_", "LLM_PROVIDER")

TRAIN_PY = """\
import sys
lr = float(sys.argv[sys.argv.index("--lr") + 1])
for epoch in range(3):
    print(f"epoch={epoch} loss={1 / (epoch + 1 + lr):.5f}")
print(f"final val_loss={(lr - 0.01) ** 2 + 0.1:.6f}")
"""

PROJECT_YAML = """\
version: 1
launch:
  command: [python, train.py]
run:
  max_rounds: 50
  timeout_minutes: 5
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

TUNING_YAML = """\
version: 1
params:
  - name: lr
    flag: --lr
    type: float
    default: 0.001
    min_value: 0.00001
    max_value: 1.0
    log: true
"""


def _project(parent: Path, name: str) -> Path:
    root = parent / name
    (root / ".trainee").mkdir(parents=True)
    (root / "train.py").write_text(TRAIN_PY)
    (root / ".trainee" / "project.yaml").write_text(PROJECT_YAML)
    (root / ".trainee" / "tuning.yaml").write_text(TUNING_YAML)
    return root


def _env(runtime: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(VENDOR_PREFIXES)}
    env["TRAINEE_SOCKET"] = str(runtime / "trainee.sock")
    env["HOME"] = str(runtime / "home")
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    return env


def _start_daemon(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    read_fd, write_fd = os.pipe()
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "trainee.daemon", "--port", "0", "--ready-fd", str(write_fd)],
            env=env,
            pass_fds=(write_fd,),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            start_new_session=True,
        )
    os.close(write_fd)
    line = b""
    deadline = time.monotonic() + 60
    while not line.endswith(b"\n") and time.monotonic() < deadline:
        ready, _, _ = select.select([read_fd], [], [], 1)
        if ready:
            chunk = os.read(read_fd, 1024)
            if not chunk:
                break
            line += chunk
    os.close(read_fd)
    if not line.startswith(b"READY"):
        proc.kill()
        raise SystemExit(f"daemon did not start: {line!r}; see {log}")
    return proc


def _bare_median(project: Path, env: dict[str, str]) -> float:
    times = []
    for i in range(BARE_RUNS):
        t0 = time.perf_counter()
        subprocess.run(
            ["python", "train.py", "--lr", f"{0.001 * (i + 1)}"],
            cwd=project,
            env=env,
            stdout=subprocess.DEVNULL,
            check=True,
        )
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _session(
    client: RpcClient, project: Path, env: dict[str, str], *, policy: str, mode: str
) -> dict[str, Any]:
    params = {
        "project_root": str(project),
        "env": env,
        "cwd": str(project),
        "policy": policy,
        "security_mode": mode,
        "max_rounds": ROUNDS,
    }
    started = client.call("loop_start", params)
    get = {"project_root": str(project), "session": started["session"]}
    deadline = time.monotonic() + 60 + ROUNDS * 10
    while True:
        state: dict[str, Any] = client.call("loop_get", get)
        if state["session"]["status"] != "running" and not state["running"]:
            break
        if time.monotonic() > deadline:
            raise SystemExit(f"{project.name}: the session did not finish in time")
        select.select([], [], [], 0.2)
    session = state["session"]
    if session["stop_reason"] != "max_rounds" or len(state["rounds"]) != ROUNDS:
        raise SystemExit(f"{project.name}: unexpected end {session}")
    return state


def _figures(project: Path, state: dict[str, Any], bare: float) -> dict[str, float]:
    rounds = state["rounds"]
    starts = [r["started_at"] for r in rounds]
    monitored = []
    for r in rounds:
        exit_file = project / ".trainee" / "runs" / state["session"]["id"]
        exit_file = exit_file / f"round-{r['index']:04d}" / "exit.json"
        monitored.append(json.loads(exit_file.read_text())["duration_sec"])
    cycles = [b - a for a, b in itertools.pairwise(starts)][1:]
    overheads = [c - bare for c in cycles]
    inner = [c - m for c, m in zip(cycles, monitored[1:], strict=False)]
    return {
        "cycle": statistics.median(cycles),
        "overhead": statistics.median(overheads),
        "overhead_p90": sorted(overheads)[int(0.9 * (len(overheads) - 1))],
        "monitored": statistics.median(monitored),
        "inner": statistics.median(inner),
    }


def main() -> int:
    if ROUNDS < 4:
        raise SystemExit("BENCH_ROUNDS must be at least 4")
    runtime = Path(tempfile.mkdtemp(prefix="tr-bench-", dir="/tmp"))
    work = Path(tempfile.mkdtemp(prefix="tr-bench-proj-"))
    env = _env(runtime)
    results: list[tuple[str, dict[str, float], str]] = []
    proc = _start_daemon(env, runtime / "daemon.log")
    try:
        bare = _bare_median(_project(work, "bare"), env)
        plans = [
            {
                "content": json.dumps(
                    {
                        "hypothesis": f"lr {0.0001 * (i + 2):g}",
                        "change_summary": "lr",
                        "params": {"lr": 0.0001 * (i + 2)},
                        "expected": "val_loss decreases",
                        "stop": False,
                        "stop_reason": "",
                    }
                ),
                "usage": {"prompt_tokens": 10, "completion_tokens": 10},
            }
            for i in range(ROUNDS)
        ]
        with (
            FakeLLM([{"content": "OK"}, *plans]) as fake,
            RpcClient(runtime / "trainee.sock", timeout=120) as client,
        ):
            llm_env = {
                **env,
                "TRAINEE_LLM_PROVIDER": "openai_compatible",
                "TRAINEE_LLM_BASE_URL": fake.openai_base_url,
                "TRAINEE_LLM_MODEL": "fake-model",
            }
            setups = [
                ("unsafe, random policy", "random", "unsafe", env, "<= 100 ms"),
                ("unsafe, llm policy (fake, instant)", "llm", "unsafe", llm_env, "<= 100 ms"),
                ("guarded (bwrap), random policy", "random", "guarded", env, "<= 250 ms"),
            ]
            for i, (name, policy, mode, session_env, goal) in enumerate(setups):
                project = _project(work, f"p{i}")
                state = _session(client, project, session_env, policy=policy, mode=mode)
                results.append((name, _figures(project, state, bare), goal))
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(runtime, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)

    print(f"bare command (python train.py, median of {BARE_RUNS}): {bare * 1000:.0f} ms")
    print(f"per-round figures, medians over rounds 2..{ROUNDS} of one session each:")
    width = max(len(name) for name, _, _ in results)
    head = f"{'set-up':<{width}}  {'cycle':>8}  {'overhead':>9}  {'p90':>7}  goal"
    print(head + "       command in monitor  cycle - monitored")
    for name, f, goal in results:
        print(
            f"{name:<{width}}  {f['cycle'] * 1000:6.0f}ms  {f['overhead'] * 1000:7.0f}ms"
            f"  {f['overhead_p90'] * 1000:5.0f}ms  {goal:<10} {f['monitored'] * 1000:8.0f} ms"
            f"  {f['inner'] * 1000:14.0f} ms"
        )
    print(
        "overhead = round start to next round start minus the bare command's time; "
        "ratio cycle/bare: " + ", ".join(f"{f['cycle'] / bare:.1f}x" for _, f, _ in results)
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
