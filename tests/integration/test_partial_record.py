"""The run's record is in the state store from the moment the run is planned, and says how far it got.

``run_tests`` on the example with a stand-in launcher (no test processes): the record is stored,
marked ``running``, before the first test is launched; it is rewritten as each attempt finishes;
a run that fails mid-way leaves ``failed`` with what finished and why; a run that ends normally
leaves the whole record (``finished``). ``nights/latest.json`` is the newest night's record: a run that
started earlier and writes later (its step outlived its worker) never replaces a newer night's, locally
or in S3.
"""

from __future__ import annotations

import json
import time
import uuid
from datetime import UTC, datetime

import pytest

from pipelines.core.model import Attempt
from pipelines.core.runset import RunSelection
from pipelines.execute import Finished, NightDone, run_tests
from pipelines.night import Night, NightSettings
from pipelines.storage.state import S3StateStore
from tests.support.moto import moto_server, s3_client

pytestmark = pytest.mark.slow  # the example's catalog and inputs

TESTS = ("tests/e2e/megatron/test_dp8_chat.py", "tests/e2e/fsdp/test_fsdp_sft_chat.py",
         "tests/e2e/megatron/test_sft_math.py")


class StandIn:
    """Passes each test at once, writing its log; reads the run's record at each launch; fails the ``fail_at``-th."""

    name = "stand-in"

    def __init__(self, night: Night, fail_at: int | None = None):
        self.night, self.fail_at, self.seen = night, fail_at, []

    def launch(self, request, on_log=None) -> Attempt:
        self.seen.append(json.loads(self.night.state.get(f"runs/{self.night.run_id}.json") or "null"))
        if len(self.seen) == self.fail_at:
            raise RuntimeError("the API server went away")
        request.log_path.parent.mkdir(parents=True, exist_ok=True)
        request.log_path.write_text(f"{request.test.id}: ok\n")
        return Attempt(request.test.id, "passed", 1.0, datetime.now(UTC).isoformat(), node="stand-in-0",
                       log_path=str(request.log_path), timeout_s=request.timeout_s)


def start(tmp_path, fail_at=None, state=None):
    night = Night(NightSettings(home=tmp_path / "home", repo="minirl", deployment="local"))
    if state is not None:
        night.state = state
    launcher = StandIn(night, fail_at)
    runset = night.runset(list(TESTS), RunSelection())
    return night, launcher, run_tests(night, runset, RunSelection(), launcher=launcher, say=lambda _: None)


def test_the_record_is_stored_running_before_any_test_starts_and_grows_as_attempts_finish(tmp_path):
    night, launcher, events = start(tmp_path)
    done, grown = [], []
    for e in events:
        if isinstance(e, Finished):  # by the time the run says an attempt finished, its record has it
            record = json.loads(night.state.get(f"runs/{night.run_id}.json"))
            grown.append((record["status"], len(record["attempts"]), e.attempt.test_id in
                          {a["test_id"] for a in record["attempts"]}))
        done += [e] if isinstance(e, NightDone) else []
    first = launcher.seen[0]
    assert first["status"] == "running" and first["attempts"] == [] and first["verdict"]["ok"] is False
    assert sorted(first["verdict"]["unfinished"]) == sorted(TESTS)
    assert first["notes"][0].startswith("INCOMPLETE: this record was written at ")
    assert "(0 of 3 test(s) had finished)" in first["notes"][0]
    assert grown == [("running", 1, True), ("running", 2, True), ("running", 3, True)]
    whole = json.loads(night.state.get(f"runs/{night.run_id}.json"))
    assert done and whole["status"] == "finished" and whole["verdict"]["ok"] is True
    assert not any(n.startswith("INCOMPLETE") for n in whole["notes"]) and "unfinished" not in whole["verdict"]
    assert json.loads(night.state.get("nights/latest.json")) == whole


def test_a_run_that_fails_mid_way_leaves_what_finished_and_why(tmp_path):
    night, launcher, events = start(tmp_path, fail_at=3)
    with pytest.raises(RuntimeError, match="the API server went away"):
        list(events)
    record = json.loads(night.state.get(f"runs/{night.run_id}.json"))
    assert record["status"] == "failed" and len(record["attempts"]) == 2
    assert record["notes"][0] == ("INCOMPLETE: the run failed (RuntimeError: the API server went away); tests "
                                  "without an attempt never ran; see the Dagster run's log for where it failed")
    assert len(record["verdict"]["unfinished"]) == 1 and record["verdict"]["ok"] is False
    assert json.loads(night.state.get("nights/latest.json"))["status"] == "failed"


def test_a_run_stopped_by_its_consumer_before_dispatch_says_interrupted(tmp_path, capsys):
    night, launcher, events = start(tmp_path)
    assert type(next(events)).__name__ == "Planned"
    assert type(next(events)).__name__ == "InputReady"
    events.close()  # the run is terminated while its inputs are being built
    record = json.loads(night.state.get(f"runs/{night.run_id}.json"))
    assert record["status"] == "interrupted" and record["interrupted"] is True and record["attempts"] == []
    assert record["notes"][0].startswith("INCOMPLETE: the run was interrupted before its tests were dispatched")
    from pipelines.cli import main

    capsys.readouterr()
    assert main(["report", "--json", "--home", str(tmp_path / "home"), "--repo", "minirl"]) == 0
    data = json.loads(capsys.readouterr().out)  # a night with no attempt at all is still reported
    assert data["run_id"] == night.run_id and not data["verdict"].startswith("OK")
    assert {r["outcome"] for r in data["rows"] if r["test_id"] in TESTS} == {"not_run"}


def a_second_later(night: Night) -> None:
    """Until the clock is past the second ``night`` started in: a night made now started after it."""
    while datetime.now(UTC).strftime("%Y-%m-%dT%H%M%SZ") <= night.night[:18]:
        time.sleep(0.01)


@pytest.fixture(scope="module")
def endpoint():
    with moto_server() as url:
        yield url


@pytest.fixture(params=["local", "s3"])
def state(request, tmp_path):
    """None: the night's own state folder; else an S3 state store on a moto server."""
    if request.param == "local":
        return None
    bucket = f"state-{uuid.uuid4().hex[:12]}"
    client = s3_client(request.getfixturevalue("endpoint"))
    client.create_bucket(Bucket=bucket)
    return S3StateStore(bucket, "team-a/nightly", client=client)


def test_a_night_that_writes_its_record_after_a_newer_night_ended_leaves_latest_json_to_the_newer_one(tmp_path, state):
    older, _, older_events = start(tmp_path, state=state)
    next(e for e in older_events if isinstance(e, Finished))  # its first test ended; the rest are still to run
    a_second_later(older)
    newer, _, newer_events = start(tmp_path, state=state)
    assert newer.night > older.night
    list(newer_events)
    store = newer.state
    newest = json.loads(store.get(f"runs/{newer.run_id}.json"))
    assert newest["status"] == "finished" and json.loads(store.get("nights/latest.json")) == newest

    list(older_events)  # the older night goes on: a record after each test and its whole one at the end
    late = json.loads(store.get(f"runs/{older.run_id}.json"))
    assert late["status"] == "finished" and len(late["attempts"]) == len(TESTS)  # its own record is written
    assert json.loads(store.get(f"nights/{older.night}.json")) == late
    assert json.loads(store.get("nights/latest.json")) == newest  # never replaced by the older night's
