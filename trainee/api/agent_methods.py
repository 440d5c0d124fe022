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

from trainee.api import resolve
from trainee.api.context import CallContext
from trainee.api.methods import registry
from trainee.errors import InvalidParams, InvalidState, NotFound
from trainee.ids import parse_session
from trainee.policies.external import ExternalPolicy
from trainee.research.decision import MAX_PLAN_TEXT, DecisionPlan
from trainee.spec import wire as w
from trainee.states import ROUND_FINISHED, SessionStatus

WAIT_LIMIT_SEC = 24 * 3600


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
