"""tail_files live: real writer processes, real inotify (watchfiles), real files.

Tests wait for conditions with a deadline (a short pause between checks),
never for a fixed time.
"""

from __future__ import annotations

import os
import sys
import textwrap
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest

from trainee.launch.layout import ProjectLayout
from trainee.monitor.process import spawn_round, wait_exit
from trainee.monitor.tail import Line, tail_files


class Collector:
    """The ``on_batch`` callback: keeps every batch."""

    def __init__(self) -> None:
        self.batches: list[list[Line]] = []

    def __call__(self, lines: list[Line]) -> None:
        assert lines, "empty batches are never handed over"
        self.batches.append(lines)

    @property
    def lines(self) -> list[Line]:
        return [line for batch in self.batches for line in batch]

    def texts(self, path: Path | None = None) -> list[str]:
        return [
            line.text
            for line in self.lines
            if not line.marker and (path is None or line.path == str(path))
        ]

    async def until(self, cond: Callable[[], Any], what: str, timeout: float = 10.0) -> None:
        with anyio.fail_after(timeout):
            while not cond():
                await anyio.sleep(0.01)


def run_tail(
    patterns: list[str],
    body: Callable[[Collector], Awaitable[None]],
    **options: Any,
) -> Collector:
    async def main() -> Collector:
        collector = Collector()
        stop = anyio.Event()
        async with anyio.create_task_group() as tg:
            tg.start_soon(partial(tail_files, patterns, collector, stop=stop, **options))
            await body(collector)
            stop.set()
        return collector

    return anyio.run(main)


def write_script(tmp_path: Path, body: str) -> list[str]:
    path = tmp_path / "writer.py"
    path.write_text(textwrap.dedent(body))
    return [sys.executable, str(path)]


def append(path: Path, data: bytes) -> None:
    with path.open("ab") as f:
        f.write(data)


def test_burst_arrives_in_few_batches_in_order(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.touch()
    argv = write_script(
        tmp_path,
        f"""
        with open({str(log)!r}, "a") as f:
            for i in range(10000):
                print(f"step {{i}} loss 0.5", file=f)
        """,
    )

    async def body(c: Collector) -> None:
        await anyio.run_process(argv)
        await c.until(lambda: len(c.lines) >= 10000, "all lines")

    c = run_tail([str(log)], body)
    assert c.texts() == [f"step {i} loss 0.5" for i in range(10000)]
    assert len(c.batches) <= 50, f"{len(c.batches)} batches for one burst"
    assert {line.stream for line in c.lines} == {"log"}
    offsets = [line.raw_offset for line in c.lines]
    assert offsets == sorted(offsets) and offsets[0] == 0


def test_late_file_matching_a_glob(tmp_path: Path) -> None:
    logs = tmp_path / "logs"  # does not exist yet
    argv = write_script(
        tmp_path,
        f"""
        import os
        os.makedirs({str(logs / "run1")!r})
        with open({str(logs / "run1" / "metrics.log")!r}, "w") as f:
            f.write("acc 0.1\\nacc 0.2\\n")
        with open({str(logs / "ignored.txt")!r}, "w") as f:
            f.write("not matched\\n")
        """,
    )

    async def body(c: Collector) -> None:
        await anyio.lowlevel.checkpoint()  # the tailer's first scan runs: nothing there yet
        assert not logs.exists()
        await anyio.run_process(argv)
        await c.until(lambda: len(c.lines) >= 2, "the late file's lines")
        append(logs / "run1" / "metrics.log", b"acc 0.3\n")
        await c.until(lambda: len(c.lines) >= 3, "a line appended later")

    c = run_tail([str(logs / "**" / "*.log")], body, rescan_interval=0.1)
    assert c.texts() == ["acc 0.1", "acc 0.2", "acc 0.3"]
    assert {line.path for line in c.lines} == {str(logs / "run1" / "metrics.log")}


def test_new_file_is_found_by_its_inotify_event(tmp_path: Path) -> None:
    """No periodic rescan in time: watchfiles' "added" event alone finds a new file."""
    logs = tmp_path / "logs"
    logs.mkdir()

    async def body(c: Collector) -> None:
        # The watcher thread starts at its own pace: new files until one is seen.
        for attempt in range(40):
            (logs / f"late-{attempt}.log").write_bytes(f"found {attempt}\n".encode())
            with anyio.move_on_after(0.5):
                await c.until(lambda: c.lines, "a new file")
            if c.lines:
                return
        raise AssertionError("no new file was picked up by its inotify event")

    c = run_tail([str(logs / "*.log")], body, rescan_interval=60.0)
    assert c.texts()[0].startswith("found ")


def test_truncation_while_tailing(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_bytes(b"epoch 1 old\nepoch 2 old\n")

    async def body(c: Collector) -> None:
        await c.until(lambda: len(c.lines) >= 2, "the first lines")
        log.write_bytes(b"new\n")  # truncate + rewrite, shorter than before
        await c.until(lambda: "new" in c.texts(), "the rewritten line")

    c = run_tail([str(log)], body)
    assert c.texts() == ["epoch 1 old", "epoch 2 old", "new"]
    markers = [line for line in c.lines if line.marker]
    assert len(markers) == 1 and "truncated" in markers[0].text


def test_rotation_while_tailing(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_bytes(b"before\n")

    async def body(c: Collector) -> None:
        await c.until(lambda: c.texts() == ["before"], "the first line")
        append(log, b"last of old\n")
        os.rename(log, tmp_path / "train.log.1")
        log.write_bytes(b"first of new\n")
        await c.until(lambda: "first of new" in c.texts(), "the new file")

    c = run_tail([str(log)], body)
    assert c.texts() == ["before", "last of old", "first of new"]


def test_partial_line_is_held_then_flushed_at_stop(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_bytes(b"whole\nhalf a li")

    async def body(c: Collector) -> None:
        await c.until(lambda: c.texts() == ["whole"], "the whole line")
        append(log, b"ne\nlast without newline")
        await c.until(lambda: len(c.texts()) == 2, "the completed line")

    offsets: dict[str, int] = {}
    c = run_tail([str(log)], body, offsets=offsets)
    assert c.texts() == ["whole", "half a line", "last without newline"]
    assert offsets == {str(log): log.stat().st_size}


def test_megabyte_line_is_cut(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.touch()

    async def body(c: Collector) -> None:
        append(log, b"z" * (1 << 20))
        append(log, b"\nnext\n")
        await c.until(lambda: "next" in c.texts(), "the line after")

    c = run_tail([str(log)], body)
    cut, nxt = c.lines
    assert cut.text == "z" * 65536 + f"…[line cut: {(1 << 20) - 65536} bytes]"
    assert (nxt.text, nxt.raw_offset) == ("next", (1 << 20) + 1)


def test_resume_from_stored_offsets(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_bytes(b"a\nb\n")
    offsets: dict[str, int] = {}

    async def first(c: Collector) -> None:
        await c.until(lambda: len(c.lines) == 2, "two lines")

    assert run_tail([str(log)], first, offsets=offsets).texts() == ["a", "b"]
    append(log, b"c\n")

    async def second(c: Collector) -> None:
        await c.until(lambda: len(c.lines) == 1, "the new line")

    assert run_tail([str(log)], second, offsets=offsets).texts() == ["c"]


def test_relative_pattern_is_refused() -> None:
    async def main() -> None:
        await tail_files(["logs/*.log"], lambda lines: None, stop=anyio.Event())

    with pytest.raises(ValueError, match="absolute"):
        anyio.run(main)


# -- the round log, written by a real job under the real monitor ------------------------


def test_round_log_progress_bars_colours_and_streams(tmp_path: Path) -> None:
    rnd = ProjectLayout.for_root(tmp_path / "proj", env={}).session(1).round(1)
    argv = write_script(
        tmp_path,
        """
        import sys, time
        for epoch in range(3):
            for pct in range(0, 101, 10):
                sys.stderr.write(f"\\repoch {epoch}: {pct:3d}%|" + "#" * (pct // 10))
                sys.stderr.flush()
            sys.stderr.write("\\n")
            print(f"\\x1b[32mepoch {epoch} val_loss {1 / (epoch + 1):.3f}\\x1b[0m", flush=True)
        """,
    )

    async def main() -> tuple[Collector, int | None]:
        c = Collector()
        stop = anyio.Event()
        async with anyio.create_task_group() as tg:
            tg.start_soon(partial(tail_files, [str(rnd.log)], c, stop=stop))
            handle = await spawn_round(
                argv,
                env=dict(os.environ),
                cwd=str(tmp_path),
                rnd=rnd,
                timeout_sec=None,
                grace_sec=1,
            )
            with anyio.fail_after(30):
                info = await wait_exit(handle)
            stop.set()
        return c, info.returncode

    c, returncode = anyio.run(main)
    assert returncode == 0
    out = [line.text for line in c.lines if line.stream == "stdout"]
    assert out == [f"epoch {e} val_loss {1 / (e + 1):.3f}" for e in range(3)]
    err = [line.text for line in c.lines if line.stream == "stderr"]
    assert [t for t in err if t.endswith("100%|##########")] == [
        f"epoch {e}: 100%|##########" for e in range(3)
    ]
    assert all("\r" not in t and len(t) < 40 for t in err)
    raw = rnd.log.read_bytes()
    assert b"\x1b[32m" in raw and raw.count(b"\r") == 33  # the log keeps everything


def test_slow_writer_lines_arrive_one_by_one(tmp_path: Path) -> None:
    """Each line arrives while the writer waits: no batch waits to fill up."""
    log = tmp_path / "train.log"
    log.touch()

    async def body(c: Collector) -> None:
        for i in range(5):
            append(log, f"tick {i}\n".encode())
            await c.until(lambda i=i: len(c.lines) == i + 1, f"tick {i}")

    c = run_tail([str(log)], body)
    assert c.texts() == [f"tick {i}" for i in range(5)]
