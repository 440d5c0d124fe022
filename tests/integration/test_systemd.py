"""systemd integration: the unit files, install.sh, sd_notify and socket activation.

No systemd manager runs here, so the units are checked statically with
``systemd-analyze --user verify`` (which exits 0 on warnings: stderr must be
empty), and the daemon's side is driven with real sockets and real child
processes, as systemd would drive it.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest

from trainee.daemon import systemd

REPO = Path(__file__).resolve().parents[2]
UNITS = REPO / "systemd"
INSTALL = UNITS / "install.sh"
TEMPLATE_EXEC = "ExecStart=%h/.local/bin/trainee"
SD_VARS = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_PID", "LISTEN_FDS")


# -- fixtures and helpers -------------------------------------------------------


@pytest.fixture
def systemd_analyze() -> str:
    path = shutil.which("systemd-analyze")
    if path is None:
        pytest.fail(
            "systemd-analyze is not installed: it comes with the Debian package 'systemd' "
            "(apt-get install systemd); the Makefile's deps target installs it"
        )
    return path


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A folder with a short path: AF_UNIX addresses are limited to 108 bytes."""
    path = Path(tempfile.mkdtemp(prefix="tsd-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A private HOME with a 0700 XDG_RUNTIME_DIR, as a user manager would have."""
    (tmp_path / "home").mkdir()
    (tmp_path / "run").mkdir(mode=0o700)
    return tmp_path


def clean_env(**extra: str) -> dict[str, str]:
    """The test's environment without systemd's variables, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in SD_VARS and k != "LISTEN_FDNAMES"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.update(extra)
    return env


def verify(analyze: str, home: Path, *units: Path) -> subprocess.CompletedProcess[str]:
    env = clean_env(HOME=str(home / "home"), XDG_RUNTIME_DIR=str(home / "run"))
    env.pop("XDG_CONFIG_HOME", None)
    return subprocess.run(
        [analyze, "--user", "verify", *map(str, units)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def fake_trainee(folder: Path) -> Path:
    """A real executable named ``trainee`` that runs this checkout's CLI."""
    folder.mkdir(parents=True, exist_ok=True)
    exe = folder / "trainee"
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m trainee "$@"\n')
    exe.chmod(0o755)
    return exe


def run_install(
    home: Path, *args: str, path: str = "/usr/bin:/bin", **env_extra: str
) -> subprocess.CompletedProcess[str]:
    env = clean_env(HOME=str(home / "home"), PATH=path, **env_extra)
    if "XDG_CONFIG_HOME" not in env_extra:
        env.pop("XDG_CONFIG_HOME", None)
    return subprocess.run(
        [str(INSTALL), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=home,
    )


def unit_settings(path: Path) -> dict[str, list[str]]:
    """``Section.Key`` -> values, in order (unit files may repeat keys)."""
    settings: dict[str, list[str]] = {}
    section = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, _, value = line.partition("=")
        settings.setdefault(f"{section}.{key}", []).append(value)
    return settings


# -- the unit files ---------------------------------------------------------------


def test_repo_units_verify_cleanly(systemd_analyze: str, home: Path, tmp_path: Path) -> None:
    units = tmp_path / "units"
    units.mkdir()
    service = (UNITS / "trainee.service").read_text()
    assert service.count(TEMPLATE_EXEC) == 1
    (units / "trainee.service").write_text(
        service.replace(TEMPLATE_EXEC, f"ExecStart={sys.executable}")
    )
    shutil.copy(UNITS / "trainee.socket", units / "trainee.socket")

    result = verify(systemd_analyze, home, units / "trainee.service", units / "trainee.socket")

    assert result.returncode == 0, result.stderr
    assert result.stderr == ""


def test_verify_reports_a_bad_setting_on_stderr(
    systemd_analyze: str, home: Path, tmp_path: Path
) -> None:
    """The empty-stderr check above can fail: verify warns about a typo and still exits 0."""
    units = tmp_path / "units"
    units.mkdir()
    service = (UNITS / "trainee.service").read_text()
    (units / "trainee.service").write_text(
        service.replace(TEMPLATE_EXEC, f"ExecStart={sys.executable}")
    )
    (units / "trainee.socket").write_text(
        (UNITS / "trainee.socket").read_text().replace("SocketMode=", "SocketMod=")
    )

    result = verify(systemd_analyze, home, units / "trainee.service", units / "trainee.socket")

    assert "Unknown key 'SocketMod'" in result.stderr


def test_socket_and_service_agree_on_the_socket_path() -> None:
    service = unit_settings(UNITS / "trainee.service")
    sock = unit_settings(UNITS / "trainee.socket")

    assert sock["Socket.ListenStream"] == ["%t/trainee/trainee.sock"]
    assert service["Service.Environment"] == ["TRAINEE_SOCKET=%t/trainee/trainee.sock"]
    assert sock["Socket.SocketMode"] == ["0600"]
    assert sock["Socket.DirectoryMode"] == ["0700"]


def test_service_is_notify_with_watchdog_and_spares_training_processes() -> None:
    service = unit_settings(UNITS / "trainee.service")

    assert service["Service.Type"] == ["notify"]
    assert service["Service.NotifyAccess"] == ["main"]
    assert service["Service.WatchdogSec"] == ["30"]
    assert service["Service.KillMode"] == ["process"]
    assert service["Service.Restart"] == ["on-failure"]
    assert service["Install.WantedBy"] == ["default.target"]
    # Anything implying NoNewPrivileges would break bwrap's guarded mode.
    for key in ("NoNewPrivileges", "PrivateTmp", "ProtectHome", "MemoryDenyWriteExecute"):
        assert f"Service.{key}" not in service


# -- install.sh -------------------------------------------------------------------


def test_install_writes_both_units_with_the_real_executable(
    systemd_analyze: str, home: Path
) -> None:
    exe = fake_trainee(home / "venv" / "bin")

    result = run_install(home, str(exe))

    assert result.returncode == 0, result.stderr
    dest = home / "home" / ".config" / "systemd" / "user"
    service = (dest / "trainee.service").read_text()
    assert f"ExecStart={exe} serve\n" in service
    assert TEMPLATE_EXEC not in service
    assert (dest / "trainee.socket").read_text() == (UNITS / "trainee.socket").read_text()
    assert sorted(p.name for p in dest.iterdir()) == ["trainee.service", "trainee.socket"]
    assert stat.S_IMODE((dest / "trainee.service").stat().st_mode) == 0o644
    assert (
        "systemctl --user daemon-reload && systemctl --user enable --now trainee.socket"
        in result.stdout
    )
    check = verify(systemd_analyze, home, dest / "trainee.service", dest / "trainee.socket")
    assert check.returncode == 0, check.stderr
    assert check.stderr == ""


def test_install_honours_xdg_config_home_and_finds_trainee_on_path(
    systemd_analyze: str, home: Path
) -> None:
    bindir = home / "bin"
    exe = fake_trainee(bindir)
    config = home / "xdg-config"

    result = run_install(home, path=f"{bindir}:/usr/bin:/bin", XDG_CONFIG_HOME=str(config))

    assert result.returncode == 0, result.stderr
    service = config / "systemd" / "user" / "trainee.service"
    assert f"ExecStart={exe} serve\n" in service.read_text()
    assert not (home / "home" / ".config").exists()


def test_install_quotes_a_path_with_spaces_and_escapes_percent(
    systemd_analyze: str, home: Path
) -> None:
    exe = fake_trainee(home / "my tools" / "100%")

    result = run_install(home, str(exe))

    assert result.returncode == 0, result.stderr
    dest = home / "home" / ".config" / "systemd" / "user"
    escaped = str(exe).replace("%", "%%")
    assert f'ExecStart="{escaped}" serve\n' in (dest / "trainee.service").read_text()
    check = verify(systemd_analyze, home, dest / "trainee.service", dest / "trainee.socket")
    assert check.returncode == 0, check.stderr
    assert check.stderr == ""


def test_install_makes_a_relative_path_absolute_and_keeps_symlinks(home: Path) -> None:
    real = fake_trainee(home / "pipx" / "venvs" / "trainee" / "bin")
    (home / "local-bin").mkdir()
    (home / "local-bin" / "trainee").symlink_to(real)

    result = run_install(home, "local-bin/trainee")

    assert result.returncode == 0, result.stderr
    service = home / "home" / ".config" / "systemd" / "user" / "trainee.service"
    assert f"ExecStart={home}/local-bin/trainee serve\n" in service.read_text()


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda home: home / "nowhere" / "trainee", "no such file"),
        (lambda home: home, "not an executable file"),
        (lambda home: fake_trainee(home / 'say "hi"'), "quotes, backslashes"),
        (lambda home: fake_trainee(home / "back\\slash"), "quotes, backslashes"),
    ],
    ids=["missing", "directory", "quote", "backslash"],
)
def test_install_refuses_a_bad_executable_and_writes_nothing(
    home: Path, make: Callable[[Path], Path], reason: str
) -> None:
    exe = make(home)

    result = run_install(home, str(exe))

    assert result.returncode == 2
    assert reason in result.stderr
    assert str(exe) in result.stderr
    assert not (home / "home" / ".config").exists()


def test_install_without_trainee_on_path_says_how_to_proceed(home: Path) -> None:
    assert shutil.which("trainee", path="/usr/bin:/bin") is None

    result = run_install(home)

    assert result.returncode == 2
    assert "no trainee executable on PATH" in result.stderr
    assert not (home / "home" / ".config").exists()


def test_install_replaces_previously_installed_units(home: Path) -> None:
    old = fake_trainee(home / "old")
    new = fake_trainee(home / "new")
    assert run_install(home, str(old)).returncode == 0

    result = run_install(home, str(new))

    assert result.returncode == 0, result.stderr
    dest = home / "home" / ".config" / "systemd" / "user"
    service = (dest / "trainee.service").read_text()
    assert f"ExecStart={new} serve\n" in service
    assert str(old) not in service
    assert sorted(p.name for p in dest.iterdir()) == ["trainee.service", "trainee.socket"]


# -- sd_notify ----------------------------------------------------------------------


@pytest.fixture
def notify_socket(short_dir: Path) -> Iterator[tuple[socket.socket, str]]:
    """A bound datagram socket and the NOTIFY_SOCKET value naming it (a path)."""
    path = short_dir / "notify"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(str(path))
        sock.settimeout(30)
        yield sock, str(path)


@pytest.fixture
def abstract_notify_socket() -> Iterator[tuple[socket.socket, str]]:
    """A datagram socket in the abstract namespace and its ``@name``."""
    name = f"trainee-test-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        sock.settimeout(30)
        yield sock, "@" + name


def run_child(code: str, env: Mapping[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


READY_CHILD = (
    "import sys\nfrom trainee.daemon import systemd\nsys.exit(0 if systemd.ready() else 3)\n"
)


def test_ready_reaches_a_path_socket(notify_socket: tuple[socket.socket, str]) -> None:
    sock, address = notify_socket

    child = run_child(READY_CHILD, clean_env(NOTIFY_SOCKET=address))

    assert child.returncode == 0, child.stderr
    assert sock.recv(4096) == b"READY=1"


def test_ready_reaches_an_abstract_socket(
    abstract_notify_socket: tuple[socket.socket, str],
) -> None:
    sock, address = abstract_notify_socket

    child = run_child(READY_CHILD, clean_env(NOTIFY_SOCKET=address))

    assert child.returncode == 0, child.stderr
    assert sock.recv(4096) == b"READY=1"


def test_each_wrapper_sends_its_message(notify_socket: tuple[socket.socket, str]) -> None:
    sock, address = notify_socket
    env = {"NOTIFY_SOCKET": address}

    assert systemd.stopping(env=env)
    assert sock.recv(4096) == b"STOPPING=1"
    assert systemd.watchdog_ping(env=env)
    assert sock.recv(4096) == b"WATCHDOG=1"
    assert systemd.status("2 sessions\nrunning", env=env)
    assert sock.recv(4096) == b"STATUS=2 sessions running"
    assert systemd.notify("READY=1\nSTATUS=up", env=env)
    assert sock.recv(4096) == b"READY=1\nSTATUS=up"


def test_notify_outside_systemd_is_a_quiet_no(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger=systemd.__name__):
        assert systemd.ready(env={}) is False
        assert systemd.notify("READY=1", env={"NOTIFY_SOCKET": ""}) is False
    assert caplog.records == []


def test_notify_to_a_missing_socket_returns_false_and_logs(
    short_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    address = str(short_dir / "gone")

    with caplog.at_level(logging.WARNING, logger=systemd.__name__):
        assert systemd.watchdog_ping(env={"NOTIFY_SOCKET": address}) is False

    assert address in caplog.text
    assert "WATCHDOG=1" in caplog.text


@pytest.mark.parametrize("value", ["relative/notify", "@", "vsock:2:1234"])
def test_notify_rejects_a_malformed_notify_socket(value: str) -> None:
    with pytest.raises(ValueError, match="NOTIFY_SOCKET"):
        systemd.ready(env={"NOTIFY_SOCKET": value})


def test_notify_rejects_an_empty_state(notify_socket: tuple[socket.socket, str]) -> None:
    with pytest.raises(ValueError, match="must not be empty"):
        systemd.notify("", env={"NOTIFY_SOCKET": notify_socket[1]})


# -- watchdog -------------------------------------------------------------------------

SELF = "<own pid>"
OTHER = "<other pid>"


def with_pids(env: dict[str, str]) -> dict[str, str]:
    pids = {SELF: str(os.getpid()), OTHER: str(os.getpid() + 1)}
    return {k: pids.get(v, v) for k, v in env.items()}


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, None),
        ({"WATCHDOG_USEC": ""}, None),
        ({"WATCHDOG_USEC": "30000000"}, 15.0),
        ({"WATCHDOG_USEC": "1"}, 0.0000005),
        ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": SELF}, 15.0),
        ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": ""}, 15.0),
        ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": OTHER}, None),
        ({"WATCHDOG_PID": SELF}, None),
    ],
)
def test_watchdog_interval(env: dict[str, str], expected: float | None) -> None:
    assert systemd.watchdog_interval(with_pids(env)) == expected


@pytest.mark.parametrize(
    ("env", "variable"),
    [
        ({"WATCHDOG_USEC": "abc"}, "WATCHDOG_USEC"),
        ({"WATCHDOG_USEC": "-5"}, "WATCHDOG_USEC"),
        ({"WATCHDOG_USEC": "0"}, "WATCHDOG_USEC"),
        ({"WATCHDOG_USEC": "1.5"}, "WATCHDOG_USEC"),
        ({"WATCHDOG_USEC": "\u00b2"}, "WATCHDOG_USEC"),
        ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "x"}, "WATCHDOG_PID"),
    ],
)
def test_watchdog_interval_rejects_malformed_values(env: dict[str, str], variable: str) -> None:
    with pytest.raises(ValueError, match=variable):
        systemd.watchdog_interval(env)


def test_watchdog_interval_reads_the_process_environment() -> None:
    child = run_child(
        "from trainee.daemon import systemd; print(systemd.watchdog_interval())",
        clean_env(WATCHDOG_USEC="8000000"),
    )
    assert child.returncode == 0, child.stderr
    assert child.stdout.strip() == "4.0"


# -- socket activation ----------------------------------------------------------------

# The child places the fds it is given at 3, 4, ... and sets LISTEN_FDS and
# LISTEN_PID itself, as systemd does between fork and exec, then runs a scenario.
ACTIVATED_CHILD = r"""
import fcntl, json, os, socket, sys
from trainee.daemon import systemd

scenario, pid_mode, *given = sys.argv[1:]
high = [fcntl.fcntl(int(fd), fcntl.F_DUPFD, 100) for fd in given]
for fd in given:
    os.close(int(fd))
for index, fd in enumerate(high):
    os.dup2(fd, systemd.SD_LISTEN_FDS_START + index)  # inheritable, as systemd leaves it
    os.close(fd)
os.environ["LISTEN_FDS"] = str(len(high))
os.environ["LISTEN_FDNAMES"] = ":".join(["control"] * len(high))
os.environ["LISTEN_PID"] = str(os.getpid() + (1 if pid_mode == "other" else 0))

def left():
    return sorted(k for k in os.environ if k.startswith("LISTEN_"))

def is_open(fd):
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False

report = {}
if scenario == "echo":
    sock = systemd.listen_unix_socket()
    report = {"fd": sock.fileno(), "inheritable": os.get_inheritable(sock.fileno()),
              "left": left(), "open": [is_open(3 + i) for i in range(len(high))]}
    conn, _ = sock.accept()
    with conn:
        conn.sendall(b"echo:" + conn.recv(1024))
    sock.close()
elif scenario == "list":
    socks = systemd.listen_fds(unset_env=os.environ.get("KEEP_ENV") != "1")
    report = {"socks": [[s.fileno(), s.family.name, s.type.name] for s in socks],
              "left": left(), "fd3_open": is_open(3)}
elif scenario == "unix":
    sock = systemd.listen_unix_socket()
    report = {"sock": None if sock is None else sock.fileno(),
              "open": [is_open(3 + i) for i in range(len(high))]}
elif scenario == "error":
    try:
        systemd.listen_fds()
    except ValueError as exc:
        report = {"error": str(exc), "left": left(), "inheritable": os.get_inheritable(3)}
print(json.dumps(report))
"""


def spawn_activated(
    scenario: str, *fds: int, pid: str = "self", **env: str
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", ACTIVATED_CHILD, scenario, pid, *map(str, fds)],
        env=clean_env(**env),
        pass_fds=fds,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def report_of(child: subprocess.Popen[str]) -> dict[str, object]:
    out, err = child.communicate(timeout=60)
    assert child.returncode == 0, err
    report = json.loads(out)
    assert isinstance(report, dict)
    return report


def listening_unix_socket(path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    sock.listen()
    return sock


def test_a_handed_over_listening_socket_is_used(short_dir: Path) -> None:
    path = short_dir / "trainee.sock"
    with listening_unix_socket(path) as listener:
        child = spawn_activated("echo", listener.fileno())
    # Only the child holds the listener now: if it dies, connecting fails at once.
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
        client.settimeout(30)
        client.connect(str(path))
        client.sendall(b"ping")
        assert client.recv(1024) == b"echo:ping"

    report = report_of(child)

    assert report == {"fd": 3, "inheritable": False, "left": [], "open": [True]}


def test_the_first_unix_listener_is_picked_and_the_rest_closed(short_dir: Path) -> None:
    datagram = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    datagram.bind(str(short_dir / "dgram"))
    pair = socket.socketpair()
    with datagram, pair[0], pair[1], listening_unix_socket(short_dir / "listen") as listener:
        child = spawn_activated("unix", datagram.fileno(), pair[0].fileno(), listener.fileno())
        report = report_of(child)

    assert report == {"sock": 5, "open": [False, False, True]}


def test_no_unix_listener_among_the_fds_gives_none(short_dir: Path) -> None:
    pair = socket.socketpair()
    with pair[0], pair[1]:
        report = report_of(spawn_activated("unix", pair[0].fileno()))

    assert report == {"sock": None, "open": [False]}


def test_listen_fds_keeps_the_environment_when_asked(short_dir: Path) -> None:
    with listening_unix_socket(short_dir / "s") as listener:
        report = report_of(spawn_activated("list", listener.fileno(), KEEP_ENV="1"))

    assert report == {
        "socks": [[3, "AF_UNIX", "SOCK_STREAM"]],
        "left": ["LISTEN_FDNAMES", "LISTEN_FDS", "LISTEN_PID"],
        "fd3_open": True,
    }


def test_another_processes_listen_pid_gives_nothing_and_clears_the_environment(
    short_dir: Path,
) -> None:
    with listening_unix_socket(short_dir / "s") as listener:
        report = report_of(spawn_activated("list", listener.fileno(), pid="other"))

    assert report == {"socks": [], "left": [], "fd3_open": True}


def test_a_passed_fd_that_is_not_a_socket_is_an_error_that_changes_nothing() -> None:
    read_end, write_end = os.pipe()
    try:
        report = report_of(spawn_activated("error", read_end))
    finally:
        os.close(read_end)
        os.close(write_end)

    assert report == {
        "error": "LISTEN_FDS=1: fd 3 is not a socket",
        "left": ["LISTEN_FDNAMES", "LISTEN_FDS", "LISTEN_PID"],
        "inheritable": True,
    }


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"LISTEN_PID": "abc", "LISTEN_FDS": "1"}, "LISTEN_PID='abc'"),
        ({"LISTEN_PID": SELF, "LISTEN_FDS": "-1"}, "LISTEN_FDS='-1'"),
        ({"LISTEN_PID": SELF, "LISTEN_FDS": "1000000"}, "LISTEN_FDS=1000000: fd"),
    ],
)
def test_listen_fds_rejects_malformed_variables(env: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        systemd.listen_fds(unset_env=False, env=with_pids(env))


def test_listen_fds_without_variables_is_empty() -> None:
    assert systemd.listen_fds(unset_env=False, env={}) == []
    assert systemd.listen_fds(unset_env=False, env={"LISTEN_PID": str(os.getpid())}) == []
    assert systemd.listen_unix_socket(unset_env=False, env={}) is None
