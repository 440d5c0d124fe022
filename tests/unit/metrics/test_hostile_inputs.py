"""Metric extraction against hostile patterns and files: bounded time, bounded memory,
nothing followed or blocked on."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from tests.unit.metrics.helpers import extractor, spec
from trainee.errors import ConfigError
from trainee.spec.regexcheck import check_pattern

CATASTROPHIC = [
    r"(a+)+$",
    r"(a|a)*",
    r"(a|aa)+$",
    r"(?:a|b|ab)+c",
    r"(\w+\s?)+$",
    r"(x+x+)+y",
    r"(.*)*z",
    r"loss=((\d)+)+",
    r"(\d|\d\d)+$",
    r"(a{1,2}){1,60}$",
]
FINE = [
    r"loss=(?P<value>[-+]?\d+(?:\.\d+)?)",
    r"(\d+\.)+(?P<value>\d+)",
    r"(?:train|val)_loss[=:]\s*(\S+)",
    r"(?:\s+\w+)*:\s(\d+)",
    r"(\w+ )+acc (\d+)",
    r"(ab|a)+=(\d+)",
    r"(\d{1,3}\.){3}(\d+)",
]


@pytest.mark.parametrize("pattern", CATASTROPHIC)
def test_catastrophic_patterns_are_refused_naming_the_construct(pattern: str) -> None:
    problem = check_pattern(pattern)
    assert problem is not None and "backtracks catastrophically" in problem
    with pytest.raises(ConfigError, match=r"metrics\.specs\[0\]\.key_or_pattern"):
        extractor([spec("m", "stdout_regex", pattern)])


@pytest.mark.parametrize("pattern", FINE)
def test_ordinary_patterns_pass(pattern: str) -> None:
    assert check_pattern(pattern) is None


SLOW = r"(?=(?:[^\n]*\n){0,500}zzz)(?P<value>\d)"
"""Not refused (polynomial, not exponential) but slow on many lines: the budget's case."""


def test_a_pattern_over_its_budget_is_disabled_for_the_round_with_a_warning() -> None:
    assert check_pattern(SLOW) is None
    ex = extractor([spec("slow", "stdout_regex", SLOW), spec("ok", "stdout_regex", r"ok=(\d+)")])
    ex._budget = 0.5  # the slow pattern needs many seconds here, the other a few ms
    chunk = "\n".join(f"{i % 10} ok={i}" for i in range(20_000))
    ex.feed_output(chunk)
    ex.feed_output(chunk)  # the slow pattern is not run again
    result = ex.result()
    warnings = [w.message for w in result.warnings if w.metric == "slow"]
    assert len(warnings) == 1 and repr(SLOW) in warnings[0] and "disabled" in warnings[0]
    assert result.finals["ok"] == 19_999  # the other patterns went on


def test_matching_releases_the_gil_so_other_threads_run() -> None:
    ex = extractor([spec("slow", "stdout_regex", SLOW)])
    ex._budget = 2.0
    chunk = "\n".join(f"{i % 10} x" for i in range(20_000))
    ticks = 0
    done = threading.Event()

    def other() -> None:
        nonlocal ticks
        while not done.is_set():
            ticks += 1
            time.sleep(0.001)

    thread = threading.Thread(target=other)
    thread.start()
    started = time.monotonic()
    ex.feed_output(chunk)
    elapsed = time.monotonic() - started
    done.set()
    thread.join()
    # the other thread ran all along (a held GIL would leave it at a handful of ticks)
    assert ticks >= elapsed * 100, (ticks, elapsed)


def test_many_values_on_one_long_line_cost_linear_time() -> None:
    ex = extractor()
    line = "step 7 " + "loss=1.0 " * 7000
    started = time.process_time()
    points = ex.feed_output(line)
    assert len(points) == 7000 and all(p.step == 7 for p in points)
    assert time.process_time() - started < 5  # quadratic step search took minutes


def test_jsonl_fifo_symlink_and_device_are_not_read(tmp_path: Path) -> None:
    secret = tmp_path / "secret.jsonl"
    secret.write_text(json.dumps({"loss": 123.0}) + "\n")
    (tmp_path / "a.jsonl").symlink_to(secret)
    os.mkfifo(tmp_path / "b.jsonl")
    (tmp_path / "c.jsonl").symlink_to("/dev/zero")
    ex = extractor([spec("m", "jsonl", "loss", path=str(tmp_path / "[abc].jsonl"))], root=tmp_path)
    started = time.monotonic()
    assert ex.read_files() == []  # a blocking open of the FIFO would hang here
    assert time.monotonic() - started < 10
    assert "a.jsonl: a symlink: not followed" in " ".join(w.message for w in ex.result().warnings)


def test_wandb_summary_symlink_is_not_read(tmp_path: Path) -> None:
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps({"acc": 0.9}))
    (tmp_path / "wandb-summary.json").symlink_to(secret)
    ex = extractor(
        [spec("acc", "wandb_summary", "acc", path=str(tmp_path / "wandb-summary.json"))],
        root=tmp_path,
    )
    assert ex.read_files() == []
    assert "not followed" in " ".join(w.message for w in ex.result().warnings)


def test_a_gigabyte_jsonl_line_never_raises_memory_much(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    with open(path, "wb") as fh:
        fh.write(json.dumps({"loss": 0.5}).encode() + b"\n")
        fh.truncate(fh.tell() + (1 << 30))  # a sparse gigabyte of one line
        fh.seek(0, os.SEEK_END)
        fh.write(b"\n" + json.dumps({"loss": 0.25}).encode() + b"\n")
    code = textwrap.dedent(
        f"""
        import json, resource, sys
        from pathlib import Path
        from tests.unit.metrics.helpers import extractor, spec
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        ex = extractor([spec("loss", "jsonl", "loss", path={str(path)!r})], root=Path({str(tmp_path)!r}))
        points = ex.read_files()
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(json.dumps({{"grew_kib": after - before, "values": [p.value for p in points],
                           "warnings": [w.message for w in ex.result().warnings]}}))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    report = json.loads(out.stdout)
    assert report["grew_kib"] < 64 * 1024, report  # a whole-line read takes over 1 GiB
    assert report["values"] == [0.5]  # reading stops at MAX_FILE_BYTES
    assert any("longer than" in w or "read only the first" in w for w in report["warnings"])
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss > 0
