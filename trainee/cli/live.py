"""The live session view of ``trainee run`` and ``trainee attach``.

On a terminal, what happens is printed as it happens (a header per round, each
decision with its hypothesis, change and expectation, each round's result), while
the bottom of the screen keeps a live status line, ``round n/N · elapsed · best vs
baseline``, under a bounded tail of the running round's output (rich Live).
``--full-output`` prints every output line instead of the tail. When stdout is not
a terminal the view is plain lines: the job's output only with ``--full-output``,
throttled metric lines, and the status line after each round. A missing value
prints an en dash. The session ends with a table of its rounds and the report path.

Ctrl-C: in ``run`` the first asks the session to stop and keeps watching, a second
detaches; in ``attach`` the first detaches (the session goes on) and says how to
stop it. When the daemon goes away mid-session the view starts one (which
re-adopts and resumes the session) and watches on from the last event it showed.
"""

from __future__ import annotations

import contextlib
import re
import sys
import threading
import time
from collections import deque

import msgspec

from trainee import errors
from trainee import events as ev
from trainee.cli import daemon_client
from trainee.cli.output import (
    MISSING,
    fmt_change,
    fmt_duration,
    fmt_value,
    print_json,
)
from trainee.states import RoundStatus, SessionStatus, StopReason

TYPE_CHECKING = False  # typing is not imported at run time: the CLI's start-up is measured
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from rich.console import Console, RenderableType
    from rich.live import Live

    from trainee.rpc.client import RpcClient

METRIC_EVERY = 1.0
"""Plain mode: at most one metric line per this many seconds."""
TAIL_LINES = 8
"""Terminal mode: the last lines of the job's output kept on screen."""
RECONNECTS = 5
"""Daemon restarts in a row (no event between them) before the view gives up."""
RECONNECT_PAUSE = 0.2
"""Seconds before the n-th try in a row to reach a daemon again is n times this."""
IGNORED_KINDS = frozenset({ev.kind_of(ev.DaemonStartedEvent), ev.kind_of(ev.ActivityEvent)})
"""Kinds the view shows nothing of (every other kind has its renderer)."""

_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def clean_line(text: str) -> str:
    """One output line as a terminal would leave it: no escape sequences, what follows
    the last carriage return (progress bars), no other control characters."""
    text = _ANSI.sub("", text)
    if "\r" in text:
        parts = [p for p in text.split("\r") if p]
        text = parts[-1] if parts else ""
    return _CONTROL.sub("", text.replace("\t", "    "))


def project_text(project: object) -> str:
    return project if isinstance(project, str) else MISSING


def diff_text(diff: dict[str, Any]) -> str:
    parts = []
    for name, change in diff.items():
        if isinstance(change, dict) and "from" in change:
            parts.append(f"{name} {fmt_value(change['from'])} → {fmt_value(change['to'])}")
        else:
            parts.append(f"{name} → {fmt_value(change)}")
    return ", ".join(parts) or "(no change: baseline params)"


class Progress:
    """What the status line says, kept from the events (seeded from ``loop_get``)."""

    def __init__(self) -> None:
        self.max_rounds: int | None = None
        self.started_at = time.time()
        self.active: dict[int, float] = {}
        """Rounds running now -> when they started (wall clock)."""
        self.last_round = 0
        self.metric: str | None = None
        self.best: tuple[int, float] | None = None
        self.baseline: tuple[int, float] | None = None
        self.latest: dict[str, tuple[float | None, Any]] = {}

    def seed(self, state: dict[str, Any]) -> None:
        rec = state.get("session") or {}
        if rec.get("max_rounds"):
            self.max_rounds = int(rec["max_rounds"])
        if rec.get("created_at"):
            self.started_at = float(rec["created_at"])
        rounds = state.get("rounds") or []
        if rounds:
            self.last_round = max(int(r["index"]) for r in rounds)
        for key in ("best", "baseline"):
            r = state.get(key)
            if r and r.get("primary_metric") is not None:
                setattr(self, key, (int(r["index"]), float(r["primary_metric"])))
        current = state.get("current_round")
        if current and current.get("status") == RoundStatus.RUNNING:
            self.active[int(current["index"])] = float(current.get("started_at") or time.time())

    def round_started(self, index: int) -> None:
        self.active[index] = time.time()
        self.last_round = max(self.last_round, index)
        self.latest = {}

    def round_finished(self, d: dict[str, Any]) -> None:
        index = d.get("round")
        if isinstance(index, int):
            self.active.pop(index, None)
            self.last_round = max(self.last_round, index)
        if d.get("metric_name"):
            self.metric = str(d["metric_name"])
        metric = d.get("metric")
        if isinstance(index, int) and isinstance(metric, int | float):
            if d.get("verdict") == "baseline":
                self.baseline = self.best = (index, float(metric))
            elif d.get("verdict") == "kept" or d.get("best_round") == index:
                self.best = (index, float(metric))

    def line(self, now: float | None = None) -> str:
        now = time.time() if now is None else now
        shown = sorted(self.active) or ([self.last_round] if self.last_round else [])
        total = str(self.max_rounds) if self.max_rounds else "?"
        rounds = ",".join(str(i) for i in shown) or MISSING
        parts = [f"round {rounds}/{total}", fmt_duration(now - self.started_at)]
        name = self.metric or "metric"
        if self.best is None:
            parts.append("no baseline yet")
        elif self.baseline is None or self.best == self.baseline:
            parts.append(f"best {name} {fmt_value(self.best[1])} (the baseline)")
        else:
            (index, best), base = self.best, self.baseline[1]
            parts.append(
                f"best {name} {fmt_value(best)} (round {index}) vs baseline {fmt_value(base)} "
                f"({fmt_change(best, base)})"
            )
        if self.active and self.latest:
            now_metrics = "  ".join(
                f"{n}={fmt_value(v)}" + (f"@{s}" if s is not None else "")
                for n, (v, s) in sorted(self.latest.items())
            )
            parts.append(f"now {now_metrics}")
        return " · ".join(parts)


class LiveView:
    def __init__(
        self,
        session: str,
        *,
        json_mode: bool = False,
        project_root: str | None = None,
        full_output: bool = False,
    ) -> None:
        from rich.console import Console

        self.session = session
        self.project_root = project_root
        self.json_mode = json_mode
        self.full_output = full_output
        probe = Console(highlight=False)
        self.tty = probe.is_interactive and not json_mode
        # Plain lines are not wrapped at an assumed width; on a terminal rich wraps them.
        self.console: Console = probe if self.tty else Console(highlight=False, soft_wrap=True)
        self.progress = Progress()
        self.tail: deque[tuple[str, str | None]] = deque(maxlen=TAIL_LINES)
        self.last_metric_print = 0.0
        self.finished: dict[str, Any] | None = None
        self.last_id = 0
        self._lock = threading.RLock()
        self._live: Live | None = None
        self._renderers = self.renderers()

    # -- the live region -----------------------------------------------------------------

    def start(self) -> None:
        if not self.tty or self._live is not None:
            return
        from rich.live import Live

        self._live = Live(
            get_renderable=self._bottom,
            console=self.console,
            refresh_per_second=4,
            transient=True,
            redirect_stdout=False,
            redirect_stderr=False,
        )
        self._live.start()

    def stop(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    def _bottom(self) -> RenderableType:
        from rich.console import Group
        from rich.text import Text

        with self._lock:
            rows: list[RenderableType] = []
            if not self.full_output and self.progress.active:
                for text, style in self.tail:
                    rows.append(
                        Text("  │ " + text, style=style or "dim", no_wrap=True, overflow="ellipsis")
                    )
            rows.append(Text(self.progress.line(), style="bold", no_wrap=True, overflow="ellipsis"))
        return Group(*rows)

    # -- printing ------------------------------------------------------------------------

    def say(self, text: str, style: str | None = None) -> None:
        from rich.text import Text

        self.console.print(Text(text, style=style or ""))

    def note(self, text: str) -> None:
        """A message about the view itself (reconnecting, stopping, detaching)."""
        if self.json_mode:
            sys.stderr.write(text + "\n")
        else:
            self.say(text, "yellow")

    # -- events --------------------------------------------------------------------------

    def handle(self, event: dict[str, Any]) -> None:
        eid = event.get("id")
        if isinstance(eid, int):
            if eid <= self.last_id:
                return  # seen before a reconnect or a re-watch
            self.last_id = eid
        data = event.get("data") or {}
        if self.project_root and data.get("project") not in (None, self.project_root):
            return  # the same session id in another project
        with self._lock:
            if self.json_mode:
                print_json(event)  # as it came, whatever its kind
            try:
                typed = ev.decode_event(event)
            except ev.InvalidEvent as exc:
                self.note(f"an event this view cannot read: {exc}")
                return
            if self.json_mode:
                if isinstance(typed, ev.SessionFinishedEvent):
                    self.on_session_finished(typed.data)
                return
            if isinstance(typed, ev.NoteEvent):
                self.say(f"note: {typed.data}", "italic")
                return
            render = self._renderers.get(type(typed))
            if render is not None:
                render(typed.data)

    def renderers(self) -> dict[type[ev.AnyEvent], Callable[[Any], None]]:
        """What the view does with each kind (the kinds in IGNORED_KINDS it skips)."""
        return {
            ev.SessionStartedEvent: self.on_session_started,
            ev.DecisionStartedEvent: self.on_decision_started,
            ev.DecisionEvent: self.on_decision,
            ev.BatchStartedEvent: self.on_batch_started,
            ev.BatchFinishedEvent: self.on_batch_finished,
            ev.RoundStartedEvent: self.on_round_started,
            ev.RoundStateEvent: self.on_round_state,
            ev.RoundReadoptedEvent: self.on_round_readopted,
            ev.RoundRerunEvent: self.on_round_rerun,
            ev.RoundPromotedEvent: self.on_round_promoted,
            ev.OutputEvent: self.on_output,
            ev.MetricEvent: self.on_metric,
            ev.RoundFinishedEvent: self.on_round_finished,
            ev.SessionFinishedEvent: self.on_session_finished,
        }

    def on_session_started(self, d: ev.SessionStarted) -> None:
        if d.max_rounds:
            self.progress.max_rounds = d.max_rounds
        self.say(
            f"trainee {self.session} on {project_text(d.project)} — policy {d.policy}, "
            f"up to {d.max_rounds} rounds",
            "bold",
        )

    def on_decision_started(self, d: ev.DecisionStarted) -> None:
        self.deciding_since = time.monotonic()
        self.say(f"\n… deciding round {d.round} ({d.policy})", "dim")

    def on_decision(self, d: ev.Decision) -> None:
        who = d.policy
        if d.provider:
            who += f" via {d.provider} {d.model}".rstrip()
        if d.response_format:
            who += f", {d.response_format}"
        step = ""
        if d.batch_size > 1:
            step = f"step {d.batch}: "
        took = ""
        since = getattr(self, "deciding_since", None)
        if since is not None:
            took = f" in {time.monotonic() - since:.0f} s"
        self.say(
            f"\n── {step}decision for round {d.round} ({who}){took}"
            + (" [repaired]" if d.repaired else ""),
            "cyan",
        )
        for failed in d.failed_attempts:
            self.say(f"   {failed.provider} failed ({failed.kind}): {failed.error}", "yellow")
        if d.stop:
            self.say(f"   stop: {d.stop_reason or MISSING}", "cyan")
            return
        self.say(f"   hypothesis: {d.hypothesis or MISSING}")
        self.say(f"   change:     {diff_text(d.diff)}")
        self.say(f"   expected:   {d.expected or MISSING}")

    def on_batch_started(self, d: ev.BatchStarted) -> None:
        rounds = ", ".join(str(r) for r in d.rounds)
        self.say(f"\n═══ step {d.batch}: rounds {rounds} run at once ═══", "bold")

    def on_batch_finished(self, d: ev.BatchFinished) -> None:
        ended = ", ".join(f"round {r} {s}" for r, s in zip(d.rounds, d.statuses, strict=False))
        self.say(f"═══ step {d.batch} done: {ended}", "bold")

    def on_round_started(self, d: ev.RoundStarted) -> None:
        attempt = f" (attempt {d.attempt + 1})" if d.attempt else ""
        where = ""
        if d.backend != "local":
            where = f" [{d.backend} job {d.job_id}]"
        self.say(
            f"\n━━ round {d.round}{attempt}{where} ━━ {d.hypothesis}",
            "bold magenta",
        )
        self.say(f"$ {d.command}", "dim")
        self.progress.round_started(d.round)
        self.tail.clear()

    def on_round_state(self, d: ev.RoundState) -> None:
        self.say(f"round {d.round}: {d.state} ({d.detail})", "dim")

    def on_round_readopted(self, d: ev.RoundReadopted) -> None:
        self.progress.round_started(d.round)
        what = f"{d.backend} job {d.job_id}" if d.job_id else f"its running monitor (pid {d.pid})"
        self.say(f"round {d.round}: re-adopted {what}", "yellow")

    def on_round_rerun(self, d: ev.RoundRerun) -> None:
        self.say(f"round {d.round}: its monitor was lost; running it again", "yellow")

    def on_round_promoted(self, d: ev.RoundPromoted) -> None:
        self.say(
            f"round {d.round}: round {d.from_round}'s params promoted to rung {d.rung} "
            f"(budget {fmt_value(d.budget)}): {d.reason}",
            "cyan",
        )

    def on_output(self, d: ev.Output) -> None:
        several = len(self.progress.active) > 1
        mark = f"r{d.round} │ " if several else ""
        lines = [(mark + clean_line(line.text), line.stream) for line in d.lines]
        if self.full_output:
            if d.skipped:
                self.say(f"  … {d.skipped} lines not shown (all are in the round log)", "dim")
            for text, stream in lines:
                self.say("  │ " + text, "red" if stream == "stderr" else None)
        elif self.tty:
            for text, stream in lines:
                self.tail.append((text, "red" if stream == "stderr" else None))

    def on_metric(self, d: ev.Metric) -> None:
        for name, value, step, _seq in d.points:
            self.progress.latest[name] = (value, step)
        if self.tty:
            return  # the status line shows them
        now = time.monotonic()
        if now - self.last_metric_print >= METRIC_EVERY and self.progress.latest:
            self.last_metric_print = now
            shown = "  ".join(
                f"{n}={fmt_value(v)}" + (f"@{s}" if s is not None else "")
                for n, (v, s) in sorted(self.progress.latest.items())
            )
            self.say(f"  ▸ {shown}", "green")

    def on_round_finished(self, d: ev.RoundFinished) -> None:
        self.progress.round_finished(msgspec.structs.asdict(d))
        name = d.metric_name or "metric"
        took = f"  {d.duration_sec:.1f}s" if d.duration_sec is not None else ""
        style = {"kept": "bold green", "baseline": "bold", "rejected": "red"}.get(str(d.verdict))
        self.say(
            f"round {d.round}: {d.status}  {name} {fmt_value(d.metric)}"
            f"  → {d.verdict or MISSING}{took}",
            style,
        )
        if d.verdict_reason:
            self.say(f"   {d.verdict_reason}", "dim")
        if d.error:
            self.say(f"   {d.error}", "red")
        if not self.progress.active:
            self.tail.clear()
        if not self.tty:
            self.say(f"   [{self.progress.line()}]", "dim")

    def on_session_finished(self, d: ev.SessionFinished) -> None:
        self.finished = msgspec.to_builtins(d)

    def policy_name(self, d: dict[str, Any]) -> str:
        return f"{d['policy']} policy" if d.get("policy") else "policy"

    # -- the end ---------------------------------------------------------------------

    def summary(self, state: dict[str, Any] | None) -> None:
        d = self.finished or {}
        if self.json_mode:
            return
        from rich.table import Table

        self.say("")
        if state:
            name = d.get("metric_name") or self.progress.metric or "metric"
            table = Table(title=f"{self.session}: {d.get('status')} ({d.get('stop_reason')})")
            rounds = state.get("rounds", [])
            steps = [r.get("batch") or 0 for r in rounds]
            show_steps = any(s > 0 and steps.count(s) > 1 for s in steps)
            cols = ("round", "status", name, "verdict", "change vs baseline")
            for col in ("step", *cols) if show_steps else cols:
                table.add_column(col)
            for r in rounds:
                table.add_row(
                    *([str(r.get("batch") or 0)] if show_steps else []),
                    str(r.get("index")),
                    str(r.get("status")),
                    fmt_value(r.get("primary_metric")),
                    str(r.get("verdict") or MISSING),
                    diff_text(r.get("diff") or {}),
                )
            self.console.print(table)
        tail = d.get("log_tail") or []
        if tail:
            self.say("last lines of its log:", "bold")
            for line in tail:
                self.say(f"  {line}", "dim")
        if d.get("error"):
            self.say(f"error: {d['error']}", "red")
        if d.get("stop_detail"):
            self.say(f"stopped by the {self.policy_name(d)}: {d['stop_detail']}", "cyan")
        best, base = d.get("best_metric"), d.get("baseline_metric")
        if best is not None and base is not None:
            self.say(
                f"best: round {d.get('best_round')} {d.get('metric_name')}={fmt_value(best)} "
                f"(baseline {fmt_value(base)}, {fmt_change(best, base)})",
                "bold green",
            )
            self.say(f"best params: {d.get('best_params')}")
        report = d.get("report") or f"trainee report {self.session}"
        self.say(f"report: {report}", "bold")


def finished_from_state(state: dict[str, Any]) -> dict[str, Any]:
    """A ``session.finished`` payload from ``loop_get`` (the event itself was missed)."""
    rec = state.get("session") or {}
    best, base = state.get("best") or {}, state.get("baseline") or {}
    return {
        "status": rec.get("status"),
        "stop_reason": rec.get("stop_reason"),
        "error": rec.get("error"),
        "best_round": rec.get("best_round"),
        "best_metric": best.get("primary_metric"),
        "best_params": best.get("params"),
        "baseline_metric": base.get("primary_metric"),
    }


# A session's end as an exit status (the README's table): a normal stop is success.
EXIT_FOR_STOP_REASON: dict[str, int] = {StopReason.PROVIDER_FAILED: 9, StopReason.USER_STOP: 0}
EXIT_SESSION_FAILED = 1


def exit_status(finished: dict[str, Any], *, interrupted: bool) -> int:
    reason = str(finished.get("stop_reason"))
    if interrupted and reason == StopReason.USER_STOP:
        return errors.EXIT_INTERRUPTED
    if reason in EXIT_FOR_STOP_REASON:
        return EXIT_FOR_STOP_REASON[reason]
    ok = (SessionStatus.FINISHED, SessionStatus.STOPPED)
    return 0 if finished.get("status") in ok else EXIT_SESSION_FAILED


def stop_hint(session: str, project_root: str | None) -> str:
    """The command that stops ``session``, with ``--project-root`` unless it is the cwd's."""
    from trainee.cli.commands.project import project_option

    return f"trainee stop {session}{project_option(project_root)}"


def watch_session(
    session: str,
    project_root: str | None,
    *,
    json_mode: bool,
    since: int | None = 0,
    attach: bool = False,
    full_output: bool = False,
) -> int:
    """Render ``session`` live until it finishes; returns the CLI exit status.

    ``since``: the event id to replay from (a new session's start cursor, so an
    earlier run of a resumed session is not replayed); None for live events only.
    ``attach``: Ctrl-C detaches rather than stopping the session.
    """
    view = LiveView(
        session, json_mode=json_mode, project_root=project_root, full_output=full_output
    )
    params: dict[str, Any] = {"session": session}
    if project_root:
        params["project_root"] = project_root
    state = daemon_client.call("loop_get", params)
    view.progress.seed(state)
    stopping = False
    stop_error: list[BaseException] = []

    def ask_stop() -> None:
        try:
            daemon_client.call("loop_stop", params, autostart=False, timeout=None)
        except BaseException as exc:  # reported after the view ends
            stop_error.append(exc)

    watcher = _Watcher(session)
    failures = 0
    reconnect = False
    view.start()
    try:
        while view.finished is None:
            try:
                if reconnect:  # starts a daemon if none answers; it re-adopts the session
                    state = daemon_client.call("loop_get", params)
                    reconnect = False
                    if not state["running"]:
                        view.finished = finished_from_state(state)
                        break
                    since = view.last_id or since or 0
                if watcher.client is None:
                    watcher.open(view.last_id or since)
                note = watcher.next()
                if note is None or note.get("method") != "events":
                    continue
                body = note.get("params") or {}
                before = view.last_id
                for event in body.get("events", []):
                    view.handle(event)
                if view.last_id != before:
                    failures = 0
                if body.get("gap"):
                    watcher.rewatch(view.last_id)
            except errors.DaemonNotRunning:
                # the daemon went away, or one that was going away took the connection:
                # each try starts one if none answers, up to RECONNECTS in a row
                watcher.close()
                failures += 1
                if failures > RECONNECTS:
                    raise
                if not reconnect:
                    view.note(
                        f"the daemon went away: starting one; it re-adopts {session} "
                        "and the view goes on from the last event shown"
                    )
                else:
                    time.sleep(RECONNECT_PAUSE * failures)
                reconnect = True
                continue
            except KeyboardInterrupt:
                if attach or stopping:
                    view.stop()
                    sys.stderr.write(
                        f"\ndetached from {session}; it goes on in the daemon\n"
                        f"  watch it again: trainee attach {session}\n"
                        f"  stop it:        {stop_hint(session, project_root)}\n"
                    )
                    return 0
                stopping = True
                view.note(f"stopping {session}… (Ctrl-C again to detach)")
                threading.Thread(target=ask_stop, daemon=True).start()
    finally:
        view.stop()
        watcher.close()
    with contextlib.suppress(errors.TraineeError):
        state = daemon_client.call("loop_get", params, autostart=False)
    view.summary(state)
    for exc in stop_error:
        sys.stderr.write(f"the stop request failed: {exc}\n")
    return exit_status(view.finished or {}, interrupted=stopping)


class _Watcher:
    """One ``events_watch`` stream of a session on one connection."""

    def __init__(self, session: str) -> None:
        self.session = session
        self.client: RpcClient | None = None
        self.watch_id: int | None = None
        self.since: int | None = None

    def open(self, since: int | None) -> None:
        self.client = daemon_client.ensure_daemon(timeout=None)
        self._watch(since)

    def _watch(self, since: int | None) -> None:
        assert self.client is not None
        params: dict[str, Any] = {"session": self.session}
        if since is not None:
            params["since"] = since
        self.since = since
        self.watch_id = int(self.client.call("events_watch", params)["watch_id"])

    def next(self) -> dict[str, Any] | None:
        assert self.client is not None
        return self.client.next_notification(timeout=None)

    def rewatch(self, last_id: int) -> None:
        """After a gap (the stream fell behind and was dropped): watch again from the
        last event shown, unless nothing was shown since this watch began (a gap at
        its start: older events are gone, the stream itself goes on)."""
        if self.client is None or last_id == (self.since or 0):
            return
        with contextlib.suppress(errors.NotFound):
            self.client.call("events_unwatch", {"watch_id": self.watch_id})
        self._watch(last_id)

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None
