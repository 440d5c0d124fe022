"""One session: rounds chained until a stop condition, nothing lost, nothing unchecked applied.

step: stop check -> decide (baseline first) -> record the rounds -> run them at once
(trainee/session/round.py: launch under the monitor, watch, judge) -> research state
-> ledgers. Every state change is written to the store before the next step, so a
daemon killed at any point resumes the session: a round whose monitor survived is
re-adopted, one whose monitor died is re-run with its recorded decision.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import msgspec

from trainee import events as ev
from trainee.errors import InvalidDecision, ProviderError, TraineeError
from trainee.launch.backends import Backend, make_backend
from trainee.launch.layout import ProjectLayout, SessionLayout
from trainee.launch.sandbox import check_bwrap
from trainee.llm.settings import load_settings
from trainee.metrics.tb_source import require_tensorboard
from trainee.monitor import stopfile
from trainee.policies.base import Policy, Proposal, full_params, propose_batch
from trainee.research.decision import params_diff
from trainee.research.state import (
    ResearchState,
    RoundSummary,
    noise_repeats,
    record_round,
    state_to_json,
)
from trainee.session import screening
from trainee.session.bus import EventBus
from trainee.session.decisions import decision_event, decision_record
from trainee.session.hints import failure_hint
from trainee.session.inputs import (
    budgets_of,
    counted_rounds,
    decision_budget,
    decision_slots,
    observe_history,
    rebuild_state,
)
from trainee.session.pruning import EarlyEnd
from trainee.session.round import RoundContext, RoundRun
from trainee.spec import ProjectSpec, SecurityMode, load_project
from trainee.states import (
    ROUND_FINISHED,
    SESSION_STATUS_OF_STOP,
    RoundStatus,
    SessionStatus,
    StopReason,
)
from trainee.store.db import Store
from trainee.store.export import write_ledgers, write_report, write_research_state
from trainee.store.records import RoundRecord, SessionRecord

log = logging.getLogger("trainee.session")

_NO_BASELINE = {RoundStatus.STOPPED, RoundStatus.FAILED, RoundStatus.TIMED_OUT}
"""Statuses of a baseline round that leave the session without a baseline."""
_BASELINE_FAILED = (RoundStatus.FAILED, RoundStatus.TIMED_OUT)
EVENT_FLUSH_INTERVAL = 0.25
BASELINE_TAIL_LINES = 20
"""Lines of a failed baseline's log shown when the session ends because of it."""
MAX_UNSAVED_EVENTS = 100_000
"""Events held for the store while it does not answer, at most."""

Ended = tuple[StopReason, str | None]
"""Why a session ends, and its error text."""
Plans = list[tuple[Proposal | None, dict[str, Any]]]
"""One step's rounds: the proposal of each (None for the baseline) and its full params."""


@dataclass
class SessionControl:
    """What the outside can do to a running session."""

    stop_requested: anyio.Event = field(default_factory=anyio.Event)
    stop_reason: StopReason = StopReason.USER_STOP
    decision_scope: anyio.CancelScope | None = None
    stop_file: Path | None = None
    """The session's stop record (trainee.monitor.stopfile), written before anything else."""

    def request_stop(self, reason: StopReason = StopReason.USER_STOP) -> None:
        """Stop after cleaning up: the running round gets SIGTERM, a pending decision is dropped."""
        if not self.stop_requested.is_set():
            if self.stop_file is not None:
                stopfile.record(self.stop_file, reason)  # a monitor starting now sees it
            self.stop_reason = reason
            self.stop_requested.set()
        if self.decision_scope is not None:
            self.decision_scope.cancel()


class SessionRunner:
    """Drives one session to its end; safe to construct again after a daemon restart."""

    def __init__(
        self,
        *,
        store: Store,
        layout: ProjectLayout,
        record: SessionRecord,
        bus: EventBus,
        policy_factory: Callable[[ProjectSpec, SessionRecord, int], Awaitable[Policy]],
        control: SessionControl,
        env: Mapping[str, str] | None = None,
    ) -> None:
        # The job's environment: the stored one plus the secrets kept only in memory.
        self.env: dict[str, str] = dict(record.env if env is None else env)
        self.store = store
        self.layout = layout
        self.record = record
        self.bus = bus
        self.policy_factory = policy_factory
        self.control = control
        self.session_layout: SessionLayout = layout.session(record.index)
        self.spec: ProjectSpec | None = None
        self.state: ResearchState | None = None
        self._unsaved: list[ev.Event] = []
        self.policy: Policy | None = None
        self.backend: Backend | None = None
        self._outputs_lock = anyio.Lock()
        self._failure_tail: list[str] = []
        self.monitors: dict[int, int] = {}
        """Round index -> pid of its monitor, for the rounds being launched or watched."""
        self.early_ends: dict[int, EarlyEnd] = {}
        """Round index -> its early end, for the rounds being run (``round_prune``)."""
        self._stop_detail: str | None = None
        self._decision_ids: dict[int, int] = {}
        """round index -> the id of the decision that chose it (rounds.decision_id)"""
        self._baseline_params: dict[str, Any] = {}

    # -- events ----------------------------------------------------------------

    def emit(self, data: ev.SessionData) -> None:
        """Publish to live subscribers now; the store gets it with the next flush."""
        data.project = str(self.layout.project_root)
        self._unsaved.append(self.bus.publish(data, session=self.record.id))

    async def _flush_events(self) -> None:
        if self._unsaved:
            batch, self._unsaved = self._unsaved, []
            try:
                await self.store.append_events(batch)
            except TraineeError as exc:
                # kept for the next flush (a store locked for a while loses nothing), but
                # never more than MAX_UNSAVED_EVENTS: the oldest go first
                self._unsaved = (batch + self._unsaved)[-MAX_UNSAVED_EVENTS:]
                log.warning(
                    "%s: %d events not stored yet, trying again: %s",
                    self.record.id,
                    len(batch),
                    exc.message,
                )

    async def _flush_events_forever(self) -> None:
        while True:
            await anyio.sleep(EVENT_FLUSH_INTERVAL)
            await self._flush_events()

    # -- main ------------------------------------------------------------------

    async def run(self) -> SessionRecord:
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._flush_events_forever)
            try:
                record = await self._run_to_end()
            finally:
                with anyio.CancelScope(shield=True):
                    await self._flush_events()
                tg.cancel_scope.cancel()
        return record

    async def _run_to_end(self) -> SessionRecord:
        try:
            stop_reason, error = await self._run()
        except InvalidDecision as exc:
            stop_reason, error = StopReason.INVALID_DECISION, exc.message
        except ProviderError as exc:
            stop_reason, error = StopReason.PROVIDER_FAILED, exc.message
        except TraineeError as exc:
            stop_reason, error = StopReason.ERROR, exc.message
        except anyio.get_cancelled_exc_class():
            # Daemon shutdown: the session stays running in the store and resumes later.
            log.info(
                "%s: daemon stopping; the session resumes with the next daemon", self.record.id
            )
            raise
        except Exception as exc:
            log.exception("%s failed", self.record.id)
            stop_reason, error = StopReason.ERROR, f"{type(exc).__name__}: {exc}"
        return await self._finish(stop_reason, error)

    async def _run(self) -> Ended:
        """The step loop: rounds left by a previous daemon first, then step after step
        until one of them ends the session."""
        spec, policy, rounds = await self._prepare()
        ended = await self._resume_unfinished(spec, policy, rounds)
        while ended is None:
            ended = await self._step(spec, policy)
        return ended

    async def _prepare(self) -> tuple[ProjectSpec, Policy, list[RoundRecord]]:
        """The session's spec, backend, research state and policy (told the history)."""
        self.spec = await anyio.to_thread.run_sync(load_project, self.record.project_root)
        spec = self.spec
        self.backend = make_backend(spec.advanced.backend, self.env)
        if self.record.security_mode == SecurityMode.GUARDED and self.backend.name == "local":
            # cluster jobs check for bwrap on their node (the round fails there without it)
            await anyio.to_thread.run_sync(check_bwrap)
        require_tensorboard(spec.metrics.specs)
        rounds = await self.store.list_rounds(self.record.index)
        self.state = rebuild_state(spec, rounds)
        policy = await self.policy_factory(
            spec, self.record, len([r for r in rounds if r.index > 1])
        )
        self.policy = policy
        observe_history(policy, rounds, screening.rungs_of(spec))
        self._baseline_params = {t.name: t.baseline for t in spec.tunables}
        if not self.record.baseline_round:
            self.emit(
                ev.SessionStarted(max_rounds=self.record.max_rounds, policy=self.record.policy)
            )
        return spec, policy, rounds

    async def _resume_unfinished(
        self, spec: ProjectSpec, policy: Policy, rounds: list[RoundRecord]
    ) -> Ended | None:
        """Rounds left unfinished by a previous daemon (a whole step of parallel
        candidates at most): re-adopted or re-run, all at once."""
        unfinished = [r for r in rounds if r.status not in ROUND_FINISHED]
        if not unfinished:
            return None
        summaries = await self._run_batch(
            [RoundRun(self._round_context(), spec, r).resume for r in unfinished]
        )
        for summary in summaries:
            self._observe(policy, summary)
        if self.control.stop_requested.is_set():
            return self.control.stop_reason, None
        baselines = {r.index for r in unfinished if r.batch == 0 and not r.diff}
        return await self._step_ended(spec, summaries, baselines)

    async def _step(self, spec: ProjectSpec, policy: Policy) -> Ended | None:
        """One step: the stop check, the decision (or the baseline), its rounds run."""
        done = await self.store.list_rounds(self.record.index)
        index = (max((r.index for r in done), default=0)) + 1
        reason = self._stop_check(spec, done, index)
        if reason:
            return reason, None
        if self.control.stop_requested.is_set():
            return self.control.stop_reason, None
        # The baseline runs first, alone; again if the user stopped it before it finished
        # or if it failed (a failed session resumed after a fix starts from a baseline).
        step = 0
        plans: Plans = [(None, dict(self._baseline_params))]
        if any(not r.diff and r.status not in _NO_BASELINE for r in done):
            step = max((r.batch for r in done), default=0) + 1
            repeats = self._noise_repeats(spec, done, self._baseline_params)
            if repeats:  # run.noise: the baseline's configuration on other seeds first
                plans = [(None, p) for p in repeats]
            elif spec.run.screen is not None:  # cheap screening: one free slot at a time
                return await screening.Screening(self, spec, policy).run()
            else:
                decided = await self._decided_plans(policy, spec, done, index, step)
                if isinstance(decided, tuple):
                    return decided
                plans = decided
        summaries = await self._run_step(spec, policy, plans, index, step)
        return await self._step_ended(
            spec, summaries, {s.index for s in summaries} if step == 0 else set()
        )

    async def _decided_plans(
        self, policy: Policy, spec: ProjectSpec, done: list[RoundRecord], index: int, step: int
    ) -> Plans | Ended:
        """The policy's plans for the step (each announced), or why the session ends."""
        slots = decision_slots(spec, self.record, done)
        assert self.state is not None
        self.state = msgspec.structs.replace(
            self.state, budget=decision_budget(spec, self.record, done, index)
        )
        proposals = await self._decide(policy, spec, index, slots, self._baseline_params)
        if proposals is None or self.control.stop_requested.is_set():
            return self.control.stop_reason, None
        stop = next((p for p in proposals if p.plan.stop), None)
        if stop is not None:
            self._stop_detail = stop.plan.stop_reason or None
            return StopReason.POLICY_STOP, None
        plans: Plans = [(p, full_params(self._baseline_params, p.plan)) for p in proposals]
        for i, (p, params) in enumerate(plans):
            assert p is not None
            event = decision_event(index + i, p, params_diff(self._baseline_params, params))
            event.batch, event.batch_size = step, len(plans)
            self.emit(event)
        return plans

    async def _run_step(
        self, spec: ProjectSpec, policy: Policy, plans: Plans, index: int, step: int
    ) -> list[RoundSummary]:
        """The step's rounds recorded, then run at once; their summaries."""
        recs = [
            await self._create_round(index + i, params, self._baseline_params, p, batch=step)
            for i, (p, params) in enumerate(plans)
        ]
        if len(recs) > 1:
            self.emit(ev.BatchStarted(batch=step, rounds=[r.index for r in recs]))
        summaries = await self._run_batch(
            [RoundRun(self._round_context(), spec, r).run for r in recs]
        )
        for summary in summaries:
            self._observe(policy, summary)
        if len(recs) > 1:
            self.emit(
                ev.BatchFinished(
                    batch=step,
                    rounds=[s.index for s in summaries],
                    statuses=[RoundStatus(s.status) for s in summaries],
                )
            )
        return summaries

    async def _step_ended(
        self, spec: ProjectSpec, summaries: list[RoundSummary], baselines: set[int]
    ) -> Ended | None:
        """Whether the rounds just run end the session: a required metric missing, or
        the baseline (rounds ``baselines``) failed, with what went wrong and the fix."""
        if any(s.status == RoundStatus.COMPLETED_WITHOUT_METRICS for s in summaries):
            return StopReason.REQUIRED_METRIC_MISSING, None
        failed = await self._failed_baseline(spec, [s for s in summaries if s.index in baselines])
        if failed is not None:
            return StopReason.BASELINE_FAILED, failed
        return None

    async def _failed_baseline(
        self, spec: ProjectSpec, summaries: list[RoundSummary]
    ) -> str | None:
        """The session's error when the baseline among ``summaries`` failed or timed out
        (its status, the likely fix); None when it did not."""
        s = next((s for s in summaries if s.status in _BASELINE_FAILED), None)
        if s is None:
            return None
        rec = await self.store.get_round(self.record.index, s.index)
        how = str(s.status).replace("_", " ")  # failed, timed out
        if rec.signal:
            how += f" ({rec.signal})"
        elif rec.returncode is not None and s.status == RoundStatus.FAILED:
            how += f" (exit code {rec.returncode})"
        hint = failure_hint(
            spec,
            [*rec.warnings, *rec.failure_tail],
            status=s.status,
            returncode=rec.returncode,
            signal=rec.signal,
        )
        self._failure_tail = rec.failure_tail[-BASELINE_TAIL_LINES:]
        return f"the baseline (round {s.index}) {how}, so there is nothing to tune; {hint}"

    # -- rounds ------------------------------------------------------------------------

    async def _create_round(
        self,
        index: int,
        params: dict[str, Any],
        baseline: Mapping[str, Any],
        p: Proposal | None,
        *,
        batch: int = 0,
        rung: dict[str, Any] | None = None,
    ) -> RoundRecord:
        rec = RoundRecord(
            session=self.record.index,
            index=index,
            status=RoundStatus.PENDING,
            params=params,
            diff=params_diff(dict(baseline), params),
            decision_id=self._decision_ids.pop(index, None) if p is not None else None,
            hypothesis=p.plan.hypothesis if p else "baseline",
            expected=p.plan.expected if p else "",
            backend=self.backend.name if self.backend is not None else "local",
            batch=batch,
            **(screening.rung_fields(self.spec) if rung is None else rung),  # run.screen
        )
        return await self.store.upsert_round(rec)

    def _round_context(self) -> RoundContext:
        assert self.backend is not None
        return RoundContext(
            store=self.store,
            backend=self.backend,
            emit=self.emit,
            session=self.record.index,
            session_id=self.record.id,
            layout=self.layout,
            security_mode=self.record.security_mode,
            env=self.env,
            stop_requested=self.control.stop_requested,
            judge=self._judge,
            on_finished=self._round_finished,
            monitors=self.monitors,
            early_ends=self.early_ends,
        )

    def _judge(self, summary: RoundSummary) -> RoundSummary:
        """A finished round's verdict; the research state takes it in."""
        assert self.state is not None
        self.state, judged = record_round(self.state, summary)
        return judged

    async def _round_finished(self, judged: RoundSummary) -> int | None:
        """A round's final record is stored: the session's best and baseline rounds and
        the ledgers follow it. The best round now."""
        assert self.state is not None
        best = self.state.best.index if self.state.best else None
        baseline = self.state.baseline.index if self.state.baseline else None
        self.record = await self.store.update_session(
            self.record.index, best_round=best, baseline_round=baseline
        )
        await self._write_outputs()
        return best

    async def _run_batch(
        self, starts: list[Callable[[], Awaitable[RoundSummary]]]
    ) -> list[RoundSummary]:
        """Run rounds at once; their summaries in round order. When one fails to be
        supervised, the others are stopped (not left running unwatched) and its error
        is raised once they have ended."""
        if len(starts) == 1:
            return [await starts[0]()]
        results: dict[int, RoundSummary] = {}
        errors: list[BaseException] = []

        async def one(i: int, start: Callable[[], Awaitable[RoundSummary]]) -> None:
            try:
                results[i] = await start()
            except anyio.get_cancelled_exc_class():
                raise
            except Exception as exc:
                errors.append(exc)
                self.control.request_stop(StopReason.ERROR)

        async with anyio.create_task_group() as tg:
            for i, start in enumerate(starts):
                tg.start_soon(one, i, start)
        if errors:
            raise errors[0]
        return [results[i] for i in sorted(results)]

    # -- decisions ------------------------------------------------------------------

    async def _decide(
        self,
        policy: Policy,
        spec: ProjectSpec,
        index: int,
        slots: int,
        baseline_params: Mapping[str, Any],
    ) -> list[Proposal] | None:
        """The next step's proposals (rounds ``index`` ...), each recorded; None when a stop
        request dropped the decision."""
        assert self.state is not None
        proposals: list[Proposal] | None = None
        self.emit(
            ev.DecisionStarted(round=index, policy=self.record.policy, slots=slots, at=time.time())
        )
        with anyio.CancelScope() as scope:
            self.control.decision_scope = scope
            try:
                proposals = await propose_batch(
                    policy, self.state, spec.tunables, baseline_params, slots
                )
            except TraineeError as exc:
                # Nothing is launched, but the attempts and what they cost are kept: the
                # plans decided before a failing one in this step, then the failed one.
                data = exc.data if isinstance(exc.data, dict) else {}
                earlier = [p for p in data.get("earlier", []) if isinstance(p, Proposal)]
                for i, p in enumerate(earlier):
                    await self._record_decision(index + i, p, accepted=False)
                failed = data.get("proposal")
                if isinstance(failed, Proposal):
                    await self._record_decision(index + len(earlier), failed, accepted=False)
                if isinstance(exc.data, dict):
                    exc.data = {k: v for k, v in data.items() if k not in ("proposal", "earlier")}
                raise
        self.control.decision_scope = None
        if not proposals:
            return None
        stop = next((p for p in proposals if p.plan.stop), None)
        if stop is not None:
            await self._record_decision(index, stop)
            self.emit(decision_event(index, stop, {}))
            return [stop]
        for i, p in enumerate(proposals):
            await self._record_decision(index + i, p)
        return proposals

    async def _record_decision(self, index: int, p: Proposal, *, accepted: bool = True) -> None:
        saved = await self.store.add_decision(
            decision_record(self.record.index, index, p, accepted=accepted),
            debug=self._debug_recording(),
        )
        if accepted:
            self._decision_ids[index] = saved.id
        tokens = self.record.tokens + p.prompt_tokens + p.completion_tokens
        cost = self.record.cost_usd + (p.cost_usd or 0.0)
        self.record = await self.store.update_session(
            self.record.index, tokens=tokens, cost_usd=cost
        )

    def _debug_recording(self) -> bool:
        """Debug recording (runtime_debug_update) keeps full prompts in the store."""
        try:
            return load_settings(self.env).debug
        except TraineeError:
            return False

    # -- stop conditions ----------------------------------------------------------

    def _stop_check(
        self, spec: ProjectSpec, done: list[RoundRecord], index: int
    ) -> StopReason | None:
        # a round the user stopped does not use up the budget of rounds
        if counted_rounds(done) >= self.record.max_rounds:
            return StopReason.MAX_ROUNDS
        if index > 1 and not spec.tunables:
            return StopReason.NO_TUNABLE_PARAMS
        if index == 1:
            return None  # budgets are checked before decisions; the baseline always runs
        budgets = budgets_of(spec)
        if (
            budgets.max_session_minutes is not None
            and time.time() - self.record.created_at >= budgets.max_session_minutes * 60
        ):
            return StopReason.BUDGET_TIME
        if budgets.max_tokens is not None and self.record.tokens >= budgets.max_tokens:
            return StopReason.BUDGET_TOKENS
        if budgets.max_usd is not None and self.record.cost_usd >= budgets.max_usd:
            return StopReason.BUDGET_USD
        return None

    def _noise_repeats(
        self, spec: ProjectSpec, done: list[RoundRecord], baseline: Mapping[str, Any]
    ) -> list[dict[str, Any]]:
        """The next step's runs of the baseline on other seeds (``run.noise``), at most
        ``run.parallel`` and what the budget of rounds leaves."""
        noise = spec.run.noise
        if noise is None:
            return []
        todo = noise_repeats(
            noise.seed, noise.repeats, baseline, [(r.params, r.status) for r in done]
        )
        return todo[: decision_slots(spec, self.record, done)]

    def _observe(self, policy: Policy, summary: RoundSummary) -> None:
        if summary.index > 1:
            policy.observe(summary.params, summary.metric, screening.told(summary))

    # -- outputs ------------------------------------------------------------------------

    async def _write_outputs(self, *, report: bool = False) -> None:
        async with self._outputs_lock:  # rounds of one step finish at once
            await self._write_outputs_now(report=report)

    async def _write_outputs_now(self, *, report: bool) -> None:
        rounds = await self.store.list_rounds(self.record.index)
        decisions = await self.store.list_decisions(self.record.index) if report else None
        state = self.state

        def write() -> None:
            write_ledgers(self.session_layout, self.record, rounds)
            if state is not None:
                write_research_state(self.session_layout, state_to_json(state))
            if report:
                metric = state.primary_metric if state else None
                goal = state.goal if state else "min"
                write_report(
                    self.session_layout,
                    self.record,
                    rounds,
                    metric_name=metric or "metric",
                    goal=goal,
                    decisions=decisions,
                    tunables=self.spec.tunables if self.spec is not None else (),
                    noise=state.noise.describe(metric or "metric")
                    if state and state.noise
                    else None,
                    screen=screening.screen_view(self.spec),
                )

        await anyio.to_thread.run_sync(write)

    async def _finish(self, stop_reason: StopReason, error: str | None) -> SessionRecord:
        status = SESSION_STATUS_OF_STOP[stop_reason]
        if status == SessionStatus.FINISHED and not await self._any_completed():
            # every round failed (the baseline included): nothing was measured
            status = SessionStatus.FAILED
            error = error or "no round completed (the baseline included); see the rounds' logs"
        final = {
            "status": status,
            "stop_reason": stop_reason,
            "error": error,
            "stop_detail": self._stop_detail,
            "finished_at": time.time(),
        }
        with anyio.CancelScope(shield=True):
            # The report is on disk before anyone can see the session as ended.
            self.record = msgspec.structs.replace(self.record, **final)
            try:
                await self._write_outputs(report=True)
            except Exception:
                log.exception("%s: writing the report failed", self.record.id)
            self.record = await self.store.update_session(self.record.index, **final)

            state = self.state
            self.emit(
                ev.SessionFinished(
                    status=status,
                    stop_reason=stop_reason,
                    error=error,
                    stop_detail=self._stop_detail,
                    policy=self.record.policy,
                    best_round=state.best.index if state and state.best else None,
                    best_metric=state.best.metric if state and state.best else None,
                    best_params=state.best.params if state and state.best else None,
                    baseline_metric=state.baseline.metric if state and state.baseline else None,
                    metric_name=state.primary_metric if state else None,
                    report=str(self.session_layout.report),
                    log_tail=self._failure_tail,
                )
            )
        return self.record

    async def _any_completed(self) -> bool:
        try:
            rounds = await self.store.list_rounds(self.record.index)
        except TraineeError:
            return True  # cannot tell: keep the stop reason's own status
        return any(r.status == RoundStatus.COMPLETED for r in rounds)
