"""Passive activity: output, file mtimes, heartbeat files."""

from __future__ import annotations

import json
import os
from pathlib import Path

from trainee.monitor.activity import Activity, read_heartbeat


def test_idle_for_follows_the_latest_sign_of_life() -> None:
    act = Activity()
    assert act.last_activity_at is None and act.idle_for(100.0) is None
    act.note_output(10.0)
    assert act.idle_for(15.0) == 5.0
    act.note_output(8.0)  # late news never moves it back
    assert act.last_activity_at == 10.0 and act.last_output_at == 10.0
    assert act.idle_for(9.0) == 0.0
    assert Activity(started_at=3.0).idle_for(4.0) == 1.0


def test_a_file_counts_only_when_its_mtime_moves() -> None:
    act = Activity(started_at=0.0)
    assert act.note_file("/x/train.log", 50.0)
    assert not act.note_file("/x/train.log", 50.0)
    assert act.last_activity_at == 50.0
    assert act.note_file("/x/train.log", 60.0)
    assert act.last_activity_at == 60.0


def test_heartbeat_files(tmp_path: Path) -> None:
    beat = tmp_path / "heartbeat.json"
    assert read_heartbeat(beat) is None
    beat.write_text(json.dumps({"ts": 1234.5, "step": 7}))
    assert read_heartbeat(beat) == 1234.5
    beat.write_text(json.dumps({"ts": "2026-01-02T03:04:05Z"}))
    assert read_heartbeat(beat) == 1767323045.0
    for junk in ("not json", json.dumps({"step": 1}), json.dumps([1]), json.dumps({"ts": True})):
        beat.write_text(junk)
        os.utime(beat, (777.0, 777.0))
        assert read_heartbeat(beat) == 777.0
    act = Activity()
    beat.write_text(json.dumps({"ts": 99.0}))
    assert act.note_heartbeat(str(beat)) == 99.0
    assert act.last_activity_at == 99.0


def test_scan_reads_mtimes_and_heartbeats(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text("x\n")
    os.utime(log, (500.0, 500.0))
    beat = tmp_path / "beat.json"
    beat.write_text(json.dumps({"ts": 400.0}))
    act = Activity()
    act.scan([str(log), str(tmp_path / "missing.log")], heartbeats=[str(beat)])
    assert act.last_activity_at == 500.0
    assert act.idle_for(510.0) == 10.0
