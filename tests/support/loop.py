"""What the e2e session tests share: an LLM environment pointing at FakeLLM, plans it
answers with, ``trainee run``/``trainee call`` through the real CLI, waits on
``loop_get``, and the checks of what a session leaves behind (ledgers, report, store).
"""

from __future__ import annotations

import csv
import io
import json
import os
import sqlite3
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.llm_server import FakeLLM
from tests.support.daemon import CliResult, run_cli
from tests.support.timing import wait_for

SESSION = "session-0001"
FAKE_KEY = "sk-loop-test-key-0000"
VENDOR_PREFIXES = ("OPENAI_", "ANTHROPIC_", "MOONSHOT_", "LLM_PROVIDER")
OK = {"content": "OK"}
"""The reply to the live test ``loop_start`` makes before a session starts."""


def llm_env(base: dict[str, str], fake: FakeLLM, **extra: str) -> dict[str, str]:
    """``base`` plus an openai_compatible provider pointing at ``fake``.

    Vendor variables of the host are dropped (they would add failover candidates);
    the venv's bin folder comes first on PATH so ``python`` has numpy and yaml.
    """
    env = {k: v for k, v in base.items() if not k.startswith(VENDOR_PREFIXES)}
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env["TRAINEE_LLM_PROVIDER"] = "openai_compatible"
    env["TRAINEE_LLM_BASE_URL"] = fake.openai_base_url
    env["TRAINEE_LLM_MODEL"] = "fake-model"
    env["TRAINEE_LLM_API_KEY"] = FAKE_KEY
    env.update(extra)
    return env


def plan(
    params: dict[str, Any], hypothesis: str = "", *, expected: str = "val_loss decreases"
) -> dict[str, Any]:
    """A FakeLLM item answering with a valid-looking decision plan."""
    body = {
        "hypothesis": hypothesis or f"try {params}",
        "change_summary": "change " + ", ".join(params),
        "params": params,
        "expected": expected,
        "stop": False,
        "stop_reason": "",
    }
    return {"content": json.dumps(body)}


def start(project: Path, env: dict[str, str], *args: str) -> CliResult:
    """``trainee run <project> --policy llm --detach ...``; asserts it started."""
    result = run_cli("run", str(project), "--policy", "llm", "--detach", *args, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == SESSION
    return result


def call(env: dict[str, str], method: str, params: dict[str, Any]) -> Any:
    result = run_cli("call", method, "--input", json.dumps(params), env=env)
    assert result.returncode == 0, f"{method}: {result.stderr}"
    return result.json()


def loop_get(env: dict[str, str], project: Path, session: str = SESSION) -> dict[str, Any]:
    state: dict[str, Any] = call(
        env, "loop_get", {"project_root": str(project), "session": session}
    )
    return state


def wait_until(
    env: dict[str, str],
    project: Path,
    done: Any,
    *,
    timeout: float = 60.0,
    what: str = "the condition",
) -> dict[str, Any]:
    """Poll ``loop_get`` until ``done(state)`` holds; fail with the last state after ``timeout``."""
    last: list[dict[str, Any]] = []

    def check() -> dict[str, Any] | None:
        last[:] = [loop_get(env, project)]
        return last[0] if done(last[0]) else None

    return wait_for(
        check,
        what,
        timeout=timeout,
        interval=0.1,
        detail=lambda: json.dumps(last[0], indent=1)[-3000:],
    )


def wait_finished(env: dict[str, str], project: Path, timeout: float = 60.0) -> dict[str, Any]:
    """The session's final state, once it is no longer running."""
    return wait_until(
        env,
        project,
        lambda s: s["session"]["status"] != "running" and not s["running"],
        timeout=timeout,
        what="the session to finish",
    )


def artifacts(project: Path, session: str = SESSION) -> Path:
    return project / ".trainee" / "artifacts" / session


def read_ledgers(project: Path) -> tuple[list[dict[str, str]], list[dict[str, Any]]]:
    folder = artifacts(project)
    rows_csv = list(csv.DictReader(io.StringIO((folder / "result_ledger.csv").read_text())))
    rows_jsonl = [
        json.loads(line) for line in (folder / "result_ledger.jsonl").read_text().splitlines()
    ]
    return rows_csv, rows_jsonl


def check_outputs(project: Path, state: dict[str, Any]) -> None:
    """Every output exists and agrees with the store: one ledger row per round, same values."""
    folder = artifacts(project)
    for name in ("report.md", "result_ledger.csv", "result_ledger.jsonl", "research_state.json"):
        assert (folder / name).is_file(), f"missing {folder / name}"
    database = project / ".trainee" / "runtime.sqlite3"
    assert database.is_file()
    rounds = state["rounds"]
    indices = [r["index"] for r in rounds]
    assert indices == list(range(1, len(rounds) + 1))

    rows_csv, rows_jsonl = read_ledgers(project)
    assert [int(r["round"]) for r in rows_csv] == indices
    assert [r["index"] for r in rows_jsonl] == indices
    for rec, row_csv, row_json in zip(rounds, rows_csv, rows_jsonl, strict=True):
        assert row_json["session_id"] == SESSION
        assert row_json["status"] == rec["status"] == row_csv["status"]
        assert row_json["params"] == rec["params"]
        assert row_json["primary_metric"] == rec["primary_metric"]
        assert row_csv["verdict"] == (rec["verdict"] or "")
        if rec["primary_metric"] is None:
            assert row_csv["primary_metric"] == ""
        else:
            assert float(row_csv["primary_metric"]) == pytest.approx(rec["primary_metric"])
        for name, value in rec["params"].items():
            assert row_csv[f"param.{name}"] == (
                repr(value) if isinstance(value, float) else str(value)
            )

    research = json.loads((folder / "research_state.json").read_text())
    finished = [r for r in rounds if r["status"] != "running"]
    assert [r["index"] for r in research["rounds"]] == [r["index"] for r in finished]
    session = state["session"]
    if session["best_round"] is not None:
        assert research["best"]["index"] == session["best_round"]

    report = (folder / "report.md").read_text()
    assert f"# Trainee report — {SESSION}" in report
    assert f"**Status:** {session['status']}" in report
    assert f"**Stop reason:** {session['stop_reason']}" in report
    assert f"**Rounds:** {len(rounds)} of at most {session['max_rounds']}" in report

    with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as db:
        (count,) = db.execute("SELECT count(*) FROM rounds WHERE session = 1").fetchone()
    assert count == len(rounds)


def decisions(env: dict[str, str], project: Path, rounds: Sequence[int]) -> dict[int, Any]:
    """``runs_get``'s decision for each round of session-0001 (run id = round index)."""
    out = {}
    for index in rounds:
        got = call(env, "runs_get", {"project_root": str(project), "run_id": index})
        assert got["round"]["index"] == index
        out[index] = got["decision"]
    return out


def user_text(request: dict[str, Any]) -> str:
    return "\n".join(str(m.get("content", "")) for m in request["messages"] or [])
