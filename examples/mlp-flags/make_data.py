#!/usr/bin/env python3
"""Regenerate data/train.csv and data/val.csv for the mlp-flags example.

The data is a noisy 2-D regression problem:

    y = sin(2 * x1) + 0.7 * cos(3 * x2) + 0.5 * x1 * x2 + noise,   x ~ U[-1.5, 1.5]^2

with Gaussian label noise (std 0.4) on both splits. The training split is small
(100 rows) so an MLP overfits it and weight decay has something to do. The files
are committed; this script only documents how they were made. Output is the same
for the same --seed.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def target(x: np.ndarray) -> np.ndarray:
    """The noise-free function the model has to learn."""
    y: np.ndarray = np.sin(2.0 * x[:, 0]) + 0.7 * np.cos(3.0 * x[:, 1]) + 0.5 * x[:, 0] * x[:, 1]
    return y


def make_split(n: int, rng: np.random.Generator, noise: float) -> np.ndarray:
    """Return an (n, 3) array of x1, x2, y."""
    x = rng.uniform(-1.5, 1.5, size=(n, 2))
    y = target(x) + noise * rng.normal(size=n)
    return np.column_stack([x, y])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1234, help="data seed (default 1234)")
    parser.add_argument("--n-train", type=int, default=100)
    parser.add_argument("--n-val", type=int, default=800)
    parser.add_argument("--noise", type=float, default=0.4)
    parser.add_argument("--out", type=Path, default=HERE / "data", help="output folder")
    args = parser.parse_args()

    rng = np.random.default_rng(args.seed)
    train = make_split(args.n_train, rng, args.noise)
    val = make_split(args.n_val, rng, args.noise)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, rows in (("train.csv", train), ("val.csv", val)):
        path = args.out / name
        np.savetxt(path, rows, delimiter=",", fmt="%.6f", header="x1,x2,y", comments="")
        print(f"wrote {path} ({len(rows)} rows)")


if __name__ == "__main__":
    main()
