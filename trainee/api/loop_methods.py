"""The loop's methods: start, inspect, stop sessions; rounds; reports; prompt preview."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Annotated, Any

import anyio
import msgspec

from trainee.api import resolve
from trainee.api.context import CallContext
from trainee.api.methods import registry
from trainee.api.resolve import manager_of
from trainee.errors import (
    InvalidParams,
    InvalidState,
    NotFound,
    ProviderError,
    SandboxError,
    TraineeError,
)
from trainee.launch.layout import ProjectLayout
from trainee.launch.sandbox import check_bwrap
from trainee.policies import needs_provider
from trainee.policies.llm import LlmPolicy
from trainee.research import analysis
from trainee.research.prune import pruned_reason
from trainee.research.state import ResearchState
from trainee.session.inputs import (
    best_after_each,
    decision_budget,
    decision_slots,
    observe_history,
    rebuild_state,
)
from trainee.session.manager import SessionManager
from trainee.spec import ProjectSpec, SecurityMode, load_project
from trainee.spec import wire as w
from trainee.spec.primary import primary_metric
from trainee.states import ROUND_FINISHED, RoundStatus
from trainee.store.db import Store
from trainee.store.export import write_ledgers, write_report
from trainee.store.records import DecisionRecord, RoundRecord, SessionRecord


class SessionView(msgspec.Struct, kw_only=True):
    """A session's record as clients see it (its environment and spec stay inside)."""

    index: int
    id: str
    project_root: str
    status: str
    stop_reason: str | None
    policy: str
    security_mode: str
    max_rounds: int
    created_at: float
    updated_at: float
    finished_at: float | None
    cwd: str
    best_round: int | None
    baseline_round: int | None
    tokens: int
    cost_usd: float
    error: str | None
    stop_detail: str | None
    """What the policy said when it stopped the session (``stop_reason`` policy_stop)."""


HIDDEN_SESSION_FIELDS = frozenset({"env", "spec"})
"""Fields of a SessionRecord no client sees: the caller's environment may hold secrets."""


class RoundView(RoundRecord, kw_only=True):
    """A round's record; ``idle_for``: seconds since the running round's last output or
    log-file change (None when it is not running); ``prune_reason``: why a pruned round
    ended early, in one line (``pruned: median rule: ...``, ``pruned: by the agent: ...``;
    None for the other rounds)."""

    idle_for: float | None = None
    prune_reason: str | None = None
    best_after: int | None = None
    """In ``loop_get``: the session's best round once this round finished (None while it
    runs or when no round had a result): the best-so-far line, by the research state's
    rule."""


class PrimaryMetricView(msgspec.Struct, kw_only=True):
    """The metric a session is judged by and which way is better: the first
    ``metrics.specs`` entry, else the built-in loss the rounds report (see
    :mod:`trainee.spec.primary`)."""

    name: str
    goal: str


class RunView(RoundView, kw_only=True):
    """A round in the project's list of runs: ``run_id`` is its position (1-based)."""

    run_id: int
    session_id: str


def _public(rec: SessionRecord) -> SessionView:
    data = msgspec.to_builtins(rec)
    return SessionView(**{k: v for k, v in data.items() if k not in HIDDEN_SESSION_FIELDS})


def _round_fields(rec: RoundRecord, now: float | None) -> dict[str, object]:
    fields = {f: getattr(rec, f) for f in rec.__struct_fields__}
    if rec.status == RoundStatus.RUNNING and rec.last_activity_at:
        fields["idle_for"] = max(0.0, (now or time.time()) - rec.last_activity_at)
    if rec.status == RoundStatus.PRUNED:
        fields["prune_reason"] = pruned_reason(rec.warnings) or str(RoundStatus.PRUNED)
    return fields


def _round_public(rec: RoundRecord, now: float | None = None) -> RoundView:
    return RoundView(**_round_fields(rec, now))  # type: ignore[arg-type]


class SessionsListParams(w.Wire):
    project_root: str | None = None
    limit: Annotated[int, msgspec.Meta(ge=1)] | None = None
    """Only the latest ``limit`` sessions (of the project)."""


class SessionSummary(msgspec.Struct, kw_only=True):
    """One session at a glance. ``metric`` is the primary metric's name (from its
    research state; None before a round finished); ``duration_sec`` runs to now while
    the session runs."""

    id: str
    project_root: str
    status: str
    stop_reason: str | None
    running: bool
    policy: str
    security_mode: str
    max_rounds: int
    rounds: int
    metric: str | None
    goal: str | None
    best_round: int | None
    best_metric: float | None
    baseline_round: int | None
    baseline_metric: float | None
    started_at: float
    finished_at: float | None
    duration_sec: float
    tokens: int
    cost_usd: float
    error: str | None


class SessionsListResult(msgspec.Struct, kw_only=True):
    sessions: list[SessionSummary]


class _StateHead(msgspec.Struct):
    """The two fields of research_state.json a listing needs (the rest is skipped)."""

    primary_metric: str | None = None
    goal: str | None = None


_STATE_HEAD = msgspec.json.Decoder(_StateHead)


def _state_head(root: str, index: int) -> _StateHead:
    path = ProjectLayout.for_root(root).session(index).research_state
    try:
        return _STATE_HEAD.decode(path.read_bytes())
    except (OSError, msgspec.DecodeError):
        return _StateHead()


async def _summaries(
    manager: SessionManager, root: str, records: list[SessionRecord]
) -> list[SessionSummary]:
    store = await manager.store_for(root)
    now = time.time()
    out = []
    for rec in records:
        rounds = {r.index: r for r in await store.list_rounds(rec.index)}
        head = await anyio.to_thread.run_sync(_state_head, root, rec.index)
        best = rounds.get(rec.best_round) if rec.best_round else None
        base = rounds.get(rec.baseline_round) if rec.baseline_round else None
        running = manager.control_of(root, rec.index) is not None
        end = rec.finished_at if rec.finished_at and not running else now
        out.append(
            SessionSummary(
                id=rec.id,
                project_root=rec.project_root,
                status=rec.status,
                stop_reason=rec.stop_reason,
                running=running,
                policy=rec.policy,
                security_mode=rec.security_mode,
                max_rounds=rec.max_rounds,
                rounds=len(rounds),
                metric=head.primary_metric,
                goal=head.goal,
                best_round=rec.best_round,
                best_metric=best.primary_metric if best else None,
                baseline_round=rec.baseline_round,
                baseline_metric=base.primary_metric if base else None,
                started_at=rec.created_at,
                finished_at=rec.finished_at,
                duration_sec=max(0.0, end - rec.created_at),
                tokens=rec.tokens,
                cost_usd=rec.cost_usd,
                error=rec.error,
            )
        )
    return out


@registry.method(SessionsListParams, SessionsListResult)
async def sessions_list(ctx: CallContext, params: SessionsListParams) -> SessionsListResult:
    """List sessions: the running ones across every project, or one project's, oldest first.

    Each entry: status, stop reason, policy, rounds so far, the primary metric's
    best and baseline values (and rounds), start, end and duration, tokens and cost.
    ``limit`` keeps the latest N of the project's.
    """
    manager = manager_of(ctx)
    if params.project_root is None:
        by_root: dict[str, list[SessionRecord]] = {}
        for rec in manager.running_sessions():
            by_root.setdefault(rec.project_root, []).append(rec)
        found = [s for root, recs in by_root.items() for s in await _summaries(manager, root, recs)]
        return SessionsListResult(sessions=found)
    root = resolve.project_root(ctx, params.project_root)
    store = await resolve.project_store(ctx, root, required=False)
    if store is None:
        return SessionsListResult(sessions=[])
    records = await store.list_sessions()
    if params.limit is not None:
        records = records[-params.limit :]
    return SessionsListResult(sessions=await _summaries(manager, root, records))


class LoopStartResult(msgspec.Struct, kw_only=True):
    session: str
    project_root: str
    policy: str
    security_mode: str
    max_rounds: int
    provider_test: dict[str, Any] | None = None
    cursor: int = 0


@registry.method(w.LoopStartParams, LoopStartResult)
async def loop_start(ctx: CallContext, params: w.LoopStartParams) -> LoopStartResult:
    """Start a tuning session on a project (or continue one with ``resume``).

    Validates the project, checks the sandbox in guarded mode and, for the
    ``llm`` policy, live-tests the provider first: a session never starts on a
    provider that does not answer. ``env`` and ``cwd`` are the caller's (the CLI
    sends its own); the training command runs with that environment.
    """
    manager = manager_of(ctx)
    root = resolve.project_root(ctx, params.project_root)
    env = params.env if params.env is not None else dict(manager.default_env)
    cursor = ctx.services.bus.last_id  # a live view watches from here: nothing older
    if params.resume:
        if params.policy is not None:
            raise InvalidParams(
                "a resumed session keeps its decision policy; --policy cannot change it",
                {"field": "policy", "reason": "not changeable on resume"},
            )
        rec = await manager.resume(
            root,
            params.resume,
            env if params.env is not None else None,
            max_rounds=params.max_rounds,
            security_mode=params.security_mode,
        )
        return LoopStartResult(
            session=rec.id,
            project_root=root,
            policy=rec.policy,
            security_mode=rec.security_mode,
            max_rounds=rec.max_rounds,
            cursor=cursor,
        )
    spec = await anyio.to_thread.run_sync(load_project, root)
    mode = params.security_mode or str(spec.advanced.security_mode)
    if mode not in ("guarded", "unsafe"):
        raise InvalidParams(
            f"security_mode must be guarded or unsafe, got {mode!r}", {"field": "security_mode"}
        )
    if mode == SecurityMode.GUARDED:
        try:
            await anyio.to_thread.run_sync(check_bwrap)
        except SandboxError as exc:
            raise SandboxError(
                exc.message, {"hint": "install bubblewrap, or run with --unsafe"}
            ) from None
    policy = params.policy or spec.decision.policy
    provider_test = None
    if needs_provider(policy):
        from trainee.llm.client import provider_test as live_test
        from trainee.llm.client import require_provider

        # every configured provider is tried (a structured request, as decisions make):
        # a dead primary with a healthy backup still runs, on the backup
        provider_test = await live_test(env, policy=policy)
        require_provider(provider_test)
    rec = await manager.start(
        spec,
        policy=policy,
        security_mode=mode,
        max_rounds=params.max_rounds,
        env=env,
        cwd=params.cwd or root,
    )
    return LoopStartResult(
        session=rec.id,
        project_root=root,
        policy=policy,
        security_mode=mode,
        max_rounds=rec.max_rounds,
        provider_test=provider_test,
        cursor=cursor,
    )


class LoopGetResult(msgspec.Struct, kw_only=True):
    session: SessionView
    rounds: list[RoundView]
    current_round: RoundView | None
    """The running (or pending) round."""
    running: bool
    """The session's task runs in this daemon."""
    best: RoundView | None
    baseline: RoundView | None
    metric: PrimaryMetricView
    """The primary metric (the project's files as they are now; the built-in loss when
    they no longer load)."""


class NoiseView(msgspec.Struct, kw_only=True):
    """``run.noise``'s measurement: the primary ``metric`` of the baseline's configuration
    on ``seeds`` values of the ``seed`` tunable (``rounds``), their ``mean`` ± ``spread``
    (sample standard deviation; None before any is measured), the ``floor`` a new best
    must beat (``margin`` times the spread, from two seeds on) and all of it in one line
    (``text``, as report.md and the LLM's prompt say it)."""

    metric: str
    seed: str
    seeds: int
    rounds: list[int]
    mean: float | None
    spread: float | None
    floor: float | None
    margin: float
    text: str


def _noise_view(state: ResearchState | None) -> NoiseView | None:
    noise = state.noise if state is not None else None
    if state is None or noise is None:
        return None
    name = state.primary_metric or "metric"
    return NoiseView(
        metric=name,
        seed=noise.seed,
        seeds=len(noise.values),
        rounds=list(noise.rounds),
        mean=noise.mean,
        spread=noise.spread,
        floor=noise.floor,
        margin=noise.margin,
        text=noise.describe(name),
    )


async def _research_state(
    manager: SessionManager, root: str, rec: SessionRecord, rounds: list[RoundRecord]
) -> ResearchState | None:
    """The session's research state: the running session's own, else rebuilt from its
    rounds for the project's spec (None when its files no longer load)."""
    running = manager.running_of(root, rec.index)
    if running is not None and running.runner.state is not None:
        return running.runner.state
    spec = await _session_spec(manager, root, rec)
    return rebuild_state(spec, rounds) if spec is not None else None


async def _session_spec(
    manager: SessionManager, root: str, rec: SessionRecord
) -> ProjectSpec | None:
    """The spec a session judges by: a running session's own (no file read on the page's
    polls), else the project's files as they are now (None when they no longer load)."""
    running = manager.running_of(root, rec.index)
    if running is not None and running.runner.spec is not None:
        return running.runner.spec
    return await _spec_or_none(root)


@registry.method(w.SessionParams, LoopGetResult)
async def loop_get(ctx: CallContext, params: w.SessionParams) -> LoopGetResult:
    """Return a session's state: its record, its rounds, the running round with its activity.

    Without a session: the one running session, or the project's latest.
    ``idle_for`` on the running round is the seconds since its last output or
    log-file change (passive: it never stops anything).
    """
    found = await resolve.resolve_session(ctx, params.session, params.project_root)
    root, rec = found.root, found.record
    rounds = await found.store.list_rounds(rec.index)
    now = time.time()
    current = next((r for r in rounds if r.status not in ROUND_FINISHED), None)
    by_index = {r.index: r for r in rounds}
    running = manager_of(ctx).control_of(root, rec.index) is not None
    best = by_index.get(rec.best_round) if rec.best_round else None
    baseline = by_index.get(rec.baseline_round) if rec.baseline_round else None
    spec = await _session_spec(manager_of(ctx), root, rec)
    specs = spec.metrics.specs if spec is not None else ()
    metric = primary_metric(specs, (r.finals for r in rounds))
    best_after = best_after_each(spec, rounds) if spec is not None else {}
    views = []
    for r in rounds:
        view = _round_public(r, now)
        view.best_after = best_after.get(r.index)
        views.append(view)
    return LoopGetResult(
        session=_public(rec),
        rounds=views,
        current_round=_round_public(current, now) if current else None,
        running=running,
        best=_round_public(best) if best else None,
        baseline=_round_public(baseline) if baseline else None,
        metric=PrimaryMetricView(name=metric.name, goal=str(metric.goal)),
    )


STOP_WAIT_SEC = 10.0
"""How long ``loop_stop`` waits for the session to end by default, before it answers."""


class LoopStopParams(w.SessionParams, kw_only=True):
    wait_sec: Annotated[float, msgspec.Meta(ge=0, le=600)] = STOP_WAIT_SEC
    """How long to wait for the session to end (its round gets SIGTERM, SIGKILL after
    the grace) before answering; it goes on ending after that (``ended`` false)."""


class LoopStopResult(msgspec.Struct, kw_only=True):
    """``stopped``: this call stopped the session (``ended``: it has ended by the time of
    the answer; else it is still ending and ends within its round's grace); false when
    there was nothing to stop. ``message`` says what happened, ``state`` is the
    session's (or the named or latest one's when nothing ran)."""

    stopped: bool
    message: str
    ended: bool = True
    state: LoopGetResult | None = None


@registry.method(LoopStopParams, LoopStopResult, name="loop_stop")
async def loop_stop(ctx: CallContext, params: LoopStopParams) -> LoopStopResult:
    """Stop a running session: its round gets SIGTERM, then SIGKILL after the grace.

    The stop is recorded before it is delivered, so it reaches the round whatever it
    is doing (starting, its sandbox being set up, being re-adopted). Waits up to
    ``wait_sec`` for the session to end and says what happened to its rounds
    (``round 3 stopped after 1.2 s``, or that a round is still ending). The session
    ends with stop reason ``user_stop``; its report and ledgers are written. No
    process of the round survives. Nothing running (or the named session already
    ended) is not an error: ``stopped`` is false and ``message`` says so; an unknown
    session is NotFound.
    """
    manager = manager_of(ctx)
    root = resolve.project_root(ctx, params.project_root) if params.project_root else None
    try:
        running = resolve.running_session(ctx, params.session, root)
    except NotFound:
        return await _nothing_to_stop(ctx, params, root)
    rec = running.runner.record
    store = running.runner.store
    active = [r.index for r in await store.list_rounds(rec.index) if r.status not in ROUND_FINISHED]
    asked = time.time()
    with contextlib.suppress(NotFound):  # it ended on its own between the two calls
        await manager.stop(rec.project_root, rec.id, wait=False)
    with anyio.move_on_after(params.wait_sec):
        await running.done.wait()
    ended = running.done.is_set()
    rounds = {r.index: r for r in await store.list_rounds(rec.index)}
    spec = running.runner.spec
    grace = spec.advanced.stop_grace_sec if spec is not None else None
    message = stop_message(
        rec.id, [rounds[i] for i in active if i in rounds], asked, grace, ended=ended
    )
    state = await loop_get(ctx, w.SessionParams(session=rec.id, project_root=rec.project_root))
    return LoopStopResult(stopped=True, message=message, ended=ended, state=state)


def stop_message(
    session: str, rounds: list[RoundRecord], asked: float, grace: float | None, *, ended: bool
) -> str:
    """What a stop did to the rounds that ran when it came (one clause each)."""
    ending = [r for r in rounds if r.status not in ROUND_FINISHED]
    if ending:
        names = _round_names([r.index for r in ending])
        verb = "is" if len(ending) == 1 else "are"
        within = f" (grace {grace:g} s)" if grace is not None else ""
        return f"stop requested for {session}; {names} {verb} still ending{within}"
    if not ended:
        return f"stop requested for {session}; it is still ending"
    if not rounds:
        return f"stopped {session} (no round was running)"
    parts = []
    for r in rounds:
        after = f" after {max(0.0, r.ended_at - asked):.1f} s" if r.ended_at else ""
        parts.append(f"round {r.index} {r.status}{after}")
    return f"stopped {session}: " + ", ".join(parts)


def _round_names(indexes: list[int]) -> str:
    if len(indexes) == 1:
        return f"round {indexes[0]}"
    return "rounds " + ", ".join(str(i) for i in indexes)


async def _nothing_to_stop(
    ctx: CallContext, params: LoopStopParams, root: str | None
) -> LoopStopResult:
    where = f" in {root}" if root else ""
    if root is None and ctx.services.project_root is None:
        named = f" {params.session}" if params.session else ""
        return LoopStopResult(
            stopped=False, message=f"nothing to stop: no session{named} is running"
        )
    if params.session is None and (
        root is None or not ProjectLayout.for_root(root).database.exists()
    ):
        return LoopStopResult(
            stopped=False, message=f"nothing to stop: no session is running{where}"
        )
    state = await loop_get(ctx, w.SessionParams(session=params.session, project_root=root))
    rec = state.session
    ended = f"{rec.id} is {rec.status}" + (f" ({rec.stop_reason})" if rec.stop_reason else "")
    if params.session is None:
        ended = f"no session is running{where}; the latest, {ended}"
    return LoopStopResult(stopped=False, message=f"nothing to stop: {ended}", state=state)


class RunsListResult(msgspec.Struct, kw_only=True):
    project_root: str
    sessions: list[SessionView]
    rounds: list[RunView]


@registry.method(w.RunsListParams, RunsListResult)
async def runs_list(ctx: CallContext, params: w.RunsListParams) -> RunsListResult:
    """List a project's sessions and rounds (status, params, metrics), newest last.

    ``run_id`` of a round in ``runs_get`` is its position in this list
    (1-based over the project's rounds in order); ``session`` narrows the list.
    """
    root = resolve.project_root(ctx, params.project_root)
    store = await resolve.project_store(ctx, root)
    assert store is not None
    sessions = await store.list_sessions()
    rounds: list[RunView] = []
    run_id = 0
    now = time.time()
    for s in sessions:
        for r in await store.list_rounds(s.index):
            run_id += 1
            if params.session is None or s.id == params.session:
                fields = _round_fields(r, now)
                rounds.append(RunView(run_id=run_id, session_id=s.id, **fields))  # type: ignore[arg-type]
    wanted = [s for s in sessions if params.session is None or s.id == params.session]
    return RunsListResult(
        project_root=root, sessions=[_public(s) for s in wanted], rounds=rounds[-params.limit :]
    )


class RunsGetResult(msgspec.Struct, kw_only=True):
    run_id: int
    session_id: str
    round: RoundView
    decision: DecisionRecord | None
    """The decision that chose the round (None for the baseline)."""
    log_path: str
    metric_points: int


@registry.method(w.RunsGetParams, RunsGetResult)
async def runs_get(ctx: CallContext, params: w.RunsGetParams) -> RunsGetResult:
    """Return one round by ``run_id`` (see runs_list): record, its decision, log location."""
    root = resolve.project_root(ctx, params.project_root)
    store = await resolve.project_store(ctx, root)
    assert store is not None
    run_id = 0
    for s in await store.list_sessions():
        decisions = None
        for r in await store.list_rounds(s.index):
            run_id += 1
            if run_id != params.run_id:
                continue
            decisions = decisions or await store.list_decisions(s.index)
            decision = next((d for d in reversed(decisions) if d.round == r.index), None)
            layout = ProjectLayout.for_root(root, s.env).session(s.index).round(r.index)
            points = await store.points(s.index, r.index)
            return RunsGetResult(
                run_id=run_id,
                session_id=s.id,
                round=_round_public(r),
                decision=decision,
                log_path=str(layout.log),
                metric_points=len(points),
            )
    raise NotFound(f"no run {params.run_id} in {root} ({run_id} runs)", {"run_id": params.run_id})


class ReportResult(msgspec.Struct, kw_only=True):
    session: str
    report: str
    ledger_csv: str
    ledger_jsonl: str
    markdown: str


@registry.method(w.SessionParams, ReportResult)
async def session_report(ctx: CallContext, params: w.SessionParams) -> ReportResult:
    """Write a session's report.md and ledgers now (also done at session end) and return them."""
    found = await resolve.resolve_session(ctx, params.session, params.project_root)
    root, rec, store = found.root, found.record, found.store
    rounds = await store.list_rounds(rec.index)
    decisions = await store.list_decisions(rec.index)
    layout = ProjectLayout.for_root(root).session(rec.index)
    spec = await anyio.to_thread.run_sync(load_project, root)
    metric, goal = primary_metric(spec.metrics.specs, (r.finals for r in rounds))
    noise = _noise_view(await _research_state(manager_of(ctx), root, rec, rounds))

    def write() -> str:
        write_ledgers(layout, rec, rounds)
        path = write_report(
            layout,
            rec,
            rounds,
            metric_name=metric,
            goal=str(goal),
            decisions=decisions,
            tunables=spec.tunables,
            noise=noise.text if noise is not None else None,
        )
        return Path(path).read_text()

    try:
        markdown = await anyio.to_thread.run_sync(write)
    except OSError as exc:
        raise InvalidState(
            f"cannot write the report of {rec.id} in {layout.artifacts}: "
            f"{exc.strerror or exc} (errno {exc.errno})",
            {"path": str(exc.filename or layout.artifacts), "reason": str(exc.strerror or exc)},
        ) from None
    return ReportResult(
        session=rec.id,
        report=str(layout.report),
        ledger_csv=str(layout.ledger_csv),
        ledger_jsonl=str(layout.ledger_jsonl),
        markdown=markdown,
    )


class SessionNoiseResult(msgspec.Struct, kw_only=True):
    session: str
    noise: NoiseView | None
    """None without ``run.noise`` (or when the project's files no longer load)."""


@registry.method(w.SessionParams, SessionNoiseResult)
async def session_noise(ctx: CallContext, params: w.SessionParams) -> SessionNoiseResult:
    """How much the seed alone moves a session's metric (``run.noise``): mean ± spread.

    The baseline's configuration measured on several seeds (the repeats ``run.noise``
    runs, and any round that changed only the seed): their mean and sample standard
    deviation, the noise floor a new best must beat, and the same in one line
    (``text``, as report.md and the LLM's prompt say it). From the running session's
    research state, else rebuilt from the stored rounds.
    """
    found = await resolve.resolve_session(ctx, params.session, params.project_root)
    rounds = await found.store.list_rounds(found.record.index)
    state = await _research_state(manager_of(ctx), found.root, found.record, rounds)
    return SessionNoiseResult(session=found.record.id, noise=_noise_view(state))


class RoundMetricsResult(w.Wire):
    session: str
    round: int
    points: list[tuple[str, float, int | None, int]]
    """Every point in the order it was seen: ``[name, value, step, seq]``."""


class RoundMetricsParams(w.Wire):
    session: w.SessionRef
    round: w.RoundRef
    project_root: str | None = None


@registry.method(RoundMetricsParams, RoundMetricsResult)
async def round_metrics(ctx: CallContext, params: RoundMetricsParams) -> RoundMetricsResult:
    """Every metric point of one round as ``[name, value, step, seq]``, read from the store.

    The page draws a round's curves from these; a running round's points so far.
    """
    found = await resolve.resolve_round(ctx, params.session, params.round, params.project_root)
    points = await found.store.points(found.record.index, found.round.index)
    return RoundMetricsResult(
        session=found.record.id,
        round=found.round.index,
        points=[(p.name, p.value, p.step, p.seq) for p in points],
    )


async def _spec_or_none(root: str) -> ProjectSpec | None:
    """The project's compiled spec, or None when its files no longer load (the analysis
    then plots the params the rounds carry)."""
    try:
        return await anyio.to_thread.run_sync(load_project, root)
    except TraineeError:
        return None


async def _compared(
    store: Store, rec: SessionRecord, rounds: dict[int, RoundRecord], index: int
) -> w.ComparedRound:
    r = rounds.get(index)
    if r is None:
        raise NotFound(
            f"{rec.id} has no round {index} ({len(rounds)} round{'s' if len(rounds) != 1 else ''})",
            {"session": rec.id, "round": index},
        )
    points = await store.points(rec.index, index)
    return analysis.compared_round(rec.id, r, [(p.name, p.value, p.step, p.seq) for p in points])


def _default_round(rec: SessionRecord, rounds: dict[int, RoundRecord]) -> int | None:
    for index in (rec.best_round, rec.baseline_round):
        if index is not None and index in rounds:
            return index
    return max(rounds, default=None)


@registry.method(w.SessionAnalysisParams, w.SessionAnalysis)
async def session_analysis(ctx: CallContext, params: w.SessionAnalysisParams) -> w.SessionAnalysis:
    """The analysis views of a session: parameter importance (Optuna), the rounds over the
    tunables (parallel coordinates, slice plots) and, when asked, two rounds side by side.

    Comparing: ``left_round`` of this session (default its best) against ``right_round``
    of ``right_session`` (default this session; default round: that session's best, or
    this session's baseline). ``compare`` alone asks for that default comparison when
    the session has a round (none before). The page calls it again as rounds finish.
    """
    found = await resolve.resolve_session(ctx, params.session, params.project_root)
    root, rec, store = found.root, found.record, found.store
    rounds = {r.index: r for r in await store.list_rounds(rec.index)}
    spec = await _spec_or_none(root)
    metric, goal = primary_metric(
        spec.metrics.specs if spec is not None else (), (r.finals for r in rounds.values())
    )
    comparison = None
    asked = params.left_round or params.right_round or params.right_session
    if asked or (params.compare and rounds):
        left_index = params.left_round or _default_round(rec, rounds)
        if left_index is None:
            raise InvalidState(
                f"{rec.id} has no round to compare yet", {"session": rec.id, "reason": "no round"}
            )
        left = await _compared(store, rec, rounds, left_index)
        other, other_rounds, other_store = rec, rounds, store
        if params.right_session is not None and params.right_session != rec.id:
            target = await resolve.resolve_session(ctx, params.right_session, root)
            other, other_store = target.record, target.store
            other_rounds = {r.index: r for r in await other_store.list_rounds(other.index)}
        right_index = params.right_round
        if right_index is None and other is rec:
            right_index = rec.baseline_round if rec.baseline_round in rounds else min(rounds)
        elif right_index is None:
            right_index = _default_round(other, other_rounds)
        if right_index is None:
            raise InvalidState(
                f"{other.id} has no round to compare yet",
                {"session": other.id, "reason": "no round"},
            )
        right = await _compared(other_store, other, other_rounds, right_index)
        comparison = analysis.compare(left, right, metric)
    tunables = spec.tunables if spec is not None else ()
    return await anyio.to_thread.run_sync(
        lambda: analysis.build_analysis(
            rec.id,
            list(rounds.values()),
            tunables,
            metric=metric,
            goal=str(goal),
            baseline_round=rec.baseline_round,
            best_round=rec.best_round,
            comparison=comparison,
        )
    )


class PromptPreviewResult(w.Wire):
    """``messages`` are exactly what the next decision sends: shaped for the response
    format the provider gets first (``response_format``: the schema is in the system
    message from ``json_object`` down), with ``format_body`` as its ``response_format``."""

    messages: list[dict[str, Any]]
    schema: dict[str, Any]
    """The JSON schema the answer must follow."""
    chars: int
    policy: str
    """The policy whose prompt it is: the session's llm or hybrid, else llm."""
    round: int
    """The first round the decision is for."""
    plans: int
    """How many plans it asks for (``run.parallel`` candidates in one request)."""
    provider: str | None
    model: str | None
    response_format: str | None
    """json_schema, json_object or text; None when no provider is configured."""
    format_body: dict[str, Any] | None
    max_tokens: int
    note: str = ""


@registry.method(w.PromptPreviewParams, PromptPreviewResult)
async def prompt_preview(ctx: CallContext, params: w.PromptPreviewParams) -> PromptPreviewResult:
    """Compose the next decision's request exactly as the session would send it, without sending it.

    With ``session``: from that session's rounds, environment (its provider settings),
    budget and parallel candidates, and the project's journal, through the same code
    as a real decision; else the first decision from an empty history with the
    daemon's settings. Nothing is written and no provider is called.
    """
    from trainee.llm.client import planned_request

    manager = manager_of(ctx)
    root = resolve.project_root(ctx, params.project_root)
    live: LlmPolicy | None = None
    spec: ProjectSpec | None = None
    if params.session is not None:
        found = await resolve.resolve_session(ctx, params.session, root)
        record = msgspec.structs.replace(found.record, env=manager.full_env(found.record))
        rounds = await found.store.list_rounds(record.index)
        running = manager.running_of(found.root, record.index)
        if running is not None:
            # what the running session sends: its spec, settings and prompt parts
            spec = running.runner.spec
            live = running.runner.policy if isinstance(running.runner.policy, LlmPolicy) else None
    else:
        rounds = []
    if spec is None:
        spec = await anyio.to_thread.run_sync(load_project, root)
    if params.session is None:
        record = _unsaved_session(manager, spec)
    name = record.policy if record.policy in ("llm", "hybrid") else "llm"
    policy = await manager.decision_policy(
        spec,
        record,
        policy=name,
        write_journal=False,
        prompt=(live.settings, live.parts) if live is not None else None,
    )
    assert isinstance(policy, LlmPolicy)
    state = rebuild_state(spec, rounds)
    observe_history(policy, rounds)
    index = max((r.index for r in rounds), default=1) + 1
    if rounds:
        state = msgspec.structs.replace(state, budget=decision_budget(spec, record, rounds, index))
    slots = decision_slots(spec, record, rounds)
    baseline = {t.name: t.baseline for t in spec.tunables}
    request = await anyio.to_thread.run_sync(
        lambda: policy.request(state, spec.tunables, baseline, slots)
    )
    settings = policy.settings
    try:
        sent = planned_request(
            request.messages,
            settings=settings,
            schema=request.schema,
            max_tokens=request.max_tokens,
        )
    except ProviderError as exc:
        messages, provider, model, level, body = request.messages, None, None, None, None
        note = f"{exc.message}: the messages as composed, before a provider shapes them"
    else:
        messages, provider, model = sent.messages, sent.provider, sent.model
        level, body, note = sent.response_format, sent.format_body, ""
    return PromptPreviewResult(
        messages=messages,
        schema=request.schema,
        chars=sum(len(str(m.get("content", ""))) for m in messages),
        policy=name,
        round=index,
        plans=request.plans,
        provider=provider,
        model=model,
        response_format=level,
        format_body=body,
        max_tokens=request.max_tokens,
        note=note,
    )


def _unsaved_session(manager: SessionManager, spec: ProjectSpec) -> SessionRecord:
    """The record a session started now would have (not stored): the daemon's env."""
    return SessionRecord(
        index=1,
        project_root=spec.project_root,
        policy=str(spec.decision.policy),
        security_mode=str(spec.advanced.security_mode),
        max_rounds=spec.run.max_rounds,
        env=dict(manager.default_env),
    )
