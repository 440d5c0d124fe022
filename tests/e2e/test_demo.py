"""``make demo`` for real: ``python -m trainee.demo`` copies the example, runs six TPE
rounds through the real CLI and a private daemon, and reports the improvement."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.daemon import REPO

pytestmark = pytest.mark.e2e


def _daemon_pid(runtime: Path) -> int | None:
    try:
        return int((runtime / "trainee.sock.lock").read_text().strip() or 0) or None
    except (OSError, ValueError):
        return None


def _listing(folder: Path) -> list[tuple[str, int]]:
    return sorted((str(p.relative_to(folder)), p.stat().st_mtime_ns) for p in folder.rglob("*"))


def test_demo_improves_over_the_baseline_and_names_the_report(short_dir: Path) -> None:
    folder = short_dir / "demo"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRAINEE_", "LISTEN_"))}
    env["HOME"] = str(short_dir / "home")  # the demo's daemon remembers projects under HOME
    before = _listing(REPO / "examples" / "mlp-flags")
    proc = subprocess.run(
        [sys.executable, "-m", "trainee.demo", "--folder", str(folder)],
        env=env,
        capture_output=True,
        text=True,
        timeout=110,
        cwd=REPO,
    )
    out = proc.stdout
    assert proc.returncode == 0, f"{out[-3000:]}\n{proc.stderr[-3000:]}"
    project = folder / "mlp-flags"
    assert f"demo: copied examples/mlp-flags to {project}" in out
    # the live view ran in the terminal: rounds, decisions and the final table
    assert "round 6:" in out and "TPE suggestion" in out
    assert "session-0001: finished (max_rounds)" in out

    m = re.search(
        r"best val_loss ([0-9.]+) in round (\d+) vs the baseline's ([0-9.]+) \(round 1\): "
        r"(-[0-9.]+)%",
        out,
    )
    assert m, out[-2000:]
    best, base = float(m.group(1)), float(m.group(3))
    assert best < base and int(m.group(2)) > 1
    assert float(m.group(4)) == pytest.approx((best - base) / base * 100, abs=0.06)
    assert re.search(r"^best params: lr=\S+, weight_decay=\S+, batch_size=\d+$", out, re.M)

    report = project / ".trainee" / "artifacts" / "session-0001" / "report.md"
    assert f"report: {report}\n" in out
    assert report.is_file() and "session-0001" in report.read_text()
    # the private daemon was stopped, and the bundled example was left as it was
    pid = _daemon_pid(folder / "run")
    assert pid is None or not Path(f"/proc/{pid}").exists()
    assert not (folder / "run" / "trainee.sock").exists()
    assert _listing(REPO / "examples" / "mlp-flags") == before


def test_demo_refuses_a_folder_that_is_not_empty(short_dir: Path) -> None:
    (short_dir / "taken.txt").write_text("x")
    proc = subprocess.run(
        [sys.executable, "-m", "trainee.demo", "--folder", str(short_dir)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert f"--folder {short_dir}: exists and is not empty" in proc.stderr
    assert sorted(p.name for p in short_dir.iterdir()) == ["taken.txt"]
