"""Make SIGINT and SIGTERM stop a night, however the process was started.

A command started with ``&`` from a non-interactive shell (a cron script, a CI step) inherits
SIGINT ignored. Dagster maps SIGTERM onto whatever SIGINT's handler is whenever it enters or
leaves an execution, so such a process ends up ignoring SIGTERM as well, and ignored signals
survive exec: the tests and builds it starts then ignore the SIGTERM a launcher or an operator
sends. Taking SIGINT back to Python's default (KeyboardInterrupt) keeps both signals working.

Dagster may also keep a signal to itself: its handler only sets a flag and raises it at its next
checkpoint, which may fail the run as "interrupted unexpectedly" or never come. :func:`signals_seen`
tells a command whether SIGINT/SIGTERM arrived, whoever's handler took it.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import threading
from collections.abc import Iterator

INTERRUPTING = frozenset({signal.SIGINT, signal.SIGTERM})


def answer_interrupts() -> bool:
    """Restore SIGINT's default handler if it was inherited ignored; returns whether it was.

    Only the main thread may set handlers; elsewhere this does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        return False
    changed = False
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        changed = True
    if signal.getsignal(signal.SIGTERM) == signal.SIG_IGN:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        changed = True
    return changed


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
