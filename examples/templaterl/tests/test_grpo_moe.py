"""GRPO-style run of a two-expert model on 8 GPUs; the workflow runs it once per optimizer (test_args).

Each expert is a linear model that owns the inputs its router sends it; both must fit their half.
"""

import argparse
import sys

import numpy as np
from templaterl.fit import Trainer, mse, print_curve, require, synthetic, world_size

NUM_GPUS = 8
DIM = 160
SEED = 23


def prepare():
    print(f"prepare: two experts, dim {DIM}, seed {SEED}")


def execute():
    parser = argparse.ArgumentParser(prog="test_grpo_moe.py")
    parser.add_argument("--optimizer", choices=("adam", "sgd"), default="adam")
    parser.add_argument("--lr", type=float, default=0.05)
    args = parser.parse_args(sys.argv[1:])
    world = world_size(NUM_GPUS)
    x, y_a, _ = synthetic(20000, DIM, SEED)
    w_b = np.random.default_rng(SEED + 1).standard_normal(DIM)  # the second expert's true weights
    y_b = x @ w_b
    route = x[:, 0] > 0  # the router: sign of the first feature
    y = np.where(route, y_a, y_b)
    for name, rows in (("expert 0", route), ("expert 1", ~route)):
        trainer = Trainer(DIM, world, lr=args.lr, optimizer=args.optimizer)
        before = mse(x[rows], y[rows], trainer.w)
        curve = trainer.train(x[rows], y[rows], steps=300, batch=4096, seed=SEED)
        print_curve(f"{name} loss ({args.optimizer}, lr {args.lr})", curve)
        require(curve[-1] < before / 50, f"{name}: loss {before:.3g} -> {curve[-1]:.3g} (needs a 50x drop)")


if __name__ == "__main__":
    prepare()
    execute()
