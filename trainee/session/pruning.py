"""Ending a running round early: ``run.prune``'s rules on its points, or an agent's request.

Every round has one :class:`EarlyEnd` while it runs (trainee/session/round.py): the
first decision to end it (a prune rule's, or an agent's through ``round_prune``) wins,
and :meth:`EarlyEnd.stop_when_requested`, run beside the round, stops it through the
usual stop path (SIGTERM, then the grace period, so the job can save a checkpoint); the
round is recorded as ``pruned`` with ``decision.error``. The runner makes one
:class:`RoundPruning` per watched round (none for the baseline, or without
``run.prune``) and feeds it every batch of metric points. The rules themselves are pure
(:mod:`trainee.research.prune`).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

import anyio

from trainee.errors import InvalidState, TraineeError
from trainee.metrics.extract import MetricPoint
from trainee.research.prune import Finished, PruneDecision, decide, step_of
from trainee.spec import ProjectSpec
from trainee.spec.files import PruneSpec
from trainee.spec.primary import primary_metric
from trainee.states import RoundStatus
from trainee.store.db import Store
from trainee.store.records import RoundRecord

__all__ = ["AGENT_RULE", "EarlyEnd", "RoundPruning", "agent_decision", "request_end"]

log = logging.getLogger("trainee.session")

STOP_ATTEMPTS = 5
AGENT_RULE = "agent"
"""``PruneDecision.rule`` of a round an agent ended early (``round_prune``)."""


def agent_decision(reason: str) -> PruneDecision:
    """An agent's request to end a round early: ``pruned: by the agent: <reason>``."""
    return PruneDecision(
        rule=AGENT_RULE, metric="", step=None, value=None, reason=f"by the agent: {reason}"
    )


class EarlyEnd:
    """How one running round is ended early: the first :meth:`request` wins."""

    def __init__(self) -> None:
        self.decision: PruneDecision | None = None
        self.requested = anyio.Event()

    def request(self, decision: PruneDecision) -> bool:
        """End the round for ``decision``; False when it is already ending early."""
        if self.decision is not None:
            return False
        self.decision = decision
        self.requested.set()
        return True

    async def stop_when_requested(self, stop: Callable[[], Awaitable[None]], what: str) -> None:
        """Wait for a request, then stop the round with ``stop`` (the backend's cancel)."""
        await self.requested.wait()
        assert self.decision is not None
        log.info("%s: %s", what, self.decision.error)
        # a cluster that does not answer at once: try again (wait() tells how it ended)
        for attempt in range(STOP_ATTEMPTS):
            try:
                await stop()
                return
            except TraineeError as exc:
                log.warning("%s: stopping it failed (%s); trying again", what, exc.message)
                await anyio.sleep(2.0 * (attempt + 1))


def request_end(
    rec: RoundRecord,
    session: str,
    spec: ProjectSpec | None,
    early: EarlyEnd | None,
    reason: str,
    *,
    stopping: bool,
) -> None:
    """End round ``rec`` of ``session`` early for an agent (``round_prune``): stopped
    through the usual stop path by its watch, it ends ``pruned`` with ``pruned: by the
    agent: <reason>``. InvalidState, changing nothing, for the baseline (every round is
    compared with it) and its runs on other seeds (``run.noise``: they measure the noise
    floor), a round that is not running (``early``: its early end while it is run, None
    when it is not watched here), a session ``stopping``, a round already ending early."""
    what = f"round {rec.index} of {session}"
    data: dict[str, Any] = {"field": "round", "round": rec.index, "session": session}
    if not rec.diff:
        raise InvalidState(
            f"{what} is the baseline: every round is compared with it, so it cannot be "
            "ended early (loop_stop stops the whole session)",
            {**data, "reason": "baseline"},
        )
    noise = spec.run.noise if spec is not None else None
    if noise is not None and set(rec.diff) <= {noise.seed}:
        raise InvalidState(
            f"{what} runs the baseline's configuration on another '{noise.seed}' "
            "(run.noise): it measures the noise floor, so it cannot be ended early",
            {**data, "reason": "noise repeat"},
        )
    if rec.status != RoundStatus.RUNNING:
        how = "has not started yet" if rec.status == RoundStatus.PENDING else f"is {rec.status}"
        raise InvalidState(
            f"{what} {how}: only a running round can be ended early",
            {**data, "status": rec.status},
        )
    if stopping:
        raise InvalidState(f"{session} is stopping: {what} ends with it", data)
    if early is None:
        raise InvalidState(
            f"{what} is not watched by this daemon right now (it is being re-adopted or "
            "has just ended); ask again",
            {**data, "reason": "not watched"},
        )
    if not early.request(agent_decision(reason)):
        assert early.decision is not None
        raise InvalidState(
            f"{what} is already ending early ({early.decision.error})",
            {**data, "reason": "already ending"},
        )
    log.info("%s: %s asked to end early: %s", session, what, reason)


class RoundPruning:
    """The prune rules watching one running round; ``decision`` once one prunes it."""

    def __init__(
        self,
        spec: PruneSpec,
        *,
        primary: str,
        goals: Mapping[str, str],
        finished: list[Finished],
        early: EarlyEnd | None = None,
    ) -> None:
        self.spec = spec
        self.primary = primary
        self.goals = dict(goals)
        self.finished = finished
        self.running: dict[str, list[tuple[int, float]]] = {}
        self.decision: PruneDecision | None = None
        """The rule's decision that pruned the round (once)."""
        self.early = early if early is not None else EarlyEnd()
        """The round's early end, which a rule's decision requests."""
        self.metrics = {rule.metric or primary for rule in spec.rules}
        """The metrics the rules read: points of others never call the rules."""
        self._nonfinite: set[str] = set()

    @property
    def requested(self) -> anyio.Event:
        """Set once the round is to end early (by a rule, or by an agent)."""
        return self.early.requested

    @classmethod
    async def start(
        cls,
        store: Store,
        spec: ProjectSpec,
        session: int,
        rec: RoundRecord,
        early: EarlyEnd | None = None,
    ) -> RoundPruning | None:
        """The pruning of round ``rec``, with the completed rounds' series from the store;
        None without ``run.prune``, for the baseline (nothing to compare it with) and for
        its runs on other seeds (``run.noise``: they measure the noise floor)."""
        prune, noise = spec.run.prune, spec.run.noise
        if prune is None or not rec.diff:
            return None
        if noise is not None and set(rec.diff) <= {noise.seed}:
            return None
        rounds = await store.list_rounds(session)
        done = {
            r.index for r in rounds if r.status == RoundStatus.COMPLETED and r.index != rec.index
        }
        by_round: dict[int, dict[str, list[tuple[int, float]]]] = {i: {} for i in done}
        if done:
            for p in await store.points(session):
                if p.round in by_round:
                    by_round[p.round].setdefault(p.name, []).append(
                        (step_of(p.step, p.seq, prune.step), p.value)
                    )
        specs = spec.metrics.specs
        return cls(
            prune,
            primary=primary_metric(specs, (r.finals for r in rounds if r.index in done)).name,
            goals={m.name: str(m.goal) for m in specs},
            finished=[Finished(i, s) for i, s in sorted(by_round.items())],
            early=early,
        )

    def feed(
        self, points: Iterable[MetricPoint], nonfinite: Mapping[str, str]
    ) -> PruneDecision | None:
        """Add the new points; the decision when a rule prunes the round now (once; never
        once the round is ending early for another reason)."""
        if self.decision is not None or self.early.decision is not None:
            return None
        changed = False
        for p in points:
            if p.name in self.metrics:
                self.running.setdefault(p.name, []).append(
                    (step_of(p.step, p.seq, self.spec.step), p.value)
                )
                changed = True
        bad = set(nonfinite) & self.metrics
        if not changed and bad <= self._nonfinite:
            return None  # nothing new for the rules
        self._nonfinite |= bad
        decision = decide(
            self.spec,
            primary=self.primary,
            goals=self.goals,
            running=self.running,
            finished=self.finished,
            nonfinite=nonfinite,
        )
        if decision is not None:
            self.decision = decision
            self.early.request(decision)
        return decision
