"""Tensor parallelism: a matmul split by columns over the test's GPUs equals the whole one."""

from sglangish.engine import matmul, matrix, require, visible_gpus
from sglangish.test.ci.ci_register import register_cuda_ci

register_cuda_ci(est_time=6, suite="nightly-2-gpu", nightly=True)
register_cuda_ci(est_time=6, stage="stage-c", runner_config="8-gpu-b200")


def prepare() -> None:
    """Nothing to download: the model is built from the corpus in execute()."""


def execute() -> None:
    gpus = visible_gpus() or 2
    require(gpus in (2, 8), f"the runner gave {gpus} GPUs (2 or 8 registered)")
    a, b = matrix(48, 48, 3), matrix(48, 48 * gpus, 4)
    whole = matmul(a, b)
    width = 48
    shards = [matmul(a, [row[r * width:(r + 1) * width] for row in b]) for r in range(gpus)]
    joined = [sum((s[i] for s in shards), []) for i in range(48)]
    require(joined == whole, f"{gpus} column shards join into the whole product")


if __name__ == "__main__":
    prepare()
    execute()
