"""A real local Ray head on loopback, started and stopped by the tests.

``RayCluster(base_dir)`` runs ``ray start --head`` (the ``ray`` CLI beside
``sys.executable``) with every port it would otherwise take at a fixed default or pick
itself (GCS, dashboard, Ray Client server, dashboard agent, runtime-env agent, metrics
export, node and object manager, and through ``AUTOSCALER_METRIC_PORT`` /
``DASHBOARD_METRIC_PORT`` the two Prometheus endpoints) chosen free on 127.0.0.1, usage stats off, and ``--temp-dir`` under
``base_dir`` (keep it short: Ray puts Unix sockets there). ``start()`` returns once the
Jobs API answers ``list_jobs()``. Clients reach it through ``cluster.address``
(``http://127.0.0.1:<dashboard port>``) or, in a subprocess, through ``cluster.env``
(``RAY_API_SERVER_ADDRESS`` for the Jobs SDK/CLI, ``RAY_ADDRESS`` for ``ray.init``).

``stop()`` is what ``ray stop --force`` does (SIGKILL), but only to this cluster's
processes: ``ray stop`` takes no ``--temp-dir`` and kills every Ray process of the
machine by name, another cluster's included. Ours are found by session id (``ray
start`` runs in a session of its own, inherited by the GCS, raylet, dashboard and
workers), by a marker variable in the environment (inherited by job drivers, which Ray
starts in sessions of their own), and as descendants of either. ``stop()`` checks that
none is left and raises otherwise.

    with RayCluster(Path(tempfile.mkdtemp(prefix="tray-", dir="/tmp"))) as cluster:
        client = cluster.client()
        client.submit_job(entrypoint="echo hi", submission_id="x")

Linux only (reads ``/proc``).
"""

from __future__ import annotations

import contextlib
import importlib.util
import ipaddress
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, NoReturn

from tests.cluster.ports import free_ports

if TYPE_CHECKING:
    from ray.job_submission import JobSubmissionClient

VENV_BIN = Path(sys.executable).parent
RAY_BIN = VENV_BIN / "ray"
MARKER_VAR = "TRAINEE_RAY_HARNESS"
# Variables of the caller that would point Ray (server or client) somewhere else.
_STRIPPED_PREFIXES = ("RAY_",)
# Ports that `ray start` would otherwise take at fixed defaults (10001, 52365, ...) or
# pick itself; all are bound to --node-ip-address (127.0.0.1).
_PORT_FLAGS = (
    "--port",
    "--dashboard-port",
    "--ray-client-server-port",
    "--dashboard-agent-listen-port",
    "--dashboard-agent-grpc-port",
    "--runtime-env-agent-port",
    "--metrics-export-port",
    "--node-manager-port",
    "--object-manager-port",
)
# Prometheus endpoints that have no flag: fixed defaults 44217 / 44227 unless set. They
# bind to 127.0.0.1 only because the node IP is a loopback address (else 0.0.0.0).
_PORT_VARS = ("AUTOSCALER_METRIC_PORT", "DASHBOARD_METRIC_PORT")
_MAX_SOCKET_PATH = 107  # sun_path is 108 bytes including the NUL
_TCP_LISTEN = "0A"
_UDP_UNCONNECTED = "07"


class RayClusterError(RuntimeError):
    """The cluster could not be started or stopped (the message carries log tails)."""


def available() -> bool:
    """Whether ``ray[default]`` (Jobs SDK and dashboard) and its CLI are installed."""
    try:
        return (
            importlib.util.find_spec("ray") is not None
            and importlib.util.find_spec("ray.dashboard") is not None
            and RAY_BIN.exists()
        )
    except (ImportError, ValueError):
        return False


class RayCluster:
    """A Ray head node (GCS, raylet, dashboard with the Jobs API) on 127.0.0.1."""

    def __init__(
        self,
        base_dir: Path | str,
        *,
        num_cpus: int = 2,
        object_store_memory: int = 128 * 1024 * 1024,
        extra_env: Mapping[str, str] | None = None,
        start_timeout: float = 90.0,
        stop_timeout: float = 15.0,
    ) -> None:
        self.base_dir = Path(base_dir)
        self.temp_dir = self.base_dir / "r"
        self.num_cpus = num_cpus
        self.object_store_memory = object_store_memory
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.marker = secrets.token_hex(8)
        self.ports: dict[str, int] = {}
        # Seconds from start() until `ray start` returned / the Jobs API answered.
        self.timings: dict[str, float] = {}
        self._sid: int | None = None
        self._started = False
        env = {k: v for k, v in os.environ.items() if not k.startswith(_STRIPPED_PREFIXES)}
        env.update(
            {
                "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
                "RAY_USAGE_STATS_ENABLED": "0",
                MARKER_VAR: self.marker,
                # Job entrypoints inherit the head's environment: `python` is the venv's.
                "PATH": f"{VENV_BIN}{os.pathsep}{env.get('PATH', os.defpath)}",
            }
        )
        env.pop("VIRTUAL_ENV", None)
        env.update(extra_env or {})
        self._server_env = env

    # -- addresses -------------------------------------------------------------------

    @property
    def dashboard_port(self) -> int:
        return self._port("--dashboard-port")

    @property
    def address(self) -> str:
        """The Jobs API (dashboard) address, for ``JobSubmissionClient(address)``."""
        return f"http://127.0.0.1:{self.dashboard_port}"

    @property
    def gcs_address(self) -> str:
        """The GCS address, for ``ray.init(address=...)`` and ``ray status --address``."""
        return f"127.0.0.1:{self._port('--port')}"

    @property
    def env(self) -> dict[str, str]:
        """An environment for subprocesses that talk to this cluster (copy)."""
        env = dict(self._server_env)
        env.pop(MARKER_VAR)
        if self.ports:
            env["RAY_API_SERVER_ADDRESS"] = self.address
            env["RAY_ADDRESS"] = self.gcs_address
        return env

    @property
    def session_dir(self) -> Path:
        return self.temp_dir / "session_latest"

    @property
    def logs_dir(self) -> Path:
        return self.session_dir / "logs"

    def client(self) -> JobSubmissionClient:
        """A Jobs SDK client. ``verify=False``: with the default ``verify=True`` and an
        ``http://`` address, ``tail_job_logs`` passes ``ssl=None`` to aiohttp, which
        warns (DeprecationWarning); TLS is not used on loopback anyway."""
        from ray.job_submission import JobSubmissionClient

        return JobSubmissionClient(self.address, verify=False)

    def _port(self, flag: str) -> int:
        if flag not in self.ports:
            raise RayClusterError("the cluster has not been started")
        return self.ports[flag]

    # -- lifecycle -------------------------------------------------------------------

    def start(self) -> RayCluster:
        if self._started:
            return self
        self.base_dir.mkdir(parents=True, exist_ok=True)
        # Ray's longest socket path: <temp_dir>/session_<date>_<time>_<usec>_<pid>/sockets/plasma_store
        longest = len(str(self.temp_dir)) + len("/session_2026-01-01_00-00-00_000000_4194304") + 22
        if longest > _MAX_SOCKET_PATH:
            raise RayClusterError(f"temp dir {self.temp_dir} is too long for Unix sockets")
        names = _PORT_FLAGS + _PORT_VARS
        self.ports = dict(zip(names, free_ports(len(names)), strict=True))
        self._server_env.update({name: str(self.ports[name]) for name in _PORT_VARS})
        cmd = [
            str(RAY_BIN),
            "start",
            "--head",
            "--node-ip-address=127.0.0.1",
            "--dashboard-host=127.0.0.1",
            "--include-dashboard=true",
            "--disable-usage-stats",
            f"--num-cpus={self.num_cpus}",
            "--num-gpus=0",
            f"--object-store-memory={self.object_store_memory}",
            f"--temp-dir={self.temp_dir}",
            "--log-style=record",
            "--log-color=false",
            *(f"{flag}={self.ports[flag]}" for flag in _PORT_FLAGS),
        ]
        self._started = True  # from here on, stop() has something to clean up
        log_path = self.base_dir / "ray-start.log"
        deadline = time.monotonic() + self.start_timeout
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self._server_env,
                # Jobs start in the raylet's cwd: make it ours, not the caller's.
                cwd=self.base_dir,
                # A session of our own: every Ray daemon and worker inherits its id.
                start_new_session=True,
            )
        self._sid = proc.pid
        try:
            rc = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            self._fail_start(f"`ray start` did not return within {self.start_timeout}s")
        if rc != 0:
            self._fail_start(f"`ray start` exited with {rc}")
        began = deadline - self.start_timeout
        self.timings["ray_start"] = time.monotonic() - began
        self._wait_jobs_api(deadline)
        self.timings["jobs_api"] = time.monotonic() - began
        return self

    def _wait_jobs_api(self, deadline: float) -> None:
        from ray.job_submission import JobSubmissionClient

        last: BaseException | None = None
        while time.monotonic() < deadline:
            try:
                JobSubmissionClient(self.address, verify=False).list_jobs()
                return
            except Exception as exc:  # connection refused, 5xx while modules load, ...
                last = exc
            time.sleep(0.2)
        self._fail_start(f"the Jobs API at {self.address} did not answer in time: {last!r}")

    def _fail_start(self, why: str) -> NoReturn:
        detail = self.log_tails()
        with contextlib.suppress(RayClusterError):
            self.stop()
        raise RayClusterError(f"{why}\n{detail}")

    def stop(self) -> None:
        """SIGKILL every process of this cluster (daemons, workers, job drivers, their
        children) until none is left; raise if some survive ``stop_timeout``."""
        if not self._started:
            return
        deadline = time.monotonic() + self.stop_timeout
        left: dict[int, str] = {}
        while True:
            left = self.processes()
            if not left:
                break
            if time.monotonic() > deadline:
                raise RayClusterError(f"Ray processes left after stop(): {left}")
            # The raylet first, so that it does not start workers while we kill them.
            for pid in sorted(left, key=lambda p: "raylet" not in left[p]):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.1)
        self._started = False

    def __enter__(self) -> RayCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- inspection ------------------------------------------------------------------

    def processes(self) -> dict[int, str]:
        """Live (non-zombie) processes of this cluster: pid -> command line."""
        marker = f"{MARKER_VAR}={self.marker}".encode()
        me = os.getpid()
        children: dict[int, list[int]] = {}
        cmdlines: dict[int, str] = {}
        roots: list[int] = []
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            pid = int(entry.name)
            try:
                stat = Path(f"/proc/{pid}/stat").read_text()
                # pid (comm) state ppid pgrp session ...; comm may contain spaces/parens
                fields = stat[stat.rindex(")") + 2 :].split()
                state, ppid, sid = fields[0], int(fields[1]), int(fields[3])
                if state in ("Z", "X"):
                    continue
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except (OSError, ValueError, IndexError):
                continue
            cmdlines[pid] = cmdline.replace(b"\0", b" ").decode(errors="replace").strip()
            children.setdefault(ppid, []).append(pid)
            if pid == me:
                continue
            if sid == self._sid:
                roots.append(pid)
                continue
            # Processes that rename themselves (setproctitle) may have lost their
            # environ; those are in our session or below a process that is.
            with contextlib.suppress(OSError):
                if marker in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                    roots.append(pid)
        found: dict[int, str] = {}
        todo = list(roots)
        while todo:
            pid = todo.pop()
            if pid in found or pid == me:
                continue
            found[pid] = cmdlines.get(pid, "?")
            todo.extend(children.get(pid, []))
        return found

    def listening_sockets(self) -> list[tuple[int, str, str, int]]:
        """Sockets this cluster's processes listen on: (pid, proto, address, port).

        TCP sockets in LISTEN state and unconnected UDP sockets, read from /proc/net
        (the addresses of IPv4-mapped IPv6 sockets are given as IPv4)."""
        inodes: dict[str, int] = {}
        for pid in self.processes():
            with contextlib.suppress(OSError):
                for fd in os.listdir(f"/proc/{pid}/fd"):
                    with contextlib.suppress(OSError):
                        link = os.readlink(f"/proc/{pid}/fd/{fd}")
                        if link.startswith("socket:["):
                            inodes[link[8:-1]] = pid
        result = []
        for proto, state in (
            ("tcp", _TCP_LISTEN),
            ("tcp6", _TCP_LISTEN),
            ("udp", _UDP_UNCONNECTED),
            ("udp6", _UDP_UNCONNECTED),
        ):
            try:
                lines = Path(f"/proc/net/{proto}").read_text().splitlines()[1:]
            except OSError:
                continue
            for line in lines:
                cols = line.split()
                if cols[3] != state or cols[9] not in inodes:
                    continue
                if proto.startswith("udp") and cols[2].split(":")[1] != "0000":
                    continue  # a connected UDP socket does not listen
                addr, port = _decode_proc_addr(cols[1])
                result.append((inodes[cols[9]], proto, addr, port))
        return result

    def log_tails(self, lines: int = 30) -> str:
        """The last lines of `ray start`'s output and of the head's logs, for messages."""
        paths = [self.base_dir / "ray-start.log"]
        if self.logs_dir.is_dir():
            paths += sorted(self.logs_dir.glob("*.err")) + sorted(
                self.logs_dir.glob("dashboard*.log")
            )
        out = []
        for path in paths:
            with contextlib.suppress(OSError):
                text = path.read_text(errors="replace").splitlines()[-lines:]
                if text:
                    out.append(f"--- {path}\n" + "\n".join(text))
        return "\n".join(out)

    def __repr__(self) -> str:
        state = self.address if self.ports else "not started"
        return f"RayCluster({str(self.base_dir)!r}, {state})"


def _decode_proc_addr(text: str) -> tuple[str, int]:
    """``0100007F:1F90`` / ``0000000000000000FFFF00000100007F:1F90`` -> (ip, port)."""
    hex_ip, hex_port = text.split(":")
    raw = bytes.fromhex(hex_ip)
    if sys.byteorder == "little":  # /proc prints each 32-bit word in host order
        raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    ip: Any = ipaddress.ip_address(raw)
    if ip.version == 6 and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return str(ip), int(hex_port, 16)
