"""Kernel benchmark: the matmul kernel agrees with a reference and reports its throughput."""

import time

from sglangish.engine import matmul, matrix, require
from sglangish.test.ci.ci_register import register_cuda_ci

register_cuda_ci(est_time=3.5, suite="nightly-1-gpu", nightly=True)


def prepare() -> None:
    """Nothing to download: the model is built from the corpus in execute()."""


def execute() -> None:
    a, b = matrix(80, 80, 1), matrix(80, 80, 2)
    t0 = time.perf_counter()
    c = matmul(a, b)
    took = time.perf_counter() - t0
    ref = [[sum(a[i][k] * b[k][j] for k in range(80)) for j in range(80)] for i in range(80)]
    err = max(abs(c[i][j] - ref[i][j]) for i in range(80) for j in range(80))
    require(err < 1e-9, f"matmul matches the reference (max error {err:.2e})")
    print(f"matmul 80x80: {2 * 80**3 / took / 1e6:.1f} MFLOP/s")


if __name__ == "__main__":
    prepare()
    execute()
