"""trainee as an MCP server, driven by the MCP SDK's own clients against a real daemon.

Over stdio, ``python -m trainee mcp`` is spawned by the SDK's stdio client: once
with the 2025 handshake (``ClientSession.initialize``, ``resources/subscribe``,
what today's coding agents speak) and once with the SDK's default ``Client``
(2026-07-28, ``subscriptions/listen``). Over streamable HTTP the daemon serves
``/mcp`` itself, behind its token and Host/Origin checks. Sessions run for real
on a copy of examples/mlp-flags (random policy, unsafe mode).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import anyio
import httpx
import httpx2
import mcp_types as types
import pytest
from mcp import Client, ClientSession
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from yaml import safe_load as yaml_safe_load

from tests.support.daemon import Daemon, copy_example
from tests.support.mcp import legacy_stdio, server_params
from trainee.api.table import registry
from trainee.errors import TraineeError
from trainee.rpc.client import RpcClient

pytestmark = pytest.mark.e2e

SESSION = "session-0001"
T = TypeVar("T")


# -- helpers -------------------------------------------------------------------------------


def run(main: Callable[[], Awaitable[T]]) -> T:
    return anyio.run(main)


async def subscribe(session: ClientSession, uri: str) -> None:
    # resources/subscribe is the 2025 protocol agents speak; the SDK flags it as deprecated.
    with pytest.warns(MCPDeprecationWarning):
        await session.subscribe_resource(uri)


def rpc(daemon: Daemon, method: str, params: dict[str, Any]) -> Any:
    with RpcClient(daemon.socket) as client:
        return client.call(method, params)


def rpc_error(daemon: Daemon, method: str, params: dict[str, Any]) -> TraineeError:
    with pytest.raises(TraineeError) as info:
        rpc(daemon, method, params)
    return info.value


def ok(result: types.CallToolResult) -> Any:
    assert not result.is_error, result.content
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return json.loads(block.text)


def report_uri(project: Path, session: str = SESSION) -> str:
    return f"trainee://{project}/sessions/{session}/report"


def log_uri(project: Path, round: int, session: str = SESSION) -> str:
    return f"trainee://{project}/sessions/{session}/rounds/{round}/log"


def start_args(project: Path | str, rounds: int = 2) -> dict[str, Any]:
    return {
        "project_root": str(project),
        "policy": "random",
        "security_mode": "unsafe",
        "max_rounds": rounds,
    }


async def wait_finished(
    call: Callable[[str, dict[str, Any]], Awaitable[types.CallToolResult]], project: Path
) -> dict[str, Any]:
    """Poll ``loop_get`` through MCP until the session is over (deadline 90 s)."""
    with anyio.fail_after(90):
        while True:
            state: dict[str, Any] = ok(
                await call("loop_get", {"project_root": str(project), "session": SESSION})
            )
            if not state["running"] and state["session"]["status"] != "running":
                return state
            await anyio.sleep(0.1)


# -- the CLI stays thin ------------------------------------------------------------------------

THIN_PROBE = """
import runpy, sys
sys.argv = ['trainee', 'mcp', '--help']
try:
    runpy.run_module('trainee', run_name='__main__')
except SystemExit:
    pass
loaded = sorted({m.split('.')[0] for m in sys.modules} & {'mcp', 'mcp_types', 'pydantic', 'anyio'})
sys.stderr.write('LOADED:' + ','.join(loaded) + '\\n')
"""


def test_trainee_mcp_help_loads_no_sdk() -> None:
    """``trainee mcp`` execs ``python -m trainee.mcp``: the CLI itself never imports the SDK."""
    proc = subprocess.run(
        [sys.executable, "-c", THIN_PROBE], capture_output=True, text=True, timeout=60
    )
    assert "--log-level" in proc.stdout, proc.stderr
    assert "LOADED:\n" in proc.stderr, proc.stderr


# -- tools over stdio (2025 handshake) -------------------------------------------------------


def test_every_registry_method_is_a_tool_with_its_schema(venv_daemon: Daemon) -> None:
    async def main() -> tuple[types.InitializeResult, list[types.Tool], Any]:
        async with (
            stdio_client(server_params(venv_daemon.env)) as (read, write),
            ClientSession(read, write) as session,
        ):
            init = await session.initialize()
            tools = (await session.list_tools()).tools
            hello = ok(await session.call_tool("daemon_hello", {}))
            return init, tools, hello

    init, tools, hello = run(main)
    assert init.server_info.name == "trainee"
    assert init.capabilities.tools is not None
    assert init.capabilities.resources is not None and init.capabilities.resources.subscribe
    by_name = {t.name: t for t in tools}
    assert sorted(by_name) == sorted(registry.names())
    for method in registry:
        tool = by_name[method.name]
        assert tool.input_schema == method.params_schema(), method.name
        assert tool.description is not None and tool.description.startswith(method.summary)
    assert venv_daemon.proc is not None and hello["pid"] == venv_daemon.proc.pid
    assert hello == rpc(venv_daemon, "daemon_hello", {})


def test_a_bad_call_gets_the_same_error_as_json_rpc(venv_daemon: Daemon, tmp_path: Path) -> None:
    project = copy_example("mlp-flags", tmp_path)
    bad_tuning = {
        "project_root": str(project),
        "launch": {"command": ["python", "train.py"]},
        "tuning": {
            "version": 1,
            "params": [
                {"name": "lr", "flag": "--lr", "type": "float", "default": 0.01, "max_value": "x"}
            ],
        },
    }
    calls = [
        ("logs_tail", {"session": 3, "round": 1}),  # a wrong type
        ("loop_start", {**start_args(project), "max_rounds": 0}),  # out of range
        ("project_get", {"project_root": "/nonexistent/project"}),  # a bad value
        ("project_register", bad_tuning),  # an invalid file, checked before writing
        ("no_such_method", {}),
    ]
    before = (project / ".trainee" / "tuning.yaml").read_text()

    async def main() -> list[types.CallToolResult]:
        async with legacy_stdio(venv_daemon.env) as session:
            return [await session.call_tool(name, args) for name, args in calls]

    results = run(main)
    for (name, args), result in zip(calls, results, strict=True):
        expected = rpc_error(venv_daemon, name, args)
        assert result.is_error, name
        first = result.content[0]
        assert isinstance(first, types.TextContent)
        assert first.text == expected.message, name
        assert result.structured_content == {"error": expected.to_wire()}, name
    assert "max_rounds" in results[1].content[0].text  # type: ignore[union-attr]
    register_error = results[3].structured_content["error"]  # type: ignore[index]
    assert register_error["data"]["details"], register_error
    assert (project / ".trainee" / "tuning.yaml").read_text() == before


def test_mcp_starts_the_daemon_when_none_runs(daemon_env: dict[str, str]) -> None:
    sock = Path(daemon_env["TRAINEE_SOCKET"])
    assert not sock.exists()

    async def main() -> Any:
        async with legacy_stdio(daemon_env) as session:
            return ok(await session.call_tool("daemon_hello", {}))

    hello = run(main)
    assert hello["socket"] == str(sock) and sock.exists()
    with RpcClient(sock) as client:
        assert client.call("daemon_hello")["pid"] == hello["pid"]


# -- a whole session through MCP ---------------------------------------------------------


def test_a_session_run_through_mcp_tools_and_resources(venv_daemon: Daemon, tmp_path: Path) -> None:
    """SDK default client (2026-07-28): tools, listen for updates, resources, the report."""
    project = copy_example("mlp-flags", tmp_path)
    report, round2_log = report_uri(project), log_uri(project, 2)

    async def main() -> dict[str, Any]:
        out: dict[str, Any] = {"updates": []}
        # cwd = tmp_path: a relative project_root is resolved where `trainee mcp` runs.
        async with Client(server_params(venv_daemon.env, cwd=tmp_path)) as client:
            out["tools"] = {t.name for t in (await client.list_tools()).tools}
            out["project"] = ok(
                await client.call_tool("project_get", {"project_root": "mlp-flags"})
            )
            async with client.listen(resource_subscriptions=[report, round2_log]) as updates:
                out["started"] = ok(await client.call_tool("loop_start", start_args(project)))
                out["state"] = await wait_finished(client.call_tool, project)
                with anyio.fail_after(30):
                    async for event in updates:
                        out["updates"].append(event.uri)
                        if {report, round2_log} <= set(out["updates"]):
                            break
            out["resources"] = [r.uri for r in (await client.list_resources()).resources]
            out["templates"] = [
                t.uri_template for t in (await client.list_resource_templates()).resource_templates
            ]
            out["report"] = (await client.read_resource(report)).contents
            out["log"] = (await client.read_resource(log_uri(project, 1))).contents
            for uri in (report_uri(project, "session-0009"), "file:///etc/passwd"):
                with pytest.raises(MCPError) as info:
                    await client.read_resource(uri)
                out.setdefault("errors", []).append(info.value.error)
        return out

    out = run(main)
    assert set(registry.names()) <= out["tools"]
    assert out["project"]["project_root"] == str(project)
    assert {t["name"] for t in out["project"]["tunables"]} >= {"lr", "weight_decay"}
    assert out["started"]["session"] == SESSION
    assert out["state"]["session"]["status"] == "finished", out["state"]["session"]
    assert set(out["updates"]) == {report, round2_log}

    assert out["resources"] == [report, log_uri(project, 1), round2_log]
    assert any("/report" in t for t in out["templates"])
    assert any("/rounds/{round}/log" in t for t in out["templates"])
    (contents,) = out["report"]
    assert isinstance(contents, types.TextResourceContents)
    assert contents.uri == report and contents.mime_type == "text/markdown"
    assert contents.text.startswith(f"# Trainee report — {SESSION}")
    assert contents.text == (project / ".trainee" / "artifacts" / SESSION / "report.md").read_text()
    assert "Status:** finished" in contents.text
    (log,) = out["log"]
    assert isinstance(log, types.TextResourceContents)
    log_file = project / ".trainee" / "artifacts" / SESSION / "round-0001.log"
    assert log.text == log_file.read_text() and "final val_loss=" in log.text

    missing, foreign = out["errors"]
    assert missing.data["type"] == "NotFound" and "session-0009" in missing.message
    assert foreign.data["type"] == "InvalidParams"
    assert "not a trainee resource" in foreign.message


def test_legacy_subscription_over_stdio(venv_daemon: Daemon, tmp_path: Path) -> None:
    """``resources/subscribe`` (2025): an update per finished round and at the session's end."""
    project = copy_example("mlp-flags", tmp_path)
    report = report_uri(project)
    updates: list[str] = []

    async def main() -> None:
        done = anyio.Event()

        def on_update(uri: str) -> None:
            updates.append(uri)
            if updates.count(report) >= 3:  # round 1, round 2, the session's end
                done.set()

        async with legacy_stdio(venv_daemon.env, on_update) as session:
            await subscribe(session, report)
            ok(await session.call_tool("loop_start", start_args(project)))
            with anyio.fail_after(90):
                await done.wait()
            resources = (await session.list_resources()).resources
            assert resources[0].uri == report

    run(main)
    assert updates == [report] * 3


# -- streamable HTTP inside the daemon -----------------------------------------------------


def test_streamable_http_with_the_token(venv_daemon: Daemon, tmp_path: Path) -> None:
    project = copy_example("mlp-flags", tmp_path)
    report = report_uri(project)
    url = venv_daemon.http_url + "/mcp"
    headers = {"Authorization": f"Bearer {venv_daemon.token}"}
    updates: list[str] = []

    async def main() -> dict[str, Any]:
        out: dict[str, Any] = {}
        done = anyio.Event()

        async def handler(message: Any) -> None:
            if isinstance(message, types.ResourceUpdatedNotification):
                updates.append(message.params.uri)
                if updates.count(report) >= 3:
                    done.set()

        async with (
            httpx2.AsyncClient(headers=headers) as http,
            streamable_http_client(url, http_client=http) as (read, write),
            ClientSession(read, write, message_handler=handler) as session,
        ):
            await session.initialize()
            out["tools"] = {t.name: t for t in (await session.list_tools()).tools}
            out["bad"] = await session.call_tool("logs_tail", {"session": 3, "round": 1})
            await subscribe(session, report)
            out["started"] = ok(await session.call_tool("loop_start", start_args(project)))
            with anyio.fail_after(90):
                await done.wait()
            out["state"] = await wait_finished(session.call_tool, project)
            out["report"] = (await session.read_resource(report)).contents
        return out

    out = run(main)
    assert sorted(out["tools"]) == sorted(registry.names())
    assert out["tools"]["loop_start"].input_schema == registry.get("loop_start").params_schema()
    expected = rpc_error(venv_daemon, "logs_tail", {"session": 3, "round": 1})
    assert out["bad"].is_error and out["bad"].content[0].text == expected.message
    assert out["started"]["session"] == SESSION
    assert out["state"]["session"]["status"] == "finished"
    assert updates == [report] * 3
    (contents,) = out["report"]
    assert isinstance(contents, types.TextResourceContents)
    assert contents.text.startswith(f"# Trainee report — {SESSION}")


def test_streamable_http_refuses_without_token_host_or_origin(venv_daemon: Daemon) -> None:
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "0"},
        },
    }
    accept = {"Accept": "application/json, text/event-stream"}
    bearer = {"Authorization": f"Bearer {venv_daemon.token}", **accept}
    with httpx.Client(base_url=venv_daemon.http_url, timeout=30) as http:
        no_token = http.post("/mcp", json=initialize, headers=accept)
        assert no_token.status_code == 401, no_token.text
        assert "access token" in no_token.json()["error"]["message"]
        wrong = http.post("/mcp", json=initialize, headers={**accept, "Authorization": "Bearer x"})
        assert wrong.status_code == 401
        assert http.get("/mcp", headers=accept).status_code == 401
        rebound = http.post("/mcp", json=initialize, headers={**bearer, "Host": "evil.example"})
        assert rebound.status_code == 421
        cross = http.post(
            "/mcp", json=initialize, headers={**bearer, "Origin": "http://evil.example"}
        )
        assert cross.status_code == 403
        good = http.post("/mcp", json=initialize, headers=bearer)
        assert good.status_code == 200, good.text
        assert good.headers.get("mcp-session-id")


# -- an agent driving the loop through the stage interfaces ------------------------------


def test_an_agent_drives_an_external_session_over_mcp(venv_daemon: Daemon, tmp_path: Path) -> None:
    """Register a project, run 3 rounds through plan_submit / round_run / round_result, read the
    report; an invalid plan gets the same precise error as over JSON-RPC."""
    project = copy_example("mlp-flags", tmp_path)
    root = str(project)
    project_yaml = yaml_safe_load((project / ".trainee" / "project.yaml").read_text())
    tuning = yaml_safe_load((project / ".trainee" / "tuning.yaml").read_text())
    register = {"project_root": root, **project_yaml, "tuning": tuning}
    bad_plan = {"session": SESSION, "project_root": root, "hypothesis": "h", "change_summary": "c",
                "expected": "e", "params": {"lr": 5.0, "momentum": 0.9}}  # fmt: skip

    async def main() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with legacy_stdio(venv_daemon.env) as session:
            out["tools"] = {t.name for t in (await session.list_tools()).tools}
            out["registered"] = ok(await session.call_tool("project_register", register))
            start = {**start_args(project, rounds=3), "policy": "external"}
            out["started"] = ok(await session.call_tool("loop_start", start))
            out["baseline"] = ok(await session.call_tool(
                "round_result", {"session": SESSION, "project_root": root, "round": 1, "wait": True}
            ))  # fmt: skip
            out["bad"] = await session.call_tool("plan_submit", bad_plan)
            # the same plan over JSON-RPC while the session is waiting for it
            out["rpc_bad"] = await anyio.to_thread.run_sync(
                lambda: rpc_error(venv_daemon, "plan_submit", bad_plan)
            )
            out["two"] = ok(await session.call_tool("round_run", {
                "session": SESSION, "project_root": root, "hypothesis": "a larger step",
                "change_summary": "lr x3", "expected": "val_loss < 0.26", "params": {"lr": 0.003},
            }))  # fmt: skip
            out["submitted"] = ok(await session.call_tool("plan_submit", {
                "session": SESSION, "project_root": root, "hypothesis": "decay helps at a larger lr",
                "change_summary": "lr 0.01, weight_decay 0.003", "expected": "lower val_loss",
                "params": {"lr": 0.01, "weight_decay": 0.003},
            }))  # fmt: skip
            out["three"] = ok(await session.call_tool(
                "round_result", {"session": SESSION, "project_root": root, "round": 3, "wait": True}
            ))  # fmt: skip
            out["state"] = await wait_finished(session.call_tool, project)
            out["report"] = (await session.read_resource(report_uri(project))).contents
        return out

    out = run(main)
    assert {"plan_submit", "round_run", "round_result", "journal_append", "journal_get"} <= out[
        "tools"
    ]
    assert out["registered"]["project_root"] == root
    assert out["baseline"]["verdict"] == "baseline"
    expected = out["rpc_bad"]
    assert out["bad"].is_error
    assert out["bad"].content[0].text == expected.message  # type: ignore[union-attr]
    assert "params.lr" in expected.message and "params.momentum" in expected.message
    assert out["two"]["round"] == 2 and out["two"]["finished"]
    assert out["submitted"]["round"] == 3
    assert out["three"]["status"] == "completed"
    assert out["state"]["session"]["stop_reason"] == "max_rounds"
    assert [r["index"] for r in out["state"]["rounds"]] == [1, 2, 3]
    (contents,) = out["report"]
    assert isinstance(contents, types.TextResourceContents)
    assert "| 3 " in contents.text and "decay helps" in contents.text
