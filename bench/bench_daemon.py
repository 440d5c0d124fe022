"""Daemon and CLI figures, measured in one run on this machine.

Prints:
- ``trainee status`` against a running daemon vs ``python -c pass`` (median of N runs; goal <= 3x)
- JSON-RPC calls per second over one connection (goal >= 2,000/s)
- daemon start-to-ready (median), and as a ratio of ``python -c pass``
- idle RSS of the daemon
"""

from __future__ import annotations

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

from trainee.rpc.client import RpcClient

RUNS = int(os.environ.get("BENCH_RUNS", "15"))


def _env(runtime: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINEE_")}
    env["TRAINEE_SOCKET"] = str(runtime / "trainee.sock")
    env["HOME"] = str(runtime)
    return env


def _start(env: dict[str, str]) -> tuple[subprocess.Popen[bytes], float]:
    read_fd, write_fd = os.pipe()
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainee.daemon", "--port", "0", "--ready-fd", str(write_fd)],
        env=env,
        pass_fds=(write_fd,),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    os.close(write_fd)
    line = b""
    while not line.endswith(b"\n"):
        select.select([read_fd], [], [], 30)
        chunk = os.read(read_fd, 1024)
        if not chunk:
            break
        line += chunk
    elapsed = time.perf_counter() - t0
    os.close(read_fd)
    if not line.startswith(b"READY"):
        raise SystemExit(f"daemon did not start: {line!r}")
    return proc, elapsed


def _median_run(cmd: list[str], env: dict[str, str]) -> float:
    times = []
    for _ in range(RUNS):
        t0 = time.perf_counter()
        subprocess.run(
            cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True
        )
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def main() -> int:
    runtime = Path(tempfile.mkdtemp(prefix="tr-bench-", dir="/tmp"))
    env = _env(runtime)
    try:
        baseline = _median_run([sys.executable, "-c", "pass"], env)
        starts = []
        for _ in range(5):
            proc, elapsed = _start(env)
            starts.append(elapsed)
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
        proc, _ = _start(env)
        try:
            script = Path(sys.executable).with_name("trainee")
            cli = [str(script)] if script.exists() else [sys.executable, "-m", "trainee"]
            status = _median_run([*cli, "status"], env)
            with RpcClient(runtime / "trainee.sock", timeout=30) as client:
                client.call("daemon_hello")
                n = 5000
                t0 = time.perf_counter()
                for _ in range(n):
                    client.call("daemon_hello")
                rate = n / (time.perf_counter() - t0)
            rss = _rss_kib(proc.pid)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
    finally:
        shutil.rmtree(runtime, ignore_errors=True)
    start = statistics.median(starts)
    rows = [
        ("trainee status vs python -c pass", f"{status / baseline:.2f}x", "<= 3x"),
        ("JSON-RPC calls/s, one connection", f"{rate:,.0f}/s", ">= 2,000/s"),
        ("daemon start-to-ready vs python -c pass", f"{start / baseline:.1f}x", "(<= 1.5 s)"),
        ("daemon idle RSS", f"{rss / 1024:.0f} MiB", ""),
    ]
    width = max(len(r[0]) for r in rows)
    print(f"{'measure':<{width}}  {'value':>12}  goal   (medians of {RUNS} runs where timed)")
    for name, value, goal in rows:
        print(f"{name:<{width}}  {value:>12}  {goal}")
    print(
        f"absolute, for reference only: python -c pass {baseline * 1000:.0f} ms, start {start * 1000:.0f} ms"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
