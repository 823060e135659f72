"""Save mid-training, reload the sharded checkpoint bit-exactly, resume: the training loss keeps falling."""

import tempfile
from dataclasses import replace

import numpy as np
from minirl.checkpoint import load_torch_dist, save_torch_dist
from minirl.ci_register import register_cuda_ci, register_rocm_ci
from minirl.data import load_dataset, split_eval
from minirl.runtime import begin, print_curve, require_drop
from minirl.testing import convert_checkpoint, exec_command, hf_download_dataset, host_path
from minirl.train import TrainConfig, eval_loss, sft

register_cuda_ci(est_time=15, suite="stage-c-4-gpu-h200", labels=["ckpt", "megatron"])
register_rocm_ci(est_time=20, suite="stage-c-4-gpu-mi300", labels=["ckpt", "megatron"])

MODEL_NAME = "tiny-lm"
MODEL_ORG = "minirl"
NUM_GPUS = 4
SAVE_AT = 150
RESUME_STEPS = 2000


def prepare():
    exec_command(f"hf download {MODEL_ORG}/{MODEL_NAME} --local-dir /root/models/{MODEL_NAME}")
    hf_download_dataset("minirl/toy-chat")
    convert_checkpoint(
        model_name=MODEL_NAME, megatron_model_type="tiny", num_gpus_per_node=NUM_GPUS, dir_dst="/root/models"
    )


def execute():
    world = begin(__file__, NUM_GPUS)
    config, params, _ = load_torch_dist(host_path(f"/root/models/{MODEL_NAME}_torch_dist"))
    train, held = split_eval(load_dataset(host_path("/root/datasets/toy-chat")))
    tc = TrainConfig(steps=SAVE_AT, batch=256, lr=0.003, backend="megatron", world=world, log_every=50)
    first = sft(params, config, train, held, tc)
    print_curve("train loss (first half)", first.losses)
    with tempfile.TemporaryDirectory() as tmp:
        saved = save_torch_dist(
            f"{tmp}/run_torch_dist", config, first.params, num_ranks=world, iteration=SAVE_AT
        )
        _, reloaded, metadata = load_torch_dist(saved)
    if metadata["iteration"] != SAVE_AT or any(
        not np.array_equal(reloaded[k], v) for k, v in first.params.items()
    ):
        raise SystemExit("[minirl] FAILED: the reloaded checkpoint differs from the saved parameters")
    print(f"[minirl] checkpoint at iteration {SAVE_AT} reloaded bit-exactly from {world} shards")
    second = sft(reloaded, config, train, held, replace(tc, steps=RESUME_STEPS, seed=1, log_every=250))
    print_curve("train loss (resumed)", second.losses)
    require_drop("held-out loss (first half)", first.eval_before, first.eval_after, margin=1.0)
    at_save = eval_loss(first.params, config, train)
    after_resume = eval_loss(second.params, config, train)
    require_drop("train-split loss (save -> resumed end)", at_save, after_resume, margin=0.05)


if __name__ == "__main__":
    prepare()
    execute()
