"""Rounds on this machine, each under its own monitor process (:mod:`trainee.shim`)."""

from __future__ import annotations

import anyio

from trainee import testhooks
from trainee.launch.backends.base import JobRef, RoundJob, StateCallback
from trainee.monitor.process import (
    ExitInfo,
    RoundHandle,
    exit_of,
    is_alive,
    kill_orphans,
    read_state,
    request_stop,
    spawn_round,
    wait_exit,
)

__all__ = ["LocalBackend", "handle_of"]


def handle_of(ref: JobRef, job: RoundJob) -> RoundHandle | None:
    if ref.pid is None or ref.start_time is None:
        return None
    rnd = job.rnd
    return RoundHandle(
        pid=ref.pid,
        start_time=ref.start_time,
        log=str(rnd.log),
        index=str(rnd.log_index),
        exit_file=str(rnd.exit_file),
        state_file=str(rnd.monitor_file),
        token=ref.token,
    )


class LocalBackend:
    """The monitor enforces the timeout and the stop grace itself and survives the daemon."""

    name = "local"

    async def submit(self, job: RoundJob) -> JobRef:
        handle = await spawn_round(
            job.argv,
            env=job.env,
            cwd=job.cwd,
            rnd=job.rnd,
            timeout_sec=job.timeout_sec,
            grace_sec=job.grace_sec,
            token=job.token,
            limits=job.limits,
        )
        await _test_pause("backend.submitted")
        return JobRef(
            backend=self.name, pid=handle.pid, start_time=handle.start_time, token=job.token
        )

    async def wait(
        self, ref: JobRef, job: RoundJob, *, on_state: StateCallback | None = None
    ) -> ExitInfo:
        handle = handle_of(ref, job)
        assert handle is not None, "a local job is named by its monitor"
        return await wait_exit(handle)

    async def cancel(self, ref: JobRef, job: RoundJob, *, reason: str = "stopped") -> None:
        handle = handle_of(ref, job)
        if handle is not None:
            request_stop(handle)

    async def adoptable(self, ref: JobRef, job: RoundJob) -> bool:
        await _test_pause("backend.adopting")
        handle = handle_of(ref, job)
        return handle is not None and (is_alive(handle) or exit_of(handle) is not None)

    async def probe(self) -> str:
        return "rounds run on this machine under trainee's round monitor"

    async def end_lost(self, ref: JobRef, job: RoundJob) -> list[str]:
        """Stop a launch still under its monitor, then kill what its job left."""
        handle = handle_of(ref, job)
        if handle is None:
            return []
        if is_alive(handle):
            request_stop(handle)
            await wait_exit(handle)
        killed = await anyio.to_thread.run_sync(kill_orphans, handle)
        return [str(pid) for pid in killed]

    @staticmethod
    def unrecorded(job: RoundJob) -> JobRef | None:
        """The monitor named in the folder of a round the store still has as pending
        (launched, but the daemon died before recording it)."""
        try:
            state = read_state(job.rnd.monitor_file)
        except Exception:
            return None
        if state is None:
            return None
        return JobRef(
            backend="local", pid=state.pid, start_time=state.start_time, token=state.token
        )


async def _test_pause(point: str) -> None:
    folder = testhooks.pause_wanted(point)
    if folder is not None:
        await anyio.to_thread.run_sync(testhooks.wait_released, point, folder)
