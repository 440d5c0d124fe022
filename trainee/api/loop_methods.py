"""The loop's methods: start, inspect, stop sessions; rounds; reports; prompt preview."""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import Annotated, Any

import anyio
import msgspec

from trainee.api.context import CallContext
from trainee.api.methods import registry
from trainee.api.project_methods import project_root_of
from trainee.errors import InvalidParams, InvalidState, NotFound, ProviderError, SandboxError
from trainee.ids import parse_session
from trainee.launch.layout import ProjectLayout
from trainee.launch.sandbox import check_bwrap
from trainee.policies import needs_provider
from trainee.research.decision import plan_json_schema
from trainee.research.state import new_state, record_round
from trainee.session.manager import SessionManager, prompt_parts
from trainee.session.runner import FINISHED
from trainee.spec import SecurityMode, load_project
from trainee.spec import wire as w
from trainee.store.db import Store
from trainee.store.export import write_ledgers, write_report
from trainee.store.records import RoundRecord, SessionRecord


def manager_of(ctx: CallContext) -> SessionManager:
    manager = ctx.services.extra.get("manager")
    assert isinstance(manager, SessionManager), "the daemon has no session manager"
    return manager


async def existing_store(ctx: CallContext, root: str) -> Store:
    """The project's store, without creating one: reading never changes a project."""
    if not ProjectLayout.for_root(root).database.exists():
        raise NotFound(f"no session in {root} (it has no runtime database)", {"project_root": root})
    return await manager_of(ctx).store_for(root)


def _public(rec: SessionRecord) -> dict[str, Any]:
    data: dict[str, Any] = msgspec.to_builtins(rec)
    data.pop("env", None)  # the caller's environment may hold secrets
    data.pop("spec", None)
    return data


def _round_public(rec: RoundRecord, now: float | None = None) -> dict[str, Any]:
    data: dict[str, Any] = msgspec.to_builtins(rec)
    if rec.status == "running" and rec.last_activity_at:
        data["idle_for"] = max(0.0, (now or time.time()) - rec.last_activity_at)
    return data


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
    root = project_root_of(ctx, params.project_root)
    if not ProjectLayout.for_root(root).database.exists():
        return SessionsListResult(sessions=[])
    store = await manager.store_for(root)
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
    root = project_root_of(ctx, params.project_root)
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
    policy = params.policy or str(getattr(getattr(spec, "decision", None), "policy", "llm"))
    provider_test = None
    if needs_provider(policy):
        from trainee.llm.client import live_test_all
        from trainee.llm.settings import load_settings

        settings = load_settings(env)
        if settings.provider == "none":
            raise ProviderError(
                "no LLM provider is configured: trainee run needs one for the llm policy",
                {
                    "hint": "export TRAINEE_LLM_PROVIDER=openai OPENAI_API_KEY=... OPENAI_MODEL=..., "
                    "or choose an offline policy: --policy tpe|random"
                },
            )
        # every configured provider is tried (a structured request, as decisions make):
        # a dead primary with a healthy backup still runs, on the backup
        provider_test = await live_test_all(settings)
        if not provider_test.get("ok"):
            raise ProviderError(
                f"the LLM provider failed its live test: {provider_test.get('error')}",
                {"provider_test": provider_test, "hint": "check the key, model and base URL"},
            )
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


async def _resolve_session(ctx: CallContext, params: w.SessionParams) -> tuple[str, SessionRecord]:
    manager = manager_of(ctx)
    if params.project_root is None and params.session is None:
        running = manager.running_sessions()
        if len(running) == 1:
            return running[0].project_root, running[0]
        if ctx.services.project_root is None:
            raise InvalidParams(
                "name a session (and its project_root): "
                + (f"{len(running)} sessions are running" if running else "no session is running"),
                {"running": [r.id for r in running]},
            )
    if params.project_root is None and params.session is not None:
        matches = [r for r in manager.running_sessions() if r.id == params.session]
        if len(matches) == 1:
            return matches[0].project_root, matches[0]
    root = project_root_of(ctx, params.project_root)
    store = await existing_store(ctx, root)
    if params.session is None:
        sessions = await store.list_sessions()
        if not sessions:
            raise NotFound(f"no session in {root}", {"project_root": root})
        return root, sessions[-1]
    return root, await store.get_session(parse_session(params.session))


class LoopGetResult(msgspec.Struct, kw_only=True):
    session: dict[str, Any]
    rounds: list[dict[str, Any]]
    current_round: dict[str, Any] | None
    running: bool
    best: dict[str, Any] | None
    baseline: dict[str, Any] | None


@registry.method(w.SessionParams, LoopGetResult)
async def loop_get(ctx: CallContext, params: w.SessionParams) -> LoopGetResult:
    """Return a session's state: its record, its rounds, the running round with its activity.

    Without a session: the one running session, or the project's latest.
    ``idle_for`` on the running round is the seconds since its last output or
    log-file change (passive: it never stops anything).
    """
    root, rec = await _resolve_session(ctx, params)
    store = await existing_store(ctx, root)
    rounds = await store.list_rounds(rec.index)
    now = time.time()
    current = next((r for r in rounds if r.status in ("running", "pending")), None)
    by_index = {r.index: r for r in rounds}
    running = manager_of(ctx).control_of(root, rec.index) is not None
    best = by_index.get(rec.best_round) if rec.best_round else None
    baseline = by_index.get(rec.baseline_round) if rec.baseline_round else None
    return LoopGetResult(
        session=_public(rec),
        rounds=[_round_public(r, now) for r in rounds],
        current_round=_round_public(current, now) if current else None,
        running=running,
        best=_round_public(best) if best else None,
        baseline=_round_public(baseline) if baseline else None,
    )


class LoopStopResult(msgspec.Struct, kw_only=True):
    """``stopped``: this call stopped the session; false when there was nothing to stop
    (``message`` says why; ``state`` is then the named or latest session, if any)."""

    stopped: bool
    message: str
    state: LoopGetResult | None = None


@registry.method(w.SessionParams, LoopStopResult, name="loop_stop")
async def loop_stop(ctx: CallContext, params: w.SessionParams) -> LoopStopResult:
    """Stop a running session and wait for it: its round gets SIGTERM, then SIGKILL after the grace.

    The session ends with stop reason ``user_stop``; its report and ledgers are
    written. No process of the round survives. Nothing running (or the named
    session already ended) is not an error: ``stopped`` is false and ``message``
    says so; an unknown session is NotFound.
    """
    manager = manager_of(ctx)
    root = project_root_of(ctx, params.project_root) if params.project_root else None
    try:
        running = manager.find_running(root, params.session)
    except NotFound:
        return await _nothing_to_stop(ctx, params, root)
    rec = running.runner.record
    with contextlib.suppress(NotFound):  # it ended on its own between the two calls
        await manager.stop(rec.project_root, rec.id)
    state = await loop_get(ctx, w.SessionParams(session=rec.id, project_root=rec.project_root))
    return LoopStopResult(stopped=True, message=f"{rec.id} stopped", state=state)


async def _nothing_to_stop(
    ctx: CallContext, params: w.SessionParams, root: str | None
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
    ended = f"{rec['id']} is {rec['status']}" + (
        f" ({rec['stop_reason']})" if rec.get("stop_reason") else ""
    )
    if params.session is None:
        ended = f"no session is running{where}; the latest, {ended}"
    return LoopStopResult(stopped=False, message=f"nothing to stop: {ended}", state=state)


class RunsListResult(msgspec.Struct, kw_only=True):
    project_root: str
    sessions: list[dict[str, Any]]
    rounds: list[dict[str, Any]]


@registry.method(w.RunsListParams, RunsListResult)
async def runs_list(ctx: CallContext, params: w.RunsListParams) -> RunsListResult:
    """List a project's sessions and rounds (status, params, metrics), newest last.

    ``run_id`` of a round in ``runs_get`` is its position in this list
    (1-based over the project's rounds in order); ``session`` narrows the list.
    """
    root = project_root_of(ctx, params.project_root)
    store = await existing_store(ctx, root)
    sessions = await store.list_sessions()
    rounds: list[dict[str, Any]] = []
    run_id = 0
    for s in sessions:
        for r in await store.list_rounds(s.index):
            run_id += 1
            if params.session is None or s.id == params.session:
                rounds.append({"run_id": run_id, "session_id": s.id, **_round_public(r)})
    wanted = [s for s in sessions if params.session is None or s.id == params.session]
    return RunsListResult(
        project_root=root, sessions=[_public(s) for s in wanted], rounds=rounds[-params.limit :]
    )


class RunsGetResult(msgspec.Struct, kw_only=True):
    run_id: int
    session_id: str
    round: dict[str, Any]
    decision: dict[str, Any] | None
    log_path: str
    metric_points: int


@registry.method(w.RunsGetParams, RunsGetResult)
async def runs_get(ctx: CallContext, params: w.RunsGetParams) -> RunsGetResult:
    """Return one round by ``run_id`` (see runs_list): record, its decision, log location."""
    root = project_root_of(ctx, params.project_root)
    store = await existing_store(ctx, root)
    run_id = 0
    for s in await store.list_sessions():
        decisions = None
        for r in await store.list_rounds(s.index):
            run_id += 1
            if run_id != params.run_id:
                continue
            decisions = decisions or await store.list_decisions(s.index)
            decision = next((d for d in reversed(decisions) if d.round == r.index), None)
            layout = ProjectLayout.for_root(root).session(s.index).round(r.index)
            points = await store.points(s.index, r.index)
            return RunsGetResult(
                run_id=run_id,
                session_id=s.id,
                round=_round_public(r),
                decision=msgspec.to_builtins(decision) if decision else None,
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
    root, rec = await _resolve_session(ctx, params)
    store = await existing_store(ctx, root)
    rounds = await store.list_rounds(rec.index)
    decisions = await store.list_decisions(rec.index)
    layout = ProjectLayout.for_root(root).session(rec.index)
    spec = await anyio.to_thread.run_sync(load_project, root)
    metric = spec.metrics.specs[0].name if spec.metrics.specs else _builtin_metric(rounds)
    goal = str(spec.metrics.specs[0].goal) if spec.metrics.specs else "min"

    def write() -> str:
        write_ledgers(layout, rec, rounds)
        path = write_report(layout, rec, rounds, metric_name=metric, goal=goal, decisions=decisions)
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


def _builtin_metric(rounds: list[RoundRecord]) -> str:
    for r in rounds:
        for name in ("loss", "total_loss"):
            if name in r.finals:
                return name
    return "loss"


class PromptPreviewResult(msgspec.Struct, kw_only=True):
    messages: list[dict[str, Any]]
    schema: dict[str, Any]
    chars: int


@registry.method(w.PromptPreviewParams, PromptPreviewResult)
async def prompt_preview(ctx: CallContext, params: w.PromptPreviewParams) -> PromptPreviewResult:
    """Compose the next decision prompt exactly as the llm policy would, without calling a provider.

    With ``session``: from that session's rounds; else from an empty history.
    """
    from trainee.llm.settings import load_settings
    from trainee.research.prompt import build_messages

    root = project_root_of(ctx, params.project_root)
    spec = await anyio.to_thread.run_sync(load_project, root)
    settings = load_settings(dict(os.environ))
    primary = spec.metrics.specs[0].name if spec.metrics.specs else None
    goal = str(spec.metrics.specs[0].goal) if spec.metrics.specs else "min"
    state = new_state(primary, goal)
    if params.session:
        store = await existing_store(ctx, root)
        for r in await store.list_rounds(parse_session(params.session)):
            if r.status in FINISHED:
                from trainee.research.state import RoundSummary

                state, _ = record_round(
                    state,
                    RoundSummary(
                        index=r.index,
                        status=r.status,
                        params=r.params,
                        diff=r.diff,
                        metric=r.primary_metric,
                        metrics=r.finals,
                        hypothesis=r.hypothesis,
                        expected=r.expected,
                        verdict=None,
                        verdict_reason="",
                        duration_sec=None,
                        failure_tail=r.failure_tail,
                    ),
                )
    baseline = {t.name: t.baseline for t in spec.tunables}
    messages = build_messages(
        prompt_parts(spec, settings),
        state,
        spec.tunables,
        baseline_params=baseline,
        constraints=spec.constraints,
    )
    return PromptPreviewResult(
        messages=messages,
        schema=plan_json_schema(spec.tunables),
        chars=sum(len(str(m.get("content", ""))) for m in messages),
    )
