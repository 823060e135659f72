"""Test registration calls, read by the CI runner with `ast` and doing nothing at run time.

The signatures are the SGLang family's: no labels; either `suite=` or `stage=` with
`runner_config=` (suite = f"{stage}-test-{runner_config}"); `nightly=True` means only the
nightly run selects the registration.
"""

from __future__ import annotations


def register_cpu_ci(est_time: float, suite: str | None = None, nightly: bool = False, disabled: str | None = None, *,
                    stage: str | None = None, runner_config: str | None = None) -> None:
    """Declare a CPU run of this file."""


def register_cuda_ci(est_time: float, suite: str | None = None, nightly: bool = False, disabled: str | None = None, *,
                     stage: str | None = None, runner_config: str | None = None) -> None:
    """Declare an NVIDIA GPU run of this file."""


def register_amd_ci(est_time: float, suite: str | None = None, nightly: bool = False, disabled: str | None = None, *,
                    stage: str | None = None, runner_config: str | None = None) -> None:
    """Declare an AMD GPU run of this file."""


def register_npu_ci(est_time: float, suite: str | None = None, nightly: bool = False, disabled: str | None = None, *,
                    stage: str | None = None, runner_config: str | None = None) -> None:
    """Declare an NPU run of this file."""


def register_xpu_ci(est_time: float, suite: str | None = None, nightly: bool = False, disabled: str | None = None, *,
                    stage: str | None = None, runner_config: str | None = None) -> None:
    """Declare an Intel XPU run of this file."""


def register_musa_ci(est_time: float, suite: str | None = None, nightly: bool = False, disabled: str | None = None, *,
                     stage: str | None = None, runner_config: str | None = None) -> None:
    """Declare a MUSA run of this file."""


def register_mlx_ci(est_time: float, suite: str | None = None, nightly: bool = False, disabled: str | None = None, *,
                    stage: str | None = None, runner_config: str | None = None) -> None:
    """Declare an Apple MLX run of this file."""
