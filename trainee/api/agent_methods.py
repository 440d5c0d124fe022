"""Stage interfaces for an agent driving the loop: plan, run, result, journal.

In the spirit of AutoTrainess's iteration_plan -> train -> eval -> log: a
session started with ``policy: external`` waits for ``plan_submit`` (or
``round_run``) at each decision, and the agent reads the outcome with
``round_result``. Plans are validated exactly like an LLM's.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import anyio
import msgspec
from msgspec import Meta

from trainee import events as ev
from trainee.api import resolve
from trainee.api.context import CallContext
from trainee.api.methods import registry
from trainee.errors import InvalidParams, InvalidState, NotFound
from trainee.ids import parse_session
from trainee.policies import AGENT_POLICIES
from trainee.policies.external import ExternalPolicy
from trainee.research.decision import MAX_PLAN_TEXT, DecisionPlan
from trainee.research.prune import pruned_reason
from trainee.session.pruning import request_end
from trainee.spec import wire as w
from trainee.states import ROUND_FINISHED, RoundStatus, SessionStatus

WAIT_LIMIT_SEC = 24 * 3600
MAX_PRUNE_REASON = 500
"""Characters of a ``round_prune`` reason, at most: it is one line of the report."""
PRUNE_WAIT_SEC = 10.0


PlanText = Annotated[str, Meta(min_length=1, max_length=MAX_PLAN_TEXT)]


class PlanParams(w.Wire, kw_only=True):
    """A structured iteration plan for the next round of an external-policy session."""

    session: w.SessionRef
    project_root: str | None = None
    hypothesis: PlanText
    change_summary: PlanText
    params: dict[str, Any] = msgspec.field(default_factory=dict)
    expected: PlanText
    stop: bool = False
    stop_reason: Annotated[str, Meta(max_length=MAX_PLAN_TEXT)] = ""
    agent: Annotated[str, Meta(max_length=200)] = ""


class PlanResult(w.Wire):
    session: str
    round: int
    accepted: bool


class RoundRunParams(PlanParams, kw_only=True):
    wait: bool = True
    timeout_sec: Annotated[float, Meta(gt=0)] | None = None


class RoundResultParams(w.Wire):
    session: w.SessionRef
    round: w.RoundRef
    project_root: str | None = None
    wait: bool = False
    timeout_sec: Annotated[float, Meta(gt=0)] | None = None


class RoundResult(w.Wire):
    session: str
    round: int
    status: str
    finished: bool
    params: dict[str, Any]
    diff: dict[str, Any]
    hypothesis: str
    expected: str
    metric: float | None
    metrics: dict[str, float]
    verdict: str | None
    verdict_reason: str
    failure_tail: list[str]
    log_path: str
    session_status: str
    stop_reason: str | None


def _external(ctx: CallContext, root: str | None, session: str) -> tuple[str, ExternalPolicy]:
    running = resolve.running_session(ctx, session, root)
    policy = running.runner.policy
    if not isinstance(policy, ExternalPolicy):
        raise InvalidState(
            f"{session} does not take plans from outside: its policy is "
            f"{running.runner.record.policy!r} (start it with policy 'external')",
            {"session": session, "policy": running.runner.record.policy},
        )
    return running.runner.record.project_root, policy


async def _submit(ctx: CallContext, params: PlanParams) -> tuple[str, PlanResult]:
    root, policy = _external(ctx, params.project_root, params.session)
    # The plan may arrive just before the session reaches its next decision.
    with anyio.move_on_after(10):
        while not policy.waiting:
            await anyio.sleep(0.02)
    plan = DecisionPlan(
        hypothesis=params.hypothesis,
        change_summary=params.change_summary,
        params=params.params,
        expected=params.expected,
        stop=params.stop,
        stop_reason=params.stop_reason,
    )
    store = await resolve.project_store(ctx, root)
    assert store is not None
    index = len(await store.list_rounds(parse_session(params.session))) + 1
    policy.submit(plan, agent=params.agent)
    return root, PlanResult(session=params.session, round=index, accepted=True)


@registry.method(PlanParams, PlanResult)
async def plan_submit(ctx: CallContext, params: PlanParams) -> PlanResult:
    """Submit the next round's plan to a session waiting with ``policy: external``.

    The plan (hypothesis, change_summary, params, expected outcome, stop) is
    validated exactly like an LLM decision: only tuning.yaml names, right
    types, inside bounds or choices, not a set already tried. An invalid plan
    is refused with every problem listed, and the session keeps waiting.
    Returns the round the plan will run as.
    """
    _, result = await _submit(ctx, params)
    return result


async def _result(
    ctx: CallContext, root: str | None, session: str, index: int, wait: bool, timeout: float | None
) -> RoundResult:
    found = await resolve.resolve_session(ctx, session, root)
    store, root = found.store, found.root
    number = found.record.index
    bus = ctx.services.bus
    sub, _, _ = bus.subscribe(session=session, kinds=["round.finished", "session.finished"])
    try:
        deadline = time.monotonic() + (timeout or WAIT_LIMIT_SEC)
        while True:
            rec = await store.get_session(number)
            rounds = {r.index: r for r in await store.list_rounds(number)}
            rnd = rounds.get(index)
            done = rnd is not None and rnd.status in ROUND_FINISHED
            over = rec.status != SessionStatus.RUNNING
            if done or over or not wait:
                break
            with anyio.move_on_after(max(0.0, deadline - time.monotonic())) as scope:
                async for _event in sub:
                    break
            if scope.cancelled_caught:
                break
    finally:
        sub.close()
    if rnd is None:
        raise NotFound(
            f"{session} has no round {index} yet"
            + (f" (it ended: {rec.stop_reason})" if over else ""),
            {"session": session, "round": index, "session_status": rec.status},
        )
    layout = found.layout.round(index)
    return RoundResult(
        session=session,
        round=index,
        status=rnd.status,
        finished=rnd.status in ROUND_FINISHED,
        params=rnd.params,
        diff=rnd.diff,
        hypothesis=rnd.hypothesis,
        expected=rnd.expected,
        metric=rnd.primary_metric,
        metrics=rnd.finals,
        verdict=rnd.verdict,
        verdict_reason=rnd.verdict_reason,
        failure_tail=rnd.failure_tail,
        log_path=str(layout.log),
        session_status=rec.status,
        stop_reason=rec.stop_reason,
    )


@registry.method(RoundRunParams, RoundResult)
async def round_run(ctx: CallContext, params: RoundRunParams) -> RoundResult:
    """Run one round with a plan: submit it and, with ``wait`` (default), return its result.

    Without ``wait``, returns at once with the round's current state (a handle:
    session and round) to poll with ``round_result``.
    """
    root, accepted = await _submit(ctx, params)
    wait = params.wait and not params.stop
    return await _result(ctx, root, params.session, accepted.round, wait, params.timeout_sec)


@registry.method(RoundResultParams, RoundResult)
async def round_result(ctx: CallContext, params: RoundResultParams) -> RoundResult:
    """A round's outcome: status, metrics, and the judgement against its plan.

    ``verdict`` is kept (new best), neutral or rejected, with the reason and
    whether the plan's expected outcome held. ``wait`` blocks until the round
    (or the session) ends.
    """
    return await _result(
        ctx, params.project_root, params.session, params.round, params.wait, params.timeout_sec
    )


class RoundPruneParams(w.Wire, kw_only=True):
    session: w.SessionRef
    round: w.RoundRef
    reason: Annotated[str, Meta(min_length=1, max_length=MAX_PRUNE_REASON)]
    """Why the round is ended early, in one line (whitespace runs become one space)."""
    project_root: str | None = None
    wait_sec: Annotated[float, Meta(ge=0, le=600)] = PRUNE_WAIT_SEC
    """How long to wait for the round to end (SIGTERM, then its grace) before answering."""


class RoundPruneResult(w.Wire):
    """``ended``: the round has ended by the time of the answer (``status``, ``error``:
    ``pruned: by the agent: <reason>`` once pruned); else it ends within its grace."""

    session: str
    round: int
    status: str
    ended: bool
    error: str
    message: str


@registry.method(RoundPruneParams, RoundPruneResult)
async def round_prune(ctx: CallContext, params: RoundPruneParams) -> RoundPruneResult:
    """End a running round early, with a reason, in a session an agent steers.

    For sessions of the ``external`` and ``hybrid`` policies (the others decide alone:
    their rounds are ended by ``run.prune``'s rules, the session by ``loop_stop``). The
    round is stopped the way a prune rule stops one: SIGTERM, then
    ``advanced.stop_grace_sec`` for the job to save a checkpoint, then SIGKILL. It ends
    ``pruned`` with ``pruned: by the agent: <reason>`` as its error text (in
    ``loop_get``, ``runs_get``, ``round_result``'s verdict, report.md's pruned rounds
    and the page), uses up one of ``max_rounds``, is rejected with that reason in the
    research state the LLM reads and is told to TPE as a pruned trial. Refused, changing
    nothing: an unknown round, one not running, the baseline (every round is compared
    with it) and its runs on other seeds (``run.noise``), a blank reason. Waits up to
    ``wait_sec`` for the round to end.
    """
    reason = " ".join(params.reason.split())
    if not reason:
        raise InvalidParams(
            "round_prune: reason is blank: say in one line why the round ends early",
            {"method": "round_prune", "field": "reason", "reason": "blank"},
        )
    found = await resolve.resolve_round(ctx, params.session, params.round, params.project_root)
    sid, index = found.record.id, params.round
    try:
        running = resolve.running_session(ctx, sid, found.root)
    except NotFound:
        raise InvalidState(
            f"{sid} is not running ({found.record.status}): only a running round can be "
            "ended early",
            {"field": "session", "session": sid, "status": found.record.status},
        ) from None
    runner = running.runner
    if runner.record.policy not in AGENT_POLICIES:
        raise InvalidState(
            f"{sid} runs the {runner.record.policy!r} policy, which decides alone: only "
            f"sessions of {' and '.join(sorted(AGENT_POLICIES))} end rounds on request "
            "(run.prune's rules end the others' rounds; loop_stop stops the session)",
            {"field": "session", "session": sid, "policy": runner.record.policy},
        )
    sub, _, _ = ctx.services.bus.subscribe(session=sid, kinds=["round.finished"])
    try:
        rec = await found.store.get_round(found.record.index, index)
        stopping = running.control.stop_requested.is_set()
        request_end(rec, sid, runner.spec, runner.early_ends.get(index), reason, stopping=stopping)
        with anyio.move_on_after(params.wait_sec):
            async for event in sub:
                if isinstance(event.data, ev.RoundFinished) and event.data.round == index:
                    break
    finally:
        sub.close()
    rec = await found.store.get_round(found.record.index, index)
    ended = rec.status in ROUND_FINISHED
    error = pruned_reason(rec.warnings) if rec.status == RoundStatus.PRUNED else ""
    if not ended:
        message = f"round {index} of {sid} is ending (SIGTERM sent; it has its grace to save)"
    elif rec.status == RoundStatus.PRUNED:
        message = f"round {index} of {sid} ended early: {error}"
    else:
        message = f"round {index} of {sid} ended {rec.status} before the stop reached it"
    return RoundPruneResult(
        session=sid, round=index, status=rec.status, ended=ended, error=error, message=message
    )


class JournalAppendParams(w.Wire, kw_only=True):
    project_root: str | None = None
    text: Annotated[str, Meta(min_length=1, max_length=64 * 1024)]
    session: w.SessionRef | None = None


class JournalResult(w.Wire):
    path: str
    notes: str
    sessions: list[dict[str, Any]]


def _notes_path(root: str) -> Path:
    return Path(root) / ".trainee" / "notes.md"


@registry.method(JournalAppendParams, JournalResult)
async def journal_append(ctx: CallContext, params: JournalAppendParams) -> JournalResult:
    """Append a note to the project's experiment memory (.trainee/notes.md).

    What was learned, what to try or avoid next: notes outlive sessions and go,
    with past sessions' best params and rejected changes, into later decision
    prompts and .trainee/journal.md.
    """
    root = resolve.project_root(ctx, params.project_root)
    path = _notes_path(root)
    if not path.parent.is_dir():
        raise InvalidParams(
            f"{path.parent} does not exist: run trainee init first", {"field": "project_root"}
        )
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
    head = f"\n## Note {stamp} UTC" + (f" ({params.session})" if params.session else "") + "\n\n"

    def write() -> None:
        with open(path, "a", encoding="utf-8") as fh:
            if fh.tell() == 0:
                fh.write("# Notes\n")
            fh.write(head + params.text.rstrip() + "\n")

    await anyio.to_thread.run_sync(write)
    return await journal_get(ctx, w.ProjectRootParams(project_root=root))


@registry.method(w.ProjectRootParams, JournalResult)
async def journal_get(ctx: CallContext, params: w.ProjectRootParams) -> JournalResult:
    """Read the experiment journal: notes, and past sessions' best params and rejected changes."""
    root = resolve.project_root(ctx, params.project_root)
    path = _notes_path(root)
    notes = path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""
    sessions: list[dict[str, Any]] = []
    store = await resolve.project_store(ctx, root, required=False)
    if store is not None:
        sessions = await store.journal()
    return JournalResult(path=str(path), notes=notes, sessions=sessions)
