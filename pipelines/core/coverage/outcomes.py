"""Per-configuration outcomes, where a test reports them in its log.

A test that loops over its matrix can print ``config NAME: passed`` or ``config NAME: failed``
after each configuration, at the line's start or after a prefix that ends in a space, ``:`` or
``]``: its own tag (``[minirl] ``), Python logging's default ``INFO:__main__:``, torchrun
``--tee``'s ``[default0]:``. ``myconfig``, ``auto-config`` or ``/etc/nccl.config`` is another word,
never a report. Terminal colour codes are ignored. History
can then record which cell failed, not only that the file did. A configuration the log never reports
is absent (the run stopped before it), never guessed.
"""

from __future__ import annotations

import re

OUTCOMES = ("passed", "failed")
#: ``config`` at the line's start or after what ends a prefix (a space, a logger's ``:``, a tag's ``]``);
#: any other character before it makes another word (``auto-config``, ``nccl.config``)
_LINE = re.compile(r"(?:^|(?<=[\s:\]]))config (\S+): (passed|failed)\s*$", re.MULTILINE)
#: the judge's report line, for the capped log, which confirms with it each line its bytes search finds
REPORT_LINE = _LINE
#: a terminal control sequence (``ESC [ 1;31 m``): a coloured logger wraps the report in them
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")


def config_outcomes(log: str) -> dict[str, str]:
    """Configuration name -> ``passed`` / ``failed`` in the order first reported.

    A configuration reported twice (a retry inside the test, or two rows sharing a name) keeps
    ``failed`` if either report says so: a later pass must not hide a failure."""
    out: dict[str, str] = {}
    if "\x1b" in log:
        log = _ANSI.sub("", log)
    for match in _LINE.finditer(log):
        name, outcome = match.groups()
        if out.get(name) != "failed":
            out[name] = outcome
    return out
