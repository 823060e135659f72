"""Least-squares training with simulated data parallelism: the work every e2e test does.

Each "GPU" (rank) gets an equal slice of the batch; gradients are averaged across ranks like an
all-reduce, so the result does not depend on the world size beyond rounding.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field

import numpy as np

DEFAULT_NUM_GPUS = 8  # what the framework's runner gives a test that declares no NUM_GPUS


def world_size(num_gpus: int = DEFAULT_NUM_GPUS) -> int:
    """The ranks this test runs on; with ``CUDA_VISIBLE_DEVICES`` set it must match ``num_gpus``."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    if visible:
        got = len([d for d in visible.split(",") if d.strip()])
        if got != num_gpus:
            fail(f"test needs {num_gpus} GPUs but CUDA_VISIBLE_DEVICES gives {got} ({visible})")
    print(f"world size {num_gpus}", flush=True)
    return num_gpus


def flag(name: str, default: str = "0") -> bool:
    """An on/off switch the workflow sets as an environment variable ('1' or '0')."""
    value = os.environ.get(name, default)
    if value not in ("0", "1"):
        fail(f"{name}={value!r}: expected '0' or '1'")
    return value == "1"


def fail(message: str) -> None:
    print(f"FAILED: {message}", file=sys.stderr, flush=True)
    raise SystemExit(1)


def require(ok: bool, message: str) -> None:
    if not ok:
        fail(message)
    print(f"ok: {message}", flush=True)


def synthetic(n: int, d: int, seed: int, noise: float = 0.01) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(features, targets, true weights) of a noisy linear problem."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d))
    w = rng.standard_normal(d)
    return x, x @ w + noise * rng.standard_normal(n), w


@dataclass
class Trainer:
    """Gradient descent on mean squared error; ``optimizer`` is ``sgd`` or ``adam``."""

    dim: int
    world: int
    lr: float = 0.05
    optimizer: str = "adam"
    step: int = 0
    w: np.ndarray = field(init=False)
    m: np.ndarray = field(init=False)
    v: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        if self.optimizer not in ("sgd", "adam"):
            fail(f"unknown optimizer {self.optimizer!r}; use sgd or adam")
        self.w, self.m, self.v = np.zeros(self.dim), np.zeros(self.dim), np.zeros(self.dim)

    def grad(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Per-rank gradients of their batch slice, averaged (the all-reduce)."""
        shards = zip(np.array_split(x, self.world), np.array_split(y, self.world), strict=True)
        return np.mean([2 * xs.T @ (xs @ self.w - ys) / len(ys) for xs, ys in shards], axis=0)

    def update(self, x: np.ndarray, y: np.ndarray) -> None:
        g = self.grad(x, y)
        self.step += 1
        if self.optimizer == "sgd":
            self.w -= self.lr * g
            return
        self.m = 0.9 * self.m + 0.1 * g
        self.v = 0.999 * self.v + 0.001 * g * g
        m_hat, v_hat = self.m / (1 - 0.9**self.step), self.v / (1 - 0.999**self.step)
        self.w -= self.lr * m_hat / (np.sqrt(v_hat) + 1e-8)

    def train(self, x: np.ndarray, y: np.ndarray, steps: int, batch: int, seed: int) -> list[float]:
        """``steps`` minibatch updates; returns the full-data loss every 50 steps."""
        rng = np.random.default_rng(seed + self.step)
        curve = []
        for _ in range(steps):
            idx = rng.integers(0, len(y), batch)
            self.update(x[idx], y[idx])
            if self.step % 50 == 0:
                curve.append(mse(x, y, self.w))
        return curve

    def state(self) -> dict[str, np.ndarray]:
        return {"w": self.w, "m": self.m, "v": self.v, "step": np.array(self.step)}

    def load(self, state: dict[str, np.ndarray]) -> None:
        self.w, self.m, self.v = state["w"].copy(), state["m"].copy(), state["v"].copy()
        self.step = int(state["step"])


def mse(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> float:
    return float(np.mean((x @ w - y) ** 2))


def fp8(values: np.ndarray) -> np.ndarray:
    """Round to an e4m3-like grid (3 mantissa bits), as an fp8 rollout engine would see weights."""
    mantissa, exponent = np.frexp(values)
    return np.ldexp(np.round(mantissa * 16) / 16, exponent)


def print_curve(name: str, curve: list[float]) -> None:
    print(f"{name}: " + " ".join(f"{v:.4g}" for v in curve), flush=True)
