"""A copy of the project's ``assets/`` for a test, pointing at the example framework by absolute path.

Tests that run nights or load definitions must not write into the repo's own assets or state,
and their working folder is not the project root, so the example's relative paths are made absolute.
"""

from __future__ import annotations

import shutil
from pathlib import Path

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
