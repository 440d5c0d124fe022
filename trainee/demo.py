"""``make demo`` / ``python -m trainee.demo``: the whole loop, offline, in under a minute.

Copies the bundled ``examples/mlp-flags`` project to a fresh temporary folder (the
repository stays clean), starts a private daemon on a socket inside that folder
and runs the real CLI there: ``trainee run --policy tpe --max-rounds 6``, live in
the terminal. Rounds run in the bubblewrap sandbox when it works here, else
unsafe (said so). It ends with the best params, the change over the baseline and
the report path, then stops its daemon. Exit status 0 only when the best round
beat the baseline.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from trainee import errors
from trainee.cli import daemon_client
from trainee.launch.layout import ProjectLayout

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "mlp-flags"
ROUNDS = 6
POLICY = "tpe"
_IGNORE = shutil.ignore_patterns(
    "runs", "artifacts", "cache", "logs", "runtime.sqlite3*", "outputs", "__pycache__"
)


def say(text: str = "") -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def sandbox_works() -> tuple[bool, str]:
    """Whether guarded rounds can run here (bubblewrap installed and allowed)."""
    from trainee.launch.sandbox import check_bwrap

    try:
        check_bwrap()
    except errors.TraineeError as exc:
        return False, exc.message
    return True, ""


def demo_env(folder: Path) -> dict[str, str]:
    """The environment of the demo's CLI and daemon: a private socket in ``folder``, and
    this interpreter's folder first on PATH so ``python`` in the example's command is
    the one with numpy."""
    env = {k: v for k, v in os.environ.items() if k not in ("TRAINEE_SOCKET", "LISTEN_FDS")}
    env["TRAINEE_SOCKET"] = str(folder / "run" / "trainee.sock")
    env["TRAINEE_HTTP_PORT"] = "0"
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["PYTHONUNBUFFERED"] = "1"
    return env


def cli(env: dict[str, str], *args: str, capture: bool = False) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trainee", *args],
        env=env,
        text=True,
        capture_output=capture,
        check=False,
    )


def fmt_params(params: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in params.items())


def summarize(project: Path, env: dict[str, str]) -> tuple[bool, str]:
    """``(improved, text)`` for the project's latest session, asked from the daemon."""
    old = os.environ.get("TRAINEE_SOCKET")
    os.environ["TRAINEE_SOCKET"] = env["TRAINEE_SOCKET"]
    try:
        state: dict[str, Any] = daemon_client.call(
            "loop_get", {"project_root": str(project)}, autostart=False
        )
    finally:
        if old is None:
            os.environ.pop("TRAINEE_SOCKET", None)
        else:
            os.environ["TRAINEE_SOCKET"] = old
    session = state["session"]
    report = ProjectLayout.for_root(project, env).session(int(session["index"])).report
    best, baseline = state.get("best"), state.get("baseline")
    lines = [f"demo: {session['id']} {session['status']} ({session.get('stop_reason')})"]
    improved = False
    if best and baseline and best.get("primary_metric") is not None:
        b, base = float(best["primary_metric"]), float(baseline["primary_metric"])
        improved = best["index"] != baseline["index"] and b < base
        change = (b - base) / abs(base) * 100 if base else 0.0
        lines.append(
            f"best val_loss {b:.6g} in round {best['index']} vs the baseline's {base:.6g} "
            f"(round {baseline['index']}): {change:+.1f}%"
        )
        lines.append(f"best params: {fmt_params(best['params'])}")
        lines.append(f"baseline params: {fmt_params(baseline['params'])}")
    else:
        lines.append("no round produced val_loss")
    lines.append(f"report: {report}" + ("" if report.exists() else " (not written)"))
    if not improved:
        lines.append("the metric did not improve over the baseline")
    return improved, "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m trainee.demo",
        description="Run trainee's loop offline on the bundled mlp-flags example (TPE policy).",
    )
    p.add_argument("--rounds", type=int, default=ROUNDS, help=f"rounds to run (default {ROUNDS})")
    p.add_argument(
        "--folder", default=None, help="where to copy the example (default: a new temp folder)"
    )
    args = p.parse_args(argv)
    if args.rounds < 1:
        p.error("--rounds must be at least 1")
    if args.folder:
        folder = Path(args.folder).resolve()
        if folder.exists() and any(folder.iterdir()):
            p.error(f"--folder {folder}: exists and is not empty")
        folder.mkdir(parents=True, exist_ok=True)
    else:
        base = "/tmp" if os.path.isdir("/tmp") else None  # AF_UNIX paths must stay short
        folder = Path(tempfile.mkdtemp(prefix="trainee-demo-", dir=base))
    project = folder / EXAMPLE.name
    shutil.copytree(EXAMPLE, project, ignore=_IGNORE)
    env = demo_env(folder)
    say(f"demo: copied {EXAMPLE.relative_to(REPO)} to {project}")
    guarded, why = sandbox_works()
    mode = ["--guarded"] if guarded else ["--unsafe"]
    if not guarded:
        say(f"demo: the bubblewrap sandbox is not usable here ({why}); rounds run --unsafe")
    say(
        f"demo: trainee run --policy {POLICY} --max-rounds {args.rounds} "
        f"{mode[0]} (private daemon on {env['TRAINEE_SOCKET']})"
    )
    say()
    try:
        run = cli(
            env, "run", str(project), "--policy", POLICY, "--max-rounds", str(args.rounds), *mode
        )
        say()
        try:
            improved, text = summarize(project, env)
        except errors.TraineeError as exc:
            say(f"demo: could not read the session: {exc.message}")
            return 1
        say(text)
        say(f"demo: the copy stays in {folder} (delete it when done)")
        return 0 if improved and run.returncode == 0 else 1
    finally:
        stop = cli(env, "daemon", "stop", capture=True)
        if stop.returncode not in (0, 69):
            say(f"demo: stopping the private daemon failed: {stop.stderr.strip()}")


if __name__ == "__main__":
    sys.exit(main())
