"""Checkpoint and resume on 2 GPUs: 150 steps, save, load, 150 more equals 300 straight steps."""

import tempfile
from pathlib import Path

import numpy as np
from templaterl.fit import Trainer, require, synthetic, world_size

NUM_GPUS = 2
DIM = 160
SEED = 7


def prepare():
    print(f"prepare: resume check, dim {DIM}, seed {SEED}")


def execute():
    world = world_size(NUM_GPUS)
    x, y, _ = synthetic(20000, DIM, SEED)
    straight = Trainer(DIM, world)
    straight.train(x, y, steps=150, batch=2048, seed=SEED)
    straight.train(x, y, steps=150, batch=2048, seed=SEED)
    first = Trainer(DIM, world)
    first.train(x, y, steps=150, batch=2048, seed=SEED)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "iter_0000150.npz"
        np.savez(path, **first.state())
        resumed = Trainer(DIM, world)
        with np.load(path) as state:
            resumed.load(dict(state))
    resumed.train(x, y, steps=150, batch=2048, seed=SEED)
    require(resumed.step == straight.step == 300, f"resumed at step {resumed.step}")
    diff = float(np.max(np.abs(resumed.w - straight.w)))
    require(diff == 0.0, f"resumed weights equal the straight run's (max diff {diff:.3g})")


if __name__ == "__main__":
    prepare()
    execute()
