"""Round output path: the monitor (trainee.shim) + the live tailer, measured in one run.

    python bench/bench_output.py

Prints:
- throughput: a child printing 1,000,000 short metric lines as fast as it can,
  wall time under the monitor + tailer (every point parsed by one regex pass per
  batch) vs the same child writing to /dev/null (goal <= 1.3x). The child runs
  with Python's default block-buffered stdout; one more run with
  PYTHONUNBUFFERED=1 (two write() calls per line, common in containers) shows
  what a job that does not buffer costs;
- latency: line written (timestamp inside the line) -> seen by the batch
  callback, at 1,000 lines/s (goal p50 <= 30 ms, p99 <= 150 ms);
- CPU of this (tailing) process while a child prints 10,000 lines/s
  (goal <= 25 % of one core).

Nothing is asserted: the figures are ratios and percentiles of this run.
"""

from __future__ import annotations

import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio

from trainee.launch.layout import ProjectLayout, RoundLayout
from trainee.monitor.process import is_alive, spawn_round, wait_exit
from trainee.monitor.tail import Line, tail_files

LINES = int(os.environ.get("BENCH_LINES", "1000000"))
REPEAT = int(os.environ.get("BENCH_REPEAT", "3"))
METRIC = re.compile(r"step (\d+) loss ([0-9.]+)")

FAST_CHILD = """
import sys
n = int(sys.argv[1])
for i in range(n):
    print(f"step {i} loss {1.0 / (i + 1):.6f}")
"""

PACED_CHILD = """
import sys, time
rate, seconds = float(sys.argv[1]), float(sys.argv[2])
burst = max(1, int(rate / 1000))          # lines per 1 ms tick
start = time.perf_counter()
i = 0
while i < rate * seconds:
    due = start + i / rate
    while (now := time.perf_counter()) < due:
        time.sleep(min(0.0005, due - now))
    for _ in range(burst):
        sys.stdout.write(f"t {time.time():.6f} step {i} loss {1.0 / (i + 1):.6f}\\n")
        i += 1
    sys.stdout.flush()
"""


def _round(base: Path, index: int) -> RoundLayout:
    return ProjectLayout.for_root(base / "proj", env={}).session(1).round(index)


def _env(unbuffered: bool) -> dict[str, str]:
    """The child's environment: Python's default block-buffered stdout, or PYTHONUNBUFFERED=1."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    if unbuffered:
        env["PYTHONUNBUFFERED"] = "1"
    return env


def _child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _bare(script: Path, unbuffered: bool) -> tuple[float, float]:
    """(wall, CPU of the child) of the child writing to /dev/null."""
    cpu0, t0 = _child_cpu(), time.perf_counter()
    subprocess.run(
        [sys.executable, str(script), str(LINES)],
        stdout=subprocess.DEVNULL,
        env=_env(unbuffered),
        check=True,
    )
    return time.perf_counter() - t0, _child_cpu() - cpu0


async def _monitored(
    script: Path, rnd: RoundLayout, unbuffered: bool
) -> tuple[float, float, int, float]:
    """(wall to exit.json, wall to every point parsed, points parsed, CPU of monitor + child)."""
    points = 0

    def on_batch(lines: list[Line]) -> None:
        nonlocal points
        points += len(METRIC.findall("\n".join(line.text for line in lines)))

    stop = anyio.Event()
    cpu0 = _child_cpu()
    async with anyio.create_task_group() as tg:
        t0 = time.perf_counter()
        tg.start_soon(lambda: tail_files([str(rnd.log)], on_batch, stop=stop))
        handle = await spawn_round(
            [sys.executable, str(script), str(LINES)],
            env=_env(unbuffered),
            cwd=str(script.parent),
            rnd=rnd,
            timeout_sec=None,
            grace_sec=5,
        )
        info = await wait_exit(handle, poll=0.05)
        t_exit = time.perf_counter() - t0
        assert info.returncode == 0, info
        stop.set()
    t_parsed = time.perf_counter() - t0
    while is_alive(handle):  # once reaped, its CPU (and the child's) is counted
        await anyio.sleep(0.01)
    return t_exit, t_parsed, points, _child_cpu() - cpu0


async def _paced(
    script: Path, rnd: RoundLayout, rate: float, seconds: float
) -> tuple[list[float], float, float]:
    """(latencies in s, CPU seconds of this process, wall seconds) while the child runs."""
    latencies: list[float] = []

    def on_batch(lines: list[Line]) -> None:
        now = time.time()
        for line in lines:
            if line.text.startswith("t "):
                latencies.append(now - float(line.text[2 : line.text.index(" ", 2)]))
        METRIC.findall("\n".join(line.text for line in lines))

    stop = anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: tail_files([str(rnd.log)], on_batch, stop=stop))
        handle = await spawn_round(
            [sys.executable, str(script), str(rate), str(seconds)],
            env=_env(False),
            cwd=str(script.parent),
            rnd=rnd,
            timeout_sec=None,
            grace_sec=5,
        )
        cpu0, wall0 = time.process_time(), time.perf_counter()
        await wait_exit(handle, poll=0.05)
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        stop.set()
    return latencies, cpu, wall


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _throughput(
    fast: Path, base: Path, first_round: int, repeat: int, unbuffered: bool
) -> list[tuple[str, str, str, str]]:
    bare = [_bare(fast, unbuffered) for _ in range(repeat)]
    runs = [
        anyio.run(_monitored, fast, _round(base, first_round + i), unbuffered)
        for i in range(repeat)
    ]
    t_bare = statistics.median(b[0] for b in bare)
    cpu_bare = statistics.median(b[1] for b in bare)
    t_exit = statistics.median(r[0] for r in runs)
    t_parsed = statistics.median(r[1] for r in runs)
    cpu_mon = statistics.median(r[3] for r in runs)
    parsed_ok = all(r[2] == LINES for r in runs)
    kind = "PYTHONUNBUFFERED=1" if unbuffered else "block-buffered stdout"
    return [
        (f"{LINES:,} lines, {kind}: child > /dev/null", f"{t_bare:.2f} s", "1.00x", ""),
        (
            "  under monitor + tailer, to exit.json",
            f"{t_exit:.2f} s",
            f"{t_exit / t_bare:.2f}x",
            "" if unbuffered else "goal <= 1.3x",
        ),
        (
            "  ... to every point parsed",
            f"{t_parsed:.2f} s",
            f"{t_parsed / t_bare:.2f}x",
            "all parsed" if parsed_ok else "POINTS MISSING",
        ),
        (
            "  CPU: child + monitor vs bare child",
            f"{cpu_mon:.2f} s / {cpu_bare:.2f} s",
            f"{cpu_mon / cpu_bare:.2f}x",
            "",
        ),
    ]


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-out-") as tmp:
        base = Path(tmp)
        fast = base / "fast_child.py"
        fast.write_text(FAST_CHILD)
        paced = base / "paced_child.py"
        paced.write_text(PACED_CHILD)
        rows = _throughput(fast, base, 1, REPEAT, unbuffered=False)
        rows += _throughput(fast, base, 100, 1, unbuffered=True)
        lat, _, _ = anyio.run(_paced, paced, _round(base, 200), 1000.0, 4.0)
        _, cpu, wall = anyio.run(_paced, paced, _round(base, 201), 10000.0, 4.0)

    ms = 1000.0
    rows += [
        (
            f"latency at 1,000 lines/s ({len(lat)} lines)",
            f"p50 {_pct(lat, 0.5) * ms:.1f} ms",
            f"p99 {_pct(lat, 0.99) * ms:.1f} ms",
            "goal p50 <= 30, p99 <= 150",
        ),
        (
            "tailer CPU at 10,000 lines/s",
            f"{cpu:.2f} s / {wall:.2f} s",
            f"{100 * cpu / wall:.1f} %",
            "goal <= 25 % of a core",
        ),
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"bench_output ({os.cpu_count()} CPUs, load average {load}; "
        f"throughput: median of {REPEAT} buffered runs, 1 unbuffered run)"
    )
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())


if __name__ == "__main__":
    main()
