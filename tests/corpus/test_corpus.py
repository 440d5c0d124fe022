"""The bad-input corpus (``cases.py``) through one real daemon.

- YAML: each broken project file goes through ``project_get`` (socket), ``trainee doctor``
  and ``trainee run --dry-run`` (the real CLI); each must name the file, line or field
  and the reason, and the project tree must be byte-identical after (no database made).
- JSON-RPC: each frame raw over the Unix socket (all on one connection, which must
  keep working) and as the body of ``POST /rpc``.
- HTTP: each request against the web routes, with the token unless the case drops it.
- LLM answers: FakeLLM answers the decision for round 2 (round 3 after a failed round 2
  whose log carries an injection) badly twice; the session must stop with
  ``invalid_decision`` naming the problem, and nothing of the answers may reach a
  command line or a round.

Files watched for the RPC and HTTP cases: a project with a finished session, the
daemon's runtime folder (its log aside) and its home (config.json). After the corpus the
daemon still answers ``daemon_hello``.
"""

from __future__ import annotations

import hashlib
import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.corpus.cases import (
    HTTP_CASES,
    LLM_CASES,
    OVERSIZED_FRAME,
    RPC_CASES,
    YAML_CASES,
    HttpCase,
    LlmCase,
    RpcCase,
    YamlCase,
    _plan,
)
from tests.fakes.llm_server import FakeLLM
from tests.faults.helpers import Node, assert_no_orphans, job_env, make_project
from tests.support.daemon import run_cli
from tests.support.loop import OK, SESSION, llm_env
from tests.support.projects import LR_TUNING_YAML, PROJECT_YAML
from trainee.errors import ConfigError

pytestmark = pytest.mark.e2e

EXIT_DOCTOR_FAILED = 1
EXIT_CONFIG_ERROR = 3


def tree_digest(*folders: Path, skip: tuple[str, ...] = ("daemon.log",)) -> dict[str, str]:
    """sha256 of every file under ``folders`` (and the set of names: a new file shows)."""
    out: dict[str, str] = {}
    for folder in folders:
        for path in sorted(folder.rglob("*")):
            if path.is_file() and path.name not in skip:
                out[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
            elif path.is_dir():
                out[str(path)] = "dir"
    return out


@pytest.fixture(scope="module")
def finished(module_node: Node, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project with one finished session (what the HTTP cases read)."""
    project = make_project(tmp_path_factory.mktemp("corpus") / "proj", max_rounds=1)
    module_node.start_session(project)
    module_node.wait_finished(project)
    return project


@pytest.fixture
def unchanged(module_node: Node, finished: Path) -> Iterator[None]:
    """The watched files are byte-identical after the case."""
    home = Path(module_node.env["HOME"])
    home.mkdir(parents=True, exist_ok=True)
    before = tree_digest(finished, module_node.runtime, home)
    yield
    assert tree_digest(finished, module_node.runtime, home) == before


# -- YAML ------------------------------------------------------------------------------------


def _yaml_project(root: Path, case: YamlCase) -> Path:
    (root / ".trainee").mkdir(parents=True)
    (root / "train.py").write_text("print('final val_loss=0.5')\n")
    (root / ".trainee" / "project.yaml").write_text(PROJECT_YAML)
    (root / ".trainee" / "tuning.yaml").write_text(LR_TUNING_YAML)
    data = case.text.encode() if isinstance(case.text, str) else case.text
    (root / ".trainee" / case.file).write_bytes(data)
    return root


@pytest.mark.parametrize("case", YAML_CASES, ids=[c.name for c in YAML_CASES])
def test_yaml(module_node: Node, tmp_path: Path, case: YamlCase) -> None:
    project = _yaml_project(tmp_path / "proj", case)
    before = tree_digest(project)

    with pytest.raises(ConfigError) as info:
        module_node.rpc("project_get", {"project_root": str(project)})
    error = info.value
    assert error.file is not None and error.file.endswith(case.file), error.data
    assert error.reason, error.data
    for fragment in case.expect:
        if fragment == "line":  # a line number, in the data and the message
            assert error.line and f"{case.file}:{error.line}:" in error.message, error.data
        else:
            assert fragment in error.message, (fragment, error.message)

    env = job_env(module_node.env)
    doctor = run_cli("doctor", str(project), "--skip-provider-test", "--json", env=env)
    assert doctor.returncode == EXIT_DOCTOR_FAILED, doctor.stderr
    failed = [c for c in doctor.json()["checks"] if c["status"] == "fail"]
    assert [c["name"] for c in failed] == ["config"], failed
    assert error.message in failed[0]["detail"]

    dry = run_cli("run", str(project), "--dry-run", env=env)
    assert dry.returncode == EXIT_CONFIG_ERROR, dry.stdout + dry.stderr
    assert error.message in dry.stderr

    assert tree_digest(project) == before, "a bad file changes nothing (no database either)"
    assert not (project / ".trainee" / "runtime.sqlite3").exists()


# -- JSON-RPC ------------------------------------------------------------------------------


class RawSocket:
    """One connection to the daemon's socket, sending raw frames."""

    def __init__(self, path: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.settimeout(30)
        self.sock.connect(str(path))
        self.buffer = b""

    def send(self, frame: bytes) -> Any:
        self.sock.sendall(frame + b"\n")
        while b"\n" not in self.buffer:
            chunk = self.sock.recv(1 << 16)
            assert chunk, "the daemon closed the connection"
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return json.loads(line)

    def close(self) -> None:
        self.sock.close()


@pytest.fixture(scope="module")
def raw(module_node: Node) -> Iterator[RawSocket]:
    conn = RawSocket(module_node.daemon.socket)
    yield conn
    conn.close()


def _check_rpc(case: RpcCase, response: Any) -> None:
    responses = response if case.batch else [response]
    assert isinstance(responses, list) and len(responses) == max(1, case.batch), response
    for one in responses:
        assert one["jsonrpc"] == "2.0" and "result" not in one, one
        error = one["error"]
        assert error["code"] == case.code, one
        text = error["message"] + json.dumps(error.get("data"))
        for fragment in case.expect:
            assert fragment in text, (fragment, one)
        assert "Traceback" not in text and "incident" not in text


@pytest.mark.parametrize("case", RPC_CASES, ids=[c.name for c in RPC_CASES])
@pytest.mark.usefixtures("unchanged")
def test_rpc_over_the_socket(raw: RawSocket, case: RpcCase) -> None:
    _check_rpc(case, raw.send(case.frame))
    # the same connection still works
    assert raw.send(b'{"jsonrpc": "2.0", "method": "daemon_hello", "id": 9}')["id"] == 9


@pytest.mark.parametrize("case", RPC_CASES, ids=[c.name for c in RPC_CASES])
@pytest.mark.usefixtures("unchanged")
def test_rpc_over_http(module_node: Node, case: RpcCase) -> None:
    headers = {"Authorization": f"Bearer {module_node.daemon.token}"}
    with httpx.Client(base_url=module_node.daemon.http_url, headers=headers, timeout=30) as http:
        response = http.post("/rpc", content=case.frame)
    assert response.status_code == 200, response.text
    _check_rpc(case, response.json())


@pytest.mark.usefixtures("unchanged")
def test_rpc_an_oversized_frame_is_refused_and_the_connection_kept(raw: RawSocket) -> None:
    frame = b'{"jsonrpc": "2.0", "method": "daemon_hello", "id": 1, "params": {"x": "'
    frame += b"x" * OVERSIZED_FRAME + b'"}}'
    error = raw.send(frame)["error"]
    assert error["code"] == -32600 and "frame too large" in error["message"]
    assert raw.send(b'{"jsonrpc": "2.0", "method": "daemon_hello", "id": 2}')["id"] == 2


# -- HTTP ------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", HTTP_CASES, ids=[c.name for c in HTTP_CASES])
@pytest.mark.usefixtures("unchanged")
def test_http(module_node: Node, finished: Path, case: HttpCase) -> None:
    headers = dict(case.headers)
    if case.token:
        headers["Authorization"] = f"Bearer {module_node.daemon.token}"
    with httpx.Client(base_url=module_node.daemon.http_url, timeout=60) as http:
        response = http.request(
            case.method,
            case.path.replace("{project}", str(finished)),
            content=case.body,
            headers=headers,
        )
    assert response.status_code == case.status, response.text[:2000]
    for fragment in case.expect:
        assert fragment in response.text, (fragment, response.text[:2000])
    assert "Traceback" not in response.text


# -- LLM answers ------------------------------------------------------------------------------


@pytest.mark.parametrize("case", LLM_CASES, ids=[c.name for c in LLM_CASES])
def test_llm_answer(module_node: Node, tmp_path: Path, case: LlmCase) -> None:
    behaviour: dict[str, Any] = {"steps": 1}
    first: list[dict[str, str]] = []  # answers before the bad ones
    if case.log:
        # round 2 fails, so its log tail is shown to the model, injection included (a
        # failed baseline would end the session: there would be nothing to decide)
        behaviour["rounds"] = {"2": {"say": case.log, "exit": 2}}
        first = [{"content": _plan({"lr": 0.2})}]
    project = make_project(tmp_path / "proj", max_rounds=3, behaviour=behaviour)
    spec_files = tree_digest(project / ".trainee", skip=())
    script = [OK, *first, *({"content": answer} for answer in case.answers)]
    with FakeLLM(script) as fake:
        module_node.start_session(project, policy="llm", env=llm_env(module_node.env, fake))
        state = module_node.wait_finished(project)
        requests = fake.requests
    session = state["session"]
    assert session["status"] == "failed", session
    assert session["stop_reason"] == "invalid_decision", session
    for fragment in case.reason:
        assert fragment in session["error"], (fragment, session["error"])
    assert len(requests) == 3 + len(first), "the decision and one repair, nothing more"
    if case.log:
        assert "IMPORTANT SYSTEM NOTICE" in json.dumps(requests[2]["messages"])
    rounds = state["rounds"]
    ran = 1 + len(first)
    assert [r["index"] for r in rounds] == list(range(1, ran + 1)), "none on a refused answer"
    assert not (project / ".trainee" / "runs" / SESSION / f"round-{ran + 1:04d}").exists()
    assert rounds[0]["command"] == "python train.py --lr 0.1"
    decisions = module_node.rpc("runs_get", {"project_root": str(project), "run_id": 1})
    assert decisions["decision"] is None
    for name in ("project.yaml", "tuning.yaml"):
        path = str(project / ".trainee" / name)
        assert tree_digest(project / ".trainee", skip=())[path] == spec_files[path]
    assert_no_orphans(project)


# -- the end -----------------------------------------------------------------------------------


def test_the_corpus_is_large_and_the_daemon_survived_it(module_node: Node) -> None:
    size = len(YAML_CASES) + len(RPC_CASES) + 1 + len(HTTP_CASES) + len(LLM_CASES)
    assert size >= 50, size
    hello = module_node.rpc("daemon_hello")
    assert hello["name"] == "trainee" and hello["pid"] == module_node.daemon.proc.pid  # type: ignore[union-attr]
    assert "Traceback" not in module_node.log, module_node.log[-3000:]
