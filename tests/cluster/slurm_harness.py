"""A real single-node Slurm cluster on loopback, started and stopped by the tests.

``SlurmCluster(base_dir)`` writes a munge key, a private munge socket, a minimal
``slurm.conf`` with free loopback ports, and starts ``munged``, ``slurmctld`` and
``slurmd`` as child processes (each in its own session/process group, logs under
``base_dir/log``). Clients (``sbatch``, ``squeue``, ``scontrol``, ``scancel``, ``sinfo``)
find the cluster through ``SLURM_CONF``: add ``cluster.env`` to their environment,
or use ``cluster.run(...)``.

Needs root (munged and slurmd are run as root with ``SlurmUser=root``) and Debian's
``slurmctld slurmd slurm-client munge`` packages (Slurm 22.05). Nothing listens on
anything but 127.0.0.1.

    with SlurmCluster(Path(tempfile.mkdtemp(prefix="tsl-", dir="/tmp"))) as cluster:
        job_id = cluster.sbatch("--wrap", "echo hi", "-o", "/tmp/out")
        cluster.wait_job(job_id)  # -> "COMPLETED"
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import IO

import pytest

from tests.cluster.ports import free_ports
from tests.support.timing import wait_for

REQUIRED_COMMANDS = ("slurmctld", "slurmd", "munged", "sbatch", "squeue", "scontrol", "scancel")
# Job states after which a job no longer runs (squeue -o %T spelling).
FINAL_STATES = frozenset(
    {
        "BOOT_FAIL",
        "CANCELLED",
        "COMPLETED",
        "DEADLINE",
        "FAILED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "REVOKED",
        "SPECIAL_EXIT",
        "TIMEOUT",
    }
)
# Client-side variables that would change what sbatch/squeue do if inherited from
# the caller (e.g. when the tests themselves run inside a Slurm job).
_CLIENT_ENV_PREFIXES = ("SLURM_", "SBATCH_", "SQUEUE_", "SINFO_", "SCANCEL_", "SALLOC_", "SRUN_")
# Unix socket paths are limited to 108 bytes (sun_path) including the NUL.
_MAX_SOCKET_PATH = 107


class SlurmClusterError(RuntimeError):
    """The cluster could not be started (the message carries the daemons' log tails)."""


def unavailable_reason() -> str | None:
    """Why a real Slurm cluster cannot be started here, or None when it can."""
    missing = [c for c in REQUIRED_COMMANDS if shutil.which(c) is None]
    if missing:
        return (
            f"Slurm/munge commands not on PATH: {', '.join(missing)} "
            "(apt-get install slurmctld slurmd slurm-client munge)"
        )
    if os.geteuid() != 0:
        return "the Slurm test cluster runs munged/slurmd as root: run the tests as root"
    return None


def _tail(path: Path, lines: int) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        return f"<{exc}>"
    return "\n".join(text.splitlines()[-lines:])


def _ppid_map() -> dict[int, int]:
    """pid -> parent pid for every process visible in /proc."""
    out: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        # comm (field 2) may contain spaces/parens: split after the last ')'.
        fields = stat[stat.rfind(")") + 2 :].split()
        out[int(entry)] = int(fields[1])
    return out


def _descendants(roots: Iterable[int], ppids: Mapping[int, int] | None = None) -> set[int]:
    """All processes below ``roots`` (not the roots themselves)."""
    ppids = _ppid_map() if ppids is None else ppids
    children: dict[int, list[int]] = {}
    for pid, ppid in ppids.items():
        children.setdefault(ppid, []).append(pid)
    found: set[int] = set()
    stack = list(roots)
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found


def _environ(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    env: dict[str, str] = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            env[key.decode(errors="replace")] = value.decode(errors="replace")
    return env


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return state[state.rfind(")") + 2 :].split()[0] != "Z"


class SlurmCluster:
    """A single-node Slurm 22.05 cluster (controller + node ``localhost``) under ``base_dir``.

    ``base_dir`` must be short: the munge socket lives in it (108-byte limit).
    The directory is left in place by ``stop()`` (logs stay readable); removing it is
    the caller's job.
    """

    node_name = "localhost"

    def __init__(
        self,
        base_dir: Path | str,
        *,
        partition: str = "debug",
        cpus: int = 2,
        real_memory_mb: int = 1024,
        kill_wait: int = 5,
        min_job_age: int = 600,
        start_timeout: float = 60.0,
        proctrack: str = "proctrack/linuxproc",
    ) -> None:
        self.base_dir = Path(base_dir).resolve()
        self.partition = partition
        self.cpus = cpus
        self.real_memory_mb = real_memory_mb
        self.kill_wait = kill_wait
        self.min_job_age = min_job_age
        self.start_timeout = start_timeout
        self.proctrack = proctrack
        # Unique per instance: jobs carry it as SLURM_CLUSTER_NAME, which stop() uses to
        # find job processes that escaped slurmstepd's process tree.
        self.cluster_name = "tsl" + secrets.token_hex(4)
        self.conf_path = self.base_dir / "slurm.conf"
        self.munge_dir = self.base_dir / "munge"
        self.munge_key = self.munge_dir / "munge.key"
        self.munge_socket = self.munge_dir / "munge.sock"
        self.state_dir = self.base_dir / "state"
        self.spool_dir = self.base_dir / "spool"
        self.log_dir = self.base_dir / "log"
        self.ctld_port = 0
        self.slurmd_port = 0
        self.startup_seconds: float | None = None
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._outs: list[IO[bytes]] = []
        if len(str(self.munge_socket).encode()) > _MAX_SOCKET_PATH:
            raise ValueError(
                f"base_dir too long for a Unix socket path: {self.munge_socket} "
                '(use tempfile.mkdtemp(prefix="tsl-", dir="/tmp"))'
            )

    # ------------------------------------------------------------------ public API

    @classmethod
    def available(cls) -> bool:
        """True when the Slurm/munge daemons and clients are installed and we are root."""
        return unavailable_reason() is None

    @staticmethod
    def unavailable_reason() -> str | None:
        return unavailable_reason()

    @property
    def env(self) -> dict[str, str]:
        """Variables to add to a client's environment (sbatch, squeue, scontrol, ...)."""
        return {"SLURM_CONF": str(self.conf_path)}

    def client_env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """``os.environ`` without inherited SLURM_*/SBATCH_*... variables, plus ``env``."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(_CLIENT_ENV_PREFIXES)}
        env.update(self.env)
        if extra:
            env.update(extra)
        return env

    @property
    def pids(self) -> dict[str, int]:
        """PIDs of the running daemons by name (munged, slurmctld, slurmd)."""
        return {name: p.pid for name, p in self._procs.items() if p.poll() is None}

    def __enter__(self) -> SlurmCluster:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> None:
        """Write the configuration, start the daemons, wait for the node to be idle."""
        if self._procs:
            raise RuntimeError("cluster already started")
        t0 = time.monotonic()
        try:
            self._prepare()
            self._spawn(
                "munged",
                [
                    "munged",
                    "--foreground",
                    "--force",
                    f"--key-file={self.munge_key}",
                    f"--socket={self.munge_socket}",
                    f"--pid-file={self.munge_dir / 'munged.pid'}",
                    f"--log-file={self.log_dir / 'munged.log'}",
                    f"--seed-file={self.munge_dir / 'munged.seed'}",
                ],
            )
            self._wait_for(lambda: self.munge_socket.exists(), "munged to create its socket")
            self._spawn("slurmctld", ["slurmctld", "-D", "-f", str(self.conf_path)])
            self._spawn("slurmd", ["slurmd", "-D", "-N", self.node_name, "-f", str(self.conf_path)])
            self._wait_for(lambda: self.node_state() == "idle", "node to become idle")
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - t0

    def stop(self) -> None:
        """Cancel jobs, stop the daemons (TERM, then KILL), kill leftover job processes."""
        try:
            if self._procs.get("slurmctld") is not None and self._procs["slurmctld"].poll() is None:
                self._cancel_all_jobs()
            # slurmstepd processes are daemonised by slurmd (parent: init); note them first.
            stepds = self._job_processes()
            for name in ("slurmd", "slurmctld", "munged"):
                proc = self._procs.get(name)
                if proc is not None:
                    self._terminate(proc)
            self._kill_pids(stepds | self._job_processes())
        finally:
            self._procs.clear()
            for f in self._outs:
                f.close()
            self._outs.clear()

    def run(
        self, *args: str, check: bool = True, timeout: float = 30.0
    ) -> subprocess.CompletedProcess[str]:
        """Run a Slurm client command against this cluster."""
        return subprocess.run(
            list(args),
            env=self.client_env(),
            capture_output=True,
            text=True,
            check=check,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )

    def sbatch(self, *args: str) -> str:
        """``sbatch --parsable ARGS`` -> job id."""
        out = self.run("sbatch", "--parsable", *args).stdout.strip()
        return out.split(";", 1)[0]

    def job_state(self, job_id: str) -> str:
        """The job's state as ``squeue -h -t all -o %T`` prints it ("" if unknown)."""
        res = self.run("squeue", "-h", "-t", "all", "-j", job_id, "-o", "%T", check=False)
        return res.stdout.strip()

    def wait_job(self, job_id: str, timeout: float = 60.0) -> str:
        """Poll until the job reaches a final state; return that state."""
        deadline = time.monotonic() + timeout
        state = ""
        while time.monotonic() < deadline:
            state = self.job_state(job_id)
            if state in FINAL_STATES:
                return state
            time.sleep(0.2)
        raise TimeoutError(f"job {job_id} still {state or 'unknown'} after {timeout}s")

    def show_job(self, job_id: str) -> dict[str, str]:
        """``scontrol show job -o ID`` parsed into key -> value."""
        out = self.run("scontrol", "show", "job", "-o", job_id).stdout
        return dict(re.findall(r"(\S+?)=(\S*)", out))

    def node_state(self) -> str:
        """``sinfo -h -o %t`` for the node ("" while the controller does not answer)."""
        try:
            res = self.run("sinfo", "-h", "-n", self.node_name, "-o", "%t", check=False, timeout=10)
        except subprocess.TimeoutExpired:
            return ""
        return res.stdout.strip() if res.returncode == 0 else ""

    def listeners(self) -> list[tuple[str, str, str]]:
        """Listening sockets of the cluster's processes as (proto, local address, process)."""
        ours = set(self.pids.values())
        ours |= _descendants(ours) | self._job_processes()
        res = subprocess.run(
            ["ss", "-H", "-l", "-n", "-p", "-t", "-u"],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        )
        found = []
        for line in res.stdout.splitlines():
            cols = line.split()
            pids = {int(p) for p in re.findall(r"pid=(\d+)", line)}
            if pids & ours and len(cols) >= 5:
                names = ",".join(sorted(set(re.findall(r'\("([^"]+)"', line))))
                found.append((cols[0], cols[4], names))
        return found

    def log_tails(self, lines: int = 30) -> str:
        parts = []
        for path in sorted(self.log_dir.glob("*")):
            parts.append(f"----- {path.name} (last {lines} lines)\n{_tail(path, lines)}")
        return "\n".join(parts)

    # ------------------------------------------------------------------ internals

    def _prepare(self) -> None:
        for d in (self.munge_dir, self.state_dir, self.spool_dir, self.log_dir):
            d.mkdir(parents=True, exist_ok=True)
        self.munge_dir.chmod(0o700)
        if not self.munge_key.exists():
            # munged wants a key of 32..1024 bytes, readable only by its user (root here).
            fd = os.open(self.munge_key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
            with os.fdopen(fd, "wb") as f:
                f.write(secrets.token_bytes(128))
        self.ctld_port, self.slurmd_port = free_ports(2)
        self.conf_path.write_text(self._slurm_conf())

    def _slurm_conf(self) -> str:
        b = self.base_dir
        return f"""\
# Written by tests/cluster/slurm_harness.py: a throw-away single-node cluster.
ClusterName={self.cluster_name}
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={self.ctld_port}
SlurmdPort={self.slurmd_port}
CommunicationParameters=NoCtldInAddrAny,NoInAddrAny
AuthType=auth/munge
AuthInfo=socket={self.munge_socket}
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={self.state_dir}
SlurmdSpoolDir={self.spool_dir}
SlurmctldPidFile={b}/slurmctld.pid
SlurmdPidFile={b}/slurmd.pid
SlurmctldLogFile={self.log_dir}/slurmctld.log
SlurmdLogFile={self.log_dir}/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType={self.proctrack}
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
# Take CPUs/RealMemory from this file, not the hardware (no DRAIN on a smaller machine).
SlurmdParameters=config_overrides
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MpiDefault=none
# Start a batch job as soon as it is submitted (the default batch_sched_delay is 3 s).
SchedulerParameters=batch_sched_delay=0
ReturnToService=2
# scancel/timeout: SIGCONT+SIGTERM, then SIGKILL after KillWait seconds.
KillWait={self.kill_wait}
# Finished jobs stay visible to squeue/scontrol this long (there is no accounting).
MinJobAge={self.min_job_age}
NodeName={self.node_name} NodeAddr=127.0.0.1 CPUs={self.cpus} RealMemory={self.real_memory_mb} State=UNKNOWN
PartitionName={self.partition} Nodes={self.node_name} Default=YES MaxTime=INFINITE State=UP
"""

    def _spawn(self, name: str, argv: list[str]) -> None:
        out = open(self.log_dir / f"{name}.out", "ab")  # noqa: SIM115 - closed in stop()
        self._outs.append(out)
        env = self.client_env()
        self._procs[name] = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=self.base_dir,
            start_new_session=True,
        )

    def _wait_for(self, ready: Callable[[], bool], what: str) -> None:
        """Until ``ready()``; a daemon that exits or the start timeout is a SlurmClusterError."""

        def check() -> bool:
            for name, proc in self._procs.items():
                if proc.poll() is not None:
                    raise SlurmClusterError(
                        f"{name} exited with {proc.returncode} while waiting for {what}\n"
                        + self.log_tails()
                    )
            return ready()

        try:
            wait_for(check, what, timeout=self.start_timeout, interval=0.2)
        except pytest.fail.Exception as exc:
            raise SlurmClusterError(
                f"{exc} (node state {self.node_state()!r})\n" + self.log_tails()
            ) from None

    def _cancel_all_jobs(self) -> None:
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            ids = self.run("squeue", "-h", "-o", "%i", check=False, timeout=10).stdout.split()
            if not ids:
                return
            self.run("scancel", *ids, check=False, timeout=10)
            deadline = time.monotonic() + self.kill_wait + 10
            while time.monotonic() < deadline:
                if not self.run("squeue", "-h", "-o", "%i", check=False, timeout=10).stdout.split():
                    return
                time.sleep(0.2)

    def _job_processes(self) -> set[int]:
        """slurmstepd and job processes of this cluster (by environment), with descendants."""
        ppids = _ppid_map()
        marked = set()
        conf = str(self.conf_path)
        for pid in ppids:
            if pid == os.getpid():
                continue
            env = _environ(pid)
            if env.get("SLURM_CLUSTER_NAME") == self.cluster_name or (
                env.get("SLURM_CONF") == conf and _comm(pid).startswith("slurmstepd")
            ):
                marked.add(pid)
        return marked | _descendants(marked, ppids)

    def _terminate(self, proc: subprocess.Popen[bytes], grace: float = 5.0) -> None:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        # Anything left in the daemon's process group (e.g. slurmctld's slurmscriptd).
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)

    @staticmethod
    def _kill_pids(pids: Iterable[int]) -> None:
        pids = [p for p in pids if p != os.getpid()]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(_alive(p) for p in pids):
            time.sleep(0.05)


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0", 1)[0].decode(errors="replace")
    except OSError:
        return ""
