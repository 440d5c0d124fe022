"""A loop that logs like the Hugging Face Trainer: one dict per logging step and per
evaluation, then log_metrics-style lines (numpy only)."""

import argparse

import numpy as np

p = argparse.ArgumentParser()
p.add_argument("--num_train_epochs", type=int, default=2)
p.add_argument("--learning_rate", type=float, default=5e-2)
p.add_argument("--per_device_train_batch_size", type=int, default=16)
args = p.parse_args()
rng = np.random.default_rng(0)
x = rng.normal(size=(256, 4))
y = x @ np.array([1.0, -2.0, 0.5, 0.0]) + 0.1 * rng.normal(size=256)
w = np.zeros(4)
for epoch in range(1, args.num_train_epochs + 1):
    for start in range(0, 192, args.per_device_train_batch_size):
        xb, yb = x[start : start + args.per_device_train_batch_size], y[start : start + 16]
        w -= args.learning_rate * xb.T @ (xb @ w - yb[: len(xb)]) / len(xb)
    loss = float(np.mean((x[:192] @ w - y[:192]) ** 2))
    print({"loss": round(loss, 4), "learning_rate": args.learning_rate, "epoch": float(epoch)})
    eval_loss = float(np.mean((x[192:] @ w - y[192:]) ** 2))
    metrics = {"eval_loss": round(eval_loss, 4), "eval_runtime": 0.01, "epoch": float(epoch)}
    print(metrics)
print("***** eval metrics *****")
for key, value in sorted(metrics.items()):
    print(f"  {key:<16} = {value:>8}")
