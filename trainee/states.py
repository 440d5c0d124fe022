"""The states of rounds and sessions, the reasons a session stops, and the transitions.

Stdlib only, the bottom layer: the store checks every status it writes against these
tables, the runner and the API use the names, and clients (the CLI, the page, MCP) get
the values from ``daemon_hello`` instead of spelling them again. The round monitor
(trainee/shim.py) is started as a file with ``python -I`` and imports nothing of
trainee; it writes exit records, never statuses.
"""

from __future__ import annotations

import enum

__all__ = [
    "ROUND_FINISHED",
    "ROUND_TRANSITIONS",
    "SESSION_ENDED",
    "SESSION_STATUS_OF_STOP",
    "SESSION_TRANSITIONS",
    "RoundStatus",
    "SessionStatus",
    "StopReason",
    "TransitionError",
    "check_round_transition",
    "check_session_transition",
    "published",
]


class RoundStatus(enum.StrEnum):
    """Where one round is. ``pending``: recorded, not started (or to be run again);
    ``running``: its job was launched; the rest are finished."""

    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    COMPLETED_WITHOUT_METRICS = "completed_without_metrics"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    STOPPED = "stopped"
    PRUNED = "pruned"
    """Stopped early by a ``run.prune`` rule (its reason in the round's error text,
    ``pruned: ...``); used up the budget of rounds, unlike one the user stopped."""


class SessionStatus(enum.StrEnum):
    RUNNING = "running"
    FINISHED = "finished"
    FAILED = "failed"
    STOPPED = "stopped"


class StopReason(enum.StrEnum):
    """Why a session ended (``sessions.stop_reason``)."""

    USER_STOP = "user_stop"
    MAX_ROUNDS = "max_rounds"
    NO_TUNABLE_PARAMS = "no_tunable_params"
    BUDGET_TIME = "budget_time"
    BUDGET_TOKENS = "budget_tokens"
    BUDGET_USD = "budget_usd"
    POLICY_STOP = "policy_stop"
    PROVIDER_FAILED = "provider_failed"
    INVALID_DECISION = "invalid_decision"
    REQUIRED_METRIC_MISSING = "required_metric_missing"
    BASELINE_FAILED = "baseline_failed"
    ERROR = "error"


ROUND_FINISHED: frozenset[RoundStatus] = frozenset(
    {
        RoundStatus.COMPLETED,
        RoundStatus.COMPLETED_WITHOUT_METRICS,
        RoundStatus.FAILED,
        RoundStatus.TIMED_OUT,
        RoundStatus.STOPPED,
        RoundStatus.PRUNED,
    }
)
"""A round in one of these states is over: its status is never written again."""

ROUND_TRANSITIONS: dict[RoundStatus, frozenset[RoundStatus]] = {
    # launched; or ended before its launch (a launch error, a stop); or again pending
    # with one more attempt (a launch the daemon never recorded)
    RoundStatus.PENDING: frozenset(
        {RoundStatus.RUNNING, RoundStatus.FAILED, RoundStatus.STOPPED, RoundStatus.PENDING}
    ),
    # judged when its job ended; or pending again when its monitor died (re-run)
    RoundStatus.RUNNING: ROUND_FINISHED | {RoundStatus.PENDING},
    **{status: frozenset() for status in ROUND_FINISHED},
}

SESSION_ENDED: frozenset[SessionStatus] = frozenset(
    {SessionStatus.FINISHED, SessionStatus.FAILED, SessionStatus.STOPPED}
)

SESSION_TRANSITIONS: dict[SessionStatus, frozenset[SessionStatus]] = {
    SessionStatus.RUNNING: SESSION_ENDED,
    # an ended session may be resumed (``trainee run --resume``)
    **{status: frozenset({SessionStatus.RUNNING}) for status in SESSION_ENDED},
}

SESSION_STATUS_OF_STOP: dict[StopReason, SessionStatus] = {
    StopReason.USER_STOP: SessionStatus.STOPPED,
    StopReason.MAX_ROUNDS: SessionStatus.FINISHED,
    StopReason.NO_TUNABLE_PARAMS: SessionStatus.FINISHED,
    StopReason.BUDGET_TIME: SessionStatus.FINISHED,
    StopReason.BUDGET_TOKENS: SessionStatus.FINISHED,
    StopReason.BUDGET_USD: SessionStatus.FINISHED,
    StopReason.POLICY_STOP: SessionStatus.FINISHED,
    StopReason.PROVIDER_FAILED: SessionStatus.FAILED,
    StopReason.INVALID_DECISION: SessionStatus.FAILED,
    StopReason.REQUIRED_METRIC_MISSING: SessionStatus.FAILED,
    StopReason.BASELINE_FAILED: SessionStatus.FAILED,
    StopReason.ERROR: SessionStatus.FAILED,
}
"""The status a session ends with for each stop reason (a session none of whose rounds
completed is failed whatever the reason: the runner decides that)."""


class TransitionError(RuntimeError):
    """A status write that the transition table forbids: a bug in trainee, never a user
    error (the daemon reports it as an internal error with an incident id)."""


def check_round_transition(old: str, new: str, *, what: str = "a round") -> None:
    """Raise TransitionError unless a round may go from ``old`` to ``new`` (writing the
    same finished status again is allowed: it changes nothing)."""
    _check(RoundStatus, ROUND_TRANSITIONS, old, new, what)


def check_session_transition(old: str, new: str, *, what: str = "a session") -> None:
    _check(SessionStatus, SESSION_TRANSITIONS, old, new, what)


def _check(
    kind: type[RoundStatus] | type[SessionStatus],
    table: dict[RoundStatus, frozenset[RoundStatus]]
    | dict[SessionStatus, frozenset[SessionStatus]],
    old: str,
    new: str,
    what: str,
) -> None:
    values = {s.value for s in kind}
    for state in (old, new):
        if state not in values:
            raise TransitionError(
                f"{what}: unknown status {state!r}; one of {', '.join(sorted(values))}"
            )
    if old == new:
        return
    allowed = table[kind(old)]  # type: ignore[index]
    if kind(new) not in allowed:
        can = ", ".join(sorted(allowed)) or "nothing (it is over)"
        raise TransitionError(f"{what}: illegal status change {old} -> {new} (from {old}: {can})")


def published() -> dict[str, object]:
    """The states as clients get them (``daemon_hello``): every value, the finished
    sets and the session status of each stop reason."""
    return {
        "round_statuses": [s.value for s in RoundStatus],
        "round_finished": sorted(s.value for s in ROUND_FINISHED),
        "session_statuses": [s.value for s in SessionStatus],
        "session_ended": sorted(s.value for s in SESSION_ENDED),
        "stop_reasons": {r.value: SESSION_STATUS_OF_STOP[r].value for r in StopReason},
    }
