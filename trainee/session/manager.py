"""The session manager: one task per running session, under the daemon's task group.

A crash in one session never takes down the daemon or another session. The
projects the daemon has run sessions in are remembered, so a restarted daemon
finds the sessions that were running and resumes them.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import msgspec

from trainee import paths
from trainee.atomic import write_atomic
from trainee.errors import InvalidParams, InvalidState, LimitExceeded, NotFound
from trainee.ids import parse_session, session_id
from trainee.integrations import SUBSCRIBED_KINDS, SessionIntegrations
from trainee.launch.layout import ProjectLayout
from trainee.launch.render import is_secret_name
from trainee.llm.settings import LlmSettings, load_settings
from trainee.monitor import stopfile
from trainee.policies import POLICIES
from trainee.policies.base import Policy, RandomPolicy
from trainee.policies.external import ExternalPolicy
from trainee.policies.llm import LlmPolicy
from trainee.research.prompt import DEFAULT_SYSTEM_PROMPT, PromptParts, journal_section
from trainee.session.bus import EventBus
from trainee.session.runner import SessionControl, SessionRunner
from trainee.spec import ProjectSpec
from trainee.states import SessionStatus, StopReason
from trainee.store.db import Store
from trainee.store.records import SessionRecord

log = logging.getLogger("trainee.session.manager")

CONTEXT_LIMIT = 64 * 1024
NOTES_LIMIT = 8 * 1024


@dataclass
class Running:
    control: SessionControl
    runner: SessionRunner
    done: anyio.Event


def read_optional(path: Path, limit: int = CONTEXT_LIMIT) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read(limit)
    except (FileNotFoundError, IsADirectoryError, PermissionError):
        return ""


def prompt_parts(spec: ProjectSpec, settings: LlmSettings, journal: str = "") -> PromptParts:
    root = spec.root_path
    return PromptParts(
        system_prompt=settings.system_prompt or DEFAULT_SYSTEM_PROMPT,
        trainee_context=read_optional(spec.trainee_path / "context.md"),
        project_context=read_optional(root / "context.md"),
        constraints=read_optional(root / "constraints.md"),
        metrics_prompt=spec.metrics.prompt,
        tuning_prompt=spec.advanced.tuning_prompt,
        journal=journal,
    )


class SessionManager:
    def __init__(self, bus: EventBus, *, state_dir: Path | None = None, http_url: str = "") -> None:
        self.bus = bus
        self.http_url = http_url
        """The daemon's web page (links in notifications)."""
        self.state_dir = state_dir or paths.service_data_dir()
        self._stores: dict[str, Store] = {}
        self._store_lock = anyio.Lock()
        self._running: dict[tuple[str, int], Running] = {}
        self._tg: anyio.abc.TaskGroup | None = None
        self.default_env: dict[str, str] = dict(os.environ)
        self._secrets: dict[tuple[str, int], dict[str, str]] = {}
        self._locks: dict[str, anyio.Lock] = {}

    # -- lifecycle ---------------------------------------------------------------------

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Host session tasks until cancelled; resume what was running first.

        The stores are closed only after every session task has ended: a session
        cancelled by a shutdown still flushes its last events to its store.
        """
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                await self.resume_all()
                task_status.started()
                await anyio.sleep_forever()
        finally:
            with anyio.CancelScope(shield=True):
                for store in self._stores.values():
                    with contextlib.suppress(Exception):
                        await store.close()

    @property
    def projects_file(self) -> Path:
        return self.state_dir / "projects.json"

    def known_projects(self) -> list[str]:
        """The projects the daemon knows (projects.json): every project a session ran
        in, and those a client added (``projects_add``: the web page's list). A file
        that cannot be read is logged and reads as none (see :meth:`_editable_projects`)."""
        projects, problem = self._read_projects()
        if problem is not None:
            log.warning("%s", problem)
        return projects

    def _read_projects(self) -> tuple[list[str], str | None]:
        try:
            data = json.loads(self.projects_file.read_text())
        except FileNotFoundError:
            return [], None
        except (OSError, ValueError) as exc:
            return [], f"{self.projects_file} cannot be read ({exc}): no project is known"
        found = data.get("projects") if isinstance(data, dict) else None
        if not isinstance(found, list):
            return [], f"{self.projects_file} holds no list under 'projects': no project is known"
        return [p for p in found if isinstance(p, str)], None

    def _editable_projects(self) -> list[str]:
        """The list to change: a file that cannot be read is moved aside first (logged,
        kept beside it), so the next write never erases what a user could still mend."""
        projects, problem = self._read_projects()
        if problem is not None:
            aside = self.projects_file.with_name(f"projects.json.unreadable-{int(time.time())}")
            with contextlib.suppress(OSError):
                os.replace(self.projects_file, aside)
            log.warning("%s; it is kept as %s and a new list starts", problem, aside)
        return projects

    def remember(self, root: str, *, limit: int | None = None) -> bool:
        """Add ``root`` to the known projects; False when it was there already.
        ``limit``: refuse (LimitExceeded) a list that has this many already."""
        projects = self._editable_projects()
        if root in projects:
            return False
        if limit is not None and len(projects) >= limit:
            raise LimitExceeded(
                f"the daemon knows {len(projects)} projects, the most it lists: remove some "
                "(projects_remove) before adding more",
                {"what": "known projects", "limit": limit},
            )
        self._save_projects([*projects, root])
        return True

    def forget(self, root: str) -> bool:
        """Take ``root`` off the known projects; False when it was not there."""
        projects = self._editable_projects()
        if root not in projects:
            return False
        self._save_projects([p for p in projects if p != root])
        return True

    def _save_projects(self, projects: list[str]) -> None:
        paths.ensure_private_dir(self.state_dir)
        write_atomic(self.projects_file, json.dumps({"projects": projects}, indent=2))

    async def store_for(self, root: str) -> Store:
        async with self._store_lock:
            store = self._stores.get(root)
            if store is None:
                layout = ProjectLayout.for_root(root)
                store = await Store.open(layout.database)
                self._stores[root] = store
            return store

    async def resume_all(self) -> None:
        for root in self.known_projects():
            layout = ProjectLayout.for_root(root)
            if not layout.database.exists():
                continue
            try:
                store = await self.store_for(root)
                records = await store.list_sessions(status=SessionStatus.RUNNING)
            except Exception:
                log.exception("cannot read sessions of %s", root)
                continue
            for rec in records:
                log.info("resuming %s of %s", rec.id, root)
                self._spawn(store, rec, restarted=True)

    # -- sessions ------------------------------------------------------------------------

    async def _policy_factory(
        self, spec: ProjectSpec, record: SessionRecord, history: int
    ) -> Policy:
        """The session's decision policy (:meth:`decision_policy`). ``history`` (finished
        rounds) is not needed: every policy continues from the research state and the
        results the runner tells it again on resume."""
        del history
        return await self.decision_policy(spec, record)

    async def decision_policy(
        self,
        spec: ProjectSpec,
        record: SessionRecord,
        *,
        policy: str | None = None,
        write_journal: bool = True,
        prompt: tuple[LlmSettings, PromptParts] | None = None,
    ) -> Policy:
        """The decision policy of a session whose ``record.env`` is its full environment
        (``policy``: another one, for a preview). Non-LLM policies need no provider; a
        provider failure never falls back to another policy. An LLM policy's prompt
        carries the session's settings and the project's journal (``prompt``: these
        settings and parts instead, those of the running session's policy)."""
        name = policy or record.policy
        configured = spec.decision.seed
        seed = configured if configured is not None else _seed(record)
        if name == "random":
            return RandomPolicy(seed=seed, constraints=spec.constraints)
        if name == "external":
            return ExternalPolicy(constraints=spec.constraints)
        if name == "tpe":
            from trainee.policies.tpe import TpePolicy

            return TpePolicy(seed=seed, constraints=spec.constraints)
        if name in ("llm", "hybrid"):
            if prompt is not None:
                settings, parts = prompt
            else:
                settings = load_settings(record.env)
                journal = await self.journal(spec.project_root, write=write_journal)
                parts = prompt_parts(spec, settings, journal)
            if name == "hybrid":
                from trainee.policies.hybrid import HybridPolicy

                return HybridPolicy(settings, parts, seed=seed, constraints=spec.constraints)
            return LlmPolicy(settings, parts, constraints=spec.constraints)
        raise InvalidParams(
            f"decision policy {name!r} is not available in this version",
            {"field": "policy", "reason": "not available"},
        )

    async def journal(self, root: str, *, write: bool = True) -> str:
        """Experiment memory: past sessions' best params and rejected changes, plus the
        notes agents and people appended (.trainee/notes.md), bounded.

        Also written to .trainee/journal.md for people to read (unless not ``write``).
        """
        entries: list[dict[str, Any]] = []
        if ProjectLayout.for_root(root).database.exists():  # none is created to read it
            entries = await (await self.store_for(root)).journal()
        text = journal_section(entries)
        notes = read_optional(Path(root) / ".trainee" / "notes.md", NOTES_LIMIT).strip()
        if notes:
            text = (text + "\n\n" if text else "") + notes
        if text and write:
            path = Path(root) / ".trainee" / "journal.md"
            with contextlib.suppress(OSError):
                write_atomic(path, "# Experiment journal\n\n" + text + "\n")
        return text

    def full_env(self, record: SessionRecord) -> dict[str, str]:
        """The session's environment with its secrets, which the store never holds.

        Secrets passed by the client live in memory for the daemon's life; after a
        restart they come from the daemon's own environment.
        """
        secrets = self._secrets.get((record.project_root, record.index))
        if secrets is None:
            secrets = {k: v for k, v in self.default_env.items() if is_secret_name(k)}
        return {**record.env, **secrets}

    def _spawn(self, store: Store, record: SessionRecord, *, restarted: bool = False) -> Running:
        assert self._tg is not None, "the manager is not running"
        env = self.full_env(record)
        stop_file = ProjectLayout.for_root(record.project_root, env).session(record.index).stop_file
        control = SessionControl(stop_file=stop_file)
        reason = stopfile.recorded(stop_file) if restarted else None
        if reason is not None:
            # stopped, but the daemon died before the stop was through: finish it now
            control.request_stop(reason)
        else:
            stopfile.clear(stop_file)  # a new start or a resume: an old stop is done
        runner = SessionRunner(
            store=store,
            layout=ProjectLayout.for_root(record.project_root, env),
            record=msgspec.structs.replace(record, env=env),
            bus=self.bus,
            policy_factory=self._policy_factory,
            control=control,
            env=env,
        )
        running = Running(control=control, runner=runner, done=anyio.Event())
        key = (record.project_root, record.index)
        self._running[key] = running
        # subscribed now, before the runner publishes anything; it never holds the runner
        integrations = SessionIntegrations(
            store=store,
            record=record,
            layout=runner.session_layout,
            subscribe=lambda since: self.bus.subscribe(
                since=since, session=record.id, kinds=SUBSCRIBED_KINDS
            ),
            http_url=self.http_url,
            restarted=restarted,
        )

        async def task() -> None:
            try:
                await runner.run()
            except Exception:
                log.exception("%s crashed", record.id)
            finally:
                self._running.pop(key, None)
                running.done.set()
                integrations.session_ended()

        self._tg.start_soon(
            integrations.run, name=f"{record.project_root}:{record.id}:integrations"
        )
        self._tg.start_soon(task, name=f"{record.project_root}:{record.id}")
        return running

    async def start(
        self,
        spec: ProjectSpec,
        *,
        policy: str,
        security_mode: str,
        max_rounds: int | None,
        env: dict[str, str],
        cwd: str,
    ) -> SessionRecord:
        if policy not in POLICIES:
            raise InvalidParams(
                f"unknown decision policy {policy!r}; choose one of {', '.join(POLICIES)}",
                {"field": "policy", "reason": "unknown"},
            )
        root = spec.project_root
        async with self._project_lock(root):
            self._refuse_if_running(root)
            return await self._create(spec, root, policy, security_mode, max_rounds, env, cwd)

    def _project_lock(self, root: str) -> anyio.Lock:
        """One session at a time per project: checks and creation happen under this lock."""
        return self._locks.setdefault(root, anyio.Lock())

    def _refuse_if_running(self, root: str) -> None:
        for (r, _), running in self._running.items():
            if r == root:
                rid = running.runner.record.id
                raise InvalidState(
                    f"{rid} is already running on {root}; stop it first",
                    {"session": rid, "hint": f"trainee stop {rid}"},
                )

    async def _create(
        self,
        spec: ProjectSpec,
        root: str,
        policy: str,
        security_mode: str,
        max_rounds: int | None,
        env: dict[str, str],
        cwd: str,
    ) -> SessionRecord:
        store = await self.store_for(root)
        self.remember(root)
        index = await store.next_session_index()
        now = time.time()
        public_env, secrets = split_secrets(env)
        record = SessionRecord(
            index=index,
            id=session_id(index),
            project_root=root,
            status=SessionStatus.RUNNING,
            stop_reason=None,
            policy=policy,
            security_mode=security_mode,
            max_rounds=max_rounds or spec.run.max_rounds,
            created_at=now,
            updated_at=now,
            finished_at=None,
            spec={},
            env=public_env,
            cwd=cwd,
            best_round=None,
            baseline_round=None,
            tokens=0,
            cost_usd=0.0,
            error=None,
        )
        # a session written is a session run: a cancelled request (its client went
        # away) does not leave a running record without its task
        with anyio.CancelScope(shield=True):
            record = await store.create_session(record)
            self._secrets[(root, index)] = secrets
            self._spawn(store, record)
        return record

    async def resume(
        self,
        root: str,
        session: str,
        env: dict[str, str] | None = None,
        *,
        max_rounds: int | None = None,
        security_mode: str | None = None,
    ) -> SessionRecord:
        """Continue a stopped or failed session from where it ended.

        ``max_rounds`` and ``security_mode`` given again replace the session's own.
        """
        async with self._project_lock(root):
            self._refuse_if_running(root)
            store = await self.store_for(root)
            index = parse_session(session)
            await store.get_session(index)
            fields: dict[str, Any] = {
                "status": SessionStatus.RUNNING,
                "stop_reason": None,
                "error": None,
                "finished_at": None,
            }
            if max_rounds is not None:
                fields["max_rounds"] = max_rounds
            if security_mode is not None:
                fields["security_mode"] = security_mode
            if env is not None:
                fields["env"], self._secrets[(root, index)] = split_secrets(env)
            with anyio.CancelScope(shield=True):  # as in _create
                record = await store.update_session(index, **fields)
                self.remember(root)
                self._spawn(store, record)
            return record

    def find_running(self, root: str | None, session: str | None) -> Running:
        matches = [
            running
            for (r, idx), running in self._running.items()
            if (root is None or r == root) and (session is None or idx == parse_session(session))
        ]
        if not matches:
            raise NotFound(
                "no running session"
                + (f" {session}" if session else "")
                + (f" in {root}" if root else ""),
                {"session": session, "project_root": root},
            )
        if len(matches) > 1:
            raise InvalidParams(
                "several sessions are running: name one (and its project_root)",
                {"running": [m.runner.record.id for m in matches]},
            )
        return matches[0]

    async def stop(
        self, root: str | None, session: str | None, *, wait: bool = True
    ) -> SessionRecord:
        running = self.find_running(root, session)
        running.control.request_stop(StopReason.USER_STOP)
        if wait:
            await running.done.wait()
        return running.runner.record

    def running_sessions(self) -> list[SessionRecord]:
        return [r.runner.record for r in self._running.values()]

    def monitor_pids(self) -> set[int]:
        """Pids of the monitors of every round being launched or watched, all sessions."""
        return {pid for r in self._running.values() for pid in r.runner.monitors.values()}

    def running_of(self, root: str, index: int) -> Running | None:
        """Session ``index`` of ``root`` when it runs in this daemon."""
        return self._running.get((root, index))

    def control_of(self, root: str, index: int) -> SessionControl | None:
        running = self._running.get((root, index))
        return running.control if running else None


def split_secrets(env: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    public = {k: v for k, v in env.items() if not is_secret_name(k)}
    secrets = {k: v for k, v in env.items() if is_secret_name(k)}
    return public, secrets


def _seed(record: SessionRecord) -> int:
    return record.index
