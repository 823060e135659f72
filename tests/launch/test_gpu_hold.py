"""Holding GPUs the way a nightly test does (:class:`GpuHold`), shared by a test's launch and a conversion."""

from __future__ import annotations

import logging
import os
import subprocess

import pytest

from pipelines.launch import gpu_slots
from pipelines.launch.gpu_hold import GpuHold
from pipelines.launch.procs import lock_holders


def test_a_hold_lets_go_of_its_gpus_and_its_launcher_mark_however_it_ends(tmp_path):
    """The launcher mark says "a night, not a stray" to every other night on the host: one left behind
    after a give-up or an error would make this process's later leftovers look nightly to them forever."""
    locks = tmp_path / "locks"
    marked = lambda: os.getpid() in lock_holders([gpu_slots.launchers_path(locks)])  # noqa: E731
    hold = lambda: GpuHold(locks, "p", 1, [0], 1, subject="conversion", confirm_s=0,  # noqa: E731
                           log=logging.getLogger(__name__))
    taken = gpu_slots.try_acquire(locks, "p", 1, [0], 1)
    stray = subprocess.Popen(["sleep", "60"], pass_fds=taken.fds, start_new_session=True)
    taken.release()  # only the stray holds the GPU now
    try:
        with hold() as gpus:
            gpus.mark()
            assert marked()
            assert gpus.wait(0.2, poll_s=0.05, recheck_s=0.05) is None, "gave up on the stray past the timeout"
            assert f"PID {stray.pid} (sleep 60)" in gpus.strays_text()
        assert not marked(), "a give-up let go of the mark"
    finally:
        stray.kill()
        stray.wait()
    with pytest.raises(RuntimeError), hold() as gpus:
        gpus.mark()
        assert gpus.wait(1) is not None and marked()
        raise RuntimeError("the conversion failed")
    assert not marked(), "an error while holding let go of the mark"
    assert gpu_slots.try_acquire(locks, "p", 1, [0], 1) is not None, "and of the GPUs"
