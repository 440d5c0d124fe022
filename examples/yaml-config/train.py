#!/usr/bin/env python3
"""Fit a 1-D RBF-feature regression model with minibatch gradient descent.

Driven by a YAML config (see configs/base.yaml):

    python train.py --config configs/base.yaml

Writes into ``output.root`` (created if missing; a relative path is resolved
against the current working directory):

- ``metrics.jsonl``: one JSON object per epoch,
  ``{"epoch", "step", "train_loss", "val_loss", "val": {"mse", "mae"}}``;
- ``train.log``: human-readable lines ``epoch N train_loss=... val_loss=...``;
- ``weights.npz``: the fitted weights.

and prints the same per-epoch lines to stdout. ``train_loss`` is the training
objective (MSE plus the weighted penalties) averaged over the epoch's minibatches;
``val_loss`` is the plain MSE on a fixed validation set. A diverging run writes
``nan`` in the log (``null`` in the JSONL), stops early and still exits 0.
Runs on CPU with numpy only; the same config gives the same numbers.
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
from dataclasses import dataclass  # noqa: E402 (after the thread settings)
from pathlib import Path  # noqa: E402 (after the thread settings)
from typing import IO, Any  # noqa: E402 (after the thread settings)

import numpy as np  # noqa: E402 (after the thread settings)
import yaml  # noqa: E402 (after the thread settings)

DATA_SEED = 2024  # fixed: the data and the validation split never change between runs
N_VAL = 400
X_RANGE = (-1.0, 1.0)
OPTIMIZERS = ("sgd", "momentum", "adam")


class ConfigError(Exception):
    """A config value is missing, of the wrong type, or out of range."""


@dataclass(frozen=True)
class Config:
    output_root: Path
    n_samples: int
    noise: float
    n_centers: int
    width: float
    optimizer: str
    lr: float
    momentum: float
    l2: float
    smooth: float
    epochs: int
    batch_size: int
    seed: int


# Every allowed field: dotted path -> (type, check, description of the check).
SCHEMA: dict[str, tuple[type, Any, str]] = {
    "output.root": (str, lambda v: v.strip() != "", "a non-empty path"),
    "data.n_samples": (int, lambda v: v >= 2, "an integer >= 2"),
    "data.noise": (float, lambda v: v >= 0, "a number >= 0"),
    "model.n_centers": (int, lambda v: v >= 2, "an integer >= 2"),
    "model.width": (float, lambda v: v > 0, "a number > 0"),
    "optimizer.name": (str, lambda v: v in OPTIMIZERS, "one of " + ", ".join(OPTIMIZERS)),
    "optimizer.lr": (float, lambda v: v > 0, "a number > 0"),
    "optimizer.momentum": (float, lambda v: 0 <= v < 1, "a number in [0, 1)"),
    "loss.weights.l2": (float, lambda v: v >= 0, "a number >= 0"),
    "loss.weights.smooth": (float, lambda v: v >= 0, "a number >= 0"),
    "train.epochs": (int, lambda v: v >= 1, "an integer >= 1"),
    "train.batch_size": (int, lambda v: v >= 1, "an integer >= 1"),
    "train.seed": (int, lambda v: True, "an integer"),
}


def _flatten(node: Any, prefix: str, out: dict[str, Any], where: str) -> None:
    if not isinstance(node, dict):
        raise ConfigError(f"{where}: {prefix or 'top level'} must be a mapping")
    for key, value in node.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, dict):
            _flatten(value, path, out, where)
        else:
            out[path] = value


def _as_float(value: Any) -> float | None:
    """A finite float, or None. Accepts strings such as "1e-4": PyYAML (YAML 1.1)
    reads exponent notation without a dot as a string."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        number = float(value)
    elif isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            return None
    else:
        return None
    return number if math.isfinite(number) else None


def _coerce(path: str, value: Any, where: str) -> Any:
    kind, check, wanted = SCHEMA[path]
    result: Any
    if kind is float:
        result = _as_float(value)
    elif kind is int:
        result = value if isinstance(value, int) and not isinstance(value, bool) else None
    else:
        result = value if isinstance(value, str) else None
    if result is None or not check(result):
        raise ConfigError(f"{where}: {path} must be {wanted}, got {value!r}")
    return result


def load_config(path: Path) -> Config:
    """Read and validate the YAML config; errors name the file and the field."""
    where = str(path)
    try:
        with open(path, encoding="utf-8") as stream:
            raw = yaml.safe_load(stream)
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{where}: not a UTF-8 text file") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{where}: not valid YAML: {exc}") from None
    flat: dict[str, Any] = {}
    _flatten(raw if raw is not None else {}, "", flat, where)
    unknown = sorted(set(flat) - set(SCHEMA))
    if unknown:
        raise ConfigError(f"{where}: unknown field {unknown[0]}")
    missing = [p for p in SCHEMA if p not in flat]
    if missing:
        raise ConfigError(f"{where}: missing field {missing[0]}")
    v = {p: _coerce(p, flat[p], where) for p in SCHEMA}
    return Config(
        output_root=Path(v["output.root"]),
        n_samples=v["data.n_samples"],
        noise=v["data.noise"],
        n_centers=v["model.n_centers"],
        width=v["model.width"],
        optimizer=v["optimizer.name"],
        lr=v["optimizer.lr"],
        momentum=v["optimizer.momentum"],
        l2=v["loss.weights.l2"],
        smooth=v["loss.weights.smooth"],
        epochs=v["train.epochs"],
        batch_size=v["train.batch_size"],
        seed=v["train.seed"],
    )


def target(x: np.ndarray) -> np.ndarray:
    """The noise-free curve the model has to recover."""
    return np.sin(3.0 * x) + 0.5 * np.cos(7.0 * x)


def make_data(cfg: Config) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(DATA_SEED)
    x_val = rng.uniform(*X_RANGE, size=N_VAL)
    y_val = target(x_val) + cfg.noise * rng.normal(size=N_VAL)
    x_train = rng.uniform(*X_RANGE, size=cfg.n_samples)
    y_train = target(x_train) + cfg.noise * rng.normal(size=cfg.n_samples)
    return x_train, y_train, x_val, y_val


class RBFFeatures:
    """Gaussian bumps on an even grid slightly wider than the input range."""

    def __init__(self, n_centers: int, width: float) -> None:
        lo, hi = X_RANGE
        pad = 0.05 * (hi - lo)
        self.centers = np.linspace(lo - pad, hi + pad, n_centers)
        self.scale = (self.centers[1] - self.centers[0]) * width

    def __call__(self, x: np.ndarray) -> np.ndarray:
        out: np.ndarray = np.exp(-0.5 * ((x[:, None] - self.centers[None, :]) / self.scale) ** 2)
        return out


class Optimizer:
    """sgd, heavy-ball momentum, or Adam (momentum is beta1) over one flat vector."""

    def __init__(self, name: str, lr: float, momentum: float, size: int) -> None:
        self.name, self.lr, self.beta = name, lr, momentum
        self.m = np.zeros(size)
        self.v = np.zeros(size)
        self.t = 0

    def update(self, params: np.ndarray, grad: np.ndarray) -> np.ndarray:
        self.t += 1
        if self.name == "sgd":
            return params - self.lr * grad
        if self.name == "momentum":
            self.m = self.beta * self.m + grad
            return params - self.lr * self.m
        self.m = self.beta * self.m + (1.0 - self.beta) * grad
        self.v = 0.999 * self.v + 0.001 * grad * grad
        m_hat = self.m / (1.0 - self.beta**self.t) if self.beta > 0 else self.m
        v_hat = self.v / (1.0 - 0.999**self.t)
        return params - self.lr * m_hat / (np.sqrt(v_hat) + 1e-8)


def objective_and_grad(
    params: np.ndarray, feats: np.ndarray, y: np.ndarray, l2: float, smooth: float
) -> tuple[float, np.ndarray]:
    """MSE + l2 * |w|^2 + smooth * sum((w[i+1] - w[i])^2); the bias is not penalised."""
    w, bias = params[:-1], params[-1]
    err = feats @ w + bias - y
    diff = np.diff(w)
    value = float(np.mean(err * err) + l2 * (w @ w) + smooth * (diff @ diff))
    grad_w = (2.0 / len(y)) * (feats.T @ err) + 2.0 * l2 * w
    grad_w[:-1] -= 2.0 * smooth * diff
    grad_w[1:] += 2.0 * smooth * diff
    return value, np.append(grad_w, 2.0 * np.mean(err))


def json_number(value: float) -> float | None:
    return value if math.isfinite(value) else None


def fmt(value: float) -> str:
    """Five decimals; any non-finite value (a diverged run) prints as nan."""
    return f"{value:.5f}" if math.isfinite(value) else "nan"


def emit(line: str, log: IO[str]) -> None:
    print(line, flush=True)
    log.write(line + "\n")
    log.flush()


def train(cfg: Config) -> float:
    """Train, write the output files, and return the final validation MSE."""
    x_train, y_train, x_val, y_val = make_data(cfg)
    features = RBFFeatures(cfg.n_centers, cfg.width)
    f_train, f_val = features(x_train), features(x_val)

    rng = np.random.default_rng(cfg.seed)
    params = np.append(0.1 * rng.normal(size=cfg.n_centers), 0.0)
    opt = Optimizer(cfg.optimizer, cfg.lr, cfg.momentum, params.size)

    out = cfg.output_root.expanduser().resolve()
    out.mkdir(parents=True, exist_ok=True)
    val_mse = math.nan
    with (
        open(out / "metrics.jsonl", "w", encoding="utf-8") as jsonl,
        open(out / "train.log", "w", encoding="utf-8") as log,
        np.errstate(all="ignore"),  # divergence is reported as nan, not as warnings
    ):
        log.write(
            f"# rbf regression: n_samples={cfg.n_samples} n_centers={cfg.n_centers} "
            f"optimizer={cfg.optimizer} lr={cfg.lr:g} momentum={cfg.momentum:g} "
            f"l2={cfg.l2:g} smooth={cfg.smooth:g} epochs={cfg.epochs} "
            f"batch_size={cfg.batch_size} seed={cfg.seed}\n"
        )
        for epoch in range(1, cfg.epochs + 1):
            order = rng.permutation(cfg.n_samples)
            total = 0.0
            for start in range(0, cfg.n_samples, cfg.batch_size):
                batch = order[start : start + cfg.batch_size]
                value, grad = objective_and_grad(
                    params, f_train[batch], y_train[batch], cfg.l2, cfg.smooth
                )
                total += value * len(batch)
                params = opt.update(params, grad)
            train_loss = total / cfg.n_samples
            err = f_val @ params[:-1] + params[-1] - y_val
            val_mse = float(np.mean(err * err))
            val_mae = float(np.mean(np.abs(err)))
            record = {
                "epoch": epoch,
                "step": opt.t,
                "train_loss": json_number(train_loss),
                "val_loss": json_number(val_mse),
                "val": {"mse": json_number(val_mse), "mae": json_number(val_mae)},
            }
            jsonl.write(json.dumps(record) + "\n")
            jsonl.flush()
            emit(f"epoch {epoch} train_loss={fmt(train_loss)} val_loss={fmt(val_mse)}", log)
            if not (math.isfinite(train_loss) and math.isfinite(val_mse)):
                emit("training diverged; stopping early", log)
                break
        emit(f"final val_loss={fmt(val_mse)}", log)
    w, bias = params[:-1], params[-1:]
    np.savez(out / "weights.npz", centers=features.centers, w=w, bias=bias)
    return val_mse


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, required=True, help="YAML config file")
    args = parser.parse_args(argv)
    try:
        cfg = load_config(args.config)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        train(cfg)
    except OSError as exc:
        print(f"error: cannot write to {cfg.output_root}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
