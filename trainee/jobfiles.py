"""Opening a file the training job could have written, without trusting it. Stdlib only.

A job can put anything where the daemon reads its metrics, logs and heartbeats: a
FIFO (a plain ``open`` blocks until someone writes to it), a device, a gigabyte of
JSON, or a symlink to a file it cannot see itself (``~/.trainee/config.json``), hoping
the daemon copies its content somewhere the job can read. So every such file is
opened here:

- without following a symlink the daemon did not check: the path is walked one
  component at a time (``O_NOFOLLOW`` on each, relative to the folder opened before);
  a symlink on the way is followed only when where it leads stays inside one of the
  ``within`` folders and is none of trainee's private files (:func:`private_roots`,
  any store);
- with ``O_NONBLOCK``, so a FIFO or a device never blocks the open;
- and only when ``fstat`` says it is a regular file;
- read with a size bound (:func:`read_bounded`).

Every refusal is an :class:`UnsafeFile` (an ``OSError`` whose ``strerror`` says why),
so callers that already turn ``OSError`` into a warning name the file and the reason.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import BinaryIO

from trainee import paths

__all__ = [
    "DEFAULT_LIMIT",
    "MAX_LINKS",
    "UnsafeFile",
    "open_job_fd",
    "open_job_file",
    "private_roots",
    "read_bounded",
    "read_job_file",
]

DEFAULT_LIMIT = 16 << 20
"""Bytes read at most from a whole-file source (a JSON summary, a heartbeat)."""
MAX_LINKS = 40
"""Symlinks followed at most while resolving one path (the kernel's own limit)."""

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class UnsafeFile(OSError):
    """A job-reachable file the daemon refuses to read; ``strerror`` says why."""

    def __init__(self, path: str | os.PathLike[str], reason: str, code: int = errno.EPERM) -> None:
        super().__init__(code, reason, os.fspath(path))


def private_roots(env: Mapping[str, str] | None = None) -> list[Path]:
    """trainee's own files a job-written link must never lead to, resolved: config.json
    (the provider keys), the daemon's socket and its HTTP token. (Any store,
    ``runtime.sqlite3*``, is refused by its name wherever it is.)"""
    sock = paths.socket_path(env)
    found: list[Path] = []
    for path in (paths.config_path(env), sock, sock.with_name("token")):
        real = Path(os.path.realpath(path))
        if real not in found:
            found.append(real)
    return found


STORE_NAME = "runtime.sqlite3"


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISLNK(mode):
        return "a symlink"
    return "not a regular file"


def _inside(path: str, roots: Iterable[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def _root_of(path: str, roots: Sequence[str]) -> str | None:
    """The deepest of ``roots`` holding ``path``."""
    found = [r for r in roots if _inside(path, [r])]
    return max(found, key=len) if found else None


def _split(path: str) -> list[str]:
    return [p for p in path.split("/") if p and p != "."]


def _lstat(name: str, dir_fd: int, shown: str) -> os.stat_result:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError as exc:
        raise type(exc)(exc.errno, exc.strerror, shown) from None


def open_job_fd(
    path: str | os.PathLike[str],
    *,
    within: Sequence[str | os.PathLike[str]] | None = None,
    deny: Sequence[str | os.PathLike[str]] | None = None,
) -> int:
    """A read-only, non-blocking fd on the regular file ``path`` (absolute).

    ``within``: the folders the file may be in (None: anywhere). They are trusted (the
    daemon's own paths, resolved normally); what lies below them is the job's and is
    walked without following symlinks, except a symlink that leads inside ``within``
    again, and never into ``deny`` (default: :func:`private_roots`); at most
    :data:`MAX_LINKS` of them. :class:`UnsafeFile` otherwise; ``FileNotFoundError`` and
    the like pass through unchanged.
    """
    text = os.fspath(path)
    if not os.path.isabs(text):
        raise UnsafeFile(text, "not an absolute path")
    lexical = os.path.normpath(text)
    denied = [os.path.realpath(d) for d in (private_roots() if deny is None else deny)]
    if within is None:
        roots = ["/"]
        start, rest = "/", lexical
    else:
        pairs = [(os.path.normpath(os.fspath(w)), os.path.realpath(w)) for w in within]
        roots = [real for _, real in pairs]
        anchor = max(
            (pair for pair in pairs if _inside(lexical, [pair[0]]) or _inside(lexical, [pair[1]])),
            key=lambda pair: len(pair[0]),
            default=None,
        )
        if anchor is None:
            raise UnsafeFile(text, "is outside " + ", ".join(roots))
        given, start = anchor
        base = given if _inside(lexical, [given]) else start
        rest = lexical[len(base) :]
    shown = ", ".join(roots)
    real = _split(start)
    floor = len(real)
    todo = _split(rest)
    fd = os.open(start, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)  # trusted: may follow
    links = 0
    try:
        while todo:
            part = todo.pop(0)
            if part == "..":
                if len(real) <= floor:
                    if floor:
                        raise UnsafeFile(text, f"'..' leads outside {shown}")
                    continue
                real.pop()
                parent = os.open("..", _DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = parent
                continue
            st = _lstat(part, fd, text)
            if stat.S_ISLNK(st.st_mode):
                links += 1
                if links > MAX_LINKS:
                    raise UnsafeFile(text, "too many levels of symbolic links", errno.ELOOP)
                target = os.readlink(part, dir_fd=fd)
                here = "/" + "/".join(real)
                where = os.path.normpath(os.path.join(here, target))
                if _inside(where, denied) or os.path.basename(where).startswith(STORE_NAME):
                    raise UnsafeFile(
                        text, f"a symlink on the way leads to trainee's private {where}"
                    )
                root = _root_of(where, roots)
                if root is None:
                    raise UnsafeFile(text, f"a symlink on the way leads outside {shown} to {where}")
                # walk where it leads from that root, checking each component again
                os.close(fd)
                fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
                real = _split(root)
                floor = len(real)
                todo = _split(where[len(root) :]) + todo
                continue
            if not todo:
                if not stat.S_ISREG(st.st_mode):
                    raise UnsafeFile(text, f"is {_kind(st.st_mode)}, not a regular file")
                out = os.open(part, _FILE_FLAGS, dir_fd=fd)
                mode = os.fstat(out).st_mode
                full = "/" + "/".join([*real, part])
                reason = None
                if not stat.S_ISREG(mode):  # swapped between the stat and the open
                    reason = f"is {_kind(mode)}, not a regular file"
                elif _inside(full, denied) or part.startswith(STORE_NAME):
                    reason = f"is trainee's private {full}"
                if reason is not None:
                    os.close(out)
                    raise UnsafeFile(text, reason)
                return out
            if not stat.S_ISDIR(st.st_mode):
                raise NotADirectoryError(errno.ENOTDIR, "Not a directory", text)
            nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nxt
            real.append(part)
        raise IsADirectoryError(errno.EISDIR, "Is a directory", text)
    finally:
        os.close(fd)


def open_job_file(
    path: str | os.PathLike[str],
    *,
    within: Sequence[str | os.PathLike[str]] | None = None,
    deny: Sequence[str | os.PathLike[str]] | None = None,
) -> BinaryIO:
    """:func:`open_job_fd` as a binary file object (blocking reads: it is a regular file)."""
    fd = open_job_fd(path, within=within, deny=deny)
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def read_bounded(f: BinaryIO, limit: int, path: str | os.PathLike[str]) -> bytes:
    """All of ``f`` if it holds at most ``limit`` bytes, else :class:`UnsafeFile`."""
    data = f.read(limit + 1)
    if len(data) > limit:
        raise UnsafeFile(path, f"is larger than {limit} bytes (not read)", errno.EFBIG)
    return data


def read_job_file(
    path: str | os.PathLike[str],
    limit: int = DEFAULT_LIMIT,
    *,
    within: Sequence[str | os.PathLike[str]] | None = None,
    deny: Sequence[str | os.PathLike[str]] | None = None,
) -> bytes:
    """The whole regular file ``path`` (at most ``limit`` bytes), opened safely."""
    with open_job_file(path, within=within, deny=deny) as f:
        return read_bounded(f, limit, path)
