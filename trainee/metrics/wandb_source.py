"""Where a round's W&B summary is when a ``wandb_summary`` spec gives no ``path``.

wandb writes ``wandb/run-<date>-<id>/files/wandb-summary.json`` (``offline-run-...``
offline, ``latest-run`` a link to the newest) below ``WANDB_DIR``, or below the working
folder when ``WANDB_DIR`` is not set (``.wandb/`` when a ``wandb/`` folder is taken).
trainee points every round's ``WANDB_DIR`` into ``.trainee/cache/wandb``, shared by all
rounds, so the summary of *this* round is the newest one written since it started.
Stdlib only.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Sequence

__all__ = ["SUMMARY_GLOBS", "find_wandb_summary"]

SUMMARY_GLOBS = (
    "wandb/*run-*/files/wandb-summary.json",
    "wandb/latest-run/files/wandb-summary.json",
    ".wandb/*run-*/files/wandb-summary.json",
)
"""Below each searched folder (``WANDB_DIR``, then the working folder)."""


def find_wandb_summary(
    folders: Sequence[str], *, since: float | None
) -> tuple[str | None, list[str]]:
    """The newest ``wandb-summary.json`` below ``folders`` written at or after ``since``
    (any when None), and the patterns searched (for the warning when there is none)."""
    patterns = [
        os.path.join(glob.escape(folder), pattern)
        for folder in folders
        for pattern in SUMMARY_GLOBS
    ]
    best: tuple[float, str] | None = None
    for pattern in patterns:
        for path in glob.glob(pattern):
            try:
                st = os.stat(path)
            except OSError:
                continue
            if not os.path.isfile(path) or (since is not None and st.st_mtime < since):
                continue
            if best is None or st.st_mtime > best[0]:
                best = (st.st_mtime, os.path.realpath(path))
    return (best[1] if best else None), patterns
