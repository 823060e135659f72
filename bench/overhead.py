"""Orchestration overhead per test: the nightly job versus a bare subprocess run of the same tests.

A synthetic framework of N trivial tests (``execute()`` returns at once) runs twice:
1. bare: ``python3 -c 'import test; test.execute()'`` per test, one after another;
2. through ``nightly``: the Dagster job (catalog, plan, dispatch, history, metadata events) on a
   one-GPU pool, so tests also run one after another.
Overhead per test = (nightly - bare) / N; measured at two sizes, the slope separates the
per-test cost from the fixed cost of starting a night. Prints the figures.
The sizes are ``$BENCH_SIZES`` (default ``10,40``).

    .venv/bin/python bench/overhead.py
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TEST = textwrap.dedent("""\
    from minibench import register_cuda_ci

    register_cuda_ci(est_time=5, suite="stage-a-1-gpu-h200", labels=["short"])

    def execute():
        pass
""")


def make_repo(root: Path, n: int) -> Path:
    repo = root / "repo"
    (repo / "tests").mkdir(parents=True)
    (repo / "minibench.py").write_text("def register_cuda_ci(*a, **k):\n    pass\n")
    for i in range(n):
        (repo / "tests" / f"test_t{i:04d}.py").write_text(TEST)
    assets = root / "assets"
    assets.mkdir()
    (assets / "repos.yaml").write_text(textwrap.dedent(f"""\
        default: bench
        repos:
          bench:
            path: {repo}
            format: registry
            roots: [tests]
            timeout: {{floor_s: 60, factor: 1.25}}
            env: {{PYTHONPATH: "{{repo}}"}}
    """))
    (assets / "cluster.yaml").write_text(textwrap.dedent("""\
        default: local
        deployments:
          local:
            launcher: local
            pools:
              h200: {nodes: 1, gpus_per_node: 1}
    """))
    return repo


def bare(repo: Path, n: int) -> float:
    env = {**os.environ, "PYTHONPATH": str(repo)}
    t0 = time.monotonic()
    for i in range(n):
        code = f"import importlib.util as u; s=u.spec_from_file_location('t', 'tests/test_t{i:04d}.py'); m=u.module_from_spec(s); s.loader.exec_module(m); m.execute()"
        subprocess.run([sys.executable, "-c", code], cwd=repo, env=env, check=True)
    return time.monotonic() - t0


def nightly(root: Path) -> float:
    env = {**os.environ, "NIGHTLY_ASSETS_DIR": str(root / "assets"), "NIGHTLY_HOME": str(root / "home")}
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "pipelines", "run"], cwd=ROOT, env=env, capture_output=True, text=True)
    elapsed = time.monotonic() - t0
    if proc.returncode != 0:
        sys.exit(f"nightly run failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return elapsed


def parser() -> argparse.ArgumentParser:
    return argparse.ArgumentParser(prog="bench/overhead.py", description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)


def main(argv: list[str]) -> None:
    parser().parse_args(argv)  # no flags: --help says what it runs instead of running it
    sizes = [int(x) for x in os.environ.get("BENCH_SIZES", "10,40").split(",")]
    rows = []
    for n in sizes:
        root = Path(tempfile.mkdtemp(prefix="nightly-bench-"))
        try:
            repo = make_repo(root, n)
            b = bare(repo, n)
            w = nightly(root)
            rows.append((n, b, w))
        finally:
            shutil.rmtree(root, ignore_errors=True)
    print(f"{'tests':>6} {'bare_s':>8} {'nightly_s':>10} {'overhead_per_test_s':>20}")
    for n, b, w in rows:
        print(f"{n:>6} {b:>8.2f} {w:>10.2f} {(w - b) / n:>20.3f}")
    if len(rows) >= 2:
        (n1, b1, w1), (n2, b2, w2) = rows[0], rows[-1]
        slope = ((w2 - b2) - (w1 - b1)) / (n2 - n1)
        fixed = (w1 - b1) - slope * n1
        print(f"marginal overhead per test: {slope:.3f} s (goal < 0.5 s); fixed cost per night: {fixed:.1f} s "
              "(process start, Dagster import, instance, calibration run)")


if __name__ == "__main__":
    main(sys.argv[1:])
