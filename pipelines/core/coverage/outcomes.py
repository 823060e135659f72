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
    """Configuration name -> ``passed`` / ``failed`` in the order first reported.

    A configuration reported twice (a retry inside the test, or two rows sharing a name) keeps
    ``failed`` if either report says so: a later pass must not hide a failure."""
    out: dict[str, str] = {}
    for match in _LINE.finditer(log):
        name, outcome = match.groups()
        if out.get(name) != "failed":
            out[name] = outcome
    return out
