"""Text sources: built-in loss/total_loss, stdout_regex, log_regex, log_file_regex, steps."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from trainee.metrics import parse_number

from .helpers import extractor, round_layout, spec, triples

# (id, line, expected (name, value, step) points) -- lines as real frameworks print them
BUILTIN_LINES: list[tuple[str, str, list[tuple[str, float, int | None]]]] = [
    (
        "lightning-progress",
        "Epoch 3: 100%|██████████| 10/10 [00:01<00:00,  9.87it/s, loss=0.123, v_num=1]",
        [("loss", 0.123, 3)],
    ),
    (
        "lightning-train_loss-is-not-loss",
        "Epoch 0:  50%|█████     | 5/10 [00:00<00:00, 50.12it/s, v_num=0, train_loss_step=0.693]",
        [],
    ),
    (
        "hf-trainer-log",
        "{'loss': 0.41, 'grad_norm': 1.2345, 'learning_rate': 5e-05, 'epoch': 1.0}",
        [("loss", 0.41, None)],
    ),
    ("hf-trainer-eval", "{'eval_loss': 0.39, 'eval_runtime': 1.2, 'epoch': 1.0}", []),
    (
        "hf-trainer-summary",
        "{'train_runtime': 12.3, 'train_samples_per_second': 81.2, 'train_loss': 0.45, "
        "'epoch': 3.0}",
        [],
    ),
    (
        "nanogpt-eval",
        "step 500: train loss 2.1234, val loss 2.2345",
        [("loss", 2.1234, 500)],
    ),
    ("nanogpt-iter", "iter 10: loss 4.2000, time 35.12ms, mfu 12.34%", [("loss", 4.2, 10)]),
    (
        "keras",
        "469/469 [==============================] - 3s 6ms/step - loss: 0.2345 - accuracy: "
        "0.9312 - val_loss: 0.1234 - val_accuracy: 0.9612",
        [("loss", 0.2345, None)],
    ),
    (
        "pytorch-mnist-example",
        "Train Epoch: 1 [640/60000 (1%)]\tLoss: 1.234567",
        [("loss", 1.234567, 1)],
    ),
    ("bracket-step", "Epoch [1/10], Step [100/600], Loss: 0.2345", [("loss", 0.2345, 100)]),
    (
        "total-loss-scientific",
        "step=20 total_loss=3.5e-01 recon_loss=0.2 kl_loss=0.15",
        [("total_loss", 0.35, 20)],
    ),
    ("total-loss-words", "Total Loss: 1.5E+02", [("total_loss", 150.0, None)]),
    ("val-loss-words", "val loss 2.5", []),
    ("validation-loss-words", "Validation Loss: 0.3", []),
    ("slash-prefixed", "val/loss=0.3 train/loss=0.2 train-loss=0.1", []),
    ("val-total-loss", "val_total_loss=0.3 val total loss: 0.2", []),
    (
        "torch-tensor",
        "loss=tensor(0.5321, device='cuda:0', grad_fn=<NllLossBackward0>)",
        [("loss", 0.5321, None)],
    ),
    ("json-line", '{"step": 7, "loss": -1.5e-3}', [("loss", -0.0015, 7)]),
    ("ckpt-name", "saved epoch=2-step=100.ckpt loss=0.7", [("loss", 0.7, 100)]),
    ("glued-digit-is-not-loss", "loss2: 0.5", []),
    ("prose", "the loss function is CrossEntropyLoss", []),
    ("global-step-sign", "global_step=7 loss=+1.0", [("loss", 1.0, 7)]),
    ("float-epoch-is-no-step", "epoch 1.5 loss 0.25", [("loss", 0.25, None)]),
    ("leading-dot", "loss .5", [("loss", 0.5, None)]),
    ("it-step", "it 42 loss=3", [("loss", 3.0, 42)]),
    ("tqdm-rate-is-no-step", "100%|███| 5.1it/s loss=1.25", [("loss", 1.25, None)]),
    (
        "both-on-one-line",
        "iteration 12 | loss 0.5 | total_loss 0.9",
        [("loss", 0.5, 12), ("total_loss", 0.9, 12)],
    ),
]


@pytest.mark.parametrize(
    ("line", "expected"), [c[1:] for c in BUILTIN_LINES], ids=[c[0] for c in BUILTIN_LINES]
)
def test_builtin_loss_in_real_framework_lines(
    line: str, expected: list[tuple[str, float, int | None]]
) -> None:
    ex = extractor()
    assert triples(ex.feed_output(line)) == expected
    assert triples(ex.result().points) == expected


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("3", 3.0),
        ("-0.5", -0.5),
        ("+2.", 2.0),
        ("1e-3", 0.001),
        ("1.5E+02", 150.0),
        ("  7.25 ", 7.25),
        ("inf", math.inf),
        ("-Inf", -math.inf),
        ("Infinity", math.inf),
    ],
)
def test_parse_number(text: str, value: float) -> None:
    assert parse_number(text) == value


@pytest.mark.parametrize("text", ["nan", "NaN", "-nan"])
def test_parse_number_nan(text: str) -> None:
    result = parse_number(text)
    assert result is not None and math.isnan(result)


@pytest.mark.parametrize("text", ["", "abc", "0.5,", "1e", "93%"])
def test_parse_number_refuses(text: str) -> None:
    assert parse_number(text) is None


def test_nan_and_inf_are_missing_with_one_warning_per_metric() -> None:
    ex = extractor()
    ex.feed_output("step 1 loss=0.5\nstep 2 loss=nan\nstep 3 loss=NaN\nstep 4 loss=-inf")
    r = ex.result()
    assert triples(r.points) == [("loss", 0.5, 1)]
    assert r.finals == {}, "a run that ends in nan has no final value"
    assert r.missing_required == ["loss"]
    [nonfinite] = [w for w in r.warnings if "non-finite" in w.message]
    assert nonfinite.metric == "loss"
    assert "3 non-finite value(s)" in nonfinite.message
    assert "'nan' at step 2" in nonfinite.message
    assert "no final value" in nonfinite.message

    ex.feed_output("step 5 loss=0.25")
    r = ex.result()
    assert r.finals == {"loss": 0.25}
    assert r.missing_required == []
    assert [p.seq for p in r.points] == [0, 1]
    [nonfinite] = r.warnings
    assert "no final value" not in nonfinite.message


def test_stdout_regex_named_group_and_first_group() -> None:
    ex = extractor(
        [
            spec("val_acc", "stdout_regex", r"val_acc[=:]\s*(?P<value>[-+0-9.eE]+)", goal="max"),
            spec("f1", "stdout_regex", r"(f1|F1) score: ([0-9.]+)"),
            spec("bleu", "stdout_regex", r"BLEU = ([0-9.]+)"),
        ]
    )
    new = ex.feed_output(
        "epoch=1 val_acc=0.91 lr=1e-3\n"
        "epoch=2 val_acc: 9.3e-1\n"
        "F1 score: 0.8\n"
        "BLEU = 27.4, 58.1/33.2/21.5/14.3 (BP = 1.000)\n"
    )
    # points come grouped by metric (spec order), each in line order; group 1 of the
    # f1 pattern is the word "F1", which is reported, not stored
    assert triples(new) == [("val_acc", 0.91, 1), ("val_acc", 0.93, 2), ("bleu", 27.4, None)]
    r = ex.result()
    assert r.finals == {"val_acc": 0.93, "bleu": 27.4}
    [bad] = r.warnings
    assert bad.metric == "f1"
    assert "could not be read as numbers (first: 'F1')" in bad.message
    assert r.primary == "val_acc"


def test_regex_anchors_match_per_line() -> None:
    ex = extractor([spec("score", "stdout_regex", r"^SCORE (\S+)$")])
    ex.feed_output("SCORE 1\nnot a SCORE 2\nSCORE 3")
    assert triples(ex.result().points) == [("score", 1.0, None), ("score", 3.0, None)]


def test_stdout_specs_read_output_only_and_log_specs_logs_only(tmp_path: Path) -> None:
    layout = round_layout(tmp_path)
    ex = extractor(
        [
            spec("out", "stdout_regex", r"out=(\S+)"),
            spec("anylog", "log_regex", r"anylog=(\S+)"),
            spec("trainlog", "log_file_regex", r"tl=(\S+)", path="{round_dir}/logs/*.log"),
        ],
        root=tmp_path,
    )
    line = "out=1 anylog=2 tl=3"
    assert triples(ex.feed_output(line)) == [("out", 1.0, None)]
    assert triples(ex.feed_log(str(layout.dir / "logs" / "train.log"), line)) == [
        ("anylog", 2.0, None),
        ("trainlog", 3.0, None),
    ]
    # a log file the log_file_regex path does not match
    assert triples(ex.feed_log(str(tmp_path / ".trainee" / "logs" / "x.log"), line)) == [
        ("anylog", 2.0, None)
    ]
    assert triples(ex.feed_log(str(layout.dir / "logs" / "deeper" / "t.log"), line)) == [
        ("anylog", 2.0, None)
    ]
    assert ex.log_file_patterns == (str(layout.dir / "logs" / "*.log"),)


@pytest.mark.parametrize(
    ("pattern", "path", "hit"),
    [
        (".trainee/logs/**/metrics.log", ".trainee/logs/metrics.log", True),
        (".trainee/logs/**/metrics.log", ".trainee/logs/a/b/metrics.log", True),
        (".trainee/logs/**", ".trainee/logs/a/b.txt", True),
        (".trainee/logs/*.log", ".trainee/logs/a/b.log", False),
        (".trainee/logs/run-?.log", ".trainee/logs/run-1.log", True),
        (".trainee/logs/run-?.log", ".trainee/logs/run-12.log", False),
        (".trainee/logs/run-[0-9].log", ".trainee/logs/run-7.log", True),
        (".trainee/logs/run-[!0-9].log", ".trainee/logs/run-7.log", False),
        (".trainee/logs/./train.log", ".trainee/logs/train.log", True),
        ("{outputs_dir}/**/*.log", ".trainee/runs/session-0001/round-0002/outputs/x.log", True),
        ("{outputs_dir}/**/*.log", ".trainee/runs/session-0001/round-0001/outputs/x.log", False),
    ],
)
def test_log_file_regex_path_globs(tmp_path: Path, pattern: str, path: str, hit: bool) -> None:
    ex = extractor([spec("m", "log_file_regex", r"m=(\S+)", path=pattern)], root=tmp_path)
    relative = triples(ex.feed_log(path, "m=1"))
    absolute = triples(ex.feed_log(str(tmp_path / path), "m=2"))
    assert (relative, absolute) == (([("m", 1.0, None)], [("m", 2.0, None)]) if hit else ([], []))


def test_glob_characters_in_the_project_root_are_literal(tmp_path: Path) -> None:
    root = tmp_path / "proj[1]*"
    ex = extractor([spec("m", "log_file_regex", r"m=(\S+)", path="{trainee_dir}/a.log")], root=root)
    assert triples(ex.feed_log(str(root / ".trainee" / "a.log"), "m=1")) == [("m", 1.0, None)]
    assert ex.feed_log(str(tmp_path / "proj1x" / ".trainee" / "a.log"), "m=1") == []


def test_builtin_loss_comes_from_logs_too_and_is_counted_once(tmp_path: Path) -> None:
    ex = extractor(root=tmp_path)
    log = str(tmp_path / ".trainee" / "logs" / "train.log")
    assert triples(ex.feed_log(log, "step 1 loss=0.9")) == [("loss", 0.9, 1)]
    # a logger echoing the same lines to stderr is not a second series
    assert ex.feed_output("step 1 loss=0.9\nstep 2 loss=0.8") == []
    assert triples(ex.feed_log(log, "step 2 loss=0.8")) == [("loss", 0.8, 2)]
    # total_loss has its own first stream
    assert triples(ex.feed_output("total_loss=1.5")) == [("total_loss", 1.5, None)]
    assert ex.feed_log(log, "total_loss=9") == []
    r = ex.result()
    assert r.finals == {"loss": 0.8, "total_loss": 1.5}
    assert [p.seq for p in r.points] == [0, 1, 0]


def test_custom_spec_named_loss_replaces_the_builtin() -> None:
    ex = extractor([spec("loss", "stdout_regex", r"my_loss=(\S+)")])
    ex.feed_output("loss=9 my_loss=1\ntotal_loss=3")
    r = ex.result()
    assert r.finals == {"loss": 1.0, "total_loss": 3.0}
    assert [(p.name, p.source) for p in r.points] == [
        ("loss", "stdout_regex"),
        ("total_loss", "builtin"),
    ]


def test_carriage_return_redraws_are_separate_lines() -> None:
    ex = extractor()
    ex.feed_output("Epoch 1: 10%|█| loss=0.9\rloss=0.8\rEpoch 2: 20%|██| loss=0.7\n")
    assert triples(ex.result().points) == [
        ("loss", 0.9, 1),
        ("loss", 0.8, None),
        ("loss", 0.7, 2),
    ]


def test_nearest_preceding_step_on_the_same_line_only() -> None:
    ex = extractor()
    ex.feed_output("step 5\nloss=1.0\nepoch 1 step 7 loss=2.0 step 9\n")
    assert triples(ex.result().points) == [("loss", 1.0, None), ("loss", 2.0, 7)]
