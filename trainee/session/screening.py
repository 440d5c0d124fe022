"""``run.screen`` for one session: candidates tried at low budgets, the best promoted.

Once the baseline (and ``run.noise``'s repeats) ran at the full budget, the runner hands
the session to :class:`Screening`: up to ``run.parallel`` rounds run at once, and each
time a slot is free the next round is decided on the spot (asynchronous successive
halving, :mod:`trainee.research.screen`): a promotion of the best round of a rung when
the rung has results enough, else a new candidate from the policy at the first rung. A
round's command gets its rung's budget as the value of the budget argument
(trainee/launch/rungs.py); a promoted round also gets ``run.screen.resume`` with the folders
of the round it continues from, or runs again from the start without it. Everything is
read back from the store before each choice, so a resumed session carries on where it
was (a restarted daemon re-adopts the running rounds first).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import anyio
import msgspec
from anyio.abc import TaskGroup

from trainee import events as ev
from trainee.policies.base import Policy, Proposal
from trainee.research.screen import Promotion, RungResult, next_promotion, rung_label, told_status
from trainee.research.state import RoundSummary
from trainee.session.inputs import counted_rounds, round_summary
from trainee.session.round import RoundRun
from trainee.spec import ProjectSpec, TunableSpec
from trainee.spec.files import ScreenSpec
from trainee.states import ROUND_FINISHED, RoundStatus, StopReason
from trainee.store.records import RoundRecord
from trainee.store.screen_report import ScreenView

if TYPE_CHECKING:
    from trainee.research.state import ResearchState
    from trainee.session.runner import Ended, SessionRunner

__all__ = ["Screening", "rung_fields", "rung_results", "rungs_of", "screen_view", "told"]

log = logging.getLogger("trainee.session")


def rung_fields(spec: ProjectSpec | None, rung: int | None = None) -> dict[str, Any]:
    """A round's ``rung`` and ``budget`` (the top rung unless ``rung`` is given); none
    without ``run.screen``."""
    screen = spec.run.screen if spec is not None else None
    if screen is None:
        return {}
    at = len(screen.rungs) if rung is None else rung
    return {"rung": at, "budget": float(screen.rungs[at - 1])}


def screen_view(spec: ProjectSpec | None) -> ScreenView | None:
    """What report.md shows of ``run.screen`` (None without it)."""
    screen = spec.run.screen if spec is not None else None
    if screen is None:
        return None
    return ScreenView(
        flag=screen.budget, rungs=tuple(screen.rungs), resumes=screen.resume is not None
    )


def rungs_of(spec: ProjectSpec) -> int:
    """How many rungs ``run.screen`` has (0 without it)."""
    return len(spec.run.screen.rungs) if spec.run.screen is not None else 0


def told(summary: RoundSummary) -> str:
    """The status a policy is told of a finished round (:func:`told_status`)."""
    return told_status(summary.status, summary.rung, summary.rungs)


class _Beside:
    """The session's policy asked for one new candidate while other rounds run: it sees
    them as running rounds (so it neither repeats one nor draws the same point twice
    from the same history), and answers one plan however many slots are asked for."""

    def __init__(self, policy: Policy, running: list[RoundSummary]) -> None:
        self.policy = policy
        self.name = policy.name
        self.running = running

    async def propose(
        self, state: ResearchState, tunables: Sequence[TunableSpec], baseline: Mapping[str, Any]
    ) -> Proposal:
        view = msgspec.structs.replace(state, rounds=[*state.rounds, *self.running])
        return await self.policy.propose(view, tunables, baseline)

    async def propose_batch(
        self,
        state: ResearchState,
        tunables: Sequence[TunableSpec],
        baseline: Mapping[str, Any],
        k: int,
    ) -> list[Proposal]:
        return [await self.propose(state, tunables, baseline)]

    def observe(self, params: Mapping[str, Any], metric: float | None, status: str) -> None:
        self.policy.observe(params, metric, status)


def rung_results(rounds: list[RoundRecord], rungs: int) -> list[RungResult]:
    """The finished rounds of the rungs below the top (not the stopped ones), and
    whether each was promoted already."""
    promoted = {r.promoted_from for r in rounds if r.promoted_from is not None}
    return [
        RungResult(
            round=r.index,
            rung=r.rung,
            metric=r.primary_metric if r.status == RoundStatus.COMPLETED else None,
            promoted=r.index in promoted,
        )
        for r in rounds
        if 0 < r.rung < rungs and r.status in ROUND_FINISHED and r.status != RoundStatus.STOPPED
    ]


class Screening:
    """The rest of one session under ``run.screen``: rounds decided one free slot at a
    time (a promotion first, else a new candidate), up to ``run.parallel`` at once."""

    def __init__(self, runner: SessionRunner, spec: ProjectSpec, policy: Policy) -> None:
        assert spec.run.screen is not None
        self.runner = runner
        self.spec = spec
        self.screen: ScreenSpec = spec.run.screen
        self.policy = policy
        self.running: set[int] = set()
        self.errors: list[BaseException] = []

    async def run(self) -> Ended:
        """Until the session ends: why it does (a stop, the budget of rounds or time, the
        policy, a missing metric); a failed decision or supervision is raised once the
        running rounds have ended."""
        runner = self.runner
        send, receive = anyio.create_memory_object_stream[RoundSummary | None](
            max_buffer_size=math.inf
        )
        ended: Ended | None = None
        async with anyio.create_task_group() as tg:
            while True:
                while ended is None and len(self.running) < self.spec.run.parallel:
                    try:
                        ended, launched = await self._next(tg, send.send)
                    except Exception as exc:
                        # a decision that failed (the provider, an invalid plan): nothing
                        # more is launched, the running rounds end as they would, then the
                        # error ends the session (never rounds left running unwatched)
                        self.errors.append(exc)
                        ended, launched = (StopReason.ERROR, None), False
                    if not launched:
                        break
                if not self.running:
                    break
                summary = await receive.receive()
                if summary is None:
                    continue  # a round's supervision failed: the stop is requested
                self.running.discard(summary.index)
                runner._observe(self.policy, summary)
                if summary.status == RoundStatus.COMPLETED_WITHOUT_METRICS and ended is None:
                    ended = (StopReason.REQUIRED_METRIC_MISSING, None)
        if self.errors:
            raise self.errors[0]
        if ended is None:
            ended = (runner.control.stop_reason, None)
        return ended

    async def _next(
        self, tg: TaskGroup, send: Callable[[RoundSummary | None], Awaitable[None]]
    ) -> tuple[Ended | None, bool]:
        """Launch the next round when the session may go on: (why it ends, launched)."""
        runner, spec = self.runner, self.spec
        if runner.control.stop_requested.is_set():
            return (runner.control.stop_reason, None), False
        done = await runner.store.list_rounds(runner.record.index)
        if counted_rounds(done) + len(self.running) >= runner.record.max_rounds:
            # the rounds still running use up the rest; the session ends once they have
            return ((StopReason.MAX_ROUNDS, None) if not self.running else None), False
        index = max((r.index for r in done), default=0) + 1
        reason = runner._stop_check(spec, done, index)
        if reason:
            return (reason, None), False
        step = max((r.batch for r in done), default=0) + 1
        promotion = next_promotion(
            self.screen.rungs,
            self.screen.eta,
            rung_results(done, len(self.screen.rungs)),
            runner.state.goal if runner.state is not None else "min",
            metric_name=(runner.state.primary_metric if runner.state else None) or "metric",
        )
        if promotion is not None:
            rec = await self._promote(done, promotion, index, step)
        else:
            running = [
                msgspec.structs.replace(round_summary(r), status=RoundStatus.RUNNING)
                for r in done
                if r.index in self.running
            ]
            beside = _Beside(self.policy, running)
            plans = await runner._decided_plans(beside, spec, done, index, step)
            if isinstance(plans, tuple):
                return plans, False
            (p, params), *_ = plans
            rec = await runner._create_round(
                index, params, runner._baseline_params, p, batch=step, rung=rung_fields(spec, 1)
            )
        self._start(tg, rec, send)
        return None, True

    async def _promote(
        self, done: list[RoundRecord], promotion: Promotion, index: int, step: int
    ) -> RoundRecord:
        runner = self.runner
        source = next(r for r in done if r.index == promotion.round)
        how = (
            f"resumed from its checkpoint ({self.screen.resume.flag})"
            if self.screen.resume is not None
            else "run again from the start"
        )
        label = rung_label(promotion.rung, self.screen.rungs, self.screen.budget)
        hypothesis = f"round {source.index} {promotion.reason}; at {label}, {how}"
        rec = await runner.store.upsert_round(
            RoundRecord(
                session=runner.record.index,
                index=index,
                status=RoundStatus.PENDING,
                params=dict(source.params),
                diff=dict(source.diff),
                hypothesis=hypothesis,
                expected=source.expected,
                backend=runner.backend.name if runner.backend is not None else "local",
                batch=step,
                promoted_from=source.index,
                **rung_fields(self.spec, promotion.rung),
            )
        )
        log.info("%s round %d: %s", runner.record.id, index, hypothesis)
        runner.emit(
            ev.RoundPromoted(
                round=index,
                from_round=source.index,
                rung=promotion.rung,
                budget=promotion.budget,
                reason=promotion.reason,
            )
        )
        return rec

    def _start(
        self,
        tg: TaskGroup,
        rec: RoundRecord,
        send: Callable[[RoundSummary | None], Awaitable[None]],
    ) -> None:
        runner = self.runner
        run = RoundRun(runner._round_context(), self.spec, rec).run
        self.running.add(rec.index)

        async def one() -> None:
            try:
                summary = await run()
            except anyio.get_cancelled_exc_class():
                raise
            except Exception as exc:
                # the others are stopped, not left running unwatched; raised at the end
                self.errors.append(exc)
                self.running.discard(rec.index)
                runner.control.request_stop(StopReason.ERROR)
                await send(None)
                return
            await send(summary)

        tg.start_soon(one)
