"""MLflow export: a run per round, nested under a run per session (the ``mlflow`` extra).

Runs in the sink's own thread (:mod:`trainee.integrations.worker`); mlflow is imported
there, on first use. Each round's run holds its params, every metric point with its
step (``step``, else the point's sequence number), the final values as ``final/<name>``,
its status, tags (project, session, round, policy, hypothesis, verdict, ...) and the
round log, ``round.json`` and the round's config as artifacts. The session's run gets
the best result and report.md when the session ends.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from trainee.integrations.config import MlflowTarget
from trainee.integrations.snapshot import RoundSnapshot, SessionEnd, SessionInfo, mlflow_status
from trainee.integrations.state import SinkState
from trainee.spec.integrations import is_file_store
from trainee.states import SessionStatus

__all__ = ["ARTIFACT_LOG_BYTES", "MlflowSink", "prepare_environment"]

ARTIFACT_LOG_BYTES = 32 * 2**20
"""A round log larger than this is uploaded as its last this many bytes."""
_BATCH = 1000  # MLflow's log_batch limit of metrics per call (params and tags: 100)
_PARAM_LEN = 6000
_TAG_LEN = 5000
_MLFLOW_END: dict[str, str] = {SessionStatus.FINISHED: "FINISHED", SessionStatus.STOPPED: "KILLED"}
"""A session status as the parent run's MLflow status (any other: FAILED)."""

_ENV_DEFAULTS = {
    # a dead server fails within about a minute instead of MLflow's several minutes
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "20",
    "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true",
    "MLFLOW_DISABLE_TELEMETRY": "true",
}


def prepare_environment(target: MlflowTarget) -> None:
    """MLflow reads its client settings from the environment: set trainee's defaults
    (a variable the daemon was started with wins). Call on the event loop's thread."""
    for name, value in _ENV_DEFAULTS.items():
        os.environ.setdefault(name, value)
    if is_file_store(target.tracking_uri):
        # MLflow 3 refuses its file store unless asked; the user asked for it by name
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")


def _ms(ts: float | None) -> int:
    return int((ts if ts is not None else time.time()) * 1000)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


class MlflowSink:
    def __init__(self, target: MlflowTarget, artifacts_dir: Path) -> None:
        self.target = target
        self.state = SinkState(
            artifacts_dir / "integrations" / "mlflow.json",
            f"{target.tracking_uri}\n{target.experiment}",
        )
        self._client: Any = None

    # -- the worker's entry point ------------------------------------------------------

    def handle(self, item: SessionInfo | RoundSnapshot | SessionEnd) -> None:
        if isinstance(item, SessionInfo):
            self._parent(item)
        elif isinstance(item, RoundSnapshot):
            self.export_round(item)
        else:
            self.close_session(item)

    # -- MLflow ------------------------------------------------------------------------------

    @property
    def client(self) -> Any:
        if self._client is None:
            from mlflow.tracking import MlflowClient

            self._client = MlflowClient(tracking_uri=self.target.tracking_uri)
        return self._client

    def _experiment_id(self) -> str:
        known = self.state.data.get("experiment_id")
        if isinstance(known, str):
            return known
        found = self.client.get_experiment_by_name(self.target.experiment)
        if found is not None:
            if found.lifecycle_stage == "deleted":
                self.client.restore_experiment(found.experiment_id)
            exp_id = str(found.experiment_id)
        else:
            exp_id = str(self.client.create_experiment(self.target.experiment))
        self.state.data["experiment_id"] = exp_id
        self.state.save()
        return exp_id

    def _parent(self, info: SessionInfo) -> str:
        """The session's run, made on first use (and again if it was deleted)."""
        run_id = self.state.data.get("parent_run_id")
        if isinstance(run_id, str):
            try:
                if self.client.get_run(run_id).info.lifecycle_stage == "active":
                    return run_id
            except Exception:
                pass  # gone from the server: make a new one
        run = self.client.create_run(
            self._experiment_id(),
            start_time=_ms(info.started_at),
            run_name=info.session,
            tags={
                "project": info.project,
                "project_root": info.project_root,
                "session": info.session,
                "policy": info.policy,
                "mlflow.note.content": f"trainee {info.session} of {info.project_root}",
                **({"trainee.page": info.page_url} if info.page_url else {}),
            },
        )
        self.state.data["parent_run_id"] = run.info.run_id
        self.state.save()
        return str(run.info.run_id)

    def export_round(self, r: RoundSnapshot) -> None:
        if self.state.done(r.index):
            return
        from mlflow.entities import Metric, Param

        client = self.client
        parent = self._parent(r.info)
        half = self.state.round(r.index).get("run_id")
        if isinstance(half, str):  # an export cut short (daemon killed): start it again
            with contextlib.suppress(Exception):
                client.delete_run(half)
        tags = {
            "mlflow.parentRunId": parent,
            "project": r.info.project,
            "session": r.info.session,
            "round": str(r.index),
            "policy": r.info.policy,
            "hypothesis": _cut(r.hypothesis, _TAG_LEN),
            "expected": _cut(r.expected, _TAG_LEN),
            "verdict": r.verdict or "",
            "verdict_reason": _cut(r.verdict_reason, _TAG_LEN),
            "status": r.status,
            "batch": str(r.batch),
            "mlflow.note.content": _cut(
                r.hypothesis + (f"\n\nexpected: {r.expected}" if r.expected else ""), _TAG_LEN
            ),
        }
        if r.cause:
            tags["failure_cause"] = r.cause
        if r.info.metric_name:
            tags["primary_metric"] = r.info.metric_name
        run = client.create_run(
            self._experiment_id(),
            start_time=_ms(r.started_at),
            run_name=f"{r.info.session}/{r.name}",
            tags=tags,
        )
        run_id = run.info.run_id
        self.state.set_round(r.index, run_id=run_id, done=False)
        ts = _ms(r.ended_at)
        params = [Param(k, _cut(str(v), _PARAM_LEN)) for k, v in sorted(r.params.items())]
        metrics = [
            Metric(name, value, ts, step if step is not None else seq)
            for name, value, step, seq in r.points
        ]
        last_step: dict[str, int] = {}
        for name, _, step, seq in r.points:
            last_step[name] = step if step is not None else seq
        metrics += [
            Metric(f"final/{name}", value, ts, last_step.get(name, 0))
            for name, value in sorted(r.finals.items())
        ]
        for start in range(0, len(params), 100):
            client.log_batch(run_id, params=params[start : start + 100])
        for start in range(0, len(metrics), _BATCH):
            client.log_batch(run_id, metrics=metrics[start : start + _BATCH])
        if self.target.artifacts:
            self._round_artifacts(run_id, r)
        client.set_terminated(run_id, mlflow_status(r.status), end_time=_ms(r.ended_at))
        self.state.set_round(r.index, run_id=run_id, done=True)

    def _round_artifacts(self, run_id: str, r: RoundSnapshot) -> None:
        client = self.client
        with tempfile.TemporaryDirectory(prefix="trainee-mlflow-") as tmp:
            record = Path(tmp) / "round.json"
            record.write_text(r.record_json())
            client.log_artifact(run_id, str(record))
            log = Path(r.log_path) if r.log_path else None
            if log is not None and log.is_file():
                client.log_artifact(run_id, str(_bounded_copy(log, Path(tmp), r.name + ".log")))
            if r.config_path and Path(r.config_path).is_file():
                client.log_artifact(run_id, r.config_path, "config")

    def close_session(self, end: SessionEnd) -> None:
        from mlflow.entities import Metric

        client = self.client
        parent = self._parent(end.info)
        ts = _ms(end.finished_at)
        name = end.info.metric_name or "metric"
        metrics = [Metric("rounds", float(end.rounds), ts, 0)]
        if end.best_metric is not None:
            metrics.append(Metric(f"best/{name}", end.best_metric, ts, 0))
        if end.baseline_metric is not None:
            metrics.append(Metric(f"baseline/{name}", end.baseline_metric, ts, 0))
        client.log_batch(parent, metrics=metrics)
        tags = {"status": end.status, "stop_reason": end.stop_reason or ""}
        if end.best_round is not None:
            tags["best_round"] = str(end.best_round)
            best_run = self.state.round(end.best_round).get("run_id")
            if isinstance(best_run, str):
                tags["best_run_id"] = best_run
        if end.best_params:
            tags["best_params"] = _cut(
                ", ".join(f"{k}={v}" for k, v in sorted(end.best_params.items())), _TAG_LEN
            )
        if end.error:
            tags["error"] = _cut(end.error, _TAG_LEN)
        for key, value in tags.items():
            client.set_tag(parent, key, value)
        report = Path(end.report_path)
        if self.target.artifacts and report.is_file():
            client.log_artifact(parent, str(report))
        status = _MLFLOW_END.get(end.status, "FAILED")
        client.set_terminated(parent, status, end_time=ts)


def _bounded_copy(path: Path, folder: Path, name: str) -> Path:
    """``path`` copied to ``folder/name``, its last ARTIFACT_LOG_BYTES when it is larger."""
    out = folder / name
    size = path.stat().st_size
    with open(path, "rb") as src, open(out, "wb") as dst:
        if size > ARTIFACT_LOG_BYTES:
            src.seek(size - ARTIFACT_LOG_BYTES)
            dst.write(
                f"[trainee: the first {size - ARTIFACT_LOG_BYTES} bytes are left out]\n".encode()
            )
        while chunk := src.read(2**20):
            dst.write(chunk)
    return out
