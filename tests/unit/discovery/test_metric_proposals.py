"""Metric specs and constraints proposed from the code: print/logging formats, known
frameworks' output, goals and splits from names, checks between parameters."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from trainee.discovery.constraints import propose_constraints
from trainee.discovery.metrics import (
    MetricReport,
    is_training_metric,
    metric_goal,
    metric_split,
    propose_metrics,
)
from trainee.discovery.scan import scan_python_file

from .conftest import write


def proposals(tmp_path: Path, code: str, **files: str) -> MetricReport:
    write(tmp_path / "train.py", code)
    for name, text in files.items():
        write(tmp_path / f"{name}.py", text)
    return propose_metrics(tmp_path, scan_python_file(tmp_path, "train.py"))


def reads(report: MetricReport, name: str, line: str) -> str | None:
    spec = next(p for p in report.proposals if p.name == name)
    found = [m.group("value") for m in re.finditer(spec.key_or_pattern, line, re.M)]
    return found[-1] if found else None


@pytest.mark.parametrize(
    ("name", "goal", "split", "training"),
    [
        ("val_loss", "min", "validation", False),
        ("valid_ppl", "min", "validation", False),
        ("eval_accuracy", "max", "validation", False),
        ("test_wer", "min", "test", False),
        ("train_acc", "max", "train", True),
        ("loss", "min", "other", True),
        ("total_loss", "min", "other", True),
        ("val/acc1", "max", "validation", False),
        ("rmse", "min", "other", False),
        ("eval_top1", "max", "validation", False),
        ("dice", "max", "other", False),
        ("r2", "max", "other", False),
        ("epoch", None, "other", False),
    ],
)
def test_goal_and_split_from_the_name(
    name: str, goal: str | None, split: str, training: bool
) -> None:
    assert (metric_goal(name), metric_split(name), is_training_metric(name)) == (
        goal,
        split,
        training,
    )


def test_nanogpt_lines_give_the_compared_validation_loss_first(tmp_path: Path) -> None:
    report = proposals(
        tmp_path,
        """
        best_val_loss = 1e9
        for iter_num in range(10):
            losses = estimate_loss()
            print(f"step {iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
            if losses['val'] < best_val_loss:
                best_val_loss = losses['val']
            print(f"iter {iter_num}: loss {lossf:.4f}, time {dt*1000:.2f}ms, mfu {mfu*100:.2f}%")
        """,
    )
    assert [(p.name, p.split, p.selection) for p in report.proposals] == [
        ("val_loss", "validation", True),
        ("train_loss", "train", False),
        ("loss", "train", False),
    ]
    assert report.primary is not None and report.primary.name == "val_loss"
    line = "step 500: train loss 1.2345, val loss 1.4567"
    assert reads(report, "val_loss", line) == "1.4567"
    assert reads(report, "train_loss", line) == "1.2345"
    assert reads(report, "loss", line) is None  # 'train loss' is not the per-iter loss
    assert reads(report, "loss", "iter 3: loss 2.0000, time 5.00ms, mfu 1.00%") == "2.0000"


def test_pipe_tables_format_and_percent_and_logging(tmp_path: Path) -> None:
    report = proposals(
        tmp_path,
        """
        import logging
        logger = logging.getLogger(__name__)
        def train():
            print('| epoch {:3d} | lr {:02.2f} | ms/batch {:5.2f} | '
                  'loss {:5.2f} | ppl {:8.2f}'.format(epoch, lr, ms, cur_loss, ppl))
        def test():
            print('\\nTest set: Average loss: {:.4f}, Accuracy: {}/{} ({:.0f}%)\\n'.format(
                test_loss, correct, n, pct))
        print('| end of epoch {:3d} | time: {:5.2f}s | valid loss {:5.2f} | '
              'valid ppl {:8.2f}'.format(epoch, t, val_loss, ppl))
        logger.info("step %d: mae=%.4f", step, val_mae)
        """,
    )
    got = {p.name: p for p in report.proposals}
    assert list(got) == ["valid_loss", "valid_ppl", "val_mae", "test_loss"]
    assert (
        reads(report, "valid_loss", "| end of epoch   1 | time: 3.00s | valid loss  5.80 |")
        == "5.80"
    )
    assert (
        reads(report, "test_loss", "Test set: Average loss: 0.0312, Accuracy: 9890/10000 (99%)")
        == "0.0312"
    )
    assert reads(report, "val_mae", "step 7: mae=0.1250") == "0.1250"
    assert re.fullmatch(r"step \d+: mae=\d+\.2500", got["val_mae"].sample)  # the code's format


def test_dicts_postfix_keras_and_a_variable_built_by_pieces(tmp_path: Path) -> None:
    report = proposals(
        tmp_path,
        """
        import json
        record = {"epoch": epoch, "val_f1": f1}
        print(json.dumps(record))
        msg = f"epoch {epoch}"
        msg += f" - loss: {loss:.4f} - val_loss: {vl:.4f}"
        print(msg)
        pbar.set_postfix(val_acc=acc)
        """,
    )
    assert [(p.name, p.split) for p in report.proposals] == [
        ("val_loss", "validation"),
        ("val_f1", "validation"),
        ("val_acc", "validation"),
        ("loss", "train"),  # beside val_loss, the bare loss is the training one
    ]
    assert reads(report, "val_f1", '{"epoch": 3, "val_f1": 0.875}') == "0.875"
    assert reads(report, "val_loss", "epoch 3 - loss: 0.5000 - val_loss: 0.6000") == "0.6000"
    assert reads(report, "val_acc", "100%|####| 8/8 [00:01, val_acc=0.912]") == "0.912"


def test_final_and_best_lines_join_the_metric_they_repeat(tmp_path: Path) -> None:
    report = proposals(
        tmp_path,
        """
        print(f"epoch={epoch} loss={tl:.5f} val_loss={vl:.5f}")
        print(f"final val_loss={vl:.5f}")
        """,
    )
    assert [p.name for p in report.proposals] == ["val_loss", "loss"]
    assert (
        reads(report, "val_loss", "epoch=9 loss=0.2 val_loss=0.3\nfinal val_loss=0.30000")
        == "0.30000"
    )


@pytest.mark.parametrize(
    ("code", "name", "line", "value"),
    [
        (
            "from transformers import Trainer\n"
            "def compute_metrics(p):\n    return {'accuracy': 0.5}\n"
            "trainer = Trainer(model=m, args=a, compute_metrics=compute_metrics)\n",
            "eval_loss",
            "  eval_loss               =     0.6931",
            "0.6931",
        ),
        (
            "from transformers import Trainer, TrainingArguments\n"
            "args = TrainingArguments('out', metric_for_best_model='accuracy')\n"
            "def compute_metrics(p):\n    return {'accuracy': 0.5}\n",
            "eval_accuracy",
            "{'eval_loss': 0.41, 'eval_accuracy': 0.875, 'epoch': 1.0}",
            "0.875",
        ),
        (
            "import lightning as L\n"
            "class M(L.LightningModule):\n"
            "    def validation_step(self, batch, i):\n"
            "        self.log('val/acc', acc, prog_bar=True)\n",
            "val_acc",
            "Epoch 1: 100%|####| 8/8 [00:00<00:00, v_num=0, val/acc=0.812]",
            "0.812",
        ),
        (
            "from tensorflow import keras\n"
            "model.compile(optimizer='adam', loss='mse', metrics=['mae'])\n"
            "model.fit(x, y, validation_split=0.2, epochs=3)\n",
            "val_loss",
            "8/8 - 0s - 5ms/step - loss: 0.50 - mae: 0.4 - val_loss: 0.6931 - val_mae: 0.5",
            "0.6931",
        ),
    ],
)
def test_known_frameworks_output(
    tmp_path: Path, code: str, name: str, line: str, value: str
) -> None:
    report = proposals(tmp_path, code)
    assert report.primary is not None and report.primary.name == name
    assert reads(report, name, line) == value


def test_lightning_keys_off_the_progress_bar_are_noted(tmp_path: Path) -> None:
    report = proposals(
        tmp_path,
        "import pytorch_lightning as pl\n"
        "class M(pl.LightningModule):\n"
        "    def validation_step(self, b, i):\n        self.log('val_loss', loss)\n",
    )
    assert report.proposals == []
    assert "without prog_bar=True" in report.notes[0]


def test_only_training_metrics_give_no_primary(tmp_path: Path) -> None:
    report = proposals(tmp_path, 'print(f"step {i} loss {loss:.3f}")\n')
    assert [p.name for p in report.proposals] == ["loss"] and report.primary is None


# -- constraints -------------------------------------------------------------------------------


def constraints(
    tmp_path: Path, code: str, **files: str
) -> list[tuple[str, tuple[str, str] | None]]:
    write(tmp_path / "train.py", code)
    for name, text in files.items():
        write(tmp_path / f"{name}.py", text)
    found = propose_constraints(tmp_path, scan_python_file(tmp_path, "train.py"))
    return [(c.expr, c.divisible) for c in found]


def test_constraints_from_asserts_raises_and_attention(tmp_path: Path) -> None:
    got = constraints(
        tmp_path,
        """
        import argparse
        import model
        p = argparse.ArgumentParser()
        args = p.parse_args()
        if args.n_embd % args.n_head:
            raise SystemExit("bad")
        assert args.warmup <= args.steps, "warm-up longer than the run"
        assert len(args.layers) > 0  # a call: not a constraint
        m = model.TransformerModel(100, args.emsize, args.nhead)
        r = model.RNNModel(args.emsize, args.nhid, args.tied)
        """,
        model="""
        import torch.nn as nn
        class TransformerModel(nn.Module):
            def __init__(self, ntoken, ninp, nhead):
                self.layer = nn.TransformerEncoderLayer(ninp, nhead)
        class RNNModel(nn.Module):
            def __init__(self, ninp, nhid, tie_weights=False):
                if tie_weights:
                    if nhid != ninp:
                        raise ValueError("tied needs nhid == emsize")
                    self.decoder = self.encoder
        class Wrapped(nn.Transformer):
            def __init__(self, width, heads):
                super().__init__(d_model=width, nhead=heads)
        w = Wrapped(args.n_embd2, args.n_head2)
        """,
    )
    assert got == [
        ("n_embd % n_head == 0", ("n_embd", "n_head")),
        ("warmup <= steps", None),
        ("emsize % nhead == 0", ("emsize", "nhead")),
        ("not tied or nhid == emsize", None),
        ("n_embd2 % n_head2 == 0", ("n_embd2", "n_head2")),
    ]


def test_tied_sizes_become_choices_that_satisfy_the_check(tmp_path: Path) -> None:
    from trainee.discovery.scan import discover
    from trainee.discovery.tunables import suggest_tunables_report
    from trainee.spec import load_project_file

    write(
        tmp_path / "train.py",
        """
        import argparse
        p = argparse.ArgumentParser()
        p.add_argument("--n-embd", type=int, default=384)
        p.add_argument("--n-head", type=int, default=6)
        p.add_argument("--n-layer", type=int, default=6)
        args = p.parse_args()
        head_dim = args.n_embd // args.n_head
        """,
    )
    write(tmp_path / ".trainee" / "project.yaml", "launch:\n  command: [python, train.py]\n")
    project = load_project_file(tmp_path / ".trainee" / "project.yaml")
    report = suggest_tunables_report(tmp_path, project, discover(tmp_path))
    got = {s.name: s for s in report.suggestions}
    assert [(c.expr, c.reason) for c in report.constraints] == [
        ("n_embd % n_head == 0", "train.py:7 args.n_embd // args.n_head (heads must divide it)")
    ]
    assert got["n_head"].choices == [3, 4, 6, 8, 12]
    assert got["n_embd"].choices == [192, 288, 384, 576, 768]
    assert got["n_layer"].type == "int"
    assert all(w % h == 0 for w in got["n_embd"].choices for h in got["n_head"].choices)


def test_a_running_average_meter_reads_the_average(tmp_path: Path) -> None:
    report = proposals(
        tmp_path,
        """
        def validate(loader):
            for i, batch in enumerate(loader):
                _logger.info(
                    f"Test: [{i:>4d}/{n}]  Loss: {losses_m.val:>7.3f} ({losses_m.avg:>6.3f})  "
                    f"Acc@1: {top1_m.val:>7.3f} ({top1_m.avg:>7.3f})"
                )
        """,
    )
    assert [p.name for p in report.proposals] == ["test_loss", "test_acc1"]
    line = "Test: [  10/10]  Loss:   0.712 ( 0.690)  Acc@1:  81.250 ( 79.500)"
    assert reads(report, "test_loss", line) == "0.690"
    assert reads(report, "test_acc1", line) == "79.500"


def test_lightning_stage_keys_and_the_final_test_table(tmp_path: Path) -> None:
    report = proposals(
        tmp_path,
        """
        from lightning.pytorch.cli import LightningCLI
        import lightning as L
        class AutoEncoder(L.LightningModule):
            def validation_step(self, batch, i):
                self._common_step(batch, i, "val")
            def test_step(self, batch, i):
                self._common_step(batch, i, "test")
            def _common_step(self, batch, i, stage):
                self.log(f"{stage}_loss", loss, on_step=True)
        def cli_main():
            cli = LightningCLI(AutoEncoder)
            cli.trainer.test(ckpt_path="best", datamodule=cli.datamodule)
        """,
    )
    # val_loss reaches only the logger: LightningCLI writes it below default_root_dir
    primary = report.primary
    assert primary is not None
    assert (primary.name, primary.source, primary.key_or_pattern, primary.path) == (
        "val_loss",
        "tensorboard",
        "val_loss_epoch",
        "{outputs_dir}/lightning_logs/version_*",
    )
    assert reads(report, "test_loss", "│     test_loss_epoch     │    0.0123     │") == "0.0123"
    assert report.notes == []


def test_percent_s_values_and_no_tautologies(tmp_path: Path) -> None:
    report = proposals(
        tmp_path,
        """
        print("Elasticnet model (alpha={:f}, l1_ratio={:f}):".format(alpha, l1_ratio))
        print("  RMSE: %s" % rmse)
        print("  R2: %s" % r2)
        """,
    )
    assert [(p.name, p.goal) for p in report.proposals] == [("rmse", "min"), ("r2", "max")]
    assert reads(report, "rmse", "  RMSE: 0.7931") == "0.7931"
    assert constraints(tmp_path, "assert block_size <= self.config.block_size\n") == []
