"""``nightly quarantine`` as a maintainer types it, on a laid-out state folder shared by several repos."""

from __future__ import annotations

import dataclasses
import json
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from pipelines.cli import main
from pipelines.core.history import FileHistoryStore
from pipelines.core.specs import unconfigured_name
from tests.conftest import PROJECT_ROOT
from tests.reporting.nights import (
    GRPO,
    LORA,
    SFT,
    as_unconfigured_before_digest,
    example_night,
    tid,
    write_home,
)
from tests.support.assets import EXAMPLE, example_assets

#: a test of examples/sglangish, flaky in the same history store as the example's tests
OTHER = "test/registered/basic/test_generate.py::cuda-stage-b-test-1-gpu-large"
SGLANGISH = str(PROJECT_ROOT / "examples" / "sglangish")


@pytest.fixture(scope="module")
def laid_out(tmp_path_factory):
    return write_home(example_night(tmp_path_factory.mktemp("home")))


@pytest.fixture
def home(laid_out, tmp_path):
    shutil.copytree(laid_out, tmp_path / "home")
    return tmp_path / "home"


def nightly(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def listed(capsys, home, repo: str = "minirl") -> dict[str, dict]:
    code, out, err = nightly(capsys, "quarantine", "list", "--json", "--home", str(home), "--repo", repo)
    assert code == 0, err
    return {s["test_id"]: s for s in json.loads(out)}


MISSPELLED = json.dumps({"version": 1, "actions_": [{"test": tid(SFT), "action": "add", "by": "alice",
                                                     "why": "issue #7", "at": "2026-11-06T09:00:00+00:00"}]})


@pytest.mark.parametrize("argv", [
    ("quarantine", "list"),
    ("quarantine", "add", tid(LORA), "--by", "bob", "--why", "hangs"),
    ("quarantine", "release", tid(SFT), "--by", "bob", "--why", "fixed"),
    ("report", "--json"),
    ("run", "--list-only"),
], ids=lambda argv: " ".join(argv[:2]))
def test_every_command_that_reads_a_broken_quarantine_document_says_where_and_leaves_it_as_it_was(home, capsys, argv):
    doc = home / "quarantine" / "minirl.json"
    doc.parent.mkdir()
    doc.write_text(MISSPELLED)
    code, _, err = nightly(capsys, *argv, "--home", str(home), "--repo", "minirl")
    assert code == 2, err
    assert f"{doc}:1: actions_: unknown key; did you mean 'actions'? " in err
    assert "move the file aside" in err and "Traceback" not in err
    assert doc.read_text() == MISSPELLED, "alice's action must not be lost"


@pytest.mark.parametrize("argv", [
    ("quarantine", "list"),
    ("quarantine", "add", tid(LORA), "--by", "bob", "--why", "hangs"),
    ("report", "--json"),
    ("run", "--list-only"),
], ids=lambda argv: " ".join(argv[:2]))
def test_a_quarantine_document_saved_as_latin_1_is_named_with_the_byte_not_a_traceback(home, capsys, argv):
    doc = home / "quarantine" / "minirl.json"
    doc.parent.mkdir()
    latin1 = '{"version": 1, "actions": [{"test": "x", "why": "caf\u00e9"}]}'.encode("latin-1")
    doc.write_bytes(latin1)
    code, _, err = nightly(capsys, *argv, "--home", str(home), "--repo", "minirl")
    assert code == 2, err
    assert f"{doc}: not UTF-8 text (byte 0xe9 at offset 52); re-save it as UTF-8" in err
    assert "Traceback" not in err and doc.read_bytes() == latin1


def test_a_manual_quarantine_keeps_its_evidence_after_the_next_night(home, capsys):
    before = listed(capsys, home)[tid(GRPO)]["evidence"]
    assert [e["kind"] for e in before] == ["passed_on_retry"]
    code, _, err = nightly(capsys, "quarantine", "add", tid(GRPO), "--home", str(home), "--repo", "minirl",
                           "--by", "alice", "--why", "issue #9")
    assert code == 0, err
    # the next night, after the quarantine: on the same code and image the test now fails outright
    history = FileHistoryStore(home / "history.sqlite")
    last = [s for s in history.read() if s.test_id == tid(GRPO) and s.run_id == "run-2026-11-06T150000Z"][-1]
    later = (datetime.now(UTC) + timedelta(hours=1)).isoformat(timespec="seconds")
    history.append([dataclasses.replace(last, run_id="run-next", started_at=later, outcome="failed", attempt=1)])
    after = listed(capsys, home)[tid(GRPO)]
    assert (after["state"], after["by"]) == ("quarantined", "alice")
    assert [e["text"] for e in after["evidence"]] == [
        before[0]["text"],
        "passed in run run-2026-11-06T150000Z, failed in run run-next on the same code and image"]
    # a hold by hand never ends on its own; the list says how long the held test has failed
    assert (after["failing"], after["lapsed"]) == (1, False)
    code, out, _ = nightly(capsys, "quarantine", "list", "--home", str(home), "--repo", "minirl")
    [line] = [x for x in out.splitlines() if tid(GRPO) in x]
    assert code == 0 and line.endswith(": issue #9; failed 1 night(s) in a row since quarantined") and " by alice" in line


def with_other_repos_flaky_test(home):
    """The same history store holds another repo's samples (every repo's nights write to it)."""
    history = FileHistoryStore(home / "history.sqlite")
    grpo = [s for s in history.read() if s.test_id == tid(GRPO)]
    history.append([dataclasses.replace(s, test_id=OTHER, run_id=s.run_id + "-sglangish") for s in grpo])


def test_list_shows_only_the_repos_own_tests(home, capsys):
    with_other_repos_flaky_test(home)
    assert list(listed(capsys, home)) == [tid(GRPO)]
    assert list(listed(capsys, home, SGLANGISH)) == [OTHER]
    _, out, _ = nightly(capsys, "quarantine", "list", "--home", str(home), "--repo", SGLANGISH)
    assert tid(GRPO) not in out and OTHER in out


def gone_checkout(home, tmp_path, monkeypatch) -> str:
    """The path of minirl's checkout as assets/repos.yaml configures it, which is not here: its catalog
    cannot be read, and its nights and quarantine are still under its name."""
    gone = home / "checkouts" / "minirl"
    monkeypatch.setenv("NIGHTLY_ASSETS_DIR", str(example_assets(tmp_path / "assets", repo=gone)))
    return str(gone)


def test_without_a_catalog_list_falls_back_to_the_tests_of_the_repos_document_and_nights_and_says_so(
        home, capsys, tmp_path, monkeypatch):
    with_other_repos_flaky_test(home)
    gone = gone_checkout(home, tmp_path, monkeypatch)
    code, out, err = nightly(capsys, "quarantine", "list", "--json", "--home", str(home), "--repo", gone)
    assert code == 0, err
    assert [s["test_id"] for s in json.loads(out)] == [tid(GRPO)]
    assert ("nightly quarantine list: warning: no tests from the catalog of minirl; using the tests its quarantine "
            "document and its 6 night(s) name") in err


def test_add_and_release_refuse_a_test_of_another_repo(home, capsys, tmp_path, monkeypatch):
    code, _, err = nightly(capsys, "quarantine", "add", tid(SFT), "--home", str(home), "--repo", SGLANGISH,
                           "--by", "alice", "--why", "x")
    assert code == 2 and f"TEST: '{tid(SFT)}' is not a test of {unconfigured_name(Path(SGLANGISH))}" in err
    gone = gone_checkout(home, tmp_path, monkeypatch)
    code, _, err = nightly(capsys, "quarantine", "add", OTHER, "--home", str(home), "--repo", gone,
                           "--by", "alice", "--why", "x")
    assert code == 2 and f"TEST: '{OTHER}' is not a test of minirl (no tests from the catalog of minirl; " in err
    assert "and it is not one of them); `nightly catalog` lists the test ids; fix the catalog first" in err
    assert not (home / "quarantine" / "minirl.json").exists()
    code, _, err = nightly(capsys, "quarantine", "add", tid(GRPO), "--home", str(home), "--repo", gone,
                           "--by", "alice", "--why", "x")
    assert code == 0, err


def test_a_test_quarantined_by_hand_and_since_renamed_can_still_be_listed_and_released(home, capsys):
    """The night's record and the report still show it quarantined: the maintainer must be able to end that."""
    gone = "tests/e2e/megatron/test_old_name.py"
    doc = home / "quarantine" / "minirl.json"
    doc.parent.mkdir()
    doc.write_text(json.dumps({"version": 1, "actions": [{"test": gone, "action": "add", "by": "alice",
                                                          "why": "flaky, issue 12", "at": "2026-11-01T09:00:00+00:00"}]}))
    assert listed(capsys, home)[gone]["state"] == "quarantined"
    code, _, err = nightly(capsys, "quarantine", "release", gone, "--by", "alice", "--why", "renamed",
                           "--home", str(home), "--repo", "minirl")
    assert code == 0, err
    assert listed(capsys, home)[gone]["state"] == "released"


def test_an_unconfigured_checkout_keeps_the_quarantines_it_had_under_its_folder_name(home, capsys, tmp_path):
    """Before its name had a digest, a checkout nobody configured kept its quarantine under its folder name:
    every way in still reads it, and the first change carries it over to the new name (the old file stays)."""
    from pipelines.night import Night, NightSettings

    fw = tmp_path / "fw"
    shutil.copytree(EXAMPLE, fw)
    old = as_unconfigured_before_digest(home, fw, quarantined=tid(GRPO))
    before = old.read_text()
    assert (listed(capsys, home, str(fw))[tid(GRPO)]["state"], listed(capsys, home, str(fw))[tid(GRPO)]["by"]) == (
        "quarantined", "alice")
    assert Night(NightSettings(home=home, repo=str(fw))).flaky_states()[tid(GRPO)].state == "quarantined"
    code, out, err = nightly(capsys, "quarantine", "add", tid(LORA), "--by", "bob", "--why", "hangs",
                             "--home", str(home), "--repo", str(fw))
    new = home / "quarantine" / f"{unconfigured_name(fw)}.json"
    assert code == 0 and f"({new})" in out, err
    assert [(a["test"], a["by"]) for a in json.loads(new.read_text())["actions"]] == [(tid(GRPO), "alice"),
                                                                                    (tid(LORA), "bob")]
    assert old.read_text() == before
    assert {t: s["by"] for t, s in listed(capsys, home, str(fw)).items() if s["state"] == "quarantined"} == {
        tid(GRPO): "alice", tid(LORA): "bob"}


def test_a_folder_name_quarantine_two_checkouts_shared_is_neither_ones(home, capsys, tmp_path):
    """Another checkout called `fw` never ran a night: alice's quarantine is not its. Once it has one, the
    document was shared by two checkouts and is read by neither."""
    fw, other = tmp_path / "fw", tmp_path / "x" / "fw"
    shutil.copytree(EXAMPLE, fw)
    shutil.copytree(EXAMPLE, other)
    as_unconfigured_before_digest(home, fw, quarantined=tid(GRPO))
    assert listed(capsys, home, str(other))[tid(GRPO)]["state"] == "flaky"
    night = json.loads((home / "nights" / "2026-11-01T150000Z.json").read_text())
    (home / "nights" / "2026-10-31T150000Z.json").write_text(json.dumps({**night, "night": "2026-10-31T150000Z",
                                                                         "repo_path": str(other)}))
    assert listed(capsys, home, str(fw))[tid(GRPO)]["state"] == "flaky"


@pytest.mark.parametrize("action", ["add", "release"])
def test_an_empty_test_id_is_refused_as_empty_not_answered_with_every_test(home, capsys, action):
    code, out, err = nightly(capsys, "quarantine", action, "--home", str(home), "--by", "me", "--why", "x", "--", "")
    assert (code, out) == (2, "")
    assert err == (f"nightly quarantine {action}: TEST: must not be empty; say which test (its id as `nightly catalog` "
                   "prints it)\n")
    assert not (home / "quarantine" / "minirl.json").exists()


def test_a_quarantine_outlasts_calibrates_est_time_rewrite_in_the_list(tmp_path, capsys):
    """Quarantined on the file before `nightly calibrate --write` rewrote its est_time (the succession
    is in the history store); a failing night of the rewritten file keeps it quarantined in `quarantine
    list`, as in the night's verdict. Without the succession it is another file: the quarantine ends."""
    from pipelines.core.calibrate import Lineage, Succession
    from pipelines.core.model import Sample

    before, after = "1" * 64, "2" * 64
    runs = [Sample(tid(LORA), "h200", before, outcome, 60.0, f"2026-11-0{day}T01:0{attempt}:00+00:00",
                   node="h200-a", run_id=f"run-{day}", attempt=attempt)
            for day in (1, 2, 3) for attempt, outcome in ((1, "failed"), (2, "passed"))]
    runs.append(Sample(tid(LORA), "h200", after, "failed", 60.0, "2026-11-04T01:01:00+00:00", node="h200-a",
                       run_id="run-4", attempt=1))
    home = tmp_path / "home"
    store = FileHistoryStore(home / "history.sqlite")
    store.append(runs)
    assert listed(capsys, home)[tid(LORA)]["lapsed"] is True  # no record of the rewrite: a changed file
    store.add_successions([Succession(before, after, tid(LORA))])
    state = listed(capsys, home)[tid(LORA)]
    assert (state["state"], state["lapsed"], state["failing"]) == ("quarantined", False, 1)
    assert Lineage.of(store.successions()).same_revision(after) == {before, after}


def test_list_says_an_automatic_quarantine_of_a_changed_test_file_ends_as_the_next_night_starts(tmp_path, capsys):
    """Quarantined by the rules on the test file as the catalog has it: it holds, nothing said; on a
    file since changed (the catalog's digest differs, no calibrate rewrite leads to it), `list` says
    the next night ends it, as that night's `for_tonight` will."""
    from pipelines.core.model import Sample
    from tests.reporting.nights import example_tests

    now = {t.id: t.sha256 for t in example_tests()}[tid(LORA)]

    def quarantined_on(sha: str) -> dict:
        runs = [Sample(tid(LORA), "h200", sha, outcome, 60.0, f"2026-11-0{day}T01:0{attempt}:00+00:00",
                       node="h200-a", run_id=f"run-{day}", attempt=attempt)
                for day in (1, 2, 3) for attempt, outcome in ((1, "failed"), (2, "passed"))]
        home = tmp_path / sha[:4]
        FileHistoryStore(home / "history.sqlite").append(runs)
        state = listed(capsys, home)[tid(LORA)]
        assert state["state"] == "quarantined"
        code, out, err = nightly(capsys, "quarantine", "list", "--home", str(home), "--repo", "minirl")
        assert code == 0, err
        line = next(x for x in out.splitlines() if tid(LORA) in x)
        return state, line

    state, line = quarantined_on(now)
    assert "ends_next_run" not in state and "ends when it next runs" not in line
    state, line = quarantined_on("9" * 64)
    why = f"test file changed since quarantined (sha256 {'9' * 12} -> {now[:12]})"
    assert state["ends_next_run"] == why
    assert line.endswith(f"; ends when it next runs: {why}")


def test_a_rules_quarantine_lists_the_evidence_that_quarantined_it_and_what_came_since_apart(home, capsys):
    """Quarantined by three flips, then the test passed twice: the list showed the flip back to passing
    (a night towards release) among the quarantine's evidence, under its frozen "3 flip(s)"."""
    history = FileHistoryStore(home / "history.sqlite")
    last = [s for s in history.read() if s.test_id == tid(LORA)][-1]
    start = datetime.now(UTC) + timedelta(hours=1)
    for k, outcome in enumerate(("passed", "failed", "passed", "failed", "passed", "passed")):
        at = (start + timedelta(days=k)).isoformat(timespec="seconds")
        history.append([dataclasses.replace(last, run_id=f"run-later-{k}", started_at=at, outcome=outcome, attempt=1)])
    state = listed(capsys, home)[tid(LORA)]
    assert (state["state"], state["why"], state["passes"]) == ("quarantined", "0 pass(es) on retry and 3 flip(s) in "
                                                               "the last 14 nights", 2)
    # quarantined by the third flip (run-later-2); run-later-3 failed, then two clean nights towards release
    assert [e["run_id"] for e in state["evidence"]] == ["run-later-0", "run-later-1", "run-later-2"]
    code, out, _ = nightly(capsys, "quarantine", "list", "--home", str(home), "--repo", "minirl")
    lines = out.splitlines()
    at = next(i for i, x in enumerate(lines) if tid(LORA) in x)
    assert code == 0 and [x.strip() for x in lines[at + 1:at + 5]] == [
        *(f"- {e['text']}" for e in state["evidence"]),
        "since quarantined: 2 clean passing night(s) in a row of the 5 that release it; 0 failing night(s) in a "
        "row of the 5 that end it"]


def test_the_hold_of_a_quarantined_test_says_a_release_command_that_runs_as_pasted(tmp_path, capsys, monkeypatch):
    """With run_quarantined off, `nightly run --list-only` holds a quarantined test back and says how to
    release it: the command it prints must run as pasted (its required --by/--why, and the --home and
    --repo of the night it came from), and it must say who quarantined it by hand."""
    import shlex

    import yaml

    assets = example_assets(tmp_path / "assets")
    data = yaml.safe_load((assets / "repos.yaml").read_text())
    data["repos"]["minirl"]["flaky"] = {"run_quarantined": False}
    (assets / "repos.yaml").write_text(yaml.safe_dump(data))
    monkeypatch.setenv("NIGHTLY_ASSETS_DIR", str(assets))
    monkeypatch.setenv("NIGHTLY_HOME", str(tmp_path / "default-home"))
    home = tmp_path / "side home"
    test = "tests/e2e/lora/test_lora_math.py"
    code, _, err = nightly(capsys, "quarantine", "add", test, "--by", "alice", "--why", "#12", "--home", str(home),
                           "--repo", str(EXAMPLE))
    assert code == 0, err

    code, out, err = nightly(capsys, "run", "--list-only", "--labels", "lora", "--home", str(home), "--repo", str(EXAMPLE))

    assert code == 0, err
    [line] = [x for x in out.splitlines() if "run_quarantined is off" in x]
    assert "quarantined by hand by alice" in line
    hint = line.split("`")[-2]
    argv = shlex.split(hint.replace("<who>", "bob").replace("<why>", shlex.quote("fixed in #13")))
    assert argv[:3] == ["nightly", "quarantine", "release"]
    code, _, err = nightly(capsys, *argv[1:])
    assert code == 0, err
    code, out, err = nightly(capsys, "run", "--list-only", "--labels", "lora", "--home", str(home), "--repo", str(EXAMPLE))
    assert code == 0 and "run_quarantined is off" not in out, out
