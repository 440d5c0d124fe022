"""Red team, layouts: wherever trainee's private files are, a guarded job reaches none.

Each case is a real daemon started in one layout of HOME, the socket, the data folder,
the project and PATH, running one guarded round whose training script is the attack:
it tries to read ``~/.trainee/config.json`` (provider keys), another trainee HOME's
config.json, an SSH key, the HTTP token and the store, to connect to the daemon's
socket, to list HOME and to write outside its workspace, and it reports which of the
caller's secrets it got in its environment. The same probe run outside the sandbox
reaches all of it (so the test can fail). Then the normal examples train guarded in
the two layouts that broke before.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.faults.helpers import assert_no_orphans
from tests.security.sandbox_helpers import (
    PROBE,
    SECRETS,
    Layout,
    answers_within,
    digests,
    findings,
    make_layout,
    make_probe_project,
    refused,
    short_base,
    started,
    workspace,
)

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bwrap is not installed"),
]

LAYOUTS = [
    "home-under-tmp-with-home-bin-on-path",
    "project-under-home",
    "socket-beside-the-project",
    "socket-inside-the-project",
    "venv-under-tmp",
    "data-dir-elsewhere",
]
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture
def outside() -> Iterator[Path]:
    """A folder outside /tmp (the sandbox's /tmp is its own anyway): other HOMEs live here."""
    base = "/var/tmp" if os.access("/var/tmp", os.W_OK) else str(Path.home())
    path = Path(tempfile.mkdtemp(prefix="tr-sec-", dir=base))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def attack(layout: Layout) -> dict[str, Any]:
    """The probe's orders against ``layout``."""
    other = layout.other_home
    assert other is not None
    return {
        "*": {
            "try": {
                "config": ["read", str(layout.home / ".trainee" / "config.json")],
                "other_config": ["read", str(other / ".trainee" / "config.json")],
                "ssh_key": ["read", str(layout.home / ".ssh" / "id_ed25519")],
                "token": ["read", str(layout.runtime / "token")],
                "store": ["read", str(layout.database)],
                "socket": ["connect", str(layout.socket)],
                "home": ["listdir", str(layout.home)],
                "write_home": ["write", str(layout.home / "pwned")],
                "write_outside": ["write", str(other / "pwned")],
            }
        }
    }


def probe_outside(orders: dict[str, Any], project: Path) -> dict[str, Any]:
    """The same probe as a plain process: it reaches everything (the test can fail)."""
    env = dict(os.environ)
    env["TRAINEE_ROUND_DIR"] = str(project / "outside-run")
    subprocess.run(
        [sys.executable, str(project / "train.py")],
        env=env,
        check=True,
        timeout=60,
        capture_output=True,
        cwd=project,
    )
    data: dict[str, Any] = json.loads(
        (project / "outside-run" / "outputs" / "findings.json").read_text()
    )
    shutil.rmtree(project / "outside-run")
    for name in ("write_home", "write_outside"):
        target = orders["*"]["try"][name][1]
        Path(target).unlink(missing_ok=True)
    return data


@pytest.mark.parametrize("name", LAYOUTS)
def test_a_guarded_job_reaches_nothing_of_trainee_in_any_layout(name: str, outside: Path) -> None:
    with short_base("tr-sl-") as base:
        layout = make_layout(name, base, outside)
        orders = attack(layout)
        project = make_probe_project(layout.project, orders)
        with started(layout) as n:
            # the attack targets exist and work from outside the sandbox
            reached = probe_outside(orders, project)
            for key in ("config", "other_config", "ssh_key", "token", "socket", "home"):
                assert not refused(reached[key]), (key, reached[key])
            private = [
                layout.home / ".trainee" / "config.json",
                outside / "other-home" / ".trainee" / "config.json",
                layout.home / ".ssh",
            ]
            before = digests(*private)

            n.start_session(project, mode="guarded", env=layout.caller_env)
            state = n.wait_finished(project, timeout=60)
            assert answers_within(n, 10), "the daemon answers after the attack"
            assert layout.database.exists(), "the store was there to be read"

        rounds = state["rounds"]
        assert [r["status"] for r in rounds] == ["completed"], (rounds, n.log[-3000:])
        got = findings(project)
        for key in ("config", "other_config", "ssh_key", "token", "store", "socket"):
            assert refused(got[key]), (name, key, got[key])
        # HOME is absent, or shows only the way to what the job needs ($HOME/bin on PATH,
        # the project under HOME): none of its private entries
        assert refused(got["home"]) or not {".trainee", ".ssh"} & set(
            got["home"].removeprefix("listed:").split(",")
        ), got["home"]
        # a write either fails or lands in the sandbox's own tmpfs, never on the host
        assert got["secrets"] == {}, got["secrets"]
        assert not set(SECRETS) & set(got["env"])
        assert not (layout.home / "pwned").exists()
        assert not (outside / "other-home" / "pwned").exists()
        assert digests(*private) == before
        assert workspace(project).is_dir()
        assert_no_orphans(project)


@pytest.mark.parametrize(
    ("example", "name"),
    [
        ("yaml-config", "home-under-tmp-with-home-bin-on-path"),
        ("mlp-flags", "socket-inside-the-project"),
    ],
)
def test_the_examples_still_train_guarded_in_the_layouts_that_broke(
    example: str, name: str, outside: Path
) -> None:
    with short_base("tr-se-") as base:
        layout = make_layout(name, base, outside)
        shutil.rmtree(layout.project)
        shutil.copytree(EXAMPLES / example, layout.project)
        with started(layout) as n:
            n.start_session(layout.project, mode="guarded", env=layout.caller_env, max_rounds=2)
            state = n.wait_finished(layout.project, timeout=120)
        assert state["session"]["security_mode"] == "guarded"
        rounds = state["rounds"]
        assert [r["status"] for r in rounds] == ["completed", "completed"], n.log[-3000:]
        assert all(r["primary_metric"] > 0 for r in rounds)
        assert_no_orphans(layout.project)


def test_the_probe_is_the_helpers_probe() -> None:
    """The attack script is plain Python (compiles), so a refusal is the sandbox's."""
    compile(PROBE, "train.py", "exec")
