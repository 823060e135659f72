"""The state store's read-modify-write (``update``): two writers that overlap both keep their change.

Locally a file lock serialises them; on S3 (a real moto server over HTTP) a conditional write
(If-Match the ETag read, If-None-Match: * when absent) refuses the stale one, which reads again.
Each test makes writer B commit while writer A is between its read and its write.
"""

from __future__ import annotations

import threading
import uuid

import pytest

from pipelines.storage import state as state_mod
from pipelines.storage.state import LocalStateStore, NotText, S3StateStore, StateError, Undecodable
from tests.support.moto import moto_server, s3_client

KEY = "quarantine/minirl.json"


def overlapping(store) -> str:
    """A reads, B writes and finishes, then A writes: returns the text both left."""
    a_read, b_done = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def a_change(text):
        a_read.set()
        b_done.wait(1.5)  # under a lock B cannot finish before A writes: the wait just times out
        return (text or "") + "a\n"

    def b():
        try:
            a_read.wait(10)
            store.update(KEY, lambda text: (text or "") + "b\n")
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)
        finally:
            b_done.set()

    other = threading.Thread(target=b)
    other.start()
    store.update(KEY, a_change)
    other.join(20)
    assert not errors and not other.is_alive()
    return store.get(KEY)


def test_two_local_writers_that_overlap_both_keep_their_change(tmp_path):
    store = LocalStateStore(tmp_path)
    assert sorted(overlapping(store).splitlines()) == ["a", "b"]
    assert store.keys("quarantine") == [KEY]  # the lock file beside it is not a state key


def test_a_local_change_that_raises_writes_nothing(tmp_path):
    store = LocalStateStore(tmp_path)
    store.put(KEY, "kept\n")

    def refuse(text):
        raise ValueError("no")

    with pytest.raises(ValueError):
        store.update(KEY, refuse)
    assert store.get(KEY) == "kept\n"


def test_two_local_processes_that_overlap_both_keep_their_change(tmp_path):
    """The lock holds across processes too (each CLI call is one)."""
    import subprocess
    import sys

    from tests.conftest import PROJECT_ROOT

    code = ("import sys, time; from pipelines.storage.state import LocalStateStore as S; "
            "s = S(sys.argv[1]); "
            "s.update('quarantine/minirl.json', lambda t: (print('read', flush=True), time.sleep(float(sys.argv[3])), "
            "(t or '') + sys.argv[2] + '\\n')[-1])")
    slow = subprocess.Popen([sys.executable, "-c", code, str(tmp_path), "a", "1.5"], cwd=PROJECT_ROOT,
                            stdout=subprocess.PIPE, text=True)
    assert slow.stdout.readline().strip() == "read"  # A has read and holds the lock
    fast = subprocess.run([sys.executable, "-c", code, str(tmp_path), "b", "0"], cwd=PROJECT_ROOT,
                          capture_output=True, text=True, timeout=60)
    assert fast.returncode == 0 and slow.wait(60) == 0, fast.stderr
    assert sorted(LocalStateStore(tmp_path).get(KEY).splitlines()) == ["a", "b"]


@pytest.fixture(scope="module")
def endpoint():
    with moto_server() as url:
        yield url


@pytest.fixture
def s3_store(endpoint):
    bucket = f"state-{uuid.uuid4().hex[:12]}"
    client = s3_client(endpoint)
    client.create_bucket(Bucket=bucket)
    return S3StateStore(bucket, "team-a/nightly", client=client)


@pytest.mark.slow
def test_two_s3_writers_that_overlap_both_keep_their_change(s3_store):
    assert sorted(overlapping(s3_store).splitlines()) == ["a", "b"]


@pytest.mark.slow
def test_two_s3_writers_that_both_create_the_object_both_keep_their_change(s3_store):
    """Neither found the object: If-None-Match: * lets only the first create it; the other reads again."""
    assert s3_store.get(KEY) is None
    assert sorted(overlapping(s3_store).splitlines()) == ["a", "b"]


@pytest.mark.slow
def test_an_s3_object_that_keeps_changing_gives_up_with_what_to_do_and_stores_nothing(s3_store, monkeypatch):
    monkeypatch.setattr(state_mod, "UPDATE_TRIES", 3)
    monkeypatch.setattr(state_mod.time, "sleep", lambda s: None)
    s3_store.put(KEY, "0\n")
    calls = []

    def racing(text):  # another writer changes it every time between our read and our write
        calls.append(text)
        s3_store.put(KEY, f"{len(calls)}\n")
        return (text or "") + "mine\n"

    with pytest.raises(StateError) as err:
        s3_store.update(KEY, racing)
    assert str(err.value) == (f"{s3_store.uri(KEY)}: changed by another writer 3 times while this change was being "
                              "made; nothing was recorded; run the command again")
    assert len(calls) == 3 and "mine" not in s3_store.get(KEY)


@pytest.mark.slow
def test_an_s3_change_that_raises_writes_nothing(s3_store):
    def refuse(text):
        raise ValueError("no")

    with pytest.raises(ValueError):
        s3_store.update(KEY, refuse)
    assert s3_store.get(KEY) is None and s3_store.keys("") == []


def test_an_s3_state_object_that_is_not_utf8_is_a_state_error_naming_the_object(s3_store):
    s3_store.artifacts.client.put_object(Bucket=s3_store.artifacts.bucket, Key=s3_store.artifacts.prefix + KEY,
                                         Body='{"why": "caf\u00e9"}'.encode("latin-1"))
    with pytest.raises(StateError, match=r"s3://.*/team-a/nightly/state/quarantine/minirl.json: not UTF-8 text "
                                         r"\(byte 0xe9 at offset 12\)") as err:
        s3_store.get(KEY)
    assert isinstance(err.value, NotText) and err.value.line == 1  # a damaged record, as a local file's (the report)

    def keep(text):  # a document that must never be lost (a quarantine) refuses to build on damaged text
        if isinstance(text, Undecodable):
            raise text.error
        return (text or "") + "x"

    with pytest.raises(StateError, match="not UTF-8"):
        s3_store.update(KEY, keep)
    with pytest.raises(NotText):
        s3_store.get(KEY)  # left as it was


def test_a_damaged_latest_json_on_s3_is_replaced_as_a_local_one_is(s3_store, tmp_path):
    """A stray byte in S3's nights/latest.json made every later night's record 'not stored' (exit 4, no
    calibration, no report) from every pod, while the same bytes in a local home are replaced: latest.json
    is a copy that orders nothing once damaged (docs/storage.md)."""
    import json

    from pipelines.night import write_latest

    record = {"night": "2026-12-06T010000Z-abcd1234", "started_at": "2026-12-06T01:00:00+00:00"}
    damaged = b'{"night": "2026-12-06T99\xff\xfe"}'
    local = LocalStateStore(tmp_path / "home")
    local.path("nights/latest.json").parent.mkdir(parents=True)
    local.path("nights/latest.json").write_bytes(damaged)
    s3_store.artifacts.client.put_object(Bucket=s3_store.artifacts.bucket,
                                         Key=s3_store.artifacts.prefix + "nights/latest.json", Body=damaged)
    for store in (local, s3_store):
        assert write_latest(store, record, json.dumps(record)) is True
        assert json.loads(store.get("nights/latest.json")) == record
