"""Compute against best: what ``run.prune`` (and ``run.screen``) save for the same best.

    python bench/compute.py OUT                                # lr-cliff, tpe + random, 3 seeds, 8 rounds
    python bench/compute.py OUT --seeds 2 --rounds 8
    python bench/compute.py OUT --project examples/mlp-flags --prune '{rules: [{rule: median}]}'
    python bench/compute.py OUT --screen '{...}'              # adds the screening arms
    python bench/compute.py OUT --llm                          # adds llm (needs a provider)
    python bench/compute.py OUT --llm --llm-url http://127.0.0.1:8080/v1 --llm-model NAME

Every session runs through a private real daemon (``python -m trainee.daemon`` on its
own socket, unsafe mode: the bench is about compute, not the sandbox), one at a time
(``--jobs``), each on its own copy of the project with ``decision.seed`` set to the
seed. Arms, per policy and seed:

- ``full``: no ``run.prune`` and no ``run.screen``: every round runs to its end,
  ``--rounds`` rounds;
- ``prune``: ``run.prune`` from ``--prune`` (default: the project's own), ``--rounds``
  x ``--extend`` rounds (the extra rounds only count for "best at equal compute");
- ``screen`` and ``prune+screen``: ``run.screen`` from ``--screen``, when given and when
  the project spec accepts the field (else the arms are skipped with a note).

Per session, from the daemon's store (``loop_get``): each round's seconds (its
``ended_at - started_at``), status and primary metric. Compute is the sum of round
seconds; the best is the best primary metric of a completed round. The noise floor is
measured directly: the baseline's command run ``--noise-repeats`` times with
``--seed-flag`` 0, 1, ... appended (sample standard deviation of the metric), or given
with ``--noise-floor``.

Prints, per policy and arm (medians over seeds; each seed compared with the ``full``
session of the same policy and seed):

- ``compute``: the arm's compute over its first ``--rounds`` rounds / full's;
- ``reports``: the same with the primary metric's reports (lines of the round's log its
  stdout pattern matches: epochs, for lr-cliff) instead of seconds, a measure the
  machine's load does not move (``-`` when the metric is not read from the output);
- ``gap``: (the arm's best after ``--rounds`` rounds - full's best) in noise floors,
  positive = worse (goal: <= 1, "the same best within the noise floor");
- ``to-same``: the arm's compute until its best came within one floor of full's best
  / full's compute (goal: <= 0.6);
- ``gain@eq``: (full's best - the arm's best within full's compute) in floors,
  positive = better ("a better best at equal compute"); ``covered`` says which
  fraction of full's compute the arm's session reached (below 1: it ran out of rounds).

Writes rounds.csv (every round), summary.csv (every comparison, and the medians) and
compute.svg (best so far against cumulative compute, one panel per policy, one colour
per arm, one line per seed). Nothing is asserted.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING, Any

import regex

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests.support, as soak.py

from tests.support.daemon import Daemon, base_env
from trainee.spec.primary import better

if TYPE_CHECKING:
    from trainee.spec import ProjectSpec

REPO = Path(__file__).resolve().parent.parent
DEFAULT_PROJECT = REPO / "examples" / "lr-cliff"
OFFLINE = ("tpe", "random")
LLM_POLICIES = ("llm",)
FULL, PRUNE, SCREEN, BOTH = "full", "prune", "screen", "prune+screen"
COLORS = {FULL: "#7f7f7f", PRUNE: "#1f77b4", SCREEN: "#2ca02c", BOTH: "#d62728"}
_IGNORE = shutil.ignore_patterns(
    "runs", "artifacts", "cache", "logs", "runtime.sqlite3*", "outputs", "__pycache__"
)


# -- what a session measured (pure) ---------------------------------------------------


@dataclass(frozen=True)
class Round:
    index: int
    status: str
    seconds: float
    metric: float | None
    """The primary metric of a completed round that may be a best: at the full budget
    (None otherwise; a ``run.screen`` round below the top rung only ranks candidates)."""
    reports: int | None = None
    """How many values of the primary metric it printed (epochs, for the examples): a
    measure of compute that does not move with the machine's load (None: not read)."""


@dataclass
class Session:
    policy: str
    seed: int
    arm: str
    rounds: list[Round]
    stop_reason: str = ""
    error: str = ""


def curve(rounds: Sequence[Round], goal: str) -> list[tuple[float, float | None]]:
    """``(cumulative compute, best so far)`` after each round, in round order."""
    out: list[tuple[float, float | None]] = []
    spent, best = 0.0, None
    for r in rounds:
        spent += r.seconds
        if r.metric is not None and (best is None or better(r.metric, best, goal)):
            best = r.metric
        out.append((spent, best))
    return out


def compute_of(rounds: Sequence[Round]) -> float:
    return sum(r.seconds for r in rounds)


def reports_of(rounds: Sequence[Round]) -> int | None:
    """The metric reports of the rounds added up (None when any round's is unknown)."""
    counts = [r.reports for r in rounds]
    return None if any(c is None for c in counts) else sum(c or 0 for c in counts)


def best_of(rounds: Sequence[Round], goal: str) -> float | None:
    points = curve(rounds, goal)
    return points[-1][1] if points else None


def best_within(rounds: Sequence[Round], goal: str, budget: float) -> tuple[float | None, float]:
    """The best of the rounds finished within ``budget`` seconds of compute, and the
    compute they used."""
    best, used = None, 0.0
    for spent, b in curve(rounds, goal):
        if spent > budget:
            break
        best, used = b, spent
    return best, used


def compute_to_reach(
    rounds: Sequence[Round], goal: str, target: float, tolerance: float
) -> float | None:
    """Compute until the best so far came within ``tolerance`` of ``target`` (None: never)."""
    for spent, b in curve(rounds, goal):
        if b is not None and (b - target if goal != "max" else target - b) <= tolerance:
            return spent
    return None


def noise_floor(values: Sequence[float]) -> float | None:
    """The sample standard deviation of repeated measurements (None below two)."""
    finite = [v for v in values if math.isfinite(v)]
    return statistics.stdev(finite) if len(finite) >= 2 else None


def _float(value: int | None) -> float | None:
    return None if value is None else float(value)


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b <= 0:
        return None
    return a / b


def _in_floors(diff: float | None, floor: float | None) -> float | None:
    if diff is None or floor is None:
        return None
    if floor <= 0:
        return 0.0 if diff == 0 else math.copysign(math.inf, diff)
    return diff / floor


@dataclass(frozen=True)
class Comparison:
    """One arm's session against the ``full`` session of the same policy and seed."""

    policy: str
    seed: int
    arm: str
    rounds: int
    full_compute: float
    full_best: float | None
    compute: float
    best: float | None
    compute_ratio: float | None
    """The arm's compute over its first ``rounds`` rounds / full's."""
    reports_ratio: float | None
    """The same with metric reports (epochs) instead of seconds."""
    best_gap: float | None
    """(arm's best - full's best) in noise floors after ``rounds`` rounds; + = worse."""
    to_same_ratio: float | None
    """Compute until the arm's best came within one floor of full's best / full's
    compute, over all its rounds (None: never)."""
    equal_best: float | None
    equal_gain: float | None
    """(full's best - the arm's best within full's compute) in floors; + = better."""
    covered: float | None
    """The fraction of full's compute the arm's whole session used (capped at 1)."""


def compare(full: Session, arm: Session, rounds: int, goal: str, floor: float | None) -> Comparison:
    sign = -1.0 if goal == "max" else 1.0
    ref = full.rounds[:rounds]
    mine = arm.rounds[:rounds]
    full_compute, full_best = compute_of(ref), best_of(ref, goal)
    compute, best = compute_of(mine), best_of(mine, goal)
    gap = None
    if best is not None and full_best is not None:
        gap = _in_floors(sign * (best - full_best), floor)
    elif full_best is not None:
        gap = math.inf  # the arm found nothing where full did
    to_same = None
    if full_best is not None:
        spent = compute_to_reach(arm.rounds, goal, full_best, floor or 0.0)
        to_same = _ratio(spent, full_compute)
    eq_best, _ = best_within(arm.rounds, goal, full_compute)
    gain = None
    if eq_best is not None and full_best is not None:
        gain = _in_floors(sign * (full_best - eq_best), floor)
    covered = _ratio(compute_of(arm.rounds), full_compute)
    return Comparison(
        policy=arm.policy,
        seed=arm.seed,
        arm=arm.arm,
        rounds=rounds,
        full_compute=full_compute,
        full_best=full_best,
        compute=compute,
        best=best,
        compute_ratio=_ratio(compute, full_compute),
        reports_ratio=_ratio(_float(reports_of(mine)), _float(reports_of(ref))),
        best_gap=gap,
        to_same_ratio=to_same,
        equal_best=eq_best,
        equal_gain=gain,
        covered=None if covered is None else min(1.0, covered),
    )


@dataclass(frozen=True)
class Summary:
    """Medians over seeds of one policy's arm."""

    policy: str
    arm: str
    seeds: int
    compute_ratio: float | None
    reports_ratio: float | None
    best_gap: float | None
    to_same_ratio: float | None
    reached: int
    """Seeds where the arm came within a floor of full's best at all."""
    equal_gain: float | None
    covered: float | None


def _median(values: Sequence[float | None]) -> float | None:
    found = [v for v in values if v is not None]
    return statistics.median(found) if found else None


def summarize(comparisons: Sequence[Comparison]) -> list[Summary]:
    keys: list[tuple[str, str]] = []
    for c in comparisons:
        if (c.policy, c.arm) not in keys:
            keys.append((c.policy, c.arm))
    out = []
    for policy, arm in keys:
        mine = [c for c in comparisons if c.policy == policy and c.arm == arm]
        out.append(
            Summary(
                policy=policy,
                arm=arm,
                seeds=len(mine),
                compute_ratio=_median([c.compute_ratio for c in mine]),
                reports_ratio=_median([c.reports_ratio for c in mine]),
                best_gap=_median([c.best_gap for c in mine]),
                to_same_ratio=_median(
                    [math.inf if c.to_same_ratio is None else c.to_same_ratio for c in mine]
                ),
                reached=sum(1 for c in mine if c.to_same_ratio is not None),
                equal_gain=_median([c.equal_gain for c in mine]),
                covered=_median([c.covered for c in mine]),
            )
        )
    return out


def fmt(value: float | None, digits: int = 3) -> str:
    if value is None:
        return "-"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return f"{value:.{digits}g}"


def table(summaries: Sequence[Summary]) -> str:
    head = (
        f"{'policy':<8} {'arm':<13} {'seeds':>5} {'compute':>8} {'reports':>8} {'gap':>7} "
        f"{'to-same':>8} {'reached':>8} {'gain@eq':>8} {'covered':>8}"
    )
    lines = [head, "-" * len(head)]
    for s in summaries:
        lines.append(
            f"{s.policy:<8} {s.arm:<13} {s.seeds:>5} {fmt(s.compute_ratio):>8} "
            f"{fmt(s.reports_ratio):>8} "
            f"{fmt(s.best_gap):>7} {fmt(s.to_same_ratio):>8} {f'{s.reached}/{s.seeds}':>8} "
            f"{fmt(s.equal_gain):>8} {fmt(s.covered):>8}"
        )
    return "\n".join(lines)


# -- the project copies ----------------------------------------------------------------


def parse_mapping(text: str, what: str) -> dict[str, Any]:
    """A YAML/JSON mapping given inline or as ``@path``."""
    from trainee.spec.yamlio import YamlDocument

    if text.startswith("@"):
        doc = YamlDocument.load(text[1:])
    else:
        doc = YamlDocument.from_text(text, path=f"<{what}>")
    data, _ = doc.to_plain()
    if not isinstance(data, dict):
        raise SystemExit(f"{what}: expected a mapping, got {text!r}")
    return data


@dataclass
class Arm:
    name: str
    prune: dict[str, Any] | None
    screen: dict[str, Any] | None
    rounds: int


def prepare(source: Path, work: Path, arm: Arm, policy: str, seed: int) -> Path:
    """A copy of the project with the arm's ``run.prune`` / ``run.screen`` and the seed."""
    from trainee.spec.yamlio import YamlDocument

    root = work / f"{source.name}-{policy}-{arm.name.replace('+', '-')}-s{seed}"
    shutil.copytree(source, root, ignore=_IGNORE, symlinks=True)
    path = root / ".trainee" / "project.yaml"
    doc = YamlDocument.load(path)
    for key, value in (("run.prune", arm.prune), ("run.screen", arm.screen)):
        if value is None:
            doc.delete(key)
        else:
            doc.set(key, value)
    doc.set("decision.seed", seed)
    doc.save()
    return root


def spec_refuses(source: Path, work: Path, arm: Arm) -> str | None:
    """Why the project spec refuses the arm's fields (None: it loads)."""
    from trainee.spec import load_project

    probe = prepare(source, work / "probe", arm, "probe", 0)
    try:
        load_project(str(probe))
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    finally:
        shutil.rmtree(probe, ignore_errors=True)
    return None


def project_prune(source: Path) -> dict[str, Any] | None:
    from trainee.spec.yamlio import YamlDocument

    value = YamlDocument.load(source / ".trainee" / "project.yaml").get("run.prune", None)
    return value if isinstance(value, dict) else None


# -- the noise floor -----------------------------------------------------------------------


def measure_noise(source: Path, work: Path, repeats: int, seed_flag: str) -> list[float]:
    """The baseline's primary metric on seeds 0..repeats-1 (the command as a round runs
    it, ``seed_flag N`` appended; argparse takes the last value)."""
    from trainee.launch.layout import ProjectLayout
    from trainee.launch.render import render_round
    from trainee.metrics.extract import Extractor
    from trainee.spec import load_project

    root = work / f"{source.name}-noise"
    shutil.copytree(source, root, ignore=_IGNORE, symlinks=True)
    spec = load_project(str(root))
    baseline = {t.name: t.baseline for t in spec.tunables}

    def one(seed: int) -> float:
        rnd = ProjectLayout.for_root(root).session(1).round(seed + 1)
        rendered = render_round(spec, rnd, baseline, base_env=os.environ, security_mode="unsafe")
        proc = subprocess.run(
            [*rendered.argv, seed_flag, str(seed)],
            env=dict(rendered.env),
            cwd=rendered.cwd,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=spec.run.timeout_minutes * 60,
        )
        extractor = Extractor(
            spec.metrics.specs, placeholders=rnd.placeholders(), project_root=str(root)
        )
        extractor.feed_output(proc.stdout)
        extractor.read_files()
        result = extractor.result()
        value = result.finals.get(result.primary) if result.primary else None
        if proc.returncode != 0 or value is None:
            raise SystemExit(
                f"the baseline on {seed_flag} {seed} gave no metric (exit {proc.returncode}):\n"
                + (proc.stderr or proc.stdout)[-800:]
            )
        return value

    with ThreadPoolExecutor(max_workers=2) as pool:
        return list(pool.map(one, range(repeats)))


# -- sessions through a real daemon --------------------------------------------------------


def daemon_env(runtime: Path, extra_env: dict[str, str] | None = None) -> dict[str, str]:
    """A private daemon's environment (tests.support.daemon's, as soak.py and abuse.py
    use), keeping the caller's TRAINEE_LLM_* settings and config.json for ``--llm``."""
    env = base_env(runtime)
    env.update({k: v for k, v in os.environ.items() if k.startswith("TRAINEE_LLM_")})
    config = Path.home() / ".trainee" / "config.json"
    if config.is_file():
        (runtime / "home" / ".trainee").mkdir(parents=True)
        shutil.copy(config, runtime / "home" / ".trainee" / "config.json")
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p
    )
    env.update(extra_env or {})
    return env


def report_pattern(spec: ProjectSpec) -> regex.Pattern[str] | None:
    """The primary metric's pattern when it is read from the output (else None)."""
    if not spec.metrics.specs or spec.metrics.specs[0].source != "stdout_regex":
        return None
    return regex.compile(spec.metrics.specs[0].key_or_pattern)


def count_reports(log: Path, pattern: regex.Pattern[str] | None) -> int | None:
    """Lines of a round's log where the primary metric's pattern matches (its reports,
    NaN ones included)."""
    if pattern is None:
        return None
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return None
    return sum(1 for line in text.splitlines() if pattern.search(line))


def run_session(
    daemon: Daemon, root: Path, policy: str, seed: int, arm: Arm, timeout: float
) -> Session:
    from trainee.ids import parse_session
    from trainee.launch.layout import ProjectLayout
    from trainee.rpc.client import RpcClient
    from trainee.spec import load_project
    from trainee.states import RoundStatus, SessionStatus

    pattern = report_pattern(load_project(str(root)))

    with RpcClient(daemon.socket, timeout=120) as rpc:
        started = rpc.call(
            "loop_start",
            {
                "project_root": str(root),
                "policy": policy,
                "security_mode": "unsafe",
                "max_rounds": arm.rounds,
                "env": daemon.env,
                "cwd": str(root),
            },
        )
        ref = {"session": started["session"], "project_root": str(root)}
        deadline = time.monotonic() + timeout
        while True:
            state = rpc.call("loop_get", ref)
            if state["session"]["status"] != SessionStatus.RUNNING and not state["running"]:
                break
            if time.monotonic() > deadline:
                rpc.call("loop_stop", ref)
                state = rpc.call("loop_get", ref)
                break
            time.sleep(0.5)
    rounds = []
    session_index = parse_session(state["session"]["id"])
    for r in state["rounds"]:
        seconds = (
            r["ended_at"] - r["started_at"]
            if r["started_at"] is not None and r["ended_at"] is not None
            else 0.0
        )
        # a screening round below the top rung only ranks candidates: never a best
        top = len(arm.screen["rungs"]) if arm.screen and arm.screen.get("rungs") else 0
        full = r.get("rung", 0) in (0, top)
        metric = r["primary_metric"] if r["status"] == RoundStatus.COMPLETED and full else None
        log = ProjectLayout.for_root(root, daemon.env).session(session_index).round(r["index"]).log
        rounds.append(Round(r["index"], r["status"], seconds, metric, count_reports(log, pattern)))
    session = state["session"]
    return Session(
        policy,
        seed,
        arm.name,
        rounds,
        stop_reason=session.get("stop_reason") or "",
        error=session.get("error") or "",
    )


# -- output ----------------------------------------------------------------------------------


def write_csvs(
    out: Path,
    sessions: Sequence[Session],
    comparisons: Sequence[Comparison],
    summaries: Sequence[Summary],
    goal: str,
    floor: float | None,
) -> tuple[Path, Path]:
    rounds_csv, summary_csv = out / "rounds.csv", out / "summary.csv"
    with open(rounds_csv, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(
            [
                "policy",
                "seed",
                "arm",
                "round",
                "status",
                "seconds",
                "compute",
                "reports",
                "metric",
                "best_so_far",
            ]
        )
        for s in sessions:
            for r, (spent, best) in zip(s.rounds, curve(s.rounds, goal), strict=True):
                w.writerow(
                    [
                        s.policy,
                        s.seed,
                        s.arm,
                        r.index,
                        r.status,
                        f"{r.seconds:.3f}",
                        f"{spent:.3f}",
                        "" if r.reports is None else r.reports,
                        _cell(r.metric),
                        _cell(best),
                    ]
                )
    with open(summary_csv, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(
            [
                "policy",
                "arm",
                "seed",
                "rounds",
                "noise_floor",
                "full_compute",
                "full_best",
                "compute",
                "best",
                "compute_ratio",
                "reports_ratio",
                "best_gap_floors",
                "to_same_ratio",
                "best_at_equal_compute",
                "gain_at_equal_compute_floors",
                "covered",
            ]
        )
        for c in comparisons:
            w.writerow(
                [
                    c.policy,
                    c.arm,
                    c.seed,
                    c.rounds,
                    _cell(floor),
                    f"{c.full_compute:.3f}",
                    _cell(c.full_best),
                    f"{c.compute:.3f}",
                    _cell(c.best),
                    _cell(c.compute_ratio),
                    _cell(c.reports_ratio),
                    _cell(c.best_gap),
                    _cell(c.to_same_ratio),
                    _cell(c.equal_best),
                    _cell(c.equal_gain),
                    _cell(c.covered),
                ]
            )
        for m in summaries:
            w.writerow(
                [
                    m.policy,
                    m.arm,
                    "median",
                    "",
                    _cell(floor),
                    "",
                    "",
                    "",
                    "",
                    _cell(m.compute_ratio),
                    _cell(m.reports_ratio),
                    _cell(m.best_gap),
                    _cell(m.to_same_ratio),
                    "",
                    _cell(m.equal_gain),
                    _cell(m.covered),
                ]
            )
    return rounds_csv, summary_csv


def _cell(value: float | None) -> str:
    return "" if value is None else repr(value)


def write_svg(
    path: Path,
    sessions: Sequence[Session],
    policies: Sequence[str],
    arms: Sequence[str],
    goal: str,
    floor: float | None,
    metric: str,
) -> None:
    """Best so far against cumulative compute: one panel per policy, one colour per arm,
    one step line per seed; the grey band is full's best median ± one noise floor."""
    width, height, pad_l, pad_r, pad_t, pad_b = 460, 300, 64, 16, 34, 44
    parts: list[str] = []
    for p_i, policy in enumerate(policies):
        x0 = p_i * width
        mine = [s for s in sessions if s.policy == policy]
        curves = {id(s): curve(s.rounds, goal) for s in mine}
        values = [b for c in curves.values() for _, b in c if b is not None]
        spans = [c[-1][0] for c in curves.values() if c]
        if not values or not spans:
            continue
        lo, hi = min(values), max(values)
        if hi == lo:
            hi = lo + abs(lo) * 0.05 + 1e-9
        margin = (hi - lo) * 0.05
        lo, hi = lo - margin, hi + margin
        xmax = max(spans)

        def sx(v: float, x0: float = x0, xmax: float = xmax) -> float:
            return x0 + pad_l + v / xmax * (width - pad_l - pad_r)

        def sy(v: float, lo: float = lo, hi: float = hi) -> float:
            return pad_t + (hi - v) / (hi - lo) * (height - pad_t - pad_b)

        parts.append(
            f'<text x="{x0 + width / 2:.1f}" y="18" text-anchor="middle" font-size="13" '
            f'font-weight="bold">{escape(policy)}: best {escape(metric)} so far ({goal})</text>'
            f'<rect x="{x0 + pad_l}" y="{pad_t}" width="{width - pad_l - pad_r}" '
            f'height="{height - pad_t - pad_b}" fill="none" stroke="#999"/>'
        )
        full_bests = [
            b for s in mine if s.arm == FULL and (b := best_of(s.rounds, goal)) is not None
        ]
        if full_bests and floor:
            mid = statistics.median(full_bests)
            top, bottom = sy(min(hi, mid + floor)), sy(max(lo, mid - floor))
            parts.append(
                f'<rect x="{x0 + pad_l}" y="{top:.1f}" width="{width - pad_l - pad_r}" '
                f'height="{max(0.0, bottom - top):.1f}" fill="#000" fill-opacity="0.07"/>'
            )
        for k in range(5):
            v = lo + (hi - lo) * k / 4
            y = sy(v)
            parts.append(
                f'<line x1="{x0 + pad_l}" x2="{x0 + width - pad_r}" y1="{y:.1f}" y2="{y:.1f}" '
                f'stroke="#eee"/><text x="{x0 + pad_l - 4}" y="{y + 4:.1f}" font-size="10" '
                f'text-anchor="end">{v:.4g}</text>'
            )
            xv = xmax * k / 4
            parts.append(
                f'<text x="{sx(xv):.1f}" y="{height - pad_b + 14}" font-size="10" '
                f'text-anchor="middle">{xv:.0f}</text>'
            )
        parts.append(
            f'<text x="{x0 + pad_l + (width - pad_l - pad_r) / 2:.1f}" y="{height - 8}" '
            f'font-size="11" text-anchor="middle">compute (sum of round seconds)</text>'
        )
        for s in mine:
            pts = [(c, b) for c, b in curves[id(s)] if b is not None]
            if not pts:
                continue
            d = []
            for i, (c, b) in enumerate(pts):
                if i:
                    d.append(f"{sx(c):.1f},{sy(pts[i - 1][1]):.1f}")  # a step: flat, then down
                d.append(f"{sx(c):.1f},{sy(b):.1f}")
            parts.append(
                f'<polyline points="{" ".join(d)}" fill="none" stroke="{COLORS.get(s.arm, "#000")}" '
                f'stroke-width="1.6" stroke-opacity="0.8"/>'
            )
            last_c, last_b = curves[id(s)][-1]
            if last_b is not None:
                parts.append(
                    f'<circle cx="{sx(last_c):.1f}" cy="{sy(last_b):.1f}" r="2.5" '
                    f'fill="{COLORS.get(s.arm, "#000")}"/>'
                )
    for i, arm in enumerate(arms):
        x, y = 20 + i * 130, height + 16
        parts.append(
            f'<line x1="{x}" x2="{x + 24}" y1="{y}" y2="{y}" stroke="{COLORS.get(arm, "#000")}" '
            f'stroke-width="3"/><text x="{x + 30}" y="{y + 4}" font-size="12">{escape(arm)}</text>'
        )
    svg = (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width * max(1, len(policies))}" '
        f'height="{height + 26}" font-family="sans-serif"><rect width="100%" height="100%" '
        f'fill="white"/>' + "".join(parts) + "</svg>\n"
    )
    path.write_text(svg)


# -- main ------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="Compute used against best reached, with and without run.prune / run.screen."
    )
    p.add_argument("out", type=Path, help="results folder (rounds.csv, summary.csv, compute.svg)")
    p.add_argument(
        "--project", type=Path, default=DEFAULT_PROJECT, help="default: examples/lr-cliff"
    )
    p.add_argument("--policies", default=",".join(OFFLINE), help="from tpe,random (default both)")
    p.add_argument(
        "--llm",
        action="store_true",
        help="add the llm policy: the provider of TRAINEE_LLM_* / ~/.trainee/config.json, "
        "or --llm-url",
    )
    p.add_argument(
        "--llm-url",
        default=None,
        help="an OpenAI-compatible server for --llm (e.g. bench/real_model.py's llama.cpp one)",
    )
    p.add_argument("--llm-model", default="smollm2-135m-instruct", help="its model, with --llm-url")
    p.add_argument("--seeds", type=int, default=3, help="seeds per policy (0..N-1), default 3")
    p.add_argument("--rounds", type=int, default=8, help="rounds per full session, default 8")
    p.add_argument(
        "--extend",
        type=float,
        default=2.0,
        help="the pruning/screening sessions run rounds x this (for the best at equal "
        "compute), default 2",
    )
    p.add_argument(
        "--prune",
        default=None,
        help="run.prune mapping (YAML/JSON, or @file); default: the project's",
    )
    p.add_argument(
        "--screen",
        default=None,
        help="run.screen mapping (YAML/JSON, or @file); default: no screening arms",
    )
    p.add_argument(
        "--noise-repeats", type=int, default=3, help="baseline seeds for the noise floor, default 3"
    )
    p.add_argument(
        "--seed-flag", default="--seed", help="the training command's seed flag, default --seed"
    )
    p.add_argument(
        "--noise-floor", type=float, default=None, help="use this floor instead of measuring it"
    )
    p.add_argument(
        "--jobs", type=int, default=1, help="sessions at once (default 1: compute is timed)"
    )
    p.add_argument("--session-timeout", type=float, default=3600.0, help="seconds per session")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    unknown = [p for p in policies if p not in OFFLINE]
    if unknown or not policies:
        print(f"--policies: choose from {','.join(OFFLINE)} (llm: --llm)", file=sys.stderr)
        return 2
    if args.llm:
        policies += list(LLM_POLICIES)
    if args.seeds < 1 or args.rounds < 2 or args.extend < 1 or args.noise_repeats < 2:
        print("--seeds >= 1, --rounds >= 2, --extend >= 1, --noise-repeats >= 2", file=sys.stderr)
        return 2
    source = args.project.resolve()
    if not (source / ".trainee" / "project.yaml").is_file():
        print(f"--project {source}: no .trainee/project.yaml there", file=sys.stderr)
        return 2
    from trainee.spec import load_project
    from trainee.states import RoundStatus

    spec = load_project(str(source))
    goal = str(spec.metrics.specs[0].goal) if spec.metrics.specs else "min"
    metric = spec.metrics.specs[0].name if spec.metrics.specs else "loss"
    prune = parse_mapping(args.prune, "--prune") if args.prune else project_prune(source)
    if prune is None:
        print(f"--prune: {source} has no run.prune; give one", file=sys.stderr)
        return 2
    screen = parse_mapping(args.screen, "--screen") if args.screen else None
    extended = max(args.rounds, math.ceil(args.rounds * args.extend))
    arms = [Arm(FULL, None, None, args.rounds), Arm(PRUNE, prune, None, extended)]
    if screen is not None:
        arms += [Arm(SCREEN, None, screen, extended), Arm(BOTH, prune, screen, extended)]

    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="trainee-compute-"))
    llm_env: dict[str, str] = {}
    if args.llm_url:
        llm_env = {
            "TRAINEE_LLM_PROVIDER": "openai_compatible",
            "TRAINEE_LLM_BASE_URL": args.llm_url.rstrip("/"),
            "TRAINEE_LLM_MODEL": args.llm_model,
        }
    runtime = Path(tempfile.mkdtemp(prefix="tr-compute-", dir="/tmp"))
    daemon = Daemon(runtime=runtime, env=daemon_env(runtime, llm_env))
    started = time.monotonic()
    usable: list[Arm] = []
    try:
        for arm in arms:
            refused = spec_refuses(source, work, arm)
            if refused is None:
                usable.append(arm)
            else:
                print(f"note: the {arm.name} arm is skipped: the spec refuses it ({refused})")
        if args.noise_floor is not None:
            floor: float | None = args.noise_floor
            print(f"noise floor (given): {fmt(floor, 4)}")
        else:
            values = measure_noise(source, work, args.noise_repeats, args.seed_flag)
            floor = noise_floor(values)
            shown = ", ".join(fmt(v, 5) for v in values)
            print(
                f"noise floor: {metric} of the baseline on {args.noise_repeats} seeds: {shown}; "
                f"sample standard deviation {fmt(floor, 4)}"
            )
        jobs = [
            (policy, seed, arm)
            for policy in policies
            for seed in range(args.seeds)
            for arm in usable
        ]
        print(
            f"{len(jobs)} sessions: {', '.join(policies)} x {args.seeds} seeds x arms "
            f"{', '.join(a.name for a in usable)}; full: {args.rounds} rounds, the others "
            f"{extended}; project {source.name}, {args.jobs} at a time",
            flush=True,
        )
        line = daemon.start(timeout=60)
        if not line.startswith("READY"):
            raise SystemExit(f"the daemon did not start: {line!r}\n{daemon.log[-2000:]}")

        def one(job: tuple[str, int, Arm]) -> Session:
            policy, seed, arm = job
            root = prepare(source, work, arm, policy, seed)
            t0 = time.monotonic()
            try:
                s = run_session(daemon, root, policy, seed, arm, args.session_timeout)
            except Exception as exc:  # a refused start (no provider for llm) ends this session
                print(f"  {policy} seed {seed} {arm.name}: not run: {exc}", flush=True)
                return Session(policy, seed, arm.name, [], error=f"{type(exc).__name__}: {exc}")
            print(
                f"  {policy} seed {seed} {arm.name}: {len(s.rounds)} rounds, "
                f"{compute_of(s.rounds):.1f}s of compute ({time.monotonic() - t0:.0f}s wall), "
                f"best {fmt(best_of(s.rounds, goal), 5)}, "
                f"{sum(r.status == RoundStatus.PRUNED for r in s.rounds)} pruned; "
                f"{s.stop_reason}",
                flush=True,
            )
            return s

        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            sessions = list(pool.map(one, jobs))
    finally:
        daemon.stop()
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(daemon.runtime, ignore_errors=True)

    comparisons = []
    for s in sessions:
        full = next(
            (f for f in sessions if f.arm == FULL and f.policy == s.policy and f.seed == s.seed),
            None,
        )
        if s.arm != FULL and s.rounds and full is not None and full.rounds:
            comparisons.append(compare(full, s, args.rounds, goal, floor))
    summaries = summarize(comparisons)
    print(
        f"\n{metric} ({goal}); noise floor {fmt(floor, 4)}; medians over seeds; "
        f"compute = sum of round seconds over the first {args.rounds} rounds\n"
    )
    print(table(summaries))
    print(
        "\ncompute: arm / full over the same rounds (goal <= 0.6); gap: best difference in noise "
        "floors, + = worse (goal <= 1);\nto-same: compute to come within a floor of full's best / "
        "full's compute (inf: never); reached: seeds that did;\ngain@eq: better best at full's "
        "compute, in floors (goal > 0); covered: fraction of full's compute the arm ran"
    )
    for s in sessions:
        if s.error:
            print(f"  note: {s.policy} seed {s.seed} {s.arm}: {s.stop_reason}: {s.error}")
    rounds_csv, summary_csv = write_csvs(args.out, sessions, comparisons, summaries, goal, floor)
    svg = args.out / "compute.svg"
    write_svg(svg, sessions, policies, [a.name for a in usable], goal, floor, metric)
    total = sum(compute_of(s.rounds) for s in sessions)
    print(
        f"\n{sum(len(s.rounds) for s in sessions)} rounds, {total:.0f}s of compute, "
        f"{time.monotonic() - started:.0f}s wall\nwrote {rounds_csv}\nwrote {summary_csv}\nwrote {svg}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
