"""The night's flaky states are of its own repo's tests: every repo's nights share one history store."""

from __future__ import annotations

from datetime import UTC, datetime

from pipelines.core.model import Attempt, Sample
from pipelines.core.report import build_report
from pipelines.core.runset import RunSelection
from pipelines.execute import Finished, NightDone, run_tests
from pipelines.night import Night, NightSettings
from tests.support.assets import copied_example, example_assets


def _flaky_runs(test_id: str) -> list[Sample]:
    """Three nights where the test failed and then passed on retry: quarantined by the default rules."""
    out = []
    for day in (1, 2, 3):
        for attempt, outcome in ((1, "failed"), (2, "passed")):
            out.append(Sample(test_id, "h200", "0" * 64, outcome, 10.0, f"2026-11-0{day}T01:0{attempt}:00Z",
                              node="h200-a", run_id=f"run-{day}", attempt=attempt))
    return out


def test_another_repos_flaky_test_is_not_in_this_repos_states(tmp_path):
    _, assets = copied_example(tmp_path)
    night = Night(NightSettings(home=tmp_path / "home", assets_dir=assets))
    mine = night.catalog.tests[0].id
    night.history.append([*_flaky_runs(mine), *_flaky_runs("test/registered/of_another_repo.py")])
    states = night.flaky_states()
    assert states[mine].state == "quarantined"
    assert "test/registered/of_another_repo.py" not in states


class FailsOnCue:
    """A stand-in launcher: fails ``TEST`` when told to, passes everything else at once."""

    name = "stand-in"

    def __init__(self, fail: bool):
        self.fail = fail

    def launch(self, request, on_log=None) -> Attempt:
        failed = self.fail and request.test.id == TEST
        return Attempt(request.test.id, "failed" if failed else "passed", 1.0, datetime.now(UTC).isoformat(),
                       node="stand-in-0", exit_code=1 if failed else 0, timeout_s=request.timeout_s)


TEST = "tests/e2e/megatron/test_sft_math.py"


def test_the_failure_that_completes_a_quarantine_fails_its_own_night_and_is_excused_from_the_next(tmp_path):
    """Nights P, F, P, F: before night 4 the test is flaky (2 flips), not quarantined; night 4's failure
    makes the third flip. The night's exit status, its Dagster check (``Finished.quarantined``) and its
    report judge it with the states as the night started: failed. The next night starts quarantined."""
    example_assets(tmp_path / "assets")
    nights = []
    for fail in (False, True, False, True, True):
        night = Night(NightSettings(home=tmp_path / "home", assets_dir=tmp_path / "assets"))
        events = list(run_tests(night, night.runset([TEST], RunSelection()), RunSelection(),
                                launcher=FailsOnCue(fail), say=lambda _: None))
        [finished] = [e for e in events if isinstance(e, Finished)]
        [done] = [e for e in events if isinstance(e, NightDone)]
        nights.append((finished.quarantined, done.summary))
    fourth, fifth = nights[3][1], nights[4][1]
    assert nights[3][0] is False and fourth["verdict"]["failed"] == [TEST]
    assert fourth["verdict"]["excused_quarantined"] == [] and fourth["verdict"]["ok"] is False
    assert build_report(fourth).verdict == "FAILED: 1 test(s) failed"
    assert fourth["flaky"][TEST]["state"] == "quarantined"  # recorded for the next night
    assert nights[4][0] is True and fifth["verdict"]["excused_quarantined"] == [TEST] and fifth["verdict"]["ok"]


def test_an_automatic_quarantine_excuses_failures_only_of_the_test_file_it_was_judged_on(tmp_path):
    """Quarantined by the rules (three nights that passed only on retry); a night on the same file
    fails and is excused. Then the file changes (a new bug): that very night's failure fails it, in
    the verdict (the exit status), the Dagster check (``Finished.quarantined``) and the report, and
    the record's notes and flaky states say why."""
    repo, assets = copied_example(tmp_path)

    def night_of(fail: bool) -> tuple[bool, dict]:
        night = Night(NightSettings(home=tmp_path / "home", assets_dir=assets))
        events = list(run_tests(night, night.runset([TEST], RunSelection()), RunSelection(),
                                launcher=FailsOnCue(fail), say=lambda _: None))
        [finished] = [e for e in events if isinstance(e, Finished)]
        [done] = [e for e in events if isinstance(e, NightDone)]
        return finished.quarantined, done.summary

    night = Night(NightSettings(home=tmp_path / "home", assets_dir=assets))
    sha = night.tests_by_id[TEST].sha256
    night.history.append([Sample(TEST, "h200", sha, outcome, 10.0, f"2026-01-0{day}T01:0{attempt}:00Z",
                                 node="stand-in-0", run_id=f"run-{day}", attempt=attempt)
                          for day in (1, 2, 3) for attempt, outcome in ((1, "failed"), (2, "passed"))])
    assert night.flaky_states()[TEST].state == "quarantined"

    excused, same = night_of(fail=True)
    assert excused is True and same["verdict"]["excused_quarantined"] == [TEST] and same["verdict"]["ok"]

    path = repo / TEST
    path.write_text(path.read_text() + "\n# a change that broke it\n")
    excused, changed = night_of(fail=True)
    verdict = changed["verdict"]
    assert excused is False and verdict["failed"] == [TEST] and verdict["excused_quarantined"] == []
    assert verdict["quarantine_ended"] == [TEST] and verdict["ok"] is False
    assert build_report(changed).verdict == "FAILED: 1 test(s) failed"
    [note] = [n for n in changed["notes"] if n.startswith(TEST)]
    assert f"{TEST} failed and fails the night: quarantine ended: test file changed since quarantined (sha256 " \
           f"{sha[:12]} -> " in note
    after = changed["flaky"][TEST]
    assert (after["state"], after["lapsed"]) == ("released", True) and "test file changed" in after["why"]


def test_calibrates_est_time_rewrite_of_a_quarantined_test_keeps_its_quarantine(tmp_path):
    """`nightly calibrate --write` rewrote the quarantined test's est_time and recorded the succession in
    the history store: the file is the same test, so that night's failure is still excused (verdict,
    Dagster check, flaky states after it), as its samples still count for calibration."""
    from pipelines.core.calibrate.lineage import rewrite_successions

    repo, assets = copied_example(tmp_path)
    night = Night(NightSettings(home=tmp_path / "home", assets_dir=assets))
    sha = night.tests_by_id[TEST].sha256
    night.history.append([Sample(TEST, "h200", sha, outcome, 10.0, f"2026-01-0{day}T01:0{attempt}:00Z",
                                 node="stand-in-0", run_id=f"run-{day}", attempt=attempt)
                          for day in (1, 2, 3) for attempt, outcome in ((1, "failed"), (2, "passed"))])
    path = repo / TEST
    before = path.read_text()
    after = before.replace("est_time=10,", "est_time=20,")
    assert after != before
    path.write_text(after)
    night.history.add_successions(rewrite_successions({TEST: (before, after)}))

    night = Night(NightSettings(home=tmp_path / "home", assets_dir=assets))
    assert night.tests_by_id[TEST].sha256 != sha
    events = list(run_tests(night, night.runset([TEST], RunSelection()), RunSelection(),
                            launcher=FailsOnCue(True), say=lambda _: None))
    [finished] = [e for e in events if isinstance(e, Finished)]
    [done] = [e for e in events if isinstance(e, NightDone)]
    verdict = done.summary["verdict"]
    assert finished.quarantined is True
    assert verdict["excused_quarantined"] == [TEST] and verdict["quarantine_ended"] == [] and verdict["ok"]
    assert done.summary["flaky"][TEST]["state"] == "quarantined"


def test_with_run_quarantined_off_a_held_test_runs_again_once_its_file_changes(tmp_path, monkeypatch, capsys):
    """`flaky: run_quarantined: false` keeps a quarantined test from launching, so no night of it ever
    shows a changed file: the hold is judged with tonight's file (flaky.for_tonight, as a test that runs
    is), so a changed test runs again and its failure counts; calibrate's est_time rewrite changes nothing."""
    import yaml

    from pipelines.cli import main
    from pipelines.core.calibrate.lineage import rewrite_successions

    lora = "tests/e2e/lora/test_lora_math.py"
    repo, assets = copied_example(tmp_path)
    data = yaml.safe_load((assets / "repos.yaml").read_text())
    data["repos"]["minirl"]["flaky"] = {"run_quarantined": False}
    (assets / "repos.yaml").write_text(yaml.safe_dump(data))
    monkeypatch.setenv("NIGHTLY_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("NIGHTLY_ASSETS_DIR", str(assets))
    night = Night(NightSettings(home=tmp_path / "home", assets_dir=assets))
    night.history.append([Sample(lora, "h200", night.tests_by_id[lora].sha256, outcome, 10.0,
                                 f"2026-01-0{day}T01:0{attempt}:00Z", node="h200-a", run_id=f"run-{day}",
                                 attempt=attempt)
                          for day in (1, 2, 3) for attempt, outcome in ((1, "failed"), (2, "passed"))])

    def listed() -> str:
        assert main(["run", "--labels", "lora", "--list-only"]) == 0
        return next(x for x in capsys.readouterr().out.splitlines() if lora in x and "release" not in x.split(lora)[0])

    assert listed().split()[0] == "-" and "run_quarantined is off" in listed()
    path = repo / lora
    before = path.read_text()
    rewritten = before.replace("est_time=", "est_time=1", 1)
    path.write_text(rewritten)  # as `nightly calibrate --write` does, with the succession it records
    night.history.add_successions(rewrite_successions({lora: (before, rewritten)}))
    assert listed().split()[0] == "-", "calibrate's own rewrite is the same test"
    path.write_text(rewritten + "\n# a change that may have fixed or broken it\n")
    line = listed()
    assert line.split()[0] != "-" and "run_quarantined is off" not in line


class OneTestOnNode1:
    """A stand-in for two local nodes, node 1 broken: each night one test (``victim``) lands on it and
    fails with CUDA error 802 unless the night keeps it off node 1; every other attempt passes on node 0."""

    name = "stand-in"

    def __init__(self, victim: str):
        self.victim = victim

    def launch(self, request, on_log=None) -> Attempt:
        broken = request.test.id == self.victim and "local-h200-1" not in request.avoid_nodes
        return Attempt(request.test.id, "failed" if broken else "passed", 0.1, datetime.now(UTC).isoformat(),
                       request.attempt, node="local-h200-1" if broken else "local-h200-0", gpu_slots=request.gpu_slots,
                       exit_code=int(broken), reason="CUDA error 802" if broken else "", timeout_s=request.timeout_s)


def test_a_node_that_fails_one_test_a_night_is_named_and_its_victims_are_never_quarantined(tmp_path):
    """The reviewer's nights 7-12: local-h200-1 failed exactly one test each night, a different one. The
    node was never named, its victims were quarantined as flips, and then its failures were excused
    (`verdict: OK: 1 quarantined failure(s) excused`). Across nights the node is suspect on the third
    and fourth nights and named from the fifth: from the third night on its failure is retried on node 0
    (where the test passes) and the record says why."""
    from tests.support.assets import two_node_example

    test_file = 'from minirl.ci_register import register_cuda_ci\n\nregister_cuda_ci(est_time=1, suite="stage-c-8-gpu-h200", labels=["fnode"])\n'
    repo, assets = two_node_example(tmp_path, test_file, count=4)
    selection = RunSelection(labels=("fnode",))
    verdicts, found, suspected, states = [], [], [], {}
    for i in range(7):
        victim = f"tests/e2e/test_f_node{1 + i % 3}.py"
        night = Night(NightSettings(home=tmp_path / "home", assets_dir=assets, repo=str(repo), deployment="two"))
        events = list(run_tests(night, night.runset(None, selection), selection, launcher=OneTestOnNode1(victim),
                                say=lambda _: None))
        [done] = [e for e in events if isinstance(e, NightDone)]
        verdicts.append(done.summary["verdict"])
        found.append([(f["node"], f["rule"]) for f in done.summary["bad_nodes"]])
        suspected.append([(f["node"], f["rule"]) for f in done.summary["suspect_nodes"]])
        states = done.summary["flaky"]
        retried = [a for a in done.summary["attempts"] if a["test_id"] == victim and a["attempt"] == 2]
        assert bool(retried) == (i >= 2) and all(a["node"] == "local-h200-0" and a["outcome"] == "passed"
                                                 for a in retried), (i, done.summary["attempts"])
    # nights 1 and 2: one failure each, nothing to tell the node from the test yet: the test's failure fails it
    assert [v["failed"] for v in verdicts[:2]] == [["tests/e2e/test_f_node1.py"], ["tests/e2e/test_f_node2.py"]]
    assert found[:2] == [[], []]
    # nights 3 and 4: all of the pool's lone failures on the node, which runs fewer than a third of the
    # attempts (under 1 in 20 for either node: a suspect, retried from, but not named); from night 5 the
    # chance is under 1 in 1,000: named
    assert found[2:] == [[], []] + [[("local-h200-1", "history")]] * 3
    assert suspected[2:4] == [[("local-h200-1", "history_suspect")]] * 2 and suspected[4:] == [[]] * 3, suspected
    assert all(v["ok"] and v["failed"] == [] and v["bad_nodes"] == [] for v in verdicts[2:4])
    assert all(v["ok"] and v["failed"] == [] and v["excused_quarantined"] == [] and v["bad_nodes"] == ["local-h200-1"]
               for v in verdicts[4:])
    assert all(s["state"] != "quarantined" and s["evidence"] == [] for s in states.values()), states


class EveryTestOnNode1Fails:
    """local-h200-1 fails every test put on it (CUDA error 802); the ``late`` tests also fail their first attempt
    on any node (flaky): their failures elsewhere, late in the night, raise the pool's failure count."""

    name = "stand-in"

    def __init__(self, late: set[str]):
        self.late = late

    def launch(self, request, on_log=None) -> Attempt:
        from pipelines.launch.local import node_name

        order = [request.node, *(n for n in range(2) if n != request.node)]
        node = next((node_name(request.pool, n) for n in order if node_name(request.pool, n) not in request.avoid_nodes),
                    node_name(request.pool, order[0]))
        broken = node == "local-h200-1" or (request.test.id in self.late and request.attempt == 1)
        return Attempt(request.test.id, "failed" if broken else "passed", 0.05, datetime.now(UTC).isoformat(),
                       request.attempt, node=node, gpu_slots=request.gpu_slots, exit_code=int(broken),
                       reason="CUDA error 802" if node == "local-h200-1" else "", timeout_s=request.timeout_s)


def test_a_node_named_mid_night_whose_finding_faded_gets_its_note_as_in_the_record(tmp_path):
    """The second read's night: local-h200-1 named at 4 of 4 (1 in 1,038 for either node), then flaky tests
    failing late elsewhere raised the pool's failures (1 in 85 at the end): the record and the verdict named
    the node, while the night's notes (its `bad node` line, and the cordon on Kubernetes) came from the end's
    findings alone and said nothing."""
    import yaml

    from pipelines.core.health import detect_bad_nodes

    repo, assets = copied_example(tmp_path)
    for i in range(1, 45):
        (repo / "tests" / "e2e" / f"test_f_node{i}.py").write_text(
            'from minirl.ci_register import register_cuda_ci\n\n'
            'register_cuda_ci(est_time=1, suite="stage-c-2-gpu-h200", labels=["fnode"])\n')
    cluster = yaml.safe_load((assets / "cluster.yaml").read_text())
    cluster["deployments"]["dep"] = {"launcher": "local", "storage": "local", "skip_hardware": ["mi300"],
                                     "pools": {"h200": {"nodes": 2, "gpus_per_node": 8}}}
    (assets / "cluster.yaml").write_text(yaml.safe_dump(cluster))
    selection = RunSelection(labels=("fnode",))
    night = Night(NightSettings(home=tmp_path / "home", assets_dir=assets, repo=str(repo), deployment="dep"))
    late = {f"tests/e2e/test_f_node{i}.py" for i in range(5, 10)}
    said: list[str] = []
    events = list(run_tests(night, night.runset(None, selection), selection, launcher=EveryTestOnNode1Fails(late),
                            say=said.append))
    [done] = [e for e in events if isinstance(e, NightDone)]
    summary = done.summary
    assert [f["node"] for f in summary["bad_nodes"]] == ["local-h200-1"]
    assert summary["verdict"]["bad_nodes"] == ["local-h200-1"]
    assert ("local-h200-1", "named") in night.nodes_acted_on
    ended = detect_bad_nodes([Attempt(**{k: v for k, v in a.items() if k != "log_uri"}) for a in summary["attempts"]],
                             history=night.node_history)
    assert ended == []  # the finding faded by the night's end: what this test is about
    noted = [n for n in summary["notes"] if n.startswith("bad node local-h200-1: ")]
    assert noted and any(n.startswith("bad node local-h200-1: ") for n in said), summary["notes"]
