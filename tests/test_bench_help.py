"""bench/paths.py, overhead.py, report.py, reliability.py and logcap.py say what they run on --help instead of running it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from tests.conftest import PROJECT_ROOT


def bench(script: str, *argv: str) -> subprocess.CompletedProcess:
    """The script's exit status and output; one that ignored --help and started its nights is stopped
    after 30 s with the runs it started (its own process group), and the test fails."""
    proc = subprocess.Popen([sys.executable, str(PROJECT_ROOT / "bench" / script), *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"bench/{script} {' '.join(argv)} ran for 30 s: it started its work")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.mark.parametrize(("script", "said"), [
    ("paths.py", "Wall time of each way into test_runs against the nightly"),
    ("overhead.py", "Orchestration overhead per test"),
    ("report.py", "Night report benchmark: 100 nights x 1,000 tests"),
    ("reliability.py", "What the reliability guards cost"),
    ("logcap.py", "Memory a night spends on capped logs"),
    ("nodes.py", "Cross-night bad-node rule (``history``): how often it names a healthy node"),
])
def test_help_prints_what_the_bench_measures_and_runs_nothing(script, said):
    out = bench(script, "--help")
    assert (out.returncode, out.stderr) == (0, "")
    assert out.stdout.startswith(f"usage: bench/{script}") and said in out.stdout


def test_a_bad_argument_is_an_error_that_says_so_and_runs_nothing():
    out = bench("report.py", "ten")
    assert (out.returncode, out.stdout) == (2, "")
    assert "error: argument nights: 'ten': expected a whole number >= 1" in out.stderr
    assert "Traceback" not in out.stderr
    out = bench("paths.py", "--nights", "3")
    assert out.returncode == 2 and "unrecognized arguments: --nights 3" in out.stderr
