"""Secrets and permissions: no API key in any file, log, event, report or HTTP answer;
config.json, the socket, the token and the store owner-only; the access token required
on every API route.

A key is saved through the HTTP API (so it lives in config.json, the one place it may),
a second one travels in the caller's environment of an llm session, and the provider
finally quotes both back in an error body (as real providers do). Then every file the
daemon and the session wrote, and every answer of every HTTP route, is searched.
"""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fakes.llm_server import FakeLLM
from tests.faults.helpers import Node, assert_no_orphans, make_project
from tests.support.loop import OK, SESSION, llm_env, plan
from tests.support.timing import scaled

pytestmark = pytest.mark.e2e

SAVED = "sk-proj-SAVEDfaultKEYq8Wv3Zr7Tn2Lx5Mc9Pb"
PASSED = "sk-ant-PASSEDfaultKEYh4Jk8Ls2Dq6Fw1Ry5Gz"
LEAKS = (SAVED, SAVED[8:-4], PASSED, PASSED[7:-4])
"""The keys and their middles: a masked form may keep a prefix and a suffix, no more."""


def _http(daemon: Node, token: str | None = "", **headers: str) -> httpx.Client:
    if token == "":
        token = daemon.daemon.token
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return httpx.Client(base_url=daemon.daemon.http_url, headers=headers, timeout=scaled(30))


def _leaks(name: str, data: bytes) -> list[str]:
    return [f"{name} holds {leak[:12]}..." for leak in LEAKS if leak.encode() in data]


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _quoting_error(key: str) -> dict[str, Any]:
    message = f"Incorrect API key provided: {key}. Find your key in your account."
    return {"status": 401, "body": {"error": {"message": message, "code": "invalid_api_key"}}}


def _get_routes(project: Path) -> list[str]:
    root = f"project_root={project}"
    base = f"/api/sessions/{SESSION}"
    files = ["report.md", "result_ledger.csv", "result_ledger.jsonl", "research_state.json"]
    return [
        "/api/openapi.json",
        "/api/projects",
        "/api/tools",
        "/api/runtime/system-prompt",
        f"{base}/rounds/1/log?{root}",
        f"{base}/rounds/2/log?{root}&tail=50",
        f"{base}/rounds/2/metrics?{root}",
        *(f"{base}/files/{name}?{root}" for name in [*files, "round-0001.log"]),
    ]


def _tool_calls(project: Path) -> dict[str, dict[str, Any]]:
    root = str(project)
    return {
        "loop_get": {"project_root": root, "session": SESSION},
        "runs_list": {"project_root": root},
        "runs_get": {"project_root": root, "run_id": 2},
        "sessions_list": {"project_root": root},
        "session_report": {"project_root": root, "session": SESSION},
        "events_list": {"limit": 10000},
        "runtime_provider_get": {},
        "runtime_debug_get": {},
        "prompt_preview": {"project_root": root, "session": SESSION},
        "logs_tail": {"project_root": root, "session": SESSION, "round": 1},
        "project_get": {"project_root": root},
        "daemon_hello": {},
    }


def test_no_api_key_in_any_file_log_event_report_or_http_answer(
    module_node: Node, tmp_path: Path
) -> None:
    project = make_project(tmp_path / "proj", max_rounds=4, behaviour={"steps": 2})
    with (
        FakeLLM([_quoting_error(SAVED)]) as saved_fake,
        FakeLLM([OK, plan({"lr": 0.2}), _quoting_error(PASSED)]) as fake,
    ):
        with _http(module_node) as http:
            saved = http.post(
                "/api/tools/runtime_provider_update",
                json={
                    "provider": "openai_compatible",
                    "model": "saved-model",
                    "api_key": SAVED,
                    "base_url": saved_fake.openai_base_url,
                },
            )
            assert saved.status_code == 200, saved.text
            tested = http.post("/api/tools/llm_test", json={})
        env = llm_env(module_node.env, fake, TRAINEE_LLM_API_KEY=PASSED)
        module_node.start_session(project, policy="llm", env=env)
        state = module_node.wait_finished(project)
        sent = {r["api_key"] for r in fake.requests} | {r["api_key"] for r in saved_fake.requests}
    assert sent == {PASSED, SAVED}, "both keys were really used"
    assert state["session"]["stop_reason"] == "provider_failed", state["session"]
    assert "Incorrect API key provided" in state["session"]["error"]
    assert len(state["rounds"]) == 2

    config = Path(module_node.env["HOME"]) / ".trainee" / "config.json"
    assert SAVED in config.read_text(), "the saved key lives in config.json"
    assert _mode(config) == 0o600

    assert "Incorrect API key provided" in tested.text, "the quoted error came back"
    found: list[str] = _leaks("llm_test answer", tested.content)
    searched = 0
    for folder in (project, module_node.runtime):
        for path in folder.rglob("*"):
            if path.is_file() and not path.is_symlink() and path != config:
                found += _leaks(str(path), path.read_bytes())
                searched += 1
    assert searched > 20 and module_node.log, "the store, its WAL, logs, ledgers, the daemon log"
    with _http(module_node) as http:
        for route in _get_routes(project):
            response = http.get(route)
            assert response.status_code == 200, (route, response.text)
            found += _leaks(f"GET {route}", response.content)
        for name, params in _tool_calls(project).items():
            response = http.post(f"/api/tools/{name}", json=params)
            assert response.status_code == 200, (name, response.text)
            found += _leaks(f"POST /api/tools/{name}", response.content)
        rpc = http.post("/rpc", json={"jsonrpc": "2.0", "id": 1, "method": "loop_get",
                                      "params": {"project_root": str(project)}})  # fmt: skip
        found += _leaks("POST /rpc", rpc.content)
        with http.stream(
            "GET", f"/api/sessions/{SESSION}/events?since=0&project_root={project}"
        ) as sse:
            body = b""
            for chunk in sse.iter_bytes():
                body += chunk
                if b"session.finished" in body:
                    break
        assert b"session.finished" in body
        found += _leaks("the SSE stream", body)
    for name, params in _tool_calls(project).items():
        found += _leaks(f"socket {name}", json.dumps(module_node.rpc(name, params)).encode())
    assert not found, "\n".join(found)
    assert_no_orphans(project)


def test_config_socket_token_and_store_are_owner_only(module_node: Node, tmp_path: Path) -> None:
    runtime = module_node.runtime
    assert stat.S_ISSOCK(module_node.daemon.socket.stat().st_mode)
    assert _mode(module_node.daemon.socket) == 0o600
    assert _mode(runtime) == 0o700
    assert _mode(runtime / "token") == 0o600
    assert _mode(runtime / "trainee.sock.lock") == 0o600
    project = make_project(tmp_path / "proj", max_rounds=1, behaviour={"steps": 1})
    module_node.start_session(project)
    module_node.wait_finished(project)
    database = project / ".trainee" / "runtime.sqlite3"
    assert _mode(database) == 0o600, "the store keeps the caller's environment"
    log = project / ".trainee" / "artifacts" / SESSION / "round-0001.log"
    assert _mode(log) == 0o600, "a round's output can hold tokens and data samples"
    with _http(module_node) as http:
        response = http.post("/api/tools/runtime_provider_update", json={"llm_timeout_sec": 30})
        assert response.status_code == 200, response.text
    config = Path(module_node.env["HOME"]) / ".trainee" / "config.json"
    assert _mode(config) == 0o600


def _api_routes(daemon: Node) -> list[tuple[str, str]]:
    """Every API route of the OpenAPI document with its path parameters filled, plus
    /rpc and /mcp."""
    with _http(daemon) as http:
        document = http.get("/api/openapi.json").json()
    routes = [("POST", "/rpc"), ("POST", "/mcp"), ("GET", "/mcp")]
    for path, methods in document["paths"].items():
        filled = path.replace("{session}", SESSION).replace("{round}", "1")
        filled = filled.replace("{name}", "report.md")
        routes += [(method.upper(), filled) for method in methods]
    return routes


@pytest.mark.parametrize(
    ("case", "status"),
    [("no token", 401), ("wrong token", 401), ("token in the query", 401), ("foreign host", 421)],
)
def test_the_access_token_is_required_on_every_api_route(
    module_node: Node, case: str, status: int
) -> None:
    routes = _api_routes(module_node)
    assert len(routes) > 40, "every registry method is a route"
    token: str | None = {"no token": None, "wrong token": "x" * 43}.get(case, "")
    headers = {"Host": "evil.example:80"} if case == "foreign host" else {}
    query = f"?token={module_node.daemon.token}" if case == "token in the query" else ""
    if case == "token in the query":
        token = None
    wrong = []
    with _http(module_node, token, **headers) as http:
        for method, path in routes:
            response = http.request(method, path + query, json={} if method != "GET" else None)
            if response.status_code != status:
                wrong.append(f"{method} {path}: {response.status_code}")
            else:
                assert "refused" in response.json()["error"]["message"]
    assert not wrong, "\n".join(wrong)
    assert module_node.alive()


def test_a_cross_site_post_is_refused_even_with_the_cookie(module_node: Node) -> None:
    cookie = {"Cookie": f"trainee_token={module_node.daemon.token}"}
    with _http(module_node, None, Origin="http://evil.example", **cookie) as http:
        response = http.post("/api/tools/loop_start", json={"project_root": "/"})
        assert response.status_code == 403, response.text
        assert (
            http.post(
                "/rpc", json={"jsonrpc": "2.0", "id": 1, "method": "daemon_hello"}
            ).status_code
            == 403
        )
    with _http(module_node, None, **cookie) as http:
        assert (
            http.post(
                "/rpc", json={"jsonrpc": "2.0", "id": 1, "method": "daemon_hello"}
            ).status_code
            == 200
        )
