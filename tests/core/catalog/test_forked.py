"""Parsing on every CPU with fork: same answer, same order, never lost work."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading

from pipelines.core.catalog import forked
from pipelines.core.catalog.forked import can_fork, default_workers, fork_map
from tests.conftest import PROJECT_ROOT


def in_fresh_python(body: str) -> None:
    """Run ``body`` in a new single-threaded interpreter: whatever threads earlier tests left in
    this process (fork is then refused, rightly), the forking path itself is always exercised."""
    code = "import os\nfrom pipelines.core.catalog.forked import can_fork, fork_map\n" \
           "assert can_fork(), 'a fresh interpreter must be allowed to fork'\n" + textwrap.dedent(body)
    done = subprocess.run([sys.executable, "-c", code], cwd=PROJECT_ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def _whose(item: int) -> tuple[int, int]:
    return item * item, os.getpid()


def test_results_come_back_in_input_order_whatever_process_computed_them():
    in_fresh_python("""
        def whose(item):
            return item * item, os.getpid()

        out = fork_map(whose, list(range(101)), workers=3)
        assert [square for square, _ in out] == [i * i for i in range(101)], out
        assert {pid for _, pid in out} - {os.getpid()}, "no item was computed by a forked child"
    """)


def test_a_child_that_dies_has_its_share_recomputed_here():
    in_fresh_python("""
        parent = os.getpid()

        def dies_in_children(item):
            if os.getpid() != parent:
                os._exit(3)
            return item + 1

        assert fork_map(dies_in_children, list(range(10)), workers=2) == list(range(1, 11))
    """)


def test_a_child_that_raises_has_its_share_recomputed_here():
    in_fresh_python("""
        parent = os.getpid()

        def raises_in_children(item):
            if os.getpid() != parent:
                raise RuntimeError("boom")
            return str(item)

        assert fork_map(raises_in_children, list(range(7)), workers=3) == [str(i) for i in range(7)]
    """)


def test_small_batches_stay_in_this_process():
    assert default_workers(forked.FORK_MIN_ITEMS - 1) == 1
    assert fork_map(_whose, [1, 2], workers=None) == [(1, os.getpid()), (4, os.getpid())]


def test_no_fork_while_other_threads_run():
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        assert not can_fork()
        assert default_workers(10 * forked.FORK_MIN_ITEMS) == 1
        assert {pid for _, pid in fork_map(_whose, list(range(20)), workers=4)} == {os.getpid()}
    finally:
        stop.set()
        thread.join()
