"""Fixtures that bring up real cluster engines (Slurm) for the ``cluster`` tests."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.slurm_harness import SlurmCluster, unavailable_reason


def short_tmp_dir() -> Path:
    # munged's socket lives in the cluster's directory: keep it well under 108 bytes.
    return Path(tempfile.mkdtemp(prefix="tsl-", dir="/tmp"))


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """A started single-node Slurm cluster on loopback, shared by the whole session.

    Clients find it with ``cluster.env`` (``SLURM_CONF``) added to their environment.
    Skips when Slurm/munge are not installed or we are not root.
    """
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    base = short_tmp_dir()
    cluster = SlurmCluster(base)
    try:
        cluster.start()  # on failure: stopped, and the logs stay in ``base``
        yield cluster
    finally:
        cluster.stop()
    shutil.rmtree(base, ignore_errors=True)
