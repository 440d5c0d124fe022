"""Deadlines of the tests: the one scale factor, a short pause, and the one ``wait_for``."""

from __future__ import annotations

import os
import select
import time
from collections.abc import Callable
from typing import TypeVar

import pytest

T = TypeVar("T")


def _timeout_scale() -> float:
    """The one factor every deadline of the tests is multiplied by.

    ``TRAINEE_TEST_TIMEOUT_SCALE`` sets it; otherwise it grows on a small or loaded
    machine: max(1, 4 / CPUs, load average / CPUs), at most 8. Deadlines are upper
    bounds (nothing sleeps for them), so a larger factor costs time only when a test
    fails: a fault test never depends on the machine being idle.
    """
    raw = os.environ.get("TRAINEE_TEST_TIMEOUT_SCALE", "").strip()
    if raw:
        return max(1.0, float(raw))
    cpus = os.cpu_count() or 1
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = 0.0
    return min(8.0, max(1.0, 4 / cpus, load / cpus))


TIMEOUT_SCALE = _timeout_scale()


def scaled(seconds: float) -> float:
    """``seconds`` of deadline on this machine (see :func:`_timeout_scale`)."""
    return seconds * TIMEOUT_SCALE


def pause(seconds: float) -> None:
    """A short pause between two polls (select(), not a sleep on the outcome)."""
    select.select([], [], [], seconds)


def wait_for(
    condition: Callable[[], T],
    what: str,
    *,
    timeout: float = 30.0,
    interval: float = 0.05,
    detail: Callable[[], str] | None = None,
) -> T:
    """Poll ``condition()`` until it returns something truthy, and return that.

    ``timeout`` is nominal seconds (scaled by :func:`scaled`); past it the test fails
    with "timed out after N s waiting for <what>" and, when given, ``detail()`` (the
    last state seen, a log tail). ``condition`` may itself fail the test early (a
    process that exited before it printed what is awaited).
    """
    limit = scaled(timeout)
    deadline = time.monotonic() + limit
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            more = f"\n{detail()}" if detail is not None else ""
            pytest.fail(f"timed out after {limit:.0f} s waiting for {what}{more}")
        pause(interval)
