"""Faults inside a round while the daemon keeps running: the monitor killed, a job that
daemonizes a grandchild with setsid, binary garbage and a 100 MB line of output, the
artifacts disk full, the store locked by another program.

Each test ends with the same checks: the daemon still answers, the store opens and
every round in it has a final status, and no process of the project is left.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.faults.helpers import (
    Node,
    assert_no_orphans,
    hwm_kib,
    make_project,
    rss_kib,
    set_behaviour,
    shim_processes,
    starts_of,
)
from tests.support.loop import SESSION, artifacts, check_outputs
from tests.support.timing import pause, scaled
from trainee.errors import InvalidState
from trainee.monitor.tail import MAX_LINE

pytestmark = pytest.mark.e2e

FINAL = {"completed", "completed_without_metrics", "failed", "timed_out", "stopped"}


def _running(state: dict[str, Any], index: int) -> bool:
    current = state["current_round"]
    return bool(current and current["index"] == index and current["status"] == "running")


def _store_is_consistent(project: Path) -> list[tuple[int, int, str]]:
    """Open the store read-only: intact, every round and session in a final state."""
    database = project / ".trainee" / "runtime.sqlite3"
    with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as db:
        assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        rounds = db.execute('SELECT session, "index", status FROM rounds ORDER BY 1, 2').fetchall()
        sessions = db.execute("SELECT status FROM sessions").fetchall()
    db.close()
    assert all(status in FINAL for _, _, status in rounds), rounds
    assert all(status != "running" for (status,) in sessions), sessions
    return rounds


def _hold(project: Path) -> Path:
    hold = project / "hold"
    hold.touch()
    return hold


# -- the round monitor killed ------------------------------------------------------------


def _kill_monitor_mid_round_2(daemon: Node, project: Path) -> dict[str, Any]:
    """Start, wait for round 2 mid-run, SIGKILL its monitor; the monitor.json it wrote."""
    daemon.start_session(project)
    daemon.wait(project, lambda s: _running(s, 2), what="round 2 to run")
    monitor_file = project / ".trainee" / "control" / SESSION / "round-0002" / "monitor.json"
    monitor: dict[str, Any] = json.loads(monitor_file.read_text())
    log = artifacts(project) / "round-0002.log"
    deadline = time.monotonic() + scaled(30)
    while "step 3 " not in log.read_text():
        assert time.monotonic() < deadline, log.read_text()[-2000:]
        pause(0.05)
    os.kill(monitor["pid"], signal.SIGKILL)
    return monitor


def _monitor_project(tmp_path: Path) -> Path:
    return make_project(
        tmp_path / "proj",
        max_rounds=3,
        behaviour={"steps": 2, "rounds": {"2": {"hold_while_file": True, "hold_limit": 60}}},
    )


def test_a_killed_monitor_gets_its_round_rerun(module_node: Node, tmp_path: Path) -> None:
    """The monitor killed while the daemon runs: its job is ended, the round is marked
    and run again with its recorded params (attempt 1), and the session goes on."""
    project = _monitor_project(tmp_path)
    hold = _hold(project)
    try:
        _kill_monitor_mid_round_2(module_node, project)
        module_node.wait(
            project,
            lambda s: starts_of(project, SESSION, 2) == 2 or s["session"]["status"] != "running",
            what="round 2 to start again",
        )
        hold.unlink()
        state = module_node.wait_finished(project)
        rounds = state["rounds"]
        assert [r["index"] for r in rounds] == [1, 2, 3]
        assert rounds[1]["attempt"] == 1 and rounds[1]["status"] == "completed"
        assert starts_of(project, SESSION, 2) == 2
    finally:
        hold.unlink(missing_ok=True)
        assert_no_orphans(project)


# -- a daemonized grandchild ----------------------------------------------------------------


def _grandchildren(project: Path) -> list[int]:
    """Processes of the project that left the job's session (the setsid grandchild)."""
    root = f"TRAINEE_ROUND_DIR={project.resolve()}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if b"trainee-fault-grandchild" in cmdline and root in environ:
            found.append(int(entry.name))
    return found


@pytest.mark.parametrize("mode", ["unsafe", "guarded"])
@pytest.mark.parametrize("end", ["finish", "stop"])
def test_a_grandchild_daemonized_with_setsid_does_not_survive_its_round(
    module_node: Node, tmp_path: Path, mode: str, end: str
) -> None:
    project = make_project(
        tmp_path / "proj",
        mode=mode,
        max_rounds=2,
        behaviour={"grandchild": True, "steps": 2, "hold_while_file": True},
    )
    hold = _hold(project)
    try:
        module_node.start_session(project)
        module_node.wait(project, lambda s: _running(s, 1), what="round 1 to run")
        log = artifacts(project) / "round-0001.log"
        deadline = time.monotonic() + scaled(30)
        while "grandchild started" not in log.read_text() or not _grandchildren(project):
            assert time.monotonic() < deadline, log.read_text()[-2000:]
            pause(0.05)
        grandchild = _grandchildren(project)
        if end == "stop":
            module_node.rpc("loop_stop", {"project_root": str(project), "session": SESSION})
            state = module_node.wait_finished(project)
            assert state["session"]["stop_reason"] == "user_stop"
            assert [r["status"] for r in state["rounds"]] == ["stopped"]
        else:
            set_behaviour(project, {"grandchild": True, "steps": 2})
            hold.unlink()
            state = module_node.wait_finished(project)
            assert [r["status"] for r in state["rounds"]] == ["completed", "completed"]
        assert grandchild and not any(Path(f"/proc/{pid}").exists() for pid in grandchild)
    finally:
        hold.unlink(missing_ok=True)
    assert not _grandchildren(project)
    assert_no_orphans(project)
    _store_is_consistent(project)


# -- output the tailer must survive -----------------------------------------------------------


def test_binary_garbage_and_a_100_mb_line_are_cut_and_memory_stays_bounded(
    module_node: Node, tmp_path: Path
) -> None:
    line_mb = 100
    project = make_project(
        tmp_path / "proj",
        max_rounds=3,
        behaviour={"rounds": {"2": {"garbage": 200_000, "long_line": line_mb}}},
    )
    pid = module_node.daemon.proc.pid if module_node.daemon.proc else 0
    module_node.start_session(project)
    module_node.wait(project, lambda s: len(s["rounds"]) >= 2, what="round 2 to be created")
    peak_before, rss_before = hwm_kib(pid), rss_kib(pid)
    state = module_node.wait_finished(project)
    peak_after, rss_after = hwm_kib(pid), rss_kib(pid)

    rounds = state["rounds"]
    assert [r["status"] for r in rounds] == ["completed"] * 3
    assert rounds[1]["primary_metric"] is not None, "the metric after the garbage is read"
    log = artifacts(project) / "round-0002.log"
    assert log.stat().st_size > line_mb * 2**20, "the whole line is in the log file"
    # the daemon never held the line: its peak memory grew by far less than the line
    grew_mib = (peak_after - peak_before) / 1024
    assert grew_mib < line_mb / 5, f"peak RSS grew {grew_mib:.1f} MiB for a {line_mb} MB line"
    assert (rss_after - rss_before) / 1024 < line_mb / 5
    # the live view got the cut line, with the marker, and the lines around it
    events = module_node.rpc("events_list", {"session": SESSION, "limit": 10000})["events"]
    texts = [
        line["text"]
        for e in events
        if e["kind"] == "output"
        and e["data"]["project"] == str(project)
        and e["data"]["round"] == 2
        for line in e["data"]["lines"]
    ]
    cut = [t for t in texts if "…[line cut: " in t]
    assert cut and all(len(t.encode()) < MAX_LINE + 100 for t in texts)
    assert any(t.startswith("yyyy") for t in cut)
    assert any(t.startswith("final val_loss=") for t in texts)
    joined = "".join(texts)
    assert "red" in joined and "\x1b[31m" not in joined, "colour codes are stripped"
    check_outputs(project, state)
    _store_is_consistent(project)
    assert_no_orphans(project)
    assert module_node.alive()


# -- the artifacts disk full ----------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A project whose ``.trainee/artifacts`` is a 2 MiB tmpfs (logs, ledgers, report)."""
    project = make_project(
        tmp_path / "proj", max_rounds=4, behaviour={"rounds": {"2": {"fill": 4000}}}
    )
    folder = project / ".trainee" / "artifacts"
    folder.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m,mode=0700", "tmpfs", str(folder)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        if os.environ.get("CI") and os.geteuid() == 0:
            pytest.fail(f"mounting a tmpfs failed under CI as root: {mounted.stderr}")
        pytest.skip(f"mounting a tmpfs is not permitted here: {mounted.stderr.strip()}")
    try:
        yield project
    finally:
        subprocess.run(["umount", "--lazy", str(folder)], check=False)


def test_a_full_artifacts_disk_stops_the_session_clearly_and_keeps_the_store(
    module_node: Node, small_disk: Path
) -> None:
    project = small_disk
    module_node.start_session(project)
    state = module_node.wait_finished(project)
    session = state["session"]
    assert session["status"] == "failed", session
    assert session["stop_reason"] == "error"
    assert "No space left on device" in session["error"] and "28" in session["error"]
    rounds = state["rounds"]
    assert rounds[0]["status"] == "completed"
    assert rounds[1]["status"] == "failed" and rounds[1]["returncode"] == 3
    assert len(rounds) == 2, "no round starts once the artifacts cannot be written"
    # the store is intact and every row is final; no half-written file is left behind
    assert [r[2] for r in _store_is_consistent(project)] == ["completed", "failed"]
    leftovers = [p.name for p in artifacts(project).iterdir() if ".tmp" in p.name]
    assert not leftovers, leftovers
    assert module_node.alive()
    assert_no_orphans(project)
    # while the disk is full, writing the report is refused with the reason
    params = {"project_root": str(project), "session": SESSION}
    with pytest.raises(InvalidState, match="No space left on device"):
        module_node.rpc("session_report", params)
    # once there is room again, the report is written from the intact store
    (artifacts(project) / "round-0002.log").unlink()
    report = module_node.rpc("session_report", params)
    assert report["session"] == SESSION and "**Stop reason:** error" in report["markdown"]
    assert (artifacts(project) / "result_ledger.csv").read_text().count("\n") == 3


# -- the store locked by another program ---------------------------------------------------------


def test_a_reader_holding_the_store_and_a_brief_writer_lock_do_not_disturb_the_session(
    module_node: Node, tmp_path: Path
) -> None:
    project = make_project(tmp_path / "proj", max_rounds=3, behaviour={"steps": 20})
    module_node.start_session(project)
    module_node.wait(project, lambda s: _running(s, 1), what="round 1 to run")
    database = project / ".trainee" / "runtime.sqlite3"
    reader = sqlite3.connect(database, isolation_level=None)
    try:
        # a long read transaction (the sqlite3 shell in another terminal) for the whole run
        reader.execute("BEGIN")
        assert reader.execute("SELECT count(*) FROM sessions").fetchone() == (1,)
        module_node.wait(project, lambda s: _running(s, 2), what="round 2 to run")
        # a writer holding the lock for less than the store's busy timeout (5 s)
        writer = sqlite3.connect(database, isolation_level=None)
        writer.execute("BEGIN IMMEDIATE")
        pause(2.0)
        writer.execute("ROLLBACK")
        writer.close()
        state = module_node.wait_finished(project)
    finally:
        reader.execute("ROLLBACK")
        reader.close()
    assert state["session"]["status"] == "finished", state["session"]
    assert [r["status"] for r in state["rounds"]] == ["completed"] * 3
    check_outputs(project, state)
    _store_is_consistent(project)
    assert_no_orphans(project)


def test_a_store_locked_longer_than_the_busy_timeout_stops_the_session_clearly(
    module_node: Node, tmp_path: Path
) -> None:
    project = make_project(
        tmp_path / "proj",
        max_rounds=3,
        behaviour={"steps": 2, "hold_while_file": True, "hold_limit": 600},
    )
    hold = _hold(project)
    database = project / ".trainee" / "runtime.sqlite3"
    try:
        module_node.start_session(project)
        module_node.wait(project, lambda s: _running(s, 1), what="round 1 to run")
        writer = sqlite3.connect(database, isolation_level=None)
        writer.execute("BEGIN IMMEDIATE")
        try:
            # held until a write the round cannot do without has given up after the
            # store's busy timeout (5 s) and the round was stopped for it, however long
            # a loaded machine takes: the held job ends only so (its hold lasts 600 s)
            deadline = time.monotonic() + scaled(60)
            while shim_processes(project):
                assert time.monotonic() < deadline, module_node.log[-3000:]
                pause(0.1)
        finally:
            writer.execute("ROLLBACK")
            writer.close()
        state = module_node.wait_finished(project)
        assert "database is locked by another program" in state["session"]["error"]
        assert_no_orphans(project, timeout=2)
        _store_is_consistent(project)
    finally:
        hold.unlink(missing_ok=True)
        assert_no_orphans(project)
