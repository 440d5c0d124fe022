"""One round without a daemon: :class:`trainee.session.round.RoundRun` with the real local
backend (a real monitor process), a real SQLite store and a tiny real training script.

Each test records a session and a round in the store, builds the round's context the way
the session runner does (store, backend, ``emit``, the session's index, its security
mode, the judge and on-finished hooks) and runs the round: completed, timed out, stopped
with its grace honoured, its monitor killed (the round runs again), and re-adopted by a
fresh instance after the first one was cancelled as a daemon shutdown cancels it.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

from tests.support.projects import LR_TUNING_YAML, VAL_LOSS_METRICS_YAML
from tests.support.timing import scaled
from trainee.events import kind_of
from trainee.launch.backends import make_backend
from trainee.launch.layout import ProjectLayout
from trainee.research.state import RoundSummary
from trainee.session.round import RoundContext, RoundRun
from trainee.spec import ProjectSpec, load_project
from trainee.states import RoundStatus
from trainee.store.db import Store
from trainee.store.records import RoundRecord, SessionRecord

# Prints steps, then the metric. While ``hold`` exists in the project, the first start
# of a round keeps running (later starts do not): the test decides when it ends. On
# SIGTERM it takes a moment to clean up, writes ``cleaned``, and exits 143.
TRAIN_PY = """\
import os, signal, sys, time

root = os.path.dirname(os.path.abspath(__file__))
round_dir = os.environ["TRAINEE_ROUND_DIR"]
starts = os.path.join(round_dir, "starts.txt")
with open(starts, "a") as fh:
    fh.write(f"{os.getpid()}\\n")
first = len(open(starts).read().split()) == 1

def on_term(signum, frame):
    time.sleep(0.5)
    open(os.path.join(round_dir, "cleaned"), "w").close()
    sys.exit(143)

signal.signal(signal.SIGTERM, on_term)
step = 0
while step < 3 or (first and os.path.exists(os.path.join(root, "hold"))):
    print(f"step {step} loss={1.0 / (step + 1):.4f}", flush=True)
    step += 1
    time.sleep(0.05)
print("final val_loss=0.250000", flush=True)
"""

PROJECT_YAML = (
    """\
version: 1
launch:
  command: [{python}, train.py]
run:
  max_rounds: 3
  timeout_minutes: {timeout_minutes}
"""
    + VAL_LOSS_METRICS_YAML
    + """\
advanced:
  security_mode: unsafe
  stop_grace_sec: {grace}
"""
)


@dataclass
class Session:
    """What the session runner gives a round, recorded for the checks."""

    root: Path
    spec: ProjectSpec
    store: Store
    stop: anyio.Event = field(default_factory=anyio.Event)
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    judged: list[RoundSummary] = field(default_factory=list)
    finished: list[RoundSummary] = field(default_factory=list)
    monitors: dict[int, int] = field(default_factory=dict)

    def context(self) -> RoundContext:
        def judge(summary: RoundSummary) -> RoundSummary:
            self.judged.append(summary)
            return summary.__class__(
                **{**_fields(summary), "verdict": "baseline", "verdict_reason": "the first round"}
            )

        async def on_finished(summary: RoundSummary) -> int | None:
            # the round's final record is stored before the hook runs
            rec = await self.store.get_round(1, summary.index)
            assert rec.status == summary.status
            self.finished.append(summary)
            return summary.index

        return RoundContext(
            store=self.store,
            backend=make_backend(self.spec.advanced.backend, os.environ),
            emit=lambda data: self.events.append((kind_of(data), msgspec.to_builtins(data))),
            session=1,
            session_id="session-0001",
            layout=ProjectLayout.for_root(self.root),
            security_mode="unsafe",
            env=dict(os.environ),
            stop_requested=self.stop,
            judge=judge,
            on_finished=on_finished,
            monitors=self.monitors,
        )

    def kinds(self) -> list[str]:
        return [kind for kind, _ in self.events]

    def starts(self) -> list[str]:
        path = ProjectLayout.for_root(self.root).session(1).round(1).dir / "starts.txt"
        return path.read_text().split() if path.exists() else []

    async def round(self) -> RoundRecord:
        return await self.store.get_round(1, 1)


def _fields(summary: RoundSummary) -> dict[str, Any]:
    return {name: getattr(summary, name) for name in summary.__struct_fields__}


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Path]:
    root = tmp_path / "proj"
    (root / ".trainee").mkdir(parents=True)
    (root / "train.py").write_text(TRAIN_PY)
    (root / ".trainee" / "tuning.yaml").write_text(LR_TUNING_YAML)
    _configure(root)
    yield root


def _configure(root: Path, *, timeout_minutes: float = 5, grace: float = 30) -> None:
    (root / ".trainee" / "project.yaml").write_text(
        PROJECT_YAML.format(python=sys.executable, timeout_minutes=timeout_minutes, grace=grace)
    )


def _session_test(root: Path, body: Callable[[Session], Awaitable[None]]) -> None:
    """Record session 1 with its round 1 (the baseline) in a fresh store, run ``body``."""

    async def main() -> None:
        layout = ProjectLayout.for_root(root)
        layout.data_dir.mkdir(parents=True, exist_ok=True)
        spec = load_project(str(root))
        async with await Store.open(layout.database) as store:
            await store.create_session(
                SessionRecord(
                    index=1,
                    project_root=str(root),
                    policy="random",
                    security_mode="unsafe",
                    max_rounds=3,
                )
            )
            await store.upsert_round(
                RoundRecord(session=1, index=1, params={"lr": 0.1}, hypothesis="baseline")
            )
            with anyio.fail_after(scaled(60)):
                await body(Session(root, spec, store))

    anyio.run(main)


async def _until(condition: Callable[[], Any], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + scaled(timeout)
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        await anyio.sleep(0.02)


def test_a_round_completes_judged_stored_and_announced(project: Path) -> None:
    async def body(s: Session) -> None:
        rec = await s.round()
        summary = await RoundRun(s.context(), s.spec, rec).run()
        assert summary.status == RoundStatus.COMPLETED
        assert summary.metric == 0.25
        assert summary.verdict == "baseline"  # what the judge hook said
        stored = await s.round()
        assert stored.status == RoundStatus.COMPLETED
        assert stored.primary_metric == 0.25
        assert stored.verdict == "baseline"
        assert stored.returncode == 0 and stored.attempt == 0
        assert stored.launch_token and stored.monitor_pid
        assert stored.log_offset > 0 and stored.tail_offsets
        assert [j.index for j in s.judged] == [1] and [f.index for f in s.finished] == [1]
        kinds = s.kinds()
        assert kinds[0] == "round.started" and kinds[-1] == "round.finished"
        assert "output" in kinds and "round.rerun" not in kinds
        finished = s.events[-1][1]
        assert finished["status"] == RoundStatus.COMPLETED
        assert finished["best_round"] == 1 and finished["metric"] == 0.25
        output = [line["text"] for k, d in s.events if k == "output" for line in d["lines"]]
        assert "final val_loss=0.250000" in output
        assert s.monitors == {}  # the monitor's pid is kept only while it is watched
        assert len(s.starts()) == 1

    _session_test(project, body)


def test_a_round_over_its_time_limit_times_out(project: Path) -> None:
    _configure(project, timeout_minutes=0.01)  # 0.6 s
    (project / "hold").touch()

    async def body(s: Session) -> None:
        summary = await RoundRun(s.context(), s.spec, await s.round()).run()
        assert summary.status == RoundStatus.TIMED_OUT
        assert summary.failure_tail  # the last lines of its log, for the report
        stored = await s.round()
        assert stored.status == RoundStatus.TIMED_OUT and stored.primary_metric is None
        assert s.events[-1][1]["status"] == RoundStatus.TIMED_OUT

    _session_test(project, body)


def test_a_stop_request_stops_the_round_after_its_grace(project: Path) -> None:
    (project / "hold").touch()
    rnd = ProjectLayout.for_root(project).session(1).round(1)

    async def body(s: Session) -> None:
        result: list[RoundSummary] = []

        async def run() -> None:
            result.append(await RoundRun(s.context(), s.spec, await s.round()).run())

        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            await _until(lambda: "output" in s.kinds(), "the round's first output")
            s.stop.set()
        assert result[0].status == RoundStatus.STOPPED
        assert (await s.round()).status == RoundStatus.STOPPED
        # SIGTERM first, then the grace: the job's own cleanup (half a second) finished
        assert (rnd.dir / "cleaned").exists()

    _session_test(project, body)


def test_a_round_whose_monitor_dies_runs_again(project: Path) -> None:
    hold = project / "hold"
    hold.touch()

    async def body(s: Session) -> None:
        result: list[RoundSummary] = []

        async def run() -> None:
            result.append(await RoundRun(s.context(), s.spec, await s.round()).run())

        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            await _until(lambda: s.starts() and 1 in s.monitors, "the first attempt")
            os.kill(s.monitors[1], signal.SIGKILL)
            await _until(lambda: "round.rerun" in s.kinds(), "the re-run")
            hold.unlink()
        assert result[0].status == RoundStatus.COMPLETED
        stored = await s.round()
        assert stored.attempt == 1 and stored.status == RoundStatus.COMPLETED
        assert len(s.starts()) == 2  # started again, same params
        assert s.kinds().count("round.started") == 2
        rerun = next(d for k, d in s.events if k == "round.rerun")
        assert rerun == {"round": 1, "attempt": 1}

    _session_test(project, body)


def test_a_fresh_instance_readopts_a_round_left_running(project: Path) -> None:
    hold = project / "hold"
    hold.touch()

    async def body(s: Session) -> None:
        # the first instance is cancelled mid-round, as a daemon shutdown cancels it:
        # the job runs on under its monitor
        with anyio.move_on_after(scaled(20)) as scope:
            async with anyio.create_task_group() as tg:
                tg.start_soon(RoundRun(s.context(), s.spec, await s.round()).run)
                await _until(lambda: "output" in s.kinds(), "the round's first output")
                while not (await s.round()).log_offset:  # what was shown is recorded
                    await anyio.sleep(0.02)
                tg.cancel_scope.cancel()
        assert not scope.cancelled_caught
        left = await s.round()
        assert left.status == RoundStatus.RUNNING and left.monitor_pid
        os.kill(left.monitor_pid, 0)  # still alive
        s.events.clear()

        later = Session(s.root, s.spec, s.store)
        result: list[RoundSummary] = []

        async def resume() -> None:
            result.append(await RoundRun(later.context(), later.spec, await later.round()).resume())

        async with anyio.create_task_group() as tg:
            tg.start_soon(resume)
            await _until(lambda: "round.readopted" in later.kinds(), "the re-adoption")
            hold.unlink()
        assert result[0].status == RoundStatus.COMPLETED and result[0].metric == 0.25
        stored = await later.round()
        assert stored.attempt == 0 and stored.status == RoundStatus.COMPLETED
        assert len(later.starts()) == 1  # watched again, never started twice
        assert "round.started" not in later.kinds() and "round.rerun" not in later.kinds()
        readopted = next(d for k, d in later.events if k == "round.readopted")
        assert readopted["pid"] == left.monitor_pid
        # only what the first instance had not shown is shown again
        shown = [line["text"] for k, d in later.events if k == "output" for line in d["lines"]]
        assert "step 0 loss=1.0000" not in shown
        assert "final val_loss=0.250000" in shown

    _session_test(project, body)
