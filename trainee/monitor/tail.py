"""Follow the round log and the job's log files; hand their lines over in batches.

A round log is written by two writers: the child's stdout goes straight into the
file, its stderr reaches the file through the monitor, which records each
stderr byte range in ``<log>.idx`` (see :mod:`trainee.shim`). This reader splits
the file back into its two streams by those ranges and assembles lines per
stream, so a stdout line cut by a block-buffer flush is whole again even when a
stderr line landed in the middle of it.

Line rules:

- lines end at ``\\n``; a line containing ``\\r`` keeps only its last non-empty
  ``\\r`` segment (``"a\\rb\\rc\\n"`` -> ``"c"``); an unfinished line whose ``\\r``
  segments are complete yields its latest one at once (a progress bar shows
  live and never grows one endless line), at most one per read;
- ANSI escape sequences are stripped from ``Line.text`` (the file keeps them);
- a line over ``max_line`` bytes (64 KiB) is cut and ends with
  ``…[line cut: N bytes]``; only its first ``max_line`` bytes are ever held;
- a partial last line waits for its end; ``finish()`` hands it over as it is;
- truncation (size below our offset) restarts at 0, rotation (another inode at
  the path) reads the old file to its end and the new one from 0; both add a
  ``Line`` with ``marker=True``. A truncation followed by a rewrite past the old
  offset between two reads cannot be told from growth (as with ``tail -F``).

Parsing is by chunk: each read decodes and splits a whole chunk in C; per-line
Python work happens only for lines with ``\\r``, over-long ones, and the borders
of stderr ranges. Consumers should parse a batch the same way: one regex pass
over ``"\\n".join(line.text for line in batch)``.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import inspect
import logging
import os
import re
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from itertools import accumulate, repeat
from operator import add
from pathlib import Path
from typing import Literal

import anyio
import msgspec
from watchfiles import Change, awatch

from trainee import jobfiles

__all__ = ["MAX_LINE", "FileTail", "Line", "Stream", "strip_ansi", "tail_files"]

log = logging.getLogger("trainee.monitor.tail")

MAX_LINE = 64 * 1024
READ_CAP = 1 << 20
"""Bytes read per file per cycle while it has a backlog: bounds one batch's CPU."""
INDEX_SUFFIX = ".idx"

Stream = Literal["stdout", "stderr", "log"]

_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")
_CR = ord("\r")


def strip_ansi(text: str) -> str:
    """``text`` without ANSI escape sequences (colours, cursor moves, titles)."""
    return _ANSI.sub("", text) if "\x1b" in text else text


class Line(msgspec.Struct, array_like=True, gc=False):
    """One line of a followed file.

    ``raw_offset`` is the byte offset in the file where the kept text starts.
    ``marker`` lines are notes of the reader itself (truncation, rotation),
    not file content.
    """

    path: str
    stream: Stream
    text: str
    raw_offset: int
    marker: bool = False


class _Assembler:
    """Turns one byte stream (given as chunks with their file offsets) into Lines."""

    __slots__ = ("dropped", "group_emitted", "max_line", "path", "pend", "pend_start", "stream")

    def __init__(self, path: str, stream: Stream, max_line: int) -> None:
        self.path = path
        self.stream: Stream = stream
        self.max_line = max_line
        self.pend = b""
        """The unfinished line (after its last ``\\r``), at most ``max_line`` bytes."""
        self.pend_start = -1
        """File offset of ``pend[0]``; -1 when nothing is pending."""
        self.dropped = 0
        """Bytes of the unfinished line beyond ``max_line``, not held."""
        self.group_emitted = False
        """A ``\\r`` segment of the unfinished line was already handed over."""

    def reset(self) -> None:
        self.pend, self.pend_start, self.dropped, self.group_emitted = b"", -1, 0, False

    def _make(self, seg: bytes, offset: int, dropped: int = 0) -> Line:
        if len(seg) > self.max_line:
            dropped += len(seg) - self.max_line
            seg = seg[: self.max_line]
        text = strip_ansi(seg.decode("utf-8", "replace"))
        if dropped:
            text += f"…[line cut: {dropped} bytes]"
        return Line(self.path, self.stream, text, offset)

    def feed(self, data: bytes, base: int) -> list[Line]:
        """Lines completed by ``data``, whose first byte is at file offset ``base``."""
        out: list[Line] = []
        if self.dropped:
            # Inside an over-long line: skip to its end without holding it.
            cuts = [k for k in (data.find(b"\n"), data.find(b"\r")) if k >= 0]
            if not cuts:
                self.dropped += len(data)
                return out
            k = min(cuts)
            out.append(self._make(self.pend, self.pend_start, self.dropped + k))
            self.group_emitted = data[k] == _CR
            self.pend, self.pend_start, self.dropped = b"", -1, 0
            data, base = data[k + 1 :], base + k + 1
        if not data:
            return out
        if self.pend:
            buf, first_off, shift = self.pend + data, self.pend_start, len(self.pend)
        else:
            buf, first_off, shift = data, base, 0
        # ``pend`` holds no line break, so every break in ``buf`` lies in ``data``:
        # a line starting at position p > 0 of ``buf`` starts at file offset p + delta.
        delta = base - shift
        nl = buf.rfind(b"\n")
        if nl >= 0:
            out.extend(self._complete(buf[:nl], first_off, delta))
            self.group_emitted = False
            tail_pos = nl + 1
        else:
            tail_pos = 0
        tail = buf[tail_pos:]
        r = tail.rfind(b"\r")
        if r >= 0:
            segs = tail[:r].split(b"\r")
            pos = tail_pos + r
            for seg in reversed(segs):
                pos -= len(seg)
                if seg:
                    out.append(self._make(seg, first_off if pos == 0 else pos + delta))
                    self.group_emitted = True
                    break
                pos -= 1
            self.pend, self.pend_start = tail[r + 1 :], tail_pos + r + 1 + delta
        else:
            self.pend = tail
            self.pend_start = first_off if tail_pos == 0 else tail_pos + delta
        if not self.pend:
            self.pend_start = -1
        elif len(self.pend) > self.max_line:
            self.dropped = len(self.pend) - self.max_line
            self.pend = self.pend[: self.max_line]
        return out

    def _complete(self, block: bytes, first_off: int, delta: int) -> list[Line]:
        """Lines of ``block`` (``\\n``-separated, its end is a line end)."""
        if b"\r" in block:
            return self._complete_slow(block, first_off, delta)
        if block.isascii():
            texts = block.decode("ascii").split("\n")
            lens = list(map(len, texts))
        else:
            parts = block.split(b"\n")
            lens = list(map(len, parts))
            texts = [p.decode("utf-8", "replace") for p in parts]
        if max(lens) > self.max_line:
            return self._complete_slow(block, first_off, delta)
        offsets = list(accumulate(map(add, lens, repeat(1)), initial=delta))
        offsets[0] = first_off
        if b"\x1b" in block:
            texts = list(map(strip_ansi, texts))
        lines = list(map(Line, repeat(self.path), repeat(self.stream), texts, offsets))
        if self.group_emitted and not lens[0]:
            del lines[0]  # the rest of a line whose \r segment was already shown
        return lines

    def _complete_slow(self, block: bytes, first_off: int, delta: int) -> list[Line]:
        out: list[Line] = []
        pos = 0
        skip_empty_first = self.group_emitted
        for part in block.split(b"\n"):
            start = pos
            pos += len(part) + 1
            seg, seg_pos = part, start
            if b"\r" in part:
                segs = part.split(b"\r")
                seg_pos = start + len(part)
                for candidate in reversed(segs):
                    seg_pos -= len(candidate)
                    if candidate:
                        seg = candidate
                        break
                    seg_pos -= 1
                else:
                    seg, seg_pos = b"", start
            if skip_empty_first and start == 0 and not seg:
                continue
            out.append(self._make(seg, first_off if seg_pos == 0 else seg_pos + delta))
        return out

    def flush(self) -> list[Line]:
        """Hand over the unfinished line as it is (end of file, end of round)."""
        out: list[Line] = []
        if self.pend or self.dropped:
            out.append(self._make(self.pend, self.pend_start, self.dropped))
        self.reset()
        return out


class FileTail:
    """Follows one file from ``offset``; ``read()`` returns the lines completed since.

    With ``index`` (a monitor's ``<log>.idx``), stderr ranges are told from
    stdout; otherwise every line is of stream ``"log"``. Blocking I/O on local
    files, bounded per call by ``limit``.
    """

    def __init__(
        self,
        path: str,
        *,
        offset: int = 0,
        index: str | None = None,
        max_line: int = MAX_LINE,
        within: Sequence[str] | None = None,
    ) -> None:
        self.path = path
        self.index = index
        self.within = within
        """Folders the file may be in: it is the job's to write, so it is opened as
        :mod:`trainee.jobfiles` does (no link leading elsewhere, never a FIFO)."""
        self.offset = offset
        """Next byte to read."""
        self.backlog = False
        """The last ``read()`` stopped at its limit before the end of the file."""
        self.size = 0
        self._fd: int | None = None
        self._ident: tuple[int, int] | None = None
        self._idx_fd: int | None = None
        self._idx_pos = 0
        self._idx_rest = b""
        self._ranges: deque[tuple[int, int]] = deque()
        self._refused: str | None = None
        if index is None:
            self._streams = [_Assembler(path, "log", max_line)]
        else:
            self._streams = [
                _Assembler(path, "stdout", max_line),
                _Assembler(path, "stderr", max_line),
            ]

    @property
    def resume_offset(self) -> int:
        """Where a new reader should start so it misses nothing (unfinished lines re-read)."""
        pending = [a.pend_start for a in self._streams if a.pend_start >= 0]
        return min([self.offset, *pending])

    def read(self, limit: int | None = READ_CAP) -> list[Line]:
        """Lines completed by the bytes added since the last call (at most ``limit`` bytes)."""
        out: list[Line] = []
        if self._fd is None:
            if not self._open():
                return out
        else:
            self._check_rotation(out)
        out.extend(self._read_open(limit))
        return out

    def _read_open(self, limit: int | None) -> list[Line]:
        assert self._fd is not None
        out: list[Line] = []
        size = self._stable_size()
        self.size = size
        if size < self.offset:
            for stream in self._streams:
                stream.reset()
            self._ranges.clear()
            out.append(self._marker("…[file truncated: reading it again from the start]", 0))
            self.offset = 0
        stop = size if limit is None else min(size, self.offset + limit)
        while self.offset < stop:
            data = os.pread(self._fd, min(stop - self.offset, 1 << 22), self.offset)
            if not data:
                break
            out.extend(self._feed(data, self.offset))
            self.offset += len(data)
        self.backlog = self.offset < size
        return out

    def finish(self) -> list[Line]:
        """Everything up to the end of the file, unfinished lines included."""
        out = self.read(None)
        out.extend(self.flush())
        return out

    def flush(self) -> list[Line]:
        """The unfinished lines, as they are."""
        out: list[Line] = []
        for stream in self._streams:
            out.extend(stream.flush())
        return out

    def close(self) -> None:
        for fd in (self._fd, self._idx_fd):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._fd = self._idx_fd = None

    # -- internals ---------------------------------------------------------------

    def _marker(self, text: str, offset: int) -> Line:
        return Line(self.path, self._streams[0].stream, text, offset, True)

    def _open(self) -> bool:
        try:
            fd = jobfiles.open_job_file(self.path, within=self.within)
        except jobfiles.NotRegularFile as exc:
            if self._refused != exc.strerror:
                self._refused = exc.strerror
                log.warning("not reading %s: %s", self.path, exc.strerror)
            return False
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError):
            return False
        st = os.fstat(fd)
        self._fd, self._ident = fd, (st.st_dev, st.st_ino)
        return True

    def _check_rotation(self, out: list[Line]) -> None:
        try:
            st = os.stat(self.path)
        except OSError:
            return  # gone for now: keep reading the open file
        if (st.st_dev, st.st_ino) == self._ident:
            return
        out.extend(self._read_open(None))
        out.extend(self.flush())
        self.close()
        self.offset = 0
        self._ranges.clear()
        self._idx_pos, self._idx_rest = 0, b""
        if self._open():
            out.append(self._marker("…[file replaced: reading the new file from the start]", 0))

    def _stable_size(self) -> int:
        """The file size; for a round log, with every stderr range below it known."""
        assert self._fd is not None
        if self.index is None:
            return os.fstat(self._fd).st_size
        if self._idx_fd is None:
            try:
                self._idx_fd = jobfiles.open_job_file(self.index, within=self.within)
            except OSError:
                return os.fstat(self._fd).st_size
        fcntl.flock(self._idx_fd, fcntl.LOCK_SH)
        try:
            size = os.fstat(self._fd).st_size
            new = b""
            while chunk := os.pread(self._idx_fd, 1 << 20, self._idx_pos + len(new)):
                new += chunk
        finally:
            fcntl.flock(self._idx_fd, fcntl.LOCK_UN)
        self._idx_pos += len(new)
        text = self._idx_rest + new
        cut = text.rfind(b"\n") + 1
        self._idx_rest = text[cut:]
        for entry in text[:cut].split(b"\n")[:-1]:
            start, _, length = entry.partition(b" ")
            with contextlib.suppress(ValueError):
                s = int(start)
                self._ranges.append((s, s + int(length)))
        return size

    def _feed(self, data: bytes, base: int) -> list[Line]:
        if self.index is None:
            return self._streams[0].feed(data, base)
        stdout, stderr = self._streams
        ranges = self._ranges
        while ranges and ranges[0][1] <= base:
            ranges.popleft()
        end = base + len(data)
        if not ranges or ranges[0][0] >= end:
            return stdout.feed(data, base)
        out: list[Line] = []
        pos = base
        for start, stop in ranges:
            if start >= end:
                break
            if start > pos:
                out.extend(stdout.feed(data[pos - base : start - base], pos))
                pos = start
            seg_end = min(stop, end)
            if seg_end > pos:
                out.extend(stderr.feed(data[pos - base : seg_end - base], pos))
                pos = seg_end
        if pos < end:
            out.extend(stdout.feed(data[pos - base :], pos))
        return out


# -- many files, live -------------------------------------------------------------

OnBatch = Callable[[list[Line]], Awaitable[None]] | Callable[[list[Line]], None]


def _watch_root(pattern: str) -> tuple[str, bool]:
    """The folder to watch for ``pattern`` and whether it must be watched recursively."""
    parts = Path(pattern).parts
    static: list[str] = []
    for part in parts[:-1]:
        if glob.has_magic(part):
            return os.path.join(*static), True
        static.append(part)
    return os.path.join(*static), parts[-1] == "**"


class _TailSet:
    def __init__(
        self,
        patterns: Sequence[str],
        offsets: dict[str, int],
        indexes: Mapping[str, str],
        within: Sequence[str] | None = None,
    ) -> None:
        for pattern in patterns:
            if not os.path.isabs(pattern):
                raise ValueError(f"tail pattern must be an absolute path or glob: {pattern!r}")
        self.patterns = list(patterns)
        self.offsets = offsets
        self.indexes = dict(indexes)
        self.within = within
        self.tails: dict[str, FileTail] = {}

    def roots(self) -> dict[str, bool]:
        """Existing folders to watch -> recursive."""
        found: dict[str, bool] = {}
        for pattern in self.patterns:
            root, recursive = _watch_root(pattern)
            if os.path.isdir(root):
                found[root] = found.get(root, False) or recursive
        return found

    def scan(self) -> None:
        """Start following files that now match a pattern."""
        skip = {*self.indexes.values(), *(t.index for t in self.tails.values() if t.index)}
        for pattern in self.patterns:
            # the job's folders: bounded, never through a link (trainee.jobfiles)
            paths = jobfiles.find_job_files(pattern) if glob.has_magic(pattern) else [pattern]
            for path in paths:
                if path in self.tails or path in skip or not os.path.isfile(path):
                    continue
                index = self.indexes.get(path)
                if index is None and not glob.has_magic(pattern):
                    candidate = path + INDEX_SUFFIX
                    index = candidate if os.path.isfile(candidate) else None
                self.tails[path] = FileTail(
                    path, offset=self.offsets.get(path, 0), index=index, within=self.within
                )

    def read(self, limit: int | None) -> tuple[list[Line], bool]:
        lines: list[Line] = []
        backlog = False
        for path, tail in self.tails.items():
            lines.extend(tail.read(limit))
            backlog = backlog or tail.backlog
            self.offsets[path] = tail.resume_offset
        return lines, backlog

    def finish(self) -> list[Line]:
        lines: list[Line] = []
        for path, tail in self.tails.items():
            lines.extend(tail.flush())
            self.offsets[path] = tail.resume_offset
        return lines

    def close(self) -> None:
        for tail in self.tails.values():
            tail.close()


class _Watcher:
    """watchfiles on the pattern folders; wakes the reader and asks for rescans."""

    def __init__(self, wake: Callable[[bool], None], *, debounce: int, step: int) -> None:
        self.wake = wake
        self.debounce = debounce
        self.step = step
        self.roots: dict[str, bool] = {}
        self._restart = anyio.Event()
        self._stopped = False

    def set_roots(self, roots: dict[str, bool]) -> None:
        if roots != self.roots:
            self.roots = roots
            self._restart.set()

    def stop(self) -> None:
        self._stopped = True
        self._restart.set()

    async def run(self) -> None:
        while not self._stopped:
            self._restart = anyio.Event()
            async with anyio.create_task_group() as tg:
                for recursive in (False, True):
                    roots = [root for root, rec in self.roots.items() if rec == recursive]
                    if roots:
                        tg.start_soon(self._watch, roots, recursive, self._restart)
                await self._restart.wait()

    async def _watch(self, roots: list[str], recursive: bool, restart: anyio.Event) -> None:
        with contextlib.suppress(OSError):
            async for changes in awatch(
                *roots,
                watch_filter=None,
                debounce=self.debounce,
                step=self.step,
                stop_event=restart,
                recursive=recursive,
            ):
                self.wake(any(kind == Change.added for kind, _ in changes))


async def tail_files(
    patterns: Sequence[str],
    on_batch: OnBatch,
    *,
    stop: anyio.Event,
    offsets: dict[str, int] | None = None,
    indexes: Mapping[str, str] | None = None,
    batch_interval: float = 0.03,
    rescan_interval: float = 0.5,
    force_poll_interval: float = 0.25,
    within: Sequence[str] | None = None,
) -> None:
    """Follow every file matching ``patterns`` (absolute paths or globs) until ``stop``.

    ``within``: the folders the files may be in (:func:`trainee.jobfiles.open_job_file`):
    a file that is not a regular file there (a FIFO, a link to elsewhere) is skipped
    with a warning, never read.

    ``on_batch`` (sync or async) gets every new line, one call per batch: while
    output flows, at most one call per ``batch_interval`` (plus back-to-back
    calls of at most 1 MiB per file while catching up); never one per line.
    Wake-ups come from watchfiles (inotify, debounce 50 ms, step 10 ms) on the
    patterns' folders, with a size check every ``force_poll_interval`` as the
    fallback; files that appear later are found by a rescan every
    ``rescan_interval`` or when watchfiles reports a new file.

    ``offsets`` (path -> byte offset) says where to start and is kept up to date
    in place, so a restarted daemon resumes where it left off (an unfinished
    line is read again). A file ``P`` named exactly (not by a glob) is read as
    a round log with stdout/stderr tags when ``P.idx`` exists; ``indexes``
    names such index files explicitly. Index files are never followed as logs.

    After ``stop`` is set, every file is read to its end, unfinished lines are
    handed over, and the coroutine returns.
    """
    tails = _TailSet(patterns, {} if offsets is None else offsets, indexes or {}, within)
    wake = anyio.Event()
    rescan_wanted = False

    def on_change(added: bool) -> None:
        nonlocal rescan_wanted
        rescan_wanted = rescan_wanted or added
        wake.set()

    async def emit(lines: list[Line]) -> None:
        if lines:
            result = on_batch(lines)
            if inspect.isawaitable(result):
                await result

    watcher = _Watcher(on_change, debounce=50, step=10)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(watcher.run)

            async def stop_waker() -> None:
                await stop.wait()
                wake.set()

            tg.start_soon(stop_waker)
            next_rescan = 0.0
            while True:
                stopping = stop.is_set()
                now = time.monotonic()
                if stopping or rescan_wanted or now >= next_rescan:
                    rescan_wanted = False
                    tails.scan()
                    watcher.set_roots(tails.roots())
                    next_rescan = now + rescan_interval
                if stopping:
                    backlog = True
                    while backlog:
                        lines, backlog = tails.read(READ_CAP)
                        await emit(lines)
                    await emit(tails.finish())
                    break
                wake = anyio.Event()
                lines, backlog = tails.read(READ_CAP)
                await emit(lines)
                if backlog:
                    await anyio.lowlevel.checkpoint()
                    continue
                if lines:  # output flows: read again after one batch interval
                    with anyio.move_on_after(batch_interval):
                        await stop.wait()
                    continue
                timeout = min(force_poll_interval, max(0.0, next_rescan - time.monotonic()))
                with anyio.move_on_after(timeout):
                    await wake.wait()
            watcher.stop()
            tg.cancel_scope.cancel()
    finally:
        tails.close()
