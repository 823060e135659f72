"""``nightly plan | head -1``: a reader that stops early ends the command quietly, never with a traceback."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import PROJECT_ROOT


@pytest.mark.parametrize("extra", [[], ["--json"]])  # a short text plan (flushed at exit) and a long JSON one
def test_a_closed_stdout_ends_the_command_quietly(extra, tmp_path):
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first write: every write fails, however fast the machine
    try:
        done = subprocess.run([sys.executable, "-m", "pipelines", "plan", *extra], cwd=PROJECT_ROOT, stdout=write_end,
                              stderr=subprocess.PIPE, text=True, timeout=300,
                              env={**os.environ, "NIGHTLY_HOME": str(tmp_path)})
    finally:
        os.close(write_end)
    assert done.stderr == ""
    assert done.returncode == 141  # 128 + SIGPIPE, what a shell reports for a reader that stopped
