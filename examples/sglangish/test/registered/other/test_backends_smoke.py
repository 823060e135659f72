"""Smoke test on the other backends: the model loads and answers."""

from sglangish.engine import Bigram, require
from sglangish.test.ci.ci_register import register_mlx_ci, register_musa_ci, register_npu_ci, register_xpu_ci

register_npu_ci(2.5, "per-commit-1-npu-a2")
register_xpu_ci(est_time=3, suite="per-commit-xpu", disabled="no XPU runner yet")
register_musa_ci(est_time=3, stage="stage-b", runner_config="1-gpu-s4000")
register_mlx_ci(est_time=2, suite="per-commit-mlx")


def prepare() -> None:
    """Nothing to download: the model is built from the corpus in execute()."""


def execute() -> None:
    require(len(Bigram().generate("a", 10)) == 11, "ten new tokens")


if __name__ == "__main__":
    prepare()
    execute()
