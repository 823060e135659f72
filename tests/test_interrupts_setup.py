"""A process started with SIGINT ignored (``cmd &`` in a script) still stops on SIGTERM after Dagster ran."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import PROJECT_ROOT

# each test starts a fresh Python that imports Dagster (about 3 s): not for the edit loop
pytestmark = pytest.mark.slow

# SIGINT (and SIGTERM) ignored as a non-interactive shell's `&` leaves them, then exec'd
IGNORED = ("import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); "
           "signal.signal(signal.SIGTERM, signal.SIG_IGN); os.execv(sys.executable, [sys.executable, *sys.argv[1:]])")

# what Dagster does on entering and leaving an execution: SIGTERM takes SIGINT's handler
CHECK = """
import signal, sys
from dagster._utils.interrupts import setup_interrupt_handlers
{setup}
setup_interrupt_handlers()
print(signal.getsignal(signal.SIGTERM) == signal.SIG_IGN, signal.getsignal(signal.SIGINT) == signal.SIG_IGN)
"""


def _ignored_after_dagster(setup: str) -> str:
    done = subprocess.run([sys.executable, "-c", IGNORED, "-c", CHECK.format(setup=setup)], cwd=PROJECT_ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_without_the_fix_dagster_leaves_sigterm_ignored():
    assert _ignored_after_dagster("") == "True True"


def test_answer_interrupts_keeps_sigterm_and_sigint_working_after_dagster():
    setup = "from pipelines.interrupts import answer_interrupts\nassert answer_interrupts()"
    assert _ignored_after_dagster(setup) == "False False"


def test_signals_seen_reports_a_signal_whichever_handler_took_it():
    import os
    import signal

    from pipelines.interrupts import signals_seen

    previous = signal.signal(signal.SIGTERM, lambda *_: None)  # as Dagster's flag-only handler
    try:
        with signals_seen() as seen:
            os.kill(os.getpid(), signal.SIGTERM)
        assert seen == {signal.SIGTERM}
        with signals_seen() as seen:
            pass
        assert seen == set()
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_an_interrupt_a_weakref_callback_swallows_is_kept_once_and_other_lost_errors_still_reach_the_hook(
        monkeypatch):
    """As SQLAlchemy's gc callback `_collection_gced`: the handler's KeyboardInterrupt raised in a weakref callback
    is discarded by Python ("Exception ignored in"); it is kept, with its signal and when it came, for the night's
    next safe point. Any other exception lost there still goes to the hook in place before (printed)."""
    import os
    import signal
    import sys
    import time
    import weakref

    from pipelines import interrupts

    printed = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: printed.append(u.exc_type))
    interrupts.keep_lost_interrupts()
    previous = signal.signal(signal.SIGTERM, interrupts.interrupt)

    class Owner:
        pass

    def signalled(_ref):
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(50):
            time.sleep(0.01)  # the handler runs here

    try:
        owner = Owner()
        ref = weakref.ref(owner, signalled)  # noqa: F841 - kept alive so its callback runs
        sent = time.monotonic()
        del owner  # the callback runs now; its KeyboardInterrupt goes no further
        ref2 = weakref.ref(owner2 := Owner(), lambda _r: 1 / 0)  # noqa: F841
        del owner2
    finally:
        signal.signal(signal.SIGTERM, previous)
    signum, at = interrupts.lost_interrupt()
    assert signum == signal.SIGTERM and sent <= at < sent + 0.5
    assert interrupts.lost_interrupt() is None  # once
    assert printed == [ZeroDivisionError]  # the other lost error is printed as before; the interrupt is not
