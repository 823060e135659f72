"""What one run does with its keys: run, skip with the reason, or leave unplanned."""

from __future__ import annotations

import pytest

from pipelines.core.model import Test
from pipelines.core.runset import RunSelection, SelectionError, resolve_run
from pipelines.core.specs import PoolSpec

POOLS = (PoolSpec("h200", 2, 8),)


def _test(name: str, gpus: int = 2, hardware: str = "h200") -> Test:
    return Test(id=f"tests/{name}.py", path=f"tests/{name}.py", backend="cuda", suite=f"stage-c-{gpus}-gpu-{hardware}",
                gpus=gpus, est_time=600, hardware=hardware)


def test_a_test_wider_than_every_node_is_unplanned_with_the_reason_and_the_rest_runs():
    tests = [_test("a"), _test("multinode", gpus=16)]
    rs = resolve_run(None, tests, RunSelection(), POOLS)
    assert [t.id for t in rs.run] == ["tests/a.py"]
    assert [t.id for t in rs.unplanned] == ["tests/multinode.py"]
    [(_, why)] = rs.skipped
    assert "needs 16 GPUs on one node but pool h200 has 8 per node" in why


def test_hardware_no_pool_runs_is_unplanned_and_skip_hardware_is_not_run_here():
    tests = [_test("a"), _test("mi", hardware="mi300"), _test("b200", hardware="b200")]
    rs = resolve_run(None, tests, RunSelection(), POOLS, skip_hardware=("b200",))
    assert [t.id for t in rs.unplanned] == ["tests/mi.py"] and [t.id for t in rs.not_here] == ["tests/b200.py"]


def test_a_selection_naming_a_test_that_does_not_exist_is_an_error_not_an_empty_run():
    with pytest.raises(SelectionError, match="unknown test id"):
        resolve_run(None, [_test("a")], RunSelection(tests=("tests/typo.py",)), POOLS)


def test_keys_no_test_has_are_reported_as_unknown():
    rs = resolve_run(["tests/a.py", "tests/gone.py"], [_test("a")], RunSelection(), POOLS)
    assert [t.id for t in rs.run] == ["tests/a.py"] and rs.unknown == ("tests/gone.py",)
