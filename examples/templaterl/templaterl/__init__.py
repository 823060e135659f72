"""templaterl: a tiny framework laid out like framework S, whose e2e tests train on CPU in seconds.

One BLAS thread per test process: the nightly runs several tests side by side on one machine.
"""

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
