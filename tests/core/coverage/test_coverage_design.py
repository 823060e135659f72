"""Designing matrices: every design covers every required cell, and known optima are reached."""

from __future__ import annotations

import itertools

import pytest

from pipelines.core.coverage.deal import assign
from pipelines.core.coverage.design import design


def dims(count: int, values: int) -> list[tuple[str, list[str]]]:
    return [(f"d{i}", [f"v{j}" for j in range(values)]) for i in range(count)]


def uncovered_pairs(found) -> list[tuple]:
    """Checked independently of the search: every pair of dimensions, every pair of values."""
    rows = [found.configuration(i) for i in range(found.size)]
    missing = []
    for (a, va), (b, vb) in itertools.combinations(found.dims, 2):
        missing += [(a, x, b, y) for x in va for y in vb if not any(r[a] == x and r[b] == y for r in rows)]
    return missing


@pytest.mark.parametrize(("count", "values"), [(2, 2), (3, 2), (4, 3), (5, 3), (10, 2), (3, 4), (6, 2)])
def test_every_design_covers_every_pair(count, values):
    found = design(dims(count, values), moves=2000)

    assert uncovered_pairs(found) == [] and found.uncovered == ()
    assert found.lower_bound <= found.size < found.cartesian or found.cartesian == found.size == 4


def test_all_pairs_of_four_three_valued_dimensions_takes_the_known_optimum_of_nine():
    found = design(dims(4, 3))

    assert (found.size, found.lower_bound, found.cartesian) == (9, 9, 81)


def test_all_pairs_of_ten_two_valued_dimensions_is_within_one_of_the_best_known_six():
    found = design(dims(10, 2))

    assert found.size <= 7 and uncovered_pairs(found) == []


def test_annealing_shrinks_the_greedy_design_to_the_known_optimum_where_no_construction_applies():
    found = design(dims(5, 3))  # five 3-valued dimensions: no orthogonal array of 9 rows exists; 11 is optimal

    assert found.size == 11 and found.method == "greedy + annealing"


def test_the_search_is_deterministic_for_a_seed():
    assert design(dims(6, 3), seed=3, moves=3000).rows == design(dims(6, 3), seed=3, moves=3000).rows


def test_three_way_coverage_covers_every_triple():
    found = design(dims(5, 2), strength=3, moves=3000)

    rows = [found.configuration(i) for i in range(found.size)]
    for names in itertools.combinations([n for n, _ in found.dims], 3):
        for values in itertools.product(["v0", "v1"], repeat=3):
            assert any(all(r[n] == v for n, v in zip(names, values, strict=True)) for r in rows), (names, values)
    assert found.size >= 8


def test_named_tuples_need_only_their_own_cells():
    found = design([("backend", ["megatron", "tilelang"]), ("layout", ["shared", "per"]), ("fp8", ["on", "off"])],
                   require=[("backend", "layout")])

    assert found.size == 4 and {c.dims for c in found.cells} == {("backend", "layout")}


def test_a_budget_too_small_keeps_the_most_cells_it_can_and_lists_the_rest():
    found = design(dims(4, 3), max_rows=6, moves=3000)

    assert found.size == 6 and found.uncovered
    covered = len(found.cells) - len(found.uncovered)
    assert covered >= 6 * 6 - 6  # six rows, six pairs each; at most a few overlaps left
    assert all(not found.covered_by(c) for c in found.uncovered)


def test_configurations_are_dealt_evenly_and_two_siblings_of_a_two_by_two_grid_get_the_diagonals():
    found = design([("backend", ["megatron", "tilelang"]), ("layout", ["shared", "per"])])

    first, second = assign(found.rows, 2)

    assert len(first) == len(second) == 2
    for half in (first, second):
        assert {found.configuration(i)["backend"] for i in half} == {"megatron", "tilelang"}
        assert {found.configuration(i)["layout"] for i in half} == {"shared", "per"}
    assert [len(t) for t in assign(found.rows * 2 + found.rows[:1], 3)] == [3, 3, 3]
