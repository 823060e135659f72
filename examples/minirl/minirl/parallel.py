"""Data-parallel training backends, simulated rank by rank on one CPU.

Each "GPU" rank computes gradients on its slice of the batch; the backends differ the way the
real ones do in where the optimizer state lives:
  megatron: parameters replicated, gradients all-reduced, one optimizer step on the full tensors;
  fsdp:     parameters and Adam state sharded, gathered for the forward pass, gradients
            reduce-scattered so each rank updates only its own shard.
Both compute the same update, so a test can switch backends and expect the same loss curve.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from minirl.model import Params

GradFn = Callable[[Params, np.ndarray, float], tuple[float, Params]]
BACKENDS = ("megatron", "fsdp")


class Adam:
    """Adam over a dict of arrays (or a list of shards, which is a dict keyed by index)."""

    def __init__(self, lr: float, beta1: float = 0.9, beta2: float = 0.99, eps: float = 1e-8):
        self.lr, self.beta1, self.beta2, self.eps = lr, beta1, beta2, eps
        self.m: dict = {}
        self.v: dict = {}
        self.t = 0

    def update(self, params: dict, grads: dict) -> None:
        self.t += 1
        c1, c2 = 1 - self.beta1**self.t, 1 - self.beta2**self.t
        for key, g in grads.items():
            m = self.m[key] = self.beta1 * self.m.get(key, 0.0) + (1 - self.beta1) * g
            v = self.v[key] = self.beta2 * self.v.get(key, 0.0) + (1 - self.beta2) * g * g
            params[key] = (params[key] - self.lr * (m / c1) / (np.sqrt(v / c2) + self.eps)).astype(np.float32)


class DataParallel:
    """Holds the trainable parameters of `world` ranks and applies one step over a global batch."""

    def __init__(self, params: Params, trainable: list[str], backend: str, world: int, lr: float):
        if backend not in BACKENDS:
            raise ValueError(f"backend {backend!r} is unknown; use one of {BACKENDS}")
        if world < 1:
            raise ValueError(f"world size must be >= 1, got {world}")
        self.backend, self.world = backend, world
        self.frozen = {k: v for k, v in params.items() if k not in trainable}
        self.names = sorted(trainable)
        self.shapes = {k: params[k].shape for k in self.names}
        self.adam = Adam(lr)
        if backend == "megatron":
            self.replicated = {k: params[k].copy() for k in self.names}
        else:
            flat = np.concatenate([params[k].reshape(-1) for k in self.names])
            self.shards = dict(enumerate(np.array_split(flat, world)))

    @property
    def params(self) -> Params:
        """The full parameters (for fsdp, an all-gather of every rank's shard)."""
        if self.backend == "megatron":
            return {**self.frozen, **self.replicated}
        flat = np.concatenate([self.shards[r] for r in range(self.world)])
        out, start = dict(self.frozen), 0
        for k in self.names:
            size = int(np.prod(self.shapes[k]))
            out[k] = flat[start : start + size].reshape(self.shapes[k])
            start += size
        return out

    def step(self, grad_fn: GradFn, batch: np.ndarray, denom: float, grad_accum: int = 1) -> float:
        """Split `batch` across ranks (and micro-batches), sum gradients, update; returns the loss."""
        full = self.params
        total_loss = 0.0
        summed = {k: np.zeros(self.shapes[k], np.float32) for k in self.names}
        for rank_batch in np.array_split(batch, self.world):
            for micro in np.array_split(rank_batch, grad_accum):
                if len(micro) == 0:
                    continue
                loss, grads = grad_fn(full, micro, denom)
                total_loss += loss
                for k in self.names:
                    summed[k] += grads[k]
        if self.backend == "megatron":
            self.adam.update(self.replicated, summed)
        else:
            flat = np.concatenate([summed[k].reshape(-1) for k in self.names])
            self.adam.update(self.shards, dict(enumerate(np.array_split(flat, self.world))))
        return total_loss
