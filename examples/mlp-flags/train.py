#!/usr/bin/env python3
"""Train a one-hidden-layer MLP regressor with Adam on a small noisy 2-D dataset.

Driven entirely by command-line flags. Prints one line per epoch,

    epoch=3 loss=0.41235 val_loss=0.45512

and a last line ``final val_loss=...``. ``loss`` is the mean training MSE over the
epoch's minibatches, ``val_loss`` the MSE on the validation split after the epoch.
If training diverges the line shows ``nan``, training stops and the exit code is 0.

Runs on CPU with numpy only; the same --seed gives the same numbers.
"""

from __future__ import annotations

import os

# One BLAS thread: faster for these tiny matrices and bit-for-bit repeatable.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402 (after the thread settings)
import json  # noqa: E402 (after the thread settings)
import math  # noqa: E402 (after the thread settings)
import sys  # noqa: E402 (after the thread settings)
from pathlib import Path  # noqa: E402 (after the thread settings)

import numpy as np  # noqa: E402 (after the thread settings)

HERE = Path(__file__).resolve().parent

ADAM_BETA1 = 0.9
ADAM_BETA2 = 0.999
ADAM_EPS = 1e-8


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lr", type=float, default=1e-3, help="Adam learning rate (default 1e-3)")
    parser.add_argument(
        "--epochs", type=int, default=200, help="passes over the data (default 200)"
    )
    parser.add_argument("--batch-size", type=int, default=16, help="minibatch size (default 16)")
    parser.add_argument(
        "--weight-decay",
        type=float,
        default=1e-5,
        help="L2 weight decay on the weight matrices, added to their gradients as in "
        "torch.optim.Adam (default 1e-5)",
    )
    parser.add_argument("--hidden", type=int, default=64, help="hidden units (default 64)")
    parser.add_argument("--seed", type=int, default=0, help="init and shuffling seed (default 0)")
    parser.add_argument(
        "--data-root",
        type=Path,
        default=HERE / "data",
        help="folder with train.csv and val.csv (default: data/ next to this script)",
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="write weights.npz and metrics.json here"
    )
    args = parser.parse_args(argv)
    if not (args.lr > 0 and math.isfinite(args.lr)):
        parser.error(f"--lr must be a positive number, got {args.lr}")
    if args.epochs < 1:
        parser.error(f"--epochs must be at least 1, got {args.epochs}")
    if args.batch_size < 1:
        parser.error(f"--batch-size must be at least 1, got {args.batch_size}")
    if not (args.weight_decay >= 0 and math.isfinite(args.weight_decay)):
        parser.error(f"--weight-decay must be a number >= 0, got {args.weight_decay}")
    if args.hidden < 1:
        parser.error(f"--hidden must be at least 1, got {args.hidden}")
    return args


def load_split(root: Path, name: str) -> tuple[np.ndarray, np.ndarray]:
    """Read ``root/name`` (header x1,x2,y) into inputs and targets."""
    path = root / name
    if not path.is_file():
        sys.exit(f"error: {path} not found (set --data-root to the folder with {name})")
    try:
        rows = np.loadtxt(path, delimiter=",", skiprows=1, ndmin=2)
    except OSError as exc:
        sys.exit(f"error: cannot read {path}: {exc.strerror or exc}")
    except ValueError as exc:
        sys.exit(f"error: {path} is not a numeric CSV with header x1,x2,y: {exc}")
    if rows.shape[1] != 3 or rows.shape[0] == 0:
        sys.exit(f"error: {path} must have 3 columns (x1,x2,y) and at least one row")
    return rows[:, :2], rows[:, 2]


class MLP:
    """tanh MLP with one hidden layer and a linear output, trained with Adam."""

    def __init__(self, n_in: int, hidden: int, rng: np.random.Generator) -> None:
        self.params = [
            rng.normal(size=(n_in, hidden)) / math.sqrt(n_in),  # W1
            np.zeros(hidden),  # b1
            rng.normal(size=(hidden, 1)) / math.sqrt(hidden),  # W2
            np.zeros(1),  # b2
        ]
        self.m = [np.zeros_like(p) for p in self.params]
        self.v = [np.zeros_like(p) for p in self.params]
        self.t = 0

    def predict(self, x: np.ndarray) -> np.ndarray:
        w1, b1, w2, b2 = self.params
        out: np.ndarray = (np.tanh(x @ w1 + b1) @ w2 + b2)[:, 0]
        return out

    def step(self, x: np.ndarray, y: np.ndarray, lr: float, weight_decay: float) -> float:
        """One Adam update on a minibatch; returns the minibatch MSE before the update."""
        w1, b1, w2, b2 = self.params
        h = np.tanh(x @ w1 + b1)
        err = (h @ w2 + b2)[:, 0] - y
        d_out = (2.0 / len(y)) * err[:, None]
        d_hidden = (d_out @ w2.T) * (1.0 - h * h)
        grads = [
            x.T @ d_hidden + weight_decay * w1,
            d_hidden.sum(axis=0),
            h.T @ d_out + weight_decay * w2,
            d_out.sum(axis=0),
        ]
        self.t += 1
        bias1 = 1.0 - ADAM_BETA1**self.t
        bias2 = 1.0 - ADAM_BETA2**self.t
        for i, g in enumerate(grads):
            self.m[i] = ADAM_BETA1 * self.m[i] + (1.0 - ADAM_BETA1) * g
            self.v[i] = ADAM_BETA2 * self.v[i] + (1.0 - ADAM_BETA2) * g * g
            self.params[i] = self.params[i] - lr * (self.m[i] / bias1) / (
                np.sqrt(self.v[i] / bias2) + ADAM_EPS
            )
        return float(np.mean(err * err))


def finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None


def fmt(value: float) -> str:
    """Five decimals; any non-finite value (a diverged run) prints as nan."""
    return f"{value:.5f}" if math.isfinite(value) else "nan"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    x_train, y_train = load_split(args.data_root, "train.csv")
    x_val, y_val = load_split(args.data_root, "val.csv")

    rng = np.random.default_rng(args.seed)
    model = MLP(x_train.shape[1], args.hidden, rng)
    n = len(y_train)
    history: list[dict[str, float | int | None]] = []
    val_loss = math.nan
    train_loss = math.nan

    with np.errstate(all="ignore"):  # divergence is reported as nan, not as warnings
        for epoch in range(1, args.epochs + 1):
            order = rng.permutation(n)
            total = 0.0
            for start in range(0, n, args.batch_size):
                batch = order[start : start + args.batch_size]
                mse = model.step(x_train[batch], y_train[batch], args.lr, args.weight_decay)
                total += mse * len(batch)
            train_loss = total / n
            val_loss = float(np.mean((model.predict(x_val) - y_val) ** 2))
            print(f"epoch={epoch} loss={fmt(train_loss)} val_loss={fmt(val_loss)}", flush=True)
            history.append(
                {
                    "epoch": epoch,
                    "loss": finite_or_none(train_loss),
                    "val_loss": finite_or_none(val_loss),
                }
            )
            if not (math.isfinite(train_loss) and math.isfinite(val_loss)):
                print("training diverged; stopping early", file=sys.stderr, flush=True)
                break

    print(f"final val_loss={fmt(val_loss)}", flush=True)

    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        w1, b1, w2, b2 = model.params
        np.savez(args.out / "weights.npz", w1=w1, b1=b1, w2=w2, b2=b2)
        metrics = {
            "final": {"loss": finite_or_none(train_loss), "val_loss": finite_or_none(val_loss)},
            "history": history,
            "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        }
        (args.out / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
