"""The daemon killed with SIGKILL mid-round ten times in a row, and stopped with SIGTERM.

Two sessions run side by side on one daemon, one guarded (bwrap) and one unsafe. Every
round holds after its first steps until the test releases it (a file per round), so
the test never depends on timing: it waits until both sessions have a fresh round
holding, SIGKILLs the daemon, checks that both rounds' monitors and jobs outlived it,
starts a new daemon and only then releases the two rounds; ten times. Each restarted
daemon must re-adopt the live rounds (their command started once, re-adopted once) and
carry both sessions to their end: every round exactly once in the store and the ledgers,
no process left.
"""

from __future__ import annotations

import json
import signal
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tests.faults.helpers import (
    Node,
    assert_no_orphans,
    make_project,
    node,
    shim_processes,
    starts_of,
)
from tests.support.loop import SESSION, artifacts, check_outputs
from trainee.monitor.process import RoundHandle, is_alive

pytestmark = pytest.mark.e2e

KILLS = 10
ROUNDS = KILLS
"""Rounds per session: each kill hits one fresh round of each session."""
BEHAVIOUR = {
    "steps": 4,
    "delay": 0.05,
    "hold_while_file": True,
    "hold_file": "hold-{index}",
    "hold_limit": 600,
}
"""A few progress lines, then the round holds while ``hold-<round>`` exists."""


def _mid_run(node: Node, project: Path, seen: set[tuple[str, int]]) -> dict[str, Any] | None:
    """The project's running round if it is mid-run and not in ``seen``: the store says
    running, its log shows progress, and its monitor is alive and has not written its
    exit record. (A just-restarted daemon still shows the round that ended while no
    daemon was there as running until it has re-adopted it: killing on that stale
    view would kill every new daemon before it could record anything.)"""
    state = node.state(project)
    current = state["current_round"]
    if not current or current["status"] != "running" or not current["monitor_pid"]:
        return None
    if (str(project), current["index"]) in seen:
        return None
    log = artifacts(project) / f"round-{current['index']:04d}.log"
    if not log.exists() or "step 3 " not in log.read_text():
        return None
    if not is_alive(_handle(current)) or _ended_at(project, current["index"]) is not None:
        return None
    return dict(current)


def _ended_at(project: Path, index: int) -> float | None:
    exit_file = project / ".trainee" / "control" / SESSION / f"round-{index:04d}" / "exit.json"
    try:
        return float(json.loads(exit_file.read_text())["ended_at"])
    except (OSError, ValueError, KeyError):
        return None


def _handle(rec: dict[str, Any]) -> RoundHandle:
    return RoundHandle(rec["monitor_pid"], rec["monitor_start_time"], "", "", "", "")


def _stored_events(project: Path, kind: str) -> list[dict[str, Any]]:
    database = project / ".trainee" / "runtime.sqlite3"
    with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as db:
        rows = db.execute("SELECT data FROM events WHERE kind = ? ORDER BY id", (kind,)).fetchall()
    db.close()
    return [json.loads(data) for (data,) in rows]


def test_ten_sigkills_mid_round_across_a_guarded_and_an_unsafe_session(tmp_path: Path) -> None:
    guarded = make_project(
        tmp_path / "guarded", mode="guarded", max_rounds=ROUNDS, behaviour=BEHAVIOUR
    )
    unsafe = make_project(
        tmp_path / "unsafe", mode="unsafe", max_rounds=ROUNDS, behaviour=BEHAVIOUR
    )
    projects = [guarded, unsafe]
    for project in projects:
        for index in range(1, ROUNDS + 1):
            (project / f"hold-{index}").touch()
    killed_during: dict[tuple[str, int], dict[str, Any]] = {}
    kills = 0
    with node() as n:
        n.start_session(guarded)
        n.start_session(unsafe)
        while kills < KILLS:
            targets: dict[Path, dict[str, Any]] = {}
            for project in projects:
                n.wait(
                    project,
                    lambda s, p=project: _mid_run(n, p, set(killed_during)) is not None,
                    timeout=120,
                    what=f"a fresh round of {project.name} holding mid-run ({kills} kills)",
                )
                rec = _mid_run(n, project, set(killed_during))
                assert rec is not None
                targets[project] = rec
            n.kill(signal.SIGKILL)
            kills += 1
            for project, rec in targets.items():
                # held by its file: it cannot have ended on its own
                assert is_alive(_handle(rec)), "the round's monitor must outlive the daemon"
                killed_during[(str(project), rec["index"])] = rec
            n.start()
            for project, rec in targets.items():
                (project / f"hold-{rec['index']}").unlink()
        states = {p: n.wait_finished(p, timeout=120) for p in projects}
        assert n.alive(), "the last daemon still answers"

    assert n.starts == kills + 1 and kills >= KILLS
    readopted = {
        str(p): [e["round"] for e in _stored_events(p, "round.readopted")] for p in projects
    }
    for project, state in states.items():
        session = state["session"]
        assert session["status"] == "finished", session
        assert session["stop_reason"] == "max_rounds"
        assert session["security_mode"] == ("guarded" if project == guarded else "unsafe")
        rounds = state["rounds"]
        assert [r["index"] for r in rounds] == list(range(1, ROUNDS + 1))
        assert [r["status"] for r in rounds] == ["completed"] * ROUNDS
        for rec in rounds:
            started = starts_of(project, SESSION, rec["index"])
            # re-adopted rounds started once; a kill during a launch re-runs it once
            assert rec["attempt"] <= 1 and started == rec["attempt"] + 1, (rec, started)
            log = (artifacts(project) / f"round-{rec['index']:04d}.log").read_text()
            assert log.count("final val_loss=") == 1 and log.count("step 0 ") == 1
            before = killed_during.get((str(project), rec["index"]))
            if before is not None:
                assert rec["attempt"] == 0, "a live round is re-adopted, never re-run"
                assert rec["monitor_pid"] == before["monitor_pid"]
                assert rec["started_at"] == before["started_at"]
                assert readopted[str(project)].count(rec["index"]) == 1
        check_outputs(project, state)  # ledgers, report and research state: one row per round
    assert len(killed_during) == 2 * KILLS
    for project in projects:
        assert_no_orphans(project)
        assert not shim_processes(project)


def test_sigterm_mid_round_stops_the_daemon_gracefully_and_the_round_survives(
    tmp_path: Path,
) -> None:
    project = make_project(
        tmp_path / "proj",
        mode="guarded",
        max_rounds=2,
        behaviour={"steps": 2, "rounds": {"1": {"hold_while_file": True}}},
    )
    hold = project / "hold"
    hold.touch()
    try:
        with node() as n:
            n.start_session(project)
            state = n.wait(
                project,
                lambda s: bool(_mid_run(n, project, set())),
                what="round 1 mid-run",
            )
            current = state["current_round"]
            socket = n.daemon.socket
            code = n.kill(signal.SIGTERM)
            assert code == 0, n.log[-2000:]
            assert "received SIGTERM, stopping gracefully" in n.log
            assert "daemon stopping; the session resumes with the next daemon" in n.log
            assert "Traceback" not in n.log, n.log[-3000:]
            assert not socket.exists(), "a graceful stop removes its socket"
            # the round goes on under its monitor and is re-adopted by the next daemon
            assert is_alive(_handle(current))
            database = project / ".trainee" / "runtime.sqlite3"
            with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as db:
                (status,) = db.execute("SELECT status FROM sessions").fetchone()
                (round_status,) = db.execute(
                    'SELECT status FROM rounds WHERE "index" = 1'
                ).fetchone()
            db.close()
            assert (status, round_status) == ("running", "running")
            n.start()
            n.wait(project, lambda s: s["running"], what="the session to resume")
            hold.unlink()
            state = n.wait_finished(project)
        rounds = state["rounds"]
        assert [r["status"] for r in rounds] == ["completed", "completed"]
        assert rounds[0]["attempt"] == 0 and rounds[0]["monitor_pid"] == current["monitor_pid"]
        assert starts_of(project, SESSION, 1) == 1
        check_outputs(project, state)
    finally:
        hold.unlink(missing_ok=True)
    assert_no_orphans(project)
