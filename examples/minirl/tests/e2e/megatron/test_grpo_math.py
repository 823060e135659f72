"""GRPO on toy-math from the tiny-lm checkpoint, megatron backend, 4 GPUs: held-out reward rises."""

from minirl.checkpoint import load_torch_dist
from minirl.ci_register import register_cuda_ci
from minirl.data import load_dataset, split_eval
from minirl.runtime import begin, print_curve, require_rise
from minirl.testing import convert_checkpoint, exec_command, hf_download_dataset, host_path
from minirl.train import TrainConfig, grpo, mean_reward

register_cuda_ci(30, "stage-c-4-gpu-h200", labels=["megatron"])

MODEL_NAME = "tiny-lm"
MODEL_ORG = "minirl"
NUM_GPUS = 4
GROUP_SIZE = 8


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
    tc = TrainConfig(steps=1000, batch=128, lr=0.01, backend="megatron", world=world, log_every=100)
    result = grpo(params, config, train, held, tc, group=GROUP_SIZE)
    print_curve("policy loss", result.losses)
    print_curve("rollout reward", result.rewards)
    before = mean_reward(params, config, held, seed=7)
    after = mean_reward(result.params, config, held, seed=7)
    require_rise("held-out reward", before, after, margin=0.1)


if __name__ == "__main__":
    prepare()
    execute()
