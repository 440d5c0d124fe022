"""Persisted rows as msgspec Structs; JSON columns come back decoded to Python values.

A record built in Python is not type-checked by msgspec; the store checks each
one (:func:`validate_record`) before it writes, so a bad value fails with a
ValueError naming the field and changes nothing.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from trainee.ids import session_id
from trainee.states import SESSION_ENDED, RoundStatus, SessionStatus

__all__ = [
    "ROUND_STATUSES",
    "SESSION_STATUSES",
    "TERMINAL_SESSION_STATUSES",
    "DecisionRecord",
    "MetricPointRecord",
    "Record",
    "RoundRecord",
    "SessionRecord",
    "format_session_id",
    "validate_record",
]

SESSION_STATUSES: frozenset[str] = frozenset(s.value for s in SessionStatus)
"""Every session status (:class:`trainee.states.SessionStatus`)."""
TERMINAL_SESSION_STATUSES: frozenset[str] = frozenset(s.value for s in SESSION_ENDED)
ROUND_STATUSES: frozenset[str] = frozenset(s.value for s in RoundStatus)
"""Every round status (:class:`trainee.states.RoundStatus`)."""

R = TypeVar("R", bound="Record")


format_session_id = session_id
"""``7`` -> ``session-0007`` (:func:`trainee.ids.session_id`)."""


class Record(msgspec.Struct, kw_only=True):
    """Base of every persisted row."""


class SessionRecord(Record, kw_only=True):
    """One session. ``env`` is the caller's environment, kept for resume and never exported."""

    index: int
    id: str = ""
    project_root: str
    status: str = SessionStatus.RUNNING
    stop_reason: str | None = None
    policy: str
    security_mode: str
    max_rounds: int
    created_at: float = msgspec.field(default_factory=time.time)
    updated_at: float = msgspec.field(default_factory=time.time)
    finished_at: float | None = None
    spec: dict[str, Any] = msgspec.field(default_factory=dict)
    env: dict[str, str] = msgspec.field(default_factory=dict)
    cwd: str = ""
    best_round: int | None = None
    baseline_round: int | None = None
    tokens: int = 0
    cost_usd: float = 0.0
    error: str | None = None
    stop_detail: str | None = None
    """What the policy said when it stopped the session (``stop_reason`` policy_stop)."""

    def __post_init__(self) -> None:
        expected = format_session_id(self.index)
        if not self.id:
            self.id = expected
        elif self.id != expected:
            raise ValueError(f"session id {self.id!r} does not match index {self.index}")
        if self.status not in SESSION_STATUSES:
            raise ValueError(
                f"session status {self.status!r} is not one of {sorted(SESSION_STATUSES)}"
            )


class RoundRecord(Record, kw_only=True):
    """One round of a session: what was tried, how it ran, how it was judged.

    ``diff`` maps each changed param to ``{"from": old, "to": new}`` (or just the new
    value); ``tail_offsets`` maps a tailed file to the byte offset read so far.
    """

    session: int
    index: int
    status: str = RoundStatus.PENDING
    params: dict[str, Any] = msgspec.field(default_factory=dict)
    diff: dict[str, Any] = msgspec.field(default_factory=dict)
    decision_id: int | None = None
    hypothesis: str = ""
    expected: str = ""
    verdict: str | None = None
    verdict_reason: str = ""
    command: str = ""
    config_path: str | None = None
    monitor_pid: int | None = None
    monitor_start_time: int | None = None
    log_offset: int = 0
    tail_offsets: dict[str, int] = msgspec.field(default_factory=dict)
    started_at: float | None = None
    ended_at: float | None = None
    returncode: int | None = None
    signal: str | None = None
    finals: dict[str, float] = msgspec.field(default_factory=dict)
    primary_metric: float | None = None
    warnings: list[str] = msgspec.field(default_factory=list)
    failure_tail: list[str] = msgspec.field(default_factory=list)
    last_activity_at: float | None = None
    attempt: int = 0
    backend: str = "local"
    """Where the round runs: ``local`` (under its monitor), ``slurm`` or ``ray``."""
    job_id: str | None = None
    """The cluster engine's job id (``local``: none; the monitor pid names the job)."""
    batch: int = 0
    """The decision step the round belongs to: rounds of one step ran at once
    (``run.parallel``); the baseline is step 0."""
    launch_token: str | None = None
    """The token of the round's latest launch, stored before it starts: a restarted
    daemon either finds what that launch started or revokes it (never runs it twice)."""
    control_layout: int = 2
    """Where the launch's control files are: 2, ``<data_dir>/control/...``; 1, the round's
    workspace (rounds launched before trainee kept them apart from the job)."""
    rung: int = 0
    """``run.screen``: the rung the round ran at (1 the lowest budget; the last rung is the
    full budget); 0 without screening."""
    budget: float | None = None
    """``run.screen``: the value of the budget argument the round ran with."""
    promoted_from: int | None = None
    """``run.screen``: the round of the rung below it was promoted from."""

    def __post_init__(self) -> None:
        if self.status not in ROUND_STATUSES:
            raise ValueError(f"round status {self.status!r} is not one of {sorted(ROUND_STATUSES)}")
        # NaN and infinities do not survive SQLite REAL or JSON columns: refuse them here.
        metric = self.primary_metric
        if isinstance(metric, float) and not math.isfinite(metric):
            raise ValueError(f"primary_metric must be finite, got {metric!r}")
        for name, value in self.finals.items():
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"finals[{name!r}] must be finite, got {value!r}")


class DecisionRecord(Record, kw_only=True):
    """One decision request and its answer.

    ``prompt`` holds the full messages only when debug is on; otherwise each message
    is reduced to ``{"role", "sha256", "length"}`` by the store.
    """

    id: int = 0
    session: int
    round: int
    provider: str
    model: str
    policy: str
    prompt: list[dict[str, Any]] = msgspec.field(default_factory=list)
    raw_response: str | None = None
    plan: dict[str, Any] | None = None
    problems: list[dict[str, Any]] = msgspec.field(default_factory=list)
    repaired: bool = False
    accepted: bool = False
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = None
    latency_sec: float = 0.0
    created_at: float = msgspec.field(default_factory=time.time)
    attempts: list[dict[str, Any]] = msgspec.field(default_factory=list)
    """Every request of the decision, in order (see ``Proposal.attempts``)."""
    response_format: str | None = None
    source: str = ""


class MetricPointRecord(Record, kw_only=True):
    """One metric value seen during a round; ``seq`` orders the points of a round."""

    session: int
    round: int
    name: str
    value: float
    step: int | None
    seq: int


def _enc_hook(obj: Any) -> Any:
    if isinstance(obj, Path):
        return str(obj)
    raise NotImplementedError(f"cannot store a value of type {type(obj).__name__}")


def to_builtins(value: Any) -> Any:
    """JSON-able builtins of ``value`` (Paths become strings)."""
    return msgspec.to_builtins(value, enc_hook=_enc_hook)


def validate_record(rec: R) -> R:
    """``rec`` re-checked against its own field types; ValueError naming the field if not."""
    try:
        return msgspec.convert(to_builtins(rec), type=type(rec))
    except (msgspec.ValidationError, NotImplementedError, TypeError) as exc:
        raise ValueError(f"invalid {type(rec).__name__}: {exc}") from None
