"""The registry is the daemon's only facade, checked through a real daemon, uvicorn and CLI.

Every API route is a method: each former endpoint answers the same over the socket,
``POST /api/tools``, ``/rpc``, its own URL, ``trainee call`` and MCP; the OpenAPI
document is generated from the registry and valid; an error is the same class, code,
HTTP status and exit status on every transport; the registry refuses calls while the
daemon shuts down; and ``prompt_preview`` is exactly what the (fake) provider receives
for the same session.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any
from urllib.parse import quote

import anyio
import httpx
import jsonschema
import mcp_types as types
import pytest
from openapi_spec_validator import validate as validate_openapi

from tests.fakes.llm_server import FakeLLM
from tests.faults.helpers import Node, make_project
from tests.support.daemon import Daemon, base_env, run_cli
from tests.support.loop import OK, llm_env, plan
from tests.support.mcp import legacy_stdio
from trainee import errors, states
from trainee.api.routes import ALIASES
from trainee.api.table import registry

pytestmark = pytest.mark.e2e

SESSION = "session-0001"


@pytest.fixture(scope="module")
def finished(module_node: Node, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project whose first session (2 rounds, random policy) has ended."""
    project = make_project(tmp_path_factory.mktemp("facade") / "proj", max_rounds=2)
    module_node.start_session(project)
    state = module_node.wait_finished(project)
    assert state["session"]["stop_reason"] == "max_rounds", state["session"]
    return project


def http(daemon: Node) -> httpx.Client:
    d = daemon.daemon
    return httpx.Client(
        base_url=d.http_url, headers={"Authorization": f"Bearer {d.token}"}, timeout=30
    )


def over_rpc(client: httpx.Client, name: str, params: dict[str, Any]) -> Any:
    r = client.post("/rpc", json={"jsonrpc": "2.0", "method": name, "params": params, "id": 7})
    assert r.status_code == 200, r.text
    return r.json()


def cli(daemon: Node, name: str, params: dict[str, Any], *extra: str) -> Any:
    return run_cli("call", name, "--input", json.dumps(params), *extra, env=daemon.env)


# -- every former endpoint is a method -------------------------------------------------------


def former_endpoints(project: Path) -> list[tuple[str, dict[str, Any], str]]:
    """(method, params, the URL it had before) for every endpoint web.py served itself."""
    root = str(project)
    q = quote(root)
    return [
        ("projects_list", {}, "/api/projects"),
        (
            "round_metrics",
            {"session": SESSION, "round": 2, "project_root": root},
            f"/api/sessions/{SESSION}/rounds/2/metrics?project_root={q}",
        ),
        (
            "logs_tail",
            {"session": SESSION, "round": 1, "project_root": root, "tail": 2},
            f"/api/sessions/{SESSION}/rounds/1/log?project_root={q}&tail=2",
        ),
        (
            "logs_tail",
            {"session": "1", "round": "round-0002", "project_root": root, "offset": 3},
            f"/api/sessions/1/rounds/round-0002/log?project_root={q}&offset=3",
        ),
        ("runtime_system_prompt_get", {}, "/api/runtime/system-prompt"),
        ("openapi_get", {}, "/api/openapi.json"),
        ("tools_list", {"name": "session_file"}, "/api/tools?name=session_file"),
    ]


def test_every_former_endpoint_answers_the_same_on_every_transport(
    module_node: Node, finished: Path
) -> None:
    cases = former_endpoints(finished)
    with http(module_node) as client:
        for name, params, url in cases:
            assert name in registry, name
            by_socket = module_node.rpc(name, params)
            by_tool = client.post(f"/api/tools/{name}", json=params)
            assert by_tool.status_code == 200, (name, by_tool.text)
            by_url = client.get(url)
            assert by_url.status_code == 200, (url, by_url.text)
            by_cli = cli(module_node, name, params)
            assert by_cli.returncode == 0, by_cli.stderr
            answers = [
                by_tool.json()["result"],
                over_rpc(client, name, params)["result"],
                by_url.json(),
                by_cli.json(),
            ]
            assert all(a == by_socket for a in answers), name
    projects = module_node.rpc("projects_list")["projects"]
    entry = next(p for p in projects if p["root"] == str(finished.resolve()))
    assert entry["configured"] and entry["exists"] and entry["running"] == []
    metrics = module_node.rpc(
        "round_metrics", {"session": 1, "round": 2, "project_root": str(finished)}
    )
    values = [p[1] for p in metrics["points"] if p[0] == "val_loss"]
    state = module_node.state(finished)
    assert values == [pytest.approx(state["rounds"][1]["primary_metric"])], metrics


def test_every_alias_is_a_registered_method_and_every_api_route_is_one(module_node: Node) -> None:
    """Apart from static files and the event stream, the app's API routes are methods."""
    assert {a.method for a in ALIASES} <= set(registry.names())
    with http(module_node) as client:
        paths = client.get("/api/openapi.json").json()["paths"]
    hand = {"/api/sessions/{session}/events", "/rpc"}
    for path in set(paths) - hand:
        if path.startswith("/api/tools/"):
            assert path.removeprefix("/api/tools/") in registry, path
        else:
            assert path in {a.path for a in ALIASES}, path


def test_a_session_file_is_a_method_and_its_download_the_same_bytes(
    module_node: Node, finished: Path
) -> None:
    folder = finished / ".trainee" / "artifacts" / SESSION
    root = str(finished)
    with http(module_node) as client:
        for name in ("report.md", "result_ledger.csv", "research_state.json", "round-0001.log"):
            content = (folder / name).read_bytes()
            got = module_node.rpc(
                "session_file", {"session": SESSION, "name": name, "project_root": root}
            )
            assert got["data"].encode() == content and got["size"] == len(content), name
            assert not got["overflow"] and got["path"] == str(folder / name)
            part = module_node.rpc(
                "session_file",
                {"session": "1", "name": name, "project_root": root, "offset": 5, "length": 7},
            )
            assert part["data"].encode() == content[5:12] and part["overflow"], name
            download = client.get(
                f"/api/sessions/{SESSION}/files/{name}?project_root={quote(root)}"
            )
            assert download.status_code == 200 and download.content == content, name
            assert download.headers["content-length"] == str(len(content))
            head = client.head(f"/api/sessions/{SESSION}/files/{name}?project_root={quote(root)}")
            assert head.status_code == 200 and head.content == b""
    # a symlink or a FIFO in a file's place is not read
    (finished / "outside.txt").write_text("SECRET-OUTSIDE")
    (folder / "report_chart.svg").unlink(missing_ok=True)
    (folder / "report_chart.svg").symlink_to(finished / "outside.txt")
    try:
        err = _socket_error(
            module_node,
            "session_file",
            {"session": SESSION, "name": "report_chart.svg", "project_root": root},
        )
        assert isinstance(err, errors.NotFound) and "not a regular file" in err.message
        with http(module_node) as client:
            r = client.get(
                f"/api/sessions/{SESSION}/files/report_chart.svg?project_root={quote(root)}"
            )
        assert r.status_code == 404 and b"SECRET-OUTSIDE" not in r.content
    finally:
        (folder / "report_chart.svg").unlink()


def test_the_system_prompt_url_is_an_alias_of_its_methods(module_node: Node) -> None:
    with http(module_node) as client:
        put = client.put("/api/runtime/system-prompt", json={"prompt": "Be terse."})
        assert put.status_code == 200 and put.json() == {"prompt": "Be terse.", "is_default": False}
        assert module_node.rpc("runtime_system_prompt_get")["prompt"] == "Be terse."
        assert cli(module_node, "runtime_system_prompt_get", {}).json()["prompt"] == "Be terse."
        back = client.post("/api/runtime/system-prompt", json={"prompt": ""}).json()
        assert back["is_default"] is True
        big = client.put("/api/runtime/system-prompt", json={"prompt": "x" * 70_000})
        assert big.status_code == 400 and "too large" in big.json()["error"]["message"]


# -- the OpenAPI document ----------------------------------------------------------------------


def test_the_openapi_document_is_valid_and_covers_every_method(module_node: Node) -> None:
    with http(module_node) as client:
        doc = client.get("/api/openapi.json").json()
    validate_openapi(doc)  # the OpenAPI 3.1 specification's own schema and rules
    assert doc == module_node.rpc("openapi_get")
    paths = doc["paths"]
    for method in registry:
        op = paths[f"/api/tools/{method.name}"]["post"]
        body = op["requestBody"]["content"]["application/json"]["schema"]
        assert body == method.params_schema(), method.name
        result = op["responses"]["200"]["content"]["application/json"]["schema"]
        assert result["properties"]["result"] == method.result_schema(), method.name
        jsonschema.Draft202012Validator.check_schema(result)
        for status in {str(c.http_status) for c in errors.error_classes()}:
            assert status in op["responses"], (method.name, status)
    for alias in ALIASES:
        method = registry.get(alias.method)
        for verb in alias.verbs:
            op = paths[alias.path][verb.lower()]
            names = {p["name"] for p in op.get("parameters", [])}
            if alias.body:
                body = op["requestBody"]["content"]["application/json"]["schema"]
                assert set(body["properties"]) == set(method.params_schema()["properties"])
            else:
                assert set(method.params_schema()["properties"]) - {"offset", "length"} <= names
            if not alias.stream:
                schema = op["responses"]["200"]["content"]["application/json"]["schema"]
                assert schema == method.result_schema(), alias.path


def test_named_result_fields_for_the_loop_tools(module_node: Node) -> None:
    """``trainee tools`` shows what loop_get, runs_get and session_report return."""
    out = run_cli("tools", "--json", env=module_node.env)
    assert out.returncode == 0, out.stderr
    described = {e["function"]["name"]: e["function"]["description"] for e in out.json()}
    assert (
        "Returns: session, rounds, current_round, running, best, baseline, metric."
        in described["loop_get"]
    )
    assert (
        "Returns: run_id, session_id, round, decision, log_path, metric_points."
        in described["runs_get"]
    )
    assert (
        "Returns: session, report, ledger_csv, ledger_jsonl, markdown."
        in described["session_report"]
    )
    for name in ("loop_get", "runs_get", "runs_list"):
        schema = registry.get(name).result_schema()
        for field, prop in schema["properties"].items():
            if field in ("session", "round", "best", "baseline", "current_round"):
                shown = prop if "properties" in prop else prop["anyOf"][0]
                assert {"status", "index"} <= set(shown["properties"]), (name, field)


def test_results_match_their_schemas(module_node: Node, finished: Path) -> None:
    root = str(finished)
    calls = {
        "loop_get": {"project_root": root, "session": SESSION},
        "runs_list": {"project_root": root},
        "runs_get": {"project_root": root, "run_id": 2},
        "session_report": {"project_root": root},
        "projects_list": {},
        "round_metrics": {"project_root": root, "session": SESSION, "round": 1},
        "prompt_preview": {"project_root": root, "session": SESSION},
        "session_file": {"project_root": root, "session": SESSION, "name": "report.md"},
        "logs_tail": {"project_root": root, "session": SESSION, "round": 2, "tail": 1},
    }
    for name, params in calls.items():
        result = module_node.rpc(name, params)
        jsonschema.validate(result, registry.get(name).result_schema())
        if name == "prompt_preview":  # no provider configured: the messages as composed
            assert result["response_format"] is None and result["provider"] is None
            assert "no LLM provider" in result["note"] and result["round"] == 3


# -- errors in one table -------------------------------------------------------------------------


def _socket_error(daemon: Node, name: str, params: Any) -> errors.TraineeError:
    with pytest.raises(errors.TraineeError) as info:
        daemon.rpc(name, params)
    return info.value


def error_cases(tmp: Path) -> list[tuple[str, Any, type[errors.TraineeError]]]:
    return [
        ("loop_get", {"project_root": str(tmp)}, errors.NotFound),
        ("round_metrics", {"session": SESSION, "round": "1;ls"}, errors.InvalidParams),
        ("logs_tail", {"session": SESSION, "round": 1, "tail": 0}, errors.InvalidParams),
        ("no_such_method", {}, errors.MethodNotFound),
        ("loop_start", {"project_root": str(tmp), "policy": "random"}, errors.ConfigError),
        ("loop_stop", {"session": SESSION, "project_root": "relative"}, errors.InvalidParams),
    ]


def test_errors_are_mapped_the_same_way_on_every_transport(
    module_node: Node, tmp_path: Path
) -> None:
    (tmp_path / ".trainee").mkdir()
    (tmp_path / ".trainee" / "project.yaml").write_text("version: 1\nlaunch: {command: 3}\n")
    with http(module_node) as client:
        for name, params, cls in error_cases(tmp_path):
            by_socket = _socket_error(module_node, name, params)
            assert type(by_socket) is cls, (name, by_socket)
            wire = by_socket.to_wire()
            assert wire["code"] == cls.code and wire["data"]["type"] == cls.__name__
            tool = client.post(f"/api/tools/{name}", json=params)
            assert tool.status_code == cls.http_status, (name, tool.status_code, tool.text)
            assert tool.json()["error"] == wire, name
            assert over_rpc(client, name, params)["error"] == wire, name
            by_cli = cli(module_node, name, params)
            assert by_cli.returncode == cls.exit_status, (name, by_cli.stderr)
            assert cli(module_node, name, params, "--json").json()["error"] == wire, name

        async def over_mcp() -> list[types.CallToolResult]:
            async with legacy_stdio(module_node.env) as session:
                return [
                    await session.call_tool(name, params)
                    for name, params, _ in error_cases(tmp_path)
                    if name != "no_such_method"
                ]

        mcp_cases = [c for c in error_cases(tmp_path) if c[0] != "no_such_method"]
        for result, (name, _, cls) in zip(anyio.run(over_mcp), mcp_cases, strict=True):
            assert result.is_error, name
            error = (result.structured_content or {})["error"]
            # the same class and code (MCP resolves a relative project_root first)
            assert (error["code"], error["data"]["type"]) == (cls.code, cls.__name__), name


def test_the_registry_refuses_calls_while_the_daemon_shuts_down(short_dir: Path) -> None:
    """A batch with daemon_stop first: every later call in it meets ShuttingDown."""
    for transport in ("socket", "http"):
        runtime = short_dir / transport
        runtime.mkdir()
        d = Daemon(runtime=runtime, env=base_env(runtime))
        assert d.start().startswith("READY"), d.log
        try:
            batch = [
                {"jsonrpc": "2.0", "method": "daemon_stop", "id": 1},
                {"jsonrpc": "2.0", "method": "daemon_hello", "id": 2},
                {"jsonrpc": "2.0", "method": "daemon_stop", "id": 3},
            ]
            if transport == "socket":
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                    s.settimeout(30)
                    s.connect(str(d.socket))
                    s.sendall(json.dumps(batch).encode() + b"\n")
                    reply = b""
                    while not reply.endswith(b"\n"):
                        chunk = s.recv(65536)
                        assert chunk, "the daemon closed the connection before answering"
                        reply += chunk
                answers = json.loads(reply)
            else:
                r = httpx.post(
                    d.http_url + "/rpc",
                    json=batch,
                    headers={"Authorization": f"Bearer {d.token}"},
                    timeout=30,
                )
                answers = r.json()
            by_id = {a["id"]: a for a in answers}
            assert by_id[1]["result"] == {"stopping": True}
            error = by_id[2]["error"]
            assert error["code"] == errors.ShuttingDown.code == 1008
            assert error["data"]["type"] == "ShuttingDown" and "shutting down" in error["message"]
            assert by_id[3]["result"] == {"stopping": True}, "asking it to stop again is fine"
            assert d.proc is not None and d.proc.wait(30) == 0
        finally:
            d.stop()
    assert errors.ShuttingDown.exit_status == 75 and errors.ShuttingDown.http_status == 503


# -- prompt_preview is what the provider receives ----------------------------------------------


def test_prompt_preview_is_exactly_what_the_provider_receives(
    module_node: Node, tmp_path: Path
) -> None:
    """The decision for round 3 waits at the fake provider (its answer is held); the
    preview of the same session, computed meanwhile, is the request it received: the
    same messages (journal, budget, and the schema note of the json_object level the
    live test settled on), response_format, model and max_tokens."""
    project = make_project(tmp_path / "proj", max_rounds=5, behaviour={"steps": 1})
    with (project / ".trainee" / "project.yaml").open("a") as fh:
        fh.write("llm:\n  max_tokens: 1000000\n")
    module_node.rpc(
        "journal_append", {"project_root": str(project), "text": "lr above 0.5 diverged"}
    )
    script = [
        {"refuse_format": ["json_schema"]},  # the live test falls back to json_object
        OK,
        plan({"lr": 0.2}),
        {"delay": 600, "content": "never read"},
    ]
    with FakeLLM(script) as fake:
        env = llm_env(module_node.env, fake, TRAINEE_LLM_TIMEOUT_SEC="900")
        module_node.start_session(project, policy="llm", env=env)
        module_node.wait(project, lambda _: len(fake.requests) == 4, what="the round-3 decision")
        preview = module_node.rpc(
            "prompt_preview", {"project_root": str(project), "session": SESSION}
        )
        sent = fake.requests[3]
        module_node.rpc("loop_stop", {"project_root": str(project), "session": SESSION})
    assert preview["round"] == 3 and preview["plans"] == 1 and preview["policy"] == "llm"
    assert preview["response_format"] == "json_object"
    assert preview["messages"] == sent["messages"]
    assert preview["format_body"] == sent["response_format"]
    assert preview["max_tokens"] == sent["max_tokens"]
    assert preview["model"] == sent["model"] == "fake-model"
    system, user = preview["messages"][0]["content"], preview["messages"][-1]["content"]
    assert "Reply with one JSON object that conforms to this JSON schema" in system
    assert "lr above 0.5 diverged" in user  # the journal
    assert "Tokens left in the LLM budget" in user
    # a fresh preview of the ended session: the same code, from the store
    again = module_node.rpc("prompt_preview", {"project_root": str(project), "session": SESSION})
    assert again["messages"][0] == preview["messages"][0]


def test_daemon_hello_publishes_the_states(module_node: Node) -> None:
    """Clients take statuses and stop reasons from the daemon, not from their own copy."""
    published = states.published()
    assert module_node.rpc("daemon_hello")["states"] == published
    assert cli(module_node, "daemon_hello", {}).json()["states"] == published
    assert set(published["round_finished"]) == {s.value for s in states.ROUND_FINISHED}  # type: ignore[arg-type]
