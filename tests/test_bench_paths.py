"""bench/paths.py measures this checkout's code, whatever checkout the shared venv installed."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

from tests.conftest import PROJECT_ROOT


def load_bench():
    spec = importlib.util.spec_from_file_location("bench_paths", PROJECT_ROOT / "bench" / "paths.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_paths_bench_runs_pipelines_and_dagster_of_this_checkout(tmp_path):
    paths = load_bench()
    assert paths.tool("pipelines") == [sys.executable, "-m", "pipelines"]
    assert paths.tool("dagster") == [sys.executable, "-m", "dagster"]
    probe = "import pipelines; print(pipelines.__file__)"
    out = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=paths.environment({}),
                         capture_output=True, text=True, check=True).stdout.strip()
    assert out == str(PROJECT_ROOT / "pipelines" / "__init__.py")
