"""The research loop end to end: the real CLI, a real daemon, real rounds, a scripted LLM.

Each test copies an example project to tmp_path, starts a session with
``trainee run`` against a private daemon, lets FakeLLM (an in-process OpenAI-style
server on 127.0.0.1) answer the decisions, and checks what the session left
behind: the store (through ``loop_get``/``runs_get``), the ledgers, the report,
the per-round config or command line, and that no training process is left.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml  # type: ignore[import-untyped]

from tests.fakes.llm_server import FakeLLM
from tests.support.daemon import Daemon, copy_example, run_cli
from tests.support.loop import (
    OK,
    SESSION,
    artifacts,
    check_outputs,
    decisions,
    llm_env,
    loop_get,
    plan,
    start,
    user_text,
    wait_finished,
)
from tests.support.processes import assert_no_training_left
from tests.support.timing import pause
from trainee.spec import format_float

pytestmark = pytest.mark.e2e


@pytest.fixture
def projects(tmp_path: Path) -> Iterator[list[Path]]:
    """Register project folders here; at teardown none may have a process left running."""
    roots: list[Path] = []
    yield roots
    for root in roots:
        assert_no_training_left(root)


# -- four rounds on each example ----------------------------------------------------------


MLP_PLANS = [
    ({"lr": 0.01}, "a larger step fits more in 200 epochs"),
    ({"lr": 0.01, "weight_decay": 0.003}, "more decay curbs the overfitting at lr 0.01"),
    ({"lr": 0.01, "weight_decay": 0.003, "batch_size": 32}, "bigger batches smooth the steps"),
]


def test_four_rounds_mlp_flags_guarded_with_the_live_view(
    module_daemon: Daemon, tmp_path: Path, projects: list[Path]
) -> None:
    project = copy_example("mlp-flags", tmp_path)
    projects.append(project)
    script = [OK, *(plan(p, h) for p, h in MLP_PLANS)]
    with FakeLLM(script) as fake:
        env = llm_env(module_daemon.env, fake)
        live = run_cli(
            "run", str(project), "--policy", "llm", "--guarded", "--max-rounds", "4",
            env=env, timeout=120,
        )  # fmt: skip
        assert live.returncode == 0, live.stdout + live.stderr
        state = loop_get(env, project)
        requests = fake.requests
    session = state["session"]
    assert session["status"] == "finished" and session["stop_reason"] == "max_rounds"
    assert session["security_mode"] == "guarded" and session["policy"] == "llm"
    rounds = state["rounds"]
    assert [r["status"] for r in rounds] == ["completed"] * 4
    check_outputs(project, state)

    # the decided params are what ran: in the store and on the recorded command line
    baseline = {"lr": 0.001, "weight_decay": 1e-05, "batch_size": 16}
    assert rounds[0]["params"] == baseline and rounds[0]["verdict"] == "baseline"
    for rec, (changes, hypothesis) in zip(rounds[1:], MLP_PLANS, strict=True):
        assert rec["params"] == {**baseline, **changes}
        assert rec["hypothesis"] == hypothesis
        command = rec["command"]
        assert f"--lr {format_float(rec['params']['lr'])}" in command
        assert f"--weight-decay {format_float(rec['params']['weight_decay'])}" in command
        assert f"--batch-size {rec['params']['batch_size']}" in command
        assert "--epochs 200" in command  # fixed args stay
        assert rec["primary_metric"] is not None
    assert rounds[1]["diff"] == {"lr": {"from": 0.001, "to": 0.01}}
    # the metric read from stdout is the one in the round's log
    log = (artifacts(project) / "round-0002.log").read_text()
    assert f"final val_loss={rounds[1]['primary_metric']}" in log

    # one live test, then one request per decision, each seeing the rounds before it
    assert len(requests) == 4
    assert user_text(requests[1]).count("a larger step") == 0
    assert "a larger step fits more" in user_text(requests[2])
    assert "more decay curbs" in user_text(requests[3])
    recorded = decisions(env, project, [1, 2, 3, 4])
    assert recorded[1] is None  # the baseline is not decided
    for index in (2, 3, 4):
        d = recorded[index]
        assert d["accepted"] and not d["repaired"] and d["provider"] == "openai_compatible"
        assert d["plan"]["params"] == MLP_PLANS[index - 2][0]
        assert d["prompt_tokens"] > 0 and d["completion_tokens"] > 0
    assert session["tokens"] == sum(
        d["prompt_tokens"] + d["completion_tokens"] for d in recorded.values() if d
    )

    # the final report has the decisions too, as session_report writes it
    report = (artifacts(project) / "report.md").read_text()
    assert "## Decisions" in report
    for index in (2, 3, 4):
        assert f"| {index} | openai_compatible / fake-model | json_schema | yes | no |" in report

    # what the person watching saw
    out = live.stdout
    for index in (1, 2, 3, 4):
        assert f"round {index}" in out
    assert "hypothesis: a larger step fits more in 200 epochs" in out
    assert "lr 0.001 → 0.01" in out
    assert f"report: {artifacts(project) / 'report.md'}" in out
    assert_no_training_left(project)


YAML_PLANS = [
    ({"lr": 0.01}, "a smaller step avoids the noise of lr 0.1"),
    ({"lr": 0.01, "l2_weight": 0.001}, "a little more L2 smooths the fit"),
    ({"lr": 0.03, "momentum": 0.5}, "less momentum with a larger step"),
]


def test_four_rounds_yaml_config_writes_the_decided_params_into_each_round_config(
    module_daemon: Daemon, tmp_path: Path, projects: list[Path]
) -> None:
    project = copy_example("yaml-config", tmp_path)
    projects.append(project)
    base_config = (project / "configs" / "base.yaml").read_text()
    with FakeLLM([OK, *(plan(p, h) for p, h in YAML_PLANS)]) as fake:
        env = llm_env(module_daemon.env, fake)
        start(project, env, "--unsafe", "--max-rounds", "4")
        state = wait_finished(env, project)
    session = state["session"]
    assert session["status"] == "finished" and session["stop_reason"] == "max_rounds"
    rounds = state["rounds"]
    assert [r["status"] for r in rounds] == ["completed"] * 4
    check_outputs(project, state)

    baseline = {"lr": 0.1, "momentum": 0.9, "l2_weight": 0.0001}
    assert rounds[0]["params"] == baseline
    runs = project / ".trainee" / "runs" / SESSION
    for rec in rounds:
        path = runs / f"round-{rec['index']:04d}" / "config.yaml"
        assert rec["config_path"] == str(path)
        assert str(path) in rec["command"]
        config = yaml.safe_load(path.read_text())
        assert config["optimizer"]["lr"] == rec["params"]["lr"]
        assert config["optimizer"]["momentum"] == rec["params"]["momentum"]
        assert config["loss"]["weights"]["l2"] == rec["params"]["l2_weight"]
        # the output folder is the round's own, and the metrics came from there
        outputs = path.parent / "outputs"
        assert config["output"]["root"] == str(outputs)
        last = json.loads((outputs / "metrics.jsonl").read_text().splitlines()[-1])
        assert rec["primary_metric"] == pytest.approx(last["val_loss"])
    for rec, (changes, _) in zip(rounds[1:], YAML_PLANS, strict=True):
        assert rec["params"] == {**baseline, **changes}
    # the user's baseline config is untouched
    assert (project / "configs" / "base.yaml").read_text() == base_config
    assert_no_training_left(project)


# -- decisions that need repair ------------------------------------------------------------


def test_invalid_json_then_a_valid_repair_runs_the_repaired_plan(
    module_daemon: Daemon, tmp_path: Path, projects: list[Path]
) -> None:
    project = copy_example("mlp-flags", tmp_path)
    projects.append(project)
    garbage = {"content": "Sure! Here is my plan: {hypothesis: lr up, params: {lr: 0.01"}
    with FakeLLM([OK, garbage, plan({"lr": 0.01}, "repaired plan")]) as fake:
        env = llm_env(module_daemon.env, fake)
        start(project, env, "--unsafe", "--max-rounds", "2")
        state = wait_finished(env, project)
        requests = fake.requests
    assert state["session"]["status"] == "finished", state["session"]
    assert state["session"]["stop_reason"] == "max_rounds"
    rounds = state["rounds"]
    assert len(rounds) == 2 and rounds[1]["params"]["lr"] == 0.01
    assert rounds[1]["hypothesis"] == "repaired plan"
    # the repair request carried the bad answer and the reason
    assert len(requests) == 3
    repair = requests[2]["messages"]
    assert repair[-2] == {"role": "assistant", "content": garbage["content"]}
    assert "Your plan was not accepted" in repair[-1]["content"]
    assert "response:" in repair[-1]["content"]
    d = decisions(env, project, [2])[2]
    assert d["accepted"] and d["repaired"]
    check_outputs(project, state)
    assert_no_training_left(project)


def test_out_of_bounds_and_unknown_params_are_never_applied(
    module_daemon: Daemon, tmp_path: Path, projects: list[Path]
) -> None:
    """Round 2: out of bounds, then repaired. Round 3: unknown, then out of bounds again ->
    invalid_decision, and no round 3 is launched."""
    project = copy_example("mlp-flags", tmp_path)
    projects.append(project)
    script = [
        OK,
        plan({"lr": 5.0}),  # above its max 0.3
        plan({"lr": 0.01}, "fixed plan"),
        plan({"momentum": 0.9}),  # not a tunable param
        plan({"batch_size": 1000}),  # above its max 100
    ]
    with FakeLLM(script) as fake:
        env = llm_env(module_daemon.env, fake)
        live = run_cli(
            "run", str(project), "--policy", "llm", "--unsafe", "--max-rounds", "4",
            env=env, timeout=120,
        )  # fmt: skip
        requests = fake.requests
        state = loop_get(env, project)
    assert live.returncode == 1, live.stdout + live.stderr
    session = state["session"]
    assert session["status"] == "failed"
    assert session["stop_reason"] == "invalid_decision"
    assert "params.batch_size" in session["error"]
    rounds = state["rounds"]
    assert [r["index"] for r in rounds] == [1, 2], "no round may start after a second bad answer"
    assert not (project / ".trainee" / "runs" / SESSION / "round-0003").exists()
    assert rounds[1]["params"] == {"lr": 0.01, "weight_decay": 1e-05, "batch_size": 16}
    assert rounds[1]["hypothesis"] == "fixed plan"
    command = rounds[1]["command"]
    assert "--lr 0.01 " in command + " " and "--lr 5.0" not in command
    for rec in rounds:
        assert "momentum" not in rec["params"] and "momentum" not in rec["command"]
        assert rec["params"]["batch_size"] == 16 and "--batch-size 16" in rec["command"]

    assert len(requests) == 5
    first_repair = requests[2]["messages"][-1]["content"]
    assert "params.lr: 5.0 is above the maximum 0.3" in first_repair
    second_repair = requests[4]["messages"][-1]["content"]
    assert "params.momentum: unknown parameter" in second_repair
    assert "lr, weight_decay, batch_size" in second_repair  # the names it may use

    assert "invalid_decision" in live.stdout and "params.batch_size" in live.stdout
    # the failed decision is kept (not accepted), and its tokens count against the budget
    report = (project / ".trainee" / "artifacts" / SESSION / "report.md").read_text()
    decision_rows = [ln for ln in report.splitlines() if ln.startswith("| 3 |")]
    assert decision_rows and "| no |" in decision_rows[0], report
    decisions = requests[1:]  # requests[0] is the live provider test before the session
    usage = sum(r["usage"]["prompt_tokens"] + r["usage"]["completion_tokens"] for r in decisions)
    assert session["tokens"] == usage
    check_outputs(project, state)
    assert_no_training_left(project)


def test_a_repeat_of_a_rejected_change_is_refused(
    module_daemon: Daemon, tmp_path: Path, projects: list[Path]
) -> None:
    project = copy_example("mlp-flags", tmp_path)
    projects.append(project)
    worse = {"lr": 0.02}  # 0.274 against the baseline's 0.262: rejected
    script = [OK, plan(worse, "bigger step"), plan(worse, "again"), plan({"lr": 0.005}, "other")]
    with FakeLLM(script) as fake:
        env = llm_env(module_daemon.env, fake)
        start(project, env, "--unsafe", "--max-rounds", "3")
        state = wait_finished(env, project)
        requests = fake.requests
    rounds = state["rounds"]
    assert state["session"]["stop_reason"] == "max_rounds", state["session"]
    assert rounds[1]["params"]["lr"] == 0.02 and rounds[1]["verdict"] == "rejected"
    assert rounds[2]["params"]["lr"] == 0.005 and rounds[2]["hypothesis"] == "other"
    assert len(requests) == 4
    repair = requests[3]["messages"][-1]["content"]
    assert "already tried and rejected" in repair
    assert decisions(env, project, [3])[3]["repaired"]
    check_outputs(project, state)
    assert_no_training_left(project)


# -- providers -------------------------------------------------------------------------------


def test_provider_500_fails_over_then_all_failing_stops_the_session(
    module_daemon: Daemon, tmp_path: Path, projects: list[Path]
) -> None:
    project = copy_example("mlp-flags", tmp_path)
    projects.append(project)
    error = {"status": 500, "body": {"error": {"message": "upstream exploded"}}}
    with (
        FakeLLM([OK, error, error]) as primary,
        # the pre-start test asks every configured provider: OK from each first
        FakeLLM([OK, plan({"lr": 0.01}, "from the second provider"), error]) as second,
    ):
        env = llm_env(
            module_daemon.env,
            primary,
            OPENAI_API_KEY="sk-second-provider-key",
            OPENAI_MODEL="second-model",
            OPENAI_BASE_URL=second.openai_base_url,
        )
        start(project, env, "--unsafe", "--max-rounds", "4")
        state = wait_finished(env, project)
        asked_primary, asked_second = len(primary.requests), len(second.requests)
    session = state["session"]
    assert session["status"] == "failed"
    assert session["stop_reason"] == "provider_failed"
    assert "all providers failed" in session["error"]
    assert "openai_compatible" in session["error"] and "openai" in session["error"]
    rounds = state["rounds"]
    assert [r["index"] for r in rounds] == [1, 2]
    assert rounds[1]["hypothesis"] == "from the second provider"
    d = decisions(env, project, [2])[2]
    assert d["provider"] == "openai" and d["model"] == "second-model"
    assert (asked_primary, asked_second) == (3, 3)
    check_outputs(project, state)
    assert_no_training_left(project)


def test_provider_timeout_stops_the_session_with_provider_failed(
    module_daemon: Daemon, tmp_path: Path, projects: list[Path]
) -> None:
    project = copy_example("mlp-flags", tmp_path)
    projects.append(project)
    with FakeLLM([OK, {"delay": 5, "content": "late"}]) as fake:
        env = llm_env(module_daemon.env, fake, TRAINEE_LLM_TIMEOUT_SEC="1")
        start(project, env, "--unsafe", "--max-rounds", "3")
        state = wait_finished(env, project)
    session = state["session"]
    assert session["status"] == "failed"
    assert session["stop_reason"] == "provider_failed"
    assert "no reply within 1 s" in session["error"]
    assert [r["index"] for r in state["rounds"]] == [1]
    check_outputs(project, state)
    assert_no_training_left(project)


# -- stop conditions -------------------------------------------------------------------------


def test_max_rounds_from_project_yaml_when_the_cli_gives_none(
    module_daemon: Daemon, tmp_path: Path, projects: list[Path]
) -> None:
    project = copy_example("mlp-flags", tmp_path)
    projects.append(project)
    spec_file = project / ".trainee" / "project.yaml"
    spec_file.write_text(spec_file.read_text().replace("max_rounds: 6", "max_rounds: 2"))
    with FakeLLM([OK, plan({"lr": 0.01})]) as fake:
        env = llm_env(module_daemon.env, fake)
        start(project, env, "--unsafe")
        state = wait_finished(env, project)
        asked = len(fake.requests)
    assert state["session"]["max_rounds"] == 2
    assert state["session"]["stop_reason"] == "max_rounds"
    assert state["session"]["status"] == "finished"
    assert len(state["rounds"]) == 2 and asked == 2  # no decision asked after the last round
    check_outputs(project, state)
    assert_no_training_left(project)


def test_no_tunable_params_runs_the_baseline_once_then_stops(
    module_daemon: Daemon, tmp_path: Path, projects: list[Path]
) -> None:
    project = copy_example("mlp-flags", tmp_path)
    projects.append(project)
    (project / ".trainee" / "tuning.yaml").write_text("version: 1\nparams: []\n")
    with FakeLLM([OK]) as fake:
        env = llm_env(module_daemon.env, fake)
        start(project, env, "--unsafe", "--max-rounds", "4")
        state = wait_finished(env, project)
        asked = len(fake.requests)
    session = state["session"]
    assert session["status"] == "finished"
    assert session["stop_reason"] == "no_tunable_params"
    assert [r["status"] for r in state["rounds"]] == ["completed"]
    assert state["rounds"][0]["params"] == {}
    assert asked == 1  # the live test only: nothing to decide
    check_outputs(project, state)
    assert_no_training_left(project)


def test_required_metric_missing_fails_the_session(
    module_daemon: Daemon, tmp_path: Path, projects: list[Path]
) -> None:
    project = copy_example("mlp-flags", tmp_path)
    projects.append(project)
    spec_file = project / ".trainee" / "project.yaml"
    text = spec_file.read_text()
    assert "'final val_loss=" in text
    spec_file.write_text(text.replace("'final val_loss=", "'final val_accuracy="))
    with FakeLLM([OK]) as fake:
        env = llm_env(module_daemon.env, fake)
        start(project, env, "--unsafe", "--max-rounds", "4")
        state = wait_finished(env, project)
        asked = len(fake.requests)
    session = state["session"]
    assert session["status"] == "failed"
    assert session["stop_reason"] == "required_metric_missing"
    rounds = state["rounds"]
    assert [r["status"] for r in rounds] == ["completed_without_metrics"]
    assert rounds[0]["returncode"] == 0 and rounds[0]["primary_metric"] is None
    assert asked == 1
    check_outputs(project, state)
    assert_no_training_left(project)


# -- budgets ---------------------------------------------------------------------------------


def _add_to_project_yaml(project: Path, text: str, *, under: str | None = None) -> None:
    """Append a top-level section, or add ``text`` as keys of the existing ``under`` section."""
    spec_file = project / ".trainee" / "project.yaml"
    data = spec_file.read_text()
    if under is None:
        data += "\n" + text
    else:
        assert f"\n{under}:\n" in data
        data = data.replace(f"\n{under}:\n", f"\n{under}:\n{text}", 1)
    spec_file.write_text(data)


USAGE = {"prompt_tokens": 60, "completion_tokens": 10}
"""Every decision costs 70 tokens."""


def test_budget_tokens_stops_before_the_decision_that_would_exceed_it(
    module_daemon: Daemon, tmp_path: Path, projects: list[Path]
) -> None:
    project = copy_example("mlp-flags", tmp_path)
    projects.append(project)
    _add_to_project_yaml(project, "llm:\n  max_tokens: 100\n")
    script = [OK, {**plan({"lr": 0.01}), "usage": USAGE}, {**plan({"lr": 0.003}), "usage": USAGE}]
    with FakeLLM(script) as fake:
        env = llm_env(module_daemon.env, fake)
        start(project, env, "--unsafe", "--max-rounds", "6")
        state = wait_finished(env, project)
        asked = len(fake.requests)
    session = state["session"]
    assert session["status"] == "finished"
    assert session["stop_reason"] == "budget_tokens"
    assert session["tokens"] == 140  # 70 < 100 after round 2's decision, 140 after round 3's
    assert [r["index"] for r in state["rounds"]] == [1, 2, 3]
    assert asked == 3
    check_outputs(project, state)
    assert_no_training_left(project)


def test_budget_usd_stops_the_session(
    module_daemon: Daemon, tmp_path: Path, projects: list[Path]
) -> None:
    project = copy_example("mlp-flags", tmp_path)
    projects.append(project)
    _add_to_project_yaml(project, "llm:\n  max_usd: 0.1\n")
    # a user price for this model: 70 tokens cost $0.07 per decision
    config = module_daemon.runtime / "home" / ".trainee" / "config.json"
    config.parent.mkdir(parents=True, exist_ok=True)
    price = {"input_per_mtok": 1000.0, "output_per_mtok": 1000.0}
    config.write_text(json.dumps({"prices": {"priced-model": price}}))
    config.chmod(0o600)
    script = [OK, {**plan({"lr": 0.01}), "usage": USAGE}, {**plan({"lr": 0.003}), "usage": USAGE}]
    try:
        with FakeLLM(script) as fake:
            env = llm_env(module_daemon.env, fake, TRAINEE_LLM_MODEL="priced-model")
            start(project, env, "--unsafe", "--max-rounds", "6")
            state = wait_finished(env, project)
    finally:
        config.unlink()
    session = state["session"]
    assert session["status"] == "finished"
    assert session["stop_reason"] == "budget_usd"
    assert session["cost_usd"] == pytest.approx(0.14)
    assert [r["index"] for r in state["rounds"]] == [1, 2, 3]
    d = decisions(env, project, [2])[2]
    assert d["cost_usd"] == pytest.approx(0.07)
    check_outputs(project, state)
    assert_no_training_left(project)


def test_budget_time_runs_the_baseline_then_stops_before_any_decision(
    module_daemon: Daemon, tmp_path: Path, projects: list[Path]
) -> None:
    project = copy_example("mlp-flags", tmp_path)
    projects.append(project)
    _add_to_project_yaml(project, "  max_session_minutes: 0.0001\n", under="run")
    with FakeLLM([OK]) as fake:
        env = llm_env(module_daemon.env, fake)
        start(project, env, "--unsafe", "--max-rounds", "6")
        state = wait_finished(env, project)
        asked = len(fake.requests)
    session = state["session"]
    assert session["status"] == "finished"
    assert session["stop_reason"] == "budget_time"
    assert [r["status"] for r in state["rounds"]] == ["completed"]
    assert asked == 1
    check_outputs(project, state)
    assert_no_training_left(project)


def test_ctrl_c_while_the_session_is_starting_stops_it_as_soon_as_it_exists(
    module_daemon: Daemon, tmp_path: Path, projects: list[Path]
) -> None:
    """The provider's live test takes its time; Ctrl-C then must not leave a session
    running unseen: the CLI waits for the session to exist and stops it."""
    import subprocess

    project = copy_example("mlp-flags", tmp_path)
    projects.append(project)
    with FakeLLM([{"delay": 3, **OK}, plan({"lr": 0.01})]) as fake:
        env = llm_env(module_daemon.env, fake)
        proc = subprocess.Popen(
            [sys.executable, "-m", "trainee", "run", str(project), "--policy", "llm", "--unsafe"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 30
        while not fake.requests:  # the live test is being answered (slowly)
            assert time.monotonic() < deadline, "the live test never came"
            pause(0.05)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, out + err
        assert "stopped as soon as it exists" in err and f"{SESSION} stopped" in err
        state = wait_finished(env, project)
    assert state["session"]["status"] == "stopped"
    assert state["session"]["stop_reason"] == "user_stop"
    assert all(r["status"] == "stopped" for r in state["rounds"]), state["rounds"]
    assert_no_training_left(project)


def test_a_llama_cpp_like_server_every_request_kept_and_a_policy_stop_is_no_error(
    module_daemon: Daemon, tmp_path: Path, projects: list[Path]
) -> None:
    """Issue 18 through the daemon: the live test steps down from a json_schema refused with
    HTTP 500 and the session uses what worked; a stop before decision.min_rounds is sent
    back; every request is stored with the decision; rounds point at their decision; the
    policy's stop is a stop, not an error, in the store and the report."""
    project = copy_example("mlp-flags", tmp_path)
    projects.append(project)
    early_stop = {
        "content": json.dumps(
            {
                "hypothesis": "",
                "change_summary": "",
                "params": {},
                "expected": "",
                "stop": True,
                "stop_reason": "the baseline looks fine",
            }
        )
    }
    stop = {
        "content": json.dumps(
            {
                "hypothesis": "",
                "change_summary": "",
                "params": {},
                "expected": "",
                "stop": True,
                "stop_reason": "a lower lr did not help",
            }
        )
    }
    script = [
        {"refuse_format": ["json_schema"], "status": 500},
        OK,
        early_stop,
        plan({"lr": 0.003}, "a smaller step"),
        stop,
    ]
    with FakeLLM(script) as fake:
        env = llm_env(module_daemon.env, fake)
        start(project, env, "--unsafe", "--max-rounds", "3")
        state = wait_finished(env, project)
        url = fake.openai_base_url
        formats = [
            (r["response_format"] or {}).get("type") if r["response_format"] else None
            for r in fake.requests
        ]
    session = state["session"]
    assert (session["status"], session["stop_reason"]) == ("finished", "policy_stop")
    assert session["error"] is None
    assert session["stop_detail"] == "a lower lr did not help"
    # the live test negotiated json_object; every decision started there
    assert formats == ["json_schema", "json_object", "json_object", "json_object", "json_object"]
    d = decisions(env, project, [2])[2]
    assert d["response_format"] == "json_object" and d["repaired"]
    first, second = d["attempts"]
    assert first["ok"] and first["problems"][0]["field"] == "stop"
    assert "decision.min_rounds" in first["problems"][0]["reason"]
    assert second["ok"] and second["problems"] == [] and '"lr": 0.003' in second["answer"]
    assert first["url"] == url
    with sqlite3.connect(project / ".trainee" / "runtime.sqlite3") as db:
        linked = db.execute(
            'SELECT r."index", d.round FROM rounds r JOIN decisions d ON d.id = r.decision_id'
        ).fetchall()
    assert linked == [(2, 2)]
    report = (artifacts(project) / "report.md").read_text()
    assert "**Stop reason:** policy_stop — a lower lr did not help" in report
    assert "**Error:**" not in report
    assert "Requests of the decision for round 2:" in report
    assert "json_object" in report
    check_outputs(project, state)
