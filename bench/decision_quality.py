"""Decision quality: how good a training run each policy finds within a round budget.

    python bench/decision_quality.py                      # both examples, random + tpe
    python bench/decision_quality.py --project PATH ...   # your own project(s) instead
    python bench/decision_quality.py --policies random,tpe,hybrid --seeds 5 --budgets 5,10,20

Every policy starts from the same baseline round (round 1, counted in the budget) and
then decides each round from the research state, exactly as in a session: the same
policy classes, plan validation, research state and the real training command
(rendered by trainee.launch, metrics read by trainee.metrics). Rounds run in-process
without the daemon and without the sandbox, on a copy of each project. ``llm`` and
``hybrid`` run only when an LLM provider is configured (the usual TRAINEE_LLM_* /
vendor variables or ~/.trainee/config.json).

A budget of B rounds is the first B rounds of one run of the largest budget. The
examples are deterministic, so a parameter set already run on a project is not run
again (``--no-cache`` runs everything). A round that ends without its required
metric (the examples print ``nan`` when training diverges) counts as failed; a
session would stop there, the benchmark goes on so every policy gets its budget.

Prints, per project and budget, the median best-so-far over seeds and the regret
ratio vs seeded random: regret = |best so far - oracle|, the oracle being the best
value any run found on that project; ratio = the policy's median regret / random's
median regret (lower is better, 1.0 = as good as random). Writes runs.csv (every
round), summary.csv and best_so_far.svg (median curves, one panel per project).
Nothing is asserted.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from glob import glob
from html import escape
from pathlib import Path
from typing import Any

import anyio

from trainee.launch.layout import ProjectLayout
from trainee.launch.render import render_round
from trainee.metrics.extract import Extractor
from trainee.policies.base import Policy, RandomPolicy, full_params
from trainee.research.decision import params_diff
from trainee.research.state import ResearchState, RoundSummary, new_state, record_round
from trainee.spec import ProjectSpec, load_project

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = (REPO / "examples" / "mlp-flags", REPO / "examples" / "yaml-config")
OFFLINE = ("random", "tpe")
LLM_POLICIES = ("llm", "hybrid")
COLORS = {"random": "#7f7f7f", "tpe": "#1f77b4", "llm": "#d62728", "hybrid": "#2ca02c"}
_IGNORE = shutil.ignore_patterns(
    "runs", "artifacts", "cache", "logs", "runtime.sqlite3*", "outputs", "__pycache__"
)


# -- running one round ---------------------------------------------------------------


@dataclass
class Outcome:
    status: str
    metric: float | None
    seconds: float


@dataclass
class Project:
    """A benchmark copy of a project, and the results of the parameter sets it ran."""

    name: str
    source: Path
    root: Path
    spec: ProjectSpec
    cache: dict[str, Outcome] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    runs: int = 0
    run_seconds: float = 0.0
    next_session: int = 0

    @property
    def baseline(self) -> dict[str, Any]:
        return {t.name: t.baseline for t in self.spec.tunables}

    @property
    def goal(self) -> str:
        specs = self.spec.metrics.specs
        return str(specs[0].goal) if specs else "min"

    @property
    def metric_name(self) -> str | None:
        specs = self.spec.metrics.specs
        return specs[0].name if specs else None

    def session_index(self) -> int:
        with self.lock:
            self.next_session += 1
            return self.next_session


def prepare(source: Path, work: Path) -> Project:
    """Copy the project (without trainee's runtime state) and load it."""
    root = work / source.name
    n = 1
    while root.exists():
        n += 1
        root = work / f"{source.name}-{n}"
    shutil.copytree(source, root, ignore=_IGNORE, symlinks=True)
    return Project(source.name, source, root, load_project(str(root)))


def run_round(
    project: Project, session: int, index: int, params: dict[str, Any], use_cache: bool
) -> Outcome:
    key = json.dumps(params, sort_keys=True, default=str)
    if use_cache:
        with project.lock:
            hit = project.cache.get(key)
        if hit is not None:
            return hit
    spec = project.spec
    rnd = ProjectLayout.for_root(project.root).session(session).round(index)
    rendered = render_round(spec, rnd, params, base_env=os.environ, security_mode="unsafe")
    start = time.monotonic()
    try:
        proc = subprocess.run(
            list(rendered.argv),
            env=dict(rendered.env),
            cwd=rendered.cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            timeout=spec.run.timeout_minutes * 60,
        )
        output, returncode, timed_out = proc.stdout, proc.returncode, False
    except subprocess.TimeoutExpired as exc:
        raw = exc.stdout or ""
        output = raw.decode(errors="replace") if isinstance(raw, bytes) else raw
        returncode, timed_out = -1, True
    seconds = time.monotonic() - start
    placeholders = rnd.placeholders()
    extractor = Extractor(
        spec.metrics.specs, placeholders=placeholders, project_root=str(project.root)
    )
    extractor.feed_output(output)
    for pattern in spec.advanced.log_paths:
        for key_, value in placeholders.items():
            pattern = pattern.replace("{" + key_ + "}", value)
        full = pattern if pattern.startswith("/") else str(spec.root_path / pattern)
        for path in sorted(glob(full)):
            extractor.feed_log(path, Path(path).read_text(errors="replace"))
    extractor.read_files()
    metrics = extractor.result()
    finals = {k: v for k, v in metrics.finals.items() if math.isfinite(v)}
    primary = finals.get(metrics.primary) if metrics.primary else None
    if timed_out:
        status = "timed_out"
    elif returncode != 0:
        status = "failed"
    elif metrics.missing_required or primary is None:
        status = "completed_without_metrics"
    else:
        status = "completed"
    outcome = Outcome(status, primary if status == "completed" else None, seconds)
    with project.lock:
        project.runs += 1
        project.run_seconds += seconds
        if use_cache:
            project.cache[key] = outcome
    return outcome


# -- one run of a policy ----------------------------------------------------------------


@dataclass
class Round:
    index: int
    status: str
    metric: float | None
    best: float | None
    params: dict[str, Any]
    source: str = ""


@dataclass
class Run:
    project: str
    policy: str
    seed: int
    rounds: list[Round]
    error: str = ""
    decide_seconds: float = 0.0

    def best_at(self, budget: int) -> float | None:
        shown = [r.best for r in self.rounds[:budget] if r.best is not None]
        return shown[-1] if shown else None


def make_policy(name: str, project: Project, seed: int) -> Policy:
    if name == "random":
        return RandomPolicy(seed=seed)
    if name == "tpe":
        from trainee.policies.tpe import TpePolicy

        return TpePolicy(seed=seed)
    from trainee.llm.settings import load_settings
    from trainee.session.manager import prompt_parts

    settings = load_settings(os.environ)
    parts = prompt_parts(project.spec, settings)
    if name == "hybrid":
        from trainee.policies.hybrid import HybridPolicy

        return HybridPolicy(settings, parts, seed=seed)
    from trainee.policies.llm import LlmPolicy

    return LlmPolicy(settings, parts)


def better(a: float, b: float, goal: str) -> bool:
    return a > b if goal == "max" else a < b


def run_policy(
    project: Project, name: str, seed: int, rounds: int, use_cache: bool, progress: Progress
) -> Run:
    """One session-like run: the baseline, then ``rounds - 1`` decisions."""

    async def main() -> Run:
        try:
            return await _run(project, name, seed, rounds, use_cache, progress)
        finally:
            if name in LLM_POLICIES:
                from trainee.llm.client import close_clients

                await close_clients()

    return anyio.run(main)


async def _run(
    project: Project, name: str, seed: int, rounds: int, use_cache: bool, progress: Progress
) -> Run:
    policy = make_policy(name, project, seed)
    session = project.session_index()
    baseline = project.baseline
    state: ResearchState = new_state(project.metric_name, project.goal)
    run = Run(project.name, name, seed, [])
    best: float | None = None
    for index in range(1, rounds + 1):
        source = ""
        if index == 1:
            params = dict(baseline)
            plan_text = ("baseline", "")
        else:
            start = time.monotonic()
            try:
                proposal = await policy.propose(state, project.spec.tunables, baseline)
            except Exception as exc:  # a provider failure ends this run, not the benchmark
                run.error = f"round {index}: {type(exc).__name__}: {exc}"
                break
            run.decide_seconds += time.monotonic() - start
            if proposal.plan.stop:
                run.error = f"round {index}: the policy stopped: {proposal.plan.stop_reason}"
                break
            source = proposal.source
            params = full_params(baseline, proposal.plan)
            plan_text = (proposal.plan.hypothesis, proposal.plan.expected)
        outcome = await anyio.to_thread.run_sync(
            run_round, project, session, index, params, use_cache
        )
        summary = RoundSummary(
            index=index,
            status=outcome.status,
            params=params,
            diff=params_diff(baseline, params),
            metric=outcome.metric,
            metrics={project.metric_name: outcome.metric}
            if project.metric_name and outcome.metric is not None
            else {},
            hypothesis=plan_text[0],
            expected=plan_text[1],
            verdict=None,
            verdict_reason="",
            duration_sec=outcome.seconds,
            failure_tail=[],
        )
        state, _ = record_round(state, summary)
        if index > 1:
            policy.observe(params, outcome.metric, outcome.status)
        if outcome.metric is not None and (
            best is None or better(outcome.metric, best, project.goal)
        ):
            best = outcome.metric
        run.rounds.append(Round(index, outcome.status, outcome.metric, best, params, source))
        progress.tick()
    return run


class Progress:
    def __init__(self, total: int) -> None:
        self.total, self.done, self.lock = total, 0, threading.Lock()
        self.start = time.monotonic()
        self.tty = sys.stderr.isatty()

    def tick(self) -> None:
        with self.lock:
            self.done += 1
            if self.tty:
                elapsed = time.monotonic() - self.start
                sys.stderr.write(f"\r  {self.done}/{self.total} rounds, {elapsed:.0f}s")
                sys.stderr.flush()

    def end(self) -> None:
        if self.tty:
            sys.stderr.write("\n")


# -- figures ------------------------------------------------------------------------------


def median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def fmt(value: float | None, digits: int = 4) -> str:
    if value is None:
        return "-"
    if math.isinf(value):
        return "inf"
    return f"{value:.{digits}g}"


@dataclass
class Cell:
    project: str
    policy: str
    budget: int
    median_best: float | None
    median_regret: float | None
    regret_ratio: float | None
    runs: int


def summarize(
    runs: list[Run], projects: list[Project], policies: list[str], budgets: list[int]
) -> tuple[list[Cell], dict[str, float | None]]:
    cells: list[Cell] = []
    oracles: dict[str, float | None] = {}
    for project in projects:
        mine = [r for r in runs if r.project == project.name]
        values = [x.metric for r in mine for x in r.rounds if x.metric is not None]
        oracle = (max if project.goal == "max" else min)(values) if values else None
        oracles[project.name] = oracle
        random_regret: dict[int, float | None] = {}
        for policy in policies:
            of_policy = [r for r in mine if r.policy == policy]
            for budget in budgets:
                bests = [b for r in of_policy if (b := r.best_at(budget)) is not None]
                regrets = [abs(b - oracle) for b in bests] if oracle is not None else []
                med_regret = median(regrets)
                if policy == "random":
                    random_regret[budget] = med_regret
                cells.append(
                    Cell(project.name, policy, budget, median(bests), med_regret, None, len(bests))
                )
        for cell in cells:
            if cell.project != project.name:
                continue
            base = random_regret.get(cell.budget)
            if base is None or cell.median_regret is None:
                continue
            if base == 0:
                cell.regret_ratio = 1.0 if cell.median_regret == 0 else math.inf
            else:
                cell.regret_ratio = cell.median_regret / base
    return cells, oracles


def print_table(
    cells: list[Cell],
    projects: list[Project],
    policies: list[str],
    budgets: list[int],
    oracles: dict[str, float | None],
    runs: list[Run],
) -> None:
    for project in projects:
        baseline = next(
            (r.rounds[0].metric for r in runs if r.project == project.name and r.rounds), None
        )
        print(
            f"\n{project.name}: {project.metric_name or 'metric'} ({project.goal}), "
            f"baseline {fmt(baseline)}, oracle (best any run found) {fmt(oracles[project.name])}"
        )
        head = f"  {'policy':<8}" + "".join(f" | best@{b:<3} ratio@{b:<3}" for b in budgets)
        print(head)
        print("  " + "-" * (len(head) - 2))
        for policy in policies:
            line = f"  {policy:<8}"
            for budget in budgets:
                cell = next(
                    (
                        c
                        for c in cells
                        if c.project == project.name and c.policy == policy and c.budget == budget
                    ),
                    None,
                )
                best = fmt(cell.median_best) if cell else "-"
                ratio = fmt(cell.regret_ratio, 3) if cell else "-"
                line += f" | {best:<8} {ratio:<9}"
            print(line)


def write_csvs(out: Path, runs: list[Run], cells: list[Cell]) -> tuple[Path, Path]:
    runs_csv, summary_csv = out / "runs.csv", out / "summary.csv"
    with open(runs_csv, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(
            [
                "project",
                "policy",
                "seed",
                "round",
                "status",
                "metric",
                "best_so_far",
                "source",
                "params",
            ]
        )
        for r in runs:
            for x in r.rounds:
                w.writerow(
                    [
                        r.project,
                        r.policy,
                        r.seed,
                        x.index,
                        x.status,
                        "" if x.metric is None else repr(x.metric),
                        "" if x.best is None else repr(x.best),
                        x.source,
                        json.dumps(x.params, sort_keys=True, default=str),
                    ]
                )
    with open(summary_csv, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(
            [
                "project",
                "policy",
                "budget",
                "runs",
                "median_best",
                "median_regret",
                "regret_ratio_vs_random",
            ]
        )
        for c in cells:
            w.writerow(
                [
                    c.project,
                    c.policy,
                    c.budget,
                    c.runs,
                    "" if c.median_best is None else repr(c.median_best),
                    "" if c.median_regret is None else repr(c.median_regret),
                    "" if c.regret_ratio is None else repr(c.regret_ratio),
                ]
            )
    return runs_csv, summary_csv


def write_svg(
    path: Path, runs: list[Run], projects: list[Project], policies: list[str], budgets: list[int]
) -> None:
    """Median best-so-far per round (thin lines: each seed), one panel per project."""
    width, height, pad_l, pad_r, pad_t, pad_b = 460, 300, 64, 16, 34, 44
    rounds = max(budgets)
    parts: list[str] = []
    total_w = width * len(projects)
    legend_h = 26
    for p_i, project in enumerate(projects):
        x0 = p_i * width
        mine = [r for r in runs if r.project == project.name]
        values = [x.best for r in mine for x in r.rounds if x.best is not None]
        if not values:
            continue
        lo, hi = min(values), max(values)
        if hi == lo:
            hi = lo + abs(lo) * 0.05 + 1e-9
        span = hi - lo
        lo, hi = lo - span * 0.05, hi + span * 0.05

        def sx(i: float, x0: float = x0) -> float:
            return x0 + pad_l + (i - 1) / max(1, rounds - 1) * (width - pad_l - pad_r)

        def sy(v: float, lo: float = lo, hi: float = hi) -> float:
            return pad_t + (hi - v) / (hi - lo) * (height - pad_t - pad_b)

        parts.append(
            f'<text x="{x0 + width / 2:.1f}" y="18" text-anchor="middle" font-size="13" '
            f'font-weight="bold">{escape(project.name)}: best '
            f"{escape(project.metric_name or 'metric')} so far ({project.goal})</text>"
        )
        parts.append(
            f'<rect x="{x0 + pad_l}" y="{pad_t}" width="{width - pad_l - pad_r}" '
            f'height="{height - pad_t - pad_b}" fill="none" stroke="#999"/>'
        )
        for k in range(5):
            v = lo + (hi - lo) * k / 4
            y = sy(v)
            parts.append(
                f'<line x1="{x0 + pad_l}" x2="{x0 + width - pad_r}" y1="{y:.1f}" y2="{y:.1f}" '
                f'stroke="#eee"/><text x="{x0 + pad_l - 4}" y="{y + 4:.1f}" font-size="10" '
                f'text-anchor="end">{v:.4g}</text>'
            )
        for b in budgets:
            x = sx(b)
            parts.append(
                f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{pad_t}" y2="{height - pad_b}" '
                f'stroke="#ccc" stroke-dasharray="3,3"/><text x="{x:.1f}" '
                f'y="{height - pad_b + 14}" font-size="10" text-anchor="middle">{b}</text>'
            )
        parts.append(
            f'<text x="{x0 + pad_l + (width - pad_l - pad_r) / 2:.1f}" y="{height - 8}" '
            f'font-size="11" text-anchor="middle">round (budget)</text>'
        )
        for policy in policies:
            color = COLORS.get(policy, "#000")
            of_policy = [r for r in mine if r.policy == policy]
            for r in of_policy:
                pts = [(x.index, x.best) for x in r.rounds if x.best is not None]
                if len(pts) > 1:
                    d = " ".join(f"{sx(i):.1f},{sy(v):.1f}" for i, v in pts)
                    parts.append(
                        f'<polyline points="{d}" fill="none" stroke="{color}" '
                        f'stroke-opacity="0.25" stroke-width="1"/>'
                    )
            med: list[tuple[int, float]] = []
            for i in range(1, rounds + 1):
                vals = [
                    b for r in of_policy if len(r.rounds) >= i and (b := r.best_at(i)) is not None
                ]
                if vals:
                    med.append((i, statistics.median(vals)))
            if len(med) > 1:
                d = " ".join(f"{sx(i):.1f},{sy(v):.1f}" for i, v in med)
                parts.append(
                    f'<polyline points="{d}" fill="none" stroke="{color}" stroke-width="2.5"/>'
                )
    for i, policy in enumerate(policies):
        x = 20 + i * 130
        y = height + 16
        parts.append(
            f'<line x1="{x}" x2="{x + 24}" y1="{y}" y2="{y}" stroke="{COLORS.get(policy, "#000")}" '
            f'stroke-width="3"/><text x="{x + 30}" y="{y + 4}" font-size="12">{escape(policy)} '
            f"(median)</text>"
        )
    svg = (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{total_w}" height="{height + legend_h}" '
        f'font-family="sans-serif"><rect width="100%" height="100%" fill="white"/>'
        + "".join(parts)
        + "</svg>\n"
    )
    path.write_text(svg)


# -- main ---------------------------------------------------------------------------------


def provider_configured() -> bool:
    from trainee.llm.settings import load_settings

    try:
        return load_settings(os.environ).provider != "none"
    except Exception:
        return False


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="Compare decision policies on the same projects, seeds and budgets."
    )
    p.add_argument(
        "--project",
        action="append",
        default=None,
        help="a project folder (repeatable); default: the two bundled examples",
    )
    p.add_argument(
        "--policies",
        default=None,
        help="comma-separated, from random,tpe,llm,hybrid (default: random,tpe, "
        "plus llm,hybrid when a provider is configured)",
    )
    p.add_argument("--seeds", type=int, default=3, help="seeds per policy (0..N-1), default 3")
    p.add_argument("--budgets", default="5,10,20", help="round budgets, default 5,10,20")
    p.add_argument(
        "--out", default=str(REPO / "bench" / "out" / "decision_quality"), help="output folder"
    )
    p.add_argument("--jobs", type=int, default=min(4, os.cpu_count() or 1), help="parallel runs")
    p.add_argument("--no-cache", action="store_true", help="run repeated parameter sets again")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        budgets = sorted({int(b) for b in args.budgets.split(",") if b.strip()})
    except ValueError:
        print(
            f"--budgets: expected comma-separated integers, got {args.budgets!r}", file=sys.stderr
        )
        return 2
    if not budgets or budgets[0] < 1:
        print("--budgets: every budget must be at least 1", file=sys.stderr)
        return 2
    if args.seeds < 1:
        print("--seeds: must be at least 1", file=sys.stderr)
        return 2
    configured = provider_configured()
    if args.policies:
        policies = [p.strip() for p in args.policies.split(",") if p.strip()]
        unknown = [p for p in policies if p not in (*OFFLINE, *LLM_POLICIES)]
        if unknown:
            print(
                f"--policies: unknown {', '.join(unknown)}; choose from random,tpe,llm,hybrid",
                file=sys.stderr,
            )
            return 2
        if any(p in LLM_POLICIES for p in policies) and not configured:
            print(
                "--policies: llm and hybrid need an LLM provider; none is configured",
                file=sys.stderr,
            )
            return 2
    else:
        policies = [*OFFLINE, *(LLM_POLICIES if configured else ())]
    sources = [Path(p).resolve() for p in args.project] if args.project else list(EXAMPLES)
    for s in sources:
        if not (s / ".trainee" / "project.yaml").is_file():
            print(f"--project {s}: no .trainee/project.yaml there", file=sys.stderr)
            return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rounds = max(budgets)
    work = Path(tempfile.mkdtemp(prefix="trainee-bench-"))
    started = time.monotonic()
    try:
        projects = [prepare(s, work) for s in sources]
        jobs = [
            (p, name, seed) for p in projects for name in policies for seed in range(args.seeds)
        ]
        print(
            f"decision quality: {len(projects)} project(s) x {len(policies)} policies "
            f"({', '.join(policies)}) x {args.seeds} seeds, {rounds} rounds each "
            f"(budgets {', '.join(map(str, budgets))}; round 1 is the baseline)"
            + ("" if configured else "; no LLM provider configured: llm and hybrid skipped")
        )
        progress = Progress(len(jobs) * rounds)
        offline = [j for j in jobs if j[1] in OFFLINE]
        online = [j for j in jobs if j[1] in LLM_POLICIES]
        runs: list[Run] = []
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            futures = [
                pool.submit(run_policy, p, name, seed, rounds, not args.no_cache, progress)
                for p, name, seed in offline
            ]
            runs.extend(f.result() for f in futures)
        # LLM runs one at a time: litellm's clients belong to one event loop each.
        for p, name, seed in online:
            runs.append(run_policy(p, name, seed, rounds, not args.no_cache, progress))
        progress.end()
        cells, oracles = summarize(runs, projects, policies, budgets)
        print_table(cells, projects, policies, budgets, oracles, runs)
        for r in runs:
            if r.error:
                print(f"  note: {r.project} {r.policy} seed {r.seed}: {r.error}")
        runs_csv, summary_csv = write_csvs(out, runs, cells)
        svg = out / "best_so_far.svg"
        write_svg(svg, runs, projects, policies, budgets)
        executed = sum(p.runs for p in projects)
        seconds = sum(p.run_seconds for p in projects)
        decided = sum(r.decide_seconds for r in runs)
        print(
            f"\nregret = |best so far - oracle|; ratio = median regret / random's median regret "
            f"(lower is better)\n{sum(len(r.rounds) for r in runs)} rounds, {executed} training "
            f"runs executed ({seconds:.0f}s of training, {decided:.1f}s deciding), "
            f"{time.monotonic() - started:.0f}s wall\nwrote {runs_csv}\nwrote {summary_csv}\n"
            f"wrote {svg}"
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
