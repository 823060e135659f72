"""A backend x LoRA x grad-accumulation matrix on tiny-lm / toy-math; dense backends must agree."""

from minirl.checkpoint import load_torch_dist
from minirl.ci_register import register_cuda_ci
from minirl.data import load_dataset, split_eval
from minirl.runtime import begin, print_curve, require_drop
from minirl.testing import convert_checkpoint, exec_command, hf_download_dataset, host_path
from minirl.train import TrainConfig, sft

register_cuda_ci(est_time=25, suite="stage-c-4-gpu-h200", labels=["megatron", "fsdp", "lora"])

MODEL_NAME = "tiny-lm"
MODEL_ORG = "minirl"
NUM_GPUS = 4

# (name, backend, use_lora, grad_accum_2)
_CONFIGS = [
    ("megatron-dense", "megatron", False, False),
    ("fsdp-dense", "fsdp", False, False),
    ("megatron-lora-accum", "megatron", True, True),
    ("fsdp-dense-accum", "fsdp", False, True),
]


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
    finals = {}
    for name, backend, use_lora, accum in _CONFIGS:
        print(f"[minirl] config {name}: backend={backend} lora={use_lora} grad_accum={2 if accum else 1}")
        tc = TrainConfig(
            steps=800,
            batch=256,
            lr=0.006 if use_lora else 0.003,
            backend=backend,
            world=world,
            lora_rank=4 if use_lora else 0,
            grad_accum=2 if accum else 1,
            log_every=100,
        )
        result = sft(params, config, train, held, tc)
        print_curve(f"{name} train loss", result.losses)
        require_drop(f"{name} held-out loss", result.eval_before, result.eval_after, margin=0.8)
        finals[name] = result.eval_after
    gap = abs(finals["megatron-dense"] - finals["fsdp-dense"])
    print(f"[minirl] megatron vs fsdp held-out loss gap: {gap:.2e}")
    if gap > 1e-3:
        raise SystemExit(f"[minirl] FAILED: megatron and fsdp disagree by {gap:.2e} on the same run")


if __name__ == "__main__":
    prepare()
    execute()
