"""The state tables: every transition the loop makes is allowed, nothing else is."""

from __future__ import annotations

import pytest

from trainee.states import (
    ROUND_FINISHED,
    SESSION_STATUS_OF_STOP,
    RoundStatus,
    SessionStatus,
    StopReason,
    TransitionError,
    check_round_transition,
    check_session_transition,
    published,
)

R = RoundStatus
S = SessionStatus


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (R.PENDING, R.RUNNING),
        (R.PENDING, R.PENDING),  # a launch never recorded: one more attempt
        (R.PENDING, R.FAILED),  # the launch failed
        (R.PENDING, R.STOPPED),
        (R.RUNNING, R.PENDING),  # its monitor died: run it again
        *((R.RUNNING, end) for end in ROUND_FINISHED),
        *((end, end) for end in ROUND_FINISHED),  # the same write again changes nothing
    ],
)
def test_the_rounds_transitions(old: R, new: R) -> None:
    check_round_transition(old, new)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (R.COMPLETED, R.RUNNING),
        (R.FAILED, R.COMPLETED),
        (R.STOPPED, R.PENDING),
        (R.PENDING, R.COMPLETED),  # judged without running
        (R.TIMED_OUT, R.FAILED),
        (R.PENDING, R.PRUNED),  # only a running round is pruned
        (R.PRUNED, R.PENDING),  # a pruned round is over, never re-run
        (R.PRUNED, R.COMPLETED),
    ],
)
def test_a_forbidden_round_change_names_both_states(old: R, new: R) -> None:
    with pytest.raises(TransitionError, match=f"{old} -> {new}"):
        check_round_transition(old, new, what="round 3 of session-0001")


def test_unknown_statuses_are_refused() -> None:
    with pytest.raises(TransitionError, match="unknown status 'lost'"):
        check_round_transition("running", "lost")
    with pytest.raises(TransitionError, match="unknown status 'stopping'"):
        check_session_transition("running", "stopping")


def test_sessions_end_once_and_may_be_resumed() -> None:
    for end in (S.FINISHED, S.FAILED, S.STOPPED):
        check_session_transition(S.RUNNING, end)
        check_session_transition(end, S.RUNNING)  # trainee run --resume
    with pytest.raises(TransitionError):
        check_session_transition(S.FINISHED, S.FAILED)


def test_every_stop_reason_has_a_session_status_and_clients_get_them_all() -> None:
    assert set(SESSION_STATUS_OF_STOP) == set(StopReason)
    states = published()
    assert states["round_statuses"] == [s.value for s in R]
    assert states["stop_reasons"]["user_stop"] == "stopped"  # type: ignore[index]
    assert set(states["round_finished"]) == {s.value for s in ROUND_FINISHED}  # type: ignore[arg-type]


def test_a_pruned_round_is_finished_and_reached_only_from_running() -> None:
    assert R.PRUNED.value == "pruned"
    assert R.PRUNED in ROUND_FINISHED
    check_round_transition(R.RUNNING, R.PRUNED)
    assert "pruned" in published()["round_finished"]  # type: ignore[operator]
