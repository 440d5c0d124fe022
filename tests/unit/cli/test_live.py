"""The live view's pure parts: what an output line looks like on the tail, the status line."""

from __future__ import annotations

from trainee.cli.live import Progress, clean_line


def test_output_lines_lose_escapes_and_keep_what_a_progress_bar_leaves() -> None:
    assert clean_line("\x1b[32mok\x1b[0m done") == "ok done"
    assert clean_line("epoch 1:  10%\repoch 1:  50%\repoch 1: 100%") == "epoch 1: 100%"
    assert clean_line("a\tb\x07\x1b]0;title\x07") == "a    b"


def test_the_status_line_counts_rounds_and_compares_with_the_baseline() -> None:
    p = Progress()
    p.max_rounds, p.started_at = 6, 1000.0
    assert p.line(now=1000.0) == "round \u2013/6 · 0s · no baseline yet"
    p.round_started(1)
    p.round_finished({"round": 1, "metric": 0.3, "verdict": "baseline", "metric_name": "val_loss"})
    assert p.line(now=1075.0) == "round 1/6 · 1m15s · best val_loss 0.3 (the baseline)"
    p.round_started(2)
    p.latest = {"loss": (0.25, 40)}
    p.round_finished({"round": 2, "metric": None, "verdict": "rejected"})
    p.round_started(3)
    p.round_finished({"round": 3, "metric": 0.24, "verdict": "kept"})
    assert p.line(now=1075.0).endswith("best val_loss 0.24 (round 3) vs baseline 0.3 (-20.0%)")
