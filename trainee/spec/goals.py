"""Which way a metric should go, read from its name: ``val_loss`` down, ``eval/acc`` up.

One function, :func:`infer_goal`, used by discovery to propose a spec's ``goal`` and
by doctor to warn when a spec's goal contradicts its name. Stdlib only.
"""

from __future__ import annotations

import re

from trainee.spec.files import Goal

__all__ = ["infer_goal"]

_MIN_WORDS = frozenset(
    {
        "loss",
        "losses",
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
        "bpc",
        "bpb",
        "bpd",
        "fid",
        "kl",
        "distance",
        "regret",
    }
)
_MAX_WORDS = frozenset(
    {
        "acc",
        "accuracy",
        "top",
        "f1",
        "fscore",
        "score",
        "bleu",
        "rouge",
        "meteor",
        "auc",
        "auroc",
        "roc",
        "map",
        "ap",
        "precision",
        "prec",
        "recall",
        "iou",
        "miou",
        "dice",
        "r2",
        "psnr",
        "ssim",
        "reward",
        "return",
        "mcc",
        "kappa",
        "ndcg",
        "mrr",
        "hit",
        "hits",
        "match",
        "em",
    }
)
_SUBSTRINGS: tuple[tuple[str, Goal], ...] = (
    ("perplexity", Goal.MIN),
    ("accuracy", Goal.MAX),
    ("loss", Goal.MIN),
    ("error", Goal.MIN),
    ("acc", Goal.MAX),
)
"""Markers glued to other words (``valloss``, ``trainacc``), tried when no word matches."""

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_WORD = re.compile(r"[^a-z0-9]+")


def infer_goal(name: str) -> Goal | None:
    """``min`` for losses, perplexity, error rates (loss, ppl, error, wer, mse, ...),
    ``max`` for accuracy-like scores (acc, f1, score, bleu, auc, top1, ...), None when
    the name does not say. The last telling word decides (``error_rate`` is min,
    ``loss_acc`` max): metric names put the measure after its qualifiers."""
    words = [w for w in _WORD.split(_CAMEL.sub("_", name).lower()) if w]
    for word in reversed(words):
        for candidate in (word, word.rstrip("0123456789"), word.lstrip("0123456789")):
            if candidate in _MIN_WORDS:
                return Goal.MIN
            if candidate in _MAX_WORDS:
                return Goal.MAX
    flat = "".join(words)
    for marker, goal in _SUBSTRINGS:
        if marker in flat:
            return goal
    return None
