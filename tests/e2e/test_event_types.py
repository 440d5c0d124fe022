"""The event types agree everywhere: what a real session publishes is of the union of
trainee/events.py, the daemon serves that union (``events_schema``), and the CLI's live
view, MCP and the page dispatch on its kinds and no others."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.support.daemon import REPO, Daemon, copy_example, run_cli
from trainee import events as ev
from trainee.cli.live import IGNORED_KINDS, LiveView
from trainee.mcp.server import WATCHED
from trainee.rpc.client import RpcClient


def _call(daemon: Daemon, method: str, params: dict[str, object] | None = None) -> object:
    with RpcClient(str(daemon.socket), timeout=60) as client:
        return client.call(method, params or {})


def test_the_served_schema_the_cli_mcp_and_the_page_agree_with_the_union(daemon: Daemon) -> None:
    served = _call(daemon, "events_schema")
    assert isinstance(served, dict)
    assert served["kinds"] == list(ev.KINDS)
    assert served["schema"] == json.loads(json.dumps(ev.events_schema()))
    assert list(served["schema"]["discriminator"]["mapping"]) == list(ev.KINDS)

    # the CLI's live view: a renderer for every kind it does not deliberately skip
    view = LiveView("session-0001", json_mode=True)
    rendered = {ev.kind_of(t) for t in view.renderers()}
    assert rendered | IGNORED_KINDS == set(ev.KINDS) and not rendered & IGNORED_KINDS

    # MCP watches kinds of the union
    assert set(WATCHED) <= set(ev.KINDS)

    # the page: every Kind.NAME it uses is a served kind (named as states.js names them)
    names = {k.upper().replace(".", "_") for k in served["kinds"]}
    used = {
        m.group(1)
        for p in (REPO / "webui" / "js").rglob("*.js")
        for m in re.finditer(r"\bKind\.([A-Z][A-Z0-9_]*)\b", p.read_text(encoding="utf-8"))
    }
    assert used and used <= names

    # the tool description names the result's fields
    tools = run_cli("tools", "--name", "events_schema", env=daemon.env)
    assert tools.returncode == 0, tools.stderr
    assert "Returns: kinds, schema." in json.loads(tools.stdout)[0]["function"]["description"]


def test_every_event_of_a_real_session_is_of_its_kind(daemon: Daemon, tmp_path: Path) -> None:
    project = copy_example("mlp-flags", tmp_path)
    live = run_cli(
        "run", str(project), "--policy", "random", "--max-rounds", "2", "--unsafe",
        env=daemon.env, timeout=180,
    )  # fmt: skip
    assert live.returncode == 0, live.stdout + live.stderr
    # the live view rendered the typed events (not a line about one it could not read)
    assert "cannot read" not in live.stdout + live.stderr
    assert "round 1: completed" in live.stdout and "round 2: completed" in live.stdout

    listed = _call(daemon, "events_list", {"since": 0, "limit": 10_000})
    assert isinstance(listed, dict)
    events = [ev.decode_event(e) for e in listed["events"]]
    kinds = {e.kind for e in events}
    expected = {"daemon.started", "session.started", "decision", "round.started"}
    assert expected | {"output", "round.finished", "session.finished"} <= kinds, kinds
    for event in events:
        if isinstance(event.data, ev.SessionData):
            assert ev.project_of(event) == str(project.resolve()), event
    finished = [e for e in events if isinstance(e, ev.SessionFinishedEvent)]
    assert len(finished) == 1 and finished[0].data.best_round in (1, 2)
