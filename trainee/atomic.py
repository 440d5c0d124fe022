"""Replace a file at once: the one atomic-write helper. Stdlib only (the CLI uses it).

A reader sees the old content or the new, never a part of it, and a write that
fails leaves the old file as it was. (The round monitor, :mod:`trainee.shim`, keeps
its own copy: it imports nothing from trainee.)
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

__all__ = ["write_atomic"]


def write_atomic(
    path: str | os.PathLike[str],
    data: bytes | str,
    *,
    mode: int | None = None,
    fsync: bool = True,
) -> None:
    """Write ``data`` (text as UTF-8) to ``path`` through a temp file beside it and a rename.

    ``mode``: the file's permissions, exactly (e.g. ``0o600`` for a secret: the temp
    file is never readable by others, not even for a moment); None: as writing it in
    place would leave them (those of the file replaced; 0666 under the umask for a
    new one). ``fsync``: the data and then the
    folder's entry reach the disk before this returns, so a crash leaves the old file
    or the whole new one. The temp file has a name of its own (``.NAME.<random>.tmp``,
    created exclusively: no link planted there is followed) and is removed on any error.
    """
    target = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    tmp = target.with_name(f".{target.name}.{secrets.token_hex(6)}.tmp")
    if mode is None:
        with contextlib.suppress(FileNotFoundError):
            mode = target.stat().st_mode & 0o7777
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(tmp, flags, 0o600 if mode is not None else 0o666)
    try:
        try:
            if mode is not None:
                os.fchmod(fd, mode)
            view = memoryview(payload)
            while view:
                view = view[os.write(fd, view) :]
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if fsync:
        _fsync_folder(target.parent)


def _fsync_folder(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems cannot sync a folder: the rename is done all the same
    finally:
        os.close(fd)
