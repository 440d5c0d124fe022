"""A tiny attention-shaped model in numpy: token embeddings split into heads, averaged
over the context, projected to the vocabulary. Only the output layer learns."""

from dataclasses import dataclass

import numpy as np


@dataclass
class GPTConfig:
    vocab_size: int = 65
    block_size: int = 16
    n_layer: int = 1
    n_head: int = 4
    n_embd: int = 32
    dropout: float = 0.0
    bias: bool = False


class TinyGPT:
    def __init__(self, config, rng):
        assert config.n_embd % config.n_head == 0
        self.config = config
        self.head_dim = config.n_embd // config.n_head
        self.wte = rng.normal(0, 0.5, (config.vocab_size, config.n_embd))
        self.head = np.zeros((config.n_embd, config.vocab_size))

    def features(self, x):
        c = self.config
        emb = self.wte[x]  # (B, T, C)
        heads = emb.reshape(*x.shape, c.n_head, self.head_dim)
        mixed = np.cumsum(heads, axis=1) / np.arange(1, x.shape[1] + 1)[None, :, None, None]
        return mixed.reshape(*x.shape, c.n_embd)

    def loss(self, x, y):
        h = self.features(x)
        logits = h @ self.head
        logits -= logits.max(-1, keepdims=True)
        p = np.exp(logits)
        p /= p.sum(-1, keepdims=True)
        nll = -np.log(np.take_along_axis(p, y[..., None], -1) + 1e-12).mean()
        return float(nll), h, p

    def step(self, x, y, lr, weight_decay, grad_clip):
        value, h, p = self.loss(x, y)
        p[np.arange(y.shape[0])[:, None], np.arange(y.shape[1])[None, :], y] -= 1.0
        grad = h.reshape(-1, h.shape[-1]).T @ p.reshape(-1, p.shape[-1]) / y.size
        norm = float(np.linalg.norm(grad))
        if grad_clip > 0 and norm > grad_clip:
            grad *= grad_clip / norm
        self.head -= lr * (grad + weight_decay * self.head)
        return value
