"""A session's files: round logs and the downloads of its artifacts folder, read safely
and bounded.

Only names from a fixed list (and ``round-NNNN.log``) are served, from the
session's artifacts folder and nowhere else: a name with a slash or dots, a
symlink, a FIFO or a folder in its place is refused. ``session_file`` returns a
bounded window of a file's text (any client); the HTTP download streams the same
file by the path it returns (:func:`jobfiles.open_job_file` again: a regular file, no
symlink), as it was when it was opened.
"""

from __future__ import annotations

import os
import re
from typing import Annotated

import anyio
from msgspec import Meta

from trainee import jobfiles
from trainee.api import resolve
from trainee.api.context import CallContext
from trainee.api.methods import registry
from trainee.errors import InvalidParams, NotFound
from trainee.spec import wire as w
from trainee.store.report_views import VIEW_NAMES

__all__ = [
    "DOWNLOADS",
    "ROUND_LOG_RE",
    "logs_tail",
    "session_file",
]

ROUND_LOG_RE = re.compile(r"^round-[0-9]{4,12}\.log$")
DOWNLOADS: dict[str, str] = {
    "report.md": "text/markdown; charset=utf-8",
    "result_ledger.csv": "text/csv; charset=utf-8",
    "result_ledger.jsonl": "application/x-ndjson",
    "research_state.json": "application/json",
    "report_chart.svg": "image/svg+xml",
    **dict.fromkeys(VIEW_NAMES, "image/svg+xml"),
}
"""The files of a session's artifacts folder that can be downloaded (plus round logs),
with their media types."""
LOG_MEDIA = "text/plain; charset=utf-8"
MAX_WINDOW = 16 * 2**20


# -- round logs ---------------------------------------------------------------


@registry.method(w.LogsTailParams, w.LogsTailResult)
async def logs_tail(ctx: CallContext, params: w.LogsTailParams) -> w.LogsTailResult:
    """Read a round's log from a byte offset (stateless, like Supervisor's tail), or its last lines.

    A negative ``offset`` counts from the end. Returns up to ``length`` bytes as
    text (invalid UTF-8 replaced), ``next_offset`` to pass next time, and
    ``overflow`` when more than ``length`` bytes were waiting. With ``tail``, the
    last ``tail`` whole lines instead (``offset`` is where they start).
    """
    if params.tail is not None:
        if not 1 <= params.tail <= w.MAX_TAIL_LINES:
            raise InvalidParams(
                f"tail must be between 1 and {w.MAX_TAIL_LINES} lines, got {params.tail}",
                {"field": "tail", "reason": "out of range"},
            )
        span = min(16 * 2**20, max(64 * 1024, params.tail * 512))
        offset, length = -span, span
    else:
        offset, length = params.offset, params.length
    folder = await resolve.session_folder(ctx, params.session, params.project_root)
    path = folder.round(params.round).log
    try:
        fd = await anyio.to_thread.run_sync(jobfiles.open_job_file, path)
    except FileNotFoundError:
        raise NotFound(
            f"no log for {params.session} round {params.round}: {path}",
            {"path": str(path)},
        ) from None
    except jobfiles.NotRegularFile as exc:
        raise NotFound(
            f"the log of {params.session} round {params.round} is not a regular file: {path}",
            {"path": str(path), "reason": str(exc.strerror)},
        ) from None
    with os.fdopen(fd, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if offset < 0:
            offset = max(0, size + offset)
        offset = min(offset, size)
        fh.seek(offset)
        chunk = await anyio.to_thread.run_sync(fh.read, length)
    next_offset = offset + len(chunk)
    data = chunk.decode("utf-8", "replace")
    if params.tail is not None:
        data, offset = _last_lines(data, offset, params.tail)
    return w.LogsTailResult(
        path=str(path),
        data=data,
        offset=offset,
        next_offset=next_offset,
        size=size,
        overflow=next_offset < size,
    )


def _last_lines(text: str, offset: int, count: int) -> tuple[str, int]:
    """The last ``count`` whole lines of ``text`` read at ``offset``, and where they start."""
    lines = text.split("\n")
    ends_with_newline = text.endswith("\n")
    if ends_with_newline:
        lines.pop()
    if offset != 0 and lines:
        lines = lines[1:]  # the first line read from mid-file may be partial
    kept = lines[-count:]
    new_text = "\n".join(kept) + ("\n" if ends_with_newline and kept else "")
    dropped = text[: len(text) - len(new_text)] if new_text else text
    return new_text, offset + len(dropped.encode("utf-8"))


# -- downloads -----------------------------------------------------------------


class SessionFileParams(w.Wire):
    session: w.SessionRef
    name: str
    """report.md, result_ledger.csv, result_ledger.jsonl, research_state.json,
    report_chart.svg or round-NNNN.log."""
    project_root: str | None = None
    offset: Annotated[int, Meta(ge=0)] = 0
    length: Annotated[int, Meta(ge=0, le=MAX_WINDOW)] = 1 << 20
    """Bytes to read from ``offset`` (0: only the file's facts)."""


class SessionFileResult(w.Wire):
    session: str
    name: str
    path: str
    media_type: str
    filename: str
    """The name a download is saved as (``session-0001-report.md``)."""
    size: int
    offset: int
    next_offset: int
    data: str
    """``length`` bytes from ``offset`` as text (invalid UTF-8 replaced)."""
    overflow: bool
    """More of the file follows ``next_offset``."""


@registry.method(SessionFileParams, SessionFileResult)
async def session_file(ctx: CallContext, params: SessionFileParams) -> SessionFileResult:
    """Read a file of a session's artifacts folder: its report, ledgers, research state, chart or a round log.

    Only those names; a window of at most 16 MiB from ``offset`` per call (the HTTP
    download ``GET /api/sessions/{session}/files/{name}`` streams the whole file).
    """
    name = params.name
    if name not in DOWNLOADS and not ROUND_LOG_RE.fullmatch(name):
        raise NotFound(
            f"no downloadable file {name[:100]!r}; choose one of {', '.join(DOWNLOADS)} "
            "or round-NNNN.log",
            {"field": "name", "reason": "not in the allow-list"},
        )
    found = await resolve.resolve_session(ctx, params.session, params.project_root)
    path = found.layout.artifacts / name
    missing = NotFound(
        f"{name} of {found.record.id} is not there (yet): {path}",
        {"path": str(path), "hint": "session_report writes report.md and the ledgers"},
    )
    try:
        fd = await anyio.to_thread.run_sync(jobfiles.open_job_file, path)
    except FileNotFoundError:
        raise missing from None
    except jobfiles.NotRegularFile as exc:
        raise NotFound(
            f"{name} of {found.record.id} is not a regular file: {path}",
            {"path": str(path), "reason": str(exc.strerror)},
        ) from None
    with os.fdopen(fd, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        offset = min(params.offset, size)
        fh.seek(offset)
        chunk = await anyio.to_thread.run_sync(fh.read, params.length) if params.length else b""
    return SessionFileResult(
        session=found.record.id,
        name=name,
        path=str(path),
        media_type=DOWNLOADS.get(name, LOG_MEDIA),
        filename=f"{found.record.id}-{name}",
        size=size,
        offset=offset,
        next_offset=offset + len(chunk),
        data=chunk.decode("utf-8", "replace"),
        overflow=offset + len(chunk) < size,
    )
