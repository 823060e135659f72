"""Calibrate's own est_time rewrites keep a test's history current; any other edit makes it stale."""

from __future__ import annotations

from pipelines.core.calibrate import Lineage, Succession, calibrate, plan_patch
from pipelines.core.calibrate.lineage import digest
from pipelines.core.model import Estimate, Sample
from pipelines.core.plan.durations import duration_model, usable
from tests.conftest import make_test

A, B, C, D = ("a" * 64, "b" * 64, "c" * 64, "d" * 64)


def passed(sha: str, elapsed: float, day: int) -> Sample:
    return Sample("tests/e2e/test_a.py", "h200", sha, "passed", elapsed, f"2026-11-{day:02d}T01:00:00+00:00",
                  source=f"n{day}.log:3")


HISTORY = [passed(A, 950, 1), passed(B, 960, 2), passed(C, 970, 3)]
CHAIN = [Succession(A, B, "tests/e2e/test_a.py"), Succession(B, C, "tests/e2e/test_a.py")]


def test_a_digest_is_the_same_revision_as_every_digest_calibrate_rewrote_into_it():
    lineage = Lineage.of(CHAIN)
    assert lineage.same_revision(C) == {A, B, C}
    assert lineage.same_revision(B) == {A, B}
    assert lineage.same_revision(A) == {A}
    assert lineage.same_revision(D) == {D}


def test_a_cycle_of_successions_ends_the_walk():
    lineage = Lineage.of([*CHAIN, Succession(C, A, "tests/e2e/test_a.py")])
    assert lineage.same_revision(A) == {A, B, C}


def test_calibration_uses_samples_along_the_chain_and_counts_none_stale():
    [e] = calibrate([make_test(est_time=1300, sha256=C)], HISTORY, "bucket125", now=None, successions=CHAIN)
    assert (e.samples_used, e.stale_samples, e.max_s) == (3, 0, 970)


def test_without_the_record_calibration_counts_the_older_digests_as_stale():
    [e] = calibrate([make_test(est_time=1300, sha256=C)], HISTORY, "bucket125")
    assert (e.samples_used, e.stale_samples) == (1, 2)


def test_a_genuine_edit_after_the_rewrites_makes_the_whole_chain_stale():
    edited = make_test(est_time=1300, sha256=D)
    [e] = calibrate([edited], HISTORY, "bucket125", successions=CHAIN)
    assert (e.samples_used, e.stale_samples) == (0, 3)
    assert usable(edited, HISTORY, Lineage.of(CHAIN)) == []


def test_the_duration_model_uses_the_chain_too():
    t = make_test(est_time=1300, sha256=C)
    assert usable(t, HISTORY, Lineage.of(CHAIN)) == [950, 960, 970]
    assert duration_model([t], HISTORY, successions=CHAIN)[t.id].samples == 3
    assert duration_model([t], HISTORY)[t.id].samples == 1


def test_a_patch_plan_names_the_old_and_new_digest_of_each_rewritten_file(tmp_path):
    old = "register_cuda_ci(est_time=3600, suite='stage-c-4-gpu-h200', labels=[])\n"
    (tmp_path / "tests/e2e").mkdir(parents=True)
    (tmp_path / "tests/e2e/test_a.py").write_text(old)
    t = make_test(est_time=3600, sha256=digest(old), line=1)
    plan = plan_patch(tmp_path, [t], [Estimate(t.id, "h200", 3600, 1300, 3, "bucket125")])
    new = old.replace("3600", "1300")
    assert plan.successions() == [Succession(digest(old), digest(new), "tests/e2e/test_a.py")]


OLD = "register_cuda_ci(est_time=3600, suite='stage-c-4-gpu-h200', labels=[])\n"


def _one_test_repo(tmp_path):
    """(test, history store) of a repo whose one test file registers est_time 3600 (OLD)."""
    from pipelines.core.history import FileHistoryStore

    (tmp_path / "tests/e2e").mkdir(parents=True)
    (tmp_path / "tests/e2e/test_a.py").write_text(OLD)
    return make_test(est_time=3600, sha256=digest(OLD), line=1), FileHistoryStore(tmp_path / "history.sqlite")


def test_a_nights_patch_is_recorded_in_the_store_before_anyone_applies_it(tmp_path):
    from pipelines.storage.history import recorded_patch, successions

    old = OLD
    t, store = _one_test_repo(tmp_path)
    diff, left_alone = recorded_patch(store, tmp_path, [t], [Estimate(t.id, "h200", 3600, 1300, 3, "bucket125")])
    assert "+register_cuda_ci(est_time=1300," in diff and left_alone == ()
    assert successions(store) == [Succession(digest(old), digest(old.replace("3600", "1300")), t.path)]


def test_a_nights_patch_that_changes_nothing_is_none_with_the_files_left_alone(tmp_path):
    """git apply refuses a patch without hunks: the night stores none (and `nightly run` says so)."""
    from pipelines.storage.history import recorded_patch

    old = OLD
    t, store = _one_test_repo(tmp_path)
    assert recorded_patch(store, tmp_path, [t], [Estimate(t.id, "h200", 3600, 3600, 3, "bucket125")]) == (None, ())
    # an edit the patch cannot carry (a test file linked from outside the repository) is nothing to apply either
    outside = tmp_path.parent / f"{tmp_path.name}-shared.py"
    outside.write_text(old)
    (tmp_path / "tests/e2e/test_a.py").unlink()
    (tmp_path / "tests/e2e/test_a.py").symlink_to(outside)
    diff, left_alone = recorded_patch(store, tmp_path, [t], [Estimate(t.id, "h200", 3600, 1300, 3, "bucket125")])
    assert diff is None and len(left_alone) == 1 and left_alone[0].startswith("tests/e2e/test_a.py: ")


def test_a_store_that_cannot_record_rewrites_says_what_will_go_stale():
    from pipelines.storage.history import record_successions, successions

    class Remote:
        def __repr__(self) -> str:
            return "S3HistoryStore('s3://bucket/history/')"

    assert successions(Remote()) == []
    warning = record_successions(Remote(), CHAIN)
    assert warning.startswith("S3HistoryStore('s3://bucket/history/'): this history store cannot record")
    assert "the 2 rewritten file(s) will count as stale next night" in warning
