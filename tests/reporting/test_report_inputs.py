"""What the report reads: nights, logs and the quarantine document from the state store, inputs from a Night."""

from __future__ import annotations

import json

import pytest

from pipelines.core.model import CatalogError
from pipelines.reporting.inputs import (
    ReportInputs,
    inputs_for_night,
    log_tails,
    night_report,
    parse_summary,
    select_night,
    write_html,
)
from pipelines.reporting.state import load_doc, save_doc
from pipelines.storage.state import LocalStateStore
from tests.reporting.nights import SFT, example_night, tid, write_home


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    return write_home(example_night(tmp_path_factory.mktemp("home")))


def test_the_newest_night_and_the_ones_before_it_are_read_from_the_store(home):
    summary, earlier, _ = select_night(LocalStateStore(home))
    assert (summary["night"], [e["night"] for e in earlier]) == (
        "2026-11-06T150000Z", [f"2026-11-0{d}T150000Z" for d in range(1, 6)])
    first, none, _ = select_night(LocalStateStore(home), "2026-11-01T150000Z")
    assert (first["night"], none) == ("2026-11-01T150000Z", [])


def _put_night(store, name: str, cadence: str, outcomes: dict[str, str], tests=(), day: str = "") -> None:
    at = (day or name[:10]) + "T15:00:00+00:00"
    store.put(f"nights/{name}.json", json.dumps({
        "night": name, "run_id": name, "repo": "minirl", "cadence": cadence,
        "selection": {"cadence": cadence, "labels": [], "suites": [], "pools": [], "tests": list(tests)},
        "selected": list(outcomes), "skipped": [], "unplanned": [],
        "attempts": [{"test_id": t, "outcome": o, "attempt": 1, "elapsed_s": 1.0, "started_at": at}
                     for t, o in outcomes.items()]}))


def test_a_weekly_tests_last_run_is_found_behind_more_than_14_other_records(tmp_path):
    """Sensor reruns and UI picks between two weekly nights: the ongoing weekly failure is still
    failing, not new."""
    from pipelines.core.trends import night_changes

    store = LocalStateStore(tmp_path)
    _put_night(store, "2026-11-28T150000Z-w1", "weekly", {"tests/test_long.py": "failed", "tests/test_a.py": "passed"})
    for i in range(14):
        _put_night(store, f"2026-12-0{1 + i // 7}T{10 + i % 7:02d}0000Z-s{i}", "release", {"tests/test_a.py": "passed"},
                   tests=["tests/test_a.py"])
    _put_night(store, "2026-12-05T150000Z-w2", "weekly", {"tests/test_long.py": "failed", "tests/test_a.py": "passed"})
    summary, earlier, _ = select_night(store, None, repo="minirl")
    assert len(earlier) == 15
    c = night_changes(summary, earlier)
    assert (c.new_failures, c.still_failing) == ((), ("tests/test_long.py",))


def test_the_search_for_a_tests_last_run_stops_at_15_days_and_100_records(tmp_path):
    """A test new tonight has no earlier run: the report reads back no further than 15 days before
    tonight, and no more than 100 records in all (on S3, one GET each)."""
    store = LocalStateStore(tmp_path)
    for day in range(1, 31):
        _put_night(store, f"2026-10-{day:02d}T150000Z", "nightly", {"tests/test_a.py": "passed"})
    _put_night(store, "2026-10-31T150000Z", "nightly", {"tests/test_a.py": "passed", "tests/test_new.py": "failed"})
    _, earlier, _ = select_night(store, None, repo="minirl")
    assert [e["night"][:10] for e in earlier][0] == "2026-10-16"  # 15 days before, not the 14 newest only
    busy = LocalStateStore(tmp_path / "busy")
    for i in range(150):
        _put_night(busy, f"2026-10-30T{i // 60:02d}{i % 60:02d}00Z", "picked", {"tests/test_a.py": "passed"}, day="2026-10-30")
    _put_night(busy, "2026-10-31T150000Z", "nightly", {"tests/test_new.py": "failed"})
    assert len(select_night(busy, None, repo="minirl")[1]) == 100


def test_log_tails_come_from_the_nights_logs_in_the_state_store(home, tmp_path):
    summary, _, _ = select_night(LocalStateStore(home))
    tails = log_tails(summary, LocalStateStore(home))
    assert len(tails) == 3 and all("on purpose" in t for t in tails.values())
    moved = {**summary, "attempts": [{**a, "log_path": str(tmp_path / "gone" / a["log_path"].rsplit("/", 1)[1])}
                                     for a in summary["attempts"]]}
    store = LocalStateStore(tmp_path / "state")
    sft = next(a for a in moved["attempts"] if a["test_id"] == tid(SFT))
    store.put(f"logs/{summary['night']}/{sft['log_path'].rsplit('/', 1)[1]}", "line 1\nstored copy of the log\n")
    assert log_tails(moved, store) == {sft["log_path"]: "line 1\nstored copy of the log"}


def test_a_logs_tail_is_read_from_its_end_and_bounded_in_characters(tmp_path):
    """A test that failed after 3 MB of output without a newline, its log starting with bytes that are no
    UTF-8 (a progress bar's): the page shows the log's last lines, each line and the whole cut to size,
    the cuts said, and the bytes at the start (never read) do not cost it its tail."""
    store = LocalStateStore(tmp_path / "state")
    log = tmp_path / "state" / "logs" / "n1" / "t.attempt1.log"
    log.parent.mkdir(parents=True)
    log.write_bytes(b"# nightly: t attempt 1\n\xff\xfe progress\n" + b"z" * (3 << 20) + b"!end\n"
                    + b"".join(b"line %d " % i + b"y" * 1500 + b"\n" for i in range(8))
                    + b"ValueError: boom\n")
    summary = {"night": "n1", "attempts": [{"test_id": "t", "outcome": "failed", "log_path": str(log)}]}
    [tail] = log_tails(summary, store).values()
    lines = tail.splitlines()
    assert lines[-1] == "ValueError: boom" and len(tail) <= 4000 and all(len(line) <= 1000 for line in lines)
    assert lines[-2].startswith("line 7 yyy") and " characters cut ... yyy" in lines[-2]
    assert lines[0].startswith("... ") and lines[0].endswith(" characters cut")  # the earlier lines, cut as a whole


@pytest.mark.parametrize("night, path", [("n1", "/etc/hostname"), ("../../etc", "hostname"), ("n1", "../../../etc/hostname")])
def test_a_log_path_or_night_a_record_names_outside_the_state_is_never_read(tmp_path, night, path):
    """A record is data: the page must not publish a file it names."""
    summary = {"night": night, "attempts": [{"test_id": "t", "outcome": "failed", "elapsed_s": 1.0, "started_at": "",
                                             "log_path": path}]}
    assert log_tails(summary, LocalStateStore(tmp_path / "state")) == {}


def test_the_quarantine_document_round_trips_and_a_broken_one_is_located(tmp_path):
    store = LocalStateStore(tmp_path)
    assert load_doc(store, "minirl") == {}
    doc = {"version": 1, "actions": [{"test": "t", "action": "add", "by": "a", "why": "w", "at": "2026-11-01T00:00:00Z"}]}
    assert save_doc(store, "minirl", doc) == str(tmp_path / "quarantine" / "minirl.json")
    assert load_doc(store, "minirl") == doc
    (tmp_path / "quarantine" / "minirl.json").write_text("{\n  oops")
    with pytest.raises(CatalogError) as err:
        load_doc(store, "minirl")
    assert str(err.value).startswith(f"{tmp_path}/quarantine/minirl.json:2: quarantine: not valid JSON (")


def test_the_night_report_asset_builds_from_a_night_and_stores_the_page(home):
    from pipelines.night import Night, NightSettings

    night = Night(NightSettings(home=home, repo="minirl"))
    data = night_report(night.state, None, inputs_for_night(night, uncovered=["cell"]))
    assert (data.night, data.verdict, data.uncovered) == ("2026-11-06T150000Z", "FAILED: 2 test(s) failed", ("cell",))
    where = write_html(night.state, data)
    assert where == str(home / "reports" / "2026-11-06T150000Z.html")
    assert "FAILED: 2 test(s) failed" in (home / "reports" / "2026-11-06T150000Z.html").read_text()


def test_the_report_reuses_calibrations_evidence_csv(tmp_path):
    from pipelines.core.calibrate import evidence_csv
    from pipelines.reporting.inputs import estimates_from_evidence, evidence_key, stored_estimates
    from tests.reporting.nights import ESTIMATES

    assert estimates_from_evidence(evidence_csv(ESTIMATES)) == ESTIMATES
    store = LocalStateStore(tmp_path)
    assert stored_estimates(store, "minirl") is None
    store.put(evidence_key("minirl"), evidence_csv(ESTIMATES))
    assert stored_estimates(store, "minirl") == ESTIMATES
    store.put(evidence_key("minirl"), "not,the,columns\n1,2,3\n")
    assert stored_estimates(store, "minirl") is None, "an unreadable CSV means: calibrate again"


def test_an_sglang_fractional_est_time_reads_back_from_the_evidence_csv_calibration_wrote(tmp_path):
    """SGLang registers est_time=1.5: the evidence CSV writes it as the file does (1.5), and the report
    must read it back (the catalog's 2 s rounded up, the literal kept), not call the CSV damaged."""
    from pipelines.core.calibrate import evidence_csv
    from pipelines.core.model import Estimate
    from pipelines.reporting.inputs import evidence_key, stored_estimates

    kept = Estimate("test/registered/cpu/test_tokenizer.py", "cpu", 2, 2, 1, "kept", current_literal=1.5)
    moved = Estimate("test/registered/cpu/test_b.py", "cpu", 13, 40, 3, "p90", current_literal=12.5)
    whole = Estimate("test/registered/cpu/test_c.py", "cpu", 0, 5, 3, "p90")
    store = LocalStateStore(tmp_path)
    store.put(evidence_key("sglangish", "run-1"), evidence_csv([kept, moved, whole]))
    warnings = []
    assert stored_estimates(store, "sglangish", "run-1", warn=warnings.append) == [kept, moved, whole]
    assert warnings == []


def test_a_held_proposal_reads_back_with_the_est_time_in_force_and_the_page_names_it_as_calibrate_does():
    """Registered 3 s, 10 s in force (accepted earlier), 20 s held: nightly calibrate says 10 -> 20."""
    from pipelines.core.calibrate import evidence_csv
    from pipelines.core.model import Estimate
    from pipelines.core.report import build_report
    from pipelines.reporting.html import render_html
    from pipelines.reporting.inputs import estimates_from_evidence

    held = Estimate("tests/a.py", "h200", 3, 10, 2, "x; held for acceptance", held=20, in_force=10)
    [back] = estimates_from_evidence(evidence_csv([held]))
    assert back == held and back.baseline == 10
    summary = {"night": "n", "selected": ["tests/a.py"],
               "attempts": [{"test_id": "tests/a.py", "outcome": "passed", "elapsed_s": 5.0,
                             "started_at": "2026-12-01T15:00:00+00:00", "node": "n0", "attempt": 1}]}
    assert "tests/a.py: est_time 10 s &rarr; 20 s held for acceptance" in render_html(build_report(summary, estimates=[back]))


def test_a_night_that_recorded_its_flaky_states_is_reported_with_them(tmp_path):
    import json

    from pipelines.core.flaky import FlakyState

    home = write_home(example_night(tmp_path))
    latest = home / "nights" / "2026-11-06T150000Z.json"
    summary = json.loads(latest.read_text())
    summary["flaky"] = {tid(SFT): FlakyState(tid(SFT), "quarantined", by="flaky rules", why="3 flips").to_dict()}
    latest.write_text(json.dumps(summary))
    data = night_report(LocalStateStore(home), None, ReportInputs(samples=()))
    assert data.excused == (tid(SFT),)
    assert [(s.test_id, s.state, s.why) for s in data.flaky] == [(tid(SFT), "quarantined", "3 flips")]


def test_without_a_repo_an_unreadable_newest_night_is_passed_over_and_named(home, tmp_path):
    """What `nightly report` without --repo starts from (cli/report.night_repo): never a traceback."""
    import shutil

    copy = shutil.copytree(home, tmp_path / "home")
    (copy / "nights" / "2026-11-07T000000Z-deadbeef.json").write_text("{not json")
    said: list[str] = []
    summary, _, _ = select_night(LocalStateStore(copy), warn=said.append)
    assert summary["night"] == "2026-11-06T150000Z"
    assert len(said) == 1 and said[0].startswith(f"{copy}/nights/2026-11-07T000000Z-deadbeef.json:1: summary: not valid")
    assert said[0].endswith("; left out: reporting the newest night that can be read")


def test_a_corrupt_run_record_is_located_with_the_fix(tmp_path):
    (tmp_path / "nights").mkdir()
    (tmp_path / "nights" / "2026-11-01T150000Z.json").write_text('{"night": "2026-11-01T150000Z", "attempts": []}')
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "r1.json").write_text('{"night": ')
    with pytest.raises(CatalogError) as err:
        select_night(LocalStateStore(tmp_path), "r1")
    assert str(err.value).startswith(f"{tmp_path}/runs/r1.json:1: summary: not valid JSON (")
    assert str(err.value).endswith("; move it aside, keeping it for recovery: that loses run r1's record")


WRITTEN = "was it written by `nightly run`? Run the night again or move the file aside"
GOOD = {"test_id": "t", "outcome": "passed", "elapsed_s": 12.0, "started_at": "2026-11-01T15:00:00Z"}


@pytest.mark.parametrize(("text", "field", "message"), [
    ("[1, 2]", "summary", f"expected a night summary object with an `attempts` list; {WRITTEN}"),
    ('{"attempts": {}}', "summary", f"expected a night summary object with an `attempts` list; {WRITTEN}"),
    ('{"night": "n", "selected": ["t"]}', "summary", f"expected a night summary object with an `attempts` list; {WRITTEN}"),
    ('{"attempts": [7]}', "attempts[0]", f"expected an attempt object with test_id, outcome, elapsed_s and started_at; "
                                         f"{WRITTEN}"),
    ('{"attempts": [{"test_id": "t", "outcome": "passed"}]}', "attempts[0]", f"missing elapsed_s, started_at; {WRITTEN}"),
    (json.dumps({"attempts": [{**GOOD, "elapsed_s": "12s"}]}), "attempts[0].elapsed_s",
     f"expected seconds, a number >= 0, got '12s'; {WRITTEN}"),
    (json.dumps({"attempts": [{**GOOD, "started_at": 5}]}), "attempts[0].started_at",
     f"expected an ISO time string (or empty), got 5; {WRITTEN}"),
    (json.dumps({"attempts": [{**GOOD, "gpu_slots": None}]}), "attempts[0].gpu_slots",
     f"expected a list of GPU indices, got None; {WRITTEN}"),
    (json.dumps({"attempts": [{**GOOD, "outcome": "green"}]}), "attempts[0].outcome",
     "expected one of failed, infra_error, interrupted, passed, skipped, timed_out, got 'green'; " + WRITTEN),
    (json.dumps({"attempts": [GOOD]}), "night", f"missing; {WRITTEN}"),
    (json.dumps({"night": "n", "attempts": [GOOD], "selected": None}), "selected",
     f"expected a list of test ids, got None; {WRITTEN}"),
    (json.dumps({"night": "n", "attempts": [GOOD], "est_time": {"t": "ten"}}), "est_time",
     "expected test id -> seconds, got {'t': 'ten'}; " + WRITTEN),
    (json.dumps({"night": "n", "attempts": [GOOD], "verdict": {"failed": None}}), "verdict",
     "expected an object of lists of test ids, got {'failed': None}; " + WRITTEN),
])
def test_a_run_record_of_the_wrong_shape_is_located_with_the_fix(tmp_path, text, field, message):
    (tmp_path / "nights").mkdir()
    (tmp_path / "nights" / "2026-11-01T150000Z.json").write_text('{"night": "2026-11-01T150000Z", "attempts": []}')
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "r1.json").write_text(text)
    with pytest.raises(CatalogError) as err:
        select_night(LocalStateStore(tmp_path), "r1")
    assert str(err.value) == f"{tmp_path}/runs/r1.json:1: {field}: {message}"


def test_a_corrupt_night_before_is_left_out_with_a_warning_and_the_one_before_it_compared(home, tmp_path):
    import shutil

    copy = tmp_path / "home"
    shutil.copytree(home, copy)
    (copy / "nights" / "2026-11-05T150000Z.json").write_text("{")
    warnings: list[str] = []
    summary, earlier, _ = select_night(LocalStateStore(copy), warn=warnings.append)
    assert (summary["night"], earlier[-1]["night"]) == ("2026-11-06T150000Z", "2026-11-04T150000Z")
    assert len(warnings) == 1 and warnings[0].startswith(f"{copy}/nights/2026-11-05T150000Z.json:1: summary: not valid JSON")
    assert warnings[0].endswith("; left out: compared with 2026-11-04T150000Z instead")
    data = night_report(LocalStateStore(copy), None, ReportInputs(samples=()), warn=lambda _: None)
    assert data.changes.previous == "2026-11-04T150000Z" and warnings[0] in data.notes


def test_an_older_night_shows_the_proposals_made_after_it_not_the_newest(tmp_path):
    """Calibration keeps its evidence per source run; `nightly report --night` of an older night reads that."""
    import dataclasses

    from pipelines.core.calibrate import evidence_csv
    from pipelines.reporting.inputs import evidence_key
    from tests.reporting.nights import ESTIMATES

    home = write_home(example_night(tmp_path / "home"))
    store = LocalStateStore(home)
    older, _, _ = select_night(store, "2026-11-05T150000Z")
    then = [dataclasses.replace(e, proposed=e.proposed + 100) for e in ESTIMATES]
    store.put(evidence_key("minirl", older["run_id"]), evidence_csv(then))
    inputs = ReportInputs(estimates=ESTIMATES, repo="minirl")
    data = night_report(store, "2026-11-05T150000Z", inputs)
    assert {(d.test_id, d.proposed) for d in data.drift} | {(r.test_id, r.proposed) for r in data.rows
                                                          if r.proposed is not None} >= {(e.test_id, e.proposed)
                                                                                         for e in then}
    newest = night_report(store, None, inputs)  # the newest night has no evidence of its own here: the latest
    assert not any("proposals" in n for n in newest.notes)
    first = night_report(store, "2026-11-01T150000Z", inputs)
    assert "est_time proposals: the latest calibration's (the one made after this night was not kept)" in first.notes


def test_the_flaky_section_lists_this_repos_tests_only(home, tmp_path):
    """Every repo's nights share one history store: another framework's flaky test is not this page's."""
    import shutil

    from pipelines.core.flaky import FlakyState, recorded_states
    from tests.reporting.nights import example_tests

    copy = tmp_path / "home"
    shutil.copytree(home, copy)
    key = copy / "nights" / "2026-11-06T150000Z.json"
    summary = json.loads(key.read_text())
    summary["flaky"] = recorded_states({"test/registered/other_repo.py": FlakyState("test/registered/other_repo.py",
                                                                                     "quarantined"),
                                        tid(SFT): FlakyState(tid(SFT), "flaky")})
    key.write_text(json.dumps(summary))
    data = night_report(LocalStateStore(copy), None, ReportInputs(tests=example_tests(), repo="minirl"))
    assert [s.test_id for s in data.flaky] == [tid(SFT)]


def test_a_report_reads_each_night_summary_about_once(home, tmp_path, monkeypatch, capsys):
    """On S3 every read is a GET: `nightly report --night` of an older night among many nights of
    another repo reads each summary once (the chosen one twice: once to learn its repo)."""
    import shutil
    from collections import Counter

    from pipelines.cli import main

    copy = tmp_path / "home"
    shutil.copytree(home, copy)
    night = json.loads((copy / "nights" / "2026-11-06T150000Z.json").read_text())
    for day in range(7, 27):
        name = f"2026-11-{day:02d}T150000Z"
        (copy / "nights" / f"{name}.json").write_text(json.dumps({**night, "night": name, "repo": "sglangish"}))
    reads: Counter = Counter()
    get = LocalStateStore.get

    def counting(self, key):
        reads[key] += 1
        return get(self, key)

    monkeypatch.setattr(LocalStateStore, "get", counting)
    assert main(["report", "--home", str(copy), "--night", "2026-11-05T150000Z", "--json"]) == 0
    capsys.readouterr()
    nights = {k: n for k, n in reads.items() if k.startswith("nights/")}
    assert nights.pop("nights/2026-11-05T150000Z.json") == 2
    assert nights and max(nights.values()) == 1, nights


EVIDENCE = {"kind": "passed_on_retry", "run_id": "r0", "started_at": "2026-11-01T15:00:00+00:00", "text": "x"}


@pytest.mark.parametrize("flaky, field, said", [
    ([1], "flaky", "expected an object of test id -> flaky state, got [1]"),
    ({"t": 5}, 'flaky["t"]', "expected a flaky state object (test_id, state, evidence, ...), got 5"),
    ({"t": {"state": "flaky"}}, 'flaky["t"].test_id', "expected a test id, got None"),
    ({"t": {"test_id": "t", "state": "sick"}}, 'flaky["t"].state', "expected one of healthy, flaky, quarantined"),
    ({"t": {"test_id": "t", "passes": True}}, 'flaky["t"].passes', "expected a whole number >= 0, got True"),
    ({"t": {"test_id": "t", "manual": "yes"}}, 'flaky["t"].manual', "expected true or false, got 'yes'"),
    ({"t": {"test_id": "t", "why": 3}}, 'flaky["t"].why', "expected a string, got 3"),
    ({"t": {"test_id": "t", "evidence": "x"}}, 'flaky["t"].evidence', "expected a list of evidence objects"),
    ({"t": {"test_id": "t", "evidence": [EVIDENCE, {"kind": "alternating"}]}}, 'flaky["t"].evidence[1]',
     "expected an object of the strings kind, run_id, started_at, text"),
])
def test_flaky_states_the_report_cannot_read_are_named_with_their_field(flaky, field, said):
    summary = {"night": "n1", "attempts": [], "flaky": flaky}
    with pytest.raises(CatalogError) as err:
        parse_summary("n1.json", json.dumps(summary))
    assert str(err.value).startswith(f"n1.json:1: {field}: {said}"), str(err.value)


def test_recorded_flaky_states_as_a_night_writes_them_are_read():
    from pipelines.core.flaky import FlakyState, recorded_states

    states = recorded_states({"t": FlakyState("t", "flaky", (), since="2026-11-01", why="2 flips"),
                              "u": FlakyState("u", "quarantined", manual=True, by="alice")})
    summary = {"night": "n1", "attempts": [], "flaky": {**states, "v": {**states["t"], "evidence": [EVIDENCE]}}}
    assert parse_summary("n1.json", json.dumps(summary))["flaky"]["u"]["by"] == "alice"
    assert parse_summary("n1.json", json.dumps({**summary, "flaky": None}))["flaky"] is None


def _line_of(text: str, needle: str, before: int = 0) -> int:
    """The 1-based line holding ``needle`` (the only one), less ``before`` lines."""
    [at] = [n for n, line in enumerate(text.splitlines(), 1) if needle in line]
    return at - before


@pytest.mark.parametrize("damage, field, needle, before", [
    (lambda s: s.update(est_time=[1]), "est_time", '"est_time": [', 0),
    (lambda s: s["attempts"][3].update(elapsed_s="soon"), "attempts[3].elapsed_s", '"elapsed_s": "soon"', 0),
    (lambda s: s["attempts"][2].pop("outcome"), "attempts[2]", '"test_id": "tests/e2e/fsdp/test_fsdp_sft_chat.py"', 1),
    (lambda s: s["attempts"].insert(4, 7), "attempts[4]", "    7,", 0),
    (lambda s: s.update(flaky={"t": {"test_id": "t", "evidence": [{"kind": 3}]}}), 'flaky["t"].evidence[0]',
     '"kind": 3', 1),
])
def test_a_damaged_night_record_is_named_at_the_line_of_the_field(home, damage, field, needle, before):
    """A night of many tests is hundreds of lines: the problem names the line the field is on, not line 1."""
    summary = json.loads((home / "nights" / "2026-11-06T150000Z.json").read_text())
    damage(summary)
    text = json.dumps(summary, indent=2)
    with pytest.raises(CatalogError) as err:
        parse_summary("n.json", text)
    line = _line_of(text, needle, before)
    assert line > 1 and str(err.value).startswith(f"n.json:{line}: {field}: "), (line, str(err.value))


@pytest.mark.parametrize("floor", [0, "20", True, 10**6])
def test_a_timeout_floor_no_night_could_have_run_with_is_named(floor):
    with pytest.raises(CatalogError, match=r"n.json:1: timeout_floor_s: expected whole seconds from 1 to 86400, or null"):
        parse_summary("n.json", json.dumps({"night": "n1", "attempts": [], "timeout_floor_s": floor}))


def test_a_damaged_prediction_is_named_at_its_files_uri_and_the_line_of_its_field(tmp_path):
    """`nightly plan`'s prediction error reads the recent nights: a damaged entry is named where a
    maintainer finds it (the record's full location and the field's own line), then left out."""
    from pipelines.reporting.inputs import recent_predictions

    store = LocalStateStore(tmp_path)
    entry = {"night": "2026-11-02T150000Z", "predicted_median_s": 90, "predicted_p90_s": 120, "actual_s": 100,
             "tests": [{"test_id": "a", "predicted_s": 10, "actual_s": 11}, {"test_id": "b", "predicted_s": 5,
                                                                             "actual_s": "soon"}]}
    for day, prediction in (("01", {**entry, "night": "2026-11-01T150000Z", "tests": []}), ("02", entry)):
        store.put(f"nights/2026-11-{day}T150000Z.json", json.dumps({
            "night": f"2026-11-{day}T150000Z", "repo": "minirl", "deployment": "local", "status": "finished",
            "attempts": [], "prediction": prediction}, indent=1))
    key = "nights/2026-11-02T150000Z.json"
    line = store.get(key).splitlines().index('    "actual_s": "soon"') + 1
    records, problems = recent_predictions(store, "minirl", "local")
    assert [r.night for r in records] == ["2026-11-01T150000Z"]
    assert problems == [f"{store.uri(key)}:{line}: prediction.tests[1].actual_s: 'soon' is not a number of seconds "
                        ">= 0; rewrite the night's summary or drop its prediction entry; left out of the prediction error"]


def test_the_report_names_a_damaged_prediction_at_its_files_uri_and_line_too(tmp_path):
    """The page's prediction error reads the same records as `nightly plan`'s and names a damaged entry
    the same way (it said `nights/<night>.json:1`)."""
    from pipelines.reporting.inputs import ReportInputs, night_report

    store = LocalStateStore(tmp_path)
    good = {"night": "2026-11-01T150000Z", "predicted_median_s": 90, "predicted_p90_s": 120, "actual_s": 100,
            "tests": []}
    bad = {**good, "night": "2026-11-02T150000Z", "tests": [{"test_id": "a", "predicted_s": 5, "actual_s": "soon"}]}
    for prediction in (good, bad):
        store.put(f"nights/{prediction['night']}.json", json.dumps({
            "night": prediction["night"], "repo": "minirl", "deployment": "local", "status": "finished",
            "attempts": [], "prediction": prediction}, indent=1))
    key = "nights/2026-11-02T150000Z.json"
    line = store.get(key).splitlines().index('    "actual_s": "soon"') + 1
    data = night_report(store, None, ReportInputs(repo="minirl"))
    assert f"{store.uri(key)}:{line}: prediction.tests[0].actual_s: 'soon' is not a number" in " ".join(data.notes)


class _Passes:
    """A stand-in launcher: every test passes at once on the node and GPU slots the dispatcher gave it."""

    name = "stand-in"

    def launch(self, request, on_log=None):
        from datetime import UTC, datetime

        from pipelines.core.model import Attempt

        return Attempt(request.test.id, "passed", 0.5, datetime.now(UTC).isoformat(), request.attempt,
                       node=f"local-h200-{request.node}", gpu_slots=request.gpu_slots, exit_code=0,
                       timeout_s=request.timeout_s)


def test_the_nights_record_keeps_its_pools_and_every_report_of_it_counts_their_gpus(tmp_path):
    """Two 1-GPU tests on a deployment of two 8-GPU nodes: capacity is the pools' 16 GPUs, on the
    night's own path (its record, the night_report asset's inputs, the end-of-night bound), never
    the 2 the slots used would suggest."""
    from pipelines.core.report import actual_lower_bound
    from pipelines.core.runset import RunSelection
    from pipelines.execute import NightDone, run_tests
    from pipelines.night import Night, NightSettings
    from tests.support.assets import two_node_example

    one_gpu = 'from minirl.ci_register import register_cuda_ci\n\nregister_cuda_ci(est_time=1, suite="stage-a-1-gpu-h200", labels=["cap"])\n'
    repo, assets = two_node_example(tmp_path, one_gpu, count=2)
    night = Night(NightSettings(home=tmp_path / "home", assets_dir=assets, repo=str(repo), deployment="two"))
    selection = RunSelection(labels=("cap",))
    events = list(run_tests(night, night.runset(None, selection), selection, launcher=_Passes(), say=lambda _: None))
    record = next(e.summary for e in events if isinstance(e, NightDone))
    assert record["pools"] == {"h200": {"nodes": 2, "gpus_per_node": 8}}
    assert json.loads(night.state.get(f"runs/{night.run_id}.json"))["pools"] == record["pools"]
    usage = night_report(night.state, None, inputs_for_night(night)).usage
    assert (usage.gpus, usage.source) == (16, "the night's pools: h200 2 x 8")
    assert usage.capacity_gpu_h == pytest.approx(16 * usage.makespan_s / 3600)
    used = sum(a["elapsed_s"] * len(a["gpu_slots"]) for a in record["attempts"])
    assert actual_lower_bound(record) == pytest.approx(max(0.5, used / 16), abs=1e-3)


def test_the_nights_coverage_check_reads_the_groups_of_the_nights_own_assets_folder(tmp_path, monkeypatch):
    """A Dagster deployment that sets only the resource's ``assets_dir`` (no NIGHTLY_ASSETS_DIR): the
    night's report checks the coverage groups of that folder, not the project's assets/."""
    from pipelines.night import Night, NightSettings
    from pipelines.reporting.inputs import night_uncovered
    from tests.support.assets import copied_example

    monkeypatch.delenv("NIGHTLY_ASSETS_DIR", raising=False)
    repo, assets = copied_example(tmp_path)
    groups = (assets / "coverage.yaml").read_text()
    assert "backend: [megatron, tilelang]" in groups
    (assets / "coverage.yaml").write_text(groups.replace("backend: [megatron, tilelang]",
                                                         "backend: [megatron, tilelang, fsdp]"))
    night = Night(NightSettings(home=tmp_path / "home", assets_dir=assets, repo=str(repo)))

    lines, notes = night_uncovered(inputs_for_night(night), {}, warn=lambda _: None)

    assert any("backend=fsdp" in line for line in lines), lines


def test_the_report_says_the_gpu_time_this_night_did_not_use_and_how_long_it_waited_for_other_runs(home, tmp_path, capsys):
    """A night that shared its GPUs with another night: the capacity it did not use is no idle time (the other
    night ran on it), and its record knows how long its tests waited for them (details.gpu_wait_s)."""
    import re
    import shutil

    from pipelines.cli import main

    copy = tmp_path / "home"
    shutil.copytree(home, copy)
    for name in ("2026-11-06T150000Z.json", "latest.json"):
        path = copy / "nights" / name
        night = json.loads(path.read_text())
        for attempt, wait in zip(night["attempts"], (120.5, 0.0, 70.5), strict=False):
            attempt["details"] = {**attempt.get("details", {}), "gpu_wait_s": str(wait)}
        path.write_text(json.dumps(night))
    assert main(["report", "--home", str(copy), "--json"]) == 0
    usage = json.loads(capsys.readouterr().out)["usage"]
    assert usage["unused_gpu_h"] == pytest.approx(usage["capacity_gpu_h"] - usage["used_gpu_h"]) and usage["unused_gpu_h"] > 0
    assert (usage["gpu_wait_s"], usage["gpu_waits"]) == (191.0, 2)
    page = tmp_path / "night.html"
    assert main(["report", "--home", str(copy), "--out", str(page)]) == 0
    timing = re.search(r'<section id="timing">(.*?)</section>', page.read_text(), re.S).group(1)
    text = " ".join(re.sub(r"<[^>]+>", " ", timing).split())
    assert f"GPU-hours not used by this night {usage['unused_gpu_h']:.2f}" in text
    assert "its tests waited for GPUs other runs held 191.0 s (2 attempt(s))" in text and "idle" not in text
