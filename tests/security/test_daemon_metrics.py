"""Red team, hostile metric configs and metric files: a pattern that backtracks, a JSONL
line of a gigabyte, a FIFO where a log should be, a metrics file that is a symlink to
a host file. Real sessions on a real daemon; the daemon must keep answering, stay
within its memory, read nothing it should not, and say what it skipped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.faults.helpers import Node, node
from tests.security.attacks import (
    BACKTRACKING_SPECS,
    FIFO_AND_LINK,
    GIANT_LINE,
    GIANT_SPECS,
    SLOW,
    SPAM,
    Probe,
    Target,
    metric_project,
    status_kib,
)
from tests.security.daemon_harness import P99_BOUND_MS
from tests.support.daemon import run_cli
from tests.support.timing import scaled

pytestmark = pytest.mark.e2e


def _target(n: Node) -> Target:
    assert n.daemon.proc is not None
    return Target(n.daemon.socket, n.daemon.http_url, n.daemon.token, n.daemon.proc.pid)


def _warnings(state: dict[str, object]) -> str:
    rounds = state["rounds"]
    assert isinstance(rounds, list)
    return " ".join(" ".join(r.get("warnings") or []) for r in rounds)


def test_a_backtracking_pattern_is_disabled_and_the_daemon_keeps_answering(
    tmp_path: Path,
) -> None:
    project = metric_project(tmp_path / "slow", SPAM, BACKTRACKING_SPECS)
    with node() as n, Probe(_target(n)) as probe:
        n.start_session(project)
        state = n.wait_finished(project, timeout=120)
    rounds = state["rounds"]
    assert [r["status"] for r in rounds] == ["completed"], rounds
    assert rounds[0]["finals"]["val_loss"] == 0.5
    text = _warnings(state)
    assert repr(SLOW) in text and "disabled for the rest of this round" in text
    assert not probe.errors, probe.errors[:3]
    assert probe.worst_p99_ms < scaled(P99_BOUND_MS), probe.worst_p99_ms


def test_a_catastrophic_pattern_is_refused_when_the_project_loads(
    tmp_path: Path, daemon_env: dict[str, str]
) -> None:
    specs = (
        "    - name: val_loss\n      source: stdout_regex\n"
        "      key_or_pattern: 'loss=(?P<value>(a+)+)$'\n"
    )
    project = metric_project(tmp_path / "bomb", SPAM, specs)
    out = run_cli("run", "--dry-run", env=daemon_env, cwd=project)
    assert out.returncode == 3, out.stderr[-2000:]
    assert "metrics.specs[0].key_or_pattern" in out.stderr
    assert "backtracks catastrophically" in out.stderr


def test_a_gigabyte_jsonl_line_keeps_the_daemons_memory_bounded(tmp_path: Path) -> None:
    project = metric_project(tmp_path / "giant", GIANT_LINE, GIANT_SPECS)
    with node() as n:
        pid = _target(n).pid
        before = status_kib(pid, "VmHWM")
        n.start_session(project)
        state = n.wait_finished(project, timeout=180)
        grew = status_kib(pid, "VmHWM") - before
        assert n.alive()
    assert grew < 200 * 1024, f"peak RSS grew {grew} KiB"
    assert state["rounds"][0]["finals"]["val_loss"] == 0.25
    assert "longer than 1048576 bytes" in _warnings(state)


def test_a_fifo_log_and_a_symlinked_metrics_file_are_not_read(tmp_path: Path) -> None:
    secret = tmp_path / "host-secret.jsonl"
    secret.write_text(json.dumps({"leak": 123456.0, "val_loss": 0.001}) + "\n")
    specs = (
        "    - name: val_loss\n      source: stdout_regex\n"
        "      key_or_pattern: 'final val_loss=(?P<value>[0-9.]+)'\n"
        "    - name: leak\n      source: jsonl\n      key_or_pattern: leak\n"
        "      path: '{outputs_dir}/metrics.jsonl'\n"
    )
    advanced = "  log_paths: ['{outputs_dir}/train.log']\n"
    project = metric_project(
        tmp_path / "fifo", FIFO_AND_LINK.format(secret=str(secret)), specs, advanced
    )
    with node() as n, Probe(_target(n)) as probe:
        n.start_session(project)
        state = n.wait_finished(project, timeout=120)
    rounds = state["rounds"]
    assert rounds[0]["finals"] == {"val_loss": 0.5}, rounds[0]["finals"]
    assert "a symlink: not followed" in _warnings(state)
    artifacts = project / ".trainee" / "artifacts" / "session-0001"
    for name in ("result_ledger.jsonl", "result_ledger.csv", "report.md"):
        path = artifacts / name
        assert not path.exists() or "123456" not in path.read_text(), name
    assert not probe.errors and probe.worst_p99_ms < scaled(P99_BOUND_MS)
