"""No API key ends up in a file under .trainee/, in the daemon's files or in an answer.

A session runs with a distinctive key; the provider finally fails with an error
body that quotes the key back (as real providers do). Then every file under the
project's .trainee/ (the database and its WAL included), every file of the
daemon's runtime folder (its log too), every answer the API gives about the
session, and what the live view printed are searched for the key.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fakes.llm_server import FakeLLM
from tests.support.daemon import Daemon, copy_example, run_cli
from tests.support.loop import OK, SESSION, call, llm_env, loop_get, plan
from tests.support.processes import assert_no_training_left

pytestmark = pytest.mark.e2e

SECRET = "sk-proj-TRAINEEe2eSECRETk9Qz7Xw2Lm4Np8Rt"
SECOND_SECRET = "sk-ant-TRAINEEe2eSECONDv3Hb6Jd1Kf5Gs0Yu"
LEAKS = (SECRET, SECRET[6:-4], SECOND_SECRET, SECOND_SECRET[7:-4])
"""The keys, and their middles: a masked form may keep a prefix and a suffix, no more."""


def _files(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file() and not p.is_symlink()]


def _leaks(name: str, data: bytes) -> list[str]:
    return [f"{name} holds {leak[:12]}..." for leak in LEAKS if leak.encode() in data]


def test_no_api_key_in_any_file_log_or_answer(daemon: Daemon, tmp_path: Path) -> None:
    project = copy_example("mlp-flags", tmp_path)
    quoted = {
        "status": 401,
        "body": {
            "error": {
                "message": f"Incorrect API key provided: {SECRET}. You can find your API key "
                "at https://platform.example/account/api-keys.",
                "type": "invalid_request_error",
                "code": "invalid_api_key",
            }
        },
    }
    script = [OK, plan({"lr": 0.01}, "bigger step"), quoted]
    # the pre-start test asks every configured provider, the backup too
    with FakeLLM(script) as fake, FakeLLM([OK, quoted]) as second:
        env = llm_env(
            daemon.env,
            fake,
            TRAINEE_LLM_API_KEY=SECRET,
            OPENAI_API_KEY=SECOND_SECRET,
            OPENAI_MODEL="second-model",
            OPENAI_BASE_URL=second.openai_base_url,
        )
        live = run_cli(
            "run", str(project), "--policy", "llm", "--unsafe", "--max-rounds", "4",
            env=env, timeout=120,
        )  # fmt: skip
        sent = [r["api_key"] for r in fake.requests] + [r["api_key"] for r in second.requests]
        state = loop_get(env, project)
        answers = {
            "loop_get": state,
            "runs_list": call(env, "runs_list", {"project_root": str(project)}),
            "runs_get 1": call(env, "runs_get", {"project_root": str(project), "run_id": 1}),
            "runs_get 2": call(env, "runs_get", {"project_root": str(project), "run_id": 2}),
            "session_report": call(
                env, "session_report", {"project_root": str(project), "session": SESSION}
            ),
            "events_list": call(env, "events_list", {"limit": 10000}),
            "provider": call(env, "runtime_provider_get", {}),
        }
    # the keys were really used, and the session ended on the quoted error
    assert sent == [SECRET, SECRET, SECRET, SECOND_SECRET, SECOND_SECRET]
    assert state["session"]["stop_reason"] == "provider_failed", state["session"]
    assert "Incorrect API key provided" in state["session"]["error"]
    assert len(state["rounds"]) == 2

    found: list[str] = []
    for path in _files(project / ".trainee"):
        found += _leaks(str(path), path.read_bytes())
    for path in _files(daemon.runtime):
        found += _leaks(str(path), path.read_bytes())
    assert daemon.log, "the daemon log is searched, so it must exist"
    for name, answer in answers.items():
        found += _leaks(name, json.dumps(answer).encode())
    found += _leaks("trainee run output", (live.stdout + live.stderr).encode())
    assert not found, "\n".join(found)
    assert_no_training_left(project)
