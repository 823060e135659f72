"""`nightly run`: the plan is shown first, bad input stops the night before any test starts."""

from __future__ import annotations

import types

import pytest
import yaml

from pipelines.cli import main
from pipelines.core.runset import RunSelection
from pipelines.night import Night, NightSettings
from tests.support.assets import QUICK_MAIN, QUICK_TEST, example_assets, registry_repo

ROCM_ID = "tests/e2e/ckpt/test_ckpt_resume.py::rocm-stage-c-4-gpu-mi300"


def test_list_only_prints_the_plan_and_starts_nothing(tmp_path, capsys):
    assert main(["run", "--home", str(tmp_path), "--list-only"]) == 0
    out = capsys.readouterr().out
    expected = len(Night(NightSettings(home=tmp_path)).runset(None, RunSelection(cadence="nightly")).run)
    assert f"plan: {expected} tests, predicted makespan" in out
    assert "skip  tests/e2e/megatron/test_multinode_sft.py" in out
    assert f"{ROCM_ID} not run here: this deployment skips hardware 'mi300'" in out
    assert not (tmp_path / "dagster").exists() and not (tmp_path / "logs").exists()


def _assets_without_skip(tmp_path, project_root):
    assets = example_assets(tmp_path / "assets")
    cluster = yaml.safe_load((assets / "cluster.yaml").read_text())
    del cluster["deployments"]["local"]["skip_hardware"]
    (assets / "cluster.yaml").write_text(yaml.safe_dump(cluster))
    return assets


def test_a_night_with_unplanned_tests_is_not_green_unless_accepted(tmp_path, capsys, monkeypatch, project_root):
    monkeypatch.setenv("NIGHTLY_ASSETS_DIR", str(_assets_without_skip(tmp_path, project_root)))
    assert main(["run", "--home", str(tmp_path / "home"), "--list-only"]) == 3
    err = capsys.readouterr().err
    assert f"problem: unplanned: {ROCM_ID}: no pool runs hardware 'mi300'" in err
    assert main(["run", "--home", str(tmp_path / "home"), "--list-only", "--accept-problems"]) == 0


@pytest.mark.slow  # a real (tiny) night: a few seconds
def test_a_night_with_a_broken_registration_exits_3_with_the_verdict_its_record_and_report_give(tmp_path, capsys,
                                                                                                  monkeypatch):
    import json

    broken = QUICK_TEST.format(est=2).replace("register_cuda_ci(est_time=2,", "EST = 2\nregister_cuda_ci(est_time=EST,")
    _, assets = registry_repo(tmp_path, {"test_ok.py": QUICK_TEST.format(est=2), "test_broken.py": broken})
    monkeypatch.setenv("NIGHTLY_ASSETS_DIR", str(assets))
    home = tmp_path / "home"
    assert main(["run", "--home", str(home), "--repo", "fw"]) == 3
    out, err = capsys.readouterr()
    assert "verdict: PROBLEMS: 1 catalog problem(s); every launched test passed" in out.splitlines(), out
    assert "but the night had 1 problem(s) (above); fix them or pass --accept-problems" in err
    [record] = [json.loads(p.read_text()) for p in (home / "runs").glob("*.json")]
    assert [p.split(":")[0] for p in record["problems"]] == ["catalog problem"]


POOL = "h200: {nodes: 1, gpus_per_node: 8}"


@pytest.mark.parametrize(("old", "new", "said"), [
    (f"pools:\n      {POOL}", "pools: [h200]",
     "deployments.local.pools: expected a mapping, got a list ['h200']; write key: value pairs"),
    ("nodes: 1,", "nodes: 1.5,",
     "deployments.local.pools.h200.nodes: expected a whole number, got a number 1.5; write a whole number"),
    ("skip_hardware: [mi300]", "skip_hardware: mi300",
     "deployments.local.skip_hardware: expected a list, got text 'mi300'; write a YAML list, e.g. [a, b]"),
    ("skip_hardware: [mi300]", "skip_hardware: [mi300]\n    cordon_bad_nodes: {x: 1}",
     "deployments.local.cordon_bad_nodes: expected true or false, got a mapping {'x': 1}; write true or false"),
], ids=["list for a mapping", "number for a whole number", "text for a list", "mapping for true/false"])
def test_a_value_of_the_wrong_kind_in_cluster_yaml_is_said_in_words_not_a_class_name(tmp_path, capsys, monkeypatch,
                                                                                     old, new, said):
    """`expected mapping, got LineList ['h200']`: the class of the YAML loader, which no maintainer wrote."""
    assets = example_assets(tmp_path / "assets")
    cluster = assets / "cluster.yaml"
    assert old in cluster.read_text()
    cluster.write_text(cluster.read_text().replace(old, new, 1))  # the first is the local deployment's
    monkeypatch.setenv("NIGHTLY_ASSETS_DIR", str(assets))
    assert main(["run", "--home", str(tmp_path / "home"), "--list-only"]) == 2
    err = capsys.readouterr().err
    assert f"{cluster}:" in err and f": {said}" in err, err
    assert "LineList" not in err and "LineDict" not in err


def test_a_selection_that_matches_nothing_is_a_problem(tmp_path, capsys):
    assert main(["run", "--home", str(tmp_path), "--labels", "no-such-label"]) == 3
    err = capsys.readouterr().err
    assert "nightly: nothing to run: --labels no-such-label selects none of the" in err
    assert "labels there: ckpt, fsdp, long, lora, megatron" in err
    assert not (tmp_path / "dagster").exists()


def test_list_only_says_why_nothing_matched_as_the_night_does(tmp_path, capsys):
    assert main(["run", "--home", str(tmp_path), "--labels", "no-such-label"]) == 3
    night = [line for line in capsys.readouterr().err.splitlines() if "nothing to run" in line]
    assert main(["run", "--home", str(tmp_path), "--labels", "no-such-label", "--list-only"]) == 3
    listed = [line for line in capsys.readouterr().err.splitlines() if "nothing to run" in line]
    assert listed == night and len(listed) == 1
    assert listed[0].startswith("nightly: nothing to run: --labels no-such-label selects none of the")
    assert "labels there: ckpt, fsdp, long, lora, megatron" in listed[0]
    assert main(["run", "--home", str(tmp_path), "--labels", "no-such-label", "--list-only",
                 "--accept-problems"]) == 0


def test_a_corrupt_history_store_stops_the_night_with_what_to_do(tmp_path, capsys):
    (tmp_path / "history.sqlite").write_text("not a database")
    assert main(["run", "--home", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'history.sqlite'}: history store is unreadable" in err
    assert "nightly history import" in err
    assert not (tmp_path / "logs").exists()
    assert (tmp_path / "history.sqlite").read_text() == "not a database"


def test_an_unknown_suite_names_the_registered_ones(tmp_path, capsys):
    assert main(["run", "--home", str(tmp_path), "--suite", "stage-z-3-gpu-h200", "--list-only"]) == 2
    assert "unknown suite(s) stage-z-3-gpu-h200; registered suites: stage-b-2-gpu-h200" in capsys.readouterr().err


def test_a_malformed_env_pair_is_rejected(tmp_path, capsys):
    assert main(["run", "--home", str(tmp_path), "--env", "NOEQUALS", "--list-only"]) == 2
    assert "--env 'NOEQUALS': expected KEY=VALUE with KEY made of letters, digits and _" in capsys.readouterr().err


@pytest.mark.parametrize("pair", ["9LIVES=1", "MY-FLAG=1", "CAF\u00c9=1", "\u0662X=1"])
def test_an_env_name_a_pod_or_a_shell_would_refuse_is_rejected_before_the_night(tmp_path, capsys, pair):
    # a leading digit fails every pod on Kubernetes 1.31; non-ASCII letters and digits pass str.isalnum()
    assert main(["run", "--home", str(tmp_path), "--env", pair, "--list-only"]) == 2
    err = capsys.readouterr().err
    assert f"--env {pair!r}: {pair.split('=')[0]!r} is not a valid environment variable name" in err
    assert "use ASCII letters, digits and '_', not starting with a digit" in err


def test_a_held_proposal_is_said_from_the_est_time_in_force_as_nightly_calibrate_says_it():
    from pipelines.cli.run import held_lines
    from pipelines.core.model import Estimate

    calibrated = Estimate(test_id="tests/e2e/t.py", hardware="h200", current=3, proposed=10, samples_used=2,
                          reason="x", held=20, in_force=10)
    registered = Estimate(test_id="tests/e2e/u.py", hardware="h200", current=3, proposed=3, samples_used=2,
                          reason="x", held=30)
    passed = Estimate(test_id="tests/e2e/v.py", hardware="h200", current=3, proposed=4, samples_used=2, reason="x")
    spec = types.SimpleNamespace(name="minirl", path="examples/minirl")
    night = types.SimpleNamespace(repo_spec=spec, specs=types.SimpleNamespace(repos={"minirl": spec}))
    lines = held_lines([calibrated, registered, passed], night)
    assert lines[0].endswith("add it to `accept:` in `calibration:` of repo minirl in assets/repos.yaml to apply it)")
    assert [line.split(" (")[0] for line in lines] == [
        "held for acceptance: tests/e2e/t.py: est_time 10 -> 20",
        "held for acceptance: tests/e2e/u.py: est_time 3 -> 30",
    ]


def test_the_end_of_night_line_pairs_the_simulated_median_with_its_own_p90():
    """The schedule's makespan on the medians (61.6 s) is not the median of the simulated nights (64.1 s)
    whose p90 it was printed beside; the record's predicted_median_s is what the report calls the prediction."""
    from pipelines.cli.run import makespan_line

    summary = {"predicted_makespan_s": 61.6, "predicted_median_s": 64.06, "predicted_p90_s": 80.79,
               "actual_makespan_s": 98.1, "lower_bound_s": 58.8}
    assert makespan_line(summary, 120.0) == ("predicted median makespan 64.1s (p90 80.8s), actual 98.1s, "
                                             "plan's lower bound 58.8s (from predicted durations); whole night 120.0s")
    # planned without durations (no simulated nights: 0), or a record from before they were kept
    for older in ({**summary, "predicted_median_s": 0.0, "predicted_p90_s": 0.0},
                  {k: v for k, v in summary.items() if k not in ("predicted_median_s", "predicted_p90_s")}):
        assert makespan_line(older, 120.0) == ("predicted makespan 61.6s, actual 98.1s, plan's lower bound 58.8s "
                                               "(from predicted durations); whole night 120.0s")


def test_the_end_of_night_line_calls_the_plans_bound_the_plans_beside_the_bound_of_the_nights_own_durations():
    """A night faster than predicted ends below the plan's lower bound (109.7 s, from predicted durations); the
    bound of what it ran, max(longest attempt, GPU-seconds / GPUs), never exceeds its makespan."""
    from pipelines.cli.run import makespan_line

    def ran(test: str, at: int, elapsed: float, slots: list[int]) -> dict:
        return {"test_id": test, "outcome": "passed", "elapsed_s": elapsed, "gpu_slots": slots, "node": "n0",
                "started_at": f"2026-11-06T15:00:{at:02d}+00:00"}

    summary = {"predicted_makespan_s": 112.0, "actual_makespan_s": 107.6, "lower_bound_s": 109.7, "attempts": [
        ran("tests/a.py", 0, 100.0, [0, 1, 2, 3]), ran("tests/b.py", 0, 50.0, [4, 5, 6, 7]),
        ran("tests/c.py", 50, 57.0, [4, 5, 6, 7])]}
    assert makespan_line(summary, 120.0) == (
        "predicted makespan 112.0s, actual 107.6s, plan's lower bound 109.7s (from predicted durations), "
        "lower bound from actual durations 103.5s; whole night 120.0s")


def test_a_red_night_ends_with_its_verdict_and_each_failures_reason_and_log(tmp_path, capsys):
    """In a CI job the HTML report stays on the runner: the job's log itself must say why the night is
    red (the verdict, the reason, where the log is and its last lines)."""
    from pipelines.cli.run import verdict_lines
    from pipelines.storage.state import LocalStateStore

    night, sft = "2026-12-05T060947Z-9373949f", "tests/e2e/megatron/test_sft_math.py"
    log = tmp_path / "logs" / night / "tests%2Fe2e%2Fmegatron%2Ftest_sft_math.py.attempt1.log"
    log.parent.mkdir(parents=True)
    log.write_text("# nightly: attempt 1\n[minirl] test_sft_math: failing on purpose because MINIRL_FAIL names it\n")

    def attempt(test: str, outcome: str, **more) -> dict:
        return {"test_id": test, "outcome": outcome, "elapsed_s": 0.8, "started_at": "2026-12-05T06:09:47+00:00",
                "node": "local-h200-0", "attempt": 1, **more}

    summary = {"night": night, "run_id": "9373949f", "selected": [sft, "tests/e2e/fsdp/t.py"], "attempts": [
        attempt(sft, "failed", reason="SystemExit(1)", exit_code=1, log_path=str(log)),
        attempt("tests/e2e/fsdp/t.py", "passed", exit_code=0)],
        "verdict": {"ok": False, "failed": [sft], "excused_quarantined": [], "infra": [], "bad_nodes": [],
                    "interrupted": []}}
    assert verdict_lines(summary, LocalStateStore(tmp_path)) == [
        "verdict: FAILED: 1 test(s) failed",
        f"FAILED {sft}: test failure (exit 1): SystemExit(1); node local-h200-0; log {log}",
        "  | # nightly: attempt 1",
        "  | [minirl] test_sft_math: failing on purpose because MINIRL_FAIL names it",
    ]
    green = {**summary, "attempts": summary["attempts"][1:], "selected": ["tests/e2e/fsdp/t.py"],
             "verdict": {**summary["verdict"], "ok": True, "failed": []}}
    assert verdict_lines(green, LocalStateStore(tmp_path)) == ["verdict: OK: every test passed"]


def test_a_hung_tests_closing_line_says_its_timeout_once(tmp_path):
    """The local launcher's reason for a timeout says what the classification says: the closing line said
    'hang: killed at its 6 s timeout: killed after the 6s timeout'. A reason that says more is kept."""
    from pipelines.cli.run import verdict_lines
    from pipelines.storage.state import LocalStateStore

    def attempt(test: str, outcome: str, n: int = 1, **more) -> dict:
        return {"test_id": test, "outcome": outcome, "elapsed_s": 6.2, "started_at": "2026-12-05T06:09:47+00:00",
                "node": "local-h200-0", "attempt": n, "timeout_s": 6, **more}

    hang, flaky = "tests/e2e/test_hang.py", "tests/e2e/test_flaky.py"
    summary = {"night": "2026-12-05T060947Z-9373949f", "run_id": "9373949f", "selected": [hang, flaky], "attempts": [
        attempt(hang, "timed_out", reason="killed after the 6s timeout"),
        attempt(flaky, "timed_out", reason="killed after the 6s timeout"), attempt(flaky, "passed", 2, exit_code=0)],
        "verdict": {"ok": False, "failed": [hang], "excused_quarantined": [], "infra": [], "bad_nodes": [],
                    "interrupted": []}}
    lines = [line for line in verdict_lines(summary, LocalStateStore(tmp_path)) if not line.startswith("  |")]
    assert lines[1:] == [
        f"TIMED_OUT {hang}: hang: killed at its 6 s timeout; node local-h200-0",
        f"PASSED {flaky}: flaky: timed_out on attempt 1, passed on attempt 2: killed after the 6s timeout; node local-h200-0",
    ]


@pytest.mark.slow  # a real (tiny) night: a few seconds
def test_a_failing_test_that_prints_megabytes_without_a_newline_shows_a_bounded_end_in_the_job_log_and_report(
        tmp_path, capsys, monkeypatch):
    """Its log's last lines are one line of megabytes: the CI job's log and the HTML report show its
    end with the cut said, not the megabytes."""
    flood = QUICK_TEST.format(est=2).replace(
        QUICK_MAIN, '    import sys\n    sys.stdout.write("z" * (3 << 20) + "!end")\n    sys.stdout.flush()\n'
        '    sys.exit(1)\n')
    _, assets = registry_repo(tmp_path, {"test_flood.py": flood})
    monkeypatch.setenv("NIGHTLY_ASSETS_DIR", str(assets))
    home = tmp_path / "home"
    assert main(["run", "--home", str(home), "--repo", "fw"]) == 1
    out = capsys.readouterr().out
    assert len(out) < 30_000, f"{len(out)} characters printed"
    shown = out[out.index("FAILED tests/e2e/test_flood.py"):].splitlines()[1:]
    flood_line = next(line for line in shown if line.endswith("z!end"))
    assert flood_line.startswith("  | ... start of line and ") and " characters cut ... zzz" in flood_line
    assert len(flood_line) <= 1010
    [report] = (home / "reports").glob("*.html")
    page = report.read_text()
    assert len(page) < 1_000_000 and "characters cut" in page and "!end" in page


@pytest.mark.slow  # a real (tiny) night whose test takes 4 s
def test_a_long_test_is_said_to_be_still_running_while_nothing_else_is_printed(tmp_path, capsys, monkeypatch):
    """One line per finished test leaves a CI job's log silent through a long test (and CI kills a silent
    job): with NIGHTLY_PROGRESS_EVERY_S=1 a line every second says it still runs, with its time and timeout."""
    slow = QUICK_TEST.format(est=2).replace(QUICK_MAIN, '    import time\n    time.sleep(4)\n')
    _, assets = registry_repo(tmp_path, {"test_slow.py": slow})
    monkeypatch.setenv("NIGHTLY_ASSETS_DIR", str(assets))
    monkeypatch.setenv("NIGHTLY_PROGRESS_EVERY_S", "1")
    assert main(["run", "--home", str(tmp_path / "home"), "--repo", "fw"]) == 0
    out = capsys.readouterr().out.splitlines()
    done = next(i for i, line in enumerate(out) if line.startswith("nightly: [1/1] tests/e2e/test_slow.py  PASSED"))
    still = [line for line in out[:done] if line.startswith("nightly: still running")]
    assert len(still) >= 2, out
    assert all(line.startswith("nightly: still running (1): tests/e2e/test_slow.py ") and line.endswith(" timeout")
               for line in still), still
    assert not any("still running" in line for line in out[done:])


#: a test of :func:`registry_repo` that runs and passes at once
PASSING = QUICK_TEST.replace("if __name__", "def execute():\n    print('ok')\n\n\nif __name__").replace(
    QUICK_MAIN, "    execute()\n")


@pytest.mark.slow  # a real (tiny) night
def test_a_running_file_that_is_no_record_is_named_and_set_aside_and_puts_nothing_in_history(tmp_path, capsys,
                                                                                            monkeypatch):
    """A damaged file and a hand-made record naming `../../etc/passwd` in running/ were recorded as
    interrupted tests (`../../etc/passwd, unknown (deadbeef.json)`) and deleted."""
    import json

    from pipelines.core.history import FileHistoryStore

    _, assets = registry_repo(tmp_path, {"test_ok.py": PASSING.format(est=2)})
    monkeypatch.setenv("NIGHTLY_ASSETS_DIR", str(assets))
    running = tmp_path / "home" / "running"
    running.mkdir(parents=True)
    (running / "deadbeef.json").write_text('{"pid": "x", garbage\n')
    (running / "cafe.json").write_text(json.dumps({"owner_pid": 999999, "test_id": "../../etc/passwd", "run_id": "r",
                                                   "started_at": "x", "lock_paths": ["/etc/passwd"]}))
    assert main(["run", "--home", str(tmp_path / "home"), "--repo", "fw"]) == 0
    out = capsys.readouterr().out
    assert "an earlier night left" not in out
    assert (f"nightly: {running / 'cafe.json'}: test_id: '../../etc/passwd' is not a test id (contains '..'); not a "
            "record of an attempt a night started: nothing was killed or recorded for it; set aside as "
            f"{running / 'cafe.json'}.refused (delete it once read)") in out
    assert f"nightly: {running / 'deadbeef.json'}: cannot be read as JSON (" in out
    assert sorted(p.name for p in running.iterdir()) == ["cafe.json.refused", "deadbeef.json.refused"]
    assert [(s.test_id, s.outcome) for s in FileHistoryStore(tmp_path / "home" / "history.sqlite").read()] == [
        ("tests/e2e/test_ok.py", "passed")]


@pytest.mark.slow  # a real (tiny) night
def test_a_running_record_with_a_pid_no_kernel_gives_is_set_aside_and_the_night_goes_on(tmp_path, capsys, monkeypatch):
    """`"owner_pid": 99999999999999999999` crashed every night before any test ran (OverflowError from
    os.kill), and the file stayed, so every later night crashed too; a pgid as large was recorded as an
    interrupted test."""
    import json

    from pipelines.core.history import FileHistoryStore

    _, assets = registry_repo(tmp_path, {"test_ok.py": PASSING.format(est=2)})
    monkeypatch.setenv("NIGHTLY_ASSETS_DIR", str(assets))
    running = tmp_path / "home" / "running"
    running.mkdir(parents=True)
    record = {"test_id": "tests/e2e/test_ok.py", "run_id": "r", "night": "n", "started_at": "2026-11-01T01:00:00+00:00"}
    (running / "huge.json").write_text(json.dumps({**record, "token": "huge", "owner_pid": 99999999999999999999}))
    (running / "group.json").write_text(json.dumps({**record, "token": "group", "owner_pid": 4194304, "pgid": 2**63}))
    assert main(["run", "--home", str(tmp_path / "home"), "--repo", "fw"]) == 0
    out = capsys.readouterr().out
    assert (f"nightly: {running / 'huge.json'}: owner_pid: expected the night's pid (a whole number from 1 to "
            "4194304), got 99999999999999999999; not a record of an attempt a night started: nothing was killed or "
            f"recorded for it; set aside as {running / 'huge.json'}.refused (delete it once read)") in out
    assert (f"nightly: {running / 'group.json'}: pgid: expected a whole number from 0 to 4194304, got {2**63}; "
            "not a record of an attempt") in out
    assert sorted(p.name for p in running.iterdir()) == ["group.json.refused", "huge.json.refused"]
    assert [(s.test_id, s.outcome) for s in FileHistoryStore(tmp_path / "home" / "history.sqlite").read()] == [
        ("tests/e2e/test_ok.py", "passed")]


@pytest.mark.slow  # a real (tiny) night
def test_an_earlier_night_record_that_is_not_utf8_is_left_out_and_the_night_calibrates_and_reports(
        tmp_path, capsys, monkeypatch):
    """One Latin-1 byte in an old night's record failed every later night after its tests passed: its
    calibration stopped on the store error (no report, no estimates, exit 2)."""
    import json

    _, assets = registry_repo(tmp_path, {"test_ok.py": PASSING.format(est=2)})
    monkeypatch.setenv("NIGHTLY_ASSETS_DIR", str(assets))
    home = tmp_path / "home"
    (home / "nights").mkdir(parents=True)
    old = home / "nights" / "2026-11-04T150000Z.json"
    old.write_bytes(json.dumps({"night": "2026-11-04T150000Z", "run_id": "r1", "repo": "fw", "attempts": [],
                                "status": "finished", "notes": ["caf\u00e9"]}, ensure_ascii=False).encode("latin-1"))
    assert main(["run", "--home", str(home), "--repo", "fw"]) == 0
    out, err = capsys.readouterr()
    assert f"{old}:1: summary: not UTF-8 text (byte 0xe9 at offset " in out + err
    assert "re-save it as UTF-8 or move the file aside; left out" in out + err
    assert "Traceback" not in out + err and list((home / "reports").glob("*.html"))


@pytest.mark.slow  # a real (tiny) night
def test_a_latest_json_that_is_not_text_is_replaced_by_the_nights_record_as_a_garbled_one_is(
        tmp_path, capsys, monkeypatch):
    """`head -c 1000 /dev/urandom > nights/latest.json` made every night "not stored" (exit 4, the night kept
    under unsaved/), while an empty or garbled latest.json was replaced: it is a copy of the newest record."""
    import json

    _, assets = registry_repo(tmp_path, {"test_ok.py": PASSING.format(est=2)})
    monkeypatch.setenv("NIGHTLY_ASSETS_DIR", str(assets))
    home = tmp_path / "home"
    (home / "nights").mkdir(parents=True)
    (home / "nights" / "latest.json").write_bytes(bytes(range(256)) * 4)
    assert main(["run", "--home", str(home), "--repo", "fw"]) == 0
    out, err = capsys.readouterr()
    assert "not stored" not in out + err and not (home / "unsaved").exists()
    [run] = (home / "runs").glob("*.json")
    assert json.loads((home / "nights" / "latest.json").read_text()) == json.loads(run.read_text())


def test_list_only_says_where_the_durations_come_from_as_nightly_plan_does(tmp_path, monkeypatch, capsys):
    """The plan `nightly run` prints gave no sign which durations were measured and which guessed, nor how far
    the recent predictions were off: `nightly plan`'s lines for the same plan, from the same functions."""
    import json

    from pipelines.cli import plan as plan_cli
    from pipelines.core.history.store import FileHistoryStore
    from pipelines.core.model import Sample

    _, assets = registry_repo(tmp_path, {"test_a.py": PASSING.format(est=40), "test_b.py": PASSING.format(est=20)})
    monkeypatch.setenv("NIGHTLY_ASSETS_DIR", str(assets))
    home = tmp_path / "home"
    monkeypatch.setenv("NIGHTLY_HOME", str(home))
    a = next(t for t in Night(NightSettings(home=home, repo="fw")).registered.tests if t.id.endswith("test_a.py"))
    FileHistoryStore(home / "history.sqlite").append(
        Sample(a.id, a.hardware, a.sha256, "passed", 30.0, f"2026-11-0{day}T01:00:00Z") for day in (1, 2, 3))
    (home / "nights").mkdir()
    night = "2026-11-04T150000Z"
    (home / "nights" / f"{night}.json").write_text(json.dumps({
        "night": night, "run_id": "r1", "repo": "fw", "deployment": "local", "attempts": [], "status": "finished",
        "prediction": {"night": night, "predicted_median_s": 36.0, "predicted_p90_s": 40.0, "actual_s": 30.0,
                       "tests": []}}))
    assert main(["run", "--home", str(home), "--repo", "fw", "--list-only"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert plan_cli.run(plan_cli.argparse.Namespace(**{**_plan_defaults(), "repo": "fw"})) == 0
    planned = capsys.readouterr().out.splitlines()
    notes = planned[1:3]
    assert notes == ["  durations from history for 1 tests, est_time / 1.25 for 1 without a passing run of their current "
                     "file (marked below); timeouts stay on est_time",
                     "  prediction error over the last 1 night(s): makespan off by 20% on average (long by 20%), "
                     "within the p90 on 1/1"]
    header = next(i for i, line in enumerate(listed) if line.startswith("plan: "))
    assert listed[header + 1:header + 3] == notes
    rows = {line.split()[1]: line for line in listed if line.strip().split(" ")[0].isdigit()}
    assert rows["tests/e2e/test_b.py"].endswith(" (no history: est_time / 1.25)")
    assert not rows["tests/e2e/test_a.py"].endswith(")")


def _plan_defaults() -> dict:
    """`nightly plan`'s flags as its parser leaves them when none is given."""
    import argparse

    from pipelines.cli import plan as plan_cli

    parser = argparse.ArgumentParser(prog="nightly")
    plan_cli.register(parser.add_subparsers(dest="command"))
    return vars(parser.parse_args(["plan"]))


@pytest.mark.slow  # a real (tiny) night: a few seconds
def test_the_night_says_one_predicted_makespan_the_simulated_median_from_its_first_line_to_its_last(
        tmp_path, capsys, monkeypatch):
    """`nightly: done: predicted makespan 61.6s` (the schedule on medians) once stood beside the closing
    `predicted median makespan 64.1s (p90 ...)` (the simulated nights' median, which the record stores)."""
    import re

    _, assets = registry_repo(tmp_path, {"test_a.py": PASSING.format(est=40), "test_b.py": PASSING.format(est=20)})
    monkeypatch.setenv("NIGHTLY_ASSETS_DIR", str(assets))
    assert main(["run", "--home", str(tmp_path / "home"), "--repo", "fw"]) == 0
    out = capsys.readouterr().out
    plan, night = out.split("\nnightly: running")
    said = re.findall(r"predicted (?:median )?makespan [\d.]+s(?: \(p90 [\d.]+s\))?", night)
    assert len(said) == 3 and len(set(said)) == 1, said  # the night's plan line, its end, the closing line
    median, p90 = re.fullmatch(r"predicted median makespan ([\d.]+)s \(p90 ([\d.]+)s\)", said[0]).groups()
    assert f"(median of simulated nights {median}s, p90 {p90}s)" in plan  # the plan printed first, labelled


@pytest.mark.slow  # two real (tiny) nights
def test_the_verdict_nightly_run_prints_names_earlier_failures_not_run_tonight_as_the_report_does(
        tmp_path, capsys, monkeypatch):
    """After a night where one test failed, a night that did not select it printed `verdict: OK: every test
    passed` while the page it wrote and `nightly report` said `...; 1 earlier failure(s) not run tonight`."""
    failing = QUICK_TEST.format(est=2).replace('labels=["fx"]', 'labels=["other"]').replace(
        QUICK_MAIN, "    raise SystemExit(1)\n")
    _, assets = registry_repo(tmp_path, {"test_ok.py": QUICK_TEST.format(est=2), "test_fail.py": failing})
    monkeypatch.setenv("NIGHTLY_ASSETS_DIR", str(assets))
    home = tmp_path / "home"
    assert main(["run", "--home", str(home), "--repo", "fw"]) == 1
    capsys.readouterr()

    assert main(["run", "--home", str(home), "--repo", "fw", "--labels", "fx"]) == 0
    said = "OK: every test passed; 1 earlier failure(s) not run tonight"
    assert f"verdict: {said}" in capsys.readouterr().out.splitlines()
    assert main(["report", "--home", str(home), "--repo", "fw"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == f"report: {said}"


def test_a_per_commit_run_picks_a_long_test_by_its_label_as_only_nightly_leaves_long_out(tmp_path, capsys):
    """Framework M's per-commit run skips only nightly-only tests: `--cadence pr --labels ckpt` lists a
    test labelled ckpt and long (a PR's run-ci-ckpt runs it); the nightly cadence leaves it out."""
    repo = tmp_path / "fw"
    (repo / "tests/e2e").mkdir(parents=True)
    (repo / "tests/e2e/test_ckpt.py").write_text(
        'register_cuda_ci(3600, "stage-c-8-gpu-h200", labels=["megatron", "ckpt", "long"])\n')
    flags = ["run", "--home", str(tmp_path / "home"), "--repo", str(repo), "--list-only", "--labels", "ckpt"]
    assert main([*flags, "--cadence", "pr"]) == 0
    out = capsys.readouterr().out
    assert "plan: 1 tests" in out and "tests/e2e/test_ckpt.py" in out
    assert main([*flags, "--cadence", "nightly"]) == 3
    assert "--cadence nightly selects none of the 1 test(s)" in capsys.readouterr().err


def test_an_unconfigured_framework_m_checkout_is_read_where_its_runner_collects_tests(tmp_path, capsys):
    """M's runner collects test_*.py under tests/fast, tests/fast-gpu, tests/e2e and tests/ci only (_DISCOVERY_ROOTS
    of its ci_register.py): an unregistered tests/unit/test_x.py is no test of it, so not a problem that fails the
    night. A checkout holding none of those folders is still read under tests/, said in an `assumed:` line."""
    repo = tmp_path / "fw"
    files = {"tests/e2e/test_gpu.py": 'register_cuda_ci(60, "stage-b-2-gpu-h200", labels=["megatron"])\n',
             "tests/fast/test_cpu.py": "def test_x():\n    pass\n",
             "tests/unit/test_x.py": "def test_x():\n    pass\n",
             "tests/test_top.py": "def test_x():\n    pass\n"}
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    flags = ["run", "--home", str(tmp_path / "home"), "--repo", str(repo), "--list-only", "--cadence", "weekly"]
    assert main(flags) == 0
    out, err = capsys.readouterr()
    assert "plan: 2 tests" in out and "tests/unit/test_x.py" not in out + err and "problem" not in err
    assert "assumed: roots: tests/fast, tests/e2e (the m runner's; set `roots:` in assets/repos.yaml to change)" in out
    old = tmp_path / "old"
    (old / "tests").mkdir(parents=True)
    (old / "tests/test_gpu.py").write_text(files["tests/e2e/test_gpu.py"])
    assert main([*flags[:4], str(old), *flags[5:]]) == 0
    out, err = capsys.readouterr()
    assert "plan: 1 tests" in out
    assert ("assumed: roots: tests (none of the m runner's tests/fast, tests/fast-gpu, tests/e2e, tests/ci exists; "
            "set `roots:` in assets/repos.yaml to change)") in out


@pytest.mark.slow  # a real (tiny) night
def test_control_characters_a_failing_test_prints_are_shown_not_sent_to_the_terminal_or_page(tmp_path, capsys,
                                                                                              monkeypatch):
    """A test's ESC sequences, NUL and BEL reached the terminal through `nightly run`'s closing lines and the
    report page's <pre> as they were (a colour that stays on, a retitled terminal, a bell); each is now its
    \\xNN form, tabs kept."""
    import re

    noisy = QUICK_TEST.format(est=2).replace(QUICK_MAIN, (
        '    print("\\x1b[31mred\\x1b[0m bell\\x07 nul\\x00 del\\x7f tab\\there", flush=True)\n'
        '    raise RuntimeError("retitled \\x1b]0;pwned\\x07 end")\n'))
    _, assets = registry_repo(tmp_path, {"test_noisy.py": noisy})
    monkeypatch.setenv("NIGHTLY_ASSETS_DIR", str(assets))
    home = tmp_path / "home"
    assert main(["run", "--home", str(home), "--repo", "fw"]) == 1
    closing = capsys.readouterr().out.split("\nverdict: ")[1]
    control = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
    assert not control.search(closing), repr(closing)
    reason = "RuntimeError: retitled \\x1b]0;pwned\\x07 end"
    assert f"FAILED tests/e2e/test_noisy.py: test failure (exit 1): {reason}; node " in closing
    assert closing.splitlines()[-1] == f"  | {reason}"  # the log's last line
    [report] = (home / "reports").glob("*.html")
    page = report.read_text()
    assert not control.search(page), repr(control.findall(page))
    assert "\\x1b[31mred\\x1b[0m bell\\x07 nul\\x00 del\\x7f tab\there" in page and reason in page


@pytest.mark.slow  # a real (tiny) night
def test_a_night_an_error_stopped_after_its_last_test_passed_exits_1_and_is_recorded_not_ok(
        tmp_path, capsys, monkeypatch):
    """A bug while recording the last test's result stopped the night after every test had passed: the
    verdict line said `FAILED: the night stopped on an error (...)`, but `nightly run` exited 0 and the
    record kept `ok: true`, so a CI gate on the exit status went green."""
    import json

    import pipelines.defs.test_runs as test_runs

    _, assets = registry_repo(tmp_path, {"test_a.py": PASSING.format(est=2), "test_b.py": PASSING.format(est=2)})
    monkeypatch.setenv("NIGHTLY_ASSETS_DIR", str(assets))
    real, calls = test_runs.attempt_metadata, []

    def breaks_on_the_second(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyError("injected")
        return real(*args, **kwargs)

    monkeypatch.setattr(test_runs, "attempt_metadata", breaks_on_the_second)
    home = tmp_path / "home"
    assert main(["run", "--home", str(home), "--repo", "fw"]) == 1
    out, _ = capsys.readouterr()
    assert "verdict: FAILED: the night stopped on an error (KeyError: 'injected')" in out
    [record] = [p for p in (home / "nights").glob("*.json") if p.name != "latest.json"]
    summary = json.loads(record.read_text())
    assert summary["status"] == "failed" and summary["verdict"]["ok"] is False
    assert {a["outcome"] for a in summary["attempts"]} == {"passed"}


@pytest.mark.slow  # a real (tiny) night whose test takes 3.75 s of its 4 s timeout
def test_a_test_near_its_timeout_tonight_is_named_by_nightly_run_as_by_its_report(tmp_path, capsys, monkeypatch):
    """`nightly run --timeout-floor 4` of a test that sleeps 3.75 s: over 90 % of tonight's 4 s timeout. The
    run judged only against next night's timeout (raised by calibration), printed no `near timeout:` line,
    while the report listed it: both now name it, with next night's timeout as context."""
    import json
    import re

    from pipelines.launch.local import LocalLauncher

    slow = QUICK_TEST.format(est=2)  # ends at once; the launcher measures it as 3.75 s, whatever the machine's load
    real_wait = LocalLauncher._wait

    def took_3_75_s(self, proc, timeout_s, t0):
        ended, _ = real_wait(self, proc, timeout_s, t0)
        return ended, 3.75

    monkeypatch.setattr(LocalLauncher, "_wait", took_3_75_s)
    _, assets = registry_repo(tmp_path, {"test_slow.py": slow})
    monkeypatch.setenv("NIGHTLY_ASSETS_DIR", str(assets))
    home = str(tmp_path / "home")
    code = main(["run", "--home", home, "--repo", "fw", "--timeout-floor", "4"])
    out = capsys.readouterr().out
    assert code == 0, out[-3000:]
    [line] = [x for x in out.splitlines() if x.startswith("near timeout: ")]
    said = re.fullmatch(r"near timeout: tests/e2e/test_slow\.py: tonight's run passed after ([\d.]+) s of its 4 s "
                        r"timeout \((\d+)%\); next night: (?:(\d+) s after calibration|the same timeout after calibration)",
                        line)
    assert said and float(said[1]) > 3.6, line
    assert main(["report", "--home", home, "--repo", "fw", "--json"]) == 0
    [near] = json.loads(capsys.readouterr().out)["near_timeout"]
    assert (near["test_id"], near["timeout_s"], f"{100 * near['elapsed_s'] / near['timeout_s']:.0f}") == \
        ("tests/e2e/test_slow.py", 4, said[2])
    assert (near["next_night"]["timeout_s"] if said[3] else 4) == int(said[3] or 4)
