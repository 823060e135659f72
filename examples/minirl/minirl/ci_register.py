"""Test registration calls, read by CI runners with `ast` and doing nothing at run time.

The signatures mirror the registry format of real frameworks so the nightly catalog can read
these files exactly as it reads theirs.
"""

from __future__ import annotations


def register_cuda_ci(
    est_time: int,
    suite: str,
    *,
    labels: list[str],
    nightly: bool = False,
    disabled: str | None = None,
) -> None:
    """Declare an NVIDIA GPU run of this file; the suite name says how many GPUs it needs."""


def register_rocm_ci(
    est_time: int,
    suite: str,
    *,
    labels: list[str],
    nightly: bool = False,
    disabled: str | None = None,
) -> None:
    """Declare an AMD GPU run of this file."""


def register_cpu_ci(
    est_time: int,
    suite: str,
    *,
    labels: list[str] | None = None,
    nightly: bool = False,
    disabled: str | None = None,
) -> None:
    """Declare a CPU-only run of this file."""
