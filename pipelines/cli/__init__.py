"""The ``nightly`` command: one subcommand per step of the loop, each a thin layer over the core.

Each subcommand lives in its own module exposing ``register(subparsers)``; the parser sets
``func`` to the module's ``run(args) -> int``. Modules import Dagster lazily so that
``nightly catalog`` and ``nightly plan`` start fast.
"""

from __future__ import annotations

import argparse
import importlib
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
        return int(args.func(args) or 0)
    except USER_ERRORS as exc:
        print(f"nightly {args.command}: error:\n{exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"nightly {args.command}: interrupted", file=sys.stderr)
        return 130


def entrypoint() -> None:
    sys.exit(main())
