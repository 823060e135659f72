"""History and artifacts in S3: immutable objects only, so concurrent writers never race.

Every ``append`` is one new object (a JSON-lines batch) under a unique key, written with a
content MD5 and a conditional ``If-None-Match: *``; S3 makes each PUT all-or-nothing, so a writer
killed mid-night loses only the batch in flight. ``read`` lists the prefix with a paginator,
fetches the objects in parallel and drops repeats of the same attempt exactly as the local store
does. A damaged object is never skipped quietly: ``scan`` returns it as a located problem and
``read`` raises after reading everything else. See docs/storage.md for the layout.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import re
import uuid
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import boto3
from boto3.exceptions import S3UploadFailedError
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, HTTPClientError, SSLError
from botocore.exceptions import ConnectionError as BotoConnectionError

from pipelines.core.calibrate.lineage import CALIBRATE_REWRITE, Succession
from pipelines.core.catalog.ids import id_problem
from pipelines.core.history.samples import kept_problem, screen
from pipelines.core.history.store import OUTCOMES, HistoryError
from pipelines.core.model import Problem, Sample
from pipelines.storage.state import Unreachable, not_utf8

SCHEMA = "1"
_FIELDS = {f.name: f.type for f in dataclasses.fields(Sample)}
_REQUIRED = ("test_id", "hardware", "sha256", "outcome", "elapsed_s", "started_at")
_TYPES = {"elapsed_s": (int, float), "attempt": (int,), "capped": (bool,)}
_READERS = 16


def make_client(endpoint_url: str | None = None):
    """An S3 client with standard retries and enough connections for parallel reads."""
    config = Config(retries={"max_attempts": 5, "mode": "standard"}, max_pool_connections=_READERS * 2)
    return boto3.session.Session().client("s3", endpoint_url=endpoint_url or None, config=config)


def _prefix(prefix: str) -> str:
    prefix = prefix.strip("/")
    return f"{prefix}/" if prefix else ""


def _hint(code: str) -> str:
    if code in ("NoSuchBucket", "404"):
        return ("the bucket does not exist; create it (`aws s3 mb s3://BUCKET`) or fix `s3_bucket` of the "
                "deployment in assets/cluster.yaml")
    if code in ("AccessDenied", "403", "InvalidAccessKeyId", "SignatureDoesNotMatch", "NoCredentialsError"):
        return ("check the credentials (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or AWS_PROFILE) and that "
                "they may read and write this bucket")
    if code == "EndpointConnectionError":
        return "check the endpoint (NIGHTLY_S3_ENDPOINT / AWS_ENDPOINT_URL) and the network"
    return "retry; if it persists, check the bucket, credentials and endpoint in docs/storage.md"


def unreachable(exc: BaseException) -> bool:
    """Whether S3 did not answer: no connection, a timeout or a dropped one, or a 5xx (after the client's
    retries), rather than refusing the request (a missing bucket, refused credentials: a setting to fix)."""
    if isinstance(exc, ClientError):
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0
        code = str(exc.response.get("Error", {}).get("Code", ""))
        return status >= 500 or code in ("InternalError", "ServiceUnavailable", "SlowDown", "500", "503")
    return isinstance(exc, BotoConnectionError | HTTPClientError) and not isinstance(exc, SSLError)


class HistoryUnreachable(HistoryError, Unreachable):
    """The S3 history did not answer (``Unreachable``)."""


def _describe(exc: Exception) -> tuple[str, str]:
    """(code, text) of a botocore failure, for messages that say what to do."""
    if isinstance(exc, ClientError):
        err = exc.response.get("Error", {})
        return str(err.get("Code", "")), f"{err.get('Code', '')}: {err.get('Message', '')}".strip(": ")
    return type(exc).__name__, str(exc)


@dataclass(frozen=True)
class HistoryScan:
    """What one pass over the bucket found: the readable samples and each damaged object."""

    samples: list[Sample]
    problems: list[Problem]
    objects: int


class S3HistoryReadError(HistoryError):
    """Some history objects are damaged; ``samples`` holds everything else, ``problems`` each one."""

    def __init__(self, message: str, samples: list[Sample], problems: list[Problem]):
        super().__init__(message)
        self.samples = samples
        self.problems = problems


def _dedupe_key(s: Sample) -> tuple:
    # the same identity the local store's UNIQUE constraint uses
    return (s.run_id, s.test_id, s.hardware, s.attempt, s.started_at)


def _invalid(s: Sample) -> tuple[str, str] | None:
    """(field, what is wrong) for a sample the local store would refuse too."""
    if s.outcome not in OUTCOMES:
        return "outcome", f"{s.outcome!r} is not one of {', '.join(OUTCOMES)}"
    if not (isinstance(s.elapsed_s, int | float) and s.elapsed_s >= 0):
        return "elapsed_s", f"{s.elapsed_s!r} must be a number >= 0"
    return None


def _check(s: Sample) -> None:
    if bad := _invalid(s):
        raise ValueError(f"sample {s.test_id}: {bad[0]}: {bad[1]}")


def encode(samples: list[Sample]) -> bytes:
    """One sample per line, every field by name; the bytes one object holds. An empty field of
    ``LATER_FIELDS`` is left out: such a sample stays readable by a nightly from before that field."""
    return "".join(json.dumps(_row(s), sort_keys=True) + "\n" for s in samples).encode()


#: fields added after the first release, written only when set: a nightly from before them (a rollback,
#: a run pod of the old image during an upgrade) rejects a field it does not know, object by object
LATER_FIELDS = ("outlier", "env", "reason")


def _row(s: Sample) -> dict:
    row = dataclasses.asdict(s)
    for name in LATER_FIELDS:
        if not row[name]:
            del row[name]
    return row


def decode(where: str, body: bytes) -> tuple[list[Sample], Problem | None]:
    """Samples of one S3 object, or its first problem (then none of its samples: it is damaged).

    All or nothing, unlike ``decode_lines``: an object is one PUT that S3 stores whole, checked against
    the sha256 it was written with, so it is never cut off; a bad line means the object is not what a
    nightly wrote (a newer schema, a hand edit), its other lines are suspect too, and ``compact`` must
    leave it where it is rather than merge part of it."""
    samples, problems = decode_lines(where, body)
    return ([], problems[0]) if problems else (samples, None)


def decode_lines(where: str, body: bytes, imported: bool = False) -> tuple[list[Sample], list[Problem]]:
    """Samples of the lines that read, and one problem per line that does not, for a local file
    (``<home>/unsaved/<night>/history.jsonl``): a full disk or a kill -9 cuts its last line off, and
    the whole lines before it are attempts still worth keeping. ``imported`` (a file brought in from
    outside, ``nightly history import``) also refuses a test id the catalog would never give (stored, it
    would name no test and break every line that prints it) and what no night writes (``kept_problem``:
    an infinite elapsed, attempt 0, a start in the future, a control character), and marks a duration over
    the ceiling as an outlier as a night does. The store's own objects are not held to it, so that one an
    older nightly wrote stays readable."""
    out: list[Sample] = []
    problems: list[Problem] = []
    now = datetime.now(UTC)
    for n, raw in enumerate(body.split(b"\n"), 1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            problems.append(Problem(where, n, "encoding", f"not UTF-8 ({exc.reason})"))
            continue
        if line.strip():
            sample = _sample(where, n, line, now if imported else None)
            if isinstance(sample, Problem):
                problems.append(sample)
            else:
                out.append(sample)
    return out, problems


#: the most digits a whole number of a sample may have: 18 keeps every attempt number a SQLite INTEGER and
#: every elapsed a finite float, and is far beyond any real one (10**18 s is 3e10 years)
MAX_DIGITS = 18


class _Huge(str):
    """A JSON whole number of more than ``MAX_DIGITS`` digits, kept as its text: converted, it would stop
    ``float()``, SQLite or Python's own 4,300-digit limit with a traceback instead of naming its line."""

    def __repr__(self) -> str:
        return f"a number of {len(self.lstrip('-'))} digits"


def _whole(text: str) -> int | _Huge:
    return _Huge(text) if len(text.lstrip("-")) > MAX_DIGITS else int(text)


def _sample(where: str, n: int, line: str, imported: datetime | None = None) -> Sample | Problem:
    """The sample of line ``n``, or what is wrong with it: never an exception, whatever the line holds (a
    line nested 100,000 deep, a number of 5,000 digits), so one bad line names itself and the others are read.
    ``imported``: the time now, for a line of a file brought in from outside (``decode_lines``)."""
    try:
        row = json.loads(line, parse_int=_whole)
    except json.JSONDecodeError as exc:
        return Problem(where, n, "json", f"not a JSON object ({exc.msg})")
    except RecursionError:
        return Problem(where, n, "json", "nested too deeply to be a sample (one JSON object of fields per line)")
    if not isinstance(row, dict):
        return Problem(where, n, "json", f"expected an object, got {type(row).__name__}")
    unknown = sorted(set(row) - set(_FIELDS))
    missing = [k for k in _REQUIRED if k not in row]
    if unknown or missing:
        field = (unknown or missing)[0]
        what = "unknown field (written by a newer nightly?)" if unknown else "required field is missing"
        return Problem(where, n, field, what)
    for key, value in row.items():
        if isinstance(value, _Huge):
            return Problem(where, n, key, f"{value!r}, more than the {MAX_DIGITS} any {key} has; fix or remove the "
                                          "line")
        want = _TYPES.get(key, (str,))
        if not isinstance(value, want) or (bool not in want and isinstance(value, bool)):
            return Problem(where, n, key, f"expected {' or '.join(t.__name__ for t in want)}, got {value!r}")
    sample = Sample(**{**row, "elapsed_s": float(row["elapsed_s"])})
    if bad := _invalid(sample):
        return Problem(where, n, *bad)
    if imported is None:
        return sample
    if why := id_problem(sample.test_id):
        return Problem(where, n, "test_id", f"{sample.test_id!r} is not a test id ({why}); a test id is the test "
                                            "file's path in its repository, `::variant` after it where the file holds "
                                            "several (`nightly catalog` lists them): fix or remove the line")
    field, why = kept_problem(sample, imported)
    if field:
        return Problem(where, n, field, f"{why}; fix or remove the line")
    return screen(sample)


def decode_successions(where: str, body: bytes) -> tuple[list[Succession], Problem | None]:
    """The rewrites of one ``history/successions/`` object, or its first problem (then none of them), as
    ``decode`` takes a samples object: no nightly writes an empty one, or a line that is not UTF-8."""
    if not body.strip():
        return [], Problem(where, 1, "content", "empty; a nightly never writes an empty one (truncated?)")
    out: list[Succession] = []
    for n, raw in enumerate(body.split(b"\n"), 1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            return [], Problem(where, n, "encoding", f"not UTF-8 ({exc.reason})")
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            ok = isinstance(row, dict) and all(isinstance(row.get(k), str) and row[k] for k in ("before", "after", "path"))
        except (ValueError, RecursionError):
            ok = False
        if not ok:
            return [], Problem(where, n, "succession", "expected a JSON object with before, after and path strings, "
                                                       f"got {line[:80]!r}")
        out.append(Succession(row["before"], row["after"], row["path"], str(row.get("why") or CALIBRATE_REWRITE)))
    return out, None


class S3HistoryStore:
    """Append-only samples in ``s3://bucket/<prefix>history/``; safe for writers on any host."""

    def __init__(self, bucket: str, prefix: str = "", client=None, endpoint_url: str | None = None,
                 page_size: int = 1000):
        self.bucket = bucket
        self.prefix = _prefix(prefix)
        self.client = client if client is not None else make_client(endpoint_url)
        self.page_size = page_size

    def __repr__(self) -> str:
        return f"S3HistoryStore({self.url!r})"

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}history/"

    def _fail(self, action: str, exc: Exception) -> HistoryError:
        code, text = _describe(exc)
        error = HistoryUnreachable if unreachable(exc) else HistoryError
        return error(f"{self.url}: {action} failed ({text}); {_hint(code).replace('BUCKET', self.bucket)}")

    # -- writing -------------------------------------------------------------------------------
    def _put(self, samples: list[Sample], folder: str, label: str) -> str:
        return self._write(encode(samples), folder, label, f"writing {len(samples)} samples",
                           {"nightly-samples": str(len(samples))})

    def _write(self, body: bytes, folder: str, label: str, action: str, count: dict[str, str]) -> str:
        """One new JSON-lines object under ``history/<folder>/``, never replacing one (If-None-Match), with the
        schema, the body's sha256 (``_fetch`` checks it) and ``count`` (how many lines of what) as metadata."""
        metadata = {"nightly-schema": SCHEMA, "nightly-sha256": hashlib.sha256(body).hexdigest(), **count}
        now = datetime.now(UTC)
        label = re.sub(r"[^A-Za-z0-9._-]+", "_", label)[:64] or "none"
        key = f"{self.prefix}history/{folder}/{now:%Y-%m-%d}/{now:%H%M%S%f}-{label}-{uuid.uuid4().hex}.jsonl"
        try:
            self.client.put_object(
                Bucket=self.bucket, Key=key, Body=body, IfNoneMatch="*", ContentType="application/x-ndjson",
                ContentMD5=base64.b64encode(hashlib.md5(body).digest()).decode(), Metadata=metadata,
            )
        except (ClientError, BotoCoreError) as exc:
            raise self._fail(f"{action} (not stored) to {key}", exc) from exc
        return key

    def append(self, samples: Iterable[Sample]) -> None:
        """Store the batch as one new object; no read, no overwrite, nothing earlier touched."""
        batch = list(samples)
        for s in batch:
            _check(s)
        if batch:
            runs = {s.run_id for s in batch}
            self._put(batch, "samples", runs.pop() if len(runs) == 1 else "mixed")

    def add(self, samples: Iterable[Sample]) -> int:
        """Append only attempts not stored yet (for imports); returns how many were new."""
        batch = list(samples)
        for s in batch:
            _check(s)
        seen = {_dedupe_key(s) for s in self.scan().samples}
        new = []
        for s in batch:
            if _dedupe_key(s) not in seen:
                seen.add(_dedupe_key(s))
                new.append(s)
        self.append(new)
        return len(new)

    def add_successions(self, successions: Iterable[Succession]) -> int:
        """Record calibrate's est_time rewrites (lineage.py) that are not recorded yet as one new object
        under ``history/successions/``; returns how many were new. A rewrite is one (before, after) pair,
        as the local store's key: every calibration proposes the same rewrite again until its patch is
        applied, and an object per night repeating it would make every plan re-read them all."""
        known = {(s.before, s.after) for s in self.successions()}
        items = []
        for s in successions:
            if (s.before, s.after) not in known:
                known.add((s.before, s.after))
                items.append(s)
        if not items:
            return 0
        body = "".join(json.dumps(dataclasses.asdict(s), sort_keys=True) + "\n" for s in items).encode()
        self._write(body, "successions", "calibrate", f"recording {len(items)} est_time rewrites",
                    {"nightly-successions": str(len(items))})
        return len(items)

    def successions_stamp(self) -> tuple[str, ...]:
        """What changes whenever the recorded rewrites do (``storage.history.lineage`` rereads them only
        then): the keys under ``history/successions/``, one LIST and no GET. A calibration that records a
        new rewrite adds one object and none is ever rewritten, so the same keys hold the same rewrites."""
        try:
            return tuple(self._keys(("successions",)))
        except (ClientError, BotoCoreError) as exc:
            raise self._fail("listing the est_time rewrites", exc) from exc

    def successions(self) -> list[Succession]:
        """Every recorded rewrite, oldest object first. A damaged object (checked as a samples object is:
        ``_fetch``, then every line) is an error naming it: a lost succession would silently make the
        history of a calibrated file stale."""
        out: list[Succession] = []
        problems: list[Problem] = []
        try:
            keys = self._keys(("successions",))
            for key in keys:
                where, body, problem = self._fetch(key)
                got, problem = ([], problem) if problem else decode_successions(where, body)
                out += got
                problems += [problem] if problem else []
        except (ClientError, BotoCoreError) as exc:
            raise self._fail("reading the est_time rewrites", exc) from exc
        if problems:
            raise HistoryError(self._damaged(
                problems, f"{len(keys)} objects of est_time rewrites",
                "the samples of the files they name would count as stale",
                "or restore it from a backup (a versioned bucket keeps its earlier version), then retry; moved "
                "aside, its rewrites are lost and the samples of the files it names count as stale"))
        return out

    # -- reading -------------------------------------------------------------------------------
    def _keys(self, folders: tuple[str, ...] = ("compacted", "samples")) -> list[str]:
        """The objects of ``folders`` in that order, each by key, i.e. by write time (the default:
        compacted objects first, the older samples, then the batches).

        Listed in the reverse order: samples only ever move from ``samples/`` to ``compacted/``
        (compact() writes the merged copy, then deletes), so a compaction between the two listings
        leaves a sample in the first one listed or in the second, never in neither. Listed
        ``compacted/`` first, it would read as no samples at all."""
        listed: dict[str, list[str]] = {}
        paginator = self.client.get_paginator("list_objects_v2")
        for folder in reversed(folders):
            pages = paginator.paginate(Bucket=self.bucket, Prefix=f"{self.prefix}history/{folder}/",
                                       PaginationConfig={"PageSize": self.page_size})
            listed[folder] = [o["Key"] for page in pages for o in page.get("Contents", []) if o["Key"].endswith(".jsonl")]
        return [key for folder in folders for key in listed[folder]]

    def _fetch(self, key: str) -> tuple[str, bytes, Problem | None]:
        """``(s3://bucket/key, body, problem)`` of one history object: a schema this nightly does not read, or
        a body that does not match the sha256 ``_write`` recorded. An object from a nightly that recorded
        no sha256 (successions before it did) has none to check: its lines are all there is."""
        where = f"s3://{self.bucket}/{key}"
        obj = self.client.get_object(Bucket=self.bucket, Key=key)
        body = obj["Body"].read()
        meta = obj.get("Metadata", {})
        if meta.get("nightly-schema", SCHEMA) != SCHEMA:
            return where, body, Problem(where, 1, "schema", f"version {meta['nightly-schema']}, this nightly reads "
                                                            f"{SCHEMA}; upgrade nightly-e2e")
        digest = meta.get("nightly-sha256")
        if digest and digest != hashlib.sha256(body).hexdigest():
            return where, body, Problem(where, 1, "content", "does not match the sha256 it was written with "
                                                             "(truncated or overwritten)")
        return where, body, None

    def _get(self, key: str) -> tuple[list[Sample], Problem | None]:
        where, body, problem = self._fetch(key)
        return ([], problem) if problem else decode(where, body)

    def scan(self) -> HistoryScan:
        """Every readable sample (repeats dropped, first kept) and one problem per damaged object."""
        for _ in range(3):
            try:
                keys = self._keys()
                with ThreadPoolExecutor(max_workers=_READERS) as pool:
                    results = list(pool.map(self._get, keys))
                break
            except ClientError as exc:
                if _describe(exc)[0] != "NoSuchKey":  # else compacted away while we read: list again
                    raise self._fail("reading", exc) from exc
            except BotoCoreError as exc:
                raise self._fail("reading", exc) from exc
        else:
            raise HistoryError(f"{self.url}: objects kept disappearing while reading (a compaction running?); "
                               "retry when it has finished")
        seen: set[tuple] = set()
        samples, problems = [], []
        for got, problem in results:
            if problem:
                problems.append(problem)
                continue
            for s in got:
                if _dedupe_key(s) not in seen:
                    seen.add(_dedupe_key(s))
                    samples.append(s)
        return HistoryScan(samples, problems, len(keys))

    def read(self) -> list[Sample]:
        """Every sample; if any object is damaged, raise after reading the rest (see ``scan``)."""
        found = self.scan()
        if found.problems:
            raise S3HistoryReadError(self._damaged(
                found.problems, f"{found.objects} history objects",
                f"{len(found.samples)} samples in the others were read; nothing was computed from them",
                "then retry; re-add lost nights with `nightly history import`"), found.samples, found.problems)
        return found.samples

    def _damaged(self, problems: list[Problem], of: str, why: str, then: str) -> str:
        """What a read that found damaged objects says: each one located, and the command that moves it aside."""
        import shlex

        from pipelines.storage.history import s3_endpoint

        listed = "\n".join(f"  {p}" for p in problems)
        first = problems[0].path.removeprefix(f"s3://{self.bucket}/{self.prefix}")
        endpoint = s3_endpoint()  # the deployment's (MinIO, Ceph): the pasted command must go there too
        move = shlex.join(["aws", "s3", "mv", *(["--endpoint-url", endpoint] if endpoint else []),
                           f"s3://{self.bucket}/{self.prefix}{first}", f"s3://{self.bucket}/{self.prefix}quarantine/{first}"])
        return (f"{self.url}: {len(problems)} of {of} are unreadable ({why}):\n{listed}\nMove each aside, keeping it "
                f"for recovery, e.g. `{move}`, {then}.")

    def _delete(self, keys: list[str]) -> dict[str, tuple[str, str]]:
        """Delete ``keys``, 1,000 per request; returns ``{key: (code, message)}`` for each one S3 refused.

        S3 answers a multi-object delete with 200 even when it refuses keys (``AccessDenied`` per
        key without ``s3:DeleteObject``): the refusals are only in the answer's ``Errors``."""
        refused: dict[str, str] = {}
        for i in range(0, len(keys), 1000):
            resp = self.client.delete_objects(Bucket=self.bucket, Delete={
                "Objects": [{"Key": k} for k in keys[i:i + 1000]], "Quiet": True})
            for err in resp.get("Errors") or ():
                refused[err.get("Key", "")] = (err.get("Code", ""), err.get("Message", ""))
        return refused

    def _refused(self, refused: dict[str, tuple[str, str]], what: str) -> HistoryError:
        key, (code, message) = next(iter(refused.items()))
        why = f"{code}: {message}".strip(": ")
        return HistoryError(f"{self.url}: S3 refused deleting {len(refused)} object(s) ({why}, e.g. {key}); {what}; "
                            f"grant s3:DeleteObject on s3://{self.bucket}/{self.prefix}* (docs/storage.md)")

    def compact(self) -> int:
        """Merge all readable objects into one, then delete those merged; returns how many were merged.

        Safe beside writers and other compactions: an object is deleted only after a merged copy
        of its samples is stored, objects written meanwhile are not touched, damaged ones stay.
        Without ``s3:DeleteObject`` nothing is written and a ``HistoryError`` says so: each refused
        compaction would otherwise add one more full copy of the history, read by every plan.
        """
        keys = self._keys()
        if len(keys) < 2:
            return 0
        with ThreadPoolExecutor(max_workers=_READERS) as pool:
            try:
                results = list(pool.map(self._get, keys))
            except (ClientError, BotoCoreError) as exc:
                raise self._fail("reading for compaction (nothing was changed)", exc) from exc
        merged, seen, done = [], set(), []
        for key, (got, problem) in zip(keys, results, strict=True):
            if problem:
                continue
            done.append(key)
            for s in got:
                if _dedupe_key(s) not in seen:
                    seen.add(_dedupe_key(s))
                    merged.append(s)
        if len(done) < 2:
            return 0
        # may we delete? a key that never exists tells (a versioned bucket keeps a delete marker of it)
        try:
            refused = self._delete([f"{self.prefix}history/compacted/delete-check-{uuid.uuid4().hex}"])
        except (ClientError, BotoCoreError) as exc:
            raise self._fail("checking that merged objects may be deleted (nothing was changed)", exc) from exc
        refused = {k: err for k, err in refused.items() if err[0] in _DENIED}
        if refused:  # other answers for a key that never existed (some S3-compatible stores): the deletes below tell
            raise self._refused(refused, "nothing was merged")
        merged_key = self._put(merged, "compacted", "merged")
        try:
            refused = self._delete(done)
        except (ClientError, BotoCoreError) as exc:
            raise self._fail("deleting merged objects (the merged copy is stored; repeats are ignored)", exc) from exc
        if not refused:
            return len(done)
        if any(k not in refused for k in done):  # some are gone: the merged copy holds their only samples now
            raise self._refused(refused, f"the merged copy {merged_key} stays (reads drop the repeats)")
        try:
            self.client.delete_object(Bucket=self.bucket, Key=merged_key)
        except (ClientError, BotoCoreError) as exc:
            raise self._refused(refused, f"the merged copy {merged_key} could not be removed either "
                                         f"({_describe(exc)[1]}; reads drop the repeats)") from exc
        raise self._refused(refused, "the merged copy was removed; nothing was merged")


#: per-key error codes of a multi-object delete that mean "no right to delete": the probe's verdict
#: (a store that reports a missing key as an error, e.g. ``InternalError: file not found``, may delete)
_DENIED = frozenset({"AccessDenied", "AllAccessDisabled", "AccountProblem", "Forbidden"})


class ArtifactError(RuntimeError):
    """An artifact could not be stored; the message names the object and what to do."""


class ArtifactUnreachable(ArtifactError, Unreachable):
    """S3 did not answer for an artifact (``Unreachable``)."""


def _artifact_error(message: str, exc: BaseException) -> ArtifactError:
    return (ArtifactUnreachable if unreachable(exc) else ArtifactError)(message)


class S3Artifacts:
    """Logs, reports and other files of a night under ``s3://bucket/<prefix>``."""

    def __init__(self, bucket: str, prefix: str = "", client=None, endpoint_url: str | None = None,
                 transfer: TransferConfig | None = None):
        self.bucket = bucket
        self.prefix = _prefix(prefix)
        self.client = client if client is not None else make_client(endpoint_url)
        self.transfer = transfer or TransferConfig()

    def uri(self, key: str) -> str:
        return f"s3://{self.bucket}/{self.prefix}{key.lstrip('/')}"

    def _fail(self, key: str, exc: Exception) -> ArtifactError:
        code, text = _describe(exc)
        return _artifact_error(f"{self.uri(key)}: upload failed ({text}); {_hint(code).replace('BUCKET', self.bucket)}", exc)

    def upload_file(self, path: Path | str, key: str) -> str:
        """Upload a file (multipart above the transfer threshold, parts checksummed); returns its URI."""
        path = Path(path)
        if not path.is_file():
            raise ArtifactError(f"{path}: not a file; nothing was uploaded to {self.uri(key)}")
        try:
            self.client.upload_file(str(path), self.bucket, self.prefix + key.lstrip("/"), Config=self.transfer)
        except (ClientError, BotoCoreError) as exc:
            raise self._fail(key, exc) from exc
        except S3UploadFailedError as exc:  # what upload_file raises for a refused PUT
            code = "NoSuchBucket" if "NoSuchBucket" in str(exc) else ""
            raise ArtifactError(f"{self.uri(key)}: upload of {path} failed ({exc}); "
                                f"{_hint(code).replace('BUCKET', self.bucket)}") from exc
        return self.uri(key)

    def put_text(self, key: str, text: str, content_type: str = "text/plain; charset=utf-8") -> str:
        """Store a small text (a log, a night report) in one checksummed PUT; returns its URI."""
        try:
            self._put_object(key, text, content_type)
        except (ClientError, BotoCoreError) as exc:
            raise self._fail(key, exc) from exc
        return self.uri(key)

    def _put_object(self, key: str, text: str, content_type: str, **condition: str) -> None:
        """One checksummed PUT of a small text; ``condition``: IfMatch / IfNoneMatch, as S3 takes them."""
        body = text.encode("utf-8")
        self.client.put_object(Bucket=self.bucket, Key=self.prefix + key.lstrip("/"), Body=body,
                               ContentType=content_type, **condition,
                               ContentMD5=base64.b64encode(hashlib.md5(body).digest()).decode())

    def delete(self, key: str) -> None:
        """Delete one object (S3 answers a missing key with success too)."""
        try:
            self.client.delete_object(Bucket=self.bucket, Key=self.prefix + key.lstrip("/"))
        except (ClientError, BotoCoreError) as exc:
            code, text = _describe(exc)
            raise _artifact_error(f"{self.uri(key)}: cannot be deleted ({text}); "
                                  f"{_hint(code).replace('BUCKET', self.bucket)}", exc) from exc

    def keys(self, prefix: str) -> list[str]:
        """Every key under ``prefix`` (relative to this store's prefix), sorted; all pages."""
        out: list[str] = []
        try:
            for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket,
                                                                              Prefix=self.prefix + prefix):
                out += [o["Key"][len(self.prefix):] for o in page.get("Contents", [])]
        except (ClientError, BotoCoreError) as exc:
            code, text = _describe(exc)
            raise _artifact_error(f"{self.uri(prefix)}: cannot be listed ({text}); "
                                  f"{_hint(code).replace('BUCKET', self.bucket)}", exc) from exc
        return sorted(out)

    def get_text(self, key: str) -> tuple[str, str] | None:
        """``(text, etag)`` of a small text, ``None`` when there is no such object."""
        try:
            obj = self.client.get_object(Bucket=self.bucket, Key=self.prefix + key.lstrip("/"))
            body = obj["Body"].read()
        except (ClientError, BotoCoreError) as exc:
            code, text = _describe(exc)
            if isinstance(exc, ClientError) and code in ("NoSuchKey", "404"):
                return None
            raise _artifact_error(f"{self.uri(key)}: cannot be read ({text}); "
                                  f"{_hint(code).replace('BUCKET', self.bucket)}", exc) from exc
        try:
            return body.decode("utf-8"), obj["ETag"]
        except UnicodeDecodeError as exc:
            error = ArtifactError(f"{self.uri(key)}: {not_utf8(exc)}")
            error.etag = obj["ETag"]  # the object as read: a read-modify-write may replace it (state.S3StateStore.update)
            raise error from exc

    def get_end(self, key: str, max_bytes: int) -> tuple[bytes, int] | None:
        """The last ``max_bytes`` of an object and the offset they start at (a ranged GET: a log's end
        without its 20 MB), ``None`` when there is no such object."""
        try:
            obj = self.client.get_object(Bucket=self.bucket, Key=self.prefix + key.lstrip("/"),
                                         Range=f"bytes=-{max_bytes}")
            body = obj["Body"].read()
        except (ClientError, BotoCoreError) as exc:
            code, text = _describe(exc)
            if isinstance(exc, ClientError) and code in ("NoSuchKey", "404"):
                return None
            if isinstance(exc, ClientError) and code in ("InvalidRange", "416"):  # an empty object has no last bytes
                return b"", 0
            raise _artifact_error(f"{self.uri(key)}: cannot be read ({text}); "
                                  f"{_hint(code).replace('BUCKET', self.bucket)}", exc) from exc
        size = str(obj.get("ContentRange") or "").rpartition("/")[2]  # "bytes 100-199/200"; none: the whole object
        return body, int(size) - len(body) if size.isdigit() else 0

    def put_text_if(self, key: str, text: str, etag: str | None,
                    content_type: str = "text/plain; charset=utf-8") -> bool:
        """Store a small text only if the object is still the one read (``etag``), or still absent
        (``etag`` None): S3's conditional write (``If-Match`` / ``If-None-Match: *``). False when
        someone else wrote it meanwhile (412, or 409 for a conditional write racing another)."""
        condition = {"IfMatch": etag} if etag is not None else {"IfNoneMatch": "*"}
        try:
            self._put_object(key, text, content_type, **condition)
        except ClientError as exc:
            if _describe(exc)[0] in ("PreconditionFailed", "412", "ConditionalRequestConflict", "409", "NoSuchKey"):
                return False
            raise self._fail(key, exc) from exc
        except BotoCoreError as exc:
            raise self._fail(key, exc) from exc
        return True
