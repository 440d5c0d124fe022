"""The one resolver: a request's ``project_root`` / ``session`` / ``round`` -> what they name.

Every method (and the HTTP routes, which are methods) turns its params into a
project, a session or a round here, by the same rules:

- ``project_root``: an absolute path to an existing folder (resolved: symlinks
  and ``..`` gone); omitted, the project the daemon is bound to.
- ``session``: already canonical (the registry parses every ``SessionRef`` with
  :mod:`trainee.ids`). Omitted: the one running session, else the project's
  latest. Given without ``project_root``: the running session of that id when
  exactly one runs, else the bound project's.
- ``round``: an int (the registry parses every ``RoundRef``), a round of that
  session.

Reading never changes a project: a project without a runtime database has no
sessions (NotFound), and none is created to find out.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from trainee.api.context import CallContext
from trainee.errors import InvalidParams, NotFound
from trainee.ids import parse_session
from trainee.launch.layout import ProjectLayout, SessionLayout
from trainee.session.manager import Running, SessionManager
from trainee.store.db import Store
from trainee.store.records import RoundRecord, SessionRecord

__all__ = [
    "RoundTarget",
    "SessionTarget",
    "manager_of",
    "project_root",
    "project_store",
    "resolve_round",
    "resolve_session",
    "running_session",
    "session_folder",
]


@dataclass(frozen=True)
class SessionTarget:
    """A session found: its project, the project's store and the session's record."""

    root: str
    store: Store
    record: SessionRecord

    @property
    def layout(self) -> SessionLayout:
        """The session's folders (its own environment may move the data folder)."""
        return ProjectLayout.for_root(self.root, self.record.env).session(self.record.index)


@dataclass(frozen=True)
class RoundTarget(SessionTarget):
    round: RoundRecord


def manager_of(ctx: CallContext) -> SessionManager:
    manager = ctx.services.extra.get("manager")
    assert isinstance(manager, SessionManager), "the daemon has no session manager"
    return manager


def project_root(ctx: CallContext, given: str | None) -> str:
    """An absolute, existing project folder from the params or the daemon's binding."""
    if given is None or given == "":
        bound = ctx.services.project_root
        if bound is None:
            raise InvalidParams(
                "no project_root given and the daemon is not bound to a project",
                {"field": "project_root", "reason": "missing"},
            )
        return str(bound)
    if not os.path.isabs(given):
        raise InvalidParams(
            f"project_root must be an absolute path, got {given!r}",
            {"field": "project_root", "reason": "not absolute"},
        )
    if not os.path.isdir(given):
        raise InvalidParams(
            f"project_root {given} is not a folder",
            {"field": "project_root", "reason": "not a folder"},
        )
    return os.path.realpath(given)


async def project_store(ctx: CallContext, root: str, *, required: bool = True) -> Store | None:
    """The project's store, never created here: NotFound (or None when not ``required``)
    while the project has no runtime database."""
    if not ProjectLayout.for_root(root).database.exists():
        if not required:
            return None
        raise NotFound(
            f"no session in {root} (it has no runtime database)",
            {"project_root": root, "reason": "no runtime database"},
        )
    return await manager_of(ctx).store_for(root)


async def resolve_session(
    ctx: CallContext, session: str | None, given_root: str | None
) -> SessionTarget:
    """The session a request names (see the module docstring for the rules)."""
    manager = manager_of(ctx)
    if given_root is None:
        running = manager.running_sessions()
        if session is None and len(running) == 1:
            return await _target(ctx, running[0].project_root, running[0].index)
        if session is not None:
            matches = [r for r in running if r.id == session]
            if len(matches) == 1:
                return await _target(ctx, matches[0].project_root, matches[0].index)
        if ctx.services.project_root is None:
            what = (
                f"{session} is not running"
                if session is not None
                else f"{len(running)} sessions are running"
                if running
                else "no session is running"
            )
            raise InvalidParams(
                f"name the project_root of the session: {what} "
                "and the daemon is not bound to a project",
                {"field": "project_root", "running": [r.id for r in running]},
            )
    root = project_root(ctx, given_root)
    store = await project_store(ctx, root)
    assert store is not None
    if session is None:
        sessions = await store.list_sessions()
        if not sessions:
            raise NotFound(f"no session in {root}", {"project_root": root})
        return SessionTarget(root, store, sessions[-1])
    return SessionTarget(root, store, await store.get_session(parse_session(session)))


async def _target(ctx: CallContext, root: str, index: int) -> SessionTarget:
    store = await project_store(ctx, root)
    assert store is not None
    return SessionTarget(root, store, await store.get_session(index))


async def resolve_round(
    ctx: CallContext, session: str, round: int, given_root: str | None
) -> RoundTarget:
    """One round of the session a request names; NotFound when it has no such round."""
    found = await resolve_session(ctx, session, given_root)
    rounds = {r.index: r for r in await found.store.list_rounds(found.record.index)}
    rec = rounds.get(round)
    if rec is None:
        raise NotFound(
            f"{found.record.id} has no round {round} "
            f"({len(rounds)} round{'s' if len(rounds) != 1 else ''} so far)",
            {"session": found.record.id, "round": round, "project_root": found.root},
        )
    return RoundTarget(found.root, found.store, found.record, rec)


async def session_folder(ctx: CallContext, session: str, given_root: str | None) -> SessionLayout:
    """The folders of a session a request names, to read its files: those of its record
    when the project's store has it (its environment may move the data folder), else
    the project's own (a log copied in by hand is read too)."""
    try:
        return (await resolve_session(ctx, session, given_root)).layout
    except NotFound:
        root = project_root(ctx, given_root)
        return ProjectLayout.for_root(root).session(parse_session(session))


def running_session(ctx: CallContext, session: str | None, given_root: str | None) -> Running:
    """The running session a request names (NotFound when it is not running)."""
    root = project_root(ctx, given_root) if given_root else None
    return manager_of(ctx).find_running(root, session)
