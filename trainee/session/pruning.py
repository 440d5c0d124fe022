"""``run.prune`` for one running round: its points as they arrive -> the prune rules.

The runner makes one :class:`RoundPruning` per watched round (none for the baseline,
or without ``run.prune``), feeds it every batch of metric points, and runs
:meth:`RoundPruning.stop_when_pruned` beside the round: on the first rule that prunes,
the round is stopped through the usual stop path (SIGTERM, then the grace period, so
the job can save a checkpoint), and recorded as ``pruned`` with ``decision.error``.
The rules themselves are pure (:mod:`trainee.research.prune`).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping

import anyio

from trainee.errors import TraineeError
from trainee.metrics.extract import MetricPoint
from trainee.research.prune import Finished, PruneDecision, decide, step_of
from trainee.spec import ProjectSpec
from trainee.spec.files import PruneSpec
from trainee.spec.primary import primary_metric
from trainee.states import RoundStatus
from trainee.store.db import Store
from trainee.store.records import RoundRecord

__all__ = ["RoundPruning"]

log = logging.getLogger("trainee.session")

STOP_ATTEMPTS = 5


class RoundPruning:
    """The prune rules watching one running round; ``decision`` once one prunes it."""

    def __init__(
        self,
        spec: PruneSpec,
        *,
        primary: str,
        goals: Mapping[str, str],
        finished: list[Finished],
    ) -> None:
        self.spec = spec
        self.primary = primary
        self.goals = dict(goals)
        self.finished = finished
        self.running: dict[str, list[tuple[int, float]]] = {}
        self.decision: PruneDecision | None = None
        self.requested = anyio.Event()
        self.metrics = {rule.metric or primary for rule in spec.rules}
        """The metrics the rules read: points of others never call the rules."""
        self._nonfinite: set[str] = set()

    @classmethod
    async def start(
        cls, store: Store, spec: ProjectSpec, session: int, rec: RoundRecord
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
            primary=primary_metric(specs).name,
            goals={m.name: str(m.goal) for m in specs},
            finished=[Finished(i, s) for i, s in sorted(by_round.items())],
        )

    def feed(
        self, points: Iterable[MetricPoint], nonfinite: Mapping[str, str]
    ) -> PruneDecision | None:
        """Add the new points; the decision when a rule prunes the round now (once)."""
        if self.decision is not None:
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
            self.requested.set()
        return decision

    async def stop_when_pruned(self, stop: Callable[[], Awaitable[None]], what: str) -> None:
        """Wait for a prune, then stop the round with ``stop`` (the backend's cancel)."""
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
