"""A policy's proposal as the store keeps it and as the event stream announces it."""

from __future__ import annotations

import time
from typing import Any

import msgspec

from trainee import events as ev
from trainee.policies.base import Proposal
from trainee.store.records import DecisionRecord

__all__ = ["decision_event", "decision_record"]


def decision_record(session: int, index: int, p: Proposal, *, accepted: bool) -> DecisionRecord:
    """The decision row of proposal ``p`` for round ``index`` (not yet stored)."""
    return DecisionRecord(
        id=0,
        session=session,
        round=index,
        provider=p.provider,
        model=p.model,
        policy=p.policy,
        prompt=p.messages,
        raw_response=p.raw_response,
        plan=msgspec.to_builtins(p.plan) if p.plan is not None else None,
        problems=p.problems,
        repaired=p.repaired,
        accepted=accepted,
        prompt_tokens=p.prompt_tokens,
        completion_tokens=p.completion_tokens,
        cost_usd=p.cost_usd,
        latency_sec=p.latency_sec,
        created_at=time.time(),
        attempts=p.attempts,
        response_format=p.response_format,
        source=p.source,
    )


def decision_event(index: int, p: Proposal, diff: dict[str, Any]) -> ev.Decision:
    """The ``decision`` event announcing ``p`` for round ``index``."""
    return ev.Decision(
        source=p.source,
        notes=p.notes,
        round=index,
        policy=p.policy,
        provider=p.provider,
        model=p.model,
        hypothesis=p.plan.hypothesis,
        change_summary=p.plan.change_summary,
        params=p.plan.params,
        diff=diff,
        expected=p.plan.expected,
        stop=p.plan.stop,
        stop_reason=p.plan.stop_reason,
        repaired=p.repaired,
        response_format=p.response_format,
        attempts=len(p.attempts),
        failed_attempts=[
            _failed(a) for a in p.attempts if not a.get("ok") and a.get("kind") != "refused_format"
        ],
    )


def _failed(attempt: dict[str, Any]) -> ev.FailedAttempt:
    """What a ``decision`` event shows of a failed provider attempt."""
    return ev.FailedAttempt(
        provider=attempt.get("provider"),
        model=attempt.get("model"),
        url=attempt.get("url"),
        kind=attempt.get("kind"),
        status=attempt.get("status"),
        error=attempt.get("error"),
    )
