"""Weights & Biases export, offline: a run per round, grouped by session (the ``wandb`` extra).

Runs in the sink's own thread; wandb is imported there, on first use. Every run is
written with ``mode="offline"`` under ``<dir>/wandb/offline-run-*`` for a later
``wandb sync``; nothing goes over the network. A round's run holds the params as its
config, every metric point (logged against a ``step`` metric: the point's step, else
its sequence number), the finals, status and verdict in its summary, the tags, and
the round log, ``round.json`` and the config among its files. When the session ends
a run of ``job_type`` ``session`` in the same group holds the best result and report.md.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from trainee.integrations.config import WandbTarget
from trainee.integrations.snapshot import RoundSnapshot, SessionEnd, SessionInfo
from trainee.integrations.state import SinkState
from trainee.states import RoundStatus, SessionStatus

__all__ = ["WandbSink", "prepare_environment"]

_TAG_LEN = 64  # W&B's limit on a tag


def prepare_environment() -> None:
    """wandb's process-wide settings (a variable the daemon was started with wins)."""
    os.environ.setdefault("WANDB_ERROR_REPORTING", "false")
    os.environ.setdefault("WANDB_SILENT", "true")


def _tag(text: str) -> str:
    return text[:_TAG_LEN]


class WandbSink:
    def __init__(self, target: WandbTarget, artifacts_dir: Path) -> None:
        self.target = target
        self.state = SinkState(
            artifacts_dir / "integrations" / "wandb.json",
            f"{target.dir}\n{target.entity}\n{target.project}",
        )

    def handle(self, item: SessionInfo | RoundSnapshot | SessionEnd) -> None:
        if isinstance(item, RoundSnapshot):
            self.export_round(item)
        elif isinstance(item, SessionEnd):
            self.close_session(item)

    def _init(self, **kwargs: Any) -> Any:
        import wandb

        Path(self.target.dir).mkdir(parents=True, exist_ok=True)
        settings = wandb.Settings(
            silent=True,
            console="off",
            x_disable_stats=True,
            x_disable_machine_info=True,
            x_save_requirements=False,
            disable_git=True,
            save_code=False,
        )
        return wandb.init(
            project=self.target.project,
            entity=self.target.entity,
            dir=self.target.dir,
            mode="offline",
            reinit="create_new",
            settings=settings,
            **kwargs,
        )

    def export_round(self, r: RoundSnapshot) -> None:
        if self.state.done(r.index):
            return
        tags = [r.info.policy, r.status, *([r.verdict] if r.verdict else [])]
        if r.cause:
            tags.append(r.cause)
        run = self._init(
            group=r.info.session,
            job_type="round",
            name=f"{r.info.session}-{r.name}",
            config=dict(r.params),
            tags=[_tag(t) for t in tags],
            notes=r.hypothesis,
        )
        try:
            run.config.update(
                {
                    "trainee": {
                        "project": r.info.project,
                        "project_root": r.info.project_root,
                        "session": r.info.session,
                        "round": r.index,
                        "policy": r.info.policy,
                    }
                },
                allow_val_change=True,
            )
            run.define_metric("step")
            run.define_metric("*", step_metric="step")
            by_step: dict[int, dict[str, float]] = {}
            for name, value, step, seq in r.points:
                by_step.setdefault(step if step is not None else seq, {})[name] = value
            for step in sorted(by_step):
                run.log({"step": step, **by_step[step]})
            summary: dict[str, Any] = {f"final/{k}": v for k, v in r.finals.items()}
            summary.update(
                {
                    "status": r.status,
                    "verdict": r.verdict,
                    "verdict_reason": r.verdict_reason,
                    "hypothesis": r.hypothesis,
                    "expected": r.expected,
                    "returncode": r.returncode,
                    "duration_sec": (r.ended_at - r.started_at)
                    if r.ended_at and r.started_at
                    else None,
                }
            )
            if r.cause:
                summary["failure_cause"] = r.cause
            if r.info.metric_name:
                summary["primary_metric"] = r.info.metric_name
            run.summary.update(summary)
            if self.target.artifacts:
                self._files(run, r)
        finally:
            run.finish(exit_code=0 if r.status == RoundStatus.COMPLETED else 1)
        self.state.set_round(r.index, run_id=run.id, dir=str(Path(run.dir).parent), done=True)

    def _files(self, run: Any, r: RoundSnapshot) -> None:
        """Copies inside the run's folder (a symlink would break once the round's files
        move), saved so ``wandb sync`` uploads them."""
        files = Path(run.dir)
        (files / "round.json").write_text(r.record_json())
        names = ["round.json"]
        if r.log_path and Path(r.log_path).is_file():
            shutil.copyfile(r.log_path, files / f"{r.name}.log")
            names.append(f"{r.name}.log")
        if r.config_path and Path(r.config_path).is_file():
            target = files / ("config-" + Path(r.config_path).name)
            shutil.copyfile(r.config_path, target)
            names.append(target.name)
        for name in names:
            run.save(str(files / name), base_path=str(files), policy="now")

    def close_session(self, end: SessionEnd) -> None:
        """A session run (again after each end of a resumed session: offline runs cannot
        be reopened, the newest tells the last outcome)."""
        run = self._init(
            group=end.info.session,
            job_type="session",
            name=end.info.session,
            config={"policy": end.info.policy, "max_rounds": end.info.max_rounds},
            tags=[_tag(end.info.policy), _tag(end.status)],
            notes=f"trainee {end.info.session} of {end.info.project_root}",
        )
        try:
            name = end.info.metric_name or "metric"
            summary: dict[str, Any] = {
                "status": end.status,
                "stop_reason": end.stop_reason,
                "rounds": end.rounds,
                "best_round": end.best_round,
                f"best/{name}": end.best_metric,
                f"baseline/{name}": end.baseline_metric,
                "best_params": end.best_params,
            }
            if end.error:
                summary["error"] = end.error
            run.summary.update(summary)
            report = Path(end.report_path)
            if self.target.artifacts and report.is_file():
                shutil.copyfile(report, Path(run.dir) / "report.md")
                run.save(str(Path(run.dir) / "report.md"), base_path=run.dir, policy="now")
        finally:
            run.finish(exit_code=0 if end.status == SessionStatus.FINISHED else 1)
        self.state.data["session_run_id"] = run.id
        self.state.save()
