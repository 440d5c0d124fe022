"""A session's stop, recorded on disk before it is delivered.

A stop must reach the round whatever it is doing: a monitor not started yet, bwrap
setting the sandbox up, a launch being recorded, a restarted daemon re-adopting the
round. Signals alone cannot do that (the daemon knows a monitor only once it is ready,
and a job not started yet cannot receive one), so a stop is first written to the
session's ``stop.json`` in its control folder (never writable by the job), then
delivered as SIGTERM:

- every round monitor checks the file before it starts the command and right after
  (:mod:`trainee.shim`, ``--stop-file``): a round stopped before its job ran never
  runs it; one stopped while it was starting is stopped at once;
- a daemon that died between recording and delivering finds the stop when it
  starts again and honours it (:func:`recorded`);
- a new start or a ``trainee resume`` of the session clears it (:func:`clear`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from pathlib import Path

from trainee import jobfiles, shim
from trainee.states import StopReason
from trainee.testhooks import crash_point

__all__ = ["clear", "record", "recorded"]

log = logging.getLogger("trainee.monitor")

LIMIT = 4096


def record(path: Path, reason: str) -> bool:
    """Write the stop (durably: fsynced with its folder). False, with a warning, when
    it cannot be written (the stop is then delivered by signal only)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        shim.write_atomic(str(path), {"reason": reason, "at": time.time()})
    except OSError as exc:
        log.warning("cannot record the stop in %s: %s", path, exc.strerror or exc)
        return False
    crash_point("stop.recorded")
    return True


def recorded(path: Path) -> StopReason | None:
    """The reason of a stop recorded at ``path`` (``user_stop`` when it cannot be read:
    a stop all the same); None when there is none."""
    try:
        data, _ = jobfiles.read_bounded(path, LIMIT, within=[path.parent], deny=())
    except FileNotFoundError:
        return None
    except OSError as exc:
        log.warning("ignoring the stop file %s: %s", path, exc.strerror or exc)
        return None
    with contextlib.suppress(ValueError, AttributeError, TypeError):
        return StopReason(json.loads(data).get("reason"))
    return StopReason.USER_STOP


def clear(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
