"""Guarded mode: the bubblewrap (bwrap) command line around a round's command.

Inside the sandbox the host and the project are read-only, ``/tmp`` is a private
tmpfs, ``/dev`` and ``/proc`` are fresh, and the only writable places are the
round's own workspace (``runs/session-XXXX/round-XXXX/``), the cache folders that
HOME, XDG_CACHE_HOME, ... point to and ``.trainee/logs/``. The store, project.yaml,
tuning.yaml, the artifacts and other rounds' workspaces stay read-only; trainee's
own folders (the daemon's socket and token, ``~/.trainee``) are not there at all. A
missing or broken bwrap is an error that names ``--unsafe``; there is no silent fallback.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from trainee import paths
from trainee.errors import SandboxError
from trainee.launch.layout import RoundLayout

if TYPE_CHECKING:
    from trainee.launch.render import RenderedRound
    from trainee.spec import ProjectSpec

__all__ = [
    "GPU_DEVICES",
    "bwrap_argv",
    "check_bwrap",
    "find_bwrap",
    "gpu_devices",
    "private_dirs",
    "sandboxed_pids",
    "signal_sandboxed",
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


def private_dirs(*, exclude: Sequence[Path] = ()) -> list[Path]:
    """trainee's own folders, hidden from the job behind an empty tmpfs: the daemon's
    runtime folder (its socket, which takes any call without a token, and the access
    token of the HTTP API) and ``~/.trainee`` (provider keys in config.json).

    Folders under ``/tmp`` are hidden already; a folder holding an ``exclude`` path (the
    project) is left alone, else the project would vanish with it.
    """
    found: list[Path] = []
    for folder in (paths.runtime_dir(), paths.home_dir()):
        real = folder.resolve()
        if real in found or not real.is_dir() or real.is_relative_to("/tmp"):
            continue
        if any(p.resolve().is_relative_to(real) for p in exclude):
            continue
        found.append(real)
    return found


def tools_under_tmp(inner: Sequence[str], env: Mapping[str, str] | None = None) -> list[Path]:
    """Interpreters and environments under /tmp that the job needs to see.

    The sandbox's /tmp is a fresh tmpfs, so a virtualenv (or any PATH / PYTHONPATH
    entry) living under /tmp — a CI checkout, say — would vanish; these prefixes are
    bound back read-only: ``/x/.venv/bin/python`` and ``/x/.venv/bin`` give ``/x/.venv``.
    """
    env = os.environ if env is None else env
    candidates: list[str] = [inner[0]] if inner and os.path.isabs(inner[0]) else []
    for var in ("PATH", "PYTHONPATH"):
        candidates += [p for p in env.get(var, "").split(os.pathsep) if os.path.isabs(p)]
    tmp = Path("/tmp")
    out: list[Path] = []
    for candidate in candidates:
        path = Path(os.path.abspath(candidate))
        if path.parent.name == "bin" and path.name != "bin":
            path = path.parent
        if path.name == "bin":
            path = path.parent
        if path != tmp and path.is_relative_to(tmp) and path.exists() and not _covered(path, out):
            out = [p for p in out if not p.is_relative_to(path)] + [path]
    return out


def _covered(path: Path, by: Sequence[Path]) -> bool:
    return any(path.is_relative_to(p) for p in by)


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
) -> list[str]:
    """The bwrap command line running ``inner`` for the round ``layout``.

    Mount order matters, later mounts cover earlier ones: the host read-only, a
    fresh ``/dev`` (plus GPU ``devices``, found on the host when None) and ``/proc``,
    then the tmpfs ``/tmp`` *before* anything under /tmp is bound (a project under
    /tmp would vanish otherwise), then the project (and a ``.trainee`` living
    elsewhere) and ``extra_ro`` read-only, then the writable folders, and last an
    empty tmpfs over each of :func:`private_dirs`.
    """
    exe = _bwrap_path(bwrap)
    project = layout.session.project
    root = project.project_root.resolve()
    trainee = project.trainee_dir.resolve()
    writable = writable_paths(layout, create=create)

    argv = [exe, "--ro-bind", "/", "/", "--dev", "/dev"]
    for dev in gpu_devices() if devices is None else devices:
        argv += ["--dev-bind", dev, dev]
    argv += ["--proc", "/proc", "--tmpfs", "/tmp"]
    read_only = [root]
    if not trainee.is_relative_to(root):
        read_only.append(trainee)
    read_only += [Path(p).resolve() for p in extra_ro]
    read_only += [p for p in tools_under_tmp(inner, env) if not _covered(p, read_only)]
    for path in read_only:
        argv += ["--ro-bind", str(path), str(path)]
    for path in writable:
        argv += ["--bind", str(path), str(path)]
    for path in private_dirs(exclude=[root, trainee]):
        argv += ["--tmpfs", str(path)]
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
) -> RenderedRound:
    """``rendered`` with its argv run inside the sandbox; env, cwd and display unchanged
    (bwrap passes the environment through)."""
    argv = bwrap_argv(
        rendered.argv, layout=rnd, cwd=rendered.cwd, network=network, bwrap=bwrap, env=rendered.env
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
