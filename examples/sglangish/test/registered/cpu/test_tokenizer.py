"""The tokenizer round-trips every string of the corpus."""

from sglangish.engine import CORPUS, detokenize, require, tokenize
from sglangish.test.ci.ci_register import register_cpu_ci

register_cpu_ci(1, "stage-a-test-cpu")
register_cpu_ci(est_time=1.5, suite="nightly-cpu", nightly=True)


def prepare() -> None:
    """Nothing to download: the model is built from the corpus in execute()."""


def execute() -> None:
    require(detokenize(tokenize(CORPUS)) == CORPUS, "detokenize(tokenize(x)) == x")
    require(tokenize("") == [], "the empty string has no tokens")


if __name__ == "__main__":
    prepare()
    execute()
