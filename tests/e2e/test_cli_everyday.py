"""What a user types every day, through the real CLI (and a real daemon where one is
needed): help, mistakes, --json, call's input, the port, the provider test of init."""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fakes.llm_server import FakeLLM
from tests.support.daemon import Daemon, base_env, run_cli
from tests.support.timing import pause
from trainee.cli import COMMANDS, build_parser

pytestmark = pytest.mark.e2e


def test_every_option_has_help_and_run_lists_its_policies() -> None:
    parser = build_parser()
    for name, command in parser.commands.items():
        for action in command._actions:
            assert action.help, f"trainee {name} {action.option_strings or action.dest}"
    assert sorted(parser.commands) == sorted(COMMANDS)
    shown = run_cli("run", "--help", env=dict(os.environ))
    assert shown.returncode == 0
    assert "--policy {llm,tpe,random,hybrid,external}" in shown.stdout
    assert "tpe (Optuna) and random need none" in " ".join(shown.stdout.split())


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["stauts"], "unknown command 'stauts': did you mean 'status'?"),
        (["run", "--max-runds", "3"], "unrecognized arguments: --max-runds (did you mean --max-rounds?)"),
        (["run", "--policy", "tpee"], "unknown choice 'tpee': did you mean 'tpe'?"),
        (["run", "--max-rounds", "0"], "trainee run: error: --max-rounds must be at least 1, got 0"),
        (["logs", "session-0001", "0"], "ROUND: not a round number: '0' (round numbers start at 1)"),
        (["attach", "session-x"], "SESSION: not a session id: 'session-x'"),
        (["call", "loop_get", "--input", "[1, 2, 3]"], "--input must be a JSON object of loop_get's"),
    ],
)  # fmt: skip
def test_mistakes_get_a_plain_answer_and_exit_2(
    args: list[str], said: str, short_dir: Path
) -> None:
    result = run_cli(*args, env=base_env(short_dir))  # refused before any daemon is asked
    assert result.returncode == 2, result.stdout + result.stderr
    assert said in result.stderr
    assert "$." not in result.stderr and "Expected `" not in result.stderr
    assert not (short_dir / "trainee.sock").exists()


def test_json_before_or_after_the_command_is_the_same(daemon: Daemon) -> None:
    before, after = daemon.cli("--json", "status"), daemon.cli("status", "--json")
    assert before.returncode == after.returncode == 0
    first, second = before.json(), after.json()
    assert first.keys() == second.keys() and first["pid"] == second["pid"]
    assert daemon.cli("--json", "version").json()["version"]
    sent = daemon.cli("--json", "call", "loop_get", "--input", '{"project_root": "/"}')
    assert sent.returncode == 4 and sent.json()["error"]["data"]["type"] == "NotFound"
    wrong = daemon.cli("call", "logs_tail", "--input", '{"session": "x", "round": 0}')
    assert wrong.returncode == 2 and "$." not in wrong.stderr, wrong.stderr
    assert "logs_tail: invalid params: round number must be 1 or more, got 0" in wrong.stderr


def test_doctor_without_a_project_says_to_run_init(daemon: Daemon, tmp_path: Path) -> None:
    result = run_cli("doctor", str(tmp_path), env={**daemon.env, "COLUMNS": "250"})
    assert result.returncode == 1
    assert "run `trainee init` to create .trainee/project.yaml" in result.stdout, result.stdout


def test_a_taken_port_names_the_option_and_the_variable(short_dir: Path) -> None:
    env = base_env(short_dir)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        for args, extra in (([f"--port={port}"], {}), (["serve"], {"TRAINEE_HTTP_PORT": port})):
            refused = run_cli(*args, env={**env, **extra}, timeout=60)  # bare `trainee` = serve
            assert refused.returncode == 12, refused.stderr
            assert f"error: port {port} is taken: cannot serve HTTP on 127.0.0.1:{port}" in (
                refused.stderr
            )
            assert "choose another with --port N or TRAINEE_HTTP_PORT=N" in refused.stderr
        # the daemon a command starts needs its socket, not that port: it takes a free one
        hello = run_cli("call", "daemon_hello", env={**env, "TRAINEE_HTTP_PORT": port})
        assert hello.returncode == 0, hello.stderr
        assert not hello.json()["http_url"].endswith(f":{port}")
    assert run_cli("daemon", "stop", env=env).returncode == 0


def test_serve_without_a_project_keeps_service_data_in_a_private_home_folder(
    short_dir: Path,
) -> None:
    env = base_env(short_dir)
    runtime = Path(env["HOME"]) / ".trainee" / "runtime"
    log = short_dir / "serve.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "trainee", "serve", "--port", "0"],
                                env=env, stdout=out, stderr=subprocess.STDOUT)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while run_cli("daemon", "status", env=env).returncode != 0:  # asks, starts none
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            pause(0.1)
        assert runtime.is_dir() and stat.S_IMODE(runtime.stat().st_mode) == 0o700
        assert stat.S_IMODE(runtime.parent.stat().st_mode) == 0o700
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0


def test_init_and_prepare_fail_when_the_provider_the_policy_needs_does_not_answer(
    daemon: Daemon, tmp_path: Path
) -> None:
    root = tmp_path / "p"
    root.mkdir()
    (root / "train.py").write_text("import sys\nprint('loss=1')\n")
    init = daemon.cli("init", str(root))  # no provider configured, policy llm (the default)
    assert init.returncode == 1, init.stdout + init.stderr
    assert "LLM provider test failed: no LLM provider is configured" in init.stderr
    assert "--skip-provider-test" in init.stderr
    assert (root / ".trainee" / "project.yaml").is_file()  # the files are written all the same
    assert daemon.cli("init", str(root), "--skip-provider-test").returncode == 0

    with FakeLLM([{"status": 500, "body": {"error": {"message": "model is down"}}}] * 4) as fake:
        env = {**daemon.env, "TRAINEE_LLM_PROVIDER": "openai_compatible",
               "TRAINEE_LLM_BASE_URL": fake.openai_base_url, "TRAINEE_LLM_MODEL": "m",
               "TRAINEE_LLM_API_KEY": "sk-test-0000"}  # fmt: skip
        failed = run_cli("prepare", str(root), "--json", env=env)
        assert failed.returncode == 1, failed.stderr
        test = failed.json()["provider_test"]
        assert test["needed"] is True and test["ok"] is False and test["policy"] == "llm"

    config = root / ".trainee" / "project.yaml"
    config.write_text(config.read_text() + "\ndecision:\n  policy: tpe\n")
    offline = daemon.cli("prepare", str(root))
    assert offline.returncode == 0, offline.stderr
    assert "provider: live test skipped (policy tpe needs no provider)" in offline.stdout
    doctor = json.loads(daemon.cli("doctor", str(root), "--skip-provider-test", "--json").stdout)
    (row,) = [c for c in doctor["checks"] if c["name"] == "provider"]
    assert (row["status"], row["detail"]) == ("pass", "policy tpe needs no provider")
