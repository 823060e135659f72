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

from pipelines.interrupts import (  # light: the rest is imported once it is set
    answer_interrupts,
    forget_interrupts,
    lost_interrupt,
)

#: the reader of stdout stopped early (``| head``): 128 + SIGPIPE, as a shell reports it
EXIT_READER_GONE = 141

#: Ctrl-C or SIGTERM: 128 + SIGINT, as a shell reports a Ctrl-C, for both signals
EXIT_INTERRUPTED = 130

COMMANDS = ("catalog", "plan", "run", "history", "calibrate", "report", "quarantine", "ui", "coverage", "doctor",
            "readd")


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


def user_errors() -> tuple[type[Exception], ...]:
    """Errors that are the user's input or environment, not a bug: one clear message, exit 2.

    Imported here, not at the top: the package's imports take half a second, and a signal then
    must already meet the handlers :func:`main` sets first."""
    from pipelines.cli.flags import FlagError
    from pipelines.core.history import HistoryError
    from pipelines.core.model import CatalogError
    from pipelines.core.select import SelectionError
    from pipelines.storage.cache import BuildError
    from pipelines.storage.state import StateError

    return CatalogError, HistoryError, SelectionError, BuildError, StateError, FlagError


def main(argv: list[str] | None = None) -> int:
    # first: Ctrl-C or SIGTERM at any point, the catalog, the plan or Dagster's setup included, is
    # exit 130 and one line (SIGTERM was the OS default until Dagster ran: exit 143, no word); and a
    # process started with `&` from a script inherits SIGINT ignored, which SIGTERM would then follow
    answer_interrupts()
    forget_interrupts()  # what an earlier command in this process swallowed was that command's
    argv = sys.argv[1:] if argv is None else argv
    command = next((a for a in argv if a in COMMANDS), "")  # for the message, should parsing be cut short
    errors: tuple[type[Exception], ...] = ()
    try:
        errors = user_errors()
        args = build_parser().parse_args(argv)
        command = args.command
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's flush at exit
        if lost_interrupt() is not None:  # a Ctrl-C a finalizer swallowed (`nightly run` acts on its own earlier)
            raise KeyboardInterrupt
        return code
    except KeyboardInterrupt:
        print(f"nightly{' ' + command if command else ''}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        _stdout_to_devnull()
        return EXIT_READER_GONE
    except errors as exc:
        from pipelines.cli.flags import error_status, unanswered

        print(f"nightly {command}: error:\n{exc}{unanswered(exc)}", file=sys.stderr)
        return error_status(exc)


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
