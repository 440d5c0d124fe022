"""Where rounds run: this machine (``local``), a Slurm cluster or a Ray cluster.

:func:`make_backend` turns ``advanced.backend`` into a :class:`Backend`; the
session does not otherwise know which one it drives.
"""

from __future__ import annotations

from collections.abc import Mapping

from trainee.launch.backends.base import Backend, JobRef, JobState, RoundJob, StateCallback
from trainee.spec.files import BackendSpec

__all__ = ["Backend", "JobRef", "JobState", "RoundJob", "StateCallback", "make_backend"]


def make_backend(spec: BackendSpec, client_env: Mapping[str, str]) -> Backend:
    """The backend ``advanced.backend`` names; ``client_env`` is the caller's environment
    (the Slurm commands need its PATH and SLURM_CONF)."""
    if spec.type == "slurm":
        from trainee.launch.backends.slurm import SlurmBackend, SlurmOptions

        return SlurmBackend(
            SlurmOptions(
                partition=spec.partition,
                time_limit=spec.time,
                cpus=int(spec.cpus) if spec.cpus is not None else None,
                gpus=int(spec.gpus) if spec.gpus is not None else None,
                mem=spec.mem,
                account=spec.account,
                qos=spec.qos,
                sbatch_args=spec.sbatch_args,
                poll_interval_sec=spec.poll_interval_sec,
                command_timeout_sec=spec.command_timeout_sec,
            ),
            client_env,
        )
    if spec.type == "ray":
        from trainee.launch.backends.ray import RayBackend

        assert spec.address is not None, "checked when the spec was compiled"
        return RayBackend(
            address=spec.address,
            cpus=spec.cpus,
            gpus=spec.gpus,
            poll_interval_sec=spec.poll_interval_sec,
            command_timeout_sec=spec.command_timeout_sec,
        )
    from trainee.launch.backends.local import LocalBackend

    return LocalBackend()
