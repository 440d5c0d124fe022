"""Red team, bad requests: batches that ask for too much, replies that would be too big,
params the methods do not take, ints that are not ints, ids in foreign forms, numbers
of 400 digits. Each gets a clear error naming what was wrong (4xx / -32602, never 500 /
-32603) from the real daemon, and nothing changes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest

from tests.faults.helpers import make_project
from tests.security.attacks import Target, batch_bomb, measured, reply_bomb, rpc
from tests.security.daemon_harness import assert_unharmed, started_daemon
from tests.support.daemon import Daemon, run_cli

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def target() -> Iterator[tuple[Daemon, Target]]:
    with started_daemon() as pair:
        yield pair


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_project(tmp_path_factory.mktemp("rpc") / "proj", max_rounds=1)


def test_a_batch_of_ten_thousand_is_refused_whole_at_once(
    target: tuple[Daemon, Target],
) -> None:
    daemon, t = target
    with measured(t) as (probe, _):
        result = batch_bomb(t, length=10_000)
        full = batch_bomb(t, length=256)  # the longest batch allowed is answered
    assert "a batch of 10000 requests (at most 256)" in result["error"], result
    assert full["answered"] == 256
    assert_unharmed(daemon, t, probe)


def test_a_batch_whose_replies_pass_the_limit_is_answered_in_part(
    target: tuple[Daemon, Target],
) -> None:
    daemon, t = target
    with measured(t) as (probe, _):
        result = reply_bomb(t, length=40)
    assert result["refused"] > 0 and result["bytes"] <= 17 * 2**20, result
    assert_unharmed(daemon, t, probe)


def test_unknown_params_are_named(target: tuple[Daemon, Target]) -> None:
    daemon, t = target
    reply = rpc(t.socket, "logs_tail", {"session": "1", "round": 1, "lenght": 5, "ofset": 0})
    assert reply["error"]["code"] == -32602
    assert "'lenght'" in reply["error"]["message"] and "'ofset'" in reply["error"]["message"]
    with httpx.Client(base_url=t.http_url, headers=t.headers()) as client:
        response = client.post("/api/tools/daemon_hello", json={"verbose": True})
    assert response.status_code == 400 and "'verbose'" in response.json()["error"]["message"]
    assert_unharmed(daemon, t)


@pytest.mark.parametrize("value", [32.0, "32", True, 10**400, 2**63])
def test_an_int_param_takes_only_a_64_bit_json_integer(
    target: tuple[Daemon, Target], value: object
) -> None:
    daemon, t = target
    raw = json.dumps(
        {"jsonrpc": "2.0", "method": "events_list", "params": {"limit": 1, "since": 0}, "id": 1}
    ).replace('"since": 0', f'"since": {json.dumps(value) if value is not True else "true"}')
    with httpx.Client(base_url=t.http_url, headers=t.headers()) as client:
        response = client.post("/rpc", content=raw.encode())
    error = response.json()["error"]
    assert error["code"] == -32602, error
    assert "since" in error["message"]
    assert_unharmed(daemon, t)


BAD_IDS = [
    "\uff11",  # fullwidth 1
    "session-\uff10\uff10\uff10\uff11",
    "1\n",
    "session-0001\n",
    "+1",
    "-1",
    "0",
    "1e3",
    "0x1",
    " 1",
    "session-1;id",
    "../../etc",
    "1" * 5000,
]


@pytest.mark.parametrize("bad", BAD_IDS)
def test_a_bad_session_id_is_400_or_invalid_params_never_internal(
    target: tuple[Daemon, Target], project: Path, bad: str
) -> None:
    daemon, t = target
    reply = rpc(t.socket, "loop_get", {"session": bad, "project_root": str(project)})
    assert reply["error"]["code"] == -32602, reply
    assert "not a session id" in reply["error"]["message"] or "session" in reply["error"]["message"]
    with httpx.Client(base_url=t.http_url, headers=t.headers()) as client:
        path = f"/api/sessions/{quote(bad, safe='')}/rounds/1/log?project_root={project}"
        response = client.get(path)
        tool = client.post(
            "/api/tools/loop_get", json={"session": bad, "project_root": str(project)}
        )
    assert response.status_code in (400, 404), (response.status_code, response.text[:300])
    assert tool.status_code == 400, tool.text[:300]
    assert_unharmed(daemon, t)


@pytest.mark.parametrize("form", ["1", "0001", "session-0001"])
def test_every_spec_form_of_a_session_id_is_the_same_session(
    target: tuple[Daemon, Target], project: Path, form: str
) -> None:
    daemon, t = target
    reply = rpc(t.socket, "loop_get", {"session": form, "project_root": str(project)})
    # no session has run there: a clear NotFound for session-0001, whatever the form
    assert reply["error"]["code"] == 1002, reply
    with httpx.Client(base_url=t.http_url, headers=t.headers()) as client:
        response = client.get(f"/api/sessions/{form}/rounds/0001/metrics?project_root={project}")
    assert response.status_code == 404, response.text[:300]
    assert_unharmed(daemon, t)


def test_a_400_digit_default_is_a_config_error_naming_the_field(
    target: tuple[Daemon, Target], tmp_path: Path
) -> None:
    daemon, t = target
    proj = make_project(tmp_path / "big")
    tuning = proj / ".trainee" / "tuning.yaml"
    tuning.write_text(
        tuning.read_text()
        + "  - name: width\n    flag: --width\n    type: int\n    default: 1"
        + "0" * 400
        + "\n"
    )
    out = run_cli("run", "--dry-run", env=daemon.env, cwd=proj, timeout=60)
    assert out.returncode == 3, (out.returncode, out.stderr[-2000:])
    assert "tuning.yaml:" in out.stderr and "params[1].default" in out.stderr
    assert "integer out of range" in out.stderr and "Internal error" not in out.stderr
    assert not (proj / ".trainee" / "runtime.sqlite3").exists(), "nothing was created"
    assert_unharmed(daemon, t)


def test_an_integral_float_for_an_int_param_is_refused_in_a_plan(tmp_path: Path) -> None:
    from trainee.research.decision import DecisionPlan, validate_plan
    from trainee.spec import load_project

    proj = make_project(tmp_path / "ints")
    tuning = proj / ".trainee" / "tuning.yaml"
    tuning.write_text(
        tuning.read_text() + "  - name: width\n    flag: --width\n    type: int\n    default: 8\n"
    )
    spec = load_project(str(proj))
    plan = DecisionPlan(hypothesis="h", change_summary="c", params={"width": 32.0}, expected="e")
    problems = validate_plan(
        plan, spec.tunables, baseline={"lr": 0.1, "width": 8}, tried=[], rejected=[]
    )
    assert [p.field for p in problems] == ["params.width"]
    assert "must be an integer, got 32.0" in problems[0].reason
