"""One running session's integrations: a subscriber of the event bus beside the runner.

The session manager makes one per running session (:class:`SessionIntegrations`), which
subscribes at once (nothing the runner publishes falls before it) and runs as its own
task. It reads the store when a round or the session ends, hands snapshots to the
exporters' and the notifier's threads (:mod:`trainee.integrations.worker`) and goes
on; the runner never waits for it. What fails is logged (redacted) and, for a round's
export, added to the round's warnings. Checks that need a clock (a stalled round, the
time budget) run every :data:`TICK_SEC`.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote, urlsplit

import anyio
import anyio.from_thread

from trainee import events as ev
from trainee.errors import TraineeError
from trainee.integrations.config import Plan, missing_extra, plan_of, secrets_of
from trainee.integrations.notify import (
    AppriseSender,
    Message,
    budget_message,
    finished_message,
    new_best_message,
    resumed_message,
    round_failed_message,
    stalled_message,
)
from trainee.integrations.snapshot import RoundSnapshot, SessionEnd, SessionInfo
from trainee.integrations.worker import Worker
from trainee.launch.layout import SessionLayout
from trainee.llm.settings import load_notify, redact
from trainee.spec import ProjectSpec, load_project
from trainee.spec.files import NotifySpec
from trainee.states import ROUND_FINISHED, RoundStatus
from trainee.store.db import Store
from trainee.store.records import RoundRecord, SessionRecord

__all__ = ["DRAIN_SEC", "SUBSCRIBED_KINDS", "TICK_SEC", "SessionIntegrations"]

log = logging.getLogger("trainee.integrations")

SUBSCRIBED_KINDS = tuple(
    ev.kind_of(t)
    for t in (
        ev.SessionStartedEvent,
        ev.SessionFinishedEvent,
        ev.RoundStartedEvent,
        ev.RoundReadoptedEvent,
        ev.RoundFinishedEvent,
        ev.ActivityEvent,
        ev.DecisionEvent,
    )
)
TICK_SEC = 1.0
"""How often stalled rounds and the time budget are looked at."""
DRAIN_SEC = 300.0
"""After the session ended, how long its exports may take before they are left behind."""
BUDGET_STEPS = (80, 100)
_MESSAGE_LEN = 500


class EventSource(Protocol):
    """What :meth:`trainee.session.bus.EventBus.subscribe` returns (the first item)."""

    dropped: bool

    async def next_batch(self, *, timeout: float | None = None) -> list[ev.Event] | None: ...

    def close(self) -> None: ...


Subscribe = Callable[[int | None], tuple[EventSource, list[ev.Event], bool]]
"""``subscribe(since)`` -> (subscription, backlog after ``since``, gap)."""


class SessionIntegrations:
    """MLflow, W&B and notifications for one session, fed by the bus."""

    def __init__(
        self,
        *,
        store: Store,
        record: SessionRecord,
        layout: SessionLayout,
        subscribe: Subscribe,
        http_url: str = "",
        restarted: bool = False,
        user_notify: Callable[[], NotifySpec | None] = load_notify,
    ) -> None:
        self.store = store
        self.record = record
        self.layout = layout
        self._subscribe = subscribe
        self._source, self._backlog, _ = subscribe(None)
        self._http_url = http_url.rstrip("/")
        self._restarted = restarted
        self._user_notify = user_notify
        self._ended = anyio.Event()
        self._last_id: int | None = None
        self._portal: anyio.from_thread.BlockingPortal | None = None
        self._warn_lock = anyio.Lock()
        self._pending_notes: list[str] = []
        self.workers: dict[str, Worker[Any]] = {}
        self.notifier: Worker[Message] | None = None
        self.plan = Plan()
        self.info: SessionInfo | None = None
        self.spec: ProjectSpec | None = None
        # what the notifications need to know
        self._running: dict[int, float] = {}
        self._stalled: set[int] = set()
        self._budget_sent: set[tuple[str, int]] = set()
        self._rounds_done = 0
        self._baseline: float | None = None
        self._best: float | None = None
        self._secrets: list[str] = []

    # -- lifecycle ----------------------------------------------------------------------

    def session_ended(self) -> None:
        """The runner's task ended (with or without a session.finished event)."""
        self._ended.set()

    async def run(self) -> None:
        try:
            self.plan = await self._plan()
            if not self.plan:
                return
            async with anyio.from_thread.BlockingPortal() as portal:
                self._portal = portal
                try:
                    self._start_workers()
                    await self._begin()
                    await self._consume()
                finally:
                    with anyio.CancelScope(shield=True):
                        await self._drain()
                    self._portal = None
        except anyio.get_cancelled_exc_class():
            raise
        except Exception:
            log.exception("%s: the integrations stopped", self.record.id)
        finally:
            self._source.close()

    async def _plan(self) -> Plan:
        root = self.record.project_root
        try:
            self.spec = await anyio.to_thread.run_sync(load_project, root)
        except TraineeError:
            self.spec = None  # the session fails on it; the user's notifications still go
        try:
            user = await anyio.to_thread.run_sync(self._user_notify)
        except TraineeError as exc:
            log.warning("notifications of ~/.trainee/config.json are off: %s", exc.message)
            user = None
        plan = plan_of(root, self.spec.integrations if self.spec else None, user)
        if plan.mlflow is not None:
            self._secrets += [p for p in [_password(plan.mlflow.tracking_uri)] if p]
        if plan.notify is not None:
            self._secrets += secrets_of(plan.notify.urls)
        return plan

    def _start_workers(self) -> None:
        artifacts = self.layout.artifacts
        plan = self.plan
        sid = self.record.id
        if plan.mlflow is not None and not self._missing("mlflow"):
            from trainee.integrations import mlflow_sink

            mlflow_sink.prepare_environment(plan.mlflow)
            sink = mlflow_sink.MlflowSink(plan.mlflow, artifacts)
            self.workers["MLflow"] = Worker(
                f"trainee-mlflow-{sid}", sink.handle, self._on_error("MLflow")
            )
        if plan.wandb is not None and not self._missing("wandb"):
            from trainee.integrations import wandb_sink

            wandb_sink.prepare_environment()
            wsink = wandb_sink.WandbSink(plan.wandb, artifacts)
            self.workers["W&B"] = Worker(
                f"trainee-wandb-{sid}", wsink.handle, self._on_error("W&B")
            )
        if plan.notify is not None and not self._missing("notify"):
            sender = AppriseSender(plan.notify.urls)
            self.notifier = Worker(f"trainee-notify-{sid}", sender.handle, self._notify_failed)

    def _missing(self, integration: str) -> bool:
        advice = missing_extra(integration)
        if advice:
            text = f"integrations.{integration} is configured but {advice}"
            log.warning("%s: %s", self.record.id, text)
            self._pending_notes.append(text)
        return advice is not None

    async def _drain(self) -> None:
        """Let the threads finish what is queued (bounded), reporting through the portal."""
        workers = [*self.workers.values(), *([self.notifier] if self.notifier else [])]
        for w in workers:
            w.close()
        deadline = time.monotonic() + DRAIN_SEC
        for w in workers:
            left = deadline - time.monotonic()
            if left <= 0 or not await anyio.to_thread.run_sync(
                w.wait, left, abandon_on_cancel=True
            ):
                log.warning("%s: %s is still busy; leaving it behind", self.record.id, w.name)

    # -- start ------------------------------------------------------------------------------

    async def _begin(self) -> None:
        rec = await self.store.get_session(self.record.index)
        self.record = rec
        spec = self.spec
        metric = spec.metrics.specs[0] if spec and spec.metrics.specs else None
        root = rec.project_root
        self.info = SessionInfo(
            project=Path(root).name,
            project_root=root,
            session=rec.id,
            policy=rec.policy,
            started_at=rec.created_at,
            page_url=(
                f"{self._http_url}/#/session?project={quote(root, safe='')}&id={rec.id}"
                if self._http_url
                else ""
            ),
            metric_name=metric.name if metric else None,
            goal=str(metric.goal) if metric else "min",
            max_rounds=rec.max_rounds,
            artifacts_dir=str(self.layout.artifacts),
        )
        for w in self.workers.values():
            self._submit(w, self.info)
        rounds = await self.store.list_rounds(rec.index)
        done = [r for r in rounds if r.status in ROUND_FINISHED]
        self._rounds_done = len([r for r in done if r.status != RoundStatus.STOPPED])
        for r in done:
            if r.verdict == "baseline":
                self._baseline = r.primary_metric
        best = next((r for r in rounds if r.index == rec.best_round), None)
        self._best = best.primary_metric if best else None
        self._running = {
            r.index: r.last_activity_at or time.time()
            for r in rounds
            if r.status == RoundStatus.RUNNING
        }
        self._check_budgets(rec, notify=False)  # what was crossed before this start is old news
        if self.workers and done:  # rounds that ended while nothing exported them
            for r in done:
                snap = await self._snapshot(r)
                for w in self.workers.values():
                    self._submit(w, snap)
        if self._restarted:
            unfinished = [r.index for r in rounds if r.status not in ROUND_FINISHED]
            self._notify(resumed_message(self.info, self._rounds_done, unfinished))

    # -- events -----------------------------------------------------------------------------

    async def _consume(self) -> None:
        pending, self._backlog = self._backlog, []
        last_tick = time.monotonic()
        while True:
            for event in pending:
                if await self._on(event):
                    return
            batch = await self._source.next_batch(timeout=TICK_SEC)
            if batch is None:
                if not self._source.dropped:
                    return
                # fell behind the bus: subscribe again from the last event seen
                self._source.close()
                self._source, pending, _ = self._subscribe(self._last_id)
                continue
            pending = batch
            if time.monotonic() - last_tick < TICK_SEC:
                continue
            last_tick = time.monotonic()
            await self._tick()
            if self._ended.is_set() and not batch:
                # the runner ended without a session.finished: take what is queued, stop
                while rest := await self._source.next_batch(timeout=0):
                    pending.extend(rest)
                for event in pending:
                    if await self._on(event):
                        return
                return

    async def _on(self, event: ev.Event) -> bool:
        """Handle one event; True once the session has finished."""
        self._last_id = event.id
        data = event.data
        if isinstance(data, ev.RoundStarted | ev.RoundReadopted):
            self._running[data.round] = time.time()
            self._stalled.discard(data.round)
        elif isinstance(data, ev.Activity) and data.round in self._running:
            at = data.last_activity_at
            if at is not None and math.isfinite(at):
                self._running[data.round] = max(self._running[data.round], float(at))
                self._stalled.discard(data.round)
        elif isinstance(data, ev.RoundFinished):
            self._running.pop(data.round, None)
            self._stalled.discard(data.round)
            await self._round_finished(data.round)
        elif isinstance(data, ev.Decision):
            self._check_budgets(await self.store.get_session(self.record.index))
        elif isinstance(data, ev.SessionFinished):
            await self._session_finished(data)
            return True
        return False

    async def _round_finished(self, index: int) -> None:
        assert self.info is not None
        rec = await self.store.get_round(self.record.index, index)
        if self._pending_notes:
            notes, self._pending_notes = self._pending_notes, []
            for note in notes:
                await self._add_warning(index, note)
            rec = await self.store.get_round(self.record.index, index)
        snap = await self._snapshot(rec)
        for w in self.workers.values():
            self._submit(w, snap)
        if rec.status in ROUND_FINISHED and rec.status != RoundStatus.STOPPED:
            self._rounds_done += 1
        if rec.verdict == "baseline":
            self._baseline = self._best = rec.primary_metric
        elif rec.verdict == "kept" and rec.primary_metric is not None:
            self._notify(new_best_message(snap, self._best, self._baseline))
            self._best = rec.primary_metric
        failed = round_failed_message(snap)
        if failed is not None:
            self._notify(failed)
        self._check_budgets(await self.store.get_session(self.record.index))

    async def _session_finished(self, data: ev.SessionFinished) -> None:
        assert self.info is not None
        rec = await self.store.get_session(self.record.index)
        rounds = await self.store.list_rounds(rec.index)
        best = data.best_params
        end = SessionEnd(
            info=self.info,
            status=rec.status,
            stop_reason=rec.stop_reason,
            error=rec.error,
            best_round=rec.best_round,
            best_metric=_number(data.best_metric),
            best_params=best if isinstance(best, dict) else None,
            baseline_metric=_number(data.baseline_metric),
            rounds=len(
                [
                    r
                    for r in rounds
                    if r.status in ROUND_FINISHED and r.status != RoundStatus.STOPPED
                ]
            ),
            report_path=str(self.layout.report),
            finished_at=rec.finished_at or time.time(),
        )
        for w in self.workers.values():
            self._submit(w, end)
        self._notify(finished_message(end))

    async def _snapshot(self, rec: RoundRecord) -> RoundSnapshot:
        assert self.info is not None
        points = await self.store.points(self.record.index, rec.index)
        return RoundSnapshot(
            info=self.info,
            index=rec.index,
            status=rec.status,
            params=dict(rec.params),
            diff=dict(rec.diff),
            hypothesis=rec.hypothesis,
            expected=rec.expected,
            verdict=rec.verdict,
            verdict_reason=rec.verdict_reason,
            finals=dict(rec.finals),
            primary=rec.primary_metric,
            started_at=rec.started_at,
            ended_at=rec.ended_at,
            returncode=rec.returncode,
            signal=rec.signal,
            command=rec.command,
            attempt=rec.attempt,
            batch=rec.batch,
            warnings=tuple(rec.warnings),
            failure_tail=tuple(rec.failure_tail),
            points=tuple((p.name, p.value, p.step, p.seq) for p in points),
            log_path=str(self.layout.round(rec.index).log),
            config_path=rec.config_path,
        )

    # -- clocks and budgets ---------------------------------------------------------------

    async def _tick(self) -> None:
        notify = self.plan.notify
        if notify is None or self.info is None:
            return
        now = time.time()
        for index, seen in list(self._running.items()):
            if index not in self._stalled and now - seen >= notify.stall_sec:
                self._stalled.add(index)
                self._notify(stalled_message(self.info, index, now - seen))
        self._check_time(now)

    def _check_time(self, now: float, notify: bool = True) -> None:
        spec = self.spec
        minutes = spec.run.max_session_minutes if spec else None
        if minutes is not None:
            used = (now - self.record.created_at) / 60
            self._budget("time", used, minutes, f"{used:.0f}", f"{minutes:g} min", notify)

    def _check_budgets(self, rec: SessionRecord, *, notify: bool = True) -> None:
        self._budget(
            "round",
            self._rounds_done,
            rec.max_rounds,
            str(self._rounds_done),
            f"{rec.max_rounds} rounds",
            notify,
        )
        llm = self.spec.llm if self.spec else None
        if llm is not None and llm.max_tokens is not None:
            self._budget(
                "token", rec.tokens, llm.max_tokens, str(rec.tokens), f"{llm.max_tokens}", notify
            )
        if llm is not None and llm.max_usd is not None:
            self._budget(
                "cost",
                rec.cost_usd,
                llm.max_usd,
                f"${rec.cost_usd:.2f}",
                f"${llm.max_usd:.2f}",
                notify,
            )
        if not notify:
            self._check_time(time.time(), notify=False)

    def _budget(
        self, what: str, used: float, limit: float, shown: str, of: str, notify: bool
    ) -> None:
        """One message per budget and step (80 %, 100 %); when several steps are crossed
        at once only the highest is told."""
        if limit <= 0:
            return
        crossed = [p for p in BUDGET_STEPS if used >= limit * p / 100]
        new = [p for p in crossed if (what, p) not in self._budget_sent]
        if not new:
            return
        self._budget_sent.update((what, p) for p in crossed)
        if notify and self.info is not None:
            self._notify(budget_message(self.info, what, shown, of, max(new)))

    # -- handing over to the threads ------------------------------------------------------

    def _submit(self, worker: Worker[Any], item: Any) -> None:
        if not worker.submit(item):
            what = f"round {item.index}" if isinstance(item, RoundSnapshot) else "the session"
            log.warning(
                "%s: %s is behind (its queue is full); %s is not exported",
                self.record.id,
                worker.name,
                what,
            )

    def _notify(self, msg: Message) -> None:
        notify = self.plan.notify
        if notify is None or self.notifier is None or msg.event not in notify.on:
            return
        if not self.notifier.submit(msg):
            log.warning("%s: notifications are behind; dropped %r", self.record.id, msg.title)

    def _on_error(self, sink: str) -> Callable[[Any, BaseException], None]:
        def report(item: Any, exc: BaseException) -> None:
            text = self._redact(f"{sink} export failed: {type(exc).__name__}: {exc}")
            what = f"round {item.index}" if isinstance(item, RoundSnapshot) else "the session"
            log.warning("%s %s: %s", self.record.id, what, text)
            portal = self._portal
            if isinstance(item, RoundSnapshot) and portal is not None:
                # RuntimeError: the session's integrations have ended; the log has it
                with contextlib.suppress(RuntimeError):
                    portal.start_task_soon(self._add_warning, item.index, text)

        return report

    def _notify_failed(self, msg: Message, exc: BaseException) -> None:
        log.warning(
            "%s: the notification %r was not sent: %s",
            self.record.id,
            msg.title,
            self._redact(str(exc) or type(exc).__name__),
        )

    def _redact(self, text: str) -> str:
        text = redact(text, self._secrets)
        return text if len(text) <= _MESSAGE_LEN else text[: _MESSAGE_LEN - 3] + "..."

    async def _add_warning(self, index: int, text: str) -> None:
        """Append ``text`` to the round's warnings (the runner is done with the round)."""
        async with self._warn_lock:
            try:
                rec = await self.store.get_round(self.record.index, index)
                if text not in rec.warnings:
                    await self.store.update_round(
                        self.record.index, index, warnings=[*rec.warnings, text]
                    )
            except TraineeError as exc:
                log.warning("%s round %d: cannot add a warning: %s", self.record.id, index, exc)


def _password(uri: str) -> str | None:
    try:
        return urlsplit(uri).password
    except ValueError:
        return None


def _number(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None
