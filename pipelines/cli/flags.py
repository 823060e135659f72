"""Flags that several commands share, defined once so they mean the same everywhere.

``nightly plan`` and ``nightly run`` both take ``--timeout-floor``; when each parsed it itself,
``run`` read 0 as "the repo's floor" and ``plan`` as a floor of 0 seconds. Here the flag has one
default (the repo's ``timeout.floor_s``), one range (the one assets/repos.yaml accepts) and one
help text; a value outside it is a :class:`FlagError`, which the dispatcher prints as
``--flag: what is wrong; how to fix`` with exit status 2.

Path flags (``--home``, ``--repo``, ``--out`` ...) take :func:`path` or :func:`path_text` as their
``type``: an empty value (``--home=``, ``--home "$UNSET_VAR"``) would otherwise be ``Path("")``, the
current folder, and a night would write its state into whatever checkout it was started from.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from pipelines.core.model import MAX_EST_TIME_S, timeout_floor_problem


class FlagError(ValueError):
    """A command-line flag has a value the command cannot use; the message says how to fix it."""


#: the deployment's store did not answer (README's exit statuses): a scheduler may retry on 5, never on 2
EXIT_UNREACHABLE = 5


def error_status(exc: BaseException | None) -> int:
    """A command's status for an error it printed: 5 when the deployment's store did not answer (no
    connection, a timeout, S3's 5xx after the client's retries: no flag or input is wrong, and the same
    command may work later), else 2 (a wrong flag, input or setting: retrying will not fix it). Every
    command answers an outage alike, as ``nightly run`` does."""
    from pipelines.storage.state import Unreachable

    return EXIT_UNREACHABLE if isinstance(exc, Unreachable) else 2


def unanswered(exc: BaseException | None, what: str = "the command") -> str:
    """The line that follows an outage's error (nothing for any other error)."""
    if error_status(exc) != EXIT_UNREACHABLE:
        return ""
    return (f"\nthe deployment's store did not answer (exit {EXIT_UNREACHABLE}); no flag or input is wrong: "
            f"run {what} again once it answers")


TIMEOUT_FLOOR_HELP = (f"seconds every test's timeout is at least (timeout = max(floor, est_time x factor)); "
                      f"1 to {MAX_EST_TIME_S} (default: the repo's timeout.floor_s in assets/repos.yaml, "
                      "else 1800)")


def add_timeout_floor(parser: argparse.ArgumentParser) -> None:
    """``--timeout-floor S``: the same flag on every command that plans timeouts."""
    parser.add_argument("--timeout-floor", type=_int_or_text, metavar="S", help=TIMEOUT_FLOOR_HELP)


def timeout_floor(value: int | str | None) -> int | None:
    """The parsed ``--timeout-floor``: None when not given (use the repo's floor), else a checked value."""
    if value is None:
        return None
    if isinstance(value, str):
        raise FlagError(f"--timeout-floor: {value!r} is not a whole number of seconds; give e.g. --timeout-floor 600")
    problem = timeout_floor_problem(value)
    if problem:
        raise FlagError(f"--timeout-floor: {problem}")
    return value


def _int_or_text(text: str) -> int | str:
    """Keep a non-number as text so the command, not argparse, explains it in the house format."""
    try:
        return int(text)
    except ValueError:
        return text


_EMPTY = "empty path; give a folder or file, or leave the flag out for its default"


def path(text: str) -> Path:
    """``type=`` of a flag naming a folder or file: an empty value is a usage error (exit 2)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(_EMPTY)
    return Path(text)


def path_text(text: str) -> str:
    """``type=`` of a path flag the command keeps as text (``--repo``: a repo name in assets/repos.yaml
    or a checkout path): an empty value is a usage error (exit 2)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(_EMPTY)
    return text
