"""What an exporter already wrote for a session (``<session artifacts>/integrations/<sink>.json``).

Written by the daemon only (the session's artifacts folder is not the job's), atomically.
It keeps the ids of the runs made, so a resumed session adds its rounds to the same
parent run and a round is never exported twice.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from trainee.atomic import write_atomic

__all__ = ["SinkState", "target_key"]


def target_key(text: str) -> str:
    """A short digest of where a sink writes: a changed target starts afresh (the target
    itself may hold a password and is not kept)."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class SinkState:
    """A small JSON document: ``target``, sink-specific ids and ``rounds`` {index: {...}}."""

    def __init__(self, path: Path, target: str) -> None:
        self.path = path
        self.data: dict[str, Any] = {}
        try:
            loaded = json.loads(path.read_text())
        except (OSError, ValueError):
            loaded = {}
        if isinstance(loaded, dict) and loaded.get("target") == target_key(target):
            self.data = loaded
        self.data["target"] = target_key(target)
        rounds = self.data.get("rounds")
        self.data["rounds"] = rounds if isinstance(rounds, dict) else {}

    def round(self, index: int) -> dict[str, Any]:
        entry = self.data["rounds"].get(str(index))
        return entry if isinstance(entry, dict) else {}

    def set_round(self, index: int, **fields: Any) -> None:
        self.data["rounds"][str(index)] = {**self.round(index), **fields}
        self.save()

    def done(self, index: int) -> bool:
        return bool(self.round(index).get("done"))

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps(self.data, indent=2, sort_keys=True) + "\n"
        write_atomic(self.path, text, fsync=False)  # rewritten each round: losing one is fine
