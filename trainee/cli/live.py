"""The live session view of ``trainee run`` and ``trainee attach``.

Renders a session's event stream for a person: a header per round, the tail
of the training output, metrics as they arrive (throttled), each decision
(hypothesis, params diff, expected outcome), and a final summary table with
the report path. First Ctrl-C asks the session to stop and keeps watching;
a second one detaches (the session goes on in the daemon).
"""

from __future__ import annotations

import sys
import threading
import time

from trainee import errors
from trainee.cli import daemon_client
from trainee.cli.output import print_json

TYPE_CHECKING = False  # typing is not imported at run time: the CLI's start-up is measured
if TYPE_CHECKING:
    from typing import Any

METRIC_EVERY = 1.0


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def diff_text(diff: dict[str, Any]) -> str:
    parts = []
    for name, change in diff.items():
        if isinstance(change, dict) and "from" in change:
            parts.append(f"{name} {_fmt(change['from'])} → {_fmt(change['to'])}")
        else:
            parts.append(f"{name} → {_fmt(change)}")
    return ", ".join(parts) or "(no change: baseline params)"


class LiveView:
    def __init__(
        self, session: str, *, json_mode: bool = False, project_root: str | None = None
    ) -> None:
        from rich.console import Console

        self.session = session
        self.project_root = project_root
        self.json_mode = json_mode
        self.console = Console(highlight=False, soft_wrap=True)
        self.latest: dict[str, tuple[float, Any]] = {}
        self.last_metric_print = 0.0
        self.finished: dict[str, Any] | None = None
        self.active: set[int] = set()
        """Rounds running now: with parallel candidates, output lines name their round."""

    def say(self, text: str, style: str | None = None) -> None:
        self.console.print(text, style=style, markup=False)

    def handle(self, event: dict[str, Any]) -> None:
        data = event.get("data") or {}
        if self.project_root and data.get("project") not in (None, self.project_root):
            return  # the same session id in another project
        if self.json_mode:
            print_json(event)
            if event.get("kind") == "session.finished":
                self.finished = event.get("data") or {}
            return
        kind = event.get("kind", "")
        data = event.get("data") or {}
        render = getattr(self, "on_" + kind.replace(".", "_"), None)
        if render is not None:
            render(data)
        elif kind.startswith("note"):
            self.say(f"note: {data}", "italic")

    def on_session_started(self, d: dict[str, Any]) -> None:
        self.say(
            f"trainee {self.session} on {d.get('project')} — policy {d.get('policy')}, "
            f"up to {d.get('max_rounds')} rounds",
            "bold",
        )

    def on_decision_started(self, d: dict[str, Any]) -> None:
        self.deciding_since = time.monotonic()
        self.say(f"\n… deciding round {d.get('round')} ({d.get('policy')})", "dim")

    def on_decision(self, d: dict[str, Any]) -> None:
        who = d.get("policy", "")
        if d.get("provider"):
            who += f" via {d['provider']} {d.get('model', '')}".rstrip()
        if d.get("response_format"):
            who += f", {d['response_format']}"
        step = ""
        if int(d.get("batch_size") or 1) > 1:
            step = f"step {d.get('batch')}: "
        took = ""
        since = getattr(self, "deciding_since", None)
        if since is not None:
            took = f" in {time.monotonic() - since:.0f} s"
        self.say(
            f"\n── {step}decision for round {d.get('round')} ({who}){took}"
            + (" [repaired]" if d.get("repaired") else ""),
            "cyan",
        )
        for failed in d.get("failed_attempts") or []:
            self.say(
                f"   {failed.get('provider')} failed ({failed.get('kind')}): {failed.get('error')}",
                "yellow",
            )
        if d.get("stop"):
            self.say(f"   stop: {d.get('stop_reason')}", "cyan")
            return
        self.say(f"   hypothesis: {d.get('hypothesis')}")
        self.say(f"   change:     {diff_text(d.get('diff') or {})}")
        self.say(f"   expected:   {d.get('expected')}")

    def on_batch_started(self, d: dict[str, Any]) -> None:
        rounds = ", ".join(str(r) for r in d.get("rounds", []))
        self.say(f"\n═══ step {d.get('batch')}: rounds {rounds} run at once ═══", "bold")

    def on_batch_finished(self, d: dict[str, Any]) -> None:
        ended = ", ".join(
            f"round {r} {s}"
            for r, s in zip(d.get("rounds", []), d.get("statuses", []), strict=False)
        )
        self.say(f"═══ step {d.get('batch')} done: {ended}", "bold")

    def on_round_started(self, d: dict[str, Any]) -> None:
        attempt = f" (attempt {d['attempt'] + 1})" if d.get("attempt") else ""
        where = ""
        if d.get("backend") not in (None, "local"):
            where = f" [{d.get('backend')} job {d.get('job_id')}]"
        self.say(
            f"\n━━ round {d.get('round')}{attempt}{where} ━━ {d.get('hypothesis', '')}",
            "bold magenta",
        )
        self.say(f"$ {d.get('command')}", "dim")
        if isinstance(d.get("round"), int):
            self.active.add(d["round"])
        self.latest = {}

    def on_round_state(self, d: dict[str, Any]) -> None:
        self.say(f"round {d.get('round')}: {d.get('state')} ({d.get('detail')})", "dim")

    def on_round_readopted(self, d: dict[str, Any]) -> None:
        if isinstance(d.get("round"), int):
            self.active.add(d["round"])
        what = (
            f"{d.get('backend')} job {d.get('job_id')}"
            if d.get("job_id")
            else (f"its running monitor (pid {d.get('pid')})")
        )
        self.say(f"round {d.get('round')}: re-adopted {what}", "yellow")

    def on_round_rerun(self, d: dict[str, Any]) -> None:
        self.say(f"round {d.get('round')}: its monitor was lost; running it again", "yellow")

    def on_output(self, d: dict[str, Any]) -> None:
        if d.get("skipped"):
            self.say(f"  … {d['skipped']} lines not shown (all are in the round log)", "dim")
        mark = f"r{d.get('round')} │ " if len(self.active) > 1 else "│ "
        for line in d.get("lines", []):
            style = "red" if line.get("stream") == "stderr" else None
            self.say("  " + mark + str(line.get("text", "")), style)

    def on_metric(self, d: dict[str, Any]) -> None:
        for name, value, step, _seq in d.get("points", []):
            self.latest[name] = (value, step)
        now = time.monotonic()
        if now - self.last_metric_print >= METRIC_EVERY and self.latest:
            self.last_metric_print = now
            shown = "  ".join(
                f"{n}={_fmt(v)}" + (f"@{s}" if s is not None else "")
                for n, (v, s) in sorted(self.latest.items())
            )
            self.say(f"  ▸ {shown}", "green")

    def on_round_finished(self, d: dict[str, Any]) -> None:
        self.active.discard(d.get("round"))  # type: ignore[arg-type]
        name = d.get("metric_name") or "metric"
        metric = d.get("metric")
        value = f"{name}={_fmt(metric)}" if metric is not None else f"{name}: none"
        duration = d.get("duration_sec")
        took = f"  {duration:.1f}s" if isinstance(duration, int | float) else ""
        style = {"kept": "bold green", "baseline": "bold", "rejected": "red"}.get(
            str(d.get("verdict"))
        )
        self.say(
            f"round {d.get('round')}: {d.get('status')}  {value}  → {d.get('verdict')}{took}", style
        )
        if d.get("verdict_reason"):
            self.say(f"   {d['verdict_reason']}", "dim")
        if d.get("error"):
            self.say(f"   {d['error']}", "red")

    def on_session_finished(self, d: dict[str, Any]) -> None:
        self.finished = d

    def policy_name(self, d: dict[str, Any]) -> str:
        return f"{d['policy']} policy" if d.get("policy") else "policy"

    def summary(self, state: dict[str, Any] | None) -> None:
        d = self.finished or {}
        if self.json_mode:
            return
        from rich.table import Table

        self.say("")
        if state:
            name = d.get("metric_name") or "metric"
            table = Table(title=f"{self.session}: {d.get('status')} ({d.get('stop_reason')})")
            rounds = state.get("rounds", [])
            steps = [r.get("batch") or 0 for r in rounds]
            show_steps = any(s > 0 and steps.count(s) > 1 for s in steps)
            cols = ("round", "status", name, "verdict", "change vs baseline")
            for col in ("step", *cols) if show_steps else cols:
                table.add_column(col)
            for r in rounds:
                metric = r.get("primary_metric")
                table.add_row(
                    *([str(r.get("batch") or 0)] if show_steps else []),
                    str(r.get("index")),
                    str(r.get("status")),
                    _fmt(metric) if metric is not None else "-",
                    str(r.get("verdict") or "-"),
                    diff_text(r.get("diff") or {}),
                )
            self.console.print(table)
        if d.get("error"):
            self.say(f"error: {d['error']}", "red")
        if d.get("stop_detail"):
            self.say(f"stopped by the {self.policy_name(d)}: {d['stop_detail']}", "cyan")
        best, base = d.get("best_metric"), d.get("baseline_metric")
        if best is not None and base is not None:
            change = (best - base) / abs(base) * 100 if base else 0.0
            self.say(
                f"best: round {d.get('best_round')} {d.get('metric_name')}={_fmt(best)} "
                f"(baseline {_fmt(base)}, {change:+.1f}%)",
                "bold green",
            )
            self.say(f"best params: {d.get('best_params')}")
        self.say(f"report: {d.get('report')}", "bold")


# A session's end as an exit status (the README's table): a normal stop is success.
EXIT_FOR_STOP_REASON = {"provider_failed": 9, "user_stop": 0}
EXIT_SESSION_FAILED = 1
EXIT_INTERRUPTED = 130


def exit_status(finished: dict[str, Any], *, interrupted: bool) -> int:
    reason = str(finished.get("stop_reason"))
    if interrupted and reason == "user_stop":
        return EXIT_INTERRUPTED
    if reason in EXIT_FOR_STOP_REASON:
        return EXIT_FOR_STOP_REASON[reason]
    return 0 if finished.get("status") in ("finished", "stopped") else EXIT_SESSION_FAILED


def watch_session(
    session: str, project_root: str | None, *, json_mode: bool, since: int | None = 0
) -> int:
    """Render ``session`` live until it finishes; returns the CLI exit status.

    ``since``: the event id to replay from (a new session's start cursor, so an
    earlier run of a resumed session is not replayed); None for live events only.
    """
    view = LiveView(session, json_mode=json_mode, project_root=project_root)
    client = daemon_client.ensure_daemon(timeout=None)
    stopping = False
    stop_error: list[BaseException] = []

    def ask_stop() -> None:
        try:
            params = {"session": session}
            if project_root:
                params["project_root"] = project_root
            daemon_client.call("loop_stop", params, autostart=False)
        except BaseException as exc:  # reported after the view ends
            stop_error.append(exc)

    with client:
        params: dict[str, Any] = {"session": session}
        if since is not None:
            params["since"] = since
        client.call("events_watch", params)
        while view.finished is None:
            try:
                note = client.next_notification(timeout=None)
            except KeyboardInterrupt:
                if stopping:
                    sys.stderr.write(
                        f"\ndetached from {session}; it goes on (trainee attach {session})\n"
                    )
                    return 0
                stopping = True
                sys.stderr.write(f"\nstopping {session}… (Ctrl-C again to detach)\n")
                threading.Thread(target=ask_stop, daemon=True).start()
                continue
            if note is None or note.get("method") != "events":
                continue
            for event in note["params"].get("events", []):
                view.handle(event)
    state = None
    try:
        get: dict[str, Any] = {"session": session}
        if project_root:
            get["project_root"] = project_root
        state = daemon_client.call("loop_get", get, autostart=False)
    except errors.TraineeError:
        pass
    view.summary(state)
    for exc in stop_error:
        sys.stderr.write(f"the stop request failed: {exc}\n")
    return exit_status(view.finished or {}, interrupted=stopping)
