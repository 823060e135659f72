"""Sampling on AMD runners: greedy decoding never leaves the vocabulary."""

from sglangish.engine import Bigram, require
from sglangish.test.ci.ci_register import register_amd_ci

register_amd_ci(4, "stage-b-test-1-gpu-amd")
register_amd_ci(est_time=5, suite="nightly-amd-1-gpu", nightly=True, disabled="no AMD runner in this example")


def prepare() -> None:
    """Nothing to download: the model is built from the corpus in execute()."""


def execute() -> None:
    model = Bigram()
    text = model.generate("the", 100)
    require(set(text) <= set(model.best) | {chr(c) for c in model.best.values()}, "output stays in the vocabulary")


if __name__ == "__main__":
    prepare()
    execute()
