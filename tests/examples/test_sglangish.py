"""The SGLang-family example: what its own runner would collect and record, and every file runs.

Expected values come from the example itself, never from the nightly catalog: the collected
files from walking ``test/registered/`` the way the family's runner does, the registrations from
importing each test file with the framework's register functions replaced by recorders.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipelines.core.catalog import load_catalog

SGLANGISH = Path(__file__).resolve().parents[2] / "examples" / "sglangish"
REGISTERED = SGLANGISH / "test" / "registered"
BACKENDS = ("cpu", "cuda", "amd", "npu", "xpu", "musa", "mlx")


def collected() -> list[str]:
    """Every ``*.py`` under test/registered/ except conftest.py and __init__.py (the runner's rule)."""
    out = []
    for folder, _, names in os.walk(REGISTERED):
        out += [str(Path(folder, n).relative_to(SGLANGISH)) for n in names
                if n.endswith(".py") and n not in ("conftest.py", "__init__.py")]
    return sorted(out)


def recorded(rel: str) -> list[dict]:
    """The registrations one file makes when imported, with the framework's functions recording them."""
    import sglangish.test.ci.ci_register as ci

    calls: list[dict] = []

    def recorder(backend: str):
        def register(est_time, suite=None, nightly=False, disabled=None, *, stage=None, runner_config=None):
            calls.append({"backend": backend, "est_time": est_time, "nightly": nightly, "disabled": disabled,
                          "suite": suite if suite is not None else f"{stage}-test-{runner_config}"})
        return register

    saved = {b: getattr(ci, f"register_{b}_ci") for b in BACKENDS}
    try:
        for b in BACKENDS:
            setattr(ci, f"register_{b}_ci", recorder(b))
        source = (SGLANGISH / rel).read_text()
        exec(compile(source, rel, "exec"), {"__name__": "recorded"})  # noqa: S102 - the example's own files
    finally:
        for b, fn in saved.items():
            setattr(ci, f"register_{b}_ci", fn)
    return calls


@pytest.fixture(scope="module", autouse=True)
def importable():
    sys.path.insert(0, str(SGLANGISH))
    yield
    sys.path.remove(str(SGLANGISH))


def test_the_catalog_collects_exactly_what_the_family_runner_collects_bench_files_included():
    cat = load_catalog(SGLANGISH)
    assert cat.problems == ()
    assert sorted({t.path for t in cat.tests}) == collected()
    assert "test/registered/kernels/bench_matmul.py" in collected()


def test_every_registration_the_files_make_is_one_test_with_its_suite_est_time_and_cadence():
    expected = sorted((rel, c["backend"], c["suite"], math.ceil(c["est_time"]), c["nightly"], c["disabled"])
                      for rel in collected() for c in recorded(rel))
    got = sorted((t.path, t.backend, t.suite, t.est_time, t.nightly, t.disabled) for t in load_catalog(SGLANGISH).tests)
    assert got == expected
    assert any(e[2] == "stress" for e in expected) and any(e[3] == 0 for e in expected)
    assert {e[1] for e in expected} == set(BACKENDS)


@pytest.mark.slow
@pytest.mark.parametrize("rel", collected())
def test_each_registered_file_runs_standalone_on_a_cpu_in_seconds(rel):
    env = {**os.environ, "PYTHONPATH": str(SGLANGISH)}
    done = subprocess.run([sys.executable, rel], cwd=SGLANGISH, env=env, capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok: " in done.stdout and "FAILED" not in done.stdout
