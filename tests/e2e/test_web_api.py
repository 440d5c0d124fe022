"""The dashboard's HTTP side against a real daemon: pages, SSE, logs, downloads, OpenAPI, guard.

Sessions run for real (an example project copied to tmp_path, the ``random``
policy, unsafe mode); events are checked against the project's store.
"""

from __future__ import annotations

import http.client
import json
import re
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import httpx
import jsonschema
import pytest

from tests.support.daemon import REPO, Daemon, copy_example, run_cli
from tests.support.timing import wait_for
from trainee.api.table import registry

pytestmark = pytest.mark.e2e

SESSION = "session-0001"


# -- helpers -------------------------------------------------------------------------------


def client(daemon: Daemon, *, token: bool = True, timeout: float = 30) -> httpx.Client:
    headers = {"Authorization": f"Bearer {daemon.token}"} if token else {}
    return httpx.Client(base_url=daemon.http_url, headers=headers, timeout=timeout)


def tool(http: httpx.Client, name: str, **params: Any) -> Any:
    r = http.post(f"/api/tools/{name}", json=params)
    assert r.status_code == 200, f"{name}: {r.status_code} {r.text}"
    return r.json()["result"]


def start_session(http: httpx.Client, project: Path, rounds: int = 2) -> str:
    started = tool(
        http,
        "loop_start",
        project_root=str(project),
        policy="random",
        security_mode="unsafe",
        max_rounds=rounds,
    )
    session: str = started["session"]
    return session


def wait_finished(http: httpx.Client, project: Path, session: str = SESSION) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        state: dict[str, Any] = tool(http, "loop_get", project_root=str(project), session=session)
        return state if not state["running"] and state["session"]["status"] != "running" else None

    state: dict[str, Any] = wait_for(done, f"{session} to finish", timeout=90, interval=0.1)
    return state


def stored_events(project: Path, session: str = SESSION) -> list[tuple[int, str]]:
    db = project / ".trainee" / "runtime.sqlite3"
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        rows = conn.execute(
            "SELECT id, kind FROM events WHERE session = ? ORDER BY id", (session,)
        ).fetchall()
    return [(int(i), str(k)) for i, k in rows]


def wait_stored(project: Path, kind: str = "session.finished") -> list[tuple[int, str]]:
    def check() -> list[tuple[int, str]] | None:
        events = stored_events(project)
        return events if any(k == kind for _, k in events) else None

    events: list[tuple[int, str]] = wait_for(
        check, f"{kind} in the store", timeout=90, interval=0.1
    )
    return events


class SSE:
    """One SSE connection read frame by frame (``id``, ``event``, ``data``)."""

    def __init__(self, http: httpx.Client, path: str, headers: dict[str, str] | None = None):
        self._cm = http.stream("GET", path, headers=headers or {})
        self.response = self._cm.__enter__()
        self._lines = self.response.iter_lines()
        self.last_id: str | None = None

    def next(self) -> dict[str, Any]:
        frame: dict[str, Any] = {"event": "message", "data": ""}
        for line in self._lines:
            if line == "":
                if "id" in frame or frame["data"]:
                    return frame
                continue
            if line.startswith(":"):
                continue
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "id":
                frame["id"] = value
                self.last_id = value
            elif name == "data":
                frame["data"] += value
            else:
                frame[name] = value
        raise EOFError("the stream ended")

    def events_until(self, stop: Callable[[dict[str, Any]], bool]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        while True:
            frame = self.next()
            if frame["event"] != "message":
                continue
            event = json.loads(frame["data"])
            assert str(event["id"]) == frame["id"], frame
            out.append(event)
            if stop(event):
                return out

    def close(self) -> None:
        self._cm.__exit__(None, None, None)


def raw_get(daemon: Daemon, path: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    """A GET with the path sent byte for byte (no client-side normalisation of ``..``)."""
    url = urlsplit(daemon.http_url)
    conn = http.client.HTTPConnection(url.hostname or "127.0.0.1", url.port, timeout=30)
    try:
        conn.request(
            "GET", path, headers={"Authorization": f"Bearer {daemon.token}", **(headers or {})}
        )
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


# -- pages and the token ---------------------------------------------------------------------


def test_pages_are_served_without_the_token_and_hold_no_secret(venv_daemon: Daemon) -> None:
    with client(venv_daemon, token=False) as http:
        for path in ("/", "/llm-test"):
            page = http.get(path)
            assert page.status_code == 200, path
            assert page.headers["content-type"].startswith("text/html")
            assert "script-src 'self'" in page.headers["content-security-policy"]
            assert page.headers["x-frame-options"] == "DENY"
            assert venv_daemon.token not in page.text
        scripts = re.findall(r'src="(/static/[^"]+)"', http.get("/").text)
        styles = re.findall(r'href="(/static/[^"]+\.css)"', http.get("/").text)
        assert scripts and styles
        for path in scripts + styles:
            r = http.get(path)
            assert r.status_code == 200, path
            assert venv_daemon.token not in r.text
    for path in (
        "/static/../trainee/__init__.py",
        "/static/..%2F..%2Ftrainee%2F__init__.py",
        "/static/%2E%2E/%2E%2E/pyproject.toml",
        "/static//etc/passwd",
    ):
        status, body = raw_get(venv_daemon, path)
        assert status == 404, (path, status)
        assert b"__version__" not in body and b"root:" not in body, path


def test_web_files_fetch_nothing_from_outside() -> None:
    """No CDN, no remote font or script: nothing in webui/ names an http(s) address."""
    files = [p for p in (REPO / "webui").rglob("*") if p.is_file()]
    assert any(p.suffix == ".js" for p in files) and any(p.suffix == ".css" for p in files)
    for path in files:
        text = path.read_text().replace("http://www.w3.org/2000/svg", "")  # a namespace name
        assert not re.search(r"https?://", text), f"{path} names an outside address"
        assert "@import url(" not in text


def test_token_url_becomes_an_httponly_cookie(venv_daemon: Daemon) -> None:
    token = venv_daemon.token
    with client(venv_daemon, token=False) as http:
        r = http.get(f"/?token={quote(token)}&project=%2Fsome%20where", follow_redirects=False)
        assert r.status_code == 303
        assert r.headers["location"] == "/?project=%2Fsome%20where"
        cookie = r.headers["set-cookie"]
        assert cookie.startswith(f"trainee_token={token};")
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/" in cookie
        assert r.headers["cache-control"] == "no-store"
        # the client now holds the cookie: the API answers
        assert http.get("/api/tools").status_code == 200
    with client(venv_daemon, token=False) as http:
        wrong = http.get("/?token=not-the-token", follow_redirects=False)
        assert wrong.status_code == 401
        assert "set-cookie" not in wrong.headers
        assert http.get("/api/tools").status_code == 401


API_GETS = [
    "/api/openapi.json",
    "/api/projects",
    f"/api/sessions/{SESSION}/events?project_root=/tmp",
    f"/api/sessions/{SESSION}/rounds/1/log?project_root=/tmp",
    f"/api/sessions/{SESSION}/rounds/1/metrics?project_root=/tmp",
    f"/api/sessions/{SESSION}/files/report.md?project_root=/tmp",
    "/api/runtime/system-prompt",
]


@pytest.mark.parametrize("path", API_GETS)
def test_every_api_route_needs_the_token(venv_daemon: Daemon, path: str) -> None:
    with client(venv_daemon, token=False) as http:
        assert http.get(path).status_code == 401
        assert http.get(path, headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert http.get(path, headers={"X-Trainee-Token": "wrong"}).status_code == 401
        assert http.get(path, headers={"Cookie": "trainee_token=wrong"}).status_code == 401
        # the token in a query string is not accepted by the API (it would end up in logs)
        assert http.get(path + ("&" if "?" in path else "?") + "token=x").status_code == 401


@pytest.mark.parametrize("path", ["/", "/static/js/app.js", *API_GETS])
def test_foreign_host_is_refused_everywhere(venv_daemon: Daemon, path: str) -> None:
    port = urlsplit(venv_daemon.http_url).port
    with client(venv_daemon) as http:
        for host in (f"evil.example:{port}", f"127.0.0.1.nip.io:{port}", "127.0.0.1:1"):
            assert http.get(path, headers={"Host": host}).status_code == 421, host


def test_foreign_origin_cannot_change_state(venv_daemon: Daemon, tmp_path: Path) -> None:
    with client(venv_daemon) as http:
        evil = {"Origin": "http://evil.example"}
        r = http.post(
            "/api/tools/loop_start",
            json={"project_root": str(tmp_path), "policy": "random"},
            headers=evil,
        )
        assert r.status_code == 403
        assert (
            http.put("/api/runtime/system-prompt", json={"prompt": "x"}, headers=evil).status_code
            == 403
        )
        assert http.post("/rpc", content=b"{}", headers={"Origin": "null"}).status_code == 403
        assert tool(http, "runtime_system_prompt_get")["is_default"] is True


# -- OpenAPI --------------------------------------------------------------------------------


def test_openapi_is_generated_from_the_registry(venv_daemon: Daemon) -> None:
    with client(venv_daemon) as http:
        doc = http.get("/api/openapi.json").json()
    assert doc["openapi"].startswith("3.1")
    paths = doc["paths"]
    for method in registry:
        op = paths[f"/api/tools/{method.name}"]["post"]
        assert op["operationId"] == method.name
        assert op["summary"] == method.summary
        body = op["requestBody"]["content"]["application/json"]["schema"]
        assert body == method.params_schema()
        jsonschema.Draft202012Validator.check_schema(body)
        result = op["responses"]["200"]["content"]["application/json"]["schema"]
        jsonschema.Draft202012Validator.check_schema(result)
        assert result["properties"]["result"] == method.result_schema()
    for path in (
        "/api/sessions/{session}/events",
        "/api/sessions/{session}/rounds/{round}/log",
        "/api/sessions/{session}/files/{name}",
        "/api/tools",
        "/rpc",
    ):
        assert path in paths, path
    assert (
        "text/event-stream"
        in paths["/api/sessions/{session}/events"]["get"]["responses"]["200"]["content"]
    )
    assert set(doc["components"]["securitySchemes"]) == {"bearer", "tokenHeader", "cookie"}
    op_ids = [op["operationId"] for item in paths.values() for op in item.values()]
    assert len(op_ids) == len(set(op_ids))


# -- a real session: logs, metrics, downloads, events -------------------------------------------


@pytest.fixture
def finished(venv_daemon: Daemon, tmp_path: Path) -> tuple[Daemon, Path]:
    """A project whose first session (2 rounds, random policy) has finished."""
    project = copy_example("mlp-flags", tmp_path)
    with client(venv_daemon) as http:
        assert start_session(http, project) == SESSION
        state = wait_finished(http, project)
    assert state["session"]["status"] == "finished", state["session"]
    wait_stored(project)
    return venv_daemon, project


def test_round_log_offset_length_and_tail(finished: tuple[Daemon, Path]) -> None:
    daemon, project = finished
    log_file = project / ".trainee" / "artifacts" / SESSION / "round-0001.log"
    content = log_file.read_bytes()
    root = quote(str(project))
    with client(daemon) as http:
        base = f"/api/sessions/{SESSION}/rounds/1/log?project_root={root}"
        first = http.get(base + "&offset=0&length=100").json()
        assert first["data"].encode() == content[:100]
        assert first["next_offset"] == 100 and first["size"] == len(content) and first["overflow"]
        rest = http.get(base + f"&offset={first['next_offset']}&length=10000000").json()
        assert (first["data"] + rest["data"]).encode() == content and not rest["overflow"]
        tail = http.get(base + "&tail=3").json()
        expected = content.decode().splitlines()[-3:]
        assert tail["data"].splitlines() == expected
        assert content[tail["offset"] :].decode() == tail["data"]
        assert "final val_loss=" in tail["data"]
        end = http.get(base + "&offset=-20").json()
        assert end["data"].encode() == content[-20:]
        assert http.get(base + "&tail=0").status_code == 400
        assert http.get(base + "&offset=abc").status_code == 400
        assert (
            http.get(f"/api/sessions/{SESSION}/rounds/9/log?project_root={root}").status_code == 404
        )
        assert (
            http.get(f"/api/sessions/{SESSION}/rounds/1/log?project_root=relative").status_code
            == 400
        )


def test_round_metrics_and_projects(finished: tuple[Daemon, Path]) -> None:
    daemon, project = finished
    root = quote(str(project))
    with client(daemon) as http:
        points = http.get(f"/api/sessions/{SESSION}/rounds/1/metrics?project_root={root}").json()
        by_name: dict[str, list[list[Any]]] = {}
        for point in points["points"]:
            by_name.setdefault(point[0], []).append(point)
        assert len(by_name["loss"]) == 200  # one builtin loss point per epoch
        assert [p[2] for p in by_name["loss"]] == list(range(1, 201))  # with its step
        state = tool(http, "loop_get", project_root=str(project), session=SESSION)
        assert [p[1] for p in by_name["val_loss"]] == [
            pytest.approx(state["rounds"][0]["primary_metric"])
        ]
        known = http.get("/api/projects").json()
        entry = next(p for p in known["projects"] if p["root"] == str(project.resolve()))
        assert entry["configured"] and entry["exists"] and entry["running"] == []
        assert entry["name"] == "mlp-flags"


def test_downloads_serve_only_the_allow_list(finished: tuple[Daemon, Path]) -> None:
    daemon, project = finished
    folder = project / ".trainee" / "artifacts" / SESSION
    root = quote(str(project))
    secret = "TOP-SECRET-" + "x" * 8
    (project / ".trainee" / "secret.txt").write_text(secret)
    (folder / "notes.txt").write_text(secret)
    with client(daemon) as http:
        for name in (
            "report.md",
            "result_ledger.csv",
            "result_ledger.jsonl",
            "research_state.json",
            "round-0002.log",
        ):
            r = http.get(f"/api/sessions/{SESSION}/files/{name}?project_root={root}")
            assert r.status_code == 200, name
            assert r.content == (folder / name).read_bytes(), name
            assert r.headers["content-disposition"].startswith("attachment")
            assert "sandbox" in r.headers["content-security-policy"]
        inline = http.get(f"/api/sessions/{SESSION}/files/report.md?project_root={root}&inline=1")
        assert inline.headers["content-disposition"].startswith("inline")
    attacks = [
        "notes.txt",
        "runtime.sqlite3",
        "..%2Fsecret.txt",
        "..%2F..%2Fsecret.txt",
        "%2E%2E%2Fsecret.txt",
        "..%252Fsecret.txt",
        "%2Fetc%2Fpasswd",
        "report.md%00.txt",
        "report.md%2F..%2F..%2Fsecret.txt",
        "round-1.log",
        "round-0001.log%2F..%2F..%2F..%2Fsecret.txt",
    ]
    for name in attacks:
        status, body = raw_get(daemon, f"/api/sessions/{SESSION}/files/{name}?project_root={root}")
        assert status in (400, 404), (name, status)
        assert secret.encode() not in body and b"root:" not in body, name
    for path in (
        f"/api/sessions/{SESSION}/files/../../secret.txt?project_root={root}",
        f"/api/sessions/..%2F.trainee/files/secret.txt?project_root={root}",
        f"/api/sessions/session-0001%2F..%2F../files/secret.txt?project_root={root}",
        f"/api/sessions/../files/report.md?project_root={root}",
        f"/api/sessions/{SESSION}/rounds/1%2F..%2F..%2Fsecret/log?project_root={root}",
        f"/api/sessions/{SESSION}/rounds/-1/log?project_root={root}",
        f"/api/sessions/{SESSION}/rounds/0/log?project_root={root}",
        f"/api/sessions/..%2F..%2Fetc/rounds/1/log?project_root={root}",
        f"/api/sessions/{SESSION}/files/report.md?project_root=..%2F..%2Fetc",
    ):
        status, body = raw_get(daemon, path)
        assert status in (400, 404), (path, status)
        assert secret.encode() not in body, path


def test_events_replay_from_the_store_match_it(finished: tuple[Daemon, Path]) -> None:
    daemon, project = finished
    stored = stored_events(project)
    root = quote(str(project))
    with client(daemon) as http:
        sse = SSE(http, f"/api/sessions/{SESSION}/events?project_root={root}&since=0")
        try:
            ready = sse.next()
            assert ready["event"] == "ready"
            got = sse.events_until(lambda e: e["kind"] == "session.finished")
        finally:
            sse.close()
    assert [(e["id"], e["kind"]) for e in got] == stored
    assert all(
        e["session"] == SESSION and e["data"]["project"] == str(project.resolve()) for e in got
    )
    kinds = {k for _, k in stored}
    assert {"session.started", "round.started", "output", "metric", "round.finished"} <= kinds
    assert not any(daemon.token in json.dumps(e) for e in got)


def test_reconnect_with_last_event_id_loses_nothing(venv_daemon: Daemon, tmp_path: Path) -> None:
    """Read part of a live session, drop the connection, reconnect with Last-Event-ID."""
    project = copy_example("mlp-flags", tmp_path)
    root = quote(str(project))
    path = f"/api/sessions/{SESSION}/events?project_root={root}"
    with client(venv_daemon) as http:
        first = SSE(http, path)
        ready = first.next()
        assert ready["event"] == "ready"
        cursor = int(ready["id"])
        start_session(http, project, rounds=3)
        try:
            part1 = first.events_until(lambda e: e["kind"] == "round.finished")
        finally:
            first.close()
        assert first.last_id == str(part1[-1]["id"])
        # the session goes on while nobody listens; then the browser comes back
        gone = int(part1[-1]["id"])
        wait_for(
            lambda: [e for e in stored_events(project) if e[0] > gone and e[1] == "round.started"],
            "events published while nobody listens",
            timeout=90,
            interval=0.1,
        )
        second = SSE(http, path, headers={"Last-Event-ID": first.last_id})
        try:
            assert second.next()["event"] == "ready"
            part2 = second.events_until(lambda e: e["kind"] == "session.finished")
        finally:
            second.close()
        wait_finished(http, project)
    stored = [e for e in wait_stored(project) if e[0] > cursor]
    received = [(e["id"], e["kind"]) for e in part1 + part2]
    assert received == stored, "events were lost or repeated across the reconnect"
    assert len(part2) > 0 and part2[0]["id"] > part1[-1]["id"]


def test_events_of_another_project_with_the_same_session_id_stay_out(
    venv_daemon: Daemon, tmp_path: Path
) -> None:
    a = copy_example("mlp-flags", tmp_path / "a")
    b = copy_example("mlp-flags", tmp_path / "b")
    with client(venv_daemon) as http:
        sse = SSE(http, f"/api/sessions/{SESSION}/events?project_root={quote(str(a))}")
        try:
            assert sse.next()["event"] == "ready"
            start_session(http, b, rounds=1)
            wait_finished(http, b)
            start_session(http, a, rounds=1)
            got = sse.events_until(lambda e: e["kind"] == "session.finished")
        finally:
            sse.close()
        wait_finished(http, a)
    assert {e["data"]["project"] for e in got} == {str(a.resolve())}
    assert [(e["id"], e["kind"]) for e in got] == wait_stored(a)


def test_events_survive_a_daemon_restart(finished: tuple[Daemon, Path]) -> None:
    """A new daemon has an empty bus: a reconnect is served from the store."""
    daemon, project = finished
    stored = stored_events(project)
    half = stored[len(stored) // 2][0]
    assert daemon.stop() == 0
    assert daemon.start().startswith("READY"), daemon.log
    with client(daemon) as http:
        sse = SSE(
            http,
            f"/api/sessions/{SESSION}/events?project_root={quote(str(project))}",
            headers={"Last-Event-ID": str(half)},
        )
        try:
            assert sse.next()["event"] == "ready"
            got = sse.events_until(lambda e: e["kind"] == "session.finished")
        finally:
            sse.close()
    assert [(e["id"], e["kind"]) for e in got] == [e for e in stored if e[0] > half]


def test_bad_event_stream_requests(venv_daemon: Daemon, tmp_path: Path) -> None:
    with client(venv_daemon) as http:
        root = quote(str(tmp_path))
        assert http.get(f"/api/sessions/nope/events?project_root={root}").status_code == 400
        r = http.get(
            f"/api/sessions/{SESSION}/events?project_root={root}",
            headers={"Last-Event-ID": "abc"},
        )
        assert r.status_code == 400 and "Last-Event-ID" in r.json()["error"]["message"]
        assert (
            http.get(f"/api/sessions/{SESSION}/events?project_root={root}&since=-1").status_code
            == 400
        )
        assert http.get(f"/api/sessions/{SESSION}/events").status_code == 400  # no project
        assert not (tmp_path / ".trainee").exists(), "a stream request must create nothing"


def test_daemon_stops_with_a_stream_open(venv_daemon: Daemon, tmp_path: Path) -> None:
    with client(venv_daemon) as http:
        sse = SSE(http, f"/api/sessions/{SESSION}/events?project_root={quote(str(tmp_path))}")
        assert sse.next()["event"] == "ready"
        assert venv_daemon.stop() == 0
        with pytest.raises((EOFError, httpx.HTTPError)):
            sse.next()
        sse.close()


def test_system_prompt_route(venv_daemon: Daemon) -> None:
    with client(venv_daemon) as http:
        default = http.get("/api/runtime/system-prompt").json()
        assert default["is_default"] and default["prompt"]
        changed = http.put("/api/runtime/system-prompt", json={"prompt": "Be brief."}).json()
        assert changed == {"prompt": "Be brief.", "is_default": False}
        assert tool(http, "runtime_system_prompt_get")["prompt"] == "Be brief."
        assert http.put("/api/runtime/system-prompt", content=b"{nope").status_code == 400
        assert http.put("/api/runtime/system-prompt", json={"prompt": 3}).status_code == 400
        restored = http.put("/api/runtime/system-prompt", json={"prompt": ""}).json()
        assert restored == default


# -- trainee webui -------------------------------------------------------------------------------


def test_webui_command_starts_the_daemon_and_prints_the_token_url(
    daemon_env: dict[str, str], tmp_path: Path, short_dir: Path
) -> None:
    result = run_cli("webui", str(tmp_path), "--no-open", "--json", env=daemon_env)
    assert result.returncode == 0, result.stderr
    out = result.json()
    token = (short_dir / "token").read_text().strip()
    assert out["url"] == (
        f"{out['http_url']}/?token={quote(token, safe='')}&project={quote(str(tmp_path), safe='')}"
    )
    assert out["opened"] is False
    with httpx.Client(timeout=10) as http:
        r = http.get(out["url"], follow_redirects=False)
        assert r.status_code == 303 and "trainee_token=" in r.headers["set-cookie"]
        hello = http.post(f"{out['http_url']}/api/tools/daemon_hello", json={}).json()["result"]
        assert hello["project_root"] == str(tmp_path)
    again = run_cli("webui", "--no-open", "--port", "1", env=daemon_env)
    assert again.returncode == 0, again.stderr
    assert "already running" in again.stderr
    assert again.stdout.startswith("trainee dashboard: http://127.0.0.1:")
