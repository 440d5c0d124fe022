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

Where a pattern (``outputs/**/*.jsonl``) names the files, :func:`find_job_files` finds
them: ``glob``'s ``**`` follows symlinks to folders, so two links ``a -> .`` and
``b -> .`` make it explode; here ``**`` never descends through a link, and the search
looks at a bounded number of entries.

It is read with a bound: :func:`read_bounded` for a whole small file,
:func:`bounded_lines` for a line file whose over-long lines are skipped without ever
being held. Every refusal is a :class:`NotRegularFile` (an ``OSError`` whose
``strerror`` says why), so callers that turn ``OSError`` into a warning name the file
and the reason.
"""

from __future__ import annotations

import errno
import fnmatch
import glob
import os
import stat
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from trainee import paths

__all__ = [
    "STORE_NAME",
    "NotRegularFile",
    "bounded_lines",
    "find_job_files",
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


MAX_FOUND = 10_000
"""Files :func:`find_job_files` returns at most."""
MAX_VISITED = 200_000
"""Folder entries :func:`find_job_files` looks at at most for a ``**`` pattern."""


def _match(parts: Sequence[str], names: Sequence[str]) -> bool:
    """Whether the path components ``names`` match the pattern components ``parts`` as
    ``glob`` would (``**``: any number of folders; a leading dot matched only by one)."""
    if not parts:
        return not names
    head, rest = parts[0], parts[1:]
    if head == "**":
        for i in range(len(names) + 1):
            if i and names[i - 1].startswith("."):
                break
            if _match(rest, names[i:]):
                return True
        return False
    if not names or (names[0].startswith(".") and not head.startswith(".")):
        return False
    return fnmatch.fnmatchcase(names[0], head) and _match(rest, names[1:])


def find_job_files(pattern: str, *, max_found: int = MAX_FOUND) -> list[str]:
    """The paths matching ``pattern`` (absolute, ``glob`` syntax with ``**``) in folders the
    job can write, at most ``max_found``: like ``glob.glob(pattern, recursive=True)``, but
    ``**`` never descends through a symlink and at most :data:`MAX_VISITED` entries are
    looked at. Without ``**`` the depth is fixed and ``glob`` itself is used."""
    if not glob.has_magic(pattern):
        return [pattern] if os.path.lexists(pattern) else []
    if "**" not in pattern.split("/"):
        found: list[str] = []
        for path in glob.iglob(pattern):
            found.append(path)
            if len(found) >= max_found:
                break
        return found
    parts = [p for p in pattern.split("/") if p]
    static: list[str] = []
    for part in parts:
        if glob.has_magic(part):
            break
        static.append(part)
    root = "/" + "/".join(static)
    wanted = parts[len(static) :]
    out: list[str] = []
    visited = 0
    for folder, dirs, files in os.walk(root, followlinks=False):
        rel = [p for p in folder[len(root) :].split("/") if p]
        for name in [*dirs, *files]:
            visited += 1
            if _match(wanted, [*rel, name]):
                out.append(os.path.join(folder, name))
        if visited >= MAX_VISITED or len(out) >= max_found:
            break
        dirs[:] = [
            d for d in dirs if not d.startswith(".") or any(p.startswith(".") for p in wanted)
        ]
    return out[:max_found]
