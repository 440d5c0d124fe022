"""A nanoGPT-style trainer: module globals, overridden by a config module given as a
positional argument and by --key=value (configurator.py). Numpy only, tiny."""

import sys

import numpy as np

from model import GPTConfig, TinyGPT

# I/O
out_dir = "out"
eval_interval = 10
log_interval = 5
eval_iters = 4
eval_only = False  # if True, script exits right after the first eval
always_save_checkpoint = False
init_from = "scratch"  # 'scratch' or 'resume'
wandb_log = False
wandb_project = "tiny"
# data
dataset = "tiny"
batch_size = 8
block_size = 16
# model
n_layer = 2
n_head = 6
n_embd = 384
dropout = 0.0
bias = False
# optimizer
learning_rate = 6e-4  # max learning rate
max_iters = 600000  # total number of training iterations
weight_decay = 1e-1
beta1 = 0.9
beta2 = 0.95
grad_clip = 1.0  # clip gradients at this value, or disable if == 0.0
# learning rate decay settings
decay_lr = True
warmup_iters = 2000
lr_decay_iters = 600000  # should be ~= max_iters per Chinchilla
min_lr = 6e-5
# system
device = "cuda"
dtype = "bfloat16"
compile = True
seed = 1337
exec(open("configurator.py").read())  # overrides from command line or config file

if device != "cpu":
    sys.exit(f"device {device!r} is not available here; pass --device=cpu")
text = open(f"data/{dataset}/input.txt").read()
chars = sorted(set(text))
ids = np.array([chars.index(c) for c in text])
split = int(0.9 * len(ids))
train_ids, val_ids = ids[:split], ids[split:]
rng = np.random.default_rng(seed)
model = TinyGPT(GPTConfig(vocab_size=len(chars), n_layer=n_layer, n_head=n_head, n_embd=n_embd,
                          block_size=block_size, dropout=dropout, bias=bias), rng)


def get_batch(data):
    ix = rng.integers(0, len(data) - block_size - 1, batch_size)
    x = np.stack([data[i : i + block_size] for i in ix])
    y = np.stack([data[i + 1 : i + 1 + block_size] for i in ix])
    return x, y


def estimate_loss():
    out = {}
    for name, data in (("train", train_ids), ("val", val_ids)):
        out[name] = float(np.mean([model.loss(*get_batch(data))[0] for _ in range(eval_iters)]))
    return out


def get_lr(it):
    if it < warmup_iters:
        return learning_rate * (it + 1) / (warmup_iters + 1)
    if it > lr_decay_iters or not decay_lr:
        return min_lr if decay_lr else learning_rate
    ratio = (it - warmup_iters) / max(1, lr_decay_iters - warmup_iters)
    return min_lr + 0.5 * (1.0 + np.cos(np.pi * ratio)) * (learning_rate - min_lr)


best_val_loss = 1e9
for iter_num in range(max_iters + 1):
    if iter_num % eval_interval == 0:
        losses = estimate_loss()
        print(f"step {iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
        if losses["val"] < best_val_loss:
            best_val_loss = losses["val"]
        if eval_only:
            break
    if iter_num == max_iters:
        break
    lossf = model.step(*get_batch(train_ids), get_lr(iter_num), weight_decay, grad_clip)
    if iter_num % log_interval == 0:
        print(f"iter {iter_num}: loss {lossf:.4f}")
