"""bench/plan.py says what it runs and refuses what it cannot: --help, a misspelled part, a flag without its value."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import PROJECT_ROOT


def bench(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(PROJECT_ROOT / "bench" / "plan.py"), *argv],
                          capture_output=True, text=True, timeout=60)


def test_help_prints_the_parts_and_flags_and_runs_nothing():
    out = bench("--help")
    assert out.returncode == 0
    assert "Planner benchmark: our plan + dynamic dispatch" in out.stdout
    assert "framework, synthetic, realistic, speed" in out.stdout
    for flag in ("--seeds A-B", "--sigmas X,Y", "--history N", "--uncut"):
        assert flag in out.stdout
    assert "#" not in out.stdout  # no table: nothing ran


@pytest.mark.parametrize(("argv", "said"), [
    (("realsitic",), "error: unknown part(s) 'realsitic'; choose from framework, synthetic, realistic, speed"),
    (("realistic", "--seeds"), "error: argument --seeds: expected one argument"),
    (("realistic", "--seeds", "2oo-399"), "error: argument --seeds: '2oo-399': expected A-B or A, whole numbers"),
    (("realistic", "--sigmas", "0.5,x"), "error: argument --sigmas: '0.5,x': expected numbers separated by commas"),
    (("realistic", "--history", "0"), "error: argument --history: '0': needs 1 or more past runs per test"),
])
def test_a_bad_part_or_flag_is_an_error_that_says_so_and_runs_nothing(argv, said):
    out = bench(*argv)
    assert (out.returncode, out.stdout) == (2, "")
    assert said in out.stderr and "Traceback" not in out.stderr
