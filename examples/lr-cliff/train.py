#!/usr/bin/env python3
"""Train a two-hidden-layer MLP regressor with SGD + momentum; above a learning-rate cliff it diverges.

Driven by command-line flags. Prints one line per epoch,

    epoch 3 loss=0.41235 val_loss=0.45512

and a last line ``final val_loss=...``. ``loss`` is the mean training MSE over the
epoch's minibatches, ``val_loss`` the MSE on the validation split after the epoch.

Plain SGD with momentum has a cliff: an effective step ``lr / (1 - momentum)`` past
about 0.5 makes the loss grow every epoch until it overflows (``inf``, then ``nan``).
Like a plain training loop, this script does not check for that: a diverged run keeps
going to its last epoch, printing ``nan`` (exit code 0). A step far below the cliff
crawls: its loss is still falling slowly when the epochs run out. Catching both
early is what ``run.prune`` is for.

The data (a fixed random "teacher" network plus noise, 8 inputs) is generated from a
fixed data seed, so every run sees the same data; ``--seed`` moves only the student's
initialisation and the minibatch order. Runs on CPU with numpy only; the same
``--seed`` prints the same numbers.
"""

from __future__ import annotations

import os

# One BLAS thread: faster for these small matrices and bit-for-bit repeatable.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402 (after the thread settings)
import math  # noqa: E402 (after the thread settings)
import sys  # noqa: E402 (after the thread settings)

import numpy as np  # noqa: E402 (after the thread settings)

DATA_SEED = 20
N_INPUTS = 8
N_TRAIN = 8192
N_VAL = 1024
NOISE_STD = 0.3


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lr", type=float, default=0.001, help="SGD step size (default 0.001)")
    parser.add_argument(
        "--momentum", type=float, default=0.9, help="heavy-ball momentum, 0 <= m < 1 (default 0.9)"
    )
    parser.add_argument(
        "--weight-decay",
        type=float,
        default=1e-4,
        help="L2 weight decay added to the weight matrices' gradients (default 1e-4)",
    )
    parser.add_argument("--epochs", type=int, default=40, help="passes over the data (default 40)")
    parser.add_argument("--batch-size", type=int, default=32, help="minibatch size (default 32)")
    parser.add_argument(
        "--hidden", type=int, default=64, help="units per hidden layer (default 64)"
    )
    parser.add_argument("--seed", type=int, default=0, help="init and shuffling seed (default 0)")
    args = parser.parse_args(argv)
    if not (args.lr > 0 and math.isfinite(args.lr)):
        parser.error(f"--lr must be a positive number, got {args.lr}")
    if not (0 <= args.momentum < 1):
        parser.error(f"--momentum must be in [0, 1), got {args.momentum}")
    if not (args.weight_decay >= 0 and math.isfinite(args.weight_decay)):
        parser.error(f"--weight-decay must be a number >= 0, got {args.weight_decay}")
    if args.epochs < 1:
        parser.error(f"--epochs must be at least 1, got {args.epochs}")
    if args.batch_size < 1:
        parser.error(f"--batch-size must be at least 1, got {args.batch_size}")
    if args.hidden < 1:
        parser.error(f"--hidden must be at least 1, got {args.hidden}")
    return args


def make_data() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Inputs and targets of the training and validation splits (the same in every run)."""
    rng = np.random.default_rng(DATA_SEED)
    w1 = rng.normal(size=(N_INPUTS, 16)) / math.sqrt(N_INPUTS) * 2.0
    w2 = rng.normal(size=(16, 1)) / 4.0
    x = rng.normal(size=(N_TRAIN + N_VAL, N_INPUTS))
    y = (np.tanh(x @ w1) @ w2)[:, 0]
    y = y / y.std() + NOISE_STD * rng.normal(size=len(y))
    return x[:N_TRAIN], y[:N_TRAIN], x[N_TRAIN:], y[N_TRAIN:]


class MLP:
    """tanh MLP, two hidden layers and a linear output, trained with SGD + momentum."""

    def __init__(self, n_in: int, hidden: int, rng: np.random.Generator) -> None:
        self.params = [
            rng.normal(size=(n_in, hidden)) / math.sqrt(n_in),
            np.zeros(hidden),
            rng.normal(size=(hidden, hidden)) / math.sqrt(hidden),
            np.zeros(hidden),
            rng.normal(size=(hidden, 1)) / math.sqrt(hidden),
            np.zeros(1),
        ]
        self.velocity = [np.zeros_like(p) for p in self.params]

    def predict(self, x: np.ndarray) -> np.ndarray:
        w1, b1, w2, b2, w3, b3 = self.params
        out: np.ndarray = (np.tanh(np.tanh(x @ w1 + b1) @ w2 + b2) @ w3 + b3)[:, 0]
        return out

    def step(
        self, x: np.ndarray, y: np.ndarray, lr: float, momentum: float, weight_decay: float
    ) -> float:
        """One SGD + momentum update on a minibatch; its MSE before the update."""
        w1, b1, w2, b2, w3, b3 = self.params
        h1 = np.tanh(x @ w1 + b1)
        h2 = np.tanh(h1 @ w2 + b2)
        err = (h2 @ w3 + b3)[:, 0] - y
        d_out = (2.0 / len(y)) * err[:, None]
        d_h2 = (d_out @ w3.T) * (1.0 - h2 * h2)
        d_h1 = (d_h2 @ w2.T) * (1.0 - h1 * h1)
        grads = [
            x.T @ d_h1 + weight_decay * w1,
            d_h1.sum(axis=0),
            h1.T @ d_h2 + weight_decay * w2,
            d_h2.sum(axis=0),
            h2.T @ d_out + weight_decay * w3,
            d_out.sum(axis=0),
        ]
        for i, g in enumerate(grads):
            self.velocity[i] = momentum * self.velocity[i] + g
            self.params[i] = self.params[i] - lr * self.velocity[i]
        return float(np.mean(err * err))


def fmt(value: float) -> str:
    """Five significant digits (``0.14209``, ``2.3466e+22``); inf and nan as Python prints them."""
    return f"{value:.5g}"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    x_train, y_train, x_val, y_val = make_data()
    rng = np.random.default_rng(args.seed)
    model = MLP(N_INPUTS, args.hidden, rng)
    val_loss = math.nan
    with np.errstate(all="ignore"):  # divergence shows as inf/nan, not as warnings
        for epoch in range(1, args.epochs + 1):
            order = rng.permutation(N_TRAIN)
            total = 0.0
            for start in range(0, N_TRAIN, args.batch_size):
                batch = order[start : start + args.batch_size]
                mse = model.step(
                    x_train[batch], y_train[batch], args.lr, args.momentum, args.weight_decay
                )
                total += mse * len(batch)
            val_loss = float(np.mean((model.predict(x_val) - y_val) ** 2))
            print(f"epoch {epoch} loss={fmt(total / N_TRAIN)} val_loss={fmt(val_loss)}", flush=True)
    print(f"final val_loss={fmt(val_loss)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
