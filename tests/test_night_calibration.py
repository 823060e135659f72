"""A night's calibration outputs in the state store: the patch is one `git apply` takes, or none."""

from __future__ import annotations

import subprocess
from pathlib import Path

from pipelines.core.model import Estimate
from pipelines.night import Night, NightSettings
from tests.support.assets import copied_example


def _night(tmp_path, monkeypatch, change: dict[str, int]) -> Night:
    _, assets = copied_example(tmp_path)
    night = Night(NightSettings(home=tmp_path / "home", assets_dir=assets))
    tests = night.registered_tests()
    proposals = [Estimate(t.id, t.hardware, t.est_time, change.get(t.id, t.est_time), 3, "bucket125") for t in tests]
    monkeypatch.setattr(night, "estimates", lambda _tests=None: proposals)
    return night


def test_a_quiet_calibration_stores_no_patch_and_removes_the_stale_one(tmp_path, monkeypatch):
    night = _night(tmp_path, monkeypatch, {})
    key = night.calibration_keys()["patch"]
    night.state.put(key, "--- a/old\n+++ b/old\n")  # an earlier night's patch, now stale
    _, where, left_alone = night.calibrate()
    assert (where["patch"], left_alone, night.state.get(key)) == ("", (), None)


def test_a_calibration_that_changes_a_file_stores_a_patch_git_applies(tmp_path, monkeypatch):
    night = _night(tmp_path, monkeypatch, {})
    test = next(t for t in night.registered_tests() if t.est_time > 0)
    proposals = [Estimate(test.id, test.hardware, test.est_time, test.est_time + 7, 3, "bucket125")]
    monkeypatch.setattr(night, "estimates", lambda _tests=None: proposals)
    _, where, _ = night.calibrate()
    check = subprocess.run(["git", "apply", "--check", where["patch"]], cwd=night.repo_spec.path,
                           capture_output=True, text=True)
    assert check.returncode == 0, check.stderr


def test_the_night_of_an_unconfigured_sglang_repo_calibrates_with_sglang_s_rule_not_framework_m_s(tmp_path):
    sglangish = Path(__file__).resolve().parents[1] / "examples" / "sglangish"
    night = Night(NightSettings(home=tmp_path / "home", repo=str(sglangish)))
    assert (night.repo_spec.policy, night.repo_spec.policy_params) == (
        "p90", {"max_samples": 16, "window_days": 7, "min_samples": 3})


def _configured(tmp_path, calibration: str) -> Night:
    """examples/sglangish configured in repos.yaml (roots and timeouts pinned), with this calibration: block."""
    from tests.support.assets import example_assets

    assets = example_assets(tmp_path / "assets")
    sglangish = Path(__file__).resolve().parents[1] / "examples" / "sglangish"
    with open(assets / "repos.yaml", "a") as fh:
        fh.write(f"  sglangish:\n    path: {sglangish}\n    timeout: {{floor_s: 600}}\n{calibration}")
    return Night(NightSettings(home=tmp_path / "home", assets_dir=assets, repo="sglangish"))


def test_a_configured_sglang_repo_that_sets_no_policy_still_gets_sglang_s_rule_with_its_own_parameters(tmp_path):
    """Pinning roots or timeouts, or adding an accept: list, must not switch it to framework M's bucket125."""
    spec = _configured(tmp_path, "    calibration: {accept: [test/registered/x.py]}\n").repo_spec
    assert (spec.policy, spec.policy_params["window_days"], spec.policy_params["accept"]) == (
        "p90", 7, ("test/registered/x.py",))


def test_a_policy_repos_yaml_sets_is_kept(tmp_path):
    spec = _configured(tmp_path, "    calibration: {policy: bucket125}\n").repo_spec
    assert (spec.policy, spec.policy_params) == ("bucket125", {})


class _NoDelete:
    """A state store whose identity may not delete (the documented policy without s3:DeleteObject)."""

    def __init__(self, store):
        self.store, self.deletes = store, 0

    def __getattr__(self, name):
        return getattr(self.store, name)

    def delete(self, key):
        from pipelines.storage.state import StateError

        self.deletes += 1
        raise StateError(f"s3://b/state/{key}: cannot be deleted (AccessDenied: Access Denied); check the credentials")


def test_a_stale_patch_that_cannot_be_deleted_is_a_warning_after_evidence_and_estimates_are_written(tmp_path, monkeypatch):
    night = _night(tmp_path, monkeypatch, {})
    keys = night.calibration_keys()
    night.state.put(keys["patch"], "--- a/old\n+++ b/old\n")
    night.__dict__["state"] = _NoDelete(night.state)
    _, where, _ = night.calibrate()
    assert where["patch"] == "" and night.state.get(keys["evidence"]) and night.state.get(keys["estimates"])
    (note,) = night.notes
    assert note.startswith("stale est_time patch not removed: s3://b/state/calibration/") and "AccessDenied" in note
    assert "do not apply it" in note and "s3:DeleteObject" in note


def test_a_first_quiet_calibration_deletes_nothing(tmp_path, monkeypatch):
    night = _night(tmp_path, monkeypatch, {})
    night.__dict__["state"] = store = _NoDelete(night.state)
    night.calibrate()
    assert (store.deletes, night.notes) == (0, [])


def test_a_proposal_the_applied_patch_does_not_carry_is_still_planned_with_after_git_apply(tmp_path, monkeypatch):
    """The night stores its estimates under the file's digest before the patch; a maintainer who
    `git apply`s it changes that digest. The recorded rewrite leads from one to the other, so the rocm
    est_time kept only in the estimates (too few samples to re-decide it) is still the one planned."""
    night = _night(tmp_path, monkeypatch, {})
    tests = {t.id: t for t in night.registered_tests() if t.path == "tests/e2e/ckpt/test_ckpt_resume.py"}
    cuda, rocm = sorted(tests.values(), key=lambda t: t.backend)
    proposals = [Estimate(cuda.id, cuda.hardware, 15, 22, 3, "bucket125"),
                 Estimate(rocm.id, rocm.hardware, 20, 30, 0, "too few samples; keeps the est_time in force", in_force=30)]
    monkeypatch.setattr(night, "estimates", lambda _tests=None: proposals)
    _, where, _ = night.calibrate()
    applied = subprocess.run(["git", "apply", where["patch"]], cwd=night.repo_spec.path, capture_output=True, text=True)
    assert applied.returncode == 0, applied.stderr
    next_night = Night(NightSettings(home=tmp_path / "home", assets_dir=tmp_path / "assets"))
    planned = next_night.catalog.by_id()
    assert planned[cuda.id].est_time == 22  # the file's literal now
    assert (planned[rocm.id].est_time, planned[rocm.id].est_source) == (30, "history")
    assert next_night.in_force(planned.values())[(rocm.id, rocm.hardware)] == 30
    (tmp_path / "home" / "history.sqlite").write_bytes(b"not a database" * 100)  # the rewrites cannot be read
    unread = Night(NightSettings(home=tmp_path / "home", assets_dir=tmp_path / "assets"))
    assert unread.catalog.by_id()[rocm.id].est_time == 20
    assert any(n.startswith("calibrated est_time of files calibrate rewrote not used: ") for n in unread.notes)


def test_near_timeout_is_judged_with_the_nights_floor_and_the_frameworks_runner_with_the_repos(tmp_path):
    """`nightly run --timeout-floor 20` on minirl (floor 60, the framework's timeout_per_file): the night's
    timeouts use 20, the framework's runner does not; the calibration run after it, built without the
    override, judges with the 20 its record keeps."""
    import json

    from pipelines.core.model import Sample
    from tests.support.assets import example_assets

    assets, home = example_assets(tmp_path / "assets"), tmp_path / "home"
    sft = "tests/e2e/fsdp/test_fsdp_sft_chat.py"  # est_time=8
    night = Night(NightSettings(home=home, assets_dir=assets, timeout_floor_s=20))
    night.history.append([Sample(sft, "h200", "", "passed", 18.2, "2026-11-06T15:00:00+00:00", run_id="r1")])
    raised = [Estimate(sft, "h200", 8, 24, 3, "bucket125")]  # next night: max(20, 30) = 30 s
    assert night.checks(raised)[1] == []  # the framework's runner gives est_time=8 max(60, 10) = 60 s, not 20 s
    kept = [Estimate(sft, "h200", 8, 8, 3, "bucket125")]  # next night: max(20, 10) = 20 s
    assert [(n.test_id, n.timeout_s, n.file_est_time) for n in night.checks(kept)[1]] == [(sft, 20, 0)]
    later = Night(NightSettings(home=home, assets_dir=assets))
    later.state.put("runs/r1.json", json.dumps({"night": "n1", "run_id": "r1", "attempts": [], "timeout_floor_s": 20}))
    assert [(n.test_id, n.timeout_s) for n in later.checks(kept, "r1")[1]] == [(sft, 20)]
    assert later.checks(kept)[1] == later.checks(kept, "gone")[1] == []  # no record: the repo's 60 s


def test_the_nights_calibration_leaves_out_nights_run_with_extra_environment(tmp_path):
    """The calibrated_estimates asset runs after every night, --env nights too (Night.calibrate ->
    Night.estimates -> calibrate, the function `nightly calibrate` calls): a failure-injection
    night's hang and a debugging night's slow pass move no est_time."""
    from pipelines.core.model import Sample

    _, assets = copied_example(tmp_path)
    night = Night(NightSettings(home=tmp_path / "home", assets_dir=assets))
    test = next(t for t in night.registered_tests() if t.est_time > 0)
    at = "2026-12-0{}T01:00:00+00:00"
    plain = [Sample(test.id, test.hardware, test.sha256, "passed", 8.0, at.format(d), run_id=f"r{d}") for d in (1, 2, 3)]
    injected = [Sample(test.id, test.hardware, test.sha256, "passed", 40.0, at.format(4), run_id="r4",
                       env="CUDA_LAUNCH_BLOCKING#3f2a9c1b0d4e"),
                Sample(test.id, test.hardware, test.sha256, "timed_out", 60.0, at.format(5), run_id="r5", capped=True,
                       env="MINIRL_HANG#0123456789ab")]
    night.history.append(plain + injected)
    [e] = [e for e in night.estimates() if e.test_id == test.id]
    assert (e.proposed, e.samples_used, e.max_s) == (10, 3, 8.0)
    assert "2 from nights with extra environment ignored" in e.reason
