"""What ``nightly run`` prints while Dagster runs the night in this process, Ctrl-C included.

A Ctrl-C used to end in ~80 lines: Dagster's console logger printed the cancelled run's stack,
and Dagster's log-mirroring helpers (``tail`` and a ``watch_orphans.py`` per stream, spawned in
our process group) each died with a KeyboardInterrupt traceback. The interruption itself is
expected and the command says so in two lines of its own, so:

- :data:`night_console` is the console logger of the night: Dagster's warnings and errors as
  before, except the records that only say "interrupted", or that the store refused the night's
  results (the command says where they are kept; the run's stack stays in the UI);
- :func:`sigint_for_this_process_only` keeps the terminal's SIGINT from the helpers Dagster
  spawns (they inherit a blocked SIGINT and are stopped by Dagster as usual) while this process
  still gets it at once. Tests (launch/wrapper.py) and input builds (storage/cache.py, through
  launch/procs.with_signals_unblocked) start with nothing blocked, so nothing we launch changes:
  the night still kills and records them;
- :func:`interruptions_unlogged` keeps libraries that log an exception before re-raising it
  (sqlalchemy's pool, when the interrupt lands while it closes a connection) from printing the
  interruption's stack.
"""

from __future__ import annotations

import _thread
import logging
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import dagster as dg

#: errors that mean "the run was interrupted", not "something broke"
INTERRUPTIONS = ("DagsterExecutionInterruptedError", "KeyboardInterrupt")
#: errors the command says in its own words, so their stack stays in the UI: an interruption, and
#: results the store refused (pipelines.night.ResultsNotStored: the command prints where they are kept)
SAID_BY_THE_COMMAND = (*INTERRUPTIONS, "ResultsNotStored")


def is_interruption(record: logging.LogRecord, names: tuple[str, ...] = INTERRUPTIONS) -> bool:
    """Whether a Dagster log record reports only that the run or a step was interrupted (or, with
    ``names``, failed with one of those errors anywhere in its chain)."""
    meta = getattr(record, "dagster_meta", None) or {}
    event = meta.get("dagster_event") if isinstance(meta, dict) else None
    error = getattr(getattr(event, "event_specific_data", None), "error", None)
    while error is not None:
        if getattr(error, "cls_name", None) in names:
            return True
        error = getattr(error, "cause", None) or getattr(error, "context", None)
    return False


class _DropInterruptions(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not is_interruption(record, SAID_BY_THE_COMMAND)


class _DropRaisedInterruptions(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        raised = record.exc_info[0] if record.exc_info else None
        return not (raised is not None and raised.__name__ in INTERRUPTIONS)


@contextmanager
def interruptions_unlogged(names: tuple[str, ...] = ("sqlalchemy",)) -> Iterator[None]:
    """While the block runs, the named libraries' warnings and errors reach stderr as before, except an interruption.

    A Ctrl-C can land while sqlalchemy's pool closes a connection; the pool then logs "Exception
    closing connection" with the interruption's stack before re-raising it, and the interruption
    is already said once by the command. Everything else those loggers say still prints.
    """
    handler = logging.StreamHandler(sys.stderr)
    handler.setLevel(logging.WARNING)
    handler.addFilter(_DropRaisedInterruptions())
    loggers = [logging.getLogger(name) for name in names]
    saved = [logger.propagate for logger in loggers]
    for logger in loggers:
        logger.addHandler(handler)
        logger.propagate = False  # said here, not a second time by a root handler (or Python's last resort)
    try:
        yield
    finally:
        for logger, propagate in zip(loggers, saved, strict=True):
            logger.removeHandler(handler)
            logger.propagate = propagate


@dg.logger(config_schema={"log_level": dg.Field(str, is_required=False, default_value="WARNING"),
                          "name": dg.Field(str, is_required=False, default_value="dagster")},
           description="Dagster's warnings and errors on the terminal, without the stacks of an interruption.")
def night_console(init_context) -> logging.Logger:
    config = init_context.logger_config
    logger = logging.Logger(config["name"], level=logging.getLevelName(config["log_level"].upper()))
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s - %(name)s - %(levelname)s - %(message)s"))
    handler.addFilter(_DropInterruptions())
    logger.addHandler(handler)
    return logger


@contextmanager
def sigint_for_this_process_only() -> Iterator[None]:
    """While the block runs, a SIGINT reaches this process's handlers but not the processes it starts.

    SIGINT is blocked in every thread (children inherit the mask); a relay thread takes it with
    ``sigwait`` and hands it to the main thread (``interrupt_main``), plus a SIGUSR1 poke so a
    main thread waiting in a system call wakes up and sees it at once.
    """
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "pthread_sigmask"):
        yield
        return
    main = threading.main_thread().ident
    stop = threading.Event()
    previous_poke = signal.signal(signal.SIGUSR1, lambda *_: None)
    previous_mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})

    def relay() -> None:
        while True:
            signal.sigwait({signal.SIGINT})
            if stop.is_set():
                return
            _thread.interrupt_main(signal.SIGINT)
            signal.pthread_kill(main, signal.SIGUSR1)  # type: ignore[arg-type]

    thread = threading.Thread(target=relay, name="sigint-relay", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        signal.pthread_kill(thread.ident, signal.SIGINT)  # type: ignore[arg-type]  # wakes the relay to end it
        thread.join(timeout=5)
        signal.pthread_sigmask(signal.SIG_SETMASK, previous_mask)
        signal.signal(signal.SIGUSR1, previous_poke)
