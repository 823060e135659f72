"""Synthetic framework trees written into tmp_path."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest


@pytest.fixture
def tree(tmp_path: Path) -> Callable[[dict[str, str]], Path]:
    """Write ``{relative path: source}`` (dedented) under a fresh repo folder and return it."""
    repo = tmp_path / "repo"
    repo.mkdir()

    def write(files: dict[str, str]) -> Path:
        for rel, text in files.items():
            path = repo / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(textwrap.dedent(text).lstrip("\n"))
        return repo

    return write
