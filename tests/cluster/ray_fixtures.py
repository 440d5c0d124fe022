"""The session-scoped ``ray_cluster`` fixture: one real Ray head for the whole run.

Import it into a conftest (or a test module) to use it::

    from tests.cluster.ray_fixtures import ray_cluster  # noqa: F401

Tests using it are skipped when ``ray[default]`` is not installed in the venv.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.ray_harness import RayCluster, available


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[RayCluster]:
    if not available():
        pytest.skip("ray[default] is not installed in this venv")
    # Short: Ray keeps Unix sockets under its temp dir.
    base = Path(tempfile.mkdtemp(prefix="tray-", dir="/tmp"))
    cluster = RayCluster(base)
    try:
        cluster.start()  # on failure: stopped, the error carries log tails, logs stay in base
        yield cluster
    finally:
        cluster.stop()  # raises if a Ray process of this cluster survives
    shutil.rmtree(base, ignore_errors=True)
