"""S3 history and artifacts, with real boto3 against a moto server over HTTP."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid

import pytest
from botocore.exceptions import ClientError

from pipelines.core.history import HistoryError
from pipelines.core.model import Sample
from pipelines.storage.s3 import ArtifactError, S3Artifacts, S3HistoryReadError, S3HistoryStore
from tests.conftest import PROJECT_ROOT
from tests.support.moto import CREDENTIALS, moto_server, s3_client

# a real S3 server (moto) in a subprocess: an integration test, not for the edit loop
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def endpoint():
    with moto_server() as url:
        yield url


@pytest.fixture(scope="module")
def client(endpoint):
    return s3_client(endpoint)


@pytest.fixture
def bucket(client):
    name = f"hist-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=name)
    return name


def sample(i: int = 0, **kw) -> Sample:
    base = dict(test_id=f"tests/e2e/test_{i}.py", hardware="h200", sha256="a" * 64, outcome="passed",
                elapsed_s=100.0 + i, started_at=f"2026-12-01T00:{i % 60:02d}:00+00:00", run_id="r1")
    return Sample(**{**base, **kw})


def keys(client, bucket, prefix=""):
    return sorted(o["Key"] for o in client.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", []))


def test_appended_samples_read_back_equal_and_in_write_order(client, bucket):
    store = S3HistoryStore(bucket, "nightly", client=client)
    store.append([sample(1), sample(2, outcome="timed_out", capped=True)])
    store.append([sample(3, node="n7", image="img:2", attempt=2, source="x.log:4", elapsed_s=7)])
    assert store.read() == [sample(1), sample(2, outcome="timed_out", capped=True),
                            sample(3, node="n7", image="img:2", attempt=2, source="x.log:4", elapsed_s=7)]


def test_each_append_is_one_new_object_under_the_prefix_named_by_date_and_run(client, bucket):
    store = S3HistoryStore(bucket, "/team/nightly/", client=client)
    store.append([sample(1, run_id="night 42/a"), sample(2, run_id="night 42/a")])
    store.append([sample(3, run_id="x"), sample(4, run_id="y")])
    store.append([])
    written = keys(client, bucket)
    assert len(written) == 2
    assert all(k.startswith("team/nightly/history/samples/") and k.endswith(".jsonl") for k in written)
    assert {k.split("-", 3)[-1].rsplit("-", 1)[0] for k in written} == {"night_42_a", "mixed"}
    head = client.head_object(Bucket=bucket, Key=written[0])
    assert head["Metadata"]["nightly-schema"] == "1"
    body = client.get_object(Bucket=bucket, Key=written[0])["Body"].read()
    assert head["Metadata"]["nightly-sha256"] == hashlib.sha256(body).hexdigest()


def test_stores_with_different_prefixes_in_one_bucket_do_not_see_each_other(client, bucket):
    S3HistoryStore(bucket, "a", client=client).append([sample(1)])
    S3HistoryStore(bucket, "b", client=client).append([sample(2)])
    assert S3HistoryStore(bucket, "a", client=client).read() == [sample(1)]
    assert S3HistoryStore(bucket, "", client=client).read() == []


def test_an_empty_bucket_reads_as_empty_history(client, bucket):
    assert S3HistoryStore(bucket, client=client).read() == []


def test_a_batch_imported_twice_is_read_once(client, bucket):
    store = S3HistoryStore(bucket, client=client)
    batch = [sample(i) for i in range(5)]
    store.append(batch)
    store.append(batch)
    store.append([sample(1, elapsed_s=999.0), sample(1, attempt=2)])
    assert store.read() == [*batch, sample(1, attempt=2)]


def test_add_writes_only_new_attempts_and_counts_them(client, bucket):
    store = S3HistoryStore(bucket, client=client)
    assert store.add([sample(1), sample(2)]) == 2
    assert store.add([sample(1), sample(2)]) == 0
    assert store.add([sample(2), sample(3), sample(3)]) == 1
    assert len(keys(client, bucket)) == 2
    assert store.read() == [sample(1), sample(2), sample(3)]


def test_a_sample_with_an_unknown_outcome_is_refused_and_nothing_of_its_batch_is_written(client, bucket):
    store = S3HistoryStore(bucket, client=client)
    with pytest.raises(ValueError, match="outcome: 'exploded' is not one of passed"):
        store.append([sample(1), sample(2, outcome="exploded")])
    assert keys(client, bucket) == []


def test_concurrent_writers_on_separate_clients_lose_nothing(endpoint, client, bucket):
    def night(w: int) -> None:
        store = S3HistoryStore(bucket, "p", client=s3_client(endpoint))
        for i in range(10):
            store.append([sample(i, run_id=f"w{w}"), sample(i, run_id=f"w{w}", attempt=2)])

    threads = [threading.Thread(target=night, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    got = S3HistoryStore(bucket, "p", client=client).read()
    assert len(got) == 4 * 10 * 2
    assert {(s.run_id, s.test_id, s.attempt) for s in got} == {
        (f"w{w}", f"tests/e2e/test_{i}.py", a) for w in range(4) for i in range(10) for a in (1, 2)}


def test_listing_goes_through_every_page(client, bucket):
    store = S3HistoryStore(bucket, client=client, page_size=2)
    for i in range(5):
        store.append([sample(i)])
    assert store.read() == [sample(i) for i in range(5)]


def test_a_corrupt_object_is_reported_with_its_key_while_the_rest_is_read(client, bucket):
    store = S3HistoryStore(bucket, "nightly", client=client)
    store.append([sample(1)])
    bad = "nightly/history/samples/2026-12-01/000000000000-r9-feed.jsonl"
    client.put_object(Bucket=bucket, Key=bad, Body=b'{"test_id": "t", "hardware": "h200"\n')
    store.append([sample(2)])
    with pytest.raises(S3HistoryReadError) as exc:
        store.read()
    message = str(exc.value)
    assert f"s3://{bucket}/{bad}:1: json: not a JSON object" in message
    assert "1 of 3 history objects are unreadable (2 samples in the others were read" in message
    assert f"aws s3 mv s3://{bucket}/{bad} s3://{bucket}/nightly/quarantine/history/samples/" in message
    assert isinstance(exc.value, HistoryError)
    assert exc.value.samples == [sample(1), sample(2)]
    client.copy_object(Bucket=bucket, Key="nightly/quarantine/x.jsonl", CopySource={"Bucket": bucket, "Key": bad})
    client.delete_object(Bucket=bucket, Key=bad)
    assert store.read() == [sample(1), sample(2)]


@pytest.mark.parametrize("body, problem", [
    (b'{"test_id": "t", "hardware": "h", "sha256": "s", "outcome": "passed", "elapsed_s": "9", "started_at": "x"}',
     ":1: elapsed_s: expected int or float, got '9'"),
    (b'{"test_id": "t", "hardware": "h", "sha256": "s", "outcome": "passed", "started_at": "x"}',
     ":1: elapsed_s: required field is missing"),
    (b'{"test_id": "t", "hardware": "h", "sha256": "s", "outcome": "ok", "elapsed_s": 1, "started_at": "x"}',
     ":1: outcome: 'ok' is not one of passed"),
    (b'{"test_id": "t", "hardware": "h", "sha256": "s", "outcome": "passed", "elapsed_s": 1, "started_at": "x",'
     b' "gpu_temp": 80}', ":1: gpu_temp: unknown field"),
    (b"\n[1, 2]\n", ":2: json: expected an object, got list"),
    (b"\xff\xfe", ":1: encoding: not UTF-8"),
])
def test_scan_reports_each_kind_of_damage_at_its_line(client, bucket, body, problem):
    store = S3HistoryStore(bucket, client=client)
    store.append([sample(1)])
    client.put_object(Bucket=bucket, Key="history/samples/2026-12-02/bad.jsonl", Body=body)
    found = store.scan()
    assert found.samples == [sample(1)]
    assert len(found.problems) == 1
    assert str(found.problems[0]).startswith(f"s3://{bucket}/history/samples/2026-12-02/bad.jsonl{problem}")


def test_an_object_changed_after_it_was_written_is_reported_not_trusted(client, bucket):
    store = S3HistoryStore(bucket, client=client)
    store.append([sample(1)])
    (key,) = keys(client, bucket)
    meta = client.head_object(Bucket=bucket, Key=key)["Metadata"]
    body = client.get_object(Bucket=bucket, Key=key)["Body"].read()
    client.put_object(Bucket=bucket, Key=key, Body=body[: len(body) // 2] + b"\n", Metadata=meta)
    with pytest.raises(S3HistoryReadError, match=":1: content: does not match the sha256 it was written with"):
        store.read()


def test_a_missing_bucket_is_an_error_naming_it_and_the_setting(client):
    store = S3HistoryStore("no-such-bucket-here", "nightly", client=client)
    for action in (store.read, lambda: store.append([sample(1)])):
        with pytest.raises(HistoryError) as exc:
            action()
        assert "s3://no-such-bucket-here/nightly/history/" in str(exc.value)
        assert "NoSuchBucket" in str(exc.value)
        assert "`aws s3 mb s3://no-such-bucket-here`" in str(exc.value)
        assert "`s3_bucket` of the deployment in assets/cluster.yaml" in str(exc.value)


def test_compaction_merges_readable_objects_and_leaves_damaged_ones(client, bucket):
    store = S3HistoryStore(bucket, client=client)
    for i in range(4):
        store.append([sample(i), sample(0)])
    client.put_object(Bucket=bucket, Key="history/samples/2026-12-02/bad.jsonl", Body=b"oops")
    assert store.compact() == 4
    assert [k.split("/")[1] for k in keys(client, bucket)] == ["compacted", "samples"]
    store.append([sample(9)])
    assert store.scan().samples == [sample(0), sample(1), sample(2), sample(3), sample(9)]
    assert len(store.scan().problems) == 1


class DeletesDenied:
    """A boto3 client under an IAM policy that denies ``s3:DeleteObject`` on the keys ``denied`` picks.

    S3 answers a multi-object delete of such keys with 200 and one ``AccessDenied`` per key in
    ``Errors``, and a single delete with a 403; everything else goes to the real client."""

    def __init__(self, client, denied):
        self.client, self.denied = client, denied

    def __getattr__(self, name):
        return getattr(self.client, name)

    def delete_objects(self, Bucket, Delete):  # noqa: N803 - boto3's parameter names
        refused = [o["Key"] for o in Delete["Objects"] if self.denied(o["Key"])]
        allowed = [o for o in Delete["Objects"] if not self.denied(o["Key"])]
        if allowed:
            self.client.delete_objects(Bucket=Bucket, Delete={**Delete, "Objects": allowed})
        return {"Errors": [{"Key": k, "Code": "AccessDenied", "Message": "Access Denied"} for k in refused]}

    def delete_object(self, Bucket, Key):  # noqa: N803
        if self.denied(Key):
            raise ClientError({"Error": {"Code": "AccessDenied", "Message": "Access Denied"}}, "DeleteObject")
        return self.client.delete_object(Bucket=Bucket, Key=Key)


def history_of(client, bucket, batches=3):
    store = S3HistoryStore(bucket, client=client)
    for i in range(batches):
        store.append([sample(i)])
    return store


def test_without_delete_rights_compaction_writes_nothing_and_says_so(client, bucket):
    history_of(client, bucket)
    before = keys(client, bucket)
    store = S3HistoryStore(bucket, client=DeletesDenied(client, lambda key: True))
    for _ in range(2):  # every night's calibration tries again: the history must not grow by a copy each time
        with pytest.raises(HistoryError) as exc:
            store.compact()
        assert "S3 refused deleting 1 object(s) (AccessDenied: Access Denied" in str(exc.value)
        assert "nothing was merged; grant s3:DeleteObject on s3://" in str(exc.value)
        assert keys(client, bucket) == before
    assert store.read() == [sample(0), sample(1), sample(2)]


class MissingKeysAreErrors:
    """An S3-compatible store (RustFS, old LocalStack) whose multi-object delete reports a key that does not
    exist as an error, though it deletes existing ones: compaction's probe of delete rights must not read
    that as "no s3:DeleteObject"."""

    def __init__(self, client, bucket):
        self.client, self.existing = client, lambda key: key in keys(client, bucket)

    def __getattr__(self, name):
        return getattr(self.client, name)

    def delete_objects(self, Bucket, Delete):  # noqa: N803 - boto3's parameter names
        missing = [o["Key"] for o in Delete["Objects"] if not self.existing(o["Key"])]
        self.client.delete_objects(Bucket=Bucket, Delete=Delete)
        return {"Errors": [{"Key": k, "Code": "InternalError", "Message": "Io error: file not found"} for k in missing]}


def test_a_store_that_reports_missing_keys_as_errors_still_compacts(client, bucket):
    history_of(client, bucket)
    store = S3HistoryStore(bucket, client=MissingKeysAreErrors(client, bucket))
    assert store.compact() == 3
    assert [k.split("/")[1] for k in keys(client, bucket)] == ["compacted"]
    assert store.read() == [sample(0), sample(1), sample(2)]


def test_merged_objects_refused_after_the_merge_leave_no_merged_copy(client, bucket):
    history_of(client, bucket)
    before = keys(client, bucket)
    store = S3HistoryStore(bucket, client=DeletesDenied(client, lambda key: "/samples/" in key))
    with pytest.raises(HistoryError) as exc:
        store.compact()
    assert "S3 refused deleting 3 object(s)" in str(exc.value) and "the merged copy was removed" in str(exc.value)
    assert keys(client, bucket) == before


def test_merged_objects_refused_in_part_keep_the_merged_copy_and_every_sample(client, bucket):
    history_of(client, bucket)
    kept = keys(client, bucket)[0]
    store = S3HistoryStore(bucket, client=DeletesDenied(client, lambda key: key == kept))
    with pytest.raises(HistoryError) as exc:
        store.compact()
    assert f"S3 refused deleting 1 object(s) (AccessDenied: Access Denied, e.g. {kept})" in str(exc.value)
    assert "stays (reads drop the repeats)" in str(exc.value)
    assert [k.split("/")[1] for k in keys(client, bucket)] == ["compacted", "samples"]
    assert store.read() == [sample(0), sample(1), sample(2)]


def test_a_writer_killed_mid_night_leaves_every_earlier_batch_readable(endpoint, client, bucket):
    script = textwrap.dedent(f"""
        import itertools
        from pipelines.core.model import Sample
        from pipelines.storage.s3 import S3HistoryStore
        store = S3HistoryStore({bucket!r}, endpoint_url={endpoint!r})
        for i in itertools.count():
            store.append([Sample(f"t{{i}}", "h200", "a", "passed", 1.0, "2026-12-01", run_id="k", attempt=a)
                          for a in range(1, 4)])
            print(i, flush=True)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=PROJECT_ROOT, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, **CREDENTIALS})
    try:
        for _ in range(10):
            assert proc.stdout.readline(), "the writer stopped before writing 10 batches"
        time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
    got = S3HistoryStore(bucket, client=client).read()
    assert len(got) >= 30 and len(got) % 3 == 0
    assert len(got) == 3 * len(keys(client, bucket))


def test_artifacts_store_text_and_large_files_in_parts(client, bucket, tmp_path):
    from boto3.s3.transfer import TransferConfig

    five_mib = 5 * 1024 * 1024
    art = S3Artifacts(bucket, "nights/", client=client,
                      transfer=TransferConfig(multipart_threshold=five_mib, multipart_chunksize=five_mib))
    assert art.put_text("2026-12-01/report.md", "# night\nok ✓\n") == f"s3://{bucket}/nights/2026-12-01/report.md"
    got = client.get_object(Bucket=bucket, Key="nights/2026-12-01/report.md")
    assert got["Body"].read().decode() == "# night\nok ✓\n"
    assert got["ContentType"] == "text/plain; charset=utf-8"
    big = tmp_path / "job.log"
    big.write_bytes(os.urandom(five_mib + 1000))
    assert art.upload_file(big, "2026-12-01/job.log") == f"s3://{bucket}/nights/2026-12-01/job.log"
    obj = client.get_object(Bucket=bucket, Key="nights/2026-12-01/job.log")
    assert obj["ETag"].strip('"').endswith("-2")  # two parts: it went multipart
    assert obj["Body"].read() == big.read_bytes()


def test_a_logs_end_is_read_with_one_ranged_get_as_from_a_local_state_folder(client, bucket, tmp_path):
    """The report reads only the end of each log that did not pass (a log may be 20 MB): an S3 state store
    reads the same end as a local one, and says alike whether its first line lacks its start."""
    from pipelines.storage.state import LocalStateStore, S3StateStore

    s3, local = S3StateStore(bucket, "p", client=client), LocalStateStore(tmp_path)
    logs = {"big.log": "x" * 5000 + "\nsecond\nlast ✓\n", "cut.log": "a" * 100 + "\n" + "b" * 30 + "\nend\n",
            "small.log": "only\n", "empty.log": ""}
    for name, text in logs.items():
        s3.put(f"logs/n1/{name}", text)
        local.put(f"logs/n1/{name}", text)
    for name in logs:
        assert s3.get_end(f"logs/n1/{name}", 20) == local.get_end(f"logs/n1/{name}", 20), name
    assert s3.get_end("logs/n1/big.log", 20) == ("xxx\nsecond\nlast ✓\n", True)  # 20 bytes, ✓ is 3
    assert s3.get_end("logs/n1/cut.log", 35) == ("b" * 30 + "\nend\n", False)  # the byte before is a newline
    assert s3.get_end("logs/n1/small.log", 20) == ("only\n", False)
    assert s3.get_end("logs/n1/empty.log", 20) == ("", False)
    assert s3.get_end("logs/n1/none.log", 20) is None and local.get_end("logs/n1/none.log", 20) is None


def test_artifact_errors_name_the_object_and_the_fix(client, tmp_path):
    art = S3Artifacts("no-such-bucket-here", "n", client=client)
    with pytest.raises(ArtifactError, match=r"s3://no-such-bucket-here/n/r\.md: upload failed \(NoSuchBucket"):
        art.put_text("r.md", "x")
    (tmp_path / "f").write_text("x")
    with pytest.raises(ArtifactError, match=r"s3://no-such-bucket-here/n/f: upload of .* create it"):
        art.upload_file(tmp_path / "f", "f")
    with pytest.raises(ArtifactError, match=r"missing: not a file; nothing was uploaded to s3://no-such-bucket-here/n/k"):
        art.upload_file(tmp_path / "missing", "k")


def test_calibrate_rewrites_recorded_in_s3_are_read_back_by_a_fresh_client_and_survive_compaction(endpoint, client,
                                                                                                  bucket):
    from pipelines.core.calibrate import Succession
    from pipelines.storage.history import record_successions, successions

    writer = S3HistoryStore(bucket, "nightly", client=client)
    writer.append([sample(1)])
    rewrites = [Succession("a" * 64, "b" * 64, "tests/e2e/test_1.py"), Succession("b" * 64, "c" * 64,
                                                                                   "tests/e2e/test_1.py")]
    assert record_successions(writer, rewrites[:1]) == ""  # "": recorded, no warning to print
    writer.add_successions(rewrites[1:])
    writer.append([sample(2)])
    assert writer.compact() == 2
    fresh = S3HistoryStore(bucket, "nightly", client=s3_client(endpoint))  # another pod, another night
    assert successions(fresh) == rewrites
    assert fresh.read() == [sample(1), sample(2)], "successions are not samples"
    assert S3HistoryStore(bucket, "other", client=client).successions() == []


def test_the_rewrites_lineage_is_got_once_per_change_of_the_successions_folder(endpoint, client, bucket):
    """A code server plans at every sensor tick: it lists history/successions/ each time, and GETs its
    objects again only once another process (a night's calibration in its run worker) added one."""
    from pipelines.core.calibrate import Succession
    from pipelines.storage.history import lineage

    store = S3HistoryStore(bucket, "lin", client=client)
    S3HistoryStore(bucket, "lin", client=client).add_successions([Succession("a" * 64, "b" * 64, "t.py")])
    gets = []
    original = client.get_object
    client.get_object = lambda **kw: gets.append(kw["Key"]) or original(**kw)
    try:
        assert [lineage(store).same_revision("b" * 64) for _ in range(3)] == [frozenset({"a" * 64, "b" * 64})] * 3
        assert len(gets) == 1
        S3HistoryStore(bucket, "lin", client=s3_client(endpoint)).add_successions([Succession("b" * 64, "c" * 64, "t.py")])
        assert lineage(store).same_revision("c" * 64) == frozenset({"a" * 64, "b" * 64, "c" * 64})
        assert len(gets) == 3
    finally:
        del client.get_object


def test_a_damaged_succession_is_an_error_naming_its_object_and_line(client, bucket):
    store = S3HistoryStore(bucket, "nightly", client=client)
    key = "nightly/history/successions/2026-12-01/000000000000-x.jsonl"
    client.put_object(Bucket=bucket, Key=key, Body=b'{"before": "a", "after": "b", "path": "t.py"}\n{"before": 1}\n')
    with pytest.raises(HistoryError, match=rf"s3://{bucket}/{key}:2: succession: expected a JSON object with before, "
                                           r"after and path strings, got .*\nMove each aside"):
        store.successions()


def test_a_compaction_between_the_two_listings_hides_no_sample(endpoint, client, bucket):
    """The first calibration's race: a compaction moves every sample from samples/ to compacted/
    right after the reader's first listing; the reader still reads them all."""
    S3HistoryStore(bucket, "n", client=client).append([sample(1)])
    S3HistoryStore(bucket, "n", client=client).append([sample(2)])
    reader_client = s3_client(endpoint)
    compactor = S3HistoryStore(bucket, "n", client=s3_client(endpoint))
    lists = []

    def after_list(**_):
        lists.append(1)
        if len(lists) == 1:
            assert compactor.compact() == 2
    reader_client.meta.events.register("after-call.s3.ListObjectsV2", after_list)
    assert S3HistoryStore(bucket, "n", client=reader_client).read() == [sample(1), sample(2)]
    assert len(lists) >= 2


def test_a_samples_env_round_trips_and_one_without_is_written_as_an_older_nightly_wrote_it():
    from pipelines.storage.s3 import decode, encode

    plain, injected = sample(1), sample(2, env="MINIRL_FAIL#0123456789ab")
    body = encode([plain, injected])
    assert b'"env"' not in body.splitlines()[0]  # an older nightly reads this line: it knows no `env` field
    assert decode("s3://b/k", body) == ([plain, injected], None)


def test_an_infra_errors_reason_is_kept_in_s3_history_and_a_failure_keeps_none():
    """Flaky history tells a node's fault from another pod's deleted or unpulled image by the
    reason; a sample without one is written as an older nightly wrote it."""
    from pipelines.core.history import sample_from_attempt
    from pipelines.core.model import Attempt
    from pipelines.storage.s3 import decode, encode
    from tests.conftest import make_test

    t = make_test()
    at = "2026-12-01T00:00:00+00:00"
    deleted = sample_from_attempt(Attempt(t.id, "infra_error", 1.0, at, node="h200-a", reason="deleted"), t, "r1")
    failed = sample_from_attempt(Attempt(t.id, "failed", 1.0, at, attempt=2, node="h200-a", reason="exit 1"), t, "r1")
    nameless = sample_from_attempt(Attempt(t.id, "infra_error", 1.0, at, attempt=3, node="h200-a"), t, "r1")
    assert (deleted.reason, failed.reason, nameless.reason) == ("deleted", "", "unknown")
    body = encode([deleted, failed, nameless])
    assert b'"reason"' not in body.splitlines()[1]
    assert decode("s3://b/k", body) == ([deleted, failed, nameless], None)


def test_a_sample_without_an_outlier_mark_is_written_without_the_field_and_one_with_it_round_trips():
    """``outlier`` came after the first release: a plain sample must stay readable by a nightly from
    before it (a rollback, an old run pod during an upgrade), which rejects a field it does not know."""
    from pipelines.storage.s3 import decode, encode

    plain, marked = sample(1), sample(2, outlier="slow node")
    body = encode([plain, marked])
    assert b'"outlier"' not in body.splitlines()[0]
    assert b'"outlier": "slow node"' in body.splitlines()[1]
    assert decode("s3://b/k", body) == ([plain, marked], None)


@pytest.mark.parametrize("line, problem", [
    (b"[" * 100_000, ":2: json: nested too deeply to be a sample"),
    (b'{"test_id": "t", "hardware": "h", "sha256": "s", "outcome": "passed", "elapsed_s": 1' + b"0" * 400
     + b', "started_at": "x"}', ":2: elapsed_s: a number of 401 digits"),
    (b'{"test_id": "t", "hardware": "h", "sha256": "s", "outcome": "passed", "elapsed_s": 1, "started_at": "x", '
     b'"attempt": ' + b"9" * 5000 + b"}", ":2: attempt: a number of 5000 digits"),
])
def test_a_history_object_line_no_reader_can_take_is_a_located_problem_not_an_exception(line, problem):
    """Each of these raised out of ``decode`` (RecursionError, OverflowError, ValueError): a history read
    (every plan) stopped with a traceback instead of naming the object to move aside."""
    from pipelines.storage.s3 import decode, encode

    got, found = decode("s3://b/k", encode([sample(1)]) + line + b"\n")
    assert got == [] and str(found).startswith(f"s3://b/k{problem}")


def test_a_rewrite_every_calibration_proposes_again_is_stored_once(endpoint, client, bucket):
    """Until its patch is applied, every night's calibration records the same est_time rewrite: the
    local store keeps one row per (before, after), and S3 must not add an object per night (each plan
    would read them all again: the folder's listing changes)."""
    from pipelines.core.calibrate import Succession
    from pipelines.storage.history import record_successions, successions

    rewrite = Succession("a" * 64, "b" * 64, "tests/e2e/test_1.py")
    later = Succession("b" * 64, "c" * 64, "tests/e2e/test_1.py")
    for _ in range(3):  # three nights, each in a fresh pod
        assert record_successions(S3HistoryStore(bucket, "again", client=s3_client(endpoint)), [rewrite]) == ""
    store = S3HistoryStore(bucket, "again", client=client)
    assert len(store.successions_stamp()) == 1
    assert store.add_successions([rewrite, later, later]) == 1
    assert len(store.successions_stamp()) == 2
    assert successions(S3HistoryStore(bucket, "again", client=s3_client(endpoint))) == [rewrite, later]


@pytest.mark.parametrize("cut", ["to its first line", "to nothing"])
def test_a_succession_object_cut_short_is_an_error_naming_its_key_not_fewer_rewrites(client, bucket, cut):
    """A rewrite lost from history/successions/ makes every sample of its file count as stale: calibrate
    said "too few samples" for the rewritten tests, rc 0, no warning. The object's sha256 now tells."""
    from pipelines.core.calibrate import Succession

    store = S3HistoryStore(bucket, "nightly", client=client)
    store.add_successions([Succession("a" * 64, "b" * 64, "tests/x.py"), Succession("c" * 64, "d" * 64, "tests/y.py")])
    (key,) = keys(client, bucket, "nightly/history/successions/")
    obj = client.get_object(Bucket=bucket, Key=key)
    body = obj["Body"].read()
    assert obj["Metadata"]["nightly-sha256"] == hashlib.sha256(body).hexdigest()
    assert obj["Metadata"]["nightly-successions"] == "2"
    short = body.splitlines(True)[0] if cut == "to its first line" else b""
    client.put_object(Bucket=bucket, Key=key, Body=short, Metadata=obj["Metadata"])
    with pytest.raises(HistoryError) as exc:
        store.successions()
    message = str(exc.value)
    assert f"s3://{bucket}/{key}:1: content: does not match the sha256 it was written with" in message
    assert f"aws s3 mv s3://{bucket}/{key} s3://{bucket}/nightly/quarantine/history/successions/" in message


@pytest.mark.parametrize("body, problem", [
    (b"", ":1: content: empty"),
    (b'{"before": "a", "after": "b", "path": "t\xff.py"}\n', ":1: encoding: not UTF-8"),
])
def test_a_succession_object_without_a_recorded_sha256_is_still_checked_line_by_line(client, bucket, body, problem):
    store = S3HistoryStore(bucket, "nightly", client=client)
    key = "nightly/history/successions/2026-12-01/000000000000-calibrate-old.jsonl"
    client.put_object(Bucket=bucket, Key=key, Body=body, Metadata={"nightly-schema": "1"})
    with pytest.raises(HistoryError, match=rf"s3://{bucket}/{key}{problem}"):
        store.successions()


def test_a_succession_object_written_before_sha256_was_recorded_still_reads(client, bucket):
    from pipelines.core.calibrate import Succession

    store = S3HistoryStore(bucket, "nightly", client=client)
    key = "nightly/history/successions/2026-12-01/000000000000-calibrate-old.jsonl"
    client.put_object(Bucket=bucket, Key=key, Metadata={"nightly-schema": "1"},  # as a nightly before it wrote them
                      Body=b'{"after": "b", "before": "a", "path": "tests/x.py", "why": "est_time rewritten by nightly calibrate"}\n')
    store.add_successions([Succession("b" * 64, "c" * 64, "tests/x.py")])
    assert store.successions() == [Succession("a", "b", "tests/x.py"), Succession("b" * 64, "c" * 64, "tests/x.py")]
