"""The environment a test gives the night it starts in a subprocess."""

from __future__ import annotations

import os

#: kept whatever is dropped: the conftest gives each test its own GPU lock folder, and a child night
#: without it would lock the host's shared folder (and wait on other tests' nights there)
KEPT = ("NIGHTLY_GPU_LOCK_DIR",)


def child_env(*drop: str) -> dict[str, str]:
    """``os.environ`` without the variables starting with any of ``drop`` (a clean night sees none
    of the test process's NIGHTLY_/DAGSTER_ settings), except :data:`KEPT`."""
    return {k: v for k, v in os.environ.items() if k in KEPT or not k.startswith(drop)}
