"""The processes a project's rounds left: found through /proc, killed if any remain."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

from tests.support.timing import pause


def training_processes(project: Path) -> list[tuple[int, str]]:
    """Processes whose command line names ``project`` or whose cwd lies inside it."""
    root = str(project.resolve())
    found: list[tuple[int, str]] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (
                (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
            )
            stat = (entry / "stat").read_bytes()
        except OSError:
            continue
        if stat[stat.rfind(b")") + 2 :].split()[0] in (b"Z", b"X"):
            continue  # a zombie runs nothing
        try:
            cwd = os.readlink(entry / "cwd")
        except OSError:
            cwd = ""
        if root in cmdline or cwd == root or cwd.startswith(root + "/"):
            found.append((int(entry.name), cmdline.strip()))
    return found


def assert_no_training_left(project: Path, timeout: float = 10.0) -> None:
    """No process of the project's rounds runs (allowing a moment for exits in flight)."""
    deadline = time.monotonic() + timeout
    left = training_processes(project)
    while left and time.monotonic() < deadline:
        pause(0.1)
        left = training_processes(project)
    for pid, _ in left:  # do not leak them into the next test
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert not left, f"training processes left running: {left}"
