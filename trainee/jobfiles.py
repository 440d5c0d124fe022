"""Reading files a job can write, safely. Stdlib only.

A training job controls what lies at the paths the daemon reads its output from
(logs, metric files): it can put a FIFO there (a plain ``open`` would block
forever), a symlink to a file the job itself cannot see (the daemon would read it
for the job), a device, or one line of a gigabyte. So every such file is opened
with :func:`open_job_file`: without following a symlink at the last component,
without blocking, and only when it is a regular file; and read with a bound:
:func:`read_bounded` for a whole small file, :func:`bounded_lines` for a line
file whose over-long lines are skipped without ever being held.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator

__all__ = ["NotRegularFile", "bounded_lines", "open_job_file", "read_bounded"]

_FLAGS = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0)
CHUNK = 1 << 20


class NotRegularFile(OSError):
    """The path is a symlink, a FIFO, a device, a socket or a folder: not read."""


def open_job_file(path: str | os.PathLike[str]) -> int:
    """A read-only descriptor of the regular file at ``path`` (caller closes it).

    Raises FileNotFoundError when nothing is there, :class:`NotRegularFile` for a
    symlink (``ELOOP`` from ``O_NOFOLLOW``) or anything but a regular file, and the
    other ``OSError`` of ``open``. Never blocks, whatever is at the path.
    """
    try:
        fd = os.open(path, _FLAGS)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # the last component is a symlink
            raise NotRegularFile(exc.errno, "a symlink: not followed", str(path)) from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFile(0, "not a regular file: not read", str(path))
        os.set_blocking(fd, True)  # a regular file: reads never wait on a writer
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_bounded(path: str | os.PathLike[str], limit: int) -> tuple[bytes, bool]:
    """The first ``limit`` bytes of the regular file at ``path`` and whether it holds more."""
    fd = open_job_file(path)
    try:
        data = b""
        while len(data) <= limit:
            chunk = os.read(fd, min(CHUNK, limit + 1 - len(data)))
            if not chunk:
                break
            data += chunk
    finally:
        os.close(fd)
    return data[:limit], len(data) > limit


def bounded_lines(fd: int, max_line: int, max_total: int | None = None) -> Iterator[bytes | int]:
    """The lines of an open file (without their ``\\n``), read in chunks.

    A line longer than ``max_line`` bytes is never held: in its place comes its
    length (an ``int``), so the caller can report it. Reading stops after
    ``max_total`` bytes (the rest of the file is not read; a short line cut there is
    dropped, an over-long one reported).
    """
    held = bytearray()
    skipping = 0
    total = 0
    while max_total is None or total < max_total:
        size = CHUNK if max_total is None else min(CHUNK, max_total - total)
        chunk = os.read(fd, size)
        if not chunk:
            break
        total += len(chunk)
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            if skipping:
                yield skipping + end - start
                skipping = 0
            elif len(held) + end - start > max_line:
                yield len(held) + end - start
                held.clear()
            else:
                held += chunk[start:end]
                yield bytes(held)
                held.clear()
            start = end + 1
        rest = len(chunk) - start
        if skipping:
            skipping += rest
        elif len(held) + rest > max_line:
            skipping = len(held) + rest
            held.clear()
        else:
            held += chunk[start:]
    if max_total is not None and total >= max_total:
        if skipping:
            yield skipping  # an over-long line, cut where reading stopped
        return  # a short line cut here may be partial: dropped
    if skipping:
        yield skipping
    elif held:
        yield bytes(held)
