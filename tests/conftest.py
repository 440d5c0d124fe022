"""Shared fixtures: a real daemon process (per test or per module), short socket paths.

What the fixtures are built from (the daemon, the CLI runner, the scale factor, the
helpers of the e2e loop tests) lives in :mod:`tests.support`: import it from there.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.support.daemon import Daemon, base_env, kill_leftover_daemons, started_daemon, venv_env
from tests.support.timing import scaled

if TYPE_CHECKING:
    from tests.faults.helpers import Node


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """pytest-timeout's limit (the ini value or a test's own marker) scaled the same way."""
    default = float(config.getini("timeout") or 0)
    for item in items:
        marker = item.get_closest_marker("timeout")
        base = float(marker.args[0]) if marker is not None and marker.args else default
        if base:
            item.add_marker(pytest.mark.timeout(scaled(base)), append=False)


def _short_dir(prefix: str) -> Path:
    # AF_UNIX paths must stay under 108 bytes: pytest's tmp_path is often longer.
    return Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))


@pytest.fixture
def short_dir() -> Iterator[Path]:
    path = _short_dir("tr-")
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def venv_daemon(short_dir: Path) -> Iterator[Daemon]:
    """A started daemon whose jobs find this venv's python; stopped at the end."""
    with started_daemon(short_dir, venv_env) as d:
        yield d


@pytest.fixture
def daemon_env(short_dir: Path) -> Iterator[dict[str, str]]:
    """The environment for CLI calls that autostart their own daemon; it is stopped after."""
    env = base_env(short_dir)
    try:
        yield env
    finally:
        kill_leftover_daemons(Daemon(runtime=short_dir, env=env))


@pytest.fixture
def daemon(short_dir: Path) -> Iterator[Daemon]:
    """A started daemon; stopped (and checked to be gone) at the end of the test."""
    with started_daemon(short_dir) as d:
        yield d


@pytest.fixture(scope="module")
def module_daemon() -> Iterator[Daemon]:
    """One daemon for the whole module (``base_env``): sessions of different projects do
    not meet, and litellm is imported (seconds) once instead of once per test."""
    with started_daemon(_short_dir("tr-m-"), remove=True) as d:
        yield d


@pytest.fixture(scope="module")
def module_venv_daemon() -> Iterator[Daemon]:
    """:func:`module_daemon` whose jobs find this venv's python (numpy, hydra-core)."""
    with started_daemon(_short_dir("tr-mv-"), venv_env, remove=True) as d:
        yield d


@pytest.fixture(scope="module")
def module_node() -> Iterator[Node]:
    """One restartable daemon for the module, called in-process over its socket
    (:class:`tests.faults.helpers.Node`); stopped and removed at the end."""
    from tests.faults.helpers import node

    with node() as n:
        yield n
