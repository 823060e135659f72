"""Make SIGINT and SIGTERM stop a night, however the process was started.

A command started with ``&`` from a non-interactive shell (a cron script, a CI step) inherits
SIGINT ignored. Dagster maps SIGTERM onto whatever SIGINT's handler is whenever it enters or
leaves an execution, so such a process ends up ignoring SIGTERM as well, and ignored signals
survive exec: the tests and builds it starts then ignore the SIGTERM a launcher or an operator
sends. Taking SIGINT back to Python's default (KeyboardInterrupt) keeps both signals working.
"""

from __future__ import annotations

import signal
import threading


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
