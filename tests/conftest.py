"""Shared fixtures: factories with defaults for test records, and the project root."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from pipelines.core.model import Test
from pipelines.interrupts import answer_interrupts

PROJECT_ROOT = Path(__file__).resolve().parents[1]

# a suite started with `&` from a script inherits SIGINT ignored; once a test runs Dagster in this
# process, SIGTERM is ignored too and every process a test starts would inherit that
answer_interrupts()


def make_test(**overrides) -> Test:
    """A registered test with sensible defaults; override only what a test is about."""
    base = Test(id="tests/e2e/test_a.py", path="tests/e2e/test_a.py", backend="cuda", suite="stage-c-4-gpu-h200",
                gpus=4, est_time=600, labels=("megatron",), hardware="h200", sha256="0" * 64)
    return dataclasses.replace(base, **overrides)


@pytest.fixture(autouse=True)
def _own_gpu_locks(tmp_path_factory, monkeypatch):
    """Each test locks GPUs in its own folder: the host's folder is shared by every night on the
    machine, so tests running side by side (or a real night) would otherwise wait on each other.
    A test that starts a night in a subprocess must pass NIGHTLY_GPU_LOCK_DIR on."""
    monkeypatch.setenv("NIGHTLY_GPU_LOCK_DIR", str(tmp_path_factory.mktemp("gpu-locks")))


@pytest.fixture
def project_root() -> Path:
    return PROJECT_ROOT
