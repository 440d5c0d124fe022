"""A fixture project in the shape of a small transformer trainer (written for these tests):
``fit.py`` takes ``--n_embd``, ``--n_head``, ``--batch_size``, ``--grad_accum`` and
``--epochs``, asserts ``n_embd % n_head == 0`` as attention code does (so a round that
breaks the constraint crashes), and logs each epoch three ways real trainers do: a line
on stdout, TensorBoard scalars (``val/loss``, ``train/loss``; TensorBoard's own
``EventFileWriter`` with legacy ``simple_value`` scalars, as torch.utils.tensorboard
writes them) and a timm-style ``summary.csv`` appended one row per epoch. It writes
into ``$TRAINEE_ROUND_DIR/outputs`` (the round's own folder, writable in guarded mode).

With ``--step`` it waits for a line on stdin before each epoch and prints
``epoch N written`` once the epoch's files are flushed, so a test can read the files
while the process is still running, epoch by epoch.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

FIT = '''\
"""Fit a tiny fake transformer; logs to stdout, TensorBoard and summary.csv."""
import argparse
import csv
import os
import sys

parser = argparse.ArgumentParser()
parser.add_argument("--n_embd", type=int, default=64)
parser.add_argument("--n_head", type=int, default=4)
parser.add_argument("--batch_size", type=int, default=8)
parser.add_argument("--grad_accum", type=int, default=1)
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--out", default=None)
parser.add_argument("--step", action="store_true")
args = parser.parse_args()
assert args.n_embd % args.n_head == 0, "n_embd must be divisible by n_head"

from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter

out = args.out or os.path.join(os.environ["TRAINEE_ROUND_DIR"], "outputs")
os.makedirs(out, exist_ok=True)
tb = EventFileWriter(os.path.join(out, "tb"))
summary = os.path.join(out, "summary.csv")


def val_loss(epoch):
    head_dim = args.n_embd // args.n_head
    effective = args.batch_size * args.grad_accum
    return round(1.0 / (epoch + 1) + abs(head_dim - 16) / 100 + abs(effective - 32) / 1000, 6)


for epoch in range(args.epochs):
    if args.step:
        sys.stdin.readline()
    loss = val_loss(epoch)
    values = [
        summary_pb2.Summary.Value(tag="val/loss", simple_value=loss),
        summary_pb2.Summary.Value(tag="train/loss", simple_value=loss * 0.9),
    ]
    tb.add_event(event_pb2.Event(step=epoch, summary=summary_pb2.Summary(value=values)))
    tb.flush()
    new = not os.path.exists(summary)
    with open(summary, "a", newline="") as f:
        w = csv.writer(f)
        if new:
            w.writerow(["epoch", "train_loss", "eval_loss", "eval_top1"])
        w.writerow([epoch, loss * 0.9, loss, round(100 - 50 * loss, 4)])
    print(f"epoch {epoch} loss={loss * 0.9:.6f} val_loss={loss:.6f}", flush=True)
    if args.step:
        print(f"epoch {epoch} written", flush=True)
tb.close()
'''


def expected_val_loss(params: dict[str, int], epoch: int) -> float:
    """What fit.py logs as val/loss for ``params`` at ``epoch`` (before float32)."""
    head_dim = params["n_embd"] // params["n_head"]
    effective = params["batch_size"] * params.get("grad_accum", 1)
    return round(1.0 / (epoch + 1) + abs(head_dim - 16) / 100 + abs(effective - 32) / 1000, 6)


PROJECT = """\
version: 1
launch:
  command: [python, fit.py]
  args:
    - {flag: --grad_accum, value: 4}
run:
  max_rounds: 4
  timeout_minutes: 2
  fixed_args:
    - {flag: --epochs, value: 3}
metrics:
  specs:
    - {name: val_loss, source: tensorboard, key_or_pattern: val/loss, path: "{outputs_dir}/tb", goal: min, required: true}
    - {name: eval_top1, source: csv, key_or_pattern: eval_top1, path: "{outputs_dir}/summary.csv", goal: max}
    - {name: printed_val_loss, source: stdout_regex, key_or_pattern: 'val_loss=(?P<value>[0-9.]+)'}
advanced:
  heartbeat_interval_sec: 0.2
"""

TUNING = """\
version: 1
params:
  - {name: n_embd, flag: --n_embd, type: choice, default: 64, choices: [48, 64, 96]}
  - {name: n_head, flag: --n_head, type: choice, default: 4, choices: [3, 4, 5, 7, 8]}
  - {name: batch_size, flag: --batch_size, type: int, default: 8, min_value: 2, max_value: 32}
constraints:
  - "n_embd % n_head == 0"
  - "batch_size * grad_accum <= 64"
"""


def write_project(root: Path) -> Path:
    """The fixture project at ``root`` (fit.py, .trainee/project.yaml and tuning.yaml)."""
    (root / ".trainee").mkdir(parents=True)
    (root / "fit.py").write_text(FIT)
    (root / ".trainee" / "project.yaml").write_text(textwrap.dedent(PROJECT))
    (root / ".trainee" / "tuning.yaml").write_text(textwrap.dedent(TUNING))
    return root
