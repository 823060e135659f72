"""SFT of a dense linear model on 4 GPUs: training loss falls 100x; with ENABLE_EVAL, held-out loss too."""

from templaterl.fit import Trainer, flag, mse, print_curve, require, synthetic, world_size

NUM_GPUS = 4
DIM = 192
SEED = 11


def prepare():
    # framework S downloads the model and the dataset here; this example generates its data in execute()
    print(f"prepare: synthetic regression, dim {DIM}, seed {SEED}")


def execute():
    world = world_size(NUM_GPUS)
    x, y, _ = synthetic(24000, DIM, SEED)
    train_x, train_y, held_x, held_y = x[:20000], y[:20000], x[20000:], y[20000:]
    trainer = Trainer(DIM, world, lr=0.05)
    before = mse(train_x, train_y, trainer.w)
    curve = trainer.train(train_x, train_y, steps=400, batch=4096, seed=SEED)
    print_curve("train loss", curve)
    require(curve[-1] < before / 100, f"train loss {before:.3g} -> {curve[-1]:.3g} (needs a 100x drop)")
    if flag("ENABLE_EVAL", "1"):
        held = mse(held_x, held_y, trainer.w)
        require(held < 2 * curve[-1] + 1e-3, f"held-out loss {held:.3g} is close to the training loss")


if __name__ == "__main__":
    prepare()
    execute()
