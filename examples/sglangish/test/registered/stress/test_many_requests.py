"""Stress: thousands of requests through the scheduler all complete, in order."""

from sglangish.engine import Bigram, require, serve
from sglangish.test.ci.ci_register import register_cuda_ci

register_cuda_ci(est_time=0, suite="stress", nightly=True)


def prepare() -> None:
    """Nothing to download: the model is built from the corpus in execute()."""


def execute() -> None:
    model = Bigram()
    prompts = [f"the {'dog' if i % 2 else 'fox'}" for i in range(3000)]
    out = serve(model, prompts, 8, batch=64)
    require(len(out) == len(prompts), f"{len(out)} of {len(prompts)} requests answered")
    require(all(o.startswith(p) for o, p in zip(out, prompts, strict=True)), "every answer continues its prompt")


if __name__ == "__main__":
    prepare()
    execute()
