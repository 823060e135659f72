"""SFT of tiny-lm-wide on toy-chat across two 8-GPU nodes (16 data-parallel ranks)."""

from minirl.checkpoint import load_torch_dist
from minirl.ci_register import register_cuda_ci
from minirl.data import load_dataset, split_eval
from minirl.runtime import begin, print_curve, require_drop
from minirl.testing import convert_checkpoint, exec_command, hf_download_dataset, host_path
from minirl.train import TrainConfig, sft

register_cuda_ci(
    est_time=30,
    suite="stage-c-8-gpu-h200",
    labels=["megatron"],
    disabled="needs 2 nodes x 8 GPUs; CI runners are single-node until the multinode pool exists",
)

MODEL_NAME = "tiny-lm-wide"
MODEL_ORG = "minirl"
NUM_GPUS = 8
NUM_NODES = 2


def prepare():
    exec_command(f"hf download {MODEL_ORG}/{MODEL_NAME} --local-dir /root/models/{MODEL_NAME}")
    hf_download_dataset("minirl/toy-chat")
    convert_checkpoint(
        model_name=MODEL_NAME,
        megatron_model_type="tiny",
        num_gpus_per_node=NUM_GPUS,
        multinode=True,
        dir_dst="/root/models",
    )


def execute():
    world = begin(__file__, NUM_GPUS) * NUM_NODES
    config, params, _ = load_torch_dist(host_path(f"/root/models/{MODEL_NAME}_torch_dist"))
    train, held = split_eval(load_dataset(host_path("/root/datasets/toy-chat")))
    tc = TrainConfig(steps=600, batch=256, lr=0.004, backend="megatron", world=world, log_every=100)
    result = sft(params, config, train, held, tc)
    print_curve("train loss", result.losses)
    require_drop("held-out loss", result.eval_before, result.eval_after, margin=1.0)


if __name__ == "__main__":
    prepare()
    execute()
