"""The ``nightly`` command: one subcommand per step of the loop, each a thin layer over the core.

Each subcommand lives in its own module exposing ``register(subparsers)``; the parser sets
``func`` to the module's ``run(args) -> int``. Modules import Dagster lazily so that
``nightly catalog`` and ``nightly plan`` start fast.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from pipelines.cli.flags import FlagError
from pipelines.core.history import HistoryError
from pipelines.core.model import CatalogError
from pipelines.core.select import SelectionError
from pipelines.interrupts import answer_interrupts
from pipelines.storage.cache import BuildError
from pipelines.storage.state import StateError

#: errors that are the user's input or environment, not a bug: one clear message, exit 2
USER_ERRORS = (CatalogError, HistoryError, SelectionError, BuildError, StateError, FlagError)

#: the reader of stdout stopped early (``| head``): 128 + SIGPIPE, as a shell reports it
EXIT_READER_GONE = 141

COMMANDS = ("catalog", "plan", "run", "history", "calibrate", "report", "quarantine", "ui", "coverage", "doctor")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nightly",
        description="Run the GPU e2e suites of a training framework: catalog, plan, run, calibrate.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMANDS:
        importlib.import_module(f"pipelines.cli.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    answer_interrupts()  # started with `&` from a script: SIGTERM must still stop the night
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's flush at exit
        return code
    except BrokenPipeError:
        _stdout_to_devnull()
        return EXIT_READER_GONE
    except USER_ERRORS as exc:
        print(f"nightly {args.command}: error:\n{exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"nightly {args.command}: interrupted", file=sys.stderr)
        return 130


def _stdout_to_devnull() -> None:
    """The reader of stdout is gone (``nightly plan | head -1``): what is still buffered goes nowhere.

    Python's documented way: point the stdout file descriptor at /dev/null so the flush at exit
    does not fail a second time and print "Exception ignored ... BrokenPipeError".
    """
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # replaced by a test harness: nothing to redirect
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


def entrypoint() -> None:
    sys.exit(main())
