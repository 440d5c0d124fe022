"""The loop's methods: start, inspect, stop sessions; rounds; reports; prompt preview."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import anyio
import msgspec

from trainee.api.context import CallContext
from trainee.api.methods import registry
from trainee.api.project_methods import project_root_of
from trainee.errors import InvalidParams, InvalidState, NotFound, ProviderError, SandboxError
from trainee.launch.layout import ProjectLayout, parse_session_id
from trainee.launch.sandbox import check_bwrap
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


def _session_index(session: str) -> int:
    try:
        return parse_session_id(session)
    except ValueError as exc:
        raise InvalidParams(str(exc), {"field": "session", "reason": "bad session id"}) from None


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


class SessionsListResult(msgspec.Struct, kw_only=True):
    sessions: list[dict[str, Any]]


@registry.method(SessionsListParams, SessionsListResult)
async def sessions_list(ctx: CallContext, params: SessionsListParams) -> SessionsListResult:
    """List sessions: the running ones across every project, or all of one project's.

    Each entry is the session record (status, stop reason, policy, best and
    baseline rounds, tokens and cost) without the caller's environment.
    """
    manager = manager_of(ctx)
    if params.project_root is None:
        return SessionsListResult(sessions=[_public(r) for r in manager.running_sessions()])
    root = project_root_of(ctx, params.project_root)
    if not ProjectLayout.for_root(root).database.exists():
        return SessionsListResult(sessions=[])
    store = await manager.store_for(root)
    return SessionsListResult(sessions=[_public(r) for r in await store.list_sessions()])


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
    if policy in ("llm", "hybrid"):
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
    return root, await store.get_session(_session_index(params.session))


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


@registry.method(w.SessionParams, LoopGetResult, name="loop_stop")
async def loop_stop(ctx: CallContext, params: w.SessionParams) -> LoopGetResult:
    """Stop a running session and wait for it: its round gets SIGTERM, then SIGKILL after the grace.

    The session ends with stop reason ``user_stop``; its report and ledgers are
    written. No process of the round survives.
    """
    manager = manager_of(ctx)
    running = manager.find_running(params.project_root, params.session)
    rec = running.runner.record
    await manager.stop(rec.project_root, rec.id)
    return await loop_get(ctx, w.SessionParams(session=rec.id, project_root=rec.project_root))


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
        for r in await store.list_rounds(_session_index(params.session)):
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
        prompt_parts(spec, settings), state, spec.tunables, baseline_params=baseline
    )
    return PromptPreviewResult(
        messages=messages,
        schema=plan_json_schema(spec.tunables),
        chars=sum(len(str(m.get("content", ""))) for m in messages),
    )
