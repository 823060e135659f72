"""LoRA MoE sibling (5-layer): one diagonal of attention backend x LoRA layout, its sibling the other.

The grid is {attention backend: megatron, tilelang} x {LoRA layout: shared-outer + virtual-experts,
per-expert + no-virtual-experts}. This file runs one diagonal and test_lora_moe_6layer.py the other,
so the pair covers all four cells with two configurations each; `nightly coverage` checks that it
stays so (group lora-moe-diagonals in the nightly's assets/coverage.yaml).

minirl has no attention kernels or experts, so each axis drives the closest thing it has:
the backend computes the update (tilelang stands in as the sharded fsdp path), a shared outer
adapter is one rank-4 LoRA and per-expert adapters a rank-8 one (two experts of rank 4), and
virtual experts split every rank's batch into two micro-batches.
"""

import numpy as np
from minirl.checkpoint import load_torch_dist
from minirl.ci_register import register_cuda_ci
from minirl.data import load_dataset, split_eval
from minirl.model import BASE_NAMES
from minirl.runtime import begin, print_curve, require_drop
from minirl.testing import convert_checkpoint, exec_command, hf_download_dataset, host_path
from minirl.train import TrainConfig, sft

register_cuda_ci(est_time=10, suite="stage-b-2-gpu-h200", labels=["lora"])

MODEL_NAME = "tiny-lm-wide"
MODEL_ORG = "minirl"
NUM_GPUS = 2
NUM_LAYERS = 5

# coverage-group: lora-moe-diagonals
# (name, backend, shared_outer, virtual_experts)
_CONFIGS = [
    ("megatron-shared-outer-virtual", "megatron", True, True),
    ("tilelang-per-expert", "tilelang", False, False),
]

#: what stands in for each attention backend in minirl (see the module docstring)
_KERNELS = {"megatron": "megatron", "tilelang": "fsdp"}


def prepare():
    exec_command(f"hf download {MODEL_ORG}/{MODEL_NAME} --local-dir /root/models/{MODEL_NAME}")
    hf_download_dataset("minirl/toy-math")
    convert_checkpoint(
        model_name=MODEL_NAME, megatron_model_type="tiny", num_gpus_per_node=NUM_GPUS, dir_dst="/root"
    )


def execute():
    world = begin(__file__, NUM_GPUS)
    config, params, _ = load_torch_dist(host_path(f"/root/{MODEL_NAME}_torch_dist"))
    train, held = split_eval(load_dataset(host_path("/root/datasets/toy-math")))
    for name, backend, shared_outer, virtual_experts in _CONFIGS:
        print(f"[minirl] config {name}: backend={backend} shared_outer={shared_outer} "
              f"virtual_experts={virtual_experts} layers={NUM_LAYERS}", flush=True)
        tc = TrainConfig(
            steps=200, batch=128, lr=0.006, backend=_KERNELS[backend], world=world,
            lora_rank=4 if shared_outer else 8, grad_accum=2 if virtual_experts else 1,
            seed=NUM_LAYERS, log_every=100,
        )
        try:
            result = sft(params, config, train, held, tc)
            print_curve(f"{name} train loss", result.losses)
            moved = [k for k in BASE_NAMES if not np.array_equal(result.params[k], params[k])]
            if moved:
                raise SystemExit(f"[minirl] FAILED: {name}: LoRA changed frozen base weights {moved}")
            require_drop(f"{name} held-out loss", result.eval_before, result.eval_after, margin=0.5)
        except BaseException:
            print(f"[minirl] config {name}: failed", flush=True)  # the outcome history records per cell
            raise
        print(f"[minirl] config {name}: passed", flush=True)


if __name__ == "__main__":
    prepare()
    execute()
