"""A copy of the project's ``assets/`` for a test, pointing at the example framework by absolute path.

Tests that run nights or load definitions must not write into the repo's own assets or state,
and their working folder is not the project root, so the example's relative paths are made absolute.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

from tests.conftest import PROJECT_ROOT

EXAMPLE = PROJECT_ROOT / "examples" / "minirl"


def example_assets(dest: Path, repo: Path = EXAMPLE, floor_s: int | None = None) -> Path:
    """Copy ``assets/`` to ``dest`` with the minirl repo at ``repo`` (a copy, or the example itself)
    and its local hub at the example's; ``floor_s``: another timeout floor for it. Returns ``dest``."""
    shutil.copytree(PROJECT_ROOT / "assets", dest, dirs_exist_ok=True)
    repos = dest / "repos.yaml"
    text = (repos.read_text().replace("path: examples/minirl", f"path: {repo}")
            .replace("hub: examples/minirl/hub", f"hub: {EXAMPLE / 'hub'}"))
    if floor_s is not None:
        text = text.replace("floor_s: 60", f"floor_s: {floor_s}")
    repos.write_text(text)
    return dest


def copied_example(tmp: Path) -> tuple[Path, Path]:
    """(repo, assets): the example framework copied to ``tmp/minirl`` (so a test may add or change
    its test files) and ``assets/`` at ``tmp/assets`` pointing at that copy."""
    repo = tmp / "minirl"
    shutil.copytree(EXAMPLE, repo)
    return repo, example_assets(tmp / "assets", repo)


def two_node_example(tmp: Path, test_file: str, count: int = 6) -> tuple[Path, Path]:
    """(repo, assets): :func:`copied_example` with ``count`` copies of ``test_file`` added as
    ``tests/e2e/test_f_node<i>.py`` and a deployment ``two`` of two local 8-GPU H200 nodes: where a
    broken node's failures and their retries on the other node are tried."""
    repo, assets = copied_example(tmp)
    for i in range(1, count + 1):
        (repo / "tests" / "e2e" / f"test_f_node{i}.py").write_text(test_file)
    cluster = yaml.safe_load((assets / "cluster.yaml").read_text())
    cluster["deployments"]["two"] = {"launcher": "local", "storage": "local", "skip_hardware": ["mi300"],
                                     "pools": {"h200": {"nodes": 2, "gpus_per_node": 8}}}
    (assets / "cluster.yaml").write_text(yaml.safe_dump(cluster))
    return repo, assets


#: the registry module of :func:`registry_repo`: framework M's dialect, read from the files without importing them
REGISTRY = "def register_cuda_ci(est_time, suite, *, labels=(), nightly=False, disabled=None):\n    pass\n"
#: a test file of :func:`registry_repo` that registers one 2-GPU test and ends at once
#: QUICK_TEST's main block: it must do something (a block that only passes runs no test, and fails);
#: tests replace this line to make the test do something else
QUICK_MAIN = '    print("the quick test ran")\n'
QUICK_TEST = """from ci_register import register_cuda_ci

register_cuda_ci(est_time={est}, suite="stage-b-2-gpu-h200", labels=["fx"])

if __name__ == "__main__":
""" + QUICK_MAIN


def registry_repo(tmp: Path, files: dict[str, str]) -> tuple[Path, Path]:
    """(repo, assets): a tiny framework checkout at ``tmp/fw`` (``files`` under ``tests/e2e/`` beside its
    registry module, a git repository) and ``assets/`` at ``tmp/assets`` with it as repo ``fw``: a night
    of a few tests that end at once, for the paths around the tests rather than the tests themselves."""
    import subprocess

    repo = tmp / "fw"
    (repo / "tests" / "e2e").mkdir(parents=True)
    (repo / "tests" / "e2e" / "ci_register.py").write_text(REGISTRY)
    for name, text in files.items():
        (repo / "tests" / "e2e" / name).write_text(text)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    assets = example_assets(tmp / "assets")
    with open(assets / "repos.yaml", "a") as fh:
        fh.write(f"  fw:\n    path: {repo}\n")
    return repo, assets
