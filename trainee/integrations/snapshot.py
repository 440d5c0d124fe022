"""What the sinks are handed: plain, immutable snapshots taken on the event loop.

A sink's thread never touches the store or the bus; it gets everything it writes in
one of these, built from the store when the round (or the session) ended.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from trainee.research.state import failure_kind
from trainee.states import RoundStatus

__all__ = [
    "RoundSnapshot",
    "SessionEnd",
    "SessionInfo",
    "failure_cause",
    "mlflow_status",
]


@dataclass(frozen=True)
class SessionInfo:
    project: str
    """The project folder's name."""
    project_root: str
    session: str
    policy: str
    started_at: float
    page_url: str
    metric_name: str | None
    goal: str
    max_rounds: int
    artifacts_dir: str
    """The session's artifacts folder (report.md, ledgers, the exporters' state)."""


@dataclass(frozen=True)
class RoundSnapshot:
    info: SessionInfo
    index: int
    status: str
    params: dict[str, Any]
    diff: dict[str, Any]
    hypothesis: str
    expected: str
    verdict: str | None
    verdict_reason: str
    finals: dict[str, float]
    primary: float | None
    started_at: float | None
    ended_at: float | None
    returncode: int | None
    signal: str | None
    command: str
    attempt: int
    batch: int
    warnings: tuple[str, ...] = ()
    failure_tail: tuple[str, ...] = ()
    points: tuple[tuple[str, float, int | None, int], ...] = ()
    """``(name, value, step, seq)``, in the order the round produced them."""
    log_path: str = ""
    config_path: str | None = None

    @property
    def name(self) -> str:
        return f"round-{self.index:04d}"

    @property
    def cause(self) -> str | None:
        return failure_cause(self.status, [*self.failure_tail, *self.warnings])

    def record_json(self) -> str:
        """The round as trainee saw it (the ``round.json`` artifact)."""
        return json.dumps(
            {
                "project": self.info.project_root,
                "session": self.info.session,
                "round": self.index,
                "status": self.status,
                "params": self.params,
                "diff": self.diff,
                "hypothesis": self.hypothesis,
                "expected": self.expected,
                "verdict": self.verdict,
                "verdict_reason": self.verdict_reason,
                "finals": self.finals,
                "primary_metric": self.primary,
                "metric_name": self.info.metric_name,
                "command": self.command,
                "started_at": self.started_at,
                "ended_at": self.ended_at,
                "returncode": self.returncode,
                "signal": self.signal,
                "attempt": self.attempt,
                "warnings": list(self.warnings),
            },
            indent=2,
            default=str,
        )


@dataclass(frozen=True)
class SessionEnd:
    info: SessionInfo
    status: str
    stop_reason: str | None
    error: str | None
    best_round: int | None
    best_metric: float | None
    best_params: dict[str, Any] | None
    baseline_metric: float | None
    rounds: int
    """Rounds that ran to an end (stopped ones not counted)."""
    report_path: str
    finished_at: float
    extra: dict[str, Any] = field(default_factory=dict)


def failure_cause(status: str, lines: list[str]) -> str | None:
    """The named cause of a round that failed: ``timeout``, ``out of memory`` or
    ``nan/divergence`` (:func:`trainee.research.state.failure_kind` over its log tail and
    warnings), else None."""
    if status == RoundStatus.TIMED_OUT:
        return "timeout"
    if status in (RoundStatus.FAILED, RoundStatus.COMPLETED_WITHOUT_METRICS, RoundStatus.COMPLETED):
        return failure_kind(lines)
    return None


def mlflow_status(status: str) -> str:
    """A round status as MLflow's run status."""
    if status == RoundStatus.COMPLETED:
        return "FINISHED"
    if status == RoundStatus.STOPPED:
        return "KILLED"
    return "FAILED"
