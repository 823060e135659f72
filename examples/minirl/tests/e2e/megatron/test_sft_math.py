"""Supervised fine-tuning of tiny-lm on toy-math, megatron backend, 4 GPUs: held-out loss drops."""

from minirl.checkpoint import load_torch_dist
from minirl.ci_register import register_cuda_ci
from minirl.data import load_dataset, split_eval
from minirl.runtime import begin, print_curve, require_drop
from minirl.testing import convert_checkpoint, exec_command, hf_download_dataset, host_path
from minirl.train import TrainConfig, sft

register_cuda_ci(est_time=10, suite="stage-c-4-gpu-h200", labels=["megatron", "short"])

MODEL_NAME = "tiny-lm"
MODEL_ORG = "minirl"
NUM_GPUS = 4


def prepare():
    exec_command(f"hf download {MODEL_ORG}/{MODEL_NAME} --local-dir /root/models/{MODEL_NAME}")
    hf_download_dataset("minirl/toy-math")
    convert_checkpoint(
        model_name=MODEL_NAME, megatron_model_type="tiny", num_gpus_per_node=NUM_GPUS, dir_dst="/root/models"
    )


def execute():
    world = begin(__file__, NUM_GPUS)
    config, params, _ = load_torch_dist(host_path(f"/root/models/{MODEL_NAME}_torch_dist"))
    train, held = split_eval(load_dataset(host_path("/root/datasets/toy-math")))
    tc = TrainConfig(steps=3000, batch=256, lr=0.003, backend="megatron", world=world, log_every=500)
    result = sft(params, config, train, held, tc)
    print_curve("train loss", result.losses)
    require_drop("held-out loss", result.eval_before, result.eval_after, margin=1.0)


if __name__ == "__main__":
    prepare()
    execute()
