"""The night's record as pipelines.execute writes it."""

from __future__ import annotations

import json

from pipelines.core.runset import RunSelection, RunSet
from pipelines.execute import night_summary
from pipelines.launch.dispatch import DispatchResult
from pipelines.night import Night, NightSettings
from pipelines.reporting.inputs import parse_summary
from tests.support.assets import example_assets


def test_the_record_keeps_the_timeout_floor_the_night_ran_with(tmp_path):
    """Near timeout is judged with it afterwards (the report, the calibration run), not the repo's."""
    assets = example_assets(tmp_path / "assets")
    for floor, kept in ((20, 20), (None, 60)):  # --timeout-floor 20; none: minirl's own 60 s
        night = Night(NightSettings(home=tmp_path / "home", assets_dir=assets, timeout_floor_s=floor))
        summary = night_summary(night, RunSet(run=(), skipped=()), RunSelection(cadence="nightly"), night.plan([]),
                                DispatchResult(), [], [])
        assert parse_summary("n.json", json.dumps(summary))["timeout_floor_s"] == kept


def test_tests_an_input_build_failure_blocked_are_in_history_like_every_other_attempt(tmp_path, monkeypatch):
    """They never launch, but their infra_error attempt is one of the night's: the record, the partitions
    and history all have it (history lost it when it bypassed Night.run)."""
    from datetime import UTC, datetime

    from pipelines.core.model import Attempt
    from pipelines.execute import run_tests
    from pipelines.storage.cache import BuildError
    from tests.support.assets import two_node_example

    registered = 'from minirl.ci_register import register_cuda_ci\n\nregister_cuda_ci(est_time=1, suite="stage-c-8-gpu-h200", labels=["fnode"])\n'
    needs_model = registered + "\ndef prepare():\n    exec_command('hf download minirl/tiny-lm --local-dir /root/models/tiny-lm')\n"
    repo, assets = two_node_example(tmp_path, needs_model, count=2)
    (repo / "tests" / "e2e" / "test_f_free.py").write_text(registered)
    night = Night(NightSettings(home=tmp_path / "home", assets_dir=assets, repo=str(repo), deployment="two"))

    def unavailable(req):
        raise BuildError(f"{req.key}: the hub did not answer")

    class Passes:
        name = "stand-in"

        def launch(self, request, on_log=None) -> Attempt:
            return Attempt(request.test.id, "passed", 0.1, datetime.now(UTC).isoformat(), request.attempt,
                           node="local-h200-0", gpu_slots=request.gpu_slots, timeout_s=request.timeout_s)

    monkeypatch.setattr(night, "build", unavailable)
    selection = RunSelection(labels=("fnode",))
    list(run_tests(night, night.runset(None, selection), selection, launcher=Passes(), say=lambda _: None))
    record = json.loads(night.state.get(f"runs/{night.run_id}.json"))
    recorded = sorted((a["test_id"], a["outcome"]) for a in record["attempts"])
    kept = sorted((s.test_id, s.outcome) for s in night.history.read() if s.run_id == night.run_id)
    assert kept == recorded == [("tests/e2e/test_f_free.py", "passed"), ("tests/e2e/test_f_node1.py", "infra_error"),
                                ("tests/e2e/test_f_node2.py", "infra_error")]
    # each with a start time, so history orders it with its night (an empty one sorted before every night)
    assert all(s.started_at for s in night.history.read())


def test_a_node_named_mid_night_whose_finding_faded_is_bad_in_the_verdict_as_in_the_record(tmp_path):
    """The night named n1 while it ran (its failures were retried elsewhere) and later passes elsewhere
    lowered its rates: judged at the end alone, the record's bad_nodes kept n1 but its verdict listed no
    bad node and excused the quarantined test's failure there: a green night with a named node."""
    from pipelines.core.flaky import FlakyState
    from pipelines.core.health import NodeFinding
    from pipelines.core.model import Attempt
    from pipelines.execute import flaky_verdict

    def attempt(test: str, outcome: str, node: str) -> Attempt:
        return Attempt(test_id=test, outcome=outcome, elapsed_s=1.0, started_at="2026-11-01T00:00:00Z", node=node)

    night = Night(NightSettings(home=tmp_path / "home", assets_dir=example_assets(tmp_path / "assets")))
    flaky = "tests/e2e/test_flaky.py"
    attempts = [attempt(flaky, "failed", "n1")] + [attempt(f"tests/e2e/test_ok{i}.py", "passed", "n0") for i in range(4)]
    named = NodeFinding("n1", "history", 1, 1, 0, 4, (flaky,), "named while the night ran")
    night.nodes_acted_on[("n1", "named")] = named
    record = flaky_verdict(night, attempts, [], {flaky: FlakyState(flaky, "quarantined")})
    assert [f["node"] for f in record["bad_nodes"]] == ["n1"]
    assert record["verdict"]["bad_nodes"] == ["n1"], record["verdict"]
    assert record["verdict"]["excused_quarantined"] == [] and not record["verdict"]["ok"], record["verdict"]


def test_checks_without_a_run_judge_history_alone_never_the_newest_record_another_repo_wrote(tmp_path):
    """Several repos share one store's nights/latest.json: a calibration with no source run (materialized
    from the UI) listed the other repo's test as near its timeout, from that repo's night."""
    import dataclasses

    from pipelines.core.model import Attempt

    night = Night(NightSettings(home=tmp_path / "home", assets_dir=example_assets(tmp_path / "assets")))
    theirs = Attempt("tests/e2e/slp/test_other.py", "passed", 9.6, "2026-12-06T01:00:00+00:00", 1, timeout_s=10)
    night.state.put("nights/latest.json", json.dumps({"repo": "slp2", "attempts": [dataclasses.asdict(theirs)]}))
    _, near = night.checks(night.estimates(), None)
    assert "tests/e2e/slp/test_other.py" not in {n.test_id for n in near}


def test_a_test_killed_at_its_timeout_says_whether_next_night_has_room():
    from pipelines.core.report import NearTimeout, NearTimeoutTonight

    def killed(next_timeout: int) -> str:
        nxt = NearTimeout("t.py", "h200", 15.0, next_timeout, "timed_out", "2026-12-06T01:00:00+00:00")
        return str(NearTimeoutTonight("t.py", "h200", 15.0, 15, "timed_out", "2026-12-06T01:00:00+00:00",
                                      next_night=nxt))
    assert killed(10).endswith("; next night: 10 s, it will be killed again unless its est_time is raised")
    assert killed(25).endswith("; next night: 25 s, longer than the 15 s that killed it")
