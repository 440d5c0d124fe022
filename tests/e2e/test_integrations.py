"""MLflow, W&B and Apprise beside real sessions: the real daemon, the real libraries.

Sessions of examples/mlp-flags (``--policy random``) export to MLflow's file store, to a
real ``mlflow server`` on 127.0.0.1 (one per module) and to offline W&B runs, read back
with MLflow's client and W&B's own protobuf records. Notifications go through Apprise's
``json://`` to a small HTTP receiver this module runs; tests/fixtures/projects/flaky_job
(driven by the external policy) fails the ways people get paged for. A tracking server
that never answers, and a webhook that refuses, leave the sessions as they were.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]

from tests.support.daemon import (
    REPO,
    Daemon,
    copy_example,
    kill_leftover_daemons,
    run_cli,
    venv_env,
)
from tests.support.extras import missing, needs
from tests.support.loop import SESSION, call, wait_finished
from tests.support.processes import assert_no_training_left
from tests.support.timing import wait_for
from trainee.rpc.client import RpcClient

pytestmark = pytest.mark.e2e


needs_mlflow = needs("mlflow")
needs_wandb = needs("wandb")
needs_apprise = needs("notify")
SECRET = "hook-secret-token-4711"
"""A token in a notification URL's path: it must show up nowhere but the receiver."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- a webhook receiver ------------------------------------------------------------------


class Receiver:
    """Apprise's json:// notifications, by path."""

    def __init__(self) -> None:
        self.posts: list[tuple[str, dict[str, Any]]] = []
        self.lock = threading.Lock()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with outer.lock:
                    outer.posts.append((self.path, json.loads(body)))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = int(self.server.server_address[1])
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def url(self, name: str) -> str:
        return f"json://127.0.0.1:{self.port}/{name}/{SECRET}"

    def messages(self, name: str) -> list[dict[str, Any]]:
        with self.lock:
            return [body for path, body in self.posts if path == f"/{name}/{SECRET}"]

    def titles(self, name: str) -> list[str]:
        return [m["title"] for m in self.messages(name)]


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    try:
        yield r
    finally:
        r.server.shutdown()
        r.server.server_close()


# -- MLflow, W&B --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mlflow_server() -> Iterator[str]:
    """A real ``mlflow server`` on 127.0.0.1 (a free port), stopped at the end."""
    if (reason := missing("mlflow")) is not None:
        pytest.skip(reason)
    folder = Path(tempfile.mkdtemp(prefix="tr-mlflow-"))
    port = free_port()
    env = {
        **os.environ,
        "MLFLOW_ALLOW_FILE_STORE": "true",  # starts in seconds; a database migrates for long
        "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
        "MLFLOW_DISABLE_TELEMETRY": "true",
    }
    log = open(folder / "server.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [str(Path(sys.executable).parent / "mlflow"), "server", "--host", "127.0.0.1",
         "--port", str(port), "--workers", "1", "--backend-store-uri", str(folder / "store"),
         "--artifacts-destination", str(folder / "artifacts")],
        env=env, stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        if proc.poll() is not None:
            pytest.fail(f"mlflow server exited: {(folder / 'server.log').read_text()[-2000:]}")
        with contextlib.suppress(OSError), urllib.request.urlopen(url + "/health", timeout=2) as r:
            return bool(r.status == 200)
        return False

    try:
        wait_for(healthy, "the mlflow server", interval=0.1, timeout=180)
        yield url
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()
        shutil.rmtree(folder, ignore_errors=True)


def mlflow_runs(tracking_uri: str, experiment: str) -> dict[str, Any]:
    """run name -> run, read back with MLflow's client."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    exp = client.get_experiment_by_name(experiment)
    assert exp is not None, f"no experiment {experiment}"
    return {r.info.run_name: r for r in client.search_runs([exp.experiment_id])}


def check_mlflow(tracking_uri: str, experiment: str, state: dict[str, Any]) -> None:
    """One finished run per round under the session's run, with what the round had."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    runs = mlflow_runs(tracking_uri, experiment)
    parent = runs[SESSION]
    assert parent.info.status == "FINISHED"
    assert parent.data.tags["status"] == "finished"
    assert parent.data.tags["stop_reason"] == "max_rounds"
    session = state["session"]
    best = next(r for r in state["rounds"] if r["index"] == session["best_round"])
    assert parent.data.metrics["best/val_loss"] == pytest.approx(best["primary_metric"])
    assert parent.data.tags["best_round"] == str(best["index"])
    assert "report.md" in [a.path for a in client.list_artifacts(parent.info.run_id)]
    for rnd in state["rounds"]:
        run = runs[f"{SESSION}/round-{rnd['index']:04d}"]
        tags = run.data.tags
        assert tags["mlflow.parentRunId"] == parent.info.run_id
        assert run.info.status == "FINISHED"
        assert {k: tags[k] for k in ("session", "round", "policy", "status", "verdict")} == {
            "session": SESSION, "round": str(rnd["index"]), "policy": "random",
            "status": rnd["status"], "verdict": rnd["verdict"],
        }  # fmt: skip
        assert tags["project"] == "mlp-flags" and tags["hypothesis"] == rnd["hypothesis"]
        assert run.data.params == {k: str(v) for k, v in rnd["params"].items()}
        assert run.data.metrics["final/val_loss"] == pytest.approx(rnd["primary_metric"])
        # every epoch's loss point, at its step
        history = client.get_metric_history(run.info.run_id, "loss")
        assert [m.step for m in history] == list(range(1, 201))
        assert history[-1].value == pytest.approx(run.data.metrics["final/loss"])
        names = {a.path for a in client.list_artifacts(run.info.run_id)}
        assert {f"round-{rnd['index']:04d}.log", "round.json"} <= names
        saved = Path(client.download_artifacts(run.info.run_id, "round.json", tempfile.mkdtemp()))
        assert json.loads(saved.read_text())["params"] == rnd["params"]


_BLOCK = 32 * 1024


def wandb_records(path: Path) -> Iterator[Any]:
    """The records of a ``run-*.wandb`` file as wandb's own protobuf messages. The file is
    a LevelDB-style log: a 7-byte header, then 32 KiB blocks of (crc32, length, type)
    framed chunks; wandb 0.2x ships no Python reader, only the Record schema."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    ident, magic, _ = struct.unpack("<4sHB", data[:7])
    assert ident == b":W&B" and magic == 0xBEE1, "not a W&B transaction log"
    pos, buf = 7, b""
    while pos + 7 <= len(data):
        left = _BLOCK - pos % _BLOCK
        if left < 7:
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if length == 0 and kind == 0:
            pos += left
            continue
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        if kind in (1, 2):  # full, first
            buf = chunk
        else:
            buf += chunk
        if kind in (1, 4):  # full, last
            rec = pb.Record()
            rec.ParseFromString(buf)
            yield rec


def _items(items: Any) -> dict[str, Any]:
    """Key -> value of a record's items (a key is ``key`` or its ``nested_key`` path)."""
    return {(i.key or "/".join(i.nested_key)): json.loads(i.value_json) for i in items}


def wandb_run(folder: Path) -> dict[str, Any]:
    """What an offline run folder holds: its run record, history, summary, exit code."""
    out: dict[str, Any] = {"history": [], "summary": {}, "files": []}
    (log,) = folder.glob("run-*.wandb")
    for rec in wandb_records(log):
        kind = rec.WhichOneof("record_type")
        if kind == "run":
            out["run"] = rec.run
            out["config"] = _items(rec.run.config.update)
        elif kind == "config":
            out["config"].update(_items(rec.config.update))
        elif kind == "history":
            out["history"].append(_items(rec.history.item))
        elif kind == "summary":
            out["summary"].update(_items(rec.summary.update))
        elif kind == "files":
            out["files"] += [f.path for f in rec.files.files]
        elif kind == "exit":
            out["exit_code"] = rec.exit.exit_code
    return out


def check_wandb(folder: Path, state: dict[str, Any]) -> None:
    runs = [wandb_run(d) for d in sorted(folder.glob("wandb/offline-run-*"))]
    by_name = {r["run"].display_name: r for r in runs}
    for rnd in state["rounds"]:
        run = by_name[f"{SESSION}-round-{rnd['index']:04d}"]
        assert run["run"].run_group == SESSION and run["run"].job_type == "round"
        assert {k: run["config"][k] for k in rnd["params"]} == rnd["params"]
        assert run["config"]["trainee"]["round"] == rnd["index"]
        assert run["summary"]["final/val_loss"] == pytest.approx(rnd["primary_metric"])
        assert run["summary"]["status"] == rnd["status"]
        assert run["summary"]["verdict"] == rnd["verdict"]
        assert "random" in run["run"].tags and rnd["verdict"] in run["run"].tags
        losses = [(h["step"], h["loss"]) for h in run["history"] if "loss" in h]
        assert [s for s, _ in losses] == list(range(1, 201))
        assert {f"round-{rnd['index']:04d}.log", "round.json"} <= set(run["files"])
        assert run["exit_code"] == 0
    summary = by_name[SESSION]
    assert summary["run"].job_type == "session"
    assert summary["summary"]["best_round"] == state["session"]["best_round"]
    assert "report.md" in summary["files"]


# -- daemons --------------------------------------------------------------------------------


def start_daemon(runtime: Path, **env: str) -> Daemon:
    d = Daemon(runtime=runtime, env={**venv_env(runtime), **env})
    line = d.start()
    assert line.startswith("READY"), f"daemon did not start: {line!r}\n{d.log}"
    return d


def with_integrations(project: Path, integrations: dict[str, Any]) -> Path:
    path = project / ".trainee" / "project.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["integrations"] = integrations
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return project


def run_random(d: Daemon, project: Path, rounds: int = 3) -> dict[str, Any]:
    result = run_cli(
        "run", str(project), "--policy", "random", "--max-rounds", str(rounds), "--unsafe",
        env=d.env, timeout=180,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    state = wait_finished(d.env, project)
    assert state["session"]["status"] == "finished", state["session"]
    return state


def exported(project: Path, sink: str, rounds: int) -> bool:
    """The sink's state file says every round (and the session) is written."""
    path = project / ".trainee" / "artifacts" / SESSION / "integrations" / f"{sink}.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    done = [r for r in data["rounds"].values() if r.get("done")]
    return len(done) == rounds and ("session_run_id" in data or sink == "mlflow")


# -- the tests -------------------------------------------------------------------------------


@needs_mlflow
@needs_wandb
@needs_apprise
def test_a_random_session_lands_in_mlflow_wandb_and_a_webhook(
    module_venv_daemon: Daemon, receiver: Receiver, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = with_integrations(
        copy_example("mlp-flags", tmp_path),
        {
            "mlflow": {"tracking_uri": "mlruns", "experiment": "mlp"},
            "wandb": {"dir": ".trainee/wandb"},
            "notify": {"urls": [receiver.url("a")]},
        },
    )
    state = run_random(module_venv_daemon, project)
    wait_for(lambda: exported(project, "mlflow", 3), "the MLflow export", timeout=60, interval=0.1)
    wait_for(lambda: exported(project, "wandb", 3), "the W&B export", timeout=60, interval=0.1)
    wait_for(
        lambda: any("finished" in t for t in receiver.titles("a")),
        "the finished notification",
        timeout=60,
        interval=0.1,
    )

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    check_mlflow((project / "mlruns").as_uri(), "mlp", state)
    check_wandb(project / ".trainee" / "wandb", state)

    best = next(r for r in state["rounds"] if r["index"] == state["session"]["best_round"])
    finished = next(m for m in receiver.messages("a") if "finished" in m["title"])
    assert finished["title"] == f"trainee: mlp-flags {SESSION} finished"
    assert (
        f"Best val_loss {best['primary_metric']:.6g} (round {best['index']}" in finished["message"]
    )
    assert f"{module_venv_daemon.http_url}/#/session?project=" in finished["message"]
    assert finished["message"].endswith(f"&id={SESSION}")
    assert any("100 % of its round budget" in t for t in receiver.titles("a"))

    # the URL is a secret: masked in project_get, and a masked one sent back keeps the saved one
    shown = call(module_venv_daemon.env, "project_get", {"project_root": str(project)})
    urls = shown["project"]["integrations"]["notify"]["urls"]
    assert SECRET not in json.dumps(shown) and urls[0].startswith("json://****")
    before = (project / ".trainee" / "project.yaml").read_text()
    call(module_venv_daemon.env, "project_register",
         {**shown["project"], "tuning": shown["tuning"], "project_root": str(project)})  # fmt: skip
    assert yaml.safe_load((project / ".trainee" / "project.yaml").read_text()) == yaml.safe_load(
        before
    )
    assert SECRET not in module_venv_daemon.log
    assert_no_training_left(project)


@needs_mlflow
def test_rounds_reach_a_real_mlflow_server(
    module_venv_daemon: Daemon, mlflow_server: str, tmp_path: Path
) -> None:
    project = with_integrations(
        copy_example("mlp-flags", tmp_path),
        {"mlflow": {"tracking_uri": mlflow_server, "experiment": f"mlp-{tmp_path.name}"}},
    )
    state = run_random(module_venv_daemon, project)
    wait_for(lambda: exported(project, "mlflow", 3), "the MLflow export", timeout=60, interval=0.1)
    wait_for(
        lambda: (
            mlflow_runs(mlflow_server, f"mlp-{tmp_path.name}")[SESSION].info.status == "FINISHED"
        ),
        "the session run to end",
        timeout=60,
        interval=0.1,
    )
    check_mlflow(mlflow_server, f"mlp-{tmp_path.name}", state)
    assert not any(r["warnings"] for r in state["rounds"])


@needs_apprise
def test_notifications_tell_what_happened_with_the_numbers(
    module_venv_daemon: Daemon, receiver: Receiver, tmp_path: Path
) -> None:
    project = tmp_path / "flaky_job"
    shutil.copytree(REPO / "tests" / "fixtures" / "projects" / "flaky_job", project)
    with_integrations(project, {"notify": {"urls": [receiver.url("b")], "stall_minutes": 0.03}})
    root = str(project)
    plans = [
        ("a lower target gives a lower loss", {"target": 0.5}),
        ("a bigger batch does not fit", {"mode": "oom"}),
        ("a long evaluation without output", {"mode": "quiet", "target": 0.8}),
        ("a step that diverges", {"mode": "nan"}),
    ]
    with RpcClient(module_venv_daemon.socket, timeout=120) as rpc:
        started = rpc.call("loop_start", {"project_root": root, "policy": "external",
                                          "security_mode": "unsafe", "max_rounds": 5})  # fmt: skip
        session = started["session"]
        rpc.call("round_result", {"session": session, "round": 1, "project_root": root,
                                  "wait": True})  # fmt: skip
        for hypothesis, params in plans:
            rpc.call("round_run", {"session": session, "project_root": root,
                                   "hypothesis": hypothesis, "change_summary": hypothesis,
                                   "expected": "see", "params": params})  # fmt: skip
    state = wait_finished(module_venv_daemon.env, project)
    assert state["session"]["status"] == "failed"  # round 5 ended without its metric
    failed_title = f"trainee: flaky_job {SESSION} failed"
    wait_for(
        lambda: failed_title in receiver.titles("b"),
        "the failed notification",
        timeout=60,
        interval=0.1,
    )
    by_title = {m["title"]: m["message"] for m in receiver.messages("b")}
    page = f"{module_venv_daemon.http_url}/#/session?project="

    best = by_title["trainee: flaky_job new best in round 2"]
    assert "val_loss 0.5, -50.0 % vs baseline 1; previous best 1." in best
    assert "Changed: target 1.0 -> 0.5." in best and page in best
    oom = by_title["trainee: flaky_job round 3 failed: out of memory"]
    assert "(out of memory, exit code 1)" in oom and "mode=oom" in oom
    assert "no output or heartbeat" in by_title["trainee: flaky_job round 4 stalled"]
    assert (
        "4 of 5 rounds" in by_title[f"trainee: flaky_job {SESSION} used 80 % of its round budget"]
    )
    assert "trainee: flaky_job round 5 failed: nan/divergence" in by_title
    failed = by_title[failed_title]
    assert "(required_metric_missing) after 5 round(s)" in failed
    assert "Best val_loss 0.5 (round 2, -50.0 % vs baseline 1)" in failed
    assert not any("stalled" in t and "round 2" in t for t in by_title)
    assert SECRET not in module_venv_daemon.log
    assert_no_training_left(project)


@needs_mlflow
@needs_apprise
def test_a_tracking_server_that_never_answers_holds_nothing(
    receiver: Receiver, tmp_path: Path
) -> None:
    """MLflow's requests go to a socket that accepts and never answers; the session runs
    to its end meanwhile. Once it lets go, the failures are round warnings; the webhook
    refuses, which is logged. No URL's token reaches the log, the events or the report."""
    hole = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        hole.settimeout(0.2)
        while not stop.is_set():
            with contextlib.suppress(TimeoutError, OSError):
                held.append(hole.accept()[0])

    acceptor = threading.Thread(target=accept, daemon=True)
    acceptor.start()
    refused = free_port()
    project = with_integrations(
        copy_example("mlp-flags", tmp_path),
        {
            "mlflow": {"tracking_uri": f"http://127.0.0.1:{hole.getsockname()[1]}"},
            "notify": {"urls": [f"json://127.0.0.1:{refused}/x/{SECRET}"]},
        },
    )
    runtime = Path(tempfile.mkdtemp(prefix="tr-hole-", dir="/tmp"))
    d = start_daemon(
        runtime, MLFLOW_HTTP_REQUEST_TIMEOUT="600", MLFLOW_HTTP_REQUEST_MAX_RETRIES="0"
    )
    try:
        state = run_random(d, project)
        # the export runs beside the loop: it may call only after the session ended
        wait_for(lambda: bool(held), "MLflow calling the tracking server", timeout=60, interval=0.1)
        assert all(not r["warnings"] for r in state["rounds"])  # still waiting: no answer yet
        stop.set()
        acceptor.join()
        for conn in held:
            conn.close()
        hole.close()  # from now on every request is refused at once
        for index in (1, 2, 3):
            wait_for(
                lambda i=index: any(
                    "MLflow export failed" in w
                    for w in call(d.env, "loop_get", {"project_root": str(project)})["rounds"][
                        i - 1
                    ]["warnings"]
                ),
                f"round {index}'s export warning",
                timeout=60,
                interval=0.1,
            )
        wait_for(
            lambda: "was not sent" in d.log,
            "the failed notification in the log",
            timeout=60,
            interval=0.1,
        )
        events = call(d.env, "events_list", {"session": SESSION, "limit": 10000})
        report = (project / ".trainee" / "artifacts" / SESSION / "report.md").read_text()
        for text in (d.log, json.dumps(events), report):
            assert SECRET not in text
        code = d.stop()
        assert code == 0, f"the daemon did not stop by itself: {code}\n{d.log[-3000:]}"
    finally:
        d.stop()
        kill_leftover_daemons(d)
        shutil.rmtree(runtime, ignore_errors=True)
    assert_no_training_left(project)


@needs_apprise
def test_a_session_resumed_after_a_daemon_restart_is_told(
    receiver: Receiver, tmp_path: Path
) -> None:
    project = tmp_path / "flaky_job"
    shutil.copytree(REPO / "tests" / "fixtures" / "projects" / "flaky_job", project)
    with_integrations(project, {"notify": {"urls": [receiver.url("c")], "on": ["resumed"]}})
    tuning = project / ".trainee" / "tuning.yaml"
    tuning.write_text(tuning.read_text().replace("default: ok", "default: quiet"))
    runtime = Path(tempfile.mkdtemp(prefix="tr-resume-", dir="/tmp"))
    d = start_daemon(runtime)
    try:
        run_cli("run", str(project), "--policy", "random", "--max-rounds", "1", "--unsafe",
                "--detach", env=d.env)  # fmt: skip
        wait_for(
            lambda: (
                call(d.env, "loop_get", {"project_root": str(project)})["rounds"]
                and call(d.env, "loop_get", {"project_root": str(project)})["rounds"][0]["status"]
                == "running"
            ),
            "round 1 to run",
            timeout=60,
            interval=0.1,
        )
        assert d.stop() == 0
        d = start_daemon(runtime)
        message = wait_for(
            lambda: receiver.messages("c"), "the resumed notification", timeout=60, interval=0.1
        )[0]
        assert message["title"] == f"trainee: flaky_job {SESSION} resumed after a daemon restart"
        assert "0 of 1 round(s) done; round(s) 1 left running" in message["message"]
        state = wait_finished(d.env, project)
        assert state["session"]["status"] == "finished"
        assert len(receiver.messages("c")) == 1  # `on` names only resumed
    finally:
        d.stop()
        kill_leftover_daemons(d)
        shutil.rmtree(runtime, ignore_errors=True)
    assert_no_training_left(project)
