"""Logistic regression printing Keras-style epoch lines (numpy only)."""

import argparse

import numpy as np

p = argparse.ArgumentParser()
p.add_argument("--epochs", type=int, default=3)
p.add_argument("--learning-rate", type=float, default=0.1)
args = p.parse_args()
rng = np.random.default_rng(0)
x = rng.normal(size=(400, 5))
y = (x @ np.arange(1, 6) + rng.normal(size=400) > 0).astype(float)
xt, yt, xv, yv = x[:300], y[:300], x[300:], y[300:]
w = np.zeros(5)


def evaluate(xs, ys):
    prob = 1 / (1 + np.exp(-(xs @ w)))
    loss = -np.mean(ys * np.log(prob + 1e-9) + (1 - ys) * np.log(1 - prob + 1e-9))
    return loss, np.mean((prob > 0.5) == ys)


for epoch in range(args.epochs):
    print(f"Epoch {epoch + 1}/{args.epochs}")
    prob = 1 / (1 + np.exp(-(xt @ w)))
    w -= args.learning_rate * xt.T @ (prob - yt) / len(yt)
    loss, acc = evaluate(xt, yt)
    val_loss, val_acc = evaluate(xv, yv)
    print(
        f"10/10 - 0s - loss: {loss:.4f} - accuracy: {acc:.4f} - val_loss: {val_loss:.4f}"
        f" - val_accuracy: {val_acc:.4f}"
    )
