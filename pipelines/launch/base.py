"""The one launcher interface shared by the local and the Kubernetes launcher.

A launcher runs one attempt of one test and returns an :class:`Attempt`; it never decides what
runs next (that is the dispatcher's job) and never retries test failures.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

from pipelines.core.model import Attempt, Test


@dataclass(frozen=True)
class LaunchRequest:
    """Everything one attempt needs; built by the dispatcher from the plan and the specs."""

    test: Test
    repo_path: Path
    timeout_s: int
    log_path: Path
    env: dict[str, str] = field(default_factory=dict)
    attempt: int = 1
    run_id: str = ""
    night: str = ""
    pool: str = ""
    #: node index and GPU indices the dispatcher reserved for this attempt
    node: int = 0
    gpu_slots: tuple[int, ...] = ()
    #: nodes this attempt must not land on (earlier infra failures, bad nodes)
    avoid_nodes: tuple[str, ...] = ()


LogSink = Callable[[str], None]


class Launcher(Protocol):
    """Runs one attempt and reports it; implementations: ``local`` and ``kubernetes``."""

    name: str

    def launch(self, request: LaunchRequest, on_log: LogSink | None = None) -> Attempt: ...


class Interruptible(Protocol):
    """A launcher the night can stop: every running ``launch()`` kills its test's processes and
    returns ``interrupted``; later calls start nothing. Returns the ids of the running tests.
    ``at``: when the signal that stopped the night arrived (``time.monotonic()``), ``signum`` which
    one (0: not known); None where no signal stopped it (an error)."""

    def interrupt(self, signum: int = 0, at: float | None = None) -> list[str]: ...


def tail(path: Path | str, max_lines: int = 40, max_chars: int = 4000) -> str:
    """The last lines of a log file, for UI metadata and terminal summaries: only the file's end is
    read, and lines and the whole are bounded in characters as the report's are (core.report.tail_lines)."""
    from pipelines.core.report import TAIL_LINE_CHARS, tail_lines
    from pipelines.storage.state import read_end

    try:
        text, mid_line = read_end(path, 4 * max_chars + 4096)  # every character that can be shown, 4 bytes each
    except OSError:
        return ""
    return tail_lines(text, max_lines, max_chars=max_chars, line_chars=min(TAIL_LINE_CHARS, max_chars // 2),
                      start_unread=mid_line)


#: a line longer than this cannot be a configuration report (``config NAME: passed``): it is skipped
#: in chunks, so a log of one line of gigabytes (a pod log has no cap) is never held whole
CONFIG_LINE_MAX = 64 * 1024


def _config_lines(path: str) -> list[str]:
    """The log's lines that mention ``config `` (decoded), each of at most CONFIG_LINE_MAX bytes."""
    out: list[str] = []
    with open(path, "rb") as fh:
        while True:
            line = fh.readline(CONFIG_LINE_MAX)
            if not line:
                return out
            if not line.endswith(b"\n") and len(line) == CONFIG_LINE_MAX:
                while (more := fh.readline(CONFIG_LINE_MAX)) and not more.endswith(b"\n"):
                    pass  # the rest of an overlong line: no report
                continue
            if b"config " in line:
                out.append(line.decode("utf-8", errors="replace"))


def judge_reported_configs(attempt: Attempt) -> Attempt:
    """Keep the configurations the test reported (``config NAME: passed|failed``, docs/coverage.md) with the
    attempt, and fail a pass whose log reports a failed one: a matrix test may print a cell's failure
    and still exit 0, and the night must not call that green. Every launcher's attempt goes through
    this (the dispatcher calls it), so local and Kubernetes attempts are judged alike. The whole log
    file is read: a failure reported early in a long log counts as much as one at its end, and the
    local launcher's capped log writes the reports of the part it cut at the cut (``logcap``)."""
    from pipelines.core.coverage.outcomes import config_outcomes

    if not attempt.log_path:
        return attempt
    try:  # only the lines that can report a configuration: a log may be 20 MB, or one line of gigabytes
        lines = _config_lines(attempt.log_path)
    except OSError:
        return attempt
    configs = config_outcomes("".join(lines))
    if not configs:
        return attempt
    attempt.details["configs"] = ",".join(f"{k}={v}" for k, v in configs.items())
    failed = [name for name, outcome in configs.items() if outcome == "failed"]
    if failed and attempt.outcome == "passed":
        return replace(attempt, outcome="failed", reason=f"config {', '.join(failed)} reported failed")
    return attempt
