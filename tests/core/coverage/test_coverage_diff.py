"""What a change lost: cells covered then and by nothing now, with the change that lost them."""

from __future__ import annotations

from pipelines.core.coverage.check import check_groups
from pipelines.core.coverage.diff import lost_cells, renamed
from tests.core.coverage.siblings import ANTI_DIAGONAL, DIAGONAL, FIVE, SIX, FilesSource, lora_group, sibling

BEFORE = FilesSource({FIVE: sibling(*DIAGONAL), SIX: sibling(*ANTI_DIAGONAL)})


def lost(after: FilesSource, groups=None) -> list[tuple[str, list[tuple[str, str, str]]]]:
    groups = groups or (lora_group(),)
    then, _ = check_groups(groups, BEFORE, adopt=True)
    now, _ = check_groups(groups, after)
    return [(c.cell.label, [(cfg.test, cfg.name, change) for cfg, change in c.was])
            for c in lost_cells(then, now, BEFORE, after)]


def test_deleting_a_sibling_loses_the_cells_only_it_covered_and_says_it_was_deleted():
    assert lost(FilesSource({FIVE: BEFORE[FIVE]})) == [
        ("backend=megatron, layout=per-expert", [(SIX, "m-per", "deleted")]),
        ("backend=tilelang, layout=shared+virtual", [(SIX, "t-shared", "deleted")]),
    ]


def test_editing_a_sibling_onto_the_same_diagonal_loses_the_cells_it_stopped_covering():
    assert lost(FilesSource({FIVE: BEFORE[FIVE], SIX: sibling(*DIAGONAL)})) == [
        ("backend=megatron, layout=per-expert", [(SIX, "m-per", "edited")]),
        ("backend=tilelang, layout=shared+virtual", [(SIX, "t-shared", "edited")]),
    ]


def test_merging_two_siblings_into_one_matrix_loses_nothing():
    merged = FilesSource({FIVE: sibling(*DIAGONAL, *ANTI_DIAGONAL)})

    assert lost(merged, groups=(lora_group(FIVE, SIX),)) == []


def test_a_file_that_left_its_group_is_named_as_such():
    declared_then = lora_group()
    then, _ = check_groups((declared_then,), BEFORE)
    now, _ = check_groups((lora_group(FIVE),), BEFORE)

    changes = {change for c in lost_cells(then, now, BEFORE, BEFORE) for _, change in c.was}

    assert changes == {"left the group"}


def test_a_sibling_deleted_and_dropped_from_the_group_file_is_still_seen_through_its_comment():
    before = FilesSource({FIVE: sibling(*DIAGONAL, group="lora"), SIX: sibling(*ANTI_DIAGONAL, group="lora")})
    after = FilesSource({FIVE: before[FIVE]})
    then, _ = check_groups((lora_group(FIVE),), before, adopt=True)
    now, _ = check_groups((lora_group(FIVE),), after)

    assert [(c.cell.label, c.was[0][1]) for c in lost_cells(then, now, before, after)] == [
        ("backend=megatron, layout=per-expert", "deleted"), ("backend=tilelang, layout=shared+virtual", "deleted")]


def test_a_group_renamed_since_loses_only_what_the_group_holding_its_tests_no_longer_covers():
    before = FilesSource({FIVE: sibling(*DIAGONAL, group="diag"), SIX: sibling(*ANTI_DIAGONAL, group="diag")})
    after = FilesSource({FIVE: sibling(*DIAGONAL, group="lora"), SIX: sibling(*DIAGONAL, group="lora")})
    then, _ = check_groups((lora_group(),), before, adopt=True)
    now, _ = check_groups((lora_group(),), after)

    assert renamed(then, now) == {"diag": ("lora",)}
    # the cells of the old comment group that the anti-diagonal alone covered, by their fields then
    assert sorted((c.group, c.cell.label, c.was[0][1]) for c in lost_cells(then, now, before, after)) == [
        ("diag", "backend=megatron, shared_outer=false", "edited"),
        ("diag", "backend=megatron, virtual_experts=false", "edited"),
        ("diag", "backend=tilelang, shared_outer=true", "edited"),
        ("diag", "backend=tilelang, virtual_experts=true", "edited"),
        ("lora", "backend=megatron, layout=per-expert", "edited"),
        ("lora", "backend=tilelang, layout=shared+virtual", "edited"),
    ]
