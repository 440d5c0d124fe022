"""Every GPU of one machine: local rounds share ``launch.gpus``, ``launch.rounds_per_gpu``
rounds on each at once.

A round of the local backend with ``launch.gpus`` set takes a slot before it launches:
the GPU with the fewest of the daemon's rounds on it and, among those, the most free
memory (NVML, through the official ``nvidia-ml-py`` bindings, the ``gpu`` extra). Its
job gets ``CUDA_VISIBLE_DEVICES`` set to that GPU (with ``CUDA_DEVICE_ORDER=PCI_BUS_ID``,
NVML's order) unless ``launch.env`` sets it, and ``TRAINEE_GPUS`` naming it. When every
GPU is full the round waits (``run.parallel`` larger than the slots). A slot is given
back only once no process carrying the round's ``TRAINEE_ROUND_DIR`` is left, its
monitor included (:func:`trainee.monitor.process.processes_with_env`), so a child the
job left behind keeps its GPU taken (one still there a while after the round ended,
which only a monitor that died can leave, is killed). A daemon restarted while rounds run reads each
re-adopted round's slot from its monitor's environment, which the job cannot change.

``auto`` is every GPU NVML reports; without NVML (not installed, no driver, no GPU) it
means no GPU, with a one-line note, and a list is used as given. Rounds without a GPU
(CPU rounds) run in parallel (``run.parallel`` above 1) get ``OMP_NUM_THREADS``,
``MKL_NUM_THREADS`` and ``OPENBLAS_NUM_THREADS`` set to the cores divided by
``run.parallel`` (at least 1) unless their environment (``launch.env``, or the
caller's) sets them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import anyio

from trainee.monitor.process import environ_of, processes_with_env
from trainee.spec import ProjectSpec

__all__ = [
    "DEVICE_ORDER_ENV",
    "GPU_ENV",
    "SLOT_ENV",
    "THREAD_VARS",
    "GpuProbe",
    "SlotPool",
    "cpu_threads",
    "machine_pool",
    "probe_gpus",
    "slot_env",
    "slot_of_monitor",
    "wanted_gpus",
]

log = logging.getLogger("trainee.launch")

GPU_ENV = "CUDA_VISIBLE_DEVICES"
DEVICE_ORDER_ENV = "CUDA_DEVICE_ORDER"
SLOT_ENV = "TRAINEE_GPUS"
"""The GPUs trainee gave the round (set even when launch.env sets CUDA_VISIBLE_DEVICES)."""
ROUND_ENV = "TRAINEE_ROUND_DIR"
THREAD_VARS: tuple[str, ...] = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
"""The CPU thread pools of OpenMP (torch's intra-op pool too), MKL and OpenBLAS."""
MIB = 1 << 20
TREE_POLL_SEC = 0.2
TREE_WARN_SEC = 30.0
"""A slot still held by a round's leftover processes after this long is logged."""
TREE_CLEAR_LOOKS = 3
"""Empty looks in a row before a round's processes count as gone."""
TREE_GIVE_UP_SEC = 30.0
"""How long SIGKILL is repeated on what is left of an ended round before its slot is
given back regardless."""


@dataclass(frozen=True)
class GpuProbe:
    """NVML's view of this machine: free MiB per GPU index, or None and why not."""

    free_mib: Mapping[int, int] | None
    note: str


def probe_gpus() -> GpuProbe:
    """The GPUs NVML reports and their free memory (the one place NVML is called)."""
    try:
        import pynvml
    except ImportError:
        return GpuProbe(None, "nvidia-ml-py is not installed (pip install 'trainee[gpu]')")
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, _DriverNotLoaded, ...
        return GpuProbe(None, f"NVML is not available here ({exc})")
    try:
        free: dict[int, int] = {}
        for index in range(int(pynvml.nvmlDeviceGetCount())):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            free[index] = int(pynvml.nvmlDeviceGetMemoryInfo(handle).free) // MIB
    except Exception as exc:
        return GpuProbe(None, f"NVML could not list the GPUs ({exc})")
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()
    if not free:
        return GpuProbe(None, "NVML reports no GPU")
    listed = ", ".join(f"{i} ({m} MiB free)" for i, m in sorted(free.items()))
    return GpuProbe(free, f"GPUs {listed}")


def wanted_gpus(spec: ProjectSpec, probe: GpuProbe) -> tuple[list[int], str]:
    """The GPUs the project's rounds share and a note when ``auto`` found none."""
    gpus = spec.launch.gpus
    if gpus == "none" or spec.advanced.backend.type != "local":
        return [], ""
    if gpus == "auto":
        if probe.free_mib is None:
            return [], f"launch.gpus auto: {probe.note}; rounds run on the CPU"
        return sorted(probe.free_mib), ""
    return list(gpus), ""


def cpu_threads(parallel: int, cores: int | None = None) -> int:
    """Threads per CPU round: this machine's cores shared by ``parallel`` rounds."""
    if cores is None:
        cores = len(os.sched_getaffinity(0))
    return max(1, cores // max(1, parallel))


def slot_env(
    env: Mapping[str, str],
    devices: Sequence[int] | None,
    *,
    project_env: Mapping[str, object],
    parallel: int,
    cores: int | None = None,
) -> dict[str, str]:
    """``env`` (a rendered round's) with its slot: ``devices`` (None: a CPU round) in
    CUDA_VISIBLE_DEVICES unless ``project_env`` (``launch.env``) sets it; a CPU round's
    thread variables (with ``parallel`` above 1) unless ``env`` has them already."""
    out = dict(env)
    if devices is not None:
        listed = ",".join(str(d) for d in devices)
        out[SLOT_ENV] = listed
        if GPU_ENV not in project_env:
            out[GPU_ENV] = listed
            out.setdefault(DEVICE_ORDER_ENV, "PCI_BUS_ID")
        return out
    if parallel <= 1:
        return out  # alone on the machine: the libraries' own default is all the cores
    threads = str(cpu_threads(parallel, cores))
    for var in THREAD_VARS:
        out.setdefault(var, threads)
    return out


def parse_slot(text: str) -> tuple[int, ...] | None:
    """``TRAINEE_GPUS``'s value (``0`` or ``0,2``) as indices, None when it is not one."""
    parts = text.split(",")
    if not text or not all(p.isdigit() and len(p) <= 4 for p in parts):
        return None
    return tuple(int(p) for p in parts)


def slot_of_monitor(pid: int, start_time: int) -> tuple[int, ...] | None:
    """The slot of a running round, from its monitor's environment (None: no GPU, or the
    monitor is gone)."""
    env = environ_of(pid, start_time)
    if env is None or SLOT_ENV not in env:
        return None
    return parse_slot(env[SLOT_ENV])


@dataclass
class SlotPool:
    """The GPUs of this machine held by the daemon's rounds (round folder -> GPUs)."""

    probe: Callable[[], GpuProbe] = probe_gpus
    held: dict[str, tuple[int, ...]] = field(default_factory=dict)
    _waiters: list[anyio.Event] = field(default_factory=list)

    def load(self) -> dict[int, int]:
        """Rounds on each GPU now."""
        out: dict[int, int] = {}
        for devices in self.held.values():
            for d in devices:
                out[d] = out.get(d, 0) + 1
        return out

    def choose(
        self, devices: Sequence[int], per_gpu: int, free_mib: Mapping[int, int] | None
    ) -> int | None:
        """The GPU a new round gets: the least loaded with room, the most free memory
        first among equals, the lowest index last; None when all are full."""
        load = self.load()
        free = free_mib or {}
        room = [d for d in devices if load.get(d, 0) < per_gpu]
        if not room:
            return None
        return min(room, key=lambda d: (load.get(d, 0), -free.get(d, -1), d))

    async def acquire(
        self,
        key: str,
        devices: Sequence[int],
        per_gpu: int,
        *,
        on_wait: Callable[[str], None] | None = None,
    ) -> tuple[int, ...]:
        """A slot for round ``key`` (its folder), waiting for one when all are taken; the
        one it holds already when it has one (a re-run attempt)."""
        if key in self.held:
            return self.held[key]
        told = False
        while True:
            probe = await anyio.to_thread.run_sync(self.probe)
            chosen = self.choose(devices, per_gpu, probe.free_mib)
            if chosen is not None:
                self.held[key] = (chosen,)
                return (chosen,)
            if on_wait is not None and not told:
                told = True
                listed = ", ".join(str(d) for d in devices)
                on_wait(
                    f"waiting for a free GPU slot (GPUs {listed}, {per_gpu} round(s) each, "
                    "all taken)"
                )
            event = anyio.Event()
            self._waiters.append(event)
            await event.wait()

    def adopt(self, key: str, devices: tuple[int, ...]) -> None:
        """Count the slot of a re-adopted round (it runs already: never refused)."""
        self.held[key] = devices

    async def release(self, key: str, round_dir: str, *, kill_after: float | None = None) -> None:
        """Give round ``key``'s slot back once none of its processes is left (every
        process started with its ``TRAINEE_ROUND_DIR``, its monitor included).

        The round has ended when this is called: what of it still runs ``kill_after``
        seconds later (a child that escaped a monitor that died, say) is an orphan and
        gets SIGKILL at every look from then on (a chain that forks anew is a new pid
        each time), with a warning naming it. "None left" takes :data:`TREE_CLEAR_LOOKS`
        empty looks in a row, so a fork caught between parent and child is not missed;
        and the wait ends :data:`TREE_GIVE_UP_SEC` after the kills started whatever is
        left (logged): a job that hides from the look cannot hold a slot for good."""
        if key not in self.held:
            return
        try:
            started = time.monotonic()
            warned = killed = False
            clear = 0
            while clear < TREE_CLEAR_LOOKS:
                pids = await anyio.to_thread.run_sync(processes_with_env, ROUND_ENV, round_dir)
                clear = 0 if pids else clear + 1
                waited = time.monotonic() - started
                if pids and kill_after is not None and waited > kill_after:
                    if not killed:
                        log.warning(
                            "%s ended, but its processes %s still run: SIGKILL",
                            round_dir,
                            ", ".join(map(str, pids)),
                        )
                    killed = True
                    for pid in pids:
                        with contextlib.suppress(ProcessLookupError, PermissionError):
                            os.kill(pid, signal.SIGKILL)
                    if waited > kill_after + TREE_GIVE_UP_SEC:
                        log.warning(
                            "%s: processes %s outlived %.0f s of SIGKILL: its GPU slot is "
                            "given back anyway",
                            round_dir,
                            ", ".join(map(str, pids)),
                            TREE_GIVE_UP_SEC,
                        )
                        return
                if pids and not warned and waited > TREE_WARN_SEC:
                    warned = True
                    log.warning(
                        "%s: its GPU slot stays taken while its processes %s run",
                        round_dir,
                        ", ".join(map(str, pids)),
                    )
                await anyio.sleep(TREE_POLL_SEC)
        finally:
            self.held.pop(key, None)
            waiters, self._waiters = self._waiters, []
            for event in waiters:
                event.set()


_POOL: SlotPool | None = None


def machine_pool() -> SlotPool:
    """The daemon's one pool: every session's rounds share this machine's GPUs."""
    global _POOL
    if _POOL is None:
        _POOL = SlotPool()
    return _POOL
