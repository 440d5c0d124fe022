"""The round result: required metrics, primary, goals, thinning, wire shape, bad specs."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from trainee.errors import ConfigError, InvalidParams
from trainee.metrics import Extractor, MetricPoint, RoundMetrics
from trainee.spec import MetricSpec

from .helpers import extractor, spec


def test_no_specs_and_no_loss_means_loss_is_missing() -> None:
    ex = extractor()
    ex.feed_output("val_loss=0.3\ntrain_loss: 0.2\naccuracy 0.9")
    r = ex.result()
    assert r.finals == {}
    assert r.missing_required == ["loss"]
    assert r.primary is None
    [warning] = r.warnings
    assert warning.metric == "loss"
    assert "no finite loss or total_loss value" in warning.message


@pytest.mark.parametrize(
    ("text", "primary"),
    [("loss=0.5 total_loss=0.7", "loss"), ("total_loss=0.7", "total_loss"), ("loss 1", "loss")],
)
def test_no_specs_either_builtin_satisfies(text: str, primary: str) -> None:
    ex = extractor()
    ex.feed_output(text)
    r = ex.result()
    assert r.missing_required == []
    assert r.primary == primary
    assert r.warnings == []


def test_required_custom_metrics_missing() -> None:
    ex = extractor(
        [
            spec("acc", "stdout_regex", r"acc=(\S+)", goal="max", required=True),
            spec("f1", "stdout_regex", r"f1=(\S+)"),
            spec("bleu", "log_regex", r"bleu=(\S+)", required=True),
        ]
    )
    ex.feed_output("loss=0.5 bleu=30")  # bleu is a log_regex: not read from the output
    r = ex.result()
    assert r.missing_required == ["acc", "bleu"]
    assert r.primary == "acc"
    assert r.finals == {"loss": 0.5}, "the built-in loss is still recorded"
    assert [(w.metric, w.message) for w in r.warnings] == [
        ("acc", "required metric not found (stdout_regex 'acc=(\\\\S+)')"),
        ("bleu", "required metric not found (log_regex 'bleu=(\\\\S+)')"),
    ]

    ex.feed_output("acc=0.8")
    ex.feed_log("/nonexistent/project/.trainee/logs/x.log", "bleu=31.5")
    r = ex.result()
    assert r.missing_required == []
    assert r.finals == {"acc": 0.8, "bleu": 31.5, "loss": 0.5}


def test_specs_present_means_builtin_loss_is_not_required() -> None:
    ex = extractor([spec("f1", "stdout_regex", r"f1=(\S+)")])
    r = ex.result()
    assert r.missing_required == []
    assert r.primary == "f1"


def test_points_are_thinned_evenly_and_the_final_stays_exact() -> None:
    ex = extractor(max_points=8)
    returned = []
    for i in range(100):
        returned.extend(ex.feed_output(f"step {i} loss={i + 0.5}"))
    r = ex.result()
    seqs = [p.seq for p in r.points]
    assert seqs == [0, 16, 32, 48, 64, 80, 96, 99], "every 16th point, and the last"
    assert r.points[-1] == MetricPoint("loss", 99.5, 99, 99, "builtin")
    assert r.finals == {"loss": 99.5}
    assert [p.seq for p in returned][:9] == [0, 1, 2, 3, 4, 5, 6, 7, 8]
    assert all(p.seq % 16 == 0 for p in returned[-3:])


def test_wire_shape() -> None:
    point = MetricPoint("loss", 0.5, 3, 0, "builtin")
    assert msgspec.json.encode(point) == b'["loss",0.5,3,0,"builtin"]'
    ex = extractor()
    ex.feed_output("step 3 loss=0.5\nloss=nan")
    result = ex.result()
    again = msgspec.json.decode(msgspec.json.encode(result), type=RoundMetrics)
    assert again == result


@pytest.mark.parametrize(
    ("bad", "field", "reason"),
    [
        (spec("m", "stdout_regex", "acc=("), "metrics.specs[0].key_or_pattern", "invalid regex"),
        (spec("m", "stdout_regex", "acc=.*"), "metrics.specs[0].key_or_pattern", "capture group"),
        (spec("m", "jsonl", "acc"), "metrics.specs[0].path", "required for source jsonl"),
        (spec("m", "log_file_regex", "a=(.*)"), "metrics.specs[0].path", "required"),
        (
            spec("m", "jsonl", "acc", path="{project_dir}/m.jsonl"),
            "metrics.specs[0].path",
            "unknown placeholder {project_dir}",
        ),
    ],
)
def test_bad_specs_are_config_errors(bad: MetricSpec, field: str, reason: str) -> None:
    with pytest.raises(ConfigError) as info:
        extractor([bad])
    assert info.value.field == field
    assert reason in str(info.value)


def test_max_points_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(InvalidParams, match="max_points"):
        Extractor([], placeholders={}, project_root=str(tmp_path), max_points=0)
