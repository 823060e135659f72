"""Rollout with the trained weights on 2 GPUs; with USE_FP8_ROLLOUT=1 the rollout sees fp8 weights.

The rollout's predictions must stay close to training's either way, and fp8 must really change them.
"""

import numpy as np
from templaterl.fit import Trainer, flag, fp8, mse, require, synthetic, world_size

NUM_GPUS = 2
DIM = 160
SEED = 5


def prepare():
    print(f"prepare: rollout check, dim {DIM}, seed {SEED}")


def execute():
    world = world_size(NUM_GPUS)
    use_fp8 = flag("USE_FP8_ROLLOUT", "0")
    x, y, _ = synthetic(20000, DIM, SEED)
    trainer = Trainer(DIM, world, lr=0.05)
    trainer.train(x, y, steps=400, batch=4096, seed=SEED)
    rollout_w = fp8(trainer.w) if use_fp8 else trainer.w.copy()
    gap = float(np.max(np.abs(x @ rollout_w - x @ trainer.w)))
    scale = float(np.max(np.abs(y)))
    print(f"rollout weights: {'fp8' if use_fp8 else 'bf16'}, max logit gap {gap:.4g} of {scale:.4g}")
    require(gap < 0.05 * scale, "rollout predictions within 5% of training's")
    if use_fp8:
        require(gap > 0, "fp8 rollout weights differ from the trained ones")
        require(mse(x, y, rollout_w) < 0.5, f"fp8 rollout loss {mse(x, y, rollout_w):.3g} < 0.5")


if __name__ == "__main__":
    prepare()
    execute()
