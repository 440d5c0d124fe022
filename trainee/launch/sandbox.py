"""Guarded mode: the bubblewrap (bwrap) command line around a round's command.

What the job sees is a whitelist, not the host minus a list:

- the system, read-only: ``/usr``, ``/bin``, ``/sbin``, ``/lib*``, ``/etc``, ``/opt``,
  ``/sys`` (and ``/nix``, ``/gnu`` where they exist); a fresh ``/dev`` (plus GPU
  devices) and ``/proc``; private tmpfs ``/tmp`` and ``/var/tmp``;
- the project, read-only, and its ``.trainee/`` (read-only too, if it lives elsewhere)
  without trainee's own files there (the store, the control folder);
- the session's artifacts, read-only (the ledgers a job may learn from);
- the tools the command needs, read-only: each folder on PATH and PYTHONPATH and the
  command's own, and for a ``bin`` folder the installation holding it (a virtualenv,
  the Python it was made from, a conda env) — never a HOME or a folder holding one
  (``$HOME/bin`` brings only that folder);
- writable: the round's workspace (``runs/session-XXXX/round-XXXX/``), the cache
  folders HOME, XDG_CACHE_HOME, ... point to, and ``.trainee/logs/``.

Nothing else of the host is there: not HOME, not another user's HOME, not ``/run``
(the daemon's socket under ``$XDG_RUNTIME_DIR``), not ``/home``, ``/root``, ``/mnt``,
``/srv``, ``/var``. Wherever trainee's private places fall inside something bound
(``~/.trainee`` with config.json, the runtime folder with the socket and the token,
``TRAINEE_DATA_DIR`` with the store, the control folder, a HOME inside the project),
they are hidden: a private folder behind an empty read-only tmpfs, a folder holding
private files behind a tmpfs into which its other entries are bound again. Mounts are
applied from the shallowest path to the deepest (hide first, then re-bind what the job
needs), so the deepest rule wins for every path, whatever the layout.

A missing or broken bwrap is an error that names ``--unsafe``; there is no silent
fallback.
"""

from __future__ import annotations

import fnmatch
import glob
import os
import shutil
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from trainee import paths
from trainee.errors import SandboxError
from trainee.launch.layout import RoundLayout, data_dir_for

if TYPE_CHECKING:
    from trainee.launch.render import RenderedRound
    from trainee.spec import ProjectSpec

__all__ = [
    "GPU_DEVICES",
    "SYSTEM_DIRS",
    "Mount",
    "Private",
    "bwrap_argv",
    "check_bwrap",
    "find_bwrap",
    "gpu_devices",
    "mount_plan",
    "private_places",
    "sandboxed_pids",
    "signal_sandboxed",
    "tool_paths",
    "wrap",
    "writable_paths",
]

UNSAFE_HINT = (
    "run with --unsafe (or set advanced.security_mode: unsafe) to launch without isolation"
)

GPU_DEVICES: tuple[str, ...] = ("/dev/nvidia*", "/dev/nvidia-caps", "/dev/dri", "/dev/kfd")
"""Host device nodes passed into the fresh ``/dev`` when they exist (CUDA, ROCm)."""

_CHECK_TIMEOUT = 30.0


def find_bwrap() -> str:
    """The path of ``bwrap`` on PATH (or /usr/bin), else :class:`SandboxError`."""
    found = shutil.which("bwrap") or shutil.which("bwrap", path="/usr/bin:/bin:/usr/local/bin")
    if found is None:
        raise SandboxError(
            "guarded mode needs bubblewrap (bwrap), which was not found on PATH; install it "
            f"(e.g. `apt install bubblewrap`) or {UNSAFE_HINT}",
            {"reason": "bwrap not found"},
        )
    return found


def _bwrap_path(bwrap: str | None) -> str:
    if bwrap is None:
        return find_bwrap()
    if not (os.path.isfile(bwrap) and os.access(bwrap, os.X_OK)):
        raise SandboxError(
            f"guarded mode needs bubblewrap, but {bwrap} is not an executable file; "
            f"install bubblewrap or {UNSAFE_HINT}",
            {"bwrap": bwrap, "reason": "not executable"},
        )
    return bwrap


def _core_flags(network: bool) -> list[str]:
    """The isolation flags every sandbox uses, checked by :func:`check_bwrap`.

    ``--cap-drop ALL``: when trainee runs as root, the job would otherwise keep
    CAP_SYS_ADMIN and could simply remount ``/`` read-write.
    No ``--new-session``: the round monitor already runs in its own session with no
    controlling terminal (so there is no TIOCSTI target), and the job must stay in
    the monitor's process group, which is what the monitor signals.
    """
    flags = ["--die-with-parent", "--unshare-pid", "--cap-drop", "ALL"]
    if not network:
        flags.append("--unshare-net")
    return flags


def check_bwrap(bwrap: str | None = None, *, network: bool = True) -> None:
    """Run ``/bin/true`` once in a sandbox with the core flags; :class:`SandboxError`
    with bwrap's own message when that fails (e.g. user namespaces are disabled)."""
    exe = _bwrap_path(bwrap)
    argv = [
        exe,
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--tmpfs",
        "/tmp",
        *_core_flags(network),
        "--",
        "/bin/true",
    ]
    try:
        proc = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=_CHECK_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise SandboxError(
            f"bubblewrap ({exe}) could not be run: {exc}; {UNSAFE_HINT}",
            {"bwrap": exe, "reason": str(exc)},
        ) from None
    if proc.returncode != 0:
        said = proc.stderr.decode("utf-8", "replace").strip() or f"exit status {proc.returncode}"
        raise SandboxError(
            f"bubblewrap ({exe}) does not work on this machine: {said}; "
            f"enable unprivileged user namespaces or {UNSAFE_HINT}",
            {"bwrap": exe, "reason": said, "returncode": proc.returncode},
        )


def gpu_devices(patterns: Sequence[str] = GPU_DEVICES) -> list[str]:
    """The GPU device nodes of this host that exist, sorted."""
    found: set[str] = set()
    for pattern in patterns:
        found.update(p for p in glob.glob(pattern) if os.path.exists(p))
    return sorted(found)


def writable_paths(layout: RoundLayout, *, create: bool = True) -> list[Path]:
    """The real paths bound writable: the round workspace, the cache folders and
    ``.trainee/logs``, created when missing (``create``).

    Each path is walked one component at a time from ``.trainee/``; a component that
    is a symlink must resolve inside ``.trainee/`` too, else :class:`SandboxError`
    (nothing is created through such a link).
    """
    project = layout.session.project
    targets = [layout.dir, *project.cache_dirs().values(), project.logs]
    return [_inside_trainee(project.trainee_dir, target, create=create) for target in targets]


def _inside_trainee(base: Path, target: Path, *, create: bool) -> Path:
    base_real = base.resolve()
    current = base_real
    for part in target.relative_to(base).parts:
        nxt = current / part
        if nxt.is_symlink() or nxt.exists():
            real = nxt.resolve()
            if not real.is_relative_to(base_real):
                raise SandboxError(
                    f"{target} resolves to {real} through a symlink, outside {base}; guarded "
                    f"mode only makes folders inside .trainee/ writable (remove the link or "
                    f"{UNSAFE_HINT})",
                    {"path": str(target), "resolved": str(real)},
                )
            if not real.is_dir():
                raise SandboxError(
                    f"{target}: {real} is not a folder",
                    {"path": str(target), "resolved": str(real)},
                )
            current = real
            continue
        if create:
            try:
                nxt.mkdir()
            except FileExistsError:
                return _inside_trainee(base, target, create=create)  # raced: check it again
            except OSError as exc:
                raise SandboxError(
                    f"cannot create {nxt} ({exc.strerror}) for the sandbox",
                    {"path": str(nxt), "reason": exc.strerror},
                ) from None
        current = nxt
    return current


SYSTEM_DIRS: tuple[str, ...] = (
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc",
    "/opt",
    "/sys",
    "/nix",
    "/gnu",
)
"""Host folders the job sees read-only (those that exist; top-level symlinks such as
``/bin -> usr/bin`` are recreated as symlinks)."""

HOST_SECRETS: tuple[str, ...] = ("/etc/shadow", "/etc/gshadow", "/etc/shadow-", "/etc/gshadow-")
"""Files of the system folders the job never reads, even as root: an empty file is bound
over each."""

_TOOL_BIN_NAMES = frozenset({"bin", "sbin", "shims", "condabin", "Scripts"})
_INSTALL_MARKS = ("lib", "lib64", "libexec", "pyvenv.cfg", "conda-meta")
"""What makes the folder above a ``bin`` an installation (bound with it): a venv, a
conda env, a prefix with libraries. ``$HOME/.local`` never is (it holds the user's
application data under ``share/``)."""
_RUNTIME_NAMES = ("{socket}", "{socket}.*", "token", "token.*", "daemon.log*")
_DATA_NAMES = ("runtime.sqlite3", "runtime.sqlite3-*", "control")
_HOME_NAMES = (".*",)


@dataclass(frozen=True)
class Private:
    """A place of trainee's the job must not see: the whole folder (``names`` None), or
    the entries of ``path`` matching ``names`` (fnmatch patterns; the folder is shared
    with what the job needs)."""

    path: Path
    names: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Mount:
    """One mount of the sandbox: ``ro``/``rw`` bind of ``path`` onto itself, ``tmpfs``,
    ``symlink`` (to ``target``), ``dev``, ``proc``, ``devbind`` or ``file`` (an empty
    file bound over ``path``)."""

    kind: str
    path: str
    target: str = ""


def _depth(path: str) -> int:
    return 0 if path == "/" else path.count("/")


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _homes(envs: Sequence[Mapping[str, str]]) -> list[str]:
    homes = {"/root", "/home"}
    for env in envs:
        home = env.get("HOME")
        if home and os.path.isabs(home):
            homes.add(os.path.realpath(home))
    homes.add(os.path.realpath(os.path.expanduser("~")))
    return sorted(homes)


def private_places(layout: RoundLayout, envs: Sequence[Mapping[str, str]]) -> list[Private]:
    """trainee's private places for the daemon's and the caller's environments ``envs``:
    ``~/.trainee`` (config.json, the service data), the runtime folder (socket, lock,
    token, daemon log: only those entries when ``TRAINEE_SOCKET`` puts them in a folder
    of the user's), ``TRAINEE_DATA_DIR``, the project's store and control folder, and
    every HOME (its dotfiles only when it is a folder the job needs, such as the project)."""
    out: list[Private] = []
    project = layout.session.project
    # the job needs these folders: a private place that is one of them hides only
    # trainee's entries in it
    needed = {_real(project.project_root), _real(project.trainee_dir)}
    for env in envs:
        out.append(Private(_real(paths.home_dir(env))))
        if env.get("TRAINEE_SOCKET"):
            sock = paths.socket_path(env)
            names = tuple(n.format(socket=sock.name) for n in _RUNTIME_NAMES)
            out.append(Private(_real(sock.parent), names))
        else:
            out.append(Private(_real(paths.runtime_dir(env))))
        if env.get("TRAINEE_DATA_DIR"):
            data = _real(paths.service_data_dir(env))
            out.append(Private(data, _DATA_NAMES if data in needed else None))
    for data in {project.data_dir, *(data_dir_for(project.trainee_dir, env) for env in envs)}:
        out.append(Private(_real(data), _DATA_NAMES))
    out.append(Private(_real(project.control)))
    for home in _homes(envs):
        out.append(Private(Path(home), _HOME_NAMES))
    unique: dict[tuple[Path, tuple[str, ...] | None], Private] = {}
    for place in out:
        unique.setdefault((place.path, place.names), place)
    return list(unique.values())


def _real(path: Path) -> Path:
    return Path(os.path.realpath(path))


def tool_paths(
    inner: Sequence[str],
    env: Mapping[str, str] | None = None,
    *,
    homes: Sequence[str] = (),
) -> list[Path]:
    """The folders of the command's tools, bound read-only: each folder on PATH and
    PYTHONPATH and the command's own (its real path), and for a ``bin`` folder the
    installation holding it (see :data:`_INSTALL_MARKS`), with the Python a virtualenv
    was made from (pyvenv.cfg's ``home``). A folder that is ``/``, a HOME or holds one
    (``homes``) is never bound: ``$HOME/bin`` brings that folder only, ``$HOME`` on PATH
    brings nothing."""
    env = os.environ if env is None else env
    candidates: list[str] = []
    search = env.get("PATH", os.defpath)
    if inner:
        exe = inner[0] if "/" in inner[0] else shutil.which(inner[0], path=search)
        if exe is not None and os.path.isabs(exe):
            candidates += [os.path.dirname(exe), os.path.dirname(os.path.realpath(exe))]
    for var in ("PATH", "PYTHONPATH"):
        candidates += [p for p in env.get(var, "").split(os.pathsep) if os.path.isabs(p)]

    def unsafe(path: str) -> bool:
        return path == "/" or any(_under(home, path) for home in homes)

    out: list[str] = []

    def add(path: str) -> None:
        if os.path.exists(path) and not unsafe(path) and path not in out:
            out.append(path)

    user_data = {os.path.join(home, ".local") for home in homes}

    def add_prefix(folder: str) -> None:
        """The installation holding the ``bin`` folder ``folder``, if it is one."""
        if os.path.basename(folder) not in _TOOL_BIN_NAMES:
            return
        prefix = os.path.dirname(folder)
        if prefix in user_data or not any(
            os.path.exists(os.path.join(prefix, mark)) for mark in _INSTALL_MARKS
        ):
            return
        add(prefix)
        base = _venv_home(prefix)
        if base is not None:
            add(base)
            add_prefix(base)

    for candidate in candidates:
        real = os.path.realpath(candidate)
        add(real)
        add_prefix(real)
    # a folder inside another one bound already adds nothing
    kept = [p for p in out if not any(p != q and _under(p, q) for q in out)]
    return [Path(p) for p in kept]


def _venv_home(prefix: str) -> str | None:
    """The ``home`` of ``prefix/pyvenv.cfg`` (the folder of the Python a venv was made from)."""
    try:
        with open(os.path.join(prefix, "pyvenv.cfg"), encoding="utf-8", errors="replace") as f:
            lines = f.read(65536).splitlines()
    except OSError:
        return None
    for line in lines:
        key, sep, value = line.partition("=")
        if sep and key.strip() == "home" and os.path.isabs(value.strip()):
            return os.path.realpath(value.strip())
    return None


def mount_plan(
    wanted: Mapping[str, str],
    private: Sequence[Private],
    *,
    hidden_files: Sequence[str] = (),
) -> list[Mount]:
    """The bind, tmpfs and symlink mounts showing the job ``wanted`` (real path ->
    ``ro``/``rw``) and nothing of ``private``, in the order bwrap must apply them.

    Paths are taken from the shallowest to the deepest, so a deeper mount always wins:
    at each path the wanted bind comes first; then a folder holding private entries,
    if the job would see it, becomes a tmpfs into which its other entries are bound
    again (with the mode they had); then a private folder the job would see becomes an
    empty tmpfs. A wanted path inside a hidden one is bound again afterwards (hide
    first, then re-bind what the job needs). ``hidden_files``: files an empty file is
    bound over when the job would see them.
    """
    whole = {str(p.path) for p in private if p.names is None}
    named: dict[str, list[str]] = {}
    for p in private:
        if p.names is not None:
            named.setdefault(str(p.path), []).extend(p.names)
    files = {f for f in hidden_files if os.path.lexists(f)}
    # a wanted path equal to a wholly private one stays hidden
    wanted = {path: mode for path, mode in wanted.items() if path not in whole}
    events = sorted({*wanted, *whole, *named, *files}, key=lambda path: (_depth(path), path))
    ops: list[Mount] = []

    def cover(path: str) -> Mount | None:
        """The deepest mount so far holding ``path``."""
        best: Mount | None = None
        for op in ops:
            if _under(path, op.path) and (best is None or _depth(op.path) >= _depth(best.path)):
                best = op
        return best

    def visible(path: str) -> Mount | None:
        op = cover(path)
        return op if op is not None and op.kind in ("ro", "rw") else None

    for path in events:
        if path in wanted:
            ops.append(Mount(wanted[path], path))
        if path in named and os.path.isdir(path) and (shown := visible(path)) is not None:
            ops.append(Mount("tmpfs", path))
            patterns = named[path]
            for entry in sorted(os.scandir(path), key=lambda e: e.name):
                child = os.path.join(path, entry.name)
                if (
                    any(fnmatch.fnmatchcase(entry.name, pat) for pat in patterns)
                    or child in wanted
                    or child in whole
                ):
                    continue
                if entry.is_symlink():
                    ops.append(Mount("symlink", child, os.readlink(child)))
                elif entry.is_dir(follow_symlinks=False) or entry.is_file(follow_symlinks=False):
                    ops.append(Mount(shown.kind, child))
        if path in whole and os.path.isdir(path) and visible(path) is not None:
            ops.append(Mount("tmpfs", path))
        if path in files and visible(path) is not None:
            ops.append(Mount("file", path))
    return ops


def _plan_argv(ops: Sequence[Mount], optional: Sequence[str] = ()) -> list[str]:
    """bwrap's arguments for ``ops``; a bind of an ``optional`` path is skipped by bwrap
    where the source is missing (a cluster node without ``/opt``, say)."""
    argv: list[str] = []
    for op in ops:
        if op.kind == "ro":
            flag = "--ro-bind-try" if op.path in optional else "--ro-bind"
            argv += [flag, op.path, op.path]
        elif op.kind == "rw":
            argv += ["--bind", op.path, op.path]
        elif op.kind == "tmpfs":
            argv += ["--tmpfs", op.path]
        elif op.kind == "symlink":
            argv += ["--symlink", op.target, op.path]
        elif op.kind == "file":
            argv += ["--ro-bind", "/dev/null", op.path]
    # the tmpfs hiding places is read-only once everything is mounted inside it
    for op in ops:
        if op.kind == "tmpfs":
            argv += ["--remount-ro", op.path]
    return argv


def _system(devices: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """The fixed head of the command line (root, /dev, /proc, the tmpfs folders) and the
    system folders to bind read-only."""
    head: list[str] = []
    wanted: dict[str, str] = {}
    for folder in SYSTEM_DIRS:
        if os.path.islink(folder):
            head += ["--symlink", os.readlink(folder), folder]
        elif os.path.isdir(folder):
            wanted[folder] = "ro"
    head += ["--dev", "/dev"]
    for dev in devices:
        head += ["--dev-bind", dev, dev]
    head += ["--proc", "/proc", "--tmpfs", "/tmp", "--tmpfs", "/var/tmp"]
    # name resolution, when /etc/resolv.conf leads into /run (systemd-resolved)
    resolv = os.path.realpath("/etc/resolv.conf")
    if os.path.isfile(resolv) and not any(_under(resolv, d) for d in SYSTEM_DIRS):
        wanted[os.path.dirname(resolv)] = "ro"
    return head, wanted


def bwrap_argv(
    inner: Sequence[str],
    *,
    layout: RoundLayout,
    cwd: str,
    network: bool = True,
    extra_ro: Sequence[str] = (),
    bwrap: str | None = None,
    create: bool = True,
    devices: Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
    caller_env: Mapping[str, str] | None = None,
) -> list[str]:
    """The bwrap command line running ``inner`` for the round ``layout``.

    ``env`` is the job's environment (its PATH and PYTHONPATH name the tools to bind);
    ``caller_env`` the environment the session was started with (its HOME,
    TRAINEE_SOCKET and TRAINEE_DATA_DIR name private places, as the daemon's own do).
    The system part comes first (``/dev``, ``/proc``, the tmpfs ``/tmp`` before anything
    under /tmp), then :func:`mount_plan`.
    """
    exe = _bwrap_path(bwrap)
    project = layout.session.project
    root = _real(project.project_root)
    trainee = _real(project.trainee_dir)
    writable = writable_paths(layout, create=create)
    envs = [dict(os.environ)] + ([dict(caller_env)] if caller_env is not None else [])
    job_env = os.environ if env is None else env
    head, wanted = _system(gpu_devices() if devices is None else devices)
    system = set(wanted)
    for path in [root, *([] if trainee.is_relative_to(root) else [trainee])]:
        wanted.setdefault(str(path), "ro")
    for path in (Path(p) for p in extra_ro):
        wanted.setdefault(str(_real(path)), "ro")
    artifacts = layout.session.artifacts
    if create:
        artifacts.mkdir(parents=True, exist_ok=True)
    if artifacts.is_dir():
        wanted.setdefault(str(_real(artifacts)), "ro")
    # the job's own HOME is its cache folder (writable): only the real ones count
    homes = _homes(envs)
    private = private_places(layout, envs)
    avoid = [*homes, *(str(p.path) for p in private if p.names is None)]
    for tool in tool_paths(inner, job_env, homes=avoid):
        wanted.setdefault(str(tool), "ro")
    for path in writable:
        wanted[str(path)] = "rw"
    argv = [exe, *head]
    # the system folders of this machine may be missing on a cluster node: optional there
    plan = mount_plan(wanted, private, hidden_files=HOST_SECRETS)
    argv += _plan_argv(plan, optional=sorted(system))
    argv += ["--remount-ro", "/"]
    argv += _core_flags(network)
    argv += ["--chdir", cwd, "--", *inner]
    return argv


def wrap(
    rendered: RenderedRound,
    spec: ProjectSpec,
    rnd: RoundLayout,
    *,
    network: bool = True,
    bwrap: str | None = None,
    caller_env: Mapping[str, str] | None = None,
) -> RenderedRound:
    """``rendered`` with its argv run inside the sandbox; env, cwd and display unchanged
    (bwrap passes the environment through). ``caller_env``: see :func:`bwrap_argv`."""
    argv = bwrap_argv(
        rendered.argv,
        layout=rnd,
        cwd=rendered.cwd,
        network=network,
        extra_ro=[os.path.join(spec.project_root, p) for p in spec.advanced.read_only_paths],
        bwrap=bwrap,
        env=rendered.env,
        caller_env=caller_env,
    )
    return msgspec.structs.replace(rendered, argv=tuple(argv))


# -- stopping a sandboxed job gracefully ---------------------------------------------------


def sandboxed_pids(bwrap_pid: int) -> list[int]:
    """The job's processes under the bwrap process ``bwrap_pid`` (host pids), without
    bwrap's own processes (the outer one and the pid namespace's init)."""
    children: dict[int, list[int]] = {}
    names: dict[int, str] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        stat = _read_stat(int(entry.name))
        if stat is not None:
            names[int(entry.name)] = stat[0]
            children.setdefault(stat[1], []).append(int(entry.name))
    out: list[int] = []
    todo = list(children.get(bwrap_pid, []))
    while todo:
        pid = todo.pop()
        todo.extend(children.get(pid, []))
        if names.get(pid) != "bwrap":
            out.append(pid)
    return sorted(out)


def _read_stat(pid: int) -> tuple[str, int] | None:
    """``(comm, ppid)`` of ``pid``, or None if it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    head, _, rest = text.rpartition(")")
    comm = head.partition("(")[2]
    fields = rest.split()
    return (comm, int(fields[1])) if len(fields) > 1 else None


def signal_sandboxed(bwrap_pid: int, sig: int = signal.SIGTERM) -> int:
    """Send ``sig`` to the job's processes inside the sandbox; returns how many got it.

    bwrap does not forward signals, and a SIGTERM to bwrap itself ends the sandbox
    at once (``--die-with-parent`` and the pid namespace SIGKILL everything inside),
    so a graceful stop signals the job's processes directly and only then, after the
    grace period, kills the process group.
    """
    sent = 0
    for pid in sandboxed_pids(bwrap_pid):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            continue
        sent += 1
    return sent
