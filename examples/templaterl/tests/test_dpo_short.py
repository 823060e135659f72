"""DPO-style preference fit with the runner's default GPU count (no NUM_GPUS here, so 8).

A linear reward model learns which of two responses is preferred; it must rank 95% of pairs right.
"""

import numpy as np
from templaterl.fit import DEFAULT_NUM_GPUS, flag, require, world_size

DIM = 160
SEED = 3
BETA = 1.0


def prepare():
    print(f"prepare: preference pairs, dim {DIM}, seed {SEED}")


def _pairs(n: int, rng: np.random.Generator, truth: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    a, b = rng.standard_normal((n, DIM)), rng.standard_normal((n, DIM))
    better = (a @ truth > b @ truth)[:, None]
    return np.where(better, a, b), np.where(better, b, a)  # (chosen, rejected)


def execute():
    world = world_size(DEFAULT_NUM_GPUS)
    rng = np.random.default_rng(SEED)
    truth = rng.standard_normal(DIM)
    chosen, rejected = _pairs(12000, rng, truth)
    diff = chosen - rejected
    w = np.zeros(DIM)
    for _ in range(300):
        grads = []
        for d in np.array_split(diff, world):  # one slice per rank, averaged like an all-reduce
            p = 1 / (1 + np.exp(-BETA * d @ w))
            grads.append(-BETA * d.T @ (1 - p) / len(d))
        w -= 0.5 * np.mean(grads, axis=0)
    accuracy = float(np.mean(diff @ w > 0))
    require(accuracy > 0.95, f"reward model ranks {accuracy:.1%} of training pairs right (> 95%)")
    if flag("ENABLE_EVAL", "1"):
        held_chosen, held_rejected = _pairs(5000, rng, truth)
        held = float(np.mean((held_chosen - held_rejected) @ w > 0))
        require(held > 0.9, f"held-out preference accuracy {held:.1%} (> 90%)")


if __name__ == "__main__":
    prepare()
    execute()
