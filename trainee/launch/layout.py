"""Where a session's and a round's files live (pure path arithmetic, no I/O).

    <trainee_dir>/project.yaml, tuning.yaml, context.md
    <data_dir>/runtime.sqlite3
    <data_dir>/artifacts/session-XXXX/round-XXXX.log      captured stdout/stderr
    <data_dir>/artifacts/session-XXXX/round-XXXX.log.idx  stderr ranges of that log
    <data_dir>/artifacts/session-XXXX/{report.md, result_ledger.csv, ...}
    <data_dir>/control/session-XXXX/round-XXXX/           what the daemon trusts
        exit.json  monitor.json  claim-<token>  job.json  cancel.json  job-exit-code ...
    <trainee_dir>/runs/session-XXXX/round-XXXX/           the round's workspace
        config.yaml   outputs/
    <trainee_dir>/cache/{home,xdg,hf,torch,mpl,wandb}     redirected caches
    <trainee_dir>/logs/                                   the job's own logs

``data_dir`` is ``<trainee_dir>`` unless ``TRAINEE_DATA_DIR`` moves runtime data.

The control folder holds the files the daemon believes (how a round ended, which
monitor runs it, the cluster job's id and status): it is never writable by the job
(hidden from the sandbox, and outside the job's workspace in unsafe mode too). Rounds
launched before it existed (``control_layout`` 1 in the store) kept those files in
their workspace; :meth:`SessionLayout.round` with ``legacy=True`` still finds them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from trainee.ids import round_name, session_id

CACHE_VARS: dict[str, str] = {
    "HOME": "home",
    "XDG_CACHE_HOME": "xdg",
    "HF_HOME": "hf",
    "TORCH_HOME": "torch",
    "MPLCONFIGDIR": "mpl",
    "WANDB_DIR": "wandb",
}
"""Environment variables redirected into ``<trainee_dir>/cache/<name>``."""


def data_dir_for(trainee_dir: Path, env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    explicit = env.get("TRAINEE_DATA_DIR")
    return Path(explicit).expanduser().resolve() if explicit else trainee_dir


@dataclass(frozen=True)
class ProjectLayout:
    project_root: Path
    trainee_dir: Path
    data_dir: Path

    @classmethod
    def for_root(
        cls, project_root: Path | str, env: Mapping[str, str] | None = None
    ) -> ProjectLayout:
        root = Path(project_root)
        trainee_dir = root / ".trainee"
        return cls(root, trainee_dir, data_dir_for(trainee_dir, env))

    @property
    def database(self) -> Path:
        return self.data_dir / "runtime.sqlite3"

    @property
    def artifacts(self) -> Path:
        return self.data_dir / "artifacts"

    @property
    def runs(self) -> Path:
        return self.trainee_dir / "runs"

    @property
    def logs(self) -> Path:
        return self.trainee_dir / "logs"

    @property
    def control(self) -> Path:
        """``<data_dir>/control``: the monitors' and cluster jobs' files, never the job's."""
        return self.data_dir / "control"

    @property
    def cache(self) -> Path:
        return self.trainee_dir / "cache"

    def cache_dirs(self) -> dict[str, Path]:
        """``{"HOME": <trainee_dir>/cache/home, ...}``."""
        return {var: self.cache / name for var, name in CACHE_VARS.items()}

    def session(self, index: int) -> SessionLayout:
        return SessionLayout(self, index)


@dataclass(frozen=True)
class SessionLayout:
    project: ProjectLayout
    index: int

    @property
    def id(self) -> str:
        return session_id(self.index)

    @property
    def artifacts(self) -> Path:
        """``artifacts/session-XXXX``: logs, report, ledgers, research state."""
        return self.project.artifacts / self.id

    @property
    def runs(self) -> Path:
        return self.project.runs / self.id

    @property
    def report(self) -> Path:
        return self.artifacts / "report.md"

    @property
    def ledger_csv(self) -> Path:
        return self.artifacts / "result_ledger.csv"

    @property
    def ledger_jsonl(self) -> Path:
        return self.artifacts / "result_ledger.jsonl"

    @property
    def research_state(self) -> Path:
        return self.artifacts / "research_state.json"

    @property
    def control(self) -> Path:
        return self.project.control / self.id

    @property
    def stop_file(self) -> Path:
        """``stop.json``: a stop of the session, recorded before it is delivered; every
        monitor of the session checks it before it starts the job (see
        :mod:`trainee.monitor.stopfile`)."""
        return self.control / "stop.json"

    def round(self, index: int, *, legacy: bool = False) -> RoundLayout:
        """Round ``index``; ``legacy``: launched before the control folder existed."""
        return RoundLayout(self, index, legacy)


CONTROL_LAYOUT = 2
"""The store's ``rounds.control_layout`` of a launch whose control files are in
:attr:`RoundLayout.control` (1: in the workspace, before issue 16)."""


@dataclass(frozen=True)
class RoundLayout:
    session: SessionLayout
    index: int
    legacy: bool = False
    """Launched before the control folder existed: its control files are in :attr:`dir`."""

    @property
    def name(self) -> str:
        return round_name(self.index)

    @property
    def dir(self) -> Path:
        """The round's workspace, writable by the job in guarded mode."""
        return self.session.runs / self.name

    @property
    def outputs(self) -> Path:
        return self.dir / "outputs"

    @property
    def config(self) -> Path:
        return self.dir / "config.yaml"

    @property
    def control(self) -> Path:
        """The round's control folder (its workspace for a legacy launch)."""
        return self.dir if self.legacy else self.session.control / self.name

    @property
    def exit_file(self) -> Path:
        return self.control / "exit.json"

    @property
    def monitor_file(self) -> Path:
        return self.control / "monitor.json"

    @property
    def stop_file(self) -> Path:
        """The session's stop record (:attr:`SessionLayout.stop_file`)."""
        return self.session.stop_file

    def claim_file(self, token: str) -> Path:
        """Created once by whoever decides a launch's fate first: its monitor (or job
        script) when it starts the command, or a restarted daemon revoking it."""
        return self.control / f"claim-{token}"

    @property
    def log(self) -> Path:
        return self.session.artifacts / f"{self.name}.log"

    @property
    def log_index(self) -> Path:
        return self.session.artifacts / f"{self.name}.log.idx"

    def placeholders(self) -> dict[str, str]:
        """Values of the path placeholders of project.yaml for this round."""
        project = self.session.project
        return {
            "project_root": str(project.project_root),
            "trainee_dir": str(project.trainee_dir),
            "session_id": self.session.id,
            "round_index": str(self.index),
            "session_dir": str(self.session.artifacts),
            "round_dir": str(self.dir),
            "outputs_dir": str(self.outputs),
            "config_path": str(self.config),
        }
