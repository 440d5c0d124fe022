"""A character-level model driven by argparse flags (numpy only, tiny).

Prints one line per epoch, ``epoch 3 | train loss 2.1234 | val loss 2.2345``.
"""

import argparse
import sys
from pathlib import Path

import numpy as np


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", default="data", help="folder with input.txt")
    p.add_argument("--out-dir", default=None, help="write weights.npz here")
    p.add_argument("--epochs", type=int, default=4, help="passes over the data")
    p.add_argument("--lr", type=float, default=0.5, help="learning rate")
    p.add_argument("--weight-decay", type=float, default=1e-4)
    p.add_argument("--n-embd", type=int, default=32, help="embedding width")
    p.add_argument("--n-head", type=int, default=4, help="attention heads")
    p.add_argument("--context", type=int, default=8, help="characters of context")
    p.add_argument("--sample-only", action="store_true", help="just sample from the model and quit")
    p.add_argument("--eval-only", action="store_true", help="evaluate the initial model and quit")
    p.add_argument("--resume", action="store_true", help="start from --out-dir/weights.npz")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--compile", action="store_true", help="compile the model")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-interval", type=int, default=50)
    p.add_argument("--num-workers", type=int, default=0)
    p.add_argument("--mode", choices=["train", "eval", "sample"], default="train")
    return p.parse_args()


def main():
    args = parse_args()
    if args.n_embd % args.n_head != 0:
        raise ValueError(f"--n-embd {args.n_embd} is not a multiple of --n-head {args.n_head}")
    text = (Path(args.data_dir) / "input.txt").read_text()
    chars = sorted(set(text))
    ids = np.array([chars.index(c) for c in text])
    split = int(0.9 * len(ids))
    rng = np.random.default_rng(args.seed)
    emb = rng.normal(0, 0.5, (len(chars), args.n_embd))
    head = np.zeros((args.n_embd, len(chars)))
    head_dim = args.n_embd // args.n_head

    def feats(data):
        x = np.stack([data[i : i + args.context] for i in range(len(data) - args.context)])
        h = emb[x].reshape(len(x), args.context, args.n_head, head_dim).mean(1)
        return h.reshape(len(x), args.n_embd), data[args.context :]

    def loss(h, y, w):
        logits = h @ w
        logits -= logits.max(1, keepdims=True)
        p = np.exp(logits)
        p /= p.sum(1, keepdims=True)
        return float(-np.log(p[np.arange(len(y)), y] + 1e-12).mean()), p

    xt, yt = feats(ids[:split])
    xv, yv = feats(ids[split:])
    if args.sample_only or args.mode == "sample":
        print("".join(chars[i] for i in rng.integers(0, len(chars), 40)))
        return 0
    for epoch in range(1, args.epochs + 1):
        if not args.eval_only:
            for start in range(0, len(yt), 256):
                h, y = xt[start : start + 256], yt[start : start + 256]
                _, p = loss(h, y, head)
                p[np.arange(len(y)), y] -= 1
                head -= args.lr * (h.T @ p / len(y) + args.weight_decay * head)
        train_loss, _ = loss(xt, yt, head)
        val_loss, _ = loss(xv, yv, head)
        print(f"epoch {epoch} | train loss {train_loss:.4f} | val loss {val_loss:.4f}", flush=True)
        if args.eval_only:
            break
    if args.out_dir:
        Path(args.out_dir).mkdir(parents=True, exist_ok=True)
        np.savez(Path(args.out_dir) / "weights.npz", emb=emb, head=head)
    return 0


if __name__ == "__main__":
    sys.exit(main())
