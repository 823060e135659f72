"""The wrapper runs a test as its runner would: a plain script (no prepare()/execute(), e.g. unittest
style) as ``python3 FILE``, and with the signals a shell would give it."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap

from pipelines.launch.local import WRAPPER

SCRIPT = textwrap.dedent("""\
    import unittest

    class T(unittest.TestCase):
        def test_sum(self):
            self.assertEqual(1 + 1, {expected})

    if __name__ == "__main__":
        unittest.main()
""")


def _run(tmp_path, expected: int) -> tuple[int, dict]:
    (tmp_path / "test_plain.py").write_text(SCRIPT.format(expected=expected))
    out = subprocess.run([sys.executable, str(WRAPPER), "--file", "test_plain.py", "--result", "r.json"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    return out.returncode, json.loads((tmp_path / "r.json").read_text())


def test_a_passing_unittest_script_passes_with_the_completion_record(tmp_path):
    code, result = _run(tmp_path, 2)
    assert code == 0 and result["ok"] is True and result["exit_code"] == 0 and result["finished"] is True


def test_a_failing_unittest_script_fails(tmp_path):
    code, result = _run(tmp_path, 3)
    assert code == 1 and result["ok"] is False and result["exit_code"] == 1


SIGNALS = textwrap.dedent("""\
    import pathlib

    def execute():
        status = dict(line.split(":\\t", 1) for line in pathlib.Path("/proc/self/status").read_text().splitlines()
                      if ":\\t" in line)
        pathlib.Path("signals.txt").write_text(status["SigBlk"].strip() + " " + status["SigIgn"].strip())
""")

# the night's process as it might be: SIGTERM and SIGINT ignored and SIGTERM blocked, then exec
HOSTILE_PARENT = ("import os, signal, sys; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                  "signal.signal(signal.SIGINT, signal.SIG_IGN); "
                  "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM}); "
                  "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])")


def test_the_test_gets_sigterm_and_sigint_unblocked_and_not_ignored_whatever_the_night_had(tmp_path):
    (tmp_path / "test_signals.py").write_text(SIGNALS)
    out = subprocess.run([sys.executable, "-c", HOSTILE_PARENT, str(WRAPPER), "--file", "test_signals.py"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    blocked, ignored = (int(field, 16) for field in (tmp_path / "signals.txt").read_text().split())
    for sig in (signal.SIGTERM, signal.SIGINT):
        assert not blocked & (1 << (sig - 1)), f"{sig.name} blocked in the test: {blocked:#x}"
        assert not ignored & (1 << (sig - 1)), f"{sig.name} ignored in the test: {ignored:#x}"
