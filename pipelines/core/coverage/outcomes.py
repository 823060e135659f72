"""Per-configuration outcomes, where a test reports them in its log.

A test that loops over its matrix can print ``config NAME: passed`` or ``config NAME: failed``
(any prefix, e.g. ``[minirl] ``) after each configuration; history can then record which cell
failed, not only that the file did. A configuration the log never reports is absent (the run
stopped before it), never guessed.
"""

from __future__ import annotations

import re

OUTCOMES = ("passed", "failed")
_LINE = re.compile(r"(?:^|\s)config (\S+): (passed|failed)\s*$", re.MULTILINE)


def config_outcomes(log: str) -> dict[str, str]:
    """Configuration name -> ``passed`` / ``failed`` in the order reported (a later report wins)."""
    out: dict[str, str] = {}
    for match in _LINE.finditer(log):
        out[match.group(1)] = match.group(2)
    return out
