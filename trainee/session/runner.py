"""One session: rounds chained until a stop condition, nothing lost, nothing unchecked applied.

round: decide (baseline first) -> render -> launch under the monitor -> tail
output and metrics -> exit -> status -> research state -> ledgers -> stop check.
Every state change is written to the store before the next step, so a daemon
killed at any point resumes the session: a round whose monitor survived is
re-adopted, one whose monitor died is re-run with its recorded decision.
"""

from __future__ import annotations

import contextlib
import functools
import glob
import hashlib
import logging
import math
import os
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import msgspec

from trainee.errors import (
    InvalidDecision,
    LaunchError,
    ProviderError,
    SandboxError,
    TraineeError,
)
from trainee.jobfiles import find_job_files
from trainee.launch.backends import Backend, JobRef, JobState, RoundJob, make_backend
from trainee.launch.backends.base import clear_job_files
from trainee.launch.layout import CONTROL_LAYOUT, ProjectLayout, RoundLayout, SessionLayout
from trainee.launch.render import build_env, job_cwd, render_round
from trainee.launch.sandbox import check_bwrap, wrap
from trainee.llm.settings import load_settings
from trainee.metrics.extract import Extractor, MetricPoint
from trainee.metrics.tb_source import require_tensorboard
from trainee.monitor.activity import Activity
from trainee.monitor.process import ExitInfo, Limits, revoke_launch
from trainee.monitor.tail import Line, tail_files
from trainee.research.decision import params_diff
from trainee.research.state import (
    ResearchState,
    RoundSummary,
    record_round,
    state_to_json,
)
from trainee.session.bus import EventBus
from trainee.session.hints import failure_hint
from trainee.session.inputs import (
    FINISHED,
    budgets_of,
    counted_rounds,
    decision_budget,
    decision_slots,
    observe_history,
    rebuild_state,
)
from trainee.session.policy import Policy, Proposal, full_params, propose_batch
from trainee.spec import ProjectSpec, SecurityMode, load_project
from trainee.spec.files import job_path_base
from trainee.spec.wire import Event
from trainee.store.db import Store
from trainee.store.export import write_ledgers, write_report, write_research_state
from trainee.store.records import DecisionRecord, RoundRecord, SessionRecord
from trainee.testhooks import crash_point

log = logging.getLogger("trainee.session")

_NO_BASELINE = {"stopped", "failed", "timed_out"}
"""Statuses of a baseline round that leave the session without a baseline."""
OUTPUT_LINES_PER_EVENT = 200
FAILURE_TAIL_LINES = 50
OFFSET_SAVE_INTERVAL = 1.0
EVENT_FLUSH_INTERVAL = 0.25
MAX_ATTEMPTS = 3
BASELINE_TAIL_LINES = 20
"""Lines of a failed baseline's log shown when the session ends because of it."""
"""A round whose monitor keeps dying is run at most this many times, then marked failed."""


MAX_UNSAVED_EVENTS = 100_000
"""Events held for the store while it does not answer, at most."""


@dataclass
class SessionControl:
    """What the outside can do to a running session."""

    stop_requested: anyio.Event = field(default_factory=anyio.Event)
    stop_reason: str = "user_stop"
    decision_scope: anyio.CancelScope | None = None

    def request_stop(self, reason: str = "user_stop") -> None:
        """Stop after cleaning up: the running round gets SIGTERM, a pending decision is dropped."""
        if not self.stop_requested.is_set():
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
        self._unsaved: list[Event] = []
        self.policy: Policy | None = None
        self.backend: Backend | None = None
        self._outputs_lock = anyio.Lock()
        self._failure_tail: list[str] = []
        self.monitors: dict[int, int] = {}
        """Round index -> pid of its monitor, for the rounds being launched or watched."""
        self._stop_detail: str | None = None
        self._decision_ids: dict[int, int] = {}
        """round index -> the id of the decision that chose it (rounds.decision_id)"""

    # -- events ----------------------------------------------------------------

    def emit(self, kind: str, data: dict[str, Any] | None = None) -> None:
        """Publish to live subscribers now; the store gets it with the next flush."""
        payload = {"project": str(self.layout.project_root), **(data or {})}
        self._unsaved.append(self.bus.publish(kind, payload, session=self.record.id))

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
            stop_reason, error = "invalid_decision", exc.message
        except ProviderError as exc:
            stop_reason, error = "provider_failed", exc.message
        except SandboxError as exc:
            stop_reason, error = "error", exc.message
        except TraineeError as exc:
            stop_reason, error = "error", exc.message
        except anyio.get_cancelled_exc_class():
            # Daemon shutdown: the session stays "running" in the store and resumes later.
            log.info(
                "%s: daemon stopping; the session resumes with the next daemon", self.record.id
            )
            raise
        except Exception as exc:
            log.exception("%s failed", self.record.id)
            stop_reason, error = "error", f"{type(exc).__name__}: {exc}"
        return await self._finish(stop_reason, error)

    async def _run(self) -> tuple[str, str | None]:
        self.spec = await anyio.to_thread.run_sync(load_project, self.record.project_root)
        spec = self.spec
        self.backend = make_backend(spec.advanced.backend, self.env)
        if self._security_mode() == SecurityMode.GUARDED and self.backend.name == "local":
            # cluster jobs check for bwrap on their node (the round fails there without it)
            await anyio.to_thread.run_sync(check_bwrap)
        require_tensorboard(spec.metrics.specs)
        rounds = await self.store.list_rounds(self.record.index)
        self.state = rebuild_state(spec, rounds)
        policy = await self.policy_factory(
            spec, self.record, len([r for r in rounds if r.index > 1])
        )
        self.policy = policy
        observe_history(policy, rounds)
        baseline_params = {t.name: t.baseline for t in spec.tunables}
        if not self.record.baseline_round:
            self.emit(
                "session.started",
                {"max_rounds": self.record.max_rounds, "policy": self.record.policy},
            )

        # Rounds left unfinished by a previous daemon (a whole step of parallel
        # candidates at most): re-adopted or re-run, all at once.
        unfinished = [r for r in rounds if r.status not in FINISHED]
        if unfinished:
            summaries = await self._run_batch(
                [functools.partial(self._resume_round, spec, r) for r in unfinished]
            )
            for summary in summaries:
                self._observe(policy, summary)
            if self.control.stop_requested.is_set():
                return self.control.stop_reason, None
            if any(s.status == "completed_without_metrics" for s in summaries):
                return "required_metric_missing", None
            baselines = {r.index for r in unfinished if r.batch == 0 and not r.diff}
            failed = await self._failed_baseline(
                spec, [s for s in summaries if s.index in baselines]
            )
            if failed is not None:
                return "baseline_failed", failed

        while True:
            done = await self.store.list_rounds(self.record.index)
            index = (max((r.index for r in done), default=0)) + 1
            reason = self._stop_check(spec, done, index)
            if reason:
                return reason, None
            if self.control.stop_requested.is_set():
                return self.control.stop_reason, None
            # The baseline runs first, alone; again if the user stopped it before it finished
            # or if it failed (a failed session resumed after a fix starts from a baseline).
            plans: list[tuple[Proposal | None, dict[str, Any]]]
            if not any(not r.diff and r.status not in _NO_BASELINE for r in done):
                plans = [(None, dict(baseline_params))]
                step = 0
            else:
                step = max((r.batch for r in done), default=0) + 1
                slots = decision_slots(spec, self.record, done)
                assert self.state is not None
                self.state = msgspec.structs.replace(
                    self.state, budget=decision_budget(spec, self.record, done, index)
                )
                proposals = await self._decide(policy, spec, index, slots, baseline_params)
                if proposals is None or self.control.stop_requested.is_set():
                    return self.control.stop_reason, None
                stop = next((p for p in proposals if p.plan.stop), None)
                if stop is not None:
                    self._stop_detail = stop.plan.stop_reason or None
                    return "policy_stop", None
                plans = [(p, full_params(baseline_params, p.plan)) for p in proposals]
                for i, (p, params) in enumerate(plans):
                    assert p is not None
                    event = self._decision_event(index + i, p, params_diff(baseline_params, params))
                    self.emit("decision", {**event, "batch": step, "batch_size": len(plans)})
            recs = [
                await self._create_round(index + i, params, baseline_params, p, batch=step)
                for i, (p, params) in enumerate(plans)
            ]
            if len(recs) > 1:
                self.emit("batch.started", {"batch": step, "rounds": [r.index for r in recs]})
            summaries = await self._run_batch(
                [functools.partial(self._run_round, spec, r) for r in recs]
            )
            for summary in summaries:
                self._observe(policy, summary)
            if len(recs) > 1:
                self.emit(
                    "batch.finished",
                    {
                        "batch": step,
                        "rounds": [s.index for s in summaries],
                        "statuses": [s.status for s in summaries],
                    },
                )
            if any(s.status == "completed_without_metrics" for s in summaries):
                return "required_metric_missing", None
            if step == 0:
                # nothing to improve on: stop now, with what went wrong and the likely fix
                failed = await self._failed_baseline(spec, summaries)
                if failed is not None:
                    return "baseline_failed", failed

    async def _failed_baseline(
        self, spec: ProjectSpec, summaries: list[RoundSummary]
    ) -> str | None:
        """The session's error when the baseline among ``summaries`` failed or timed out
        (its status, the likely fix); None when it did not."""
        s = next((s for s in summaries if s.status in ("failed", "timed_out")), None)
        if s is None:
            return None
        rec = await self.store.get_round(self.record.index, s.index)
        how = "timed out" if s.status == "timed_out" else "failed"
        if rec.signal:
            how += f" ({rec.signal})"
        elif rec.returncode is not None and s.status == "failed":
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
            "decision.started",
            {"round": index, "policy": self.record.policy, "slots": slots, "at": time.time()},
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
            self.emit("decision", self._decision_event(index, stop, {}))
            return [stop]
        for i, p in enumerate(proposals):
            await self._record_decision(index + i, p)
        return proposals

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
                self.control.request_stop("error")

        async with anyio.create_task_group() as tg:
            for i, start in enumerate(starts):
                tg.start_soon(one, i, start)
        if errors:
            raise errors[0]
        return [results[i] for i in sorted(results)]

    # -- stop conditions ----------------------------------------------------------

    def _security_mode(self) -> str:
        return self.record.security_mode

    def _stop_check(self, spec: ProjectSpec, done: list[RoundRecord], index: int) -> str | None:
        # a round the user stopped does not use up the budget of rounds
        if counted_rounds(done) >= self.record.max_rounds:
            return "max_rounds"
        if index > 1 and not spec.tunables:
            return "no_tunable_params"
        if index == 1:
            return None  # budgets are checked before decisions; the baseline always runs
        budgets = budgets_of(spec)
        if (
            budgets.max_session_minutes is not None
            and time.time() - self.record.created_at >= budgets.max_session_minutes * 60
        ):
            return "budget_time"
        if budgets.max_tokens is not None and self.record.tokens >= budgets.max_tokens:
            return "budget_tokens"
        if budgets.max_usd is not None and self.record.cost_usd >= budgets.max_usd:
            return "budget_usd"
        return None

    def _observe(self, policy: Policy, summary: RoundSummary) -> None:
        if summary.index > 1:
            policy.observe(summary.params, summary.metric, summary.status)

    # -- decisions ------------------------------------------------------------------

    async def _record_decision(self, index: int, p: Proposal, *, accepted: bool = True) -> None:
        saved = await self.store.add_decision(
            DecisionRecord(
                id=0,
                session=self.record.index,
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
            ),
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

    def _decision_event(self, index: int, p: Proposal, diff: dict[str, Any]) -> dict[str, Any]:
        return {
            "source": p.source,
            "notes": p.notes,
            "round": index,
            "policy": p.policy,
            "provider": p.provider,
            "model": p.model,
            "hypothesis": p.plan.hypothesis,
            "change_summary": p.plan.change_summary,
            "params": p.plan.params,
            "diff": diff,
            "expected": p.plan.expected,
            "stop": p.plan.stop,
            "stop_reason": p.plan.stop_reason,
            "repaired": p.repaired,
            "response_format": p.response_format,
            "attempts": len(p.attempts),
            "failed_attempts": [
                {k: a.get(k) for k in ("provider", "model", "url", "kind", "status", "error")}
                for a in p.attempts
                if not a.get("ok") and a.get("kind") != "refused_format"
            ],
        }

    # -- rounds ------------------------------------------------------------------------

    async def _create_round(
        self,
        index: int,
        params: dict[str, Any],
        baseline: Mapping[str, Any],
        p: Proposal | None,
        *,
        batch: int = 0,
    ) -> RoundRecord:
        rec = RoundRecord(
            session=self.record.index,
            index=index,
            status="pending",
            params=params,
            diff=params_diff(dict(baseline), params),
            decision_id=self._decision_ids.pop(index, None) if p is not None else None,
            hypothesis=p.plan.hypothesis if p else "baseline",
            expected=p.plan.expected if p else "",
            verdict=None,
            verdict_reason="",
            command="",
            config_path=None,
            monitor_pid=None,
            monitor_start_time=None,
            log_offset=0,
            tail_offsets={},
            started_at=None,
            ended_at=None,
            returncode=None,
            signal=None,
            finals={},
            primary_metric=None,
            warnings=[],
            failure_tail=[],
            last_activity_at=None,
            attempt=0,
            backend=self.backend.name if self.backend is not None else "local",
            batch=batch,
        )
        return await self.store.upsert_round(rec)

    def _job(
        self,
        spec: ProjectSpec,
        rec: RoundRecord,
        rnd: RoundLayout,
        argv: tuple[str, ...] = (),
        env: Mapping[str, str] | None = None,
        cwd: str = "",
    ) -> RoundJob:
        limits = spec.run.limits
        return RoundJob(
            argv=argv,
            env=dict(env or {}),
            cwd=cwd,
            rnd=rnd,
            name=_job_name(self.layout.project_root, self.record.index, rec),
            timeout_sec=spec.run.timeout_minutes * 60,
            grace_sec=float(getattr(spec.advanced, "stop_grace_sec", 30.0)),
            guarded=self._security_mode() == SecurityMode.GUARDED,
            token=rec.launch_token,
            limits=Limits(memory_mb=limits.memory_mb, processes=limits.processes),
        )

    def _round_layout(self, rec: RoundRecord) -> RoundLayout:
        """Where the round's files are (a round launched before the control folder
        existed keeps its control files in its workspace)."""
        return self.session_layout.round(rec.index, legacy=rec.control_layout < CONTROL_LAYOUT)

    async def _launch(
        self, spec: ProjectSpec, rec: RoundRecord, rnd: RoundLayout
    ) -> tuple[JobRef, RoundJob]:
        assert self.backend is not None
        rendered = await anyio.to_thread.run_sync(
            lambda: render_round(
                spec, rnd, rec.params, base_env=self.env, security_mode=self._security_mode()
            )
        )
        if self._security_mode() == SecurityMode.GUARDED:
            network = bool(getattr(spec.advanced, "network", True))
            rendered = wrap(rendered, spec, rnd, network=network, caller_env=self.env)
        rnd.session.artifacts.mkdir(parents=True, exist_ok=True)
        # The launch intent goes to the store before anything starts: a daemon killed
        # from here on finds the token, and with it what the launch started (or revokes
        # it), so the round's command never runs twice.
        crash_point("launch.before_intent")
        rec = await self.store.update_round(
            self.record.index,
            rec.index,
            launch_token=secrets.token_hex(8),
            control_layout=CONTROL_LAYOUT,
            command=rendered.display,
            config_path=rendered.config_path,
            attempt=rec.attempt,
        )
        crash_point("launch.after_intent")
        job = self._job(spec, rec, rnd, rendered.argv, rendered.env, rendered.cwd)
        ref = await self.backend.submit(job)
        crash_point("launch.after_submit")
        if ref.pid is not None:
            self.monitors[rec.index] = ref.pid
        now = time.time()
        await self.store.update_round(
            self.record.index,
            rec.index,
            status="running",
            command=rendered.display,
            config_path=rendered.config_path,
            monitor_pid=ref.pid,
            monitor_start_time=ref.start_time,
            backend=ref.backend,
            job_id=ref.job_id,
            started_at=now,
            attempt=rec.attempt,
        )
        crash_point("launch.after_record")
        self.emit(
            "round.started",
            {
                "round": rec.index,
                "params": rec.params,
                "diff": rec.diff,
                "hypothesis": rec.hypothesis,
                "command": rendered.display,
                "attempt": rec.attempt,
                "backend": ref.backend,
                "job_id": ref.job_id,
                "batch": rec.batch,
            },
        )
        return ref, job

    def _ref_of(self, rec: RoundRecord) -> JobRef | None:
        if rec.job_id is None and (rec.monitor_pid is None or rec.monitor_start_time is None):
            return None
        return JobRef(
            backend=rec.backend,
            job_id=rec.job_id,
            pid=rec.monitor_pid,
            start_time=rec.monitor_start_time,
            token=rec.launch_token,
        )

    async def _unconfirmed_launch(
        self, backend: Backend, rec: RoundRecord, rnd: RoundLayout, job: RoundJob
    ) -> JobRef | None:
        """What the launch recorded by its token (but never confirmed as running) started:
        the job it left in the control folder, else the one that claimed the launch; None
        when nothing did, after revoking the launch so that nothing ever will."""
        token = rec.launch_token
        assert token is not None
        try:
            stray = backend.unrecorded(job)
        except Exception:
            stray = None
        if stray is not None and stray.token == token and await _adoptable(backend, stray, job):
            return stray
        # nothing to watch (yet): take the launch's claim first, so that whatever of it
        # may still start (a monitor starting late, a job still queued) never runs
        claim = await anyio.to_thread.run_sync(revoke_launch, rnd, token)
        if claim is None:
            return None
        if claim.by == "monitor" and claim.pid is not None and claim.start_time is not None:
            return JobRef(
                backend=backend.name, pid=claim.pid, start_time=claim.start_time, token=token
            )
        job_id = claim.job_id or (stray.job_id if stray is not None else None)
        if job_id:
            return JobRef(backend=backend.name, job_id=job_id, token=token)
        # claimed, but by whom cannot be told: the command started; it cannot be watched
        log.warning(
            "%s round %d: launch %s started but left no way to find it",
            self.record.id,
            rec.index,
            token,
        )
        return JobRef(backend=backend.name, token=token)

    async def _resume_round(self, spec: ProjectSpec, rec: RoundRecord) -> RoundSummary:
        assert self.backend is not None
        backend = self.backend
        rnd = self._round_layout(rec)
        job = self._job(spec, rec, rnd)
        ref = self._ref_of(rec)
        if rec.status != "running" and rec.launch_token is not None:
            # launched (the intent is stored) but never recorded as running
            ref = await self._unconfirmed_launch(backend, rec, rnd, job)
            if ref is None:
                log.info(
                    "%s round %d: its launch never started; launching it now",
                    self.record.id,
                    rec.index,
                )
                return await self._run_round(spec, rec)
            rec = await self.store.update_round(
                self.record.index,
                rec.index,
                status="running",
                monitor_pid=ref.pid,
                monitor_start_time=ref.start_time,
                job_id=ref.job_id,
                backend=ref.backend,
                started_at=rec.started_at or time.time(),
            )
        if ref is not None and ref.backend != backend.name:
            raise LaunchError(
                f"round {rec.index} of {self.record.id} runs on {ref.backend}, but "
                f"advanced.backend is now {backend.name}; change it back to resume",
                {"field": "advanced.backend", "round": rec.index},
            )
        if ref is not None and await _adoptable(backend, ref, job):
            name = (
                f"{ref.backend} job {ref.job_id}" if ref.job_id else f"its monitor (pid {ref.pid})"
            )
            log.info("%s round %d: re-adopting %s", self.record.id, rec.index, name)
            self.emit(
                "round.readopted",
                {"round": rec.index, "pid": ref.pid, "job_id": ref.job_id, "backend": ref.backend},
            )
            summary = await self._watch_round(spec, rec, rnd, ref, job, readopted=True)
            if summary is not None:
                return summary
            rec = await self._mark_rerun(rec)
        stray = None if rec.status == "running" else backend.unrecorded(job)
        if stray is not None and rec.launch_token is not None:
            stray = None  # a launch with a token was decided above
        if rec.status == "running" or stray is not None:
            if stray is not None:
                # Launched, but the daemon died before recording the launch: end that
                # launch and run the round again from a clean start.
                ref = stray
                log.info(
                    "%s round %d: ending a launch that was never recorded",
                    self.record.id,
                    rec.index,
                )
            log.info("%s round %d: its job is gone; re-running it", self.record.id, rec.index)
            if ref is not None:
                # The job of the lost attempt may outlive its monitor: it must not run on
                # beside the new attempt.
                killed = await backend.end_lost(ref, job)
                if killed:
                    log.warning(
                        "%s round %d: ended what was left of the lost attempt: %s",
                        self.record.id,
                        rec.index,
                        ", ".join(killed),
                    )
            self.emit("round.rerun", {"round": rec.index, "attempt": rec.attempt + 1})
            rec = await self.store.update_round(
                self.record.index, rec.index, status="pending", attempt=rec.attempt + 1
            )
        return await self._run_round(spec, rec)

    async def _run_round(self, spec: ProjectSpec, rec: RoundRecord) -> RoundSummary:
        rnd = self.session_layout.round(rec.index)
        while True:
            if rec.attempt:
                _clear_round_files(rnd)
            ref, job = await self._launch(spec, rec, rnd)
            summary = await self._watch_round(spec, rec, rnd, ref, job, readopted=False)
            if summary is not None:
                return summary
            rec = await self._mark_rerun(rec)

    async def _mark_rerun(self, rec: RoundRecord) -> RoundRecord:
        """The round's monitor died without an exit record: run it again, same params."""
        log.warning("%s round %d: its monitor died; re-running it", self.record.id, rec.index)
        self.emit("round.rerun", {"round": rec.index, "attempt": rec.attempt + 1})
        return await self.store.update_round(
            self.record.index, rec.index, status="pending", attempt=rec.attempt + 1
        )

    async def _watch_round(
        self,
        spec: ProjectSpec,
        rec: RoundRecord,
        rnd: RoundLayout,
        ref: JobRef,
        job: RoundJob,
        *,
        readopted: bool,
    ) -> RoundSummary | None:
        """Watch the round to its end; its monitor's pid is in ``monitors`` meanwhile
        (the daemon refuses socket peers that descend from it)."""
        if ref.pid is not None:
            self.monitors[rec.index] = ref.pid
        try:
            return await self._watch_round_now(spec, rec, rnd, ref, job, readopted=readopted)
        finally:
            self.monitors.pop(rec.index, None)

    async def _watch_round_now(
        self,
        spec: ProjectSpec,
        rec: RoundRecord,
        rnd: RoundLayout,
        ref: JobRef,
        job: RoundJob,
        *,
        readopted: bool,
    ) -> RoundSummary | None:
        assert self.backend is not None
        backend = self.backend
        placeholders = rnd.placeholders()
        # relative metric, log and signal paths: in the scratch folder the job writes,
        # else in the project
        cwd = job_cwd(spec, rnd, self._security_mode())
        if cwd == spec.working_dir:
            cwd = str(self.layout.project_root)
        extractor = Extractor(
            spec.metrics.specs,
            placeholders=placeholders,
            project_root=str(self.layout.project_root),
            cwd=cwd,
            # a wandb_summary without path: the newest W&B run of this round, found
            # below the round's WANDB_DIR or the working folder (its summary is written
            # while the job runs, so after this time)
            wandb_dirs=(build_env(spec, rnd, {}, create=False)["WANDB_DIR"], cwd),
            since=rec.started_at or time.time(),
        )
        # Re-parse from the start for metrics; show only what was not shown before.
        shown_until = rec.log_offset if readopted else 0
        # the files tailed and watched are the job's: read only inside the project, its
        # .trainee/ and the session's artifacts, never through a link leading elsewhere
        project = self.layout
        within = [
            str(project.project_root.resolve()),
            str(project.trainee_dir.resolve()),
            str(rnd.session.artifacts.resolve()),
        ]
        offsets: dict[str, int] = {}
        patterns = [str(rnd.log)] + [_fill(p, placeholders, cwd) for p in spec.advanced.log_paths]
        tail_lines: list[str] = []
        last_activity = time.time()
        last_save = 0.0

        async def on_batch(lines: list[Line]) -> None:
            nonlocal last_activity, last_save
            out_lines: list[dict[str, Any]] = []
            points = []
            round_log = str(rnd.log)
            by_file: dict[str, list[str]] = {}
            for line in lines:
                if line.path == round_log:
                    by_file.setdefault("", []).append(line.text)
                    if line.raw_offset >= shown_until:
                        out_lines.append({"stream": line.stream, "text": line.text})
                    tail_lines.append(line.text)
                else:
                    by_file.setdefault(line.path, []).append(line.text)
            if len(tail_lines) > FAILURE_TAIL_LINES * 4:
                del tail_lines[:-FAILURE_TAIL_LINES]
            if by_file:
                # off the event loop: the patterns run with a time budget, GIL released
                points.extend(await anyio.to_thread.run_sync(_extract, extractor, by_file))
            if lines:
                last_activity = time.time()
            if out_lines:
                skipped = max(0, len(out_lines) - OUTPUT_LINES_PER_EVENT)
                self.emit(
                    "output",
                    {
                        "round": rec.index,
                        "lines": out_lines[-OUTPUT_LINES_PER_EVENT:],
                        "skipped": skipped,
                    },
                )
            if points:
                rows = [(p.name, p.value, p.step, p.seq) for p in points]
                await self.store.add_points(self.record.index, rec.index, rows)
                self.emit("metric", {"round": rec.index, "points": rows[-500:]})
            now = time.time()
            if now - last_save >= OFFSET_SAVE_INTERVAL:
                last_save = now
                await self.store.update_round(
                    self.record.index,
                    rec.index,
                    log_offset=offsets.get(round_log, 0),
                    tail_offsets=dict(offsets),
                    last_activity_at=last_activity,
                )
                self.emit("activity", {"round": rec.index, "last_activity_at": last_activity})

        stop_tail = anyio.Event()
        tail_finished = anyio.Event()

        async def run_tail() -> None:
            try:
                await tail_files(patterns, on_batch, stop=stop_tail, offsets=offsets, within=within)
            finally:
                tail_finished.set()

        async def stop_watcher() -> None:
            await self.control.stop_requested.wait()
            # a cluster that does not answer at once must not turn a stop into a failure:
            # try again, and let wait() decide how the job ended
            for attempt in range(5):
                try:
                    await backend.cancel(ref, job, reason="stopped")
                    return
                except TraineeError as exc:
                    log.warning(
                        "%s round %d: stopping its job failed (%s); trying again",
                        self.record.id,
                        rec.index,
                        exc.message,
                    )
                    await anyio.sleep(2.0 * (attempt + 1))

        async def on_state(state: JobState, detail: str) -> None:
            self.emit("round.state", {"round": rec.index, "state": str(state), "detail": detail})

        activity = Activity(started_at=time.time(), within=within)
        mtime_globs, heartbeat_globs = _signal_globs(spec, placeholders, cwd)

        async def watch_signals() -> None:
            """Passive: log-file mtimes and heartbeat files only update the activity time."""
            nonlocal last_activity
            while True:
                await anyio.sleep(spec.advanced.heartbeat_interval_sec)
                files = await anyio.to_thread.run_sync(_expand, mtime_globs)
                beats = await anyio.to_thread.run_sync(_expand, heartbeat_globs)
                activity.scan(files, beats)
                seen = activity.last_activity_at
                if seen is not None and seen > last_activity:
                    last_activity = seen
                    await self.store.update_round(
                        self.record.index, rec.index, last_activity_at=last_activity
                    )
                    self.emit("activity", {"round": rec.index, "last_activity_at": last_activity})

        async def poll_metric_files() -> None:
            """The tensorboard and csv sources, read again every heartbeat interval."""
            while True:
                await anyio.sleep(spec.advanced.heartbeat_interval_sec)
                points = await anyio.to_thread.run_sync(extractor.poll_files)
                if points:
                    rows = [(p.name, p.value, p.step, p.seq) for p in points]
                    await self.store.add_points(self.record.index, rec.index, rows)
                    self.emit("metric", {"round": rec.index, "points": rows[-500:]})

        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(run_tail)
                tg.start_soon(stop_watcher)
                if mtime_globs or heartbeat_globs:
                    tg.start_soon(watch_signals)
                if extractor.polled:
                    tg.start_soon(poll_metric_files)
                exit_info = await backend.wait(ref, job, on_state=on_state)
                stop_tail.set()
                # the tailer drains every file to its end after ``stop``, then returns
                with anyio.move_on_after(30):
                    await tail_finished.wait()
                tg.cancel_scope.cancel()
        except anyio.get_cancelled_exc_class():
            raise  # daemon shutdown: the round runs on and the next daemon re-adopts it
        except BaseException as exc:
            # Supervision failed (e.g. the store stopped answering): the round must not
            # run on unwatched. Stop it, record it as failed, and report the real cause.
            with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                with anyio.fail_after(60):
                    await backend.cancel(ref, job, reason="stopped")
            with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                await self.store.update_round(self.record.index, rec.index, status="failed")
            raise _first_error(exc) from exc
        if (
            exit_info.lost
            and not self.control.stop_requested.is_set()
            and rec.attempt < MAX_ATTEMPTS - 1
        ):
            return None  # the caller re-runs the round with its recorded params

        extractor_points = await anyio.to_thread.run_sync(extractor.read_files)
        if extractor_points:
            await self.store.add_points(
                self.record.index,
                rec.index,
                [(p.name, p.value, p.step, p.seq) for p in extractor_points],
            )
        metrics = extractor.result()
        status = _status_of(exit_info, metrics.missing_required)
        warnings = [w.message for w in metrics.warnings]
        if exit_info.error and status != "completed":
            warnings.insert(0, exit_info.error)
        finals = {k: v for k, v in metrics.finals.items() if math.isfinite(v)}
        primary = finals.get(metrics.primary) if metrics.primary else None
        failure_tail = tail_lines[-FAILURE_TAIL_LINES:] if status in ("failed", "timed_out") else []
        summary = RoundSummary(
            index=rec.index,
            status=status,
            params=rec.params,
            diff=rec.diff,
            metric=primary,
            metrics=finals,
            hypothesis=rec.hypothesis,
            expected=rec.expected,
            verdict=None,
            verdict_reason="",
            duration_sec=exit_info.duration_sec,
            failure_tail=failure_tail,
        )
        assert self.state is not None
        self.state, judged = record_round(self.state, summary)
        updated = await self.store.update_round(
            self.record.index,
            rec.index,
            status=status,
            ended_at=exit_info.ended_at,
            returncode=exit_info.returncode,
            signal=exit_info.signal,
            finals=finals,
            primary_metric=primary,
            verdict=judged.verdict,
            verdict_reason=judged.verdict_reason,
            warnings=warnings,
            failure_tail=failure_tail,
            log_offset=offsets.get(str(rnd.log), 0),
            tail_offsets=dict(offsets),
            last_activity_at=last_activity,
        )
        best = self.state.best.index if self.state.best else None
        baseline = self.state.baseline.index if self.state.baseline else None
        self.record = await self.store.update_session(
            self.record.index, best_round=best, baseline_round=baseline
        )
        await self._write_outputs()
        self.emit(
            "round.finished",
            {
                "round": rec.index,
                "status": status,
                "metric": primary,
                "metric_name": metrics.primary,
                "finals": finals,
                "verdict": judged.verdict,
                "verdict_reason": judged.verdict_reason,
                "duration_sec": exit_info.duration_sec,
                "returncode": exit_info.returncode,
                "error": exit_info.error if status != "completed" else None,
                "batch": rec.batch,
                "best_round": best,
            },
        )
        del updated
        return judged

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
                )

        await anyio.to_thread.run_sync(write)

    async def _finish(self, stop_reason: str, error: str | None) -> SessionRecord:
        status = {
            "user_stop": "stopped",
            "error": "failed",
            "provider_failed": "failed",
            "invalid_decision": "failed",
            "required_metric_missing": "failed",
            "baseline_failed": "failed",
        }.get(stop_reason, "finished")
        if status == "finished" and not await self._any_completed():
            # every round failed (the baseline included): nothing was measured
            status = "failed"
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
                "session.finished",
                {
                    "status": status,
                    "stop_reason": stop_reason,
                    "error": error,
                    "stop_detail": self._stop_detail,
                    "policy": self.record.policy,
                    "best_round": state.best.index if state and state.best else None,
                    "best_metric": state.best.metric if state and state.best else None,
                    "best_params": state.best.params if state and state.best else None,
                    "baseline_metric": state.baseline.metric if state and state.baseline else None,
                    "metric_name": state.primary_metric if state else None,
                    "report": str(self.session_layout.report),
                    "log_tail": self._failure_tail,
                },
            )
        return self.record

    async def _any_completed(self) -> bool:
        try:
            rounds = await self.store.list_rounds(self.record.index)
        except TraineeError:
            return True  # cannot tell: keep the stop reason's own status
        return any(r.status == "completed" for r in rounds)


def _extract(extractor: Extractor, by_file: dict[str, list[str]]) -> list[MetricPoint]:
    """Feed one batch of lines to the extractor ("" is the round log); its new points."""
    points: list[MetricPoint] = []
    for path, texts in by_file.items():
        chunk = "\n".join(texts)
        points.extend(
            extractor.feed_output(chunk) if path == "" else extractor.feed_log(path, chunk)
        )
    return points


def _signal_globs(
    spec: ProjectSpec, placeholders: Mapping[str, str], cwd: str
) -> tuple[list[str], list[str]]:
    """Absolute globs of the file-based activity signals: (mtime files, heartbeat files)."""
    mtimes: list[str] = []
    beats: list[str] = []
    for source in spec.advanced.signal_sources:
        target = beats if str(source.type) == "heartbeat_file" else mtimes
        if str(source.type) in ("log_file_mtime", "heartbeat_file"):
            target.extend(_fill(p, placeholders, cwd) for p in source.paths)
    return mtimes, beats


def _expand(patterns: list[str]) -> list[str]:
    """The files of the signal globs (the job's folders: bounded, never through a link)."""
    out: list[str] = []
    for pattern in patterns:
        out.extend(find_job_files(pattern) if glob.has_magic(pattern) else [pattern])
    return out


def _first_error(exc: BaseException) -> BaseException:
    """The error inside a task group's ExceptionGroup (its first leaf), for a clear message."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _status_of(info: ExitInfo, missing_required: list[str]) -> str:

    if info.stopped:
        return "stopped"
    if info.timed_out:
        return "timed_out"
    if info.lost or info.returncode != 0 or info.signal:
        return "failed"  # a job with no exit status of its own (None) failed
    if missing_required:
        return "completed_without_metrics"
    return "completed"


def _fill(pattern: str, placeholders: Mapping[str, str], cwd: str) -> str:
    """A job file's path: placeholders filled, relative to the job's working folder."""
    text = pattern
    for key, value in placeholders.items():
        text = text.replace("{" + key + "}", value)
    if not text.startswith("/"):
        base = job_path_base(text, cwd=cwd, project_root=placeholders["project_root"])
        text = os.path.join(base, text)
    return text


async def _adoptable(backend: Backend, ref: JobRef, job: RoundJob) -> bool:
    """Whether to watch a recorded job again. An engine that does not answer right now
    (a restart often meets one) is no proof the job is gone: watch it, and let wait()'s
    own patience decide."""
    try:
        return await backend.adoptable(ref, job)
    except TraineeError as exc:
        log.warning("re-adopting %s job %s without an answer: %s", ref.backend, ref.job_id, exc)
        return True


def _job_name(root: Path, session: int, rec: RoundRecord) -> str:
    """What the cluster shows: ``trainee-<project>-<6 hex of its path>-s0001-r0003``
    (``-a1`` on a re-run): two clones named alike never share a job name."""
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in root.name)[:40] or "project"
    tag = hashlib.sha256(str(root).encode()).hexdigest()[:6]
    attempt = f"-a{rec.attempt}" if rec.attempt else ""
    return f"trainee-{safe}-{tag}-s{session:04d}-r{rec.index:04d}{attempt}"


def _clear_round_files(rnd: RoundLayout) -> None:
    for path in (rnd.exit_file, rnd.monitor_file, rnd.log, rnd.log_index):
        path.unlink(missing_ok=True)
    clear_job_files(rnd)
