"""The goal a metric's name implies: one table, both directions and the names that say nothing."""

from __future__ import annotations

import pytest

from trainee.spec import Goal
from trainee.spec.goals import infer_goal

CASES = [
    ("val_loss", Goal.MIN),
    ("train/loss_step", Goal.MIN),
    ("total_loss", Goal.MIN),
    ("valloss", Goal.MIN),
    ("eval_ppl", Goal.MIN),
    ("perplexity", Goal.MIN),
    ("test_error", Goal.MIN),
    ("error_rate", Goal.MIN),
    ("wer", Goal.MIN),
    ("val_mse", Goal.MIN),
    ("val_nll", Goal.MIN),
    ("val_acc", Goal.MAX),
    ("eval/accuracy", Goal.MAX),
    ("trainAcc", Goal.MAX),
    ("acc@1", Goal.MAX),
    ("eval_top1", Goal.MAX),
    ("f1", Goal.MAX),
    ("F1Score", Goal.MAX),
    ("bleu", Goal.MAX),
    ("roc_auc", Goal.MAX),
    ("val/mAP@0.5", Goal.MAX),
    ("eval_exact_match", Goal.MAX),
    ("score", Goal.MAX),
    ("map50", Goal.MAX),
    ("rouge1", Goal.MAX),
    ("f2", Goal.MAX),
    ("valacc", Goal.MAX),
    ("trainloss", Goal.MIN),
    ("cost", Goal.MIN),
    ("lr", None),
    ("grad_accum", None),  # words are never searched inside
    ("top_k", None),
    ("glossary", None),
    ("epoch", None),
    ("grad_norm", None),
    ("throughput", None),
]


@pytest.mark.parametrize(("name", "goal"), CASES)
def test_goal_from_the_name(name: str, goal: Goal | None) -> None:
    assert infer_goal(name) == goal
