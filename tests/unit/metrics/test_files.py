"""File sources read at round end: jsonl and wandb_summary."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from trainee.errors import InvalidState

from .helpers import extractor, round_layout, spec, triples


def write(path: Path, text: str, mtime: int | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    if mtime is not None:
        os.utime(path, (mtime, mtime))
    return path


METRICS_JSONL = """\
{"step": 1, "train": {"loss": 0.9}, "val": {"mse": 0.5}}
{"step": 2, "train": {"loss": 0.8}}
this line is not json
{"epoch": 3, "val": {"mse": 0.25}}

{"iter": 4, "val": {"mse": NaN}}
{"step": true, "val": {"mse": 1e-3}}
["a", "list"]
{"step": 6, "val": {"mse": "0.0005"}}
{"step": 7, "val": {"mse": {"min": 0.1}}}
{"step": 8, "val": {"mse": 0.002}, "truncated
"""


def test_jsonl_dotted_path_steps_and_malformed_lines(tmp_path: Path) -> None:
    out = round_layout(tmp_path).outputs
    path = write(out / "metrics.jsonl", METRICS_JSONL)
    ex = extractor(
        [spec("val_mse", "jsonl", "val.mse", path="{outputs_dir}/metrics.jsonl")], root=tmp_path
    )
    new = ex.read_files()
    assert triples(new) == [
        ("val_mse", 0.5, 1),
        ("val_mse", 0.25, 3),
        ("val_mse", 1e-3, None),
        ("val_mse", 0.0005, 6),
    ]
    assert {p.source for p in new} == {"jsonl"}
    r = ex.result()
    assert r.finals == {"val_mse": 0.0005}
    messages = [w.message for w in r.warnings]
    assert messages[0] == f"skipped 3 malformed line(s) of {path} (first: line 3)"
    assert messages[1].startswith("1 value(s) could not be read as numbers (first: {'min': 0.1})")
    assert messages[2].startswith("1 non-finite value(s) recorded as missing (first: 'nan'")
    assert len(messages) == 3


def test_jsonl_literal_dotted_key_wins_over_nesting(tmp_path: Path) -> None:
    write(
        tmp_path / "logs" / "m.jsonl",
        '{"val.mse": 0.7, "val": {"mse": 0.1}, "global_step": 12}\n',
    )
    ex = extractor([spec("m", "jsonl", "val.mse", path="logs/m.jsonl")], root=tmp_path)
    assert triples(ex.read_files()) == [("m", 0.7, 12)]


def test_jsonl_reads_every_matching_file_oldest_first(tmp_path: Path) -> None:
    out = round_layout(tmp_path).outputs
    write(out / "b" / "metrics.jsonl", '{"step": 1, "acc": 0.5}\n', mtime=1_000)
    write(out / "a" / "metrics.jsonl", '{"step": 9, "acc": 0.9}\n', mtime=2_000)
    ex = extractor(
        [spec("acc", "jsonl", "acc", path="{outputs_dir}/**/metrics.jsonl", goal="max")],
        root=tmp_path,
    )
    assert triples(ex.read_files()) == [("acc", 0.5, 1), ("acc", 0.9, 9)]
    assert ex.result().finals == {"acc": 0.9}


def test_jsonl_key_absent_and_file_absent_are_warnings(tmp_path: Path) -> None:
    write(tmp_path / ".trainee" / "logs" / "m.jsonl", '{"step": 1, "other": 2}\n' * 3)
    ex = extractor(
        [
            spec("acc", "jsonl", "acc", path="{trainee_dir}/logs/m.jsonl", required=True),
            spec("f1", "jsonl", "f1", path="{trainee_dir}/logs/nothing-*.jsonl"),
        ],
        root=tmp_path,
    )
    assert ex.read_files() == []
    r = ex.result()
    log = tmp_path / ".trainee" / "logs" / "m.jsonl"
    assert [(w.metric, w.message) for w in r.warnings] == [
        ("acc", f"key 'acc' not found in 3 record(s) of {log}"),
        ("f1", "no file matches '{trainee_dir}/logs/nothing-*.jsonl'"),
        ("acc", "required metric not found (jsonl '{trainee_dir}/logs/m.jsonl')"),
    ]
    assert r.missing_required == ["acc"]


def test_directories_and_binary_garbage_are_not_records(tmp_path: Path) -> None:
    (tmp_path / "logs" / "dir.jsonl").mkdir(parents=True)
    ex = extractor([spec("m", "jsonl", "m", path="logs/*.jsonl")], root=tmp_path)
    assert ex.read_files() == []
    assert [w.message for w in ex.result().warnings] == ["no file matches 'logs/*.jsonl'"]

    data = tmp_path / "logs" / "data.jsonl"
    data.write_bytes(b'\xff\xfe\x00garbage\n{"m": 1}\n\x80{"m": 2}\n')
    ex = extractor([spec("m", "jsonl", "m", path="logs/*.jsonl")], root=tmp_path)
    assert triples(ex.read_files()) == [("m", 1.0, None)]
    assert [w.message for w in ex.result().warnings] == [
        f"skipped 2 malformed line(s) of {data} (first: line 1)"
    ]


def test_unreadable_jsonl_is_a_warning_not_a_crash(tmp_path: Path) -> None:
    broken = write(tmp_path / "logs" / "x.jsonl", "")
    broken.chmod(0)
    try:
        if os.access(broken, os.R_OK):
            pytest.skip("running as a user who can read mode-000 files")
        ex = extractor([spec("m", "jsonl", "m", path="logs/*.jsonl")], root=tmp_path)
        assert ex.read_files() == []
        [warning] = ex.result().warnings
        assert warning.message == f"cannot read {broken}: Permission denied"
    finally:
        broken.chmod(0o644)


WANDB_SUMMARY = {
    "_step": 99,
    "_runtime": 12.5,
    "_timestamp": 1704067200.1,
    "loss": 0.12,
    "val": {"acc": 0.93},
    "hist": {"_type": "histogram", "values": [1, 2]},
    "_wandb": {"runtime": 12},
}


def test_wandb_summary_default_path_in_the_round_dir(tmp_path: Path) -> None:
    files = round_layout(tmp_path).dir / "wandb" / "run-20240101_000000-abc123" / "files"
    write(files / "wandb-summary.json", json.dumps(WANDB_SUMMARY))
    ex = extractor(
        [
            spec("val_acc", "wandb_summary", "val.acc", goal="max"),
            spec("wandb_loss", "wandb_summary", "loss"),
        ],
        root=tmp_path,
    )
    new = ex.read_files()
    assert triples(new) == [("val_acc", 0.93, 99), ("wandb_loss", 0.12, 99)]
    assert {p.source for p in new} == {"wandb_summary"}
    r = ex.result()
    assert r.finals == {"val_acc": 0.93, "wandb_loss": 0.12}
    assert r.primary == "val_acc"
    assert r.warnings == []


def test_wandb_summary_newest_run_wins_and_problems_are_warnings(tmp_path: Path) -> None:
    wandb = tmp_path / ".trainee" / "cache" / "wandb" / "wandb"
    write(wandb / "run-new" / "files" / "wandb-summary.json", '{"acc": 0.8}', mtime=2_000)
    write(wandb / "run-old" / "files" / "wandb-summary.json", '{"acc": 0.6}', mtime=1_000)
    pattern = "{trainee_dir}/cache/wandb/**/wandb-summary.json"
    ex = extractor(
        [
            spec("acc", "wandb_summary", "acc", path=pattern),
            spec("hist", "wandb_summary", "hist", path=pattern),
        ],
        root=tmp_path,
    )
    assert triples(ex.read_files()) == [("acc", 0.8, None)]
    newest = wandb / "run-new" / "files" / "wandb-summary.json"
    assert [(w.metric, w.message) for w in ex.result().warnings] == [
        ("hist", f"key 'hist' not found in {newest}")
    ]


def test_wandb_summary_that_is_not_an_object(tmp_path: Path) -> None:
    path = write(tmp_path / "logs" / "wandb-summary.json", "[1, 2")
    ex = extractor(
        [spec("acc", "wandb_summary", "acc", path="logs/wandb-summary.json")], root=tmp_path
    )
    assert ex.read_files() == []
    [warning] = ex.result().warnings
    assert warning.message == f"{path} is not a JSON object"


def test_read_files_twice_is_refused(tmp_path: Path) -> None:
    ex = extractor(root=tmp_path)
    assert ex.read_files() == []
    with pytest.raises(InvalidState, match="already called"):
        ex.read_files()
