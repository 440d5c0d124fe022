"""The file sources read while a round runs (tensorboard, csv) and the W&B summary of a
round found without a path. Event files are written with TensorBoard's own writers, in
both formats real projects produce: the tensor scalars of ``tensorboard.summary.Writer``
(Keras, TF2) and the legacy ``simple_value`` scalars torch.utils.tensorboard writes
through TensorBoard's ``EventFileWriter``."""

from __future__ import annotations

import os
from pathlib import Path

from tests.support.extras import needs
from trainee.metrics import Extractor
from trainee.metrics.csv_source import CsvReader
from trainee.metrics.wandb_source import find_wandb_summary

from .helpers import extractor, round_layout, spec, triples


def write(path: Path, text: str, mtime: float | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    if mtime is not None:
        os.utime(path, (mtime, mtime))
    return path


# -- csv ---------------------------------------------------------------------------------

SUMMARY = "epoch,train_loss,eval_loss,eval_top1,lr\n0,2.5,2.1,31.5,0.1\n1,1.9,1.7,45.25,0.1\n"


def test_csv_reads_a_column_of_every_row_and_the_last_is_final(tmp_path: Path) -> None:
    out = round_layout(tmp_path).outputs
    path = write(out / "train" / "summary.csv", SUMMARY)
    ex = extractor(
        [
            spec("eval_top1", "csv", "eval_top1", path="{outputs_dir}/**/summary.csv", goal="max"),
            spec("lr", "csv", "lr", path="{outputs_dir}/**/summary.csv"),
        ],
        root=tmp_path,
    )
    assert ex.polled
    assert triples(ex.poll_files()) == [
        ("eval_top1", 31.5, 0),
        ("eval_top1", 45.25, 1),
        ("lr", 0.1, 0),
        ("lr", 0.1, 1),
    ]
    with open(path, "a") as f:
        f.write("2,1.5,1.4,52.0,0.05\n3,1.4,")  # the last row is still being written
    assert triples(ex.poll_files()) == [("eval_top1", 52.0, 2), ("lr", 0.05, 2)]
    with open(path, "a") as f:
        f.write("1.3,55.5,0.01")  # ends without a newline: counted by the final read
    assert {p.source for p in ex.read_files()} == {"csv"}
    result = ex.result()
    assert result.finals == {"eval_top1": 55.5, "lr": 0.01}
    assert result.warnings == []


def test_csv_problems_are_warnings(tmp_path: Path) -> None:
    write(tmp_path / ".trainee" / "logs" / "m.csv", "step,loss\n1,0.5\n2,oops\n3,nan\n4,\n")
    ex = extractor(
        [
            spec("loss", "csv", "loss", path=".trainee/logs/*.csv"),
            spec("acc", "csv", "acc", path=".trainee/logs/*.csv"),
            spec("gone", "csv", "x", path=".trainee/nothing/*.csv"),
        ],
        root=tmp_path,
    )
    ex.read_files()
    r = ex.result()
    assert r.finals == {}  # the last value was nan
    messages = {(w.metric, w.message.split(" (")[0]) for w in r.warnings}
    assert ("loss", "1 value(s) could not be read as numbers") in messages
    assert any(m == "loss" and "non-finite" in text for m, text in messages)
    path = tmp_path / ".trainee" / "logs" / "m.csv"
    assert ("acc", f"column 'acc' not in the header of {path}") in messages
    assert ("gone", f"no file matches '{tmp_path}/.trainee/nothing/*.csv'") in messages


def test_csv_reads_are_bounded_and_a_rewritten_file_is_read_again(tmp_path: Path) -> None:
    path = write(tmp_path / "big.csv", "epoch,acc\n" + "".join(f"{i},{i}\n" for i in range(1000)))
    reader = CsvReader(str(path), "acc", max_read=100)
    records, warnings = reader.poll()
    # the header and the whole rows of the last 100 bytes only
    assert records[-1] == (999.0, 999, "999") and len(records) < 30
    assert warnings == [
        f"{path} holds {path.stat().st_size} bytes; only its header and the "
        "rows of its last 100 bytes were read"
    ]
    write(path, "epoch,acc\n0,0.5\n")
    records, warnings = reader.poll()
    assert records == [(0.5, 0, "0.5")]
    assert warnings == [f"{path} was rewritten; it is read again from its start"]
    with open(path, "a") as f:
        f.write("1," + "9" * 500 + "\n2,0.75\n")
    got: list[tuple[float | None, int | None, str]] = []
    for _ in range(10):  # a row longer than a read is skipped, the reader moves on
        got += reader.poll()[0]
    assert got[-1] == (0.75, 2, "0.75")


# -- tensorboard -------------------------------------------------------------------------


@needs("tensorboard")
def test_tensorboard_scalars_of_both_formats_read_incrementally(tmp_path: Path) -> None:
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary import Writer
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    out = round_layout(tmp_path).outputs
    writer = Writer(str(out / "tb"))
    writer.add_scalar("val/loss", 0.5, 1)
    writer.add_scalar("train/loss", 0.9, 1)
    writer.flush()
    ex = extractor(
        [spec("val_loss", "tensorboard", "val/loss", path="{outputs_dir}/tb")], root=tmp_path
    )
    assert triples(ex.poll_files()) == [("val_loss", 0.5, 1)]
    writer.add_scalar("val/loss", 0.25, 2)
    writer.flush()
    # legacy simple_value scalars (torch.utils.tensorboard's format), another file
    legacy = EventFileWriter(str(out / "tb" / "legacy"))
    value = summary_pb2.Summary.Value(tag="val/loss", simple_value=0.125)
    legacy.add_event(event_pb2.Event(step=3, summary=summary_pb2.Summary(value=[value])))
    legacy.flush()
    assert triples(ex.poll_files()) == [("val_loss", 0.25, 2), ("val_loss", 0.125, 3)]
    assert ex.poll_files() == []
    writer.add_scalar("val/loss", 0.0625, 4)
    writer.close()
    legacy.close()
    assert triples(ex.read_files()) == [("val_loss", 0.0625, 4)]
    r = ex.result()
    assert r.finals == {"val_loss": 0.0625} and r.warnings == []


@needs("tensorboard")
def test_tensorboard_missing_tag_or_files_are_warnings(tmp_path: Path) -> None:
    from tensorboard.summary import Writer

    writer = Writer(str(tmp_path / ".trainee" / "tb"))
    writer.add_scalar("loss", 1.0, 0)
    writer.close()
    ex = extractor(
        [
            spec("acc", "tensorboard", "eval/acc", path=".trainee/tb/*tfevents*"),
            spec("x", "tensorboard", "x", path=".trainee/none"),
        ],
        root=tmp_path,
    )
    ex.read_files()
    assert [(w.metric, w.message) for w in ex.result().warnings] == [
        ("acc", "tag 'eval/acc' not found in 1 event file(s) (scalar tags seen: loss)"),
        ("x", f"no TensorBoard event file matches '{tmp_path}/.trainee/none'"),
    ]


# -- wandb_summary without a path --------------------------------------------------------


def test_wandb_summary_of_this_round_is_the_newest_since_it_started(tmp_path: Path) -> None:
    wandb_dir = tmp_path / ".trainee" / "cache" / "wandb"
    work = tmp_path / "work"
    earlier = write(
        wandb_dir / "wandb" / "run-1" / "files" / "wandb-summary.json", '{"acc": 0.5}', 1_000
    )
    write(work / "wandb" / "offline-run-2" / "files" / "wandb-summary.json", '{"acc": 0.7}', 3_000)
    ex = Extractor(
        [spec("acc", "wandb_summary", "acc", goal="max")],
        placeholders=round_layout(tmp_path).placeholders(),
        project_root=str(tmp_path),
        wandb_dirs=(str(wandb_dir), str(work)),
        since=2_000,
    )
    assert triples(ex.read_files()) == [("acc", 0.7, None)]
    # a run of an earlier round only: none of this round
    found, searched = find_wandb_summary([str(wandb_dir)], since=2_000)
    assert found is None and searched[0] == f"{wandb_dir}/wandb/*run-*/files/wandb-summary.json"
    assert find_wandb_summary([str(wandb_dir)], since=None)[0] == str(earlier)
    late = Extractor(
        [spec("acc", "wandb_summary", "acc", goal="max")],
        placeholders={},
        project_root=str(tmp_path),
        wandb_dirs=(str(wandb_dir),),
        since=5_000,
    )
    assert late.read_files() == []
    [warning] = late.result().warnings
    assert warning.message.startswith("no W&B summary of this round found (searched ")
