"""Greedy generation is deterministic and batching does not change any answer."""

from sglangish.engine import Bigram, require, serve
from sglangish.test.ci.ci_register import register_cuda_ci

register_cuda_ci(est_time=5, stage="stage-b", runner_config="1-gpu-large")
register_cuda_ci(est_time=8, suite="nightly-1-gpu", nightly=True)


def prepare() -> None:
    """Nothing to download: the model is built from the corpus in execute()."""


def execute() -> None:
    model = Bigram()
    prompts = ["the ", "a fox", "dog", "sun is"] * 50
    single = [model.generate(p, 24) for p in prompts]
    batched = serve(model, prompts, 24, batch=16)
    require(single == batched, "batched generation equals one-by-one generation")
    require(model.generate("the ", 24) == single[0], "greedy decoding is deterministic")
    print(single[0])


if __name__ == "__main__":
    prepare()
    execute()
