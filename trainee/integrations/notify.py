"""Notifications through Apprise (the ``notify`` extra): what is said, and the sending.

The texts are made on the event loop from snapshots (pure functions, below); the
sending runs in the notifier's thread. Apprise's own log lines can hold parts of a
URL (a token is often the host or a path segment), so they never reach the daemon's
log as they are: they are captured, redacted and logged by trainee.
"""

from __future__ import annotations

import logging
import threading
import warnings
from dataclasses import dataclass
from typing import Any

from trainee.integrations.config import secrets_of
from trainee.integrations.snapshot import RoundSnapshot, SessionEnd, SessionInfo
from trainee.llm.settings import redact
from trainee.research.state import format_metric
from trainee.states import RoundStatus, SessionStatus

__all__ = [
    "AppriseSender",
    "Message",
    "NotifyFailed",
    "budget_message",
    "finished_message",
    "new_best_message",
    "resumed_message",
    "round_failed_message",
    "stalled_message",
]

_SEND_LOCK = threading.Lock()
"""Apprise's log capture is process-wide: one notification at a time."""
_ENDED_AS: dict[str, str] = {SessionStatus.STOPPED: "was stopped"}
"""How a session's end reads in a message (finished, failed: the status itself)."""


class NotifyFailed(Exception):
    """A notification that did not go out; the message is redacted."""


@dataclass(frozen=True)
class Message:
    event: str
    """The NotifyEvent it is sent for."""
    title: str
    body: str
    level: str = "info"
    """Apprise's notify type: info, success, warning or failure."""


# -- the texts ---------------------------------------------------------------------------


def _link(info: SessionInfo) -> str:
    return f"\n{info.page_url}" if info.page_url else ""


def _change(value: float, base: float | None) -> str:
    if base is None or base == 0:
        return ""
    return f", {(value - base) / abs(base) * 100:+.1f} % vs baseline {format_metric(base)}"


def _params(params: dict[str, Any], limit: int = 6) -> str:
    items = [f"{k}={v}" for k, v in list(params.items())[:limit]]
    return ", ".join(items) + (", ..." if len(params) > limit else "")


def finished_message(end: SessionEnd) -> Message:
    info = end.info
    name = info.metric_name or "metric"
    failed = end.status == SessionStatus.FAILED
    word = _ENDED_AS.get(end.status, end.status)
    lines = [
        f"{info.session} of {info.project} {word} ({end.stop_reason or end.status}) after {end.rounds} round(s)."
    ]
    if end.error:
        lines.append(f"Error: {end.error[:500]}")
    if end.best_metric is not None:
        lines.append(
            f"Best {name} {format_metric(end.best_metric)} (round {end.best_round}"
            f"{_change(end.best_metric, end.baseline_metric)})."
        )
    elif not failed:
        lines.append(f"No round measured {name}.")
    return Message(
        event="session_failed" if failed else "session_finished",
        title=f"trainee: {info.project} {info.session} {word}",
        body=" ".join(lines) + _link(info),
        level="failure" if failed else "success",
    )


def new_best_message(r: RoundSnapshot, previous: float | None, baseline: float | None) -> Message:
    info = r.info
    name = info.metric_name or "metric"
    value = r.primary if r.primary is not None else float("nan")
    before = f"; previous best {format_metric(previous)}" if previous is not None else ""
    changed = (
        ", ".join(
            f"{k} {d.get('from')} -> {d.get('to')}" if isinstance(d, dict) else f"{k} -> {d}"
            for k, d in r.diff.items()
        )
        or "no change"
    )
    return Message(
        event="new_best",
        title=f"trainee: {info.project} new best in round {r.index}",
        body=(
            f"{info.session} round {r.index}: {name} {format_metric(value)}"
            f"{_change(value, baseline)}{before}. Changed: {changed}." + _link(info)
        ),
        level="success",
    )


def round_failed_message(r: RoundSnapshot) -> Message | None:
    """Only for a failure with a named cause (timeout, out of memory, nan)."""
    cause = r.cause
    if cause is None or (r.status == RoundStatus.COMPLETED and r.primary is not None):
        return None
    info = r.info
    how = f"exit code {r.returncode}" if r.returncode not in (None, 0) else r.status
    if r.signal:
        how = f"signal {r.signal}"
    return Message(
        event="round_failed",
        title=f"trainee: {info.project} round {r.index} failed: {cause}",
        body=f"{info.session} round {r.index} failed ({cause}, {how}) with {_params(r.params)}."
        + _link(info),
        level="failure",
    )


def stalled_message(info: SessionInfo, index: int, quiet_sec: float) -> Message:
    minutes = quiet_sec / 60
    return Message(
        event="stalled",
        title=f"trainee: {info.project} round {index} stalled",
        body=(
            f"{info.session} round {index} has shown no output or heartbeat for "
            f"{minutes:.0f} min; it is still running." + _link(info)
        ),
        level="warning",
    )


def budget_message(info: SessionInfo, what: str, used: str, limit: str, pct: int) -> Message:
    end = "; the session ends before its next decision" if pct >= 100 else ""
    return Message(
        event="budget",
        title=f"trainee: {info.project} {info.session} used {pct} % of its {what} budget",
        body=f"{info.session}: {used} of {limit} {what}{end}." + _link(info),
        level="warning",
    )


def resumed_message(info: SessionInfo, finished: int, running: list[int]) -> Message:
    again = (
        f"; round(s) {', '.join(map(str, running))} left running are watched again or re-run"
        if running
        else ""
    )
    return Message(
        event="resumed",
        title=f"trainee: {info.project} {info.session} resumed after a daemon restart",
        body=f"{info.session}: {finished} of {info.max_rounds} round(s) done{again}." + _link(info),
        level="info",
    )


# -- the sending -------------------------------------------------------------------------


def _apprise() -> Any:
    with warnings.catch_warnings():
        # apprise imports modules deprecated on newer Pythons; not ours to report
        warnings.simplefilter("ignore", DeprecationWarning)
        import apprise

        apprise.Apprise().details()  # loads every plugin now, under the filter
    logging.getLogger("apprise").propagate = False
    return apprise


class AppriseSender:
    """Sends each :class:`Message` to every URL; NotifyFailed (redacted) when one fails."""

    def __init__(self, urls: tuple[str, ...]) -> None:
        self.urls = urls
        self.secrets = secrets_of(urls)
        self._client: Any = None

    def redact(self, text: str) -> str:
        return redact(text, self.secrets)

    def handle(self, msg: Message) -> None:
        with _SEND_LOCK:
            apprise = _apprise()
            if self._client is None:
                client = apprise.Apprise()
                for i, url in enumerate(self.urls):
                    if not client.add(url):
                        raise NotifyFailed(f"notification URL {i + 1}: Apprise does not know it")
                self._client = client
            with apprise.LogCapture(level=logging.WARNING) as captured:
                ok = self._client.notify(
                    title=msg.title,
                    body=msg.body,
                    notify_type=getattr(apprise.NotifyType, msg.level.upper()),
                )
            if not ok:
                said = " ".join(captured.getvalue().split())[-500:]
                raise NotifyFailed(self.redact(said or "Apprise reported a failure"))
