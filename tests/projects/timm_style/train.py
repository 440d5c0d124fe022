"""An image-classifier-style trainer that writes a timm-like summary.csv per epoch
(numpy only; a linear softmax model on synthetic 'images')."""

import argparse
import csv
import os

import numpy as np

p = argparse.ArgumentParser()
p.add_argument("--output", default="", help="path to output folder (default: ./output/train)")
p.add_argument("--experiment", default="run", help="name of the train experiment")
p.add_argument("--epochs", type=int, default=3)
p.add_argument("--lr", type=float, default=0.5)
p.add_argument("--weight-decay", type=float, default=2e-5)
args = p.parse_args()

rng = np.random.default_rng(0)
centers = rng.normal(size=(4, 16))
labels = rng.integers(0, 4, 600)
x = centers[labels] + rng.normal(scale=2.0, size=(600, 16))
xt, yt, xv, yv = x[:500], labels[:500], x[500:], labels[500:]
w = np.zeros((16, 4))


def evaluate(xs, ys):
    logits = xs @ w
    logits -= logits.max(1, keepdims=True)
    prob = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    loss = float(-np.log(prob[np.arange(len(ys)), ys] + 1e-9).mean())
    return loss, float((prob.argmax(1) == ys).mean() * 100), prob


output_dir = os.path.join(args.output or "./output/train", args.experiment)
os.makedirs(output_dir, exist_ok=True)
for epoch in range(args.epochs):
    _, _, prob = evaluate(xt, yt)
    prob[np.arange(len(yt)), yt] -= 1
    w -= args.lr * (xt.T @ prob / len(yt) + args.weight_decay * w)
    train_loss, _, _ = evaluate(xt, yt)
    eval_loss, eval_top1, _ = evaluate(xv, yv)
    row = {"epoch": epoch, "train_loss": train_loss, "eval_loss": eval_loss, "eval_top1": eval_top1}
    with open(os.path.join(output_dir, "summary.csv"), mode="a") as cf:
        dw = csv.DictWriter(cf, fieldnames=row.keys())
        if epoch == 0:
            dw.writeheader()
        dw.writerow(row)
print(f"*** Best metric: {eval_top1} (epoch {epoch})")
