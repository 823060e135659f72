"""Parsing on every CPU with fork: same answer, same order, never lost work."""

from __future__ import annotations

import os
import threading

import pytest

from pipelines.core.catalog import forked
from pipelines.core.catalog.forked import can_fork, default_workers, fork_map


@pytest.fixture
def forking():
    """Fork is used here (checked when the test runs: an earlier test may have left a thread behind)."""
    if not can_fork():
        pytest.skip("no fork here, or another test left a thread running (fork_map then runs serially)")


needs_fork = pytest.mark.usefixtures("forking")


def _whose(item: int) -> tuple[int, int]:
    return item * item, os.getpid()


@needs_fork
def test_results_come_back_in_input_order_whatever_process_computed_them():
    items = list(range(101))
    out = fork_map(_whose, items, workers=3)
    assert [square for square, _ in out] == [i * i for i in items]
    assert {pid for _, pid in out} - {os.getpid()}, "some items were computed by a forked child"


@needs_fork
def test_a_child_that_dies_has_its_share_recomputed_here():
    parent = os.getpid()

    def dies_in_children(item: int) -> int:
        if os.getpid() != parent:
            os._exit(3)
        return item + 1

    assert fork_map(dies_in_children, list(range(10)), workers=2) == list(range(1, 11))


@needs_fork
def test_a_child_that_raises_has_its_share_recomputed_here():
    parent = os.getpid()

    def raises_in_children(item: int) -> str:
        if os.getpid() != parent:
            raise RuntimeError("boom")
        return str(item)

    assert fork_map(raises_in_children, list(range(7)), workers=3) == [str(i) for i in range(7)]


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
