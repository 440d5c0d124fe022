"""The job script of the cluster backends, run for real with /bin/sh, and Slurm's header.

:func:`job_script` turns a :class:`RoundJob` into the POSIX shell script a node runs.
Each test builds a real :class:`RoundLayout` under tmp_path (in a folder whose name
needs quoting), writes the script, runs it with ``/bin/sh`` in a subprocess and looks
at what the command saw (its environment, working folder, arguments) and at the exit
status file the script leaves beside itself.
"""

from __future__ import annotations

import math
import os
import shlex
import signal
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import msgspec
import pytest

from trainee.errors import LaunchError
from trainee.launch.backends import make_backend
from trainee.launch.backends.base import (
    BWRAP_MISSING_CODE,
    RoundJob,
    exit_code_file,
    job_script,
    read_exit_code,
)
from trainee.launch.backends.slurm import SlurmBackend, SlurmOptions, parse_scontrol
from trainee.launch.layout import ProjectLayout, RoundLayout
from trainee.spec.files import BackendSpec

AWKWARD = "proj dir 'q' $HOME"
"""A project folder name the script must quote (spaces, quotes, a dollar)."""

CANARY = "TRAINEE_TEST_CALLER_ONLY"


@pytest.fixture
def rnd(tmp_path: Path) -> RoundLayout:
    layout = ProjectLayout.for_root(tmp_path / AWKWARD, env={}).session(1).round(3)
    layout.dir.mkdir(parents=True)
    layout.control.mkdir(parents=True)
    return layout


def make_job(
    rnd: RoundLayout,
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    guarded: bool = False,
    timeout_sec: float | None = 60.0,
    grace_sec: float = 5.0,
) -> RoundJob:
    workdir = cwd if cwd is not None else rnd.session.project.project_root
    workdir.mkdir(parents=True, exist_ok=True)
    return RoundJob(
        argv=tuple(argv),
        env=dict(env if env is not None else {"PATH": "/usr/bin:/bin"}),
        cwd=str(workdir),
        rnd=rnd,
        name="trainee-proj-s0001-r0003",
        timeout_sec=timeout_sec,
        grace_sec=grace_sec,
        guarded=guarded,
    )


def caller_env() -> dict[str, str]:
    """What the engine's shell would have: this process's environment plus a canary."""
    env = dict(os.environ)
    env[CANARY] = "from-the-caller"
    return env


def run_script(
    job: RoundJob, *, header: Sequence[str] = (), clean_env: bool = True, record_exit: bool = True
) -> subprocess.CompletedProcess[bytes]:
    script = job.rnd.control / "job.sh"
    script.write_text(job_script(job, header=header, clean_env=clean_env, record_exit=record_exit))
    return subprocess.run(
        ["/bin/sh", str(script)],
        env=caller_env(),
        cwd="/",
        capture_output=True,
        timeout=60,
        check=False,
    )


def env0(output: bytes) -> dict[str, str]:
    """``env -0`` output as a mapping."""
    out: dict[str, str] = {}
    for item in output.decode().split("\0"):
        if item:
            key, _, value = item.partition("=")
            out[key] = value
    return out


# -- environment, working folder, arguments ------------------------------------------------


def test_the_command_sees_exactly_the_rounds_environment(rnd: RoundLayout) -> None:
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(rnd.session.project.trainee_dir / "cache" / "home"),
        "TRAINEE_ROUND_INDEX": "3",
        "QUOTED": 'it\'s "quoted" $HOME `id` $(id) \\ back',
        "MULTI": "line one\nline two\n",
        "SPACES": "  lead and trail  ",
        "EMPTY": "",
        "EQUALS": "a=b=c",
    }
    job = make_job(rnd, ["/usr/bin/env", "-0"], env=env)

    done = run_script(job)

    assert done.returncode == 0, done.stderr
    seen = env0(done.stdout)
    assert seen == env
    assert CANARY not in seen


def test_an_empty_round_environment_is_empty(rnd: RoundLayout) -> None:
    done = run_script(make_job(rnd, ["/usr/bin/env", "-0"], env={}))
    assert done.returncode == 0, done.stderr
    assert env0(done.stdout) == {}


def test_a_shell_command_sees_the_round_env_plus_what_sh_sets(rnd: RoundLayout) -> None:
    env = {"PATH": "/usr/bin:/bin", "ONLY_ROUND": "yes"}
    done = run_script(make_job(rnd, ["/bin/sh", "-c", "/usr/bin/env -0"], env=env))
    assert done.returncode == 0, done.stderr
    seen = env0(done.stdout)
    extra = set(seen) - set(env)
    assert extra <= {"PWD", "SHLVL", "_", "OLDPWD"}, extra
    assert {k: seen[k] for k in env} == env


def test_the_command_runs_in_the_jobs_working_folder(rnd: RoundLayout) -> None:
    workdir = rnd.session.project.project_root / "sub dir" / "it's $here"
    done = run_script(make_job(rnd, ["/bin/pwd", "-P"], cwd=workdir))
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode() == os.path.realpath(workdir) + "\n"


def test_a_missing_working_folder_fails_the_script(rnd: RoundLayout) -> None:
    job = make_job(rnd, ["/usr/bin/true"])
    missing = rnd.session.project.project_root / "gone"
    done = run_script(msgspec.structs.replace(job, cwd=str(missing)))
    assert done.returncode == 1
    assert b"gone" in done.stderr


ARGS = [
    "two words",
    "it's",
    'say "hi"',
    "$HOME",
    "${PATH}",
    "`id`",
    "$(id)",
    "line1\nline2",
    "",
    "*",
    "~",
    "--flag=$(rm -rf /)",
    "back\\slash",
    "semi;colon && true | cat",
    "tab\there",
    "ünïcode ✓",
    "#not-a-comment",
    "-",
    "trailing newline\n",
]


def test_arguments_survive_quoting(rnd: RoundLayout) -> None:
    done = run_script(make_job(rnd, ["/usr/bin/printf", "%s\\0", *ARGS]))
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode().split("\0")[:-1] == ARGS


def test_the_command_name_itself_may_need_quoting(rnd: RoundLayout, tmp_path: Path) -> None:
    tool = tmp_path / "bin dir $x" / "my 'tool'"
    tool.parent.mkdir()
    tool.write_text('#!/bin/sh\nprintf "%s|" "$@"\n')
    tool.chmod(0o755)
    done = run_script(make_job(rnd, [str(tool), "a b", "$c"]))
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode() == "a b|$c|"


# -- the exit status -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "code"),
    [
        ("exit 0", 0),
        ("exit 7", 7),
        ("exit 255", 255),
        ("kill -TERM $$", 128 + 15),
    ],
)
def test_the_exit_status_is_recorded_and_returned(
    rnd: RoundLayout, command: str, code: int
) -> None:
    done = run_script(make_job(rnd, ["/bin/sh", "-c", command]))
    assert done.returncode == code, done.stderr
    assert exit_code_file(rnd).read_text() == f"{code}\n"
    # in the control folder, out of the job's workspace (which the job can write)
    assert exit_code_file(rnd) == rnd.control / "job-exit-code"
    assert not (rnd.dir / "job-exit-code").exists()


def test_a_command_that_does_not_exist_records_127(rnd: RoundLayout) -> None:
    done = run_script(make_job(rnd, [str(rnd.dir / "no such program")]))
    assert done.returncode == 127
    assert exit_code_file(rnd).read_text() == "127\n"


def test_the_exit_status_file_is_replaced_atomically(rnd: RoundLayout, tmp_path: Path) -> None:
    """Written to a temporary file and renamed: a reader sees the old file or the whole
    new one. A hard link to the old file keeps the old content (an in-place write
    would change it) and no temporary file is left."""
    target = exit_code_file(rnd)
    target.write_text("old\n")
    witness = tmp_path / "witness"
    os.link(target, witness)
    old_inode = target.stat().st_ino

    done = run_script(make_job(rnd, ["/bin/sh", "-c", "exit 3"]))

    assert done.returncode == 3
    assert target.read_text() == "3\n"
    assert target.stat().st_ino != old_inode
    assert witness.read_text() == "old\n"
    assert sorted(p.name for p in rnd.control.iterdir()) == ["job-exit-code", "job.sh"]


def test_without_record_exit_no_file_is_written(rnd: RoundLayout) -> None:
    done = run_script(make_job(rnd, ["/bin/sh", "-c", "exit 4"]), record_exit=False)
    assert done.returncode == 4
    assert not exit_code_file(rnd).exists()


def test_output_goes_to_the_scripts_stdout_and_stderr(rnd: RoundLayout) -> None:
    done = run_script(make_job(rnd, ["/bin/sh", "-c", "echo out; echo err >&2"]))
    assert (done.stdout, done.stderr) == (b"out\n", b"err\n")


# -- guarded mode ----------------------------------------------------------------------------


def test_guarded_without_bwrap_on_the_node_says_so_and_exits_97(
    rnd: RoundLayout, tmp_path: Path
) -> None:
    bwrap = str(tmp_path / "no where" / "bwrap")
    marker = tmp_path / "ran"
    argv = [bwrap, "--ro-bind", "/", "/", "/usr/bin/touch", str(marker)]
    done = run_script(make_job(rnd, argv, guarded=True))

    assert BWRAP_MISSING_CODE == 97
    assert done.returncode == BWRAP_MISSING_CODE
    stderr = done.stderr.decode()
    assert (
        f"trainee: guarded mode needs bubblewrap ({bwrap}) on node {socket.gethostname()}, "
        "which is not there; install bubblewrap on the nodes or run with --unsafe"
    ) in stderr
    assert exit_code_file(rnd).read_text() == "97\n"
    assert not marker.exists()


def test_guarded_with_a_non_executable_bwrap_is_also_97(rnd: RoundLayout, tmp_path: Path) -> None:
    fake = tmp_path / "bwrap"
    fake.write_text("not a program\n")
    fake.chmod(0o644)
    done = run_script(make_job(rnd, [str(fake), "/usr/bin/true"], guarded=True))
    assert done.returncode == BWRAP_MISSING_CODE
    assert b"guarded mode needs bubblewrap" in done.stderr


def test_guarded_with_the_sandbox_present_runs_the_command(rnd: RoundLayout) -> None:
    env = {"PATH": "/usr/bin:/bin", "X": "1"}
    done = run_script(make_job(rnd, ["/usr/bin/env", "-0"], env=env, guarded=True))
    assert done.returncode == 0, done.stderr
    assert env0(done.stdout) == env
    assert exit_code_file(rnd).read_text() == "0\n"


# -- clean_env=False: the engine passes the environment ------------------------------------


def test_without_clean_env_the_callers_environment_is_kept(rnd: RoundLayout) -> None:
    job = make_job(rnd, ["/usr/bin/env", "-0"], env={"ONLY_IN_THE_ROUND": "1"})
    done = run_script(job, clean_env=False)
    assert done.returncode == 0, done.stderr
    seen = env0(done.stdout)
    assert seen[CANARY] == "from-the-caller"
    assert "ONLY_IN_THE_ROUND" not in seen
    assert "env -i" not in job_script(job, clean_env=False)
    assert exit_code_file(rnd).read_text() == "0\n"


def test_without_clean_env_cwd_and_arguments_still_apply(rnd: RoundLayout) -> None:
    workdir = rnd.session.project.project_root / "w d"
    done = run_script(
        make_job(
            rnd, ["/bin/sh", "-c", 'pwd -P; printf "%s\\n" "$1"', "sh", "a 'b' $c"], cwd=workdir
        ),
        clean_env=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode() == f"{os.path.realpath(workdir)}\na 'b' $c\n"


# -- Slurm's header --------------------------------------------------------------------------


def slurm(**options: object) -> SlurmBackend:
    return SlurmBackend(SlurmOptions(**options), {"PATH": "/nowhere"})  # type: ignore[arg-type]


def sbatch_lines(header: Sequence[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in header:
        assert line.startswith("#SBATCH "), line
        key, _, value = line.removeprefix("#SBATCH ").partition("=")
        out[key] = value
    return out


def test_the_header_always_names_the_job_its_log_and_folder(rnd: RoundLayout) -> None:
    """In a project folder whose name needs quoting: what sbatch reads from each line."""
    job = make_job(rnd, ["/usr/bin/true"], timeout_sec=None)
    header = slurm()._header(job)
    log = str(rnd.log)
    assert [line.split("=", 1)[0] for line in header] == [
        "#SBATCH --job-name",
        "#SBATCH --output",
        "#SBATCH --error",
        "#SBATCH --open-mode",
        "#SBATCH --no-requeue",
        "#SBATCH --chdir",
        "#SBATCH --export",
    ]
    assert [sbatch_words(line) for line in header] == [
        ["--job-name=trainee-proj-s0001-r0003"],
        [f"--output={log}"],
        [f"--error={log}"],
        ["--open-mode=append"],
        ["--no-requeue"],
        [f"--chdir={job.cwd}"],
        # the round's environment reaches the job through sbatch's own, not the script
        ["--export=ALL"],
    ]
    assert log.endswith(".trainee/artifacts/session-0001/round-0003.log")


def test_the_header_carries_every_option(rnd: RoundLayout) -> None:
    job = make_job(rnd, ["/usr/bin/true"])
    header = slurm(
        partition="gpu",
        time_limit="02:00:00",
        cpus=8,
        gpus=1,
        mem="32G",
        account="my-project",
        qos="normal",
        sbatch_args=("--constraint=a100", "--exclusive"),
    )._header(job)
    assert header[7:] == [
        "#SBATCH --partition=gpu",
        "#SBATCH --time=02:00:00",
        "#SBATCH --cpus-per-task=8",
        "#SBATCH --gpus=1",
        "#SBATCH --mem=32G",
        "#SBATCH --account=my-project",
        "#SBATCH --qos=normal",
        "#SBATCH --constraint=a100",
        "#SBATCH --exclusive",
    ]


@pytest.mark.parametrize(
    ("timeout", "grace", "minutes"),
    [
        (3600.0, 30.0, 62),  # 60.5 min -> 61, plus one
        (3600.0, 0.0, 61),
        (60.0, 0.0, 2),
        (60.0, 30.0, 3),
        (1.0, 0.0, 2),
        (90.0, 30.0, 3),
        (5400.0, 59.0, 92),
    ],
)
def test_the_default_time_limit_is_timeout_plus_grace_rounded_up_plus_a_minute(
    rnd: RoundLayout, timeout: float, grace: float, minutes: int
) -> None:
    job = make_job(rnd, ["/usr/bin/true"], timeout_sec=timeout, grace_sec=grace)
    assert minutes == math.ceil((timeout + grace) / 60) + 1
    assert sbatch_lines(slurm()._header(job))["--time"] == str(minutes)


def test_an_explicit_time_limit_wins_and_no_timeout_means_no_limit(rnd: RoundLayout) -> None:
    job = make_job(rnd, ["/usr/bin/true"], timeout_sec=3600.0)
    assert sbatch_lines(slurm(time_limit="1-00:00:00")._header(job))["--time"] == "1-00:00:00"
    untimed = make_job(rnd, ["/usr/bin/true"], timeout_sec=None)
    assert "--time" not in sbatch_lines(slurm()._header(untimed))


def test_whole_number_cpus_from_the_spec_reach_sbatch_as_integers(rnd: RoundLayout) -> None:
    backend = make_backend(BackendSpec(type="slurm", cpus=4.0, gpus=2.0, mem="8G"), {})
    assert isinstance(backend, SlurmBackend)
    lines = sbatch_lines(backend._header(make_job(rnd, ["/usr/bin/true"])))
    assert (lines["--cpus-per-task"], lines["--gpus"], lines["--mem"]) == ("4", "2", "8G")


def test_the_sbatch_script_runs_under_plain_sh_and_keeps_the_header_first(
    rnd: RoundLayout,
) -> None:
    """sbatch reads ``#SBATCH`` lines only before the first command; sh ignores them."""
    job = make_job(rnd, ["/bin/sh", "-c", "echo ran; exit 5"])
    header = slurm(partition="debug", cpus=1)._header(job)
    text = job_script(job, header=header)
    lines = text.splitlines()
    assert lines[0] == "#!/bin/sh"
    assert lines[1 : 1 + len(header)] == header
    assert not any(line.startswith("#SBATCH") for line in lines[1 + len(header) :])

    done = run_script(job, header=header)
    assert (done.returncode, done.stdout) == (5, b"ran\n")
    assert exit_code_file(rnd).read_text() == "5\n"


def sbatch_words(line: str) -> list[str]:
    """The words sbatch 22.05 takes from one ``#SBATCH`` line (``_get_argument`` in
    src/sbatch/opt.c, and checked against the real sbatch): whitespace separates words;
    single or double quotes group; a backslash is dropped and the next character taken
    as is, except that whitespace still ends a word outside quotes; an unquoted,
    unescaped ``#`` ends the line."""
    words: list[str] = []
    rest = line.removeprefix("#SBATCH")
    i = 0
    while i < len(rest):
        while i < len(rest) and rest[i].isspace():
            i += 1
        word, quote, escaped, started = "", "", False, False
        while i < len(rest) and (quote or not rest[i].isspace()) and rest[i] != "\n":
            c = rest[i]
            i += 1
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = started = True
                continue
            elif quote:
                if c == quote:
                    quote = ""
                    continue
            elif c in "\"'":
                quote, started = c, True
                continue
            elif c == "#":
                return [*words, word] if started else words
            word += c
            started = True
        if quote:
            raise ValueError(f"sbatch: unmatched {quote} in {line!r}")
        if started:
            words.append(word)
    return words


def test_sbatch_words_follows_what_sbatch_22_05_reads() -> None:
    # each case was checked with a real sbatch 22.05 (the StdOut scontrol reports)
    assert sbatch_words("#SBATCH --a=b --c") == ["--a=b", "--c"]
    assert sbatch_words('#SBATCH --output="/x/a b.log"') == ["--output=/x/a b.log"]
    assert sbatch_words("#SBATCH --output='/x/a b.log'") == ["--output=/x/a b.log"]
    assert sbatch_words('#SBATCH --output="/x/a#b.log"') == ["--output=/x/a#b.log"]
    assert sbatch_words('#SBATCH --output="/x/it\'s.log"') == ["--output=/x/it's.log"]
    assert sbatch_words('#SBATCH --output="/x/x\\y.log"') == ["--output=/x/xy.log"]
    assert sbatch_words('#SBATCH --output="/x/x\\\\y.log"') == ["--output=/x/x\\y.log"]
    assert sbatch_words('#SBATCH --output="/x/a\\"b.log"') == ['--output=/x/a"b.log']
    assert sbatch_words('#SBATCH --output=/x/"a b".log') == ["--output=/x/a b.log"]
    assert sbatch_words("#SBATCH --output=/x/a\\ b.log") == ["--output=/x/a", "b.log"]
    assert sbatch_words("#SBATCH --output=/x/a#b") == ["--output=/x/a"]
    assert sbatch_words("#SBATCH --output=/x/a b") == ["--output=/x/a", "b"]


@pytest.mark.parametrize(
    "folder",
    [
        "plain",
        "my project",
        "run#2",
        "it's",
        "tab\there",
        "back\\slash",
    ],
)
def test_header_paths_reach_sbatch_as_one_word(tmp_path: Path, folder: str) -> None:
    rnd = ProjectLayout.for_root(tmp_path / folder, env={}).session(1).round(3)
    job = make_job(rnd, ["/usr/bin/true"])
    header = slurm(sbatch_args=("--comment=a b #c",))._header(job)
    assert [len(sbatch_words(line)) for line in header] == [1] * len(header)
    words = [w for line in header for w in sbatch_words(line)]
    assert f"--output={rnd.log}" in words
    assert f"--error={rnd.log}" in words
    assert f"--chdir={job.cwd}" in words
    assert "--comment=a b #c" in words


def test_a_double_quote_in_a_path_never_reaches_sbatch_mangled(tmp_path: Path) -> None:
    """Refused with a LaunchError naming the value, or read back as one word."""
    rnd = ProjectLayout.for_root(tmp_path / 'say "hi"', env={}).session(1).round(3)
    job = make_job(rnd, ["/usr/bin/true"])
    try:
        header = slurm()._header(job)
    except LaunchError as exc:
        assert 'say "hi"' in exc.message
        return
    words = [w for line in header for w in sbatch_words(line)]
    assert f"--output={rnd.log}" in words
    assert f"--chdir={job.cwd}" in words


# -- scontrol show job -----------------------------------------------------------------------

SCONTROL = """\
JobId=4242 JobName=trainee-proj-s0001-r0003
   UserId=alice(1000) GroupId=alice(1000) MCS_label=N/A
   Priority=4294901757 Nice=0 Account=(null) QOS=normal
   JobState=FAILED Reason=NonZeroExitCode Dependency=(null)
   Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=3:0
   DerivedExitCode=0:0
   RunTime=00:00:02 TimeLimit=00:02:00 TimeMin=N/A
   SubmitTime=2024-05-01T10:00:00 EligibleTime=2024-05-01T10:00:00
   AccrueTime=2024-05-01T10:00:00
   StartTime=2024-05-01T10:00:01 EndTime=2024-05-01T10:00:03 Deadline=N/A
   SuspendTime=None SecsPreSuspend=0 LastSchedEval=2024-05-01T10:00:01 Scheduler=Main
   Partition=debug AllocNode:Sid=login1:12345
   ReqNodeList=(null) ExcNodeList=(null)
   NodeList=node1
   BatchHost=node1
   NumNodes=1 NumCPUs=1 NumTasks=1 CPUs/Task=1 ReqB:S:C:T=0:0:*:*
   TRES=cpu=1,mem=1G,node=1,billing=1
   Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=*
   MinCPUsNode=1 MinMemoryNode=0 MinTmpDiskNode=0
   Features=(null) DelayBoot=00:00:00
   OverSubscribe=OK Contiguous=0 Licenses=(null) Network=(null)
   Command=/srv/proj/.trainee/runs/session-0001/round-0003/job.sbatch
   WorkDir=/srv/proj
   StdErr=/srv/proj/.trainee/artifacts/session-0001/round-0003.log
   StdIn=/dev/null
   StdOut=/srv/proj/.trainee/artifacts/session-0001/round-0003.log
   Power=
   TresPerJob=gres:gpu:1

"""


def test_parse_scontrol_reads_a_real_show_job_listing() -> None:
    info = parse_scontrol(SCONTROL)
    assert info["JobId"] == "4242"
    assert info["JobName"] == "trainee-proj-s0001-r0003"
    assert info["JobState"] == "FAILED"
    assert info["Reason"] == "NonZeroExitCode"
    assert info["ExitCode"] == "3:0"
    assert info["DerivedExitCode"] == "0:0"
    assert info["TRES"] == "cpu=1,mem=1G,node=1,billing=1"
    assert info["AllocNode:Sid"] == "login1:12345"
    assert info["StdOut"] == "/srv/proj/.trainee/artifacts/session-0001/round-0003.log"
    assert info["Power"] == ""
    assert info["TresPerJob"] == "gres:gpu:1"


def test_parse_scontrol_keeps_the_first_record_and_handles_one_line_output() -> None:
    second = SCONTROL.replace("JobId=4242", "JobId=4243").replace("FAILED", "RUNNING")
    info = parse_scontrol(SCONTROL + second)
    assert (info["JobId"], info["JobState"]) == ("4242", "FAILED")
    # ``scontrol -o`` prints the same fields on one line
    one_line = " ".join(SCONTROL.split())
    assert parse_scontrol(one_line) == parse_scontrol(SCONTROL)


def test_parse_scontrol_of_nothing_is_empty() -> None:
    assert parse_scontrol("") == {}
    assert parse_scontrol("slurm_load_jobs error: Invalid job id specified\n") == {}


def test_the_script_quotes_with_shlex(rnd: RoundLayout) -> None:
    """A sanity check on the text: every argument appears shlex-quoted."""
    job = make_job(rnd, ["/usr/bin/printf", "%s", "a b"])
    text = job_script(job)
    assert shlex.join(job.argv) in text
    assert f"cd {shlex.quote(job.cwd)} || exit 1" in text


POLITE_JOB = """\
import os, signal, sys, time
def on_term(signum, frame):
    time.sleep(0.3)  # saving a checkpoint
    print("saved", flush=True)
    sys.exit(5)
signal.signal(signal.SIGTERM, on_term)
ignored = int(next(l for l in open("/proc/self/status") if l.startswith("SigIgn")).split()[1], 16)
print("sigint ignored:", bool(ignored & (1 << (signal.SIGINT - 1))), flush=True)
print("ready", flush=True)
time.sleep(30)
"""


@pytest.mark.parametrize("shell", ["/bin/sh", "/bin/bash"])
def test_an_engine_stop_lets_the_command_save_and_records_its_own_status(
    rnd: RoundLayout, shell: str
) -> None:
    """Slurm's scancel and Ray's stop_job SIGTERM every process of the job: the script
    survives, the command gets its time to save, and the status recorded is the
    command's own (5), not the shell's 143. The command does not start with SIGINT
    ignored (as a background command of a non-interactive shell would)."""
    job = make_job(rnd, [sys.executable, "-c", POLITE_JOB], env=caller_env())
    script = job.rnd.control / "job.sh"
    script.write_text(job_script(job, clean_env=False))
    proc = subprocess.Popen(
        [shell, str(script)],
        env=caller_env(),
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None
    lines = [proc.stdout.readline(), proc.stdout.readline()]
    assert lines == ["sigint ignored: False\n", "ready\n"]
    os.killpg(proc.pid, signal.SIGTERM)  # every process of the job, as the engines do
    rest, _ = proc.communicate(timeout=30)
    assert "saved" in rest
    assert proc.returncode == 5
    assert read_exit_code(job.rnd) == 5


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("HF_TOKEN", True),
        ("OPENAI_API_KEY", True),
        ("AWS_SECRET_ACCESS_KEY", True),
        ("GITHUB_ACCESSTOKEN", True),
        ("DB_PASSWORD", True),
        ("GOOGLE_APPLICATION_CREDENTIALS", True),
        ("TOKENIZERS_PARALLELISM", False),
        ("KEYBOARD_LAYOUT", False),
        ("AUTHOR_NAME", False),
        ("CUDA_VISIBLE_DEVICES", False),
    ],
)
def test_secret_names_are_words_not_substrings(name: str, secret: bool) -> None:
    """What is withheld from Ray (and never stored): a secret-like word of the name."""
    from trainee.launch.render import is_secret_name

    assert is_secret_name(name) is secret


def test_a_job_script_with_a_token_claims_its_launch_once(rnd: RoundLayout, tmp_path: Path) -> None:
    """The script claims the launch before the command runs: a second run of the same
    script (the engine requeued it, or a late copy started) runs nothing, and neither
    does a script whose launch a restarted daemon revoked first."""
    from trainee.monitor.process import read_claim, revoke_launch

    marker = tmp_path / "ran"
    job = msgspec.structs.replace(
        make_job(rnd, ["/bin/sh", "-c", f"echo x >> {shlex.quote(str(marker))}"]),
        token="00112233aabbccdd",
    )
    assert run_script(job).returncode == 0
    assert run_script(job).returncode == 0
    assert marker.read_text() == "x\n"  # once
    claim = read_claim(rnd, "00112233aabbccdd")
    assert claim is not None and claim.by == "job"
    assert revoke_launch(rnd, "00112233aabbccdd") == claim  # claimed: not revocable

    revoked = msgspec.structs.replace(job, token="99887766ffeeddcc")
    assert revoke_launch(rnd, "99887766ffeeddcc") is None
    assert run_script(revoked).returncode == 0
    assert marker.read_text() == "x\n"  # the revoked launch ran nothing
    assert not list(rnd.control.glob(".claim-*.tmp"))
