"""Make SIGINT and SIGTERM stop a night, however the process was started and wherever the signal lands.

A command started with ``&`` from a non-interactive shell (a cron script, a CI step) inherits
SIGINT ignored. Dagster maps SIGTERM onto whatever SIGINT's handler is whenever it enters or
leaves an execution, so such a process ends up ignoring SIGTERM as well, and ignored signals
survive exec: the tests and builds it starts then ignore the SIGTERM a launcher or an operator
sends. Taking SIGINT back to Python's default (KeyboardInterrupt) keeps both signals working.

SIGTERM raises KeyboardInterrupt too, from the command's first line on, as it does once Dagster
has run anything: left at the OS default until then, a SIGTERM during the catalog, the plan or
Dagster's setup of the run killed ``nightly run`` silently (exit 143) and left its Dagster run
NOT_STARTED for ever. Handlers, unlike ignored signals, do not survive exec, so the tests and
builds a night starts still get the OS default.

Dagster may also keep a signal to itself: its handler only sets a flag and raises it at its next
checkpoint, which may fail the run as "interrupted unexpectedly" or never come. :func:`signals_seen`
tells a command whether SIGINT/SIGTERM arrived, whoever's handler took it.

A handler raises in whatever frame runs, and that may be a garbage-collection callback or a finalizer
(SQLAlchemy's ``_collection_gced``, a ``__del__``): Python discards an exception raised there, so the
KeyboardInterrupt (or Dagster's interruption) was lost and the night ran to its end. The interruption a
finalizer swallows is kept (:func:`keep_lost_interrupts`) and the night takes it at its next safe point
(:func:`lost_interrupt`), as if it had arrived there.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator

INTERRUPTING = frozenset({signal.SIGINT, signal.SIGTERM})


#: the last signal :func:`interrupt` took, (signum, time.monotonic() as it came): which signal a
#: KeyboardInterrupt a finalizer swallowed stood for
_taken: list[tuple[int, float]] = []
#: interruptions a finalizer or a callback swallowed, (signum or 0 when not known, time.monotonic() as it
#: came), oldest first, until :func:`lost_interrupt` takes them
_lost: list[tuple[int, float]] = []
#: what Dagster's handler raises during a step (by name: no Dagster import here)
_INTERRUPTION_NAMES = frozenset({"KeyboardInterrupt", "DagsterExecutionInterruptedError"})


def interrupt(signum: int, _frame) -> None:
    """The handler :func:`answer_interrupts` sets: KeyboardInterrupt, as ``signal.default_int_handler``,
    once the signal is noted (which one and when), should a finalizer swallow the exception."""
    _taken[:] = [(signum, time.monotonic())]
    raise KeyboardInterrupt


def answer_interrupts() -> bool:
    """SIGINT and SIGTERM both raise KeyboardInterrupt from here on (:func:`interrupt`), as Dagster maps
    them during an execution, unless a handler of the embedding program's own is set; returns whether
    one changed. An interruption a finalizer swallows is kept from here on (:func:`keep_lost_interrupts`).

    Only the main thread may set handlers; elsewhere this does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        return False
    keep_lost_interrupts()
    changed = False
    for sig in (signal.SIGINT, signal.SIGTERM):  # the OS default, inherited ignored, or Python's own
        if signal.getsignal(sig) in (signal.SIG_IGN, signal.SIG_DFL, signal.default_int_handler):
            signal.signal(sig, interrupt)
            changed = True
    return changed


def keep_lost_interrupts() -> None:
    """From here on, a KeyboardInterrupt or Dagster's interruption that Python discards because it was
    raised in a finalizer or a callback (``Exception ignored in: <function _collection_gced ...>``) is
    kept for :func:`lost_interrupt` instead of printed; any other such exception is printed as before."""
    previous = sys.unraisablehook
    if getattr(previous, "keeps_lost_interrupts", False):
        return

    def hook(unraisable) -> None:
        if unraisable.exc_type is None or unraisable.exc_type.__name__ not in _INTERRUPTION_NAMES:
            previous(unraisable)
            return
        # our handler's KeyboardInterrupt says which signal it was and when it came; Dagster's does not
        came = _taken.pop() if _taken and unraisable.exc_type is KeyboardInterrupt else (0, time.monotonic())
        _lost.append(came)

    hook.keeps_lost_interrupts = True  # type: ignore[attr-defined]
    sys.unraisablehook = hook


def forget_interrupts() -> None:
    """Start a command with nothing kept: an interrupt an earlier command in this process had swallowed
    (``main()`` called twice in one Python) is that command's, never the next one's."""
    _lost.clear()
    _taken.clear()


def from_interrupt(exc: BaseException) -> bool:
    """Whether ``exc`` is a signal's interrupt a library turned into an error of its own: a KeyboardInterrupt
    (or Dagster's interrupt) in its chain of causes, or named in its message as pydantic's SchemaError
    names it (``... KeyboardInterrupt()``, raised ``from None``). Any other error is the error it says."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if type(e).__name__ in _INTERRUPTION_NAMES or "KeyboardInterrupt" in str(e):
            return True
        e = e.__cause__ or e.__context__
    return False


def lost_interrupt() -> tuple[int, float] | None:
    """(signum or 0, time.monotonic() as it came) of the first interruption a finalizer swallowed since the
    last call, which the caller now acts on as if it had arrived in its frame; None when there was none.
    Each is returned once: the rest are the same stop asked again."""
    if not _lost:
        return None
    first = _lost[0]
    _lost.clear()
    return first


@contextlib.contextmanager
def signals_seen() -> Iterator[set[int]]:
    """The set of interrupting signals (SIGINT, SIGTERM) that reached this process while the block
    ran; filled when the block ends.

    Python writes each signal's number to the wakeup fd before any handler runs, whichever handler
    Dagster has swapped in (its handlers change around every step, so one of ours would not stay).
    Only the main thread may set it; elsewhere the set stays empty.
    """
    seen: set[int] = set()
    if threading.current_thread() is not threading.main_thread():
        yield seen
        return
    reader, writer = socket.socketpair()
    reader.setblocking(False)
    writer.setblocking(False)
    previous = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    try:
        yield seen
    finally:
        signal.set_wakeup_fd(previous)
        with contextlib.suppress(BlockingIOError):
            while chunk := reader.recv(4096):
                seen.update(n for n in chunk if n in INTERRUPTING)
        reader.close()
        writer.close()


#: said once when a signal arrives while a night is being stopped
STILL_STOPPING = ("nightly: still stopping the night: killing its tests and writing its record; this signal is "
                  "noted, not acted on (kill -9 only if this hangs: the next night reaps what is left)\n")


#: told of each signal a :func:`held_signals` block holds, as it is held: see :func:`signals_noted`
_noting: list[Callable[[int, float], None]] = []


@contextlib.contextmanager
def signals_noted(note: Callable[[int, float], None]) -> Iterator[None]:
    """While the block runs (across a generator's yields too), ``note(signum, time.monotonic())`` runs, in
    the handler, as any :func:`held_signals` block holds SIGINT or SIGTERM: whichever step holds it (the
    dispatcher's wait for a finished test, the Dagster asset's conversion of an event), what must not wait
    for its delivery learns of it at once: a dispatcher that must start no new test, and must know which
    signal stopped its night and when it came. ``note`` must not take a lock a held block's code may hold."""
    _noting.append(note)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            _noting.remove(note)


@contextlib.contextmanager
def held_signals(stopping: bool = True) -> Iterator[list[int]]:
    """SIGINT and SIGTERM wait while the block runs; the list says which came.

    ``stopping``: the block stops an interrupted night (its tests killed, its record written), which
    a second Ctrl-C would cut short and lose; the held signals are said once and dropped (the first
    interruption is already on its way). Otherwise the block is one step of reporting that must not
    be cut in half (a finished test taken off the queue but not yet handed on): the caller passes
    the list to :func:`deliver` once the step is done. Each held signal is told at once to
    :func:`signals_noted`'s ``note``. Only the main thread may set handlers; elsewhere signals are
    not delivered to the block anyway.
    """
    held: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield held
        return

    def hold(signum: int, _frame) -> None:
        at = time.monotonic()
        if stopping and not held:
            with contextlib.suppress(OSError):  # a handler may not log: os.write is safe here
                os.write(2, STILL_STOPPING.encode())
        held.append(signum)
        for note in list(_noting):
            note(signum, at)

    previous = {sig: signal.getsignal(sig) for sig in INTERRUPTING}
    for sig in INTERRUPTING:
        signal.signal(sig, hold)
    try:
        yield held
    finally:
        for sig, handler in previous.items():
            if handler is not None:  # None: set outside Python, cannot be put back (left as ours)
                signal.signal(sig, handler)


def deliver(held: list[int]) -> None:
    """Hand the first signal :func:`held_signals` held to the handler in place now, here, as Python
    would have: a handler that raises raises in this frame. Not by sending it again: ``nightly run``
    blocks SIGINT in every thread and relays it, so a signal a thread sends to itself stays pending."""
    if not held:
        return
    handler = signal.getsignal(held[0])
    if callable(handler):
        handler(held[0], None)
    elif handler == signal.SIG_DFL:  # the OS default ends the process: as the signal would have
        os.kill(os.getpid(), held[0])
