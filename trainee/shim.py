"""The round monitor: ``python -m trainee.shim --log LOG --index IDX --exit EXIT --state STATE -- argv...``

One small process per round, in the spirit of podman's conmon. Stdlib only and
importing nothing from trainee, so it starts fast and survives anything the
daemon does (the daemon spawns it with ``start_new_session=True``; it calls
``setsid()`` itself as well, so no signal aimed at the daemon's group reaches it).

What it does:

- becomes a child subreaper, so processes the job daemonizes re-parent to it;
- with ``--claim FILE --token T``: claims the launch before anything runs, by
  creating FILE atomically (``link(2)``) with its pid, start time and T. If FILE
  exists already, a restarted daemon revoked the launch (it found no claim and ran
  the round again): the monitor exits with status 3 and starts nothing. Either the
  monitor or the daemon wins, never both: a launch runs once;
- runs ``argv`` in its own process group, stdin ``/dev/null``, environment
  unchanged; the child's stdout IS the log file (opened ``O_APPEND``): the child
  writes straight to disk, the fastest path there is;
- stderr goes through a pipe: the shim appends each chunk to the same log and
  records its byte range as a line ``start length`` in IDX. The log write and
  the IDX write happen under an exclusive ``flock`` on IDX, so a reader holding a
  shared lock sees no stderr byte in the log without its IDX line;
- writes STATE atomically once the child runs: ``{"pid", "start_time",
  "child_pid", "started_at", "argv", "token"}`` (``start_time`` is field 22 of
  ``/proc/<pid>/stat``: pid plus start time identify the monitor across pid reuse);
- with ``--max-memory-mb`` / ``--max-processes``: every 0.2 s adds up the resident
  memory and counts the processes of the round's whole tree (from ``/proc``; bwrap's
  own two processes are not counted) and, over a limit, SIGKILLs all of it at once;
  the reason (``memory limit 8192 MiB reached``) goes into EXIT's ``limit`` and
  ``error``;
- with ``--stop-file FILE``: a stop recorded before the job runs is honoured. FILE
  is checked once the signal handlers are in place (then nothing is started), in
  the forked child right before it executes the command (then it exits without
  running it) and once more after the start (then the job is stopped as below).
  With the daemon's SIGTERM that follows every stop, a stop reaches the round at
  every moment of its start: ``stopped`` in EXIT either way;
- on SIGTERM/SIGINT/SIGHUP (``stopped``) or when ``--timeout`` expires
  (``timed_out``): SIGTERM (+SIGCONT) to the child's group and every descendant,
  ``--grace`` seconds, then SIGKILL to all of them. In a sandbox the job's own
  processes get it, not bwrap's; when bwrap has not started the job yet, the
  SIGTERM waits for it (checked every 10 ms) and the grace counts from there;
- when the child ends: leftover descendants get SIGTERM, a short grace, SIGKILL;
  all are reaped, the log and IDX are fsynced, and EXIT is written atomically:
  ``{"returncode", "signal", "timed_out", "stopped", "started_at", "ended_at",
  "duration_sec", "error", "limit", "token"}``. No process of the round outlives
  the shim's exit.

Files are created 0600: a training job's output can hold tokens, paths and
data samples, and only the user's own daemon needs to read them.

With ``--ready-fd`` (or when stdout is a pipe, see ``--ready-stdout``) the shim
writes ``READY\\n`` there after STATE exists and closes it: the daemon waits on
that instead of polling. The shim's own diagnostics go into the log as stderr.

Exit status: 0 when the child ran (whatever its result), 127/126 when argv could
not be executed (also recorded in EXIT), 3 when the launch was revoked, 2 for bad
arguments, 1 for other faults.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import fcntl
import json
import os
import select
import signal
import sys
import time
from collections.abc import Iterable, Sequence
from typing import Any

FILE_MODE = 0o600
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
LEFTOVER_GRACE = 2.0
"""Grace for processes still alive after the main child ended (capped by --grace)."""
REAP_LIMIT = 10.0
"""How long to wait for SIGKILLed processes to disappear (uninterruptible sleep)."""
PR_SET_CHILD_SUBREAPER = 36
READ_SIZE = 65536
STDERR_HOLD = 0.05
"""How long a stderr fragment without a line end waits for the rest of its line."""
STDERR_HOLD_MAX = 65536
LIMIT_POLL = 0.2
"""How often the round's memory and process count are measured (with limits set)."""
REVOKED = 3
"""Exit status of a monitor whose launch a restarted daemon revoked (nothing ran)."""
MIB = 1 << 20
TERM_POLL = 0.01
"""How often a stop waiting for a sandboxed job to exist looks for it."""
PAUSE_LIMIT = 600.0
"""How long a test pause (``--test-pause``) waits for its release at most."""
STOPPED_BEFORE_EXEC = "stopped"
"""The exec report of a child that found the stop file and never ran the command."""


# -- small helpers --------------------------------------------------------------


def proc_start_time(pid: int) -> int | None:
    """Field 22 of ``/proc/<pid>/stat`` (clock ticks since boot), or None if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    fields = data[data.rfind(b")") + 2 :].split()
    return int(fields[19])


def _proc_table() -> dict[int, int]:
    """pid -> ppid of every process (that still exists while we read it)."""
    table: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                data = f.read()
        except OSError:
            continue
        fields = data[data.rfind(b")") + 2 :].split()
        if fields[0] in (b"Z", b"X"):
            continue
        table[int(name)] = int(fields[1])
    return table


def descendants(root: int) -> list[int]:
    """Live (non-zombie) processes whose parent chain leads to ``root``."""
    return [pid for pid, _ in tree(root)]


def tree(root: int) -> list[tuple[int, int]]:
    """``(pid, depth)`` of the live processes below ``root`` (its children: depth 1)."""
    table = _proc_table()
    children: dict[int, list[int]] = {}
    for pid, ppid in table.items():
        children.setdefault(ppid, []).append(pid)
    found: list[tuple[int, int]] = []
    todo = [(pid, 1) for pid in children.get(root, ())]
    while todo:
        pid, depth = todo.pop()
        found.append((pid, depth))
        todo.extend((child, depth + 1) for child in children.get(pid, ()))
    return found


_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def resident_bytes(pid: int) -> int:
    """Resident memory of ``pid`` (``/proc/<pid>/statm``), 0 if it is gone."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            fields = f.read().split()
    except OSError:
        return 0
    return int(fields[1]) * _PAGE if len(fields) > 1 else 0


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm", "rb") as f:
            return f.read().strip().decode(errors="replace")
    except OSError:
        return ""


def _signal_all(pgid: int | None, pids: Iterable[int], sig: int) -> None:
    """``sig`` once to each process: the group by killpg, the others one by one.

    Sending it twice (group and pid) would hit a job that is already shutting down
    after the first SIGTERM (Python restores the default handler while it exits).
    """
    if pgid is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if pgid is not None and os.getpgid(pid) == pgid:
                continue
            os.kill(pid, sig)


def claim(path: str, payload: dict[str, Any]) -> dict[str, Any] | None:
    """Create ``path`` holding ``payload``, atomically and only if it does not exist
    (``link(2)`` of a finished temporary file: no reader ever sees it half written).
    None when this call created it, else what the existing file holds (``{}`` if
    unreadable)."""
    folder = os.path.dirname(path) or "."
    tmp = os.path.join(folder, f".{os.path.basename(path)}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    try:
        os.write(fd, (json.dumps(payload) + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(tmp, path)
    except FileExistsError:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            try:
                found = json.loads(os.read(fd, 65536) or b"{}")
            finally:
                os.close(fd)
        except (OSError, ValueError):
            found = {}
        return found if isinstance(found, dict) else {}
    finally:
        os.unlink(tmp)
    with contextlib.suppress(OSError):
        dfd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    return None


def write_atomic(path: str, payload: dict[str, Any]) -> None:
    folder = os.path.dirname(path) or "."
    tmp = os.path.join(folder, f".{os.path.basename(path)}.{os.getpid()}.tmp")
    data = (json.dumps(payload, indent=1) + "\n").encode()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    with contextlib.suppress(OSError):
        dfd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


def _become_subreaper() -> None:
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def original_environ() -> dict[str, str]:
    """The environment this process was started with, exactly.

    Python's start-up may add to ``os.environ`` (PEP 538 sets ``LC_CTYPE`` under
    a C locale); the kernel's copy in ``/proc/self/environ`` is what the daemon
    passed, and that is what the command gets.
    """
    try:
        with open("/proc/self/environ", "rb") as f:
            data = f.read()
    except OSError:
        return dict(os.environ)
    env: dict[str, str] = {}
    for entry in data.split(b"\0"):
        key, sep, value = entry.partition(b"=")
        if sep and key:
            env[os.fsdecode(key)] = os.fsdecode(value)
    return env


def _signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"SIG{num}"


# -- the monitor -----------------------------------------------------------------


class Monitor:
    """One round: the child, its pipes, the stop escalation, the final record."""

    def __init__(self, args: argparse.Namespace, argv: list[str]) -> None:
        self.args = args
        self.argv = argv
        self.env = original_environ()
        self.log_fd = -1
        self.out_fd = -1
        self.idx_fd = -1
        self.err_r = -1
        self.wake_r = -1
        self.child: int | None = None
        self.status: int | None = None
        self.stopped = False
        self.timed_out = False
        self.error: str | None = None
        self.exec_failed = False
        self.exec_code = 127
        """127: not found, 126: found but not executable (the shells' convention)."""
        self.started_at = time.time()
        self.t0 = time.monotonic()
        self.kill_at: float | None = None
        """When the current TERM escalation turns into SIGKILL."""
        self.killed = False
        self.lost_output = 0
        """stderr bytes that could not be written to the log."""
        self.write_error: str | None = None
        self.err_buf = bytearray()
        self.err_flush_at: float | None = None
        """When a held stderr fragment (no line end yet) goes to the log anyway."""
        self.limit: str | None = None
        """Why the round was killed over a limit (``memory limit 8192 MiB reached``)."""
        self.limits_at: float | None = None
        """When the memory and process count are measured next (None: no limits)."""
        self.term_pending: float | None = None
        """The grace of a SIGTERM waiting for the sandboxed job to exist (bwrap starting)."""
        self.never_started = False
        """A stop came before the command ran: it never did."""
        if args.max_memory_mb is not None or args.max_processes is not None:
            self.limits_at = time.monotonic()

    # files ------------------------------------------------------------------

    def open_files(self) -> None:
        for path in (self.args.log, self.args.index, self.args.exit, self.args.state):
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        # never through a symlink: in unsafe mode the job could plant one at the log
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW
        # IDX before LOG: whoever sees the log also finds its index.
        self.idx_fd = os.open(self.args.index, flags, FILE_MODE)
        # Two opens of the log, two file offsets: after a write to ``log_fd`` its
        # offset is the end of exactly that write, whatever the child appends
        # through ``out_fd`` (a shared offset would move under our feet).
        self.log_fd = os.open(self.args.log, flags, FILE_MODE)
        self.out_fd = os.open(self.args.log, flags, FILE_MODE)

    def append_stderr(self, data: bytes) -> None:
        """Append ``data`` to the log and record its range in IDX, under one lock."""
        fcntl.flock(self.idx_fd, fcntl.LOCK_EX)
        try:
            view = memoryview(data)
            while view:
                n = os.write(self.log_fd, view)
                end = os.lseek(self.log_fd, 0, os.SEEK_CUR)
                os.write(self.idx_fd, f"{end - n} {n}\n".encode())
                view = view[n:]
        finally:
            fcntl.flock(self.idx_fd, fcntl.LOCK_UN)

    def note(self, message: str) -> None:
        """A diagnostic of the shim itself, written to the log as stderr."""
        with contextlib.suppress(OSError):
            self.append_stderr(f"[trainee.shim] {message}\n".encode())

    # stop before the start ----------------------------------------------------

    def stop_recorded(self) -> bool:
        """True when the session's stop file exists (never followed: only its presence)."""
        return self.args.stop_file is not None and os.path.lexists(self.args.stop_file)

    def stop_signalled(self) -> bool:
        """True when a stop signal came before anything started (read from the wake pipe)."""
        try:
            data = os.read(self.wake_r, 4096)
        except BlockingIOError:
            return False
        return any(num in STOP_SIGNALS for num in data)

    def stop_before_start(self) -> None:
        self.stopped = True
        self.never_started = True
        self.note("stop requested before the command started: not starting it")

    def stop_after_start(self) -> None:
        """The stop file appeared while the command was being started: stop it now."""
        if self.stopped or self.timed_out or self.status is not None:
            return
        self.stopped = True
        self.note("stop requested while the command was starting: stopping the round")
        self._terminate()

    def test_pause(self, point: str) -> None:
        """``--test-pause POINT=DIR``: create DIR/POINT.reached, wait for DIR/POINT.go."""
        for spec in self.args.test_pause or ():
            name, _, folder = spec.partition("=")
            if name != point or not folder:
                continue
            with open(os.path.join(folder, f"{point}.reached"), "w") as f:
                f.write(f"{os.getpid()}\n")
            limit = time.monotonic() + PAUSE_LIMIT
            go = os.path.join(folder, f"{point}.go")
            while not os.path.exists(go) and time.monotonic() < limit:
                time.sleep(0.01)

    # start ------------------------------------------------------------------

    def install_signals(self) -> None:
        self.wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)
        os.set_blocking(self.wake_r, False)
        signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
        for sig in (*STOP_SIGNALS, signal.SIGCHLD):
            signal.signal(sig, lambda *_: None)

    def spawn(self) -> None:
        """fork + exec with an error pipe: exec failures come back as errno + text."""
        err_r, err_w = os.pipe()
        exec_r, exec_w = os.pipe()  # both O_CLOEXEC: EOF on exec_r means exec succeeded
        devnull = os.open(os.devnull, os.O_RDONLY)
        mask = set(STOP_SIGNALS) | {signal.SIGCHLD}
        old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, mask)
        self.t0 = time.monotonic()
        self.started_at = time.time()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child replaces itself at once
            self._exec_child(devnull, err_w, exec_w, old_mask)
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
        with contextlib.suppress(OSError):
            os.setpgid(pid, pid)
        self.child = pid
        for fd in (err_w, exec_w, devnull, self.out_fd):
            os.close(fd)
        self.err_r = err_r
        report = b""
        while chunk := _read_retry(exec_r):
            report += chunk
        os.close(exec_r)
        if report:
            stage, _, rest = report.decode(errors="replace").partition(":")
            code, _, text = rest.partition(":")
            if stage == STOPPED_BEFORE_EXEC:
                self.stop_before_start()
                return
            if stage == "chdir":
                self.error = f"cannot enter the working directory {self.args.cwd!r}: {text}"
            else:
                self.error = f"cannot execute {self.argv[0]!r}: {text}"
            self.exec_failed = True
            not_found = stage == "exec" and code in (str(errno.ENOENT), str(errno.ENOTDIR))
            self.exec_code = 127 if not_found else 126

    def _exec_child(self, devnull: int, err_w: int, exec_w: int, old_mask: Any) -> None:
        stage = "setup"
        try:
            os.setpgid(0, 0)
            for sig in (*STOP_SIGNALS, signal.SIGCHLD, signal.SIGPIPE, signal.SIGXFSZ):
                signal.signal(sig, signal.SIG_DFL)
            signal.set_wakeup_fd(-1)
            signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
            if self.args.cwd:
                stage = "chdir"
                os.chdir(self.args.cwd)
            stage = "setup"
            os.dup2(devnull, 0)
            os.dup2(self.out_fd, 1)
            os.dup2(err_w, 2)
            if self.stop_recorded():
                # the stop came after the monitor's own check: never run the command
                os.write(exec_w, f"{STOPPED_BEFORE_EXEC}:0:stop requested".encode())
                os._exit(0)
            stage = "exec"
            os.execvpe(self.argv[0], self.argv, self.env)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.write(exec_w, f"{stage}:{exc.errno or 0}:{exc.strerror or exc}".encode())
        finally:
            os._exit(127)

    def claim_launch(self) -> bool:
        """True when this monitor may start the command (see ``--claim``)."""
        if self.args.claim is None:
            return True
        found = claim(
            self.args.claim,
            {
                "by": "monitor",
                "pid": os.getpid(),
                "start_time": proc_start_time(os.getpid()),
                "token": self.args.token,
                "at": time.time(),
            },
        )
        return found is None

    def write_state(self) -> None:
        write_atomic(
            self.args.state,
            {
                "pid": os.getpid(),
                "start_time": proc_start_time(os.getpid()),
                "child_pid": self.child if self.error is None else None,
                "started_at": self.started_at,
                "argv": self.argv,
                "token": self.args.token,
            },
        )

    def signal_ready(self) -> None:
        fd = self.args.ready_fd
        if fd is None:
            return
        with contextlib.suppress(OSError):
            os.write(fd, b"READY\n")
        with contextlib.suppress(OSError):
            if fd in (0, 1, 2):
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, fd)
                os.close(devnull)
            else:
                os.close(fd)

    # main loop ----------------------------------------------------------------

    def run(self) -> None:
        """Serve the round until the child has ended and nothing of it is left."""
        while self.status is None:
            self._step(self._next_timeout())
        self._finish_leftovers()

    def _next_timeout(self) -> float | None:
        now = time.monotonic()
        deadlines = []
        if self.kill_at is not None and not self.killed:
            deadlines.append(self.kill_at)
        if self.args.timeout is not None and not self.timed_out and self.kill_at is None:
            deadlines.append(self.t0 + self.args.timeout)
        if self.err_flush_at is not None:
            deadlines.append(self.err_flush_at)
        if self.limits_at is not None and not self.killed:
            deadlines.append(self.limits_at)
        if self.term_pending is not None:
            deadlines.append(now + TERM_POLL)
        return max(0.0, min(deadlines) - now) if deadlines else None

    def _step(self, timeout: float | None) -> None:
        fds = [self.wake_r] + ([self.err_r] if self.err_r >= 0 else [])
        try:
            ready, _, _ = select.select(fds, [], [], timeout)
        except InterruptedError:  # pragma: no cover - PEP 475 retries select
            ready = []
        if self.wake_r in ready:
            self._handle_signals()
        if self.err_r in ready:
            self._read_stderr()
        self._reap()
        self._check_deadlines()

    def _handle_signals(self) -> None:
        try:
            data = os.read(self.wake_r, 4096)
        except BlockingIOError:
            return
        for num in data:
            if num not in STOP_SIGNALS or self.status is not None:
                continue
            if not self.stopped and not self.timed_out:
                self.stopped = True
                self.note(f"stop requested ({_signal_name(num)}): stopping the round")
            if self.kill_at is None:
                self._terminate()

    def _read_stderr(self) -> None:
        """Read a stderr chunk; whole lines go to the log, a fragment waits briefly.

        Holding fragments keeps stderr lines whole in the log (Python's ``print``
        to stderr writes the text and the newline separately, and the child's
        stdout lands in the same file in between).
        """
        try:
            data = os.read(self.err_r, READ_SIZE)
        except BlockingIOError:
            return
        if not data:
            os.close(self.err_r)
            self.err_r = -1
            self._flush_stderr()
            return
        self.err_buf += data
        cut = max(self.err_buf.rfind(b"\n"), self.err_buf.rfind(b"\r")) + 1
        if cut:
            self._append_safely(bytes(self.err_buf[:cut]))
            del self.err_buf[:cut]
            self.err_flush_at = None
        if len(self.err_buf) >= STDERR_HOLD_MAX:
            self._flush_stderr()
        elif self.err_buf and self.err_flush_at is None:
            self.err_flush_at = time.monotonic() + STDERR_HOLD

    def _flush_stderr(self) -> None:
        if self.err_buf:
            self._append_safely(bytes(self.err_buf))
            self.err_buf.clear()
        self.err_flush_at = None

    def _append_safely(self, data: bytes) -> None:
        """A full disk loses output, never the monitor (it must still write EXIT)."""
        try:
            self.append_stderr(data)
        except OSError as exc:
            self.lost_output += len(data)
            self.write_error = f"{exc.strerror or exc}"

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid == self.child:
                self.status = status

    def _check_deadlines(self) -> None:
        now = time.monotonic()
        if self.err_flush_at is not None and now >= self.err_flush_at:
            self._flush_stderr()
        if (
            self.args.timeout is not None
            and self.kill_at is None
            and now >= self.t0 + self.args.timeout
        ):
            self.timed_out = True
            self.note(f"timeout of {self.args.timeout:g} s reached: stopping the round")
            self._terminate()
        if self.term_pending is not None and self.status is None and not self.killed:
            self._deliver_pending()
        if self.kill_at is not None and not self.killed and now >= self.kill_at:
            self._kill()
        if self.limits_at is not None and not self.killed and now >= self.limits_at:
            self.limits_at = now + LIMIT_POLL
            self._check_limits()

    def _check_limits(self) -> None:
        """Measure the round's whole tree; over a limit, SIGKILL all of it at once."""
        found = tree(os.getpid())
        # bwrap's own processes (the sandbox and its pid 1) are not the job's: only the
        # child itself and bwrap processes right below it are, by their place in the tree
        sandboxed = self.child is not None and _comm(self.child) == "bwrap"
        job = [
            pid
            for pid, depth in found
            if not (sandboxed and (depth == 1 or (depth == 2 and _comm(pid) == "bwrap")))
        ]
        memory = sum(resident_bytes(pid) for pid, _ in found)
        max_mb, max_procs = self.args.max_memory_mb, self.args.max_processes
        if max_mb is not None and memory > max_mb * MIB:
            self.limit = (
                f"memory limit {max_mb} MiB reached ({memory // MIB} MiB resident in "
                f"{len(job)} processes)"
            )
        elif max_procs is not None and len(job) > max_procs:
            self.limit = f"process limit {max_procs} reached ({len(job)} processes)"
        if self.limit is None:
            return
        self.error = self.error or self.limit
        self.note(f"{self.limit}: killing the round")
        self.kill_at = time.monotonic()
        self._kill()

    def _terminate(self, grace: float | None = None) -> None:
        pids = descendants(os.getpid())
        pgid = self.child if self.status is None else None
        # bwrap forwards no signals and a SIGTERM to it ends the sandbox at once
        # (--die-with-parent, pid namespace): the job inside would get SIGKILL with no
        # grace. So in a sandbox the job's own processes get SIGTERM, bwrap does not.
        gentle = [pid for pid in pids if _comm(pid) != "bwrap"]
        grace = self.args.grace if grace is None else grace
        self.kill_at = time.monotonic() + grace
        if len(gentle) != len(pids):
            pgid, pids = None, gentle
            if not gentle and self.status is None:
                # bwrap is still setting the sandbox up: the job's process does not
                # exist yet. The SIGTERM waits for it (SIGKILL after the grace if it
                # never comes), else the job would start after its stop and run on.
                self.term_pending = grace
                return
        _signal_all(pgid, pids, signal.SIGTERM)
        _signal_all(pgid, pids, signal.SIGCONT)

    def _deliver_pending(self) -> None:
        """The SIGTERM of a stop that came while bwrap was starting, once the job exists."""
        assert self.term_pending is not None
        job = [pid for pid in descendants(os.getpid()) if _comm(pid) != "bwrap"]
        if not job:
            return
        grace, self.term_pending = self.term_pending, None
        _signal_all(None, job, signal.SIGTERM)
        _signal_all(None, job, signal.SIGCONT)
        self.kill_at = time.monotonic() + grace  # the job gets its whole grace

    def _kill(self) -> None:
        self.killed = True
        pgid = self.child if self.status is None else None
        pids = descendants(os.getpid())
        if pids or pgid is not None:
            self.note("processes still running after the grace period: SIGKILL")
        _signal_all(pgid, pids, signal.SIGKILL)

    def _finish_leftovers(self) -> None:
        """After the child: TERM, short grace, KILL whatever it left; reap all of it."""
        if descendants(os.getpid()):
            if self.kill_at is None:
                self._terminate(min(self.args.grace, LEFTOVER_GRACE))
            while not self.killed and descendants(os.getpid()):
                timeout = self._next_timeout()
                self._step(0.05 if timeout is None else min(0.05, timeout))
        limit = time.monotonic() + REAP_LIMIT
        while self._has_children() and time.monotonic() < limit:
            _signal_all(None, descendants(os.getpid()), signal.SIGKILL)
            self._step(0.02)
        # Every writer of the stderr pipe is gone now: drain it to EOF.
        while self.err_r >= 0 and time.monotonic() < limit:
            ready, _, _ = select.select([self.err_r], [], [], max(0.0, limit - time.monotonic()))
            if ready:
                self._read_stderr()
        if self.err_r >= 0:
            os.close(self.err_r)
            self.err_r = -1
        self._flush_stderr()

    def _has_children(self) -> bool:
        """Reap what has ended; True while any child (live or not yet reparented) is left."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return False
            if pid == 0:
                return True
            if pid == self.child:
                self.status = status

    # end --------------------------------------------------------------------

    def exit_record(self, returncode: int | None, sig: str | None) -> dict[str, Any]:
        ended = time.time()
        return {
            "returncode": returncode,
            "signal": sig,
            "timed_out": self.timed_out,
            "stopped": self.stopped,
            "started_at": self.started_at,
            "ended_at": ended,
            "duration_sec": round(time.monotonic() - self.t0, 6),
            "error": self.error,
            "lost_output_bytes": self.lost_output,
            "limit": self.limit,
            "token": self.args.token,
        }

    def write_exit(self) -> None:
        returncode: int | None = None
        sig: str | None = None
        if self.exec_failed:
            returncode = self.exec_code
        elif self.never_started:
            pass  # stopped before the command ran: no status of its own
        elif self.status is not None:
            if os.WIFSIGNALED(self.status):
                sig = _signal_name(os.WTERMSIG(self.status))
            else:
                returncode = os.waitstatus_to_exitcode(self.status)
        if self.lost_output and self.error is None:
            self.error = f"{self.lost_output} bytes of stderr lost: {self.write_error}"
        for fd in (self.log_fd, self.idx_fd):
            with contextlib.suppress(OSError):
                os.fsync(fd)
        write_atomic(self.args.exit, self.exit_record(returncode, sig))


def _read_retry(fd: int) -> bytes:
    while True:
        try:
            return os.read(fd, 4096)
        except InterruptedError:  # pragma: no cover - PEP 475 retries
            continue


# -- command line -----------------------------------------------------------------


def _positive(text: str) -> float:
    value = float(text)
    if not value > 0 or value != value or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text!r}")
    return value


def _non_negative(text: str) -> float:
    value = float(text)
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be >= 0 seconds, got {text!r}")
    return value


def _positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text!r}")
    return int(text)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m trainee.shim",
        description="Run one training round under a monitor (see the module docstring).",
        usage="%(prog)s --log LOG --index IDX --exit EXIT --state STATE [options] -- argv...",
    )
    p.add_argument("--log", required=True, help="round log (stdout + stderr), appended")
    p.add_argument("--index", required=True, help="stderr ranges of the log: 'start length' lines")
    p.add_argument("--exit", required=True, help="exit.json, written when the command ends")
    p.add_argument("--state", required=True, help="monitor.json, written when the command runs")
    p.add_argument("--timeout", type=_positive, default=None, help="seconds before timed_out")
    p.add_argument("--grace", type=_non_negative, default=30.0, help="SIGTERM -> SIGKILL delay")
    p.add_argument("--cwd", default=None, help="working directory of the command")
    p.add_argument("--ready-fd", type=int, default=None, help="write READY here once running")
    p.add_argument("--token", default=None, help="the launch's token, kept in STATE and EXIT")
    p.add_argument("--claim", default=None, help="claim the launch by creating this file")
    p.add_argument("--stop-file", default=None, help="a stop recorded here: never start")
    p.add_argument("--test-pause", action="append", default=None, help="POINT=DIR: a test's pause")
    p.add_argument("--max-memory-mb", type=_positive_int, default=None, help="memory limit (MiB)")
    p.add_argument("--max-processes", type=_positive_int, default=None, help="process limit")
    return p


def parse_args(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    argv = list(argv)
    if "--" not in argv:
        build_parser().error("the command must follow '--'")
    cut = argv.index("--")
    command = argv[cut + 1 :]
    if not command:
        build_parser().error("no command after '--'")
    return build_parser().parse_args(argv[:cut]), command


def main(argv: Sequence[str] | None = None) -> int:
    args, command = parse_args(sys.argv[1:] if argv is None else argv)
    if args.ready_fd is not None:
        os.set_inheritable(args.ready_fd, False)  # the command must not hold it open
    with contextlib.suppress(PermissionError):
        os.setsid()  # fails only when already a session leader, which is what we want
    _become_subreaper()
    mon = Monitor(args, command)
    try:
        mon.open_files()
    except OSError as exc:
        print(f"trainee.shim: cannot open {exc.filename}: {exc.strerror}", file=sys.stderr)
        return 1
    # handlers first: once the claim names this process, a daemon may signal it
    mon.install_signals()
    if not mon.claim_launch():
        # a restarted daemon revoked this launch and runs the round again: start nothing
        # (and say nothing: stderr is a round log the new attempt may have replaced)
        return REVOKED
    # from here on a stop is either in the stop file or a signal this process handles
    if mon.stop_recorded() or mon.stop_signalled():
        mon.stop_before_start()
    else:
        mon.test_pause("shim.before_exec")
        mon.spawn()
    try:
        if not mon.never_started:
            mon.test_pause("shim.spawned")
            if mon.stop_recorded():
                mon.stop_after_start()
        mon.write_state()
        mon.signal_ready()
        if mon.error is not None:
            mon.note(mon.error)
        if not mon.never_started or mon.child is not None:
            mon.run()
        mon.write_exit()
    except BaseException as exc:
        # A fault of the monitor itself: nothing of the round may outlive it.
        _signal_all(mon.child, descendants(os.getpid()), signal.SIGKILL)
        mon.error = f"monitor failure: {type(exc).__name__}: {exc}"
        with contextlib.suppress(BaseException):
            mon.note(mon.error)
            mon.write_exit()
        raise
    return mon.exec_code if mon.exec_failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
