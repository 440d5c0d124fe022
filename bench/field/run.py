"""Field test: trainee on real public training projects, as a new user would use it.

For each project of projects.py, in a fresh copy of its pinned source:

    trainee init --skip-provider-test [--command CMD]   (--command only when init missed it
                                                          and this trainee has the option)
    <patch: the project.yaml part of patches/NAME.patch>
    trainee prepare --skip-provider-test
    <patch: the tuning.yaml part>
    trainee doctor --json --skip-provider-test [--policy tpe]
    trainee run --dry-run
    trainee run --policy tpe --max-rounds 3             (guarded, tiny budgets via fixed args)

then one table: entrypoint found / data / output redirection / training limit / proposed
metric (validation?) / tunables proposed and rounds crashed by a suggested value /
hand-edited lines (the + lines of the patch) / session outcome. What init and prepare
proposed is read from their files before the patch; the session from its ledger.

Not in CI. Sources come from /work/.mirror/OWNER+NAME/repo (the `fetch` tool brings
them); venvs, copies and logs live in the cache folder (--cache, default
$FIELD_CACHE or /work/field-cache), never in this repository. One project at a time;
the projects' torch runs with OMP_NUM_THREADS=1 (a 2-core machine shared with tests).

    .venv/bin/python bench/field/run.py                    # all projects, this worktree's trainee
    .venv/bin/python bench/field/run.py --trainee /work/main --only makemore,nanogpt
    .venv/bin/python bench/field/run.py --only timm --stop-after prepare
        (then edit the copy's .trainee/ files by hand and save the edits:)
    .venv/bin/python bench/field/run.py --save-patch timm
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE))

from projects import BY_NAME, PROJECTS, VENVS, Project  # noqa: E402

PATCHES = HERE / "patches"
DATAGEN = HERE / "datagen.py"
MIRROR = Path("/work/.mirror")
STEP_TIMEOUT = 600.0
SESSION_RE = re.compile(r"^(session-\d+): (\w+)(?: \((.*)\))?\s*$", re.M)
ERROR_RE = re.compile(r"^\s*[\w.]*(Error|Exception|Interrupt)\b")
VALIDATION_RE = re.compile(r"val|valid|test|eval|dev", re.I)
DROPPED_ENV = ("TRAINEE_", "OPENAI_", "ANTHROPIC_", "MOONSHOT_", "LLM_PROVIDER", "VIRTUAL_ENV")


@dataclass
class Step:
    name: str
    argv: list[str]
    rc: int | None
    seconds: float
    log: str


@dataclass
class Result:
    project: str
    steps: list[Step] = field(default_factory=list)
    entrypoint: str = ""
    data: str = ""
    output: str = ""
    limit: str = ""
    metric: str = ""
    tunables: str = ""
    edited: str = ""
    outcome: str = ""
    doctor: str = ""
    dry_run: str = ""
    notes: list[str] = field(default_factory=list)


# ---------------------------------------------------------------- helpers


def sh(argv: list[str], *, cwd: Path, env: dict[str, str], log: Path, timeout: float) -> int | None:
    """Run argv, its output (stdout+stderr) to log; None on timeout (process group killed)."""
    with open(log, "wb") as fh:
        fh.write(("$ " + shlex.join(argv) + "\n").encode())
        fh.flush()
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdout=fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            return None


def read_yaml(path: Path) -> Any:
    from ruamel.yaml import YAML

    if not path.is_file():
        return None
    try:
        return YAML(typ="safe").load(path.read_text())
    except Exception as exc:
        return {"_error": str(exc)}


def log_text(path: Path, limit: int = 200_000) -> str:
    try:
        return path.read_text(errors="replace")[-limit:]
    except OSError:
        return ""


def trainee_has(trainee: Path, command: str, option: str) -> bool:
    out = subprocess.run(
        [str(trainee), command, "--help"], capture_output=True, text=True, check=False
    )
    return option in out.stdout


# ---------------------------------------------------------------- sources and venvs


def ensure_source(project: Project, cache: Path) -> Path:
    """cache/src/OWNER+NAME at the pinned commit, cloned from the fetch tool's mirror."""
    key = project.repo.replace("/", "+")
    src = cache / "src" / key
    if not (src / ".git").is_dir():
        mirror = MIRROR / key / "repo"
        if not mirror.is_dir():
            raise SystemExit(
                f"{project.name}: no source: fetch github:{project.repo} first "
                f"(expected the bare repository {mirror})"
            )
        subprocess.run(["git", "clone", "-q", "--no-checkout", str(mirror), str(src)], check=True)
    head = subprocess.run(
        ["git", "-C", str(src), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    marker = src / ".git" / "field-checked-out"
    if head != project.commit or not marker.is_file():
        # a mirror may lack its largest blobs: check out everything else
        listing = subprocess.run(
            ["git", "-C", str(src), "ls-tree", "-r", "-l", project.commit],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        missing = [
            line.split("\t", 1)[1]
            for line in listing.splitlines()
            if line.split("\t", 1)[0].split()[3] == "BAD"
        ]
        spec = [".", *(f":(exclude){m}" for m in missing)]
        subprocess.run(
            ["git", "-C", str(src), "checkout", "-q", project.commit, "--", *spec], check=True
        )
        marker.write_text(project.commit + "\n" + "\n".join(missing))
    return src


def ensure_venv(key: str, cache: Path) -> Path:
    venv = cache / f"venv-{key}"
    stamp = venv / ".field-installed"
    if stamp.is_file():
        return venv
    print(f"== creating {venv} (pip, once)", flush=True)
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    for group in VENVS[key]:
        subprocess.run([*pip, *group], check=True)
    stamp.write_text("\n".join(" ".join(g) for g in VENVS[key]) + "\n")
    return venv


def fresh_copy(project: Project, src: Path, dest: Path) -> Path:
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    ignore = shutil.ignore_patterns(".git")
    for part in project.copy:
        if part == ".":
            shutil.copytree(src, dest, ignore=ignore, dirs_exist_ok=True, symlinks=True)
        else:
            shutil.copytree(src / part, dest / part, ignore=ignore, symlinks=True)
    return (dest / project.root).resolve()


# ---------------------------------------------------------------- patches


def patch_sections(text: str) -> tuple[list[str], list[str]]:
    """The unified diff split per file, in two stages: the sections before the first
    tuning.yaml one (or the first repeated file) are applied before `trainee prepare`
    (project.yaml edits that discovery reads: the command, fixed args), the others
    after it (tuning.yaml edits, and a second project.yaml section: edits a user makes
    once the tunables are there)."""
    sections: list[tuple[str, str]] = []
    current: list[str] | None = None
    name = ""
    for line in text.splitlines(keepends=True):
        if line.startswith("--- "):
            if current is not None:
                sections.append((name, "".join(current)))
            current = [line]
            name = ""
        elif line.startswith("+++ ") and current is not None and not name:
            target = line[4:].split("\t")[0].strip()
            name = target[2:] if target.startswith("b/") else target
            current.append(line)
        elif current is not None:
            current.append(line)
    if current is not None:
        sections.append((name, "".join(current)))
    before: list[str] = []
    after: list[str] = []
    seen: set[str] = set()
    for name, section in sections:
        if after or name == ".trainee/tuning.yaml" or name in seen:
            after.append(section)
        else:
            before.append(section)
        seen.add(name)
    return before, after


def count_edits(text: str) -> tuple[int, int, int]:
    """(+ lines, of which budget lines, - lines). A line ending in `# budget` only sizes
    the run for this machine (a tiny training limit, a small model for the CPU): a user
    sets such values too, but they are not a fix of what trainee proposed."""
    plus = budget = minus = 0
    for line in text.splitlines():
        if line.startswith("+") and not line.startswith("+++"):
            plus += 1
            budget += line.rstrip().endswith("# budget")
        elif line.startswith("-") and not line.startswith("---"):
            minus += 1
    return plus, budget, minus


def apply_section(section: str, project_dir: Path, log: Path) -> bool:
    proc = subprocess.run(
        ["patch", "-p1", "--forward", "--batch", "--no-backup-if-mismatch", "-r", "-"],
        cwd=project_dir,
        input=section,
        capture_output=True,
        text=True,
    )
    with open(log, "a") as fh:
        fh.write(proc.stdout + proc.stderr)
    return proc.returncode == 0


def save_patch(name: str, cache: Path) -> None:
    found = sorted(p for p in (cache / "runs").glob(f"2*/{name}") if (p / "orig").is_dir())
    if not found:
        raise SystemExit(f"no run of {name} in {cache / 'runs'}: run --stop-after prepare first")
    base = found[-1]  # the newest run of that project
    project = BY_NAME[name]
    project_dir = (base / "work" / project.root).resolve()
    orig = base / "orig"
    chunks = []
    for rel in (".trainee/project.yaml", ".trainee/tuning.yaml"):
        before = orig / rel
        after = project_dir / rel
        proc = subprocess.run(
            ["diff", "-u", "--label", f"a/{rel}", "--label", f"b/{rel}", str(before), str(after)],
            capture_output=True,
            text=True,
        )
        if proc.returncode > 1:
            raise SystemExit(proc.stderr)
        chunks.append(proc.stdout)
    text = "".join(chunks)
    PATCHES.mkdir(exist_ok=True)
    path = PATCHES / f"{name}.patch"
    if text:
        path.write_text(text)
        plus, budget, minus = count_edits(text)
        print(f"wrote {path}: +{plus} ({budget} budget) -{minus}")
    elif path.exists():
        path.unlink()
        print(f"no edits: removed {path}")
    else:
        print("no edits")


# ---------------------------------------------------------------- one project


def describe_proposals(project: Project, proj: Any, tuning: Any, res: Result) -> None:
    """What init and prepare proposed (their files before any hand edit)."""
    proj = proj if isinstance(proj, dict) else {}
    launch = proj.get("launch") or {}
    command = launch.get("command") or []
    shell = (proj.get("advanced") or {}).get("shell_command")
    wanted = shlex.split(project.command)[1]
    found = " ".join(str(c) for c in command) or str(shell or "")
    res.entrypoint = ("yes: " if wanted in found.split() else "no: ") + (found or "(none)")

    data = proj.get("data") or []
    paths = [str(d.get("path")) + (f" {d['flag']}" if d.get("flag") else "") for d in data]
    res.data = ", ".join(paths) if paths else "none"

    output = proj.get("output") or {}
    outs = [f"{k}: {v}" for k, v in output.items() if v]
    args = list(launch.get("args") or []) + list((proj.get("run") or {}).get("fixed_args") or [])
    for arg in args:
        value = str(arg.get("value", ""))
        if "{outputs_dir}" in value or "{round_dir}" in value or arg.get("flag") == project.output:
            outs.append(f"{arg.get('flag')} {value}")
    if launch.get("config_style") == "hydra":
        outs.append("hydra.run.dir (config_style hydra)")
    res.output = "; ".join(outs) if outs else "none"

    fixed = (proj.get("run") or {}).get("fixed_args") or []
    limits = [a for a in fixed if "{outputs_dir}" not in str(a.get("value", ""))]
    res.limit = ", ".join(f"{a.get('flag')} {a.get('value')}" for a in limits) or "none"

    specs = (proj.get("metrics") or {}).get("specs") or []
    if specs:
        first = specs[0]
        name = str(first.get("name", ""))
        kind = "val" if VALIDATION_RE.search(name) else "other"
        if re.search(r"train", name, re.I) or name in ("loss", "total_loss"):
            kind = "TRAIN"
        res.metric = f"{first.get('name')} [{first.get('source')}, {first.get('goal')}] ({kind})"
        if len(specs) > 1:
            res.metric += f" +{len(specs) - 1}"
    else:
        res.metric = "none (built-in loss)"

    params = (tuning or {}).get("params") or [] if isinstance(tuning, dict) else []
    res.tunables = str(len(params))
    if params:
        res.notes.append("tunables: " + ", ".join(str(p.get("name")) for p in params))


def describe_session(project_dir: Path, run_log: Path, rc: int | None, res: Result) -> None:
    text = log_text(run_log)
    matches = SESSION_RE.findall(text)
    state = f"{matches[-1][1]} ({matches[-1][2]})" if matches else "no session line"
    if rc is None:
        state = "timed out (stopped)"
    ledgers = sorted((project_dir / ".trainee" / "artifacts").glob("session-*/result_ledger.jsonl"))
    rounds: list[dict[str, Any]] = []
    if ledgers:
        for line in ledgers[-1].read_text().splitlines():
            with contextlib.suppress(json.JSONDecodeError):
                rounds.append(json.loads(line))
    completed = [r for r in rounds if r.get("status") == "completed"]
    res.outcome = f"{state}, rc={rc}, {len(completed)}/{len(rounds)} rounds completed"
    baseline_ok = bool(rounds) and rounds[0].get("status") == "completed"
    crashed = [r for r in rounds[1:] if r.get("status") != "completed"]
    if rounds and not baseline_ok:
        res.tunables += " / n/a (baseline failed)"
    elif rounds:
        res.tunables += f" / {len(crashed)} crashed"
    if baseline_ok and rounds[0].get("primary_metric") is not None:
        res.outcome += f"; baseline {rounds[0].get('primary_metric')}"
        best = [r.get("primary_metric") for r in completed if r.get("primary_metric") is not None]
        if best:
            res.outcome += f", values {best}"
    for r in rounds:
        tail = [str(line) for line in r.get("failure_tail") or []]
        errors = [line for line in tail if ERROR_RE.search(line)]
        why = (errors or tail or ["; ".join(r.get("warnings") or [])])[-1]
        if r.get("status") != "completed" or r.get("warnings"):
            res.notes.append(
                f"round {r.get('index')} {r.get('status')}: {why[:300]} "
                f"(diff {json.dumps(r.get('diff') or {})[:200]})"
            )


def run_project(
    project: Project, args: argparse.Namespace, trainee: Path, env_base: dict[str, str], tag: str
) -> Result:
    cache: Path = args.cache
    res = Result(project.name)
    base = cache / "runs" / tag / project.name
    logs = base / "logs"
    src = ensure_source(project, cache)
    venv = ensure_venv(project.venv, cache)
    project_dir = fresh_copy(project, src, base / "work")
    logs.mkdir(parents=True, exist_ok=True)
    orig = base / "orig" / ".trainee"
    orig.mkdir(parents=True, exist_ok=True)
    env = dict(env_base)
    env["PATH"] = f"{venv / 'bin'}:{env_base['PATH']}"
    env["VIRTUAL_ENV"] = str(venv)
    env.update(project.env)
    if project.env:
        res.notes.append("caller env: " + " ".join(f"{k}={v}" for k, v in project.env))

    def step(name: str, argv: list[str], timeout: float = STEP_TIMEOUT) -> int | None:
        log = logs / f"{len(res.steps) + 1:02d}-{name}.txt"
        t0 = time.monotonic()
        rc = sh(argv, cwd=project_dir, env=env, log=log, timeout=timeout)
        res.steps.append(Step(name, argv, rc, round(time.monotonic() - t0, 1), str(log)))
        print(f"   {name:<10} rc={rc} {time.monotonic() - t0:6.1f}s  {log}", flush=True)
        return rc

    for i, cmd in enumerate(project.setup):
        line = cmd.format(py=shlex.quote(str(venv / "bin" / "python")), datagen=str(DATAGEN))
        if step(f"setup{i + 1}", ["/bin/sh", "-c", line]) != 0:
            res.outcome = "setup failed"
            return res

    t = str(trainee)
    step("init", [t, "init", "--skip-provider-test"])
    proj = read_yaml(project_dir / ".trainee" / "project.yaml")
    describe_proposals(project, proj, None, res)
    if res.entrypoint.startswith("no") and trainee_has(trainee, "init", "--command"):
        res.notes.append(f"init missed the entrypoint ({res.entrypoint}); rerun with --command")
        step(
            "init-cmd", [t, "init", "--force", "--skip-provider-test", "--command", project.command]
        )
        res.entrypoint += " → --command"
    shutil.copy(project_dir / ".trainee" / "project.yaml", orig / "project.yaml")
    proj = read_yaml(project_dir / ".trainee" / "project.yaml")

    patch = PATCHES / f"{project.name}.patch"
    before, after = patch_sections(patch.read_text()) if patch.is_file() else ([], [])
    plus, budget, minus = count_edits(patch.read_text()) if patch.is_file() else (0, 0, 0)
    res.edited = f"{plus} ({budget} budget), -{minus}"
    patch_log = logs / "patch.txt"
    if not all([apply_section(section, project_dir, patch_log) for section in before]):
        res.edited += " (patch before prepare FAILED)"

    step("prepare", [t, "prepare", "--skip-provider-test"])
    shutil.copy(project_dir / ".trainee" / "tuning.yaml", orig / "tuning.yaml")
    tuning = read_yaml(project_dir / ".trainee" / "tuning.yaml")
    entry = res.entrypoint
    describe_proposals(project, proj, tuning, res)
    res.entrypoint = entry
    if not all([apply_section(section, project_dir, patch_log) for section in after]):
        res.edited += " (patch after prepare FAILED)"
    if args.stop_after == "prepare":
        res.outcome = f"stopped after prepare: edit {project_dir}/.trainee/ then --save-patch"
        return res

    doctor = [t, "doctor", "--json", "--skip-provider-test"]
    if trainee_has(trainee, "doctor", "--policy"):
        doctor += ["--policy", "tpe"]
    rc = step("doctor", doctor)
    try:
        report = json.loads(log_text(Path(res.steps[-1].log)).split("\n", 1)[1])
        bad = [
            f"{c['name']} {c['status']}: {c['detail']}"
            for c in report.get("checks", [])
            if c.get("status") != "pass"
        ]
        res.doctor = f"rc={rc}; " + ("; ".join(bad) if bad else "all pass")
    except (ValueError, IndexError, AttributeError) as exc:
        res.doctor = f"rc={rc}; unreadable ({exc})"

    rc = step("dry-run", [t, "run", "--dry-run"])
    dry = log_text(Path(res.steps[-1].log)).splitlines()
    commands = [line for line in dry[1:] if line and not line.startswith(("#", "$ "))]
    res.dry_run = f"rc={rc}; " + (commands[0] if commands else " ".join(dry[-3:]))

    argv = [t, "run", "--policy", "tpe", "--max-rounds", "3"]
    rc = step("run", argv, timeout=args.session_minutes * 60)
    if rc is None:
        subprocess.run([t, "stop"], env=env, cwd=project_dir, check=False)
    describe_session(project_dir, Path(res.steps[-1].log), rc, res)
    return res


# ---------------------------------------------------------------- table


COLUMNS = (
    ("project", "project"),
    ("entrypoint found", "entrypoint"),
    ("data", "data"),
    ("output redirection", "output"),
    ("training limit", "limit"),
    ("proposed metric (validation?)", "metric"),
    ("tunables / crashed by a suggestion", "tunables"),
    ("hand-edited lines", "edited"),
    ("session outcome", "outcome"),
)


def md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def table(results: list[Result]) -> str:
    lines = [
        "| " + " | ".join(title for title, _ in COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
    ]
    for r in results:
        lines.append("| " + " | ".join(md_cell(str(getattr(r, key))) for _, key in COLUMNS) + " |")
    lines.append("")
    for r in results:
        lines.append(f"- **{r.project}**: doctor {r.doctor or '-'}; dry-run {r.dry_run or '-'}")
        lines.extend(f"  - {note}" for note in r.notes)
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trainee", type=Path, default=REPO, help="a trainee worktree (its .venv)")
    parser.add_argument(
        "--cache", type=Path, default=Path(os.environ.get("FIELD_CACHE", "/work/field-cache"))
    )
    parser.add_argument("--only", default="", help="comma-separated project names")
    parser.add_argument("--stop-after", choices=("prepare",), default=None)
    parser.add_argument("--save-patch", metavar="NAME", help="diff the latest copy's .trainee/")
    parser.add_argument("--session-minutes", type=float, default=25.0)
    args = parser.parse_args(argv)
    args.cache = args.cache.resolve()
    if args.save_patch:
        save_patch(args.save_patch, args.cache)
        return 0
    trainee = (args.trainee / ".venv" / "bin" / "trainee").resolve()
    if not trainee.is_file():
        raise SystemExit(f"{trainee} not found: run `make venv` in {args.trainee}")
    names = [n for n in args.only.split(",") if n] or [p.name for p in PROJECTS]
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        raise SystemExit(f"unknown project(s) {unknown}; known: {sorted(BY_NAME)}")

    tag = time.strftime("%Y%m%d-%H%M%S")
    run_root = args.cache / "runs" / tag
    run_root.mkdir(parents=True)
    latest = args.cache / "runs" / "latest"
    if latest.is_symlink() or latest.exists():
        latest.unlink()
    latest.symlink_to(tag)
    # a private daemon (socket, HOME, provider settings) so nothing else is touched
    env = {k: v for k, v in os.environ.items() if not k.startswith(DROPPED_ENV)}
    # HOME is per run too: a daemon resumes the running sessions of every project in
    # ~/.trainee/runtime/projects.json, also those another daemon is running
    env.update(
        HOME=str(run_root / "home"),
        TRAINEE_SOCKET=str(run_root / "daemon" / "trainee.sock"),
        TRAINEE_HTTP_PORT="18765",
        TRAINEE_LLM_PROVIDER="none",
        OMP_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        NO_COLOR="1",
        PYTHONDONTWRITEBYTECODE="1",
    )
    Path(env["HOME"]).mkdir(parents=True, exist_ok=True)
    commit = subprocess.run(
        ["git", "-C", str(args.trainee), "log", "-1", "--format=%h %s"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    print(f"trainee: {args.trainee} ({commit}); runs in {run_root}", flush=True)
    results: list[Result] = []
    try:
        for name in names:
            print(f"== {name}", flush=True)
            project = BY_NAME[name]
            old = os.environ.copy()
            os.environ.clear()
            os.environ.update(env)  # trainee_has() and the stop see the private daemon
            try:
                results.append(run_project(project, args, trainee, env, tag))
            finally:
                os.environ.clear()
                os.environ.update(old)
            (run_root / "summary.json").write_text(
                json.dumps([asdict(r) for r in results], indent=1)
            )
    finally:
        subprocess.run([str(trainee), "daemon", "stop"], env=env, capture_output=True, check=False)
    text = f"trainee {commit}\n\n" + table(results)
    (run_root / "table.md").write_text(text)
    print()
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
