"""One round: launched (or re-adopted after a daemon restart), watched to its end, judged.

:class:`RoundRun` takes a round's record and brings it to a finished status: it records
the launch intent, submits the job, watches it (:class:`_Watch`: output, metrics,
activity, a stop request), re-runs an attempt whose monitor died, and judges the exit
(status, metrics, verdict) into the store. What belongs to the session (the research
state, the session's record, the ledgers) it reaches through the two hooks of its
:class:`RoundContext`, so a round runs with nothing more than a store, a backend and an
``emit``: tests/integration/test_round.py drives it without a daemon.
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
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import msgspec

from trainee import events as ev
from trainee.errors import LaunchError, TraineeError
from trainee.jobfiles import find_job_files
from trainee.launch import gpus
from trainee.launch.backends import Backend, JobRef, JobState, RoundJob
from trainee.launch.backends.base import clear_job_files
from trainee.launch.layout import CONTROL_LAYOUT, ProjectLayout, RoundLayout, SessionLayout
from trainee.launch.render import build_env, job_cwd, relative_base, render_round
from trainee.launch.rungs import spec_at_rung
from trainee.launch.sandbox import wrap
from trainee.metrics.extract import Extractor, MetricPoint
from trainee.monitor.activity import Activity
from trainee.monitor.process import ExitInfo, Limits, revoke_launch
from trainee.monitor.tail import Line, tail_files
from trainee.research.state import RoundSummary
from trainee.session.pruning import EarlyEnd, RoundPruning
from trainee.spec import ProjectSpec, SecurityMode
from trainee.spec.files import job_path_base
from trainee.states import RoundStatus
from trainee.store.db import Store
from trainee.store.records import RoundRecord
from trainee.testhooks import crash_point

__all__ = ["MAX_ATTEMPTS", "RoundContext", "RoundRun"]

log = logging.getLogger("trainee.session")

OUTPUT_LINES_PER_EVENT = ev.OUTPUT_LINES_PER_EVENT
FAILURE_TAIL_LINES = 50
OFFSET_SAVE_INTERVAL = 1.0
MAX_ATTEMPTS = 3
"""A round whose monitor keeps dying is run at most this many times, then marked failed."""
STOP_ATTEMPTS = 5
"""Times a stop request is sent to a job engine that does not answer."""
ORPHAN_MARGIN_SEC = 10.0
"""After a round ended, how long beyond its stop grace a process of it may still run
before it is killed (only then is its GPU slot given back)."""
TAIL_DRAIN_SEC = 30
"""How long the tailer may take to read the files to their end once the job ended."""


@dataclass
class RoundContext:
    """What a round needs of its session.

    ``judge`` gives a finished round its verdict (and updates the session's research
    state); ``on_finished`` runs once the round's final record is stored (the session's
    record, its ledgers) and returns the session's best round for the finish event.
    ``monitors`` maps round index -> monitor pid while a round is launched or watched
    (the daemon refuses socket peers descending from one); ``early_ends`` maps round
    index -> its :class:`EarlyEnd` while the round is run (``round_prune`` asks there).
    """

    store: Store
    backend: Backend
    emit: Callable[[ev.RoundData], None]
    session: int
    session_id: str
    layout: ProjectLayout
    security_mode: str
    env: Mapping[str, str]
    stop_requested: anyio.Event
    judge: Callable[[RoundSummary], RoundSummary]
    on_finished: Callable[[RoundSummary], Awaitable[int | None]]
    monitors: dict[int, int] = field(default_factory=dict)
    early_ends: dict[int, EarlyEnd] = field(default_factory=dict)
    gpu_slots: gpus.SlotPool = field(default_factory=gpus.machine_pool)
    """This machine's GPUs, shared by every session of the daemon (``launch.gpus``)."""

    @property
    def session_layout(self) -> SessionLayout:
        return self.layout.session(self.session)

    @property
    def guarded(self) -> bool:
        return self.security_mode == SecurityMode.GUARDED


class RoundRun:
    """One round of a session, from its record to its judged summary."""

    def __init__(self, ctx: RoundContext, spec: ProjectSpec, rec: RoundRecord) -> None:
        self.ctx = ctx
        # run.screen: the budget argument at the round's rung (and the resume argument)
        self.spec = spec_at_rung(spec, rec.rung, rec.promoted_from, ctx.session_layout)
        self.rec = rec
        self.early = EarlyEnd()
        """Ends the round early (a prune rule, an agent), whichever attempt runs."""
        self._slot: tuple[int, ...] | None = None
        """The GPUs this round holds (trainee.launch.gpus), across its attempts."""
        self._slot_dir: str | None = None
        """Its round folder (its TRAINEE_ROUND_DIR), the slot's key."""

    # -- entry points -------------------------------------------------------------------

    async def run(self) -> RoundSummary:
        """Launch the round and watch it; an attempt whose monitor died runs again."""
        with self._ends_early():
            try:
                return await self._run()
            finally:
                await self._release_slot()

    async def resume(self) -> RoundSummary:
        """A round a previous daemon left unfinished: re-adopt its job when it can be
        watched, else end what is left of it and run the round again."""
        # before any await: the GPU slot of a round still running is counted before a
        # round resumed beside it (or launched after it) takes one
        if self.rec.monitor_pid is not None and self.rec.monitor_start_time is not None:
            ref = JobRef(
                backend=self.rec.backend,
                pid=self.rec.monitor_pid,
                start_time=self.rec.monitor_start_time,
            )
            self._adopt_slot(self._recorded_layout(), ref)
        with self._ends_early():
            try:
                return await self._resume()
            finally:
                await self._release_slot()

    @contextlib.contextmanager
    def _ends_early(self) -> Iterator[None]:
        """The round's early end in ``early_ends`` while it is run."""
        ends, index = self.ctx.early_ends, self.rec.index
        ends[index] = self.early
        try:
            yield
        finally:
            if ends.get(index) is self.early:
                del ends[index]

    async def _run(self) -> RoundSummary:
        rnd = self.ctx.session_layout.round(self.rec.index)
        while True:
            if self.rec.attempt:
                _clear_round_files(rnd)
            ref, job = await self._launch(rnd)
            summary = await self._watch(rnd, ref, job, readopted=False)
            if summary is not None:
                return summary
            await self._mark_rerun("its monitor died", level=logging.WARNING)

    async def _resume(self) -> RoundSummary:
        backend = self.ctx.backend
        rnd = self._recorded_layout()
        job = self._job(rnd)
        ref = self._recorded_ref()
        if self.rec.status != RoundStatus.RUNNING and self.rec.launch_token is not None:
            # launched (the intent is stored) but never recorded as running
            ref = await self._unconfirmed_launch(rnd, job)
            if ref is None:
                self._log(logging.INFO, "its launch never started; launching it now")
                return await self._run()
            await self._confirm(ref)
        if ref is not None and ref.backend != backend.name:
            raise LaunchError(
                f"round {self.rec.index} of {self.ctx.session_id} runs on {ref.backend}, but "
                f"advanced.backend is now {backend.name}; change it back to resume",
                {"field": "advanced.backend", "round": self.rec.index},
            )
        if ref is not None and await _adoptable(backend, ref, job):
            self._adopt_slot(rnd, ref)
            summary = await self._readopt(rnd, ref, job)
            if summary is not None:
                return summary
            await self._mark_rerun("its monitor died", level=logging.WARNING)
        else:
            await self._end_lost_attempt(ref, job)
        return await self._run()

    # -- launching ----------------------------------------------------------------------

    def _job(
        self,
        rnd: RoundLayout,
        argv: tuple[str, ...] = (),
        env: Mapping[str, str] | None = None,
        cwd: str = "",
    ) -> RoundJob:
        spec = self.spec
        limits = spec.run.limits
        return RoundJob(
            argv=argv,
            env=dict(env or {}),
            cwd=cwd,
            rnd=rnd,
            name=_job_name(self.ctx.layout.project_root, self.ctx.session, self.rec),
            timeout_sec=spec.run.timeout_minutes * 60,
            grace_sec=float(spec.advanced.stop_grace_sec),
            guarded=self.ctx.guarded,
            token=self.rec.launch_token,
            limits=Limits(memory_mb=limits.memory_mb, processes=limits.processes),
        )

    async def _launch(self, rnd: RoundLayout) -> tuple[JobRef, RoundJob]:
        ctx, spec = self.ctx, self.spec
        rendered = await anyio.to_thread.run_sync(
            lambda: render_round(
                spec, rnd, self.rec.params, base_env=ctx.env, security_mode=ctx.security_mode
            )
        )
        if ctx.backend.name == "local":
            devices = await self._take_slot(rnd)
            env = gpus.slot_env(
                rendered.env, devices, project_env=spec.launch.env, parallel=spec.run.parallel
            )
            rendered = msgspec.structs.replace(rendered, env=env)
        if ctx.guarded:
            rendered = wrap(rendered, spec, rnd, network=spec.advanced.network, caller_env=ctx.env)
        rnd.session.artifacts.mkdir(parents=True, exist_ok=True)
        # The launch intent goes to the store before anything starts: a daemon killed
        # from here on finds the token, and with it what the launch started (or revokes
        # it), so the round's command never runs twice.
        crash_point("launch.before_intent")
        self.rec = await ctx.store.update_round(
            ctx.session,
            self.rec.index,
            launch_token=secrets.token_hex(8),
            control_layout=CONTROL_LAYOUT,
            command=rendered.display,
            config_path=rendered.config_path,
            attempt=self.rec.attempt,
        )
        crash_point("launch.after_intent")
        job = self._job(rnd, rendered.argv, rendered.env, rendered.cwd)
        ref = await ctx.backend.submit(job)
        crash_point("launch.after_submit")
        if ref.pid is not None:
            ctx.monitors[self.rec.index] = ref.pid
        self.rec = await ctx.store.update_round(
            ctx.session,
            self.rec.index,
            status=RoundStatus.RUNNING,
            command=rendered.display,
            config_path=rendered.config_path,
            monitor_pid=ref.pid,
            monitor_start_time=ref.start_time,
            backend=ref.backend,
            job_id=ref.job_id,
            started_at=time.time(),
            attempt=self.rec.attempt,
        )
        crash_point("launch.after_record")
        rec = self.rec
        ctx.emit(
            ev.RoundStarted(
                round=rec.index,
                params=rec.params,
                diff=rec.diff,
                hypothesis=rec.hypothesis,
                command=rendered.display,
                attempt=rec.attempt,
                backend=ref.backend,
                job_id=ref.job_id,
                batch=rec.batch,
                gpus=list(self._slot) if self._slot is not None else None,
                rung=rec.rung,
                budget=rec.budget,
                promoted_from=rec.promoted_from,
            )
        )
        return ref, job

    # -- GPU slots (trainee.launch.gpus) ------------------------------------------------

    async def _take_slot(self, rnd: RoundLayout) -> tuple[int, ...] | None:
        """The GPU slot of this round's launch (None: a CPU round), waited for when every
        GPU is taken; a stop while waiting launches it without one (it stops at once)."""
        if self._slot is not None:
            return self._slot
        if self.spec.launch.gpus == "none":
            return None
        pool = self.ctx.gpu_slots
        probe = await anyio.to_thread.run_sync(pool.probe)
        devices, note = gpus.wanted_gpus(self.spec, probe)
        if note:
            self._log(logging.INFO, note)
        if not devices:
            return None

        def waiting(detail: str) -> None:
            self._log(logging.INFO, detail)
            self.ctx.emit(
                ev.RoundState(round=self.rec.index, state=str(JobState.QUEUED), detail=detail)
            )

        per_gpu = self.spec.launch.rounds_per_gpu
        async with anyio.create_task_group() as tg:

            async def on_stop() -> None:
                await self.ctx.stop_requested.wait()
                tg.cancel_scope.cancel()

            tg.start_soon(on_stop)
            self._slot = await pool.acquire(str(rnd.dir), devices, per_gpu, on_wait=waiting)
            self._slot_dir = str(rnd.dir)
            tg.cancel_scope.cancel()
        return self._slot

    def _adopt_slot(self, rnd: RoundLayout, ref: JobRef) -> None:
        """A re-adopted local round keeps the GPUs its monitor was started with."""
        if self._slot is not None or ref.backend != "local":
            return
        if ref.pid is None or ref.start_time is None:
            return
        slot = gpus.slot_of_monitor(ref.pid, ref.start_time)
        if slot is not None:
            self._slot, self._slot_dir = slot, str(rnd.dir)
            self.ctx.gpu_slots.adopt(self._slot_dir, slot)

    async def _release_slot(self) -> None:
        """Give the round's GPU slot back once its whole process tree has exited (a
        daemon shutting down gives it back at once: the next daemon re-adopts it)."""
        if self._slot is None or self._slot_dir is None:
            return
        try:
            # the monitor reaps the job's tree before it exits; what it missed (it died)
            # has the stop grace and a margin before it is killed
            await self.ctx.gpu_slots.release(
                self._slot_dir,
                self._slot_dir,
                kill_after=float(self.spec.advanced.stop_grace_sec) + ORPHAN_MARGIN_SEC,
            )
        finally:
            self._slot = self._slot_dir = None

    async def _mark_rerun(self, why: str, *, level: int = logging.INFO) -> None:
        """The round's attempt is lost (no exit record): run it again, same params."""
        self._log(level, f"{why}; re-running it")
        self.ctx.emit(ev.RoundRerun(round=self.rec.index, attempt=self.rec.attempt + 1))
        self.rec = await self.ctx.store.update_round(
            self.ctx.session,
            self.rec.index,
            status=RoundStatus.PENDING,
            attempt=self.rec.attempt + 1,
        )

    # -- re-adopting --------------------------------------------------------------------

    def _recorded_layout(self) -> RoundLayout:
        """Where the round's files are (a round launched before the control folder
        existed keeps its control files in its workspace)."""
        legacy = self.rec.control_layout < CONTROL_LAYOUT
        return self.ctx.session_layout.round(self.rec.index, legacy=legacy)

    def _recorded_ref(self) -> JobRef | None:
        rec = self.rec
        if rec.job_id is None and (rec.monitor_pid is None or rec.monitor_start_time is None):
            return None
        return JobRef(
            backend=rec.backend,
            job_id=rec.job_id,
            pid=rec.monitor_pid,
            start_time=rec.monitor_start_time,
            token=rec.launch_token,
        )

    async def _confirm(self, ref: JobRef) -> None:
        """Record as running the job an unconfirmed launch started."""
        self.rec = await self.ctx.store.update_round(
            self.ctx.session,
            self.rec.index,
            status=RoundStatus.RUNNING,
            monitor_pid=ref.pid,
            monitor_start_time=ref.start_time,
            job_id=ref.job_id,
            backend=ref.backend,
            started_at=self.rec.started_at or time.time(),
        )

    async def _unconfirmed_launch(self, rnd: RoundLayout, job: RoundJob) -> JobRef | None:
        """What the launch recorded by its token (but never confirmed as running) started:
        the job it left in the control folder, else the one that claimed the launch; None
        when nothing did, after revoking the launch so that nothing ever will."""
        backend = self.ctx.backend
        token = self.rec.launch_token
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
        self._log(logging.WARNING, f"launch {token} started but left no way to find it")
        return JobRef(backend=backend.name, token=token)

    async def _readopt(self, rnd: RoundLayout, ref: JobRef, job: RoundJob) -> RoundSummary | None:
        name = f"{ref.backend} job {ref.job_id}" if ref.job_id else f"its monitor (pid {ref.pid})"
        self._log(logging.INFO, f"re-adopting {name}")
        self.ctx.emit(
            ev.RoundReadopted(
                round=self.rec.index, pid=ref.pid, job_id=ref.job_id, backend=ref.backend
            )
        )
        return await self._watch(rnd, ref, job, readopted=True)

    async def _end_lost_attempt(self, ref: JobRef | None, job: RoundJob) -> None:
        """A round that cannot be re-adopted: when it was launched (recorded as running,
        or launched before the daemon could record it), end what is left of that launch
        and count it as a lost attempt; a round never launched is left as it is."""
        stray = None
        if self.rec.status != RoundStatus.RUNNING and self.rec.launch_token is None:
            # a launch with a token was decided by :meth:`resume`
            stray = self.ctx.backend.unrecorded(job)
            if stray is None:
                return
            ref = stray
            self._log(logging.INFO, "ending a launch that was never recorded")
        if ref is not None:
            # The job of the lost attempt may outlive its monitor: it must not run on
            # beside the new attempt.
            killed = await self.ctx.backend.end_lost(ref, job)
            if killed:
                self._log(
                    logging.WARNING, f"ended what was left of the lost attempt: {', '.join(killed)}"
                )
        await self._mark_rerun("its job is gone")

    # -- watching and judging -----------------------------------------------------------

    async def _watch(
        self, rnd: RoundLayout, ref: JobRef, job: RoundJob, *, readopted: bool
    ) -> RoundSummary | None:
        """Watch the attempt to its end and judge it; None when its monitor died and the
        round is to run again. Its monitor's pid is in ``monitors`` meanwhile."""
        if ref.pid is not None:
            self.ctx.monitors[self.rec.index] = ref.pid
        try:
            watch = _Watch(self, rnd, ref, job, readopted=readopted)
            exit_info = await watch.wait()
        finally:
            self.ctx.monitors.pop(self.rec.index, None)
        if (
            exit_info.lost
            and not self.ctx.stop_requested.is_set()
            and self.rec.attempt < MAX_ATTEMPTS - 1
        ):
            return None  # the caller re-runs the round with its recorded params
        return await self._judge(watch, exit_info)

    async def _judge(self, watch: _Watch, exit_info: ExitInfo) -> RoundSummary:
        """The round's final status, metrics and verdict: stored, then announced."""
        ctx, rec = self.ctx, self.rec
        extractor = watch.extractor
        extractor_points = await anyio.to_thread.run_sync(extractor.read_files)
        if extractor_points:
            await ctx.store.add_points(ctx.session, rec.index, _rows(extractor_points))
        metrics = extractor.result()
        status = status_of(exit_info, metrics.missing_required)
        # stopped because a run.prune rule or an agent said so (not by the user): pruned,
        # with the reason
        pruned = self.early.decision
        if pruned is not None and status == RoundStatus.STOPPED and not ctx.stop_requested.is_set():
            status = RoundStatus.PRUNED
            exit_info = msgspec.structs.replace(exit_info, error=pruned.error)
        warnings = [w.message for w in metrics.warnings]
        if exit_info.error and status != RoundStatus.COMPLETED:
            warnings.insert(0, exit_info.error)
        finals = {k: v for k, v in metrics.finals.items() if math.isfinite(v)}
        primary = finals.get(metrics.primary) if metrics.primary else None
        failed = status in (RoundStatus.FAILED, RoundStatus.TIMED_OUT)
        failure_tail = watch.tail_lines[-FAILURE_TAIL_LINES:] if failed else []
        judged = ctx.judge(
            RoundSummary(
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
                error=(exit_info.error or "") if status == RoundStatus.PRUNED else "",
                rung=rec.rung,
                rungs=len(self.spec.run.screen.rungs) if self.spec.run.screen and rec.rung else 0,
                budget=rec.budget,
            )
        )
        self.rec = await ctx.store.update_round(
            ctx.session,
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
            **watch.saved_position(),
        )
        best = await ctx.on_finished(judged)
        ctx.emit(
            ev.RoundFinished(
                round=rec.index,
                status=status,
                metric=primary,
                metric_name=metrics.primary,
                finals=finals,
                verdict=judged.verdict,
                verdict_reason=judged.verdict_reason,
                duration_sec=exit_info.duration_sec,
                returncode=exit_info.returncode,
                error=exit_info.error if status != RoundStatus.COMPLETED else None,
                batch=rec.batch,
                best_round=best,
            )
        )
        return judged

    def _log(self, level: int, message: str) -> None:
        log.log(level, "%s round %d: %s", self.ctx.session_id, self.rec.index, message)


class _Watch:
    """One attempt of a round watched until its job ends: its output and log files
    tailed (events, metrics, the failure tail), the passive activity signals, the
    metric files polled, and a stop request passed on to the job."""

    def __init__(
        self, run: RoundRun, rnd: RoundLayout, ref: JobRef, job: RoundJob, *, readopted: bool
    ) -> None:
        ctx, spec, rec = run.ctx, run.spec, run.rec
        self.ctx, self.spec, self.rec = ctx, spec, rec
        self.early = run.early
        self.rnd, self.ref, self.job = rnd, ref, job
        self.round_log = str(rnd.log)
        placeholders = rnd.placeholders()
        cwd = relative_base(spec, rnd, ctx.security_mode)
        self.extractor = Extractor(
            spec.metrics.specs,
            placeholders=placeholders,
            project_root=str(ctx.layout.project_root),
            cwd=cwd,
            # a wandb_summary without path: the newest W&B run of this round, found
            # below the round's WANDB_DIR or the folder the job ran in (its summary is
            # written while the job runs, so after this time)
            wandb_dirs=(
                build_env(spec, rnd, {}, create=False)["WANDB_DIR"],
                job_cwd(spec, rnd, ctx.security_mode),
            ),
            since=rec.started_at or time.time(),
        )
        # Re-parse from the start for metrics; show only what was not shown before.
        self.shown_until = rec.log_offset if readopted else 0
        # the files tailed and watched are the job's: read only inside the project, its
        # .trainee/ and the session's artifacts, never through a link leading elsewhere
        project = ctx.layout
        self.within = [
            str(project.project_root.resolve()),
            str(project.trainee_dir.resolve()),
            str(rnd.session.artifacts.resolve()),
        ]
        self.patterns = [self.round_log] + [
            _fill(p, placeholders, cwd) for p in spec.advanced.log_paths
        ]
        self.offsets: dict[str, int] = {}
        self.tail_lines: list[str] = []
        self.last_activity = time.time()
        self.last_save = 0.0
        self.stop_tail = anyio.Event()
        self.tail_finished = anyio.Event()
        self.activity = Activity(started_at=time.time(), within=self.within)
        self.mtime_globs, self.heartbeat_globs = _signal_globs(spec, placeholders, cwd)
        self.pruning: RoundPruning | None = None
        """``run.prune``'s rules for this attempt (set when the watch starts)."""

    def saved_position(self) -> dict[str, Any]:
        """How far the round's files were read and when it was last active (stored so
        that a re-adopting daemon shows only what was not shown)."""
        return {
            "log_offset": self.offsets.get(self.round_log, 0),
            "tail_offsets": dict(self.offsets),
            "last_activity_at": self.last_activity,
        }

    async def wait(self) -> ExitInfo:
        """Until the job ends: how it ended. When supervising fails (e.g. the store stops
        answering) the job is stopped, the round recorded as failed, and the cause raised."""
        backend = self.ctx.backend
        self.pruning = await RoundPruning.start(
            self.ctx.store, self.spec, self.ctx.session, self.rec, self.early
        )
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._run_tail)
                tg.start_soon(self._pass_on_stop)
                tg.start_soon(
                    self.early.stop_when_requested,
                    functools.partial(
                        backend.cancel, self.ref, self.job, reason=RoundStatus.STOPPED
                    ),
                    f"{self.ctx.session_id} round {self.rec.index}",
                )
                if self.mtime_globs or self.heartbeat_globs:
                    tg.start_soon(self._watch_signals)
                if self.extractor.polled:
                    tg.start_soon(self._poll_metric_files)
                exit_info = await backend.wait(self.ref, self.job, on_state=self._on_state)
                self.stop_tail.set()
                # the tailer drains every file to its end after ``stop``, then returns
                with anyio.move_on_after(TAIL_DRAIN_SEC):
                    await self.tail_finished.wait()
                tg.cancel_scope.cancel()
        except anyio.get_cancelled_exc_class():
            raise  # daemon shutdown: the round runs on and the next daemon re-adopts it
        except BaseException as exc:
            # the round must not run on unwatched
            with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                with anyio.fail_after(60):
                    await backend.cancel(self.ref, self.job, reason=RoundStatus.STOPPED)
            with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                await self.ctx.store.update_round(
                    self.ctx.session, self.rec.index, status=RoundStatus.FAILED
                )
            raise _first_error(exc) from exc
        return exit_info

    async def _run_tail(self) -> None:
        try:
            await tail_files(
                self.patterns,
                self._on_batch,
                stop=self.stop_tail,
                offsets=self.offsets,
                within=self.within,
            )
        finally:
            self.tail_finished.set()

    async def _on_batch(self, lines: list[Line]) -> None:
        out_lines: list[ev.OutputLine] = []
        by_file: dict[str, list[str]] = {}
        for line in lines:
            if line.path == self.round_log:
                by_file.setdefault("", []).append(line.text)
                if line.raw_offset >= self.shown_until:
                    out_lines.append(ev.OutputLine(stream=line.stream, text=line.text))
                self.tail_lines.append(line.text)
            else:
                by_file.setdefault(line.path, []).append(line.text)
        if len(self.tail_lines) > FAILURE_TAIL_LINES * 4:
            del self.tail_lines[:-FAILURE_TAIL_LINES]
        points: list[MetricPoint] = []
        if by_file:
            # off the event loop: the patterns run with a time budget, GIL released
            points = await anyio.to_thread.run_sync(_extract, self.extractor, by_file)
            if self.pruning is not None:
                self.pruning.feed(points, self.extractor.nonfinite())
        if lines:
            self.last_activity = time.time()
        if out_lines:
            skipped = max(0, len(out_lines) - OUTPUT_LINES_PER_EVENT)
            self.ctx.emit(
                ev.Output(
                    round=self.rec.index,
                    lines=out_lines[-OUTPUT_LINES_PER_EVENT:],
                    skipped=skipped,
                )
            )
        await self._add_points(points)
        now = time.time()
        if now - self.last_save >= OFFSET_SAVE_INTERVAL:
            self.last_save = now
            await self.ctx.store.update_round(
                self.ctx.session, self.rec.index, **self.saved_position()
            )
            self._emit_activity()

    async def _add_points(self, points: list[MetricPoint]) -> None:
        if points:
            rows = _rows(points)
            await self.ctx.store.add_points(self.ctx.session, self.rec.index, rows)
            self.ctx.emit(ev.Metric(round=self.rec.index, points=rows[-500:]))

    def _emit_activity(self) -> None:
        self.ctx.emit(ev.Activity(round=self.rec.index, last_activity_at=self.last_activity))

    async def _pass_on_stop(self) -> None:
        await self.ctx.stop_requested.wait()
        # a cluster that does not answer at once must not turn a stop into a failure:
        # try again, and let wait() decide how the job ended
        for attempt in range(STOP_ATTEMPTS):
            try:
                await self.ctx.backend.cancel(self.ref, self.job, reason=RoundStatus.STOPPED)
                return
            except TraineeError as exc:
                log.warning(
                    "%s round %d: stopping its job failed (%s); trying again",
                    self.ctx.session_id,
                    self.rec.index,
                    exc.message,
                )
                await anyio.sleep(2.0 * (attempt + 1))

    async def _on_state(self, state: JobState, detail: str) -> None:
        self.ctx.emit(ev.RoundState(round=self.rec.index, state=str(state), detail=detail))

    async def _watch_signals(self) -> None:
        """Passive: log-file mtimes and heartbeat files only update the activity time."""
        while True:
            await anyio.sleep(self.spec.advanced.heartbeat_interval_sec)
            files = await anyio.to_thread.run_sync(_expand, self.mtime_globs)
            beats = await anyio.to_thread.run_sync(_expand, self.heartbeat_globs)
            self.activity.scan(files, beats)
            seen = self.activity.last_activity_at
            if seen is not None and seen > self.last_activity:
                self.last_activity = seen
                await self.ctx.store.update_round(
                    self.ctx.session, self.rec.index, last_activity_at=seen
                )
                self._emit_activity()

    async def _poll_metric_files(self) -> None:
        """The tensorboard and csv sources, read again every heartbeat interval."""
        while True:
            await anyio.sleep(self.spec.advanced.heartbeat_interval_sec)
            points = await anyio.to_thread.run_sync(self.extractor.poll_files)
            await self._add_points(points)
            if self.pruning is not None:
                self.pruning.feed(points, self.extractor.nonfinite())


def status_of(info: ExitInfo, missing_required: list[str]) -> RoundStatus:
    """A finished round's status from how its job ended and the metrics it lacks."""
    if info.stopped:
        return RoundStatus.STOPPED
    if info.timed_out:
        return RoundStatus.TIMED_OUT
    if info.lost or info.returncode != 0 or info.signal:
        return RoundStatus.FAILED  # a job with no exit status of its own (None) failed
    if missing_required:
        return RoundStatus.COMPLETED_WITHOUT_METRICS
    return RoundStatus.COMPLETED


def _rows(points: list[MetricPoint]) -> list[tuple[str, float, int | None, int]]:
    return [(p.name, p.value, p.step, p.seq) for p in points]


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
