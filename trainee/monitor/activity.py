"""Passive activity of a round: when did it last show a sign of life?

Signs are output on stdout/stderr, a log file whose mtime moved, and heartbeat
files (JSON ``{"ts": <unix seconds or ISO 8601>}``, or just their mtime).
This is information for the user and the decision policy only: nothing here
ever kills or fails a round.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterable, Sequence
from datetime import datetime

from trainee import jobfiles

__all__ = ["HEARTBEAT_LIMIT", "Activity", "file_mtime", "read_heartbeat"]

HEARTBEAT_LIMIT = 65536
"""Bytes read at most from a heartbeat file."""

Roots = Sequence[str | os.PathLike[str]] | None


def file_mtime(path: str | os.PathLike[str], within: Roots = None) -> float | None:
    """The mtime of the regular file ``path`` (opened as :mod:`trainee.jobfiles` does: a
    FIFO, a device or a link out of ``within`` gives None), None if absent."""
    try:
        fd = jobfiles.open_job_file(path, within=within)
    except OSError:
        return None
    try:
        return os.fstat(fd).st_mtime
    finally:
        os.close(fd)


def read_heartbeat(path: str | os.PathLike[str], within: Roots = None) -> float | None:
    """The time a heartbeat file reports: its ``ts`` field, else its mtime; None if absent
    (or not a regular file inside ``within``: the job writes it)."""
    try:
        with os.fdopen(jobfiles.open_job_file(path, within=within), "rb") as f:
            mtime = os.fstat(f.fileno()).st_mtime
            data = f.read(HEARTBEAT_LIMIT)
    except OSError:
        return None
    ts: object = None
    with contextlib.suppress(ValueError, UnicodeDecodeError):
        doc = json.loads(data)
        if isinstance(doc, dict):
            ts = doc.get("ts")
    if isinstance(ts, bool):
        return mtime
    if isinstance(ts, int | float):
        return float(ts)
    if isinstance(ts, str):
        with contextlib.suppress(ValueError):
            stamp = datetime.fromisoformat(ts.replace("Z", "+00:00"))
            if stamp.tzinfo is not None:
                return stamp.timestamp()
    return mtime


class Activity:
    """``last_activity_at`` and ``idle_for`` of one round, fed by whoever sees a sign of life."""

    def __init__(self, started_at: float | None = None, *, within: Roots = None) -> None:
        self.within = within
        """Where the watched files may be (their links must not lead elsewhere)."""
        self.last_activity_at: float | None = started_at
        self.last_output_at: float | None = None
        self._mtimes: dict[str, float] = {}

    def _note(self, ts: float) -> None:
        if self.last_activity_at is None or ts > self.last_activity_at:
            self.last_activity_at = ts

    def note_output(self, ts: float) -> None:
        """The round printed something at ``ts``."""
        if self.last_output_at is None or ts > self.last_output_at:
            self.last_output_at = ts
        self._note(ts)

    def note_file(self, path: str, mtime: float) -> bool:
        """A watched file has ``mtime``; counts as activity only when it moved. True if so."""
        previous = self._mtimes.get(path)
        self._mtimes[path] = mtime
        if previous is not None and mtime <= previous:
            return False
        self._note(mtime)
        return True

    def note_heartbeat(self, path: str) -> float | None:
        """Read a heartbeat file and count its time; returns that time (None if absent)."""
        ts = read_heartbeat(path, self.within)
        if ts is not None:
            self._note(ts)
        return ts

    def scan(self, paths: Iterable[str], heartbeats: Iterable[str] = ()) -> None:
        """Check the mtimes of ``paths`` and read ``heartbeats`` (missing files are skipped)."""
        for path in paths:
            mtime = file_mtime(path, self.within)
            if mtime is not None:
                self.note_file(path, mtime)
        for path in heartbeats:
            self.note_heartbeat(path)

    def idle_for(self, now: float) -> float | None:
        """Seconds since the last sign of life (0 if it is in the future), None before any."""
        if self.last_activity_at is None:
            return None
        return max(0.0, now - self.last_activity_at)

    read_heartbeat = staticmethod(read_heartbeat)
