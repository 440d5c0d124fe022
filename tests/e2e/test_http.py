"""The daemon's HTTP side: /rpc, the tool API, and the Host/Origin/token guard."""

from __future__ import annotations

import httpx
import pytest

from tests.support.daemon import Daemon

pytestmark = pytest.mark.e2e


def _client(daemon: Daemon, token: bool = True) -> httpx.Client:
    headers = {"Authorization": f"Bearer {daemon.token}"} if token else {}
    return httpx.Client(base_url=daemon.http_url, headers=headers, timeout=10)


def test_rpc_over_http(daemon: Daemon) -> None:
    with _client(daemon) as http:
        r = http.post("/rpc", content=b'{"jsonrpc": "2.0", "method": "daemon_hello", "id": 7}')
        assert r.status_code == 200
        body = r.json()
        assert body["id"] == 7 and body["result"]["name"] == "trainee"
        batch = http.post(
            "/rpc",
            content=b'[{"jsonrpc": "2.0", "method": "daemon_hello", "id": 1},'
            b' {"jsonrpc": "2.0", "method": "nope", "id": 2}, {"jsonrpc": "2.0", "method": "x"}]',
        ).json()
        assert {item["id"] for item in batch} == {1, 2}
        assert next(i for i in batch if i["id"] == 2)["error"]["code"] == -32601
        note = http.post("/rpc", content=b'{"jsonrpc": "2.0", "method": "daemon_hello"}')
        assert note.status_code == 204
        garbage = http.post("/rpc", content=b"\xff\xfe{")
        assert garbage.json()["error"]["code"] == -32700


def test_tool_api(daemon: Daemon) -> None:
    with _client(daemon) as http:
        tools = http.get("/api/tools").json()
        assert "loop_start" in {t["function"]["name"] for t in tools}
        one = http.get("/api/tools", params={"name": "logs_tail"}).json()
        assert one[0]["function"]["parameters"]["required"] == ["session", "round"]
        hello = http.post("/api/tools/daemon_hello", json={})
        assert hello.status_code == 200 and hello.json()["result"]["name"] == "trainee"
        unbound = http.post("/api/tools/loop_start", json={})
        assert unbound.status_code == 400
        assert "not bound to a project" in unbound.json()["error"]["message"]
        missing = http.post("/api/tools/nope", json={})
        assert missing.status_code == 404
        bad = http.post("/api/tools/logs_tail", json={"session": 3})
        assert bad.status_code == 400 and "invalid params" in bad.json()["error"]["message"]
        not_json = http.post("/api/tools/daemon_hello", content=b"{nope")
        assert not_json.status_code == 400


@pytest.mark.parametrize("path", ["/rpc", "/api/tools"])
def test_token_is_required(daemon: Daemon, path: str) -> None:
    with _client(daemon, token=False) as http:
        method = http.post if path == "/rpc" else http.get
        assert method(path).status_code == 401
        wrong = method(path, headers={"Authorization": "Bearer not-the-token"})
        assert wrong.status_code == 401
        cookie = method(path, headers={"Cookie": f"trainee_token={daemon.token}"})
        assert cookie.status_code != 401


def test_foreign_host_is_refused(daemon: Daemon) -> None:
    """DNS rebinding: a page on evil.example resolving to 127.0.0.1 sends its own Host."""
    with _client(daemon) as http:
        port = daemon.http_url.rsplit(":", 1)[1]
        r = http.get("/api/tools", headers={"Host": f"evil.example:{port}"})
        assert r.status_code == 421
        ok = http.get("/api/tools", headers={"Host": f"localhost:{port}"})
        assert ok.status_code == 200


def test_foreign_origin_cannot_change_state(daemon: Daemon) -> None:
    with _client(daemon) as http:
        r = http.post("/api/tools/daemon_hello", json={}, headers={"Origin": "http://evil.example"})
        assert r.status_code == 403
        same = http.post("/api/tools/daemon_hello", json={}, headers={"Origin": daemon.http_url})
        assert same.status_code == 200
