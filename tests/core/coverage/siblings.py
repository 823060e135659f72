"""Helpers for coverage tests: an in-memory source of files and sibling tests on a 2x2 grid."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

from pipelines.core.coverage import Dimension, Group


class FilesSource(dict):
    """Repo-relative path -> text (stored as UTF-8) or bytes, standing in for a checkout or a git revision."""

    def read(self, path: str) -> bytes | None:
        data = self.get(path)
        return data.encode() if isinstance(data, str) else data

    def files_mentioning(self, text: str, roots: Sequence[str]) -> list[str]:
        return sorted(p for p in self if p.endswith(".py") and text.encode() in self.read(p)
                      and any(p.startswith(f"{r}/") for r in roots))


def sibling(*configs: tuple, group: str | None = None) -> str:
    """A test file whose `_CONFIGS` holds these (name, backend, shared_outer, virtual_experts) rows."""
    rows = "".join(f"    {row!r},\n" for row in configs)
    marker = f"# coverage-group: {group}\n" if group else ""
    return textwrap.dedent('''\
        """A LoRA sibling."""
        NUM_GPUS = 2

        ''') + marker + "# (name, backend, shared_outer, virtual_experts)\n_CONFIGS = [\n" + rows + "]\n"


DIAGONAL = (("m-shared", "megatron", True, True), ("t-per", "tilelang", False, False))
ANTI_DIAGONAL = (("m-per", "megatron", False, False), ("t-shared", "tilelang", True, True))
FIVE, SIX = "tests/lora/test_moe_5layer.py", "tests/lora/test_moe_6layer.py"

BACKEND = Dimension("backend", ("backend",), (("megatron", ("megatron",)), ("tilelang", ("tilelang",))))
LAYOUT = Dimension("layout", ("shared_outer", "virtual_experts"),
                   (("shared+virtual", ("true", "true")), ("per-expert", ("false", "false"))))


def lora_group(*tests: str, **overrides) -> Group:
    base = dict(name="lora", tests=tests or (FIVE, SIX), dimensions=(BACKEND, LAYOUT), origin="coverage.yaml:3")
    return Group(**{**base, **overrides})
