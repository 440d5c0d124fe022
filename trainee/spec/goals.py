"""Which way a metric should go, read from its name: ``val_loss`` down, ``eval/acc`` up.

One function, :func:`infer_goal`, used by discovery to propose a spec's ``goal`` and
by doctor to warn when a spec's goal contradicts its name. Stdlib only.
"""

from __future__ import annotations

import re

from trainee.spec.files import Goal

__all__ = ["infer_goal"]

_MIN_WORDS = frozenset(
    [
        "loss",
        "losses",
        "logloss",
        "mlogloss",
        "nll",
        "ppl",
        "perplexity",
        "error",
        "err",
        "errors",
        "wer",
        "cer",
        "ter",
        "mse",
        "mae",
        "rmse",
        "mape",
        "smape",
        "bpc",
        "bpb",
        "bpd",
        "fid",
        "kl",
        "kld",
        "distance",
        "dist",
        "cost",
        "regret",
    ]
)
_MAX_WORDS = frozenset(
    [
        "acc",
        "accuracy",
        "f1",
        "fscore",
        "score",
        "bleu",
        "rouge",
        "rougel",
        "meteor",
        "auc",
        "auroc",
        "auprc",
        "roc",
        "map",
        "ap",
        "miou",
        "iou",
        "dice",
        "r2",
        "precision",
        "prec",
        "recall",
        "psnr",
        "ssim",
        "reward",
        "return",
        "mcc",
        "kappa",
        "spearman",
        "pearson",
        "ndcg",
        "mrr",
        "hit",
        "hits",
        "match",
        "exact",
        "em",
        "correct",
    ]
)
_SPLITS = ("validation", "valid", "val", "eval", "test", "train", "dev")
"""Split words that may be glued to a measure: ``valloss``, ``trainacc``."""

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_WORD = re.compile(r"[^a-z0-9]+")
_NUMBERED = re.compile(r"(?:f|top)\d+")
"""``f1``, ``f2``; ``top1``, ``top5`` (``top`` alone, as in ``top_k``, says nothing)."""


def _goal_of_word(word: str) -> Goal | None:
    for candidate in (word, word.rstrip("0123456789"), word.lstrip("0123456789")):
        if candidate in _MIN_WORDS:
            return Goal.MIN
        if candidate in _MAX_WORDS or _NUMBERED.fullmatch(candidate):
            return Goal.MAX
    return None


def infer_goal(name: str) -> Goal | None:
    """``min`` for losses, perplexity, error rates (loss, ppl, error, wer, mse, ...),
    ``max`` for accuracy-like scores (acc, f1, score, bleu, auc, top1, map50, ...), None
    when the name does not say. The last telling word decides (``error_rate`` is min,
    ``loss_acc`` max): metric names put the measure after its qualifiers. A split glued
    to a measure counts (``valloss``); other words are never searched inside
    (``grad_accum`` says nothing)."""
    words = [w for w in _WORD.split(_CAMEL.sub("_", name).lower()) if w]
    for word in reversed(words):
        goal = _goal_of_word(word)
        if goal is None:
            split = next((s for s in _SPLITS if word.startswith(s) and len(word) > len(s)), None)
            if split is not None:
                goal = _goal_of_word(word[len(split) :])
        if goal is not None:
            return goal
    return None
