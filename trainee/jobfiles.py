"""Reading files a job can write, safely. Stdlib only.

A training job controls what lies at the paths the daemon reads its output from
(logs, metric files, heartbeats, W&B summaries; in unsafe mode even the control
files): it can put a FIFO there (a plain ``open`` would block forever), a device, a
symlink to a file it cannot see itself (``~/.trainee/config.json``, hoping the daemon
copies a string of it where the job can read it), or one line of a gigabyte. So every
such file is opened with :func:`open_job_file`:

- without following a symlink at the last component (``O_NOFOLLOW``) and without
  blocking (``O_NONBLOCK``), and only when ``fstat`` says it is a regular file;
- and then judged by where the open file really is (``/proc/self/fd``, so nothing can
  be swapped between a check and the read): never one of trainee's private files
  (:func:`private_roots`, any store), and inside the ``within`` folders when the
  caller names them, so a folder on the way that is a link to elsewhere leads nowhere.

It is read with a bound: :func:`read_bounded` for a whole small file,
:func:`bounded_lines` for a line file whose over-long lines are skipped without ever
being held. Every refusal is a :class:`NotRegularFile` (an ``OSError`` whose
``strerror`` says why), so callers that turn ``OSError`` into a warning name the file
and the reason.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from trainee import paths

__all__ = [
    "STORE_NAME",
    "NotRegularFile",
    "bounded_lines",
    "open_job_file",
    "private_roots",
    "read_bounded",
]

_FLAGS = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_NOFOLLOW", 0)
CHUNK = 1 << 20
STORE_NAME = "runtime.sqlite3"
"""A store (and its -wal, -shm, -journal) is never read as a job's file, wherever it is."""

Folders = Sequence[str | os.PathLike[str]]


class NotRegularFile(OSError):
    """Not read: a symlink, a FIFO, a device, a socket, a folder, or a file that is
    not where the job's files may be (``strerror`` says which)."""


def private_roots(env: Mapping[str, str] | None = None) -> list[Path]:
    """trainee's own files a job's file must never turn out to be, resolved: config.json
    (the provider keys), the daemon's socket and its HTTP token."""
    sock = paths.socket_path(env)
    found: list[Path] = []
    for path in (paths.config_path(env), sock, sock.with_name("token")):
        real = Path(os.path.realpath(path))
        if real not in found:
            found.append(real)
    return found


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISDIR(mode):
        return "a folder"
    return "not a regular file"


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _where(fd: int) -> str | None:
    """The real path of the open file ``fd`` (None where /proc cannot tell)."""
    try:
        real = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None
    return real.removesuffix(" (deleted)")


def open_job_file(
    path: str | os.PathLike[str],
    *,
    within: Folders | None = None,
    deny: Folders | None = None,
) -> int:
    """A read-only descriptor of the regular file at ``path`` (the caller closes it).

    Raises FileNotFoundError when nothing is there, :class:`NotRegularFile` for a
    symlink at ``path`` (``ELOOP`` from ``O_NOFOLLOW``), anything but a regular file,
    a file that really is one of ``deny`` (default: :func:`private_roots`) or a store,
    or one outside the folders ``within`` (when given: where the job's files may be,
    wherever a link on the way led), and the other ``OSError`` of ``open``. Never
    blocks, whatever is at the path.
    """
    shown = os.fspath(path)
    try:
        fd = os.open(path, _FLAGS)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # the last component is a symlink
            raise NotRegularFile(exc.errno, "a symlink: not followed", shown) from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFile(0, f"{_kind(st.st_mode)}, not a regular file: not read", shown)
        real = _where(fd)
        if real is not None:
            denied = private_roots() if deny is None else deny
            if os.path.basename(real).startswith(STORE_NAME) or any(
                _inside(real, os.path.realpath(d)) for d in denied
            ):
                raise NotRegularFile(errno.EPERM, f"leads to trainee's private {real}", shown)
            if within is not None and not any(_inside(real, os.path.realpath(w)) for w in within):
                allowed = ", ".join(os.path.realpath(w) for w in within)
                raise NotRegularFile(
                    errno.EPERM, f"leads outside {allowed} (to {real}): not read", shown
                )
        os.set_blocking(fd, True)  # a regular file: reads never wait on a writer
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_bounded(
    path: str | os.PathLike[str],
    limit: int,
    *,
    within: Folders | None = None,
    deny: Folders | None = None,
) -> tuple[bytes, bool]:
    """The first ``limit`` bytes of the regular file at ``path`` and whether it holds more
    (opened by :func:`open_job_file` with ``within`` and ``deny``)."""
    fd = open_job_file(path, within=within, deny=deny)
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
    ``max_total`` bytes (the rest of the file is not read; the last, cut line is
    dropped).
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
        return  # cut: the last line may be partial
    if skipping:
        yield skipping
    elif held:
        yield bytes(held)
