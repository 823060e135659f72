"""The UI tests' stop of `dagster dev`: a group that outlives SIGTERM is named and killed, also where
the machine has no `ps` (procps is not in every image)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.support.dagster_dev import group_members, stop

STUBBORN = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(60)"


def test_stop_names_and_kills_a_group_that_ignores_sigterm_without_ps(tmp_path, monkeypatch):
    proc = subprocess.Popen([sys.executable, "-c", STUBBORN], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        assert proc.stdout.readline() == "ready\n"
        assert re.match(rf"{proc.pid} [RS] {re.escape(sys.executable)} -c import signal", group_members(proc.pid))
        monkeypatch.setenv("PATH", str(tmp_path))  # no ps, no anything
        with pytest.warns(UserWarning, match=rf"left processes after SIGTERM \+ 0.3s; killing:\n{proc.pid} "):
            stop(proc, grace_s=0.3)
        assert proc.returncode == -9 and group_members(proc.pid) == ""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
