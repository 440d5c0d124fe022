"""The daemon's life through the real CLI and a real socket."""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import jsonschema
import pytest

from tests.support.daemon import Daemon, base_env, run_cli
from trainee.rpc.client import RpcClient

pytestmark = pytest.mark.e2e

SPEC_TOOLS = [
    "project_register",
    "project_get",
    "project_update_context",
    "runtime_provider_get",
    "runtime_provider_update",
    "runtime_debug_get",
    "runtime_debug_update",
    "runtime_system_prompt_get",
    "runtime_system_prompt_update",
    "prompt_preview",
    "prompt_presets_list",
    "prompt_presets_save",
    "loop_start",
    "loop_get",
    "loop_stop",
    "runs_list",
    "runs_get",
    "session_report",
]


def test_call_daemon_hello(daemon: Daemon) -> None:
    result = daemon.cli("call", "daemon_hello")
    assert result.returncode == 0, result.stderr
    hello = result.json()
    assert hello["name"] == "trainee"
    assert hello["pid"] == daemon.proc.pid  # type: ignore[union-attr]
    assert hello["socket"] == str(daemon.socket)
    assert "daemon_hello" in hello["capabilities"]


def test_tools_lists_every_spec_tool_with_a_valid_schema(daemon: Daemon) -> None:
    result = daemon.cli("tools", "--json")
    assert result.returncode == 0, result.stderr
    schemas = {entry["function"]["name"]: entry for entry in result.json()}
    for name in [*SPEC_TOOLS, "daemon_hello", "events_watch", "logs_tail"]:
        assert name in schemas, name
    for entry in schemas.values():
        assert entry["type"] == "function"
        fn = entry["function"]
        assert fn["description"]
        jsonschema.Draft202012Validator.check_schema(fn["parameters"])
        assert fn["parameters"]["type"] == "object"
    one = daemon.cli("tools", "--name", "loop_start").json()
    assert [e["function"]["name"] for e in one] == ["loop_start"]


def test_errors_come_back_as_their_class_and_exit_status(daemon: Daemon, tmp_path: Path) -> None:
    result = daemon.cli("call", "loop_get", "--input", json.dumps({"project_root": str(tmp_path)}))
    assert result.returncode == 4, result.stderr
    assert f"no session in {tmp_path}" in result.stderr
    as_json = daemon.cli(
        "call", "loop_get", "--json", "--input", json.dumps({"project_root": str(tmp_path)})
    )
    assert as_json.json()["error"]["code"] == 1002
    assert as_json.json()["error"]["data"]["type"] == "NotFound"


def test_bad_input_to_call_names_the_problem(daemon: Daemon, tmp_path: Path) -> None:
    bad = daemon.cli("call", "daemon_hello", "--input", "{nope")
    assert bad.returncode == 2
    assert "--input: not valid JSON" in bad.stderr
    missing = daemon.cli("call", "daemon_hello", "--input", f"@{tmp_path}/absent.json")
    assert missing.returncode == 2 and "cannot read" in missing.stderr
    wrong = daemon.cli("call", "logs_tail", "--input", '{"session": "x", "round": 0}')
    assert wrong.returncode == 2
    assert "logs_tail: invalid params" in wrong.stderr
    unknown = daemon.cli("call", "no_such_tool")
    assert unknown.returncode == 11
    assert "Method not found: no_such_tool" in unknown.stderr
    from_stdin = daemon.cli("call", "tools_list", "--input", "-", input='{"name": "daemon_hello"}')
    assert from_stdin.returncode == 0
    assert from_stdin.json()[0]["function"]["name"] == "daemon_hello"


def test_socket_and_folder_permissions(daemon: Daemon) -> None:
    assert stat.S_IMODE(daemon.socket.stat().st_mode) == 0o600
    assert stat.S_IMODE(daemon.socket.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE((daemon.runtime / "token").stat().st_mode) == 0o600


def test_second_daemon_on_the_same_socket_refuses(daemon: Daemon) -> None:
    other = Daemon(runtime=daemon.runtime, env=daemon.env)
    line = other.start()
    assert line.startswith("ALREADY")
    assert f"already running (pid {daemon.proc.pid})" in line  # type: ignore[union-attr]
    assert other.proc is not None and other.proc.wait(10) == 5  # invalid state
    # the first one is untouched
    assert daemon.cli("call", "daemon_hello").returncode == 0


def test_sigterm_stops_gracefully_and_removes_the_socket(daemon: Daemon) -> None:
    assert daemon.stop(signal.SIGTERM) == 0
    assert not daemon.socket.exists()
    assert "received SIGTERM, stopping gracefully" in daemon.log


def test_sigkill_leaves_a_stale_socket_the_next_start_cleans_up(short_dir: Path) -> None:
    first = Daemon(runtime=short_dir, env=base_env(short_dir))
    assert first.start().startswith("READY")
    first.stop(signal.SIGKILL)
    assert first.socket.exists(), "a killed daemon leaves its socket file behind"
    status = run_cli("daemon", "status", env=first.env)  # asks, starts none
    assert status.returncode == 69 and "not running" in status.stdout
    second = Daemon(runtime=short_dir, env=first.env)
    try:
        assert second.start().startswith("READY"), second.log
        assert second.cli("call", "daemon_hello").json()["pid"] == second.proc.pid  # type: ignore[union-attr]
    finally:
        second.stop()


def test_cli_autostarts_a_daemon_and_stop_stops_it(daemon_env: dict[str, str]) -> None:
    assert run_cli("daemon", "status", env=daemon_env).returncode == 69
    hello = run_cli("call", "daemon_hello", env=daemon_env)
    assert hello.returncode == 0, hello.stderr
    pid = hello.json()["pid"]
    status = run_cli("daemon", "status", "--json", env=daemon_env)
    assert status.json()["pid"] == pid
    stopped = run_cli("daemon", "stop", env=daemon_env)
    assert stopped.returncode == 0, stopped.stderr
    assert f"daemon stopped (pid {pid})" in stopped.stdout
    assert (
        not Path(f"/proc/{pid}").exists() or b"zombie" in Path(f"/proc/{pid}/status").read_bytes()
    )
    assert run_cli("daemon", "stop", env=daemon_env).returncode == 69


def test_two_concurrent_starts_leave_exactly_one_daemon(daemon_env: dict[str, str]) -> None:
    results: list[subprocess.CompletedProcess[str]] = []

    def start() -> None:
        results.append(
            subprocess.run(
                [sys.executable, "-m", "trainee", "daemon", "start", "--json"],
                env=daemon_env,
                capture_output=True,
                text=True,
                timeout=60,
            )
        )

    threads = [threading.Thread(target=start) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r.returncode == 0 for r in results), [r.stderr for r in results]
    pids = {json.loads(r.stdout)["pid"] for r in results}
    assert len(pids) == 1
    # the loser of the race refuses and exits; wait for it to be gone, then count
    deadline = time.monotonic() + 15
    while True:
        ours = _daemons_on(daemon_env["TRAINEE_SOCKET"])
        if len(ours) <= 1 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert ours == [str(next(iter(pids)))]


def _daemons_on(sock: str) -> list[str]:
    running = subprocess.run(["pgrep", "-f", "trainee.daemon"], capture_output=True, text=True)
    out = []
    for pid in running.stdout.split():
        status = Path(f"/proc/{pid}/status")
        alive = status.exists() and b"zombie" not in status.read_bytes()
        if alive and sock.encode() in _environ_of(int(pid)):
            out.append(pid)
    return out


def _environ_of(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return b""


def test_events_watch_streams_published_events(daemon: Daemon) -> None:
    with (
        RpcClient(daemon.socket, timeout=10) as watcher,
        RpcClient(daemon.socket, timeout=10) as other,
    ):
        first = other.call(
            "events_publish", {"kind": "note", "session": "session-0001", "data": {"n": 1}}
        )
        watch = watcher.call("events_watch", {"session": "session-0001", "since": 0})
        assert watch["cursor"] >= first["id"]
        other.call(
            "events_publish", {"kind": "note.user", "session": "session-0001", "data": {"n": 2}}
        )
        other.call("events_publish", {"kind": "note", "session": "session-0002", "data": {"n": 3}})
        seen: list[dict[str, object]] = []
        while len(seen) < 2:
            note = watcher.next_notification(timeout=10)
            assert note is not None and note["method"] == "events"
            seen.extend(note["params"]["events"])
        assert [e["data"] for e in seen] == [{"n": 1}, {"n": 2}]
        assert seen[0]["id"] < seen[1]["id"]
        # a cursor resumes exactly after what was seen
        page = other.call("events_list", {"since": seen[0]["id"], "session": "session-0001"})
        assert [e["data"] for e in page["events"]] == [{"n": 2}]
        bad = run_cli(
            "call", "events_publish", "--input", '{"kind": "round.finished"}', env=daemon.env
        )
        assert bad.returncode == 2 and "kind" in bad.stderr


def test_logs_tail_reads_from_an_offset(daemon: Daemon, tmp_path: Path) -> None:
    log = tmp_path / ".trainee" / "artifacts" / "session-0001" / "round-0002.log"
    log.parent.mkdir(parents=True)
    log.write_bytes(b"epoch=1 loss=0.5\nepoch=2 loss=0.4\n")
    params = {
        "project_root": str(tmp_path),
        "session": "session-0001",
        "round": 2,
        "offset": 0,
        "length": 17,
    }
    with RpcClient(daemon.socket, timeout=10) as client:
        first = client.call("logs_tail", params)
        assert first["data"] == "epoch=1 loss=0.5\n" and first["overflow"] is True
        rest = client.call("logs_tail", {**params, "offset": first["next_offset"]})
        assert rest["data"] == "epoch=2 loss=0.4\n" and rest["overflow"] is False
        tail = client.call("logs_tail", {**params, "offset": -17})
        assert tail["data"] == "epoch=2 loss=0.4\n"

    traversal = run_cli(
        "call",
        "logs_tail",
        "--input",
        json.dumps({**params, "session": "../../etc"}),
        env=daemon.env,
    )
    assert traversal.returncode == 2 and "not a session id: '../../etc'" in traversal.stderr


def test_socket_activation_uses_the_handed_over_listener(short_dir: Path) -> None:
    """A listening socket passed as fd 3 with LISTEN_FDS is served; nothing is bound anew."""
    sock_path = short_dir / "activated.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(sock_path))
    listener.listen(8)
    env = base_env(short_dir)
    env["LISTEN_FDS"] = "1"
    # The child sets LISTEN_PID to its own pid and moves the socket to fd 3, as systemd does.
    wrapper = (
        "import os, sys, runpy; os.dup2(int(sys.argv[1]), 3); os.environ['LISTEN_PID'] = str(os.getpid());"
        "sys.argv = ['trainee.daemon', '--port', '0', '--ready-fd', sys.argv[2]];"
        "runpy.run_module('trainee.daemon', run_name='__main__')"
    )
    read_fd, write_fd = os.pipe()
    log = short_dir / "activated.log"
    with open(log, "wb") as log_fh:
        proc = subprocess.Popen(
            [sys.executable, "-c", wrapper, str(listener.fileno()), str(write_fd)],
            env=env,
            pass_fds=(listener.fileno(), write_fd),
            stdout=subprocess.DEVNULL,
            stderr=log_fh,
        )
    os.close(write_fd)
    try:
        with os.fdopen(read_fd, "rb") as ready:
            assert ready.readline().startswith(b"READY")
        listener.close()
        with RpcClient(sock_path, timeout=10) as client:
            assert client.call("daemon_hello")["pid"] == proc.pid
        assert not (short_dir / "trainee.sock").exists(), "nothing bound on the default path"
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0, log.read_text()
    assert sock_path.exists(), "a socket systemd owns is left in place"


def test_status_shows_the_daemon_and_its_sessions(daemon: Daemon) -> None:
    result = daemon.cli("status")
    assert result.returncode == 0, result.stderr
    assert f"running (pid {daemon.proc.pid}" in result.stdout  # type: ignore[union-attr]
    assert "sessions: none running" in result.stdout
    as_json = daemon.cli("status", "--json").json()
    assert as_json["sessions"] == [] and as_json["pid"] == daemon.proc.pid  # type: ignore[union-attr]
