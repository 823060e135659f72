"""The deployment's store for a night's state: summaries, estimates, reports, evidence and logs.

Every Dagster run may start in a fresh folder (separate pods in production), so whatever one run
leaves for the next (the night summary the calibration reads, the estimates the next night plans
with, the report, the attempt logs a maintainer opens) goes through this store, never through
the run's working folder. ``local``: files under the state folder (the embedded default);
``s3``: objects under ``s3://<s3_bucket>/<s3_prefix>state/`` written with boto3.

Keys are relative paths such as ``nights/<night>.json`` or ``estimates/<repo>.json``.
"""

from __future__ import annotations

import fcntl
import os
import random
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Protocol

from pipelines.core.calibrate.output import write_atomic
from pipelines.core.specs import DeploymentSpec


class StateError(RuntimeError):
    """The store cannot be read or written; the message names the place and what to do."""


class Unreachable(Exception):
    """Mixed into a store's error when the store did not answer (no connection, a timeout, S3's 5xx after
    the client's own retries): no flag or input is wrong, and the same command may work later, so
    ``nightly run`` exits with its own status for it (README)."""


class StateUnreachable(StateError, Unreachable):
    """The state store did not answer (``Unreachable``)."""


def _state_error(exc: Exception) -> StateError:
    """The StateError an S3 artifact error becomes, unreachable or not as it was."""
    return (StateUnreachable if isinstance(exc, Unreachable) else StateError)(str(exc))


def not_utf8(exc: UnicodeDecodeError, fix: str = "re-save it as UTF-8, or move it aside to start it afresh") -> str:
    """Why a state file cannot be read as text (a hand edit saved as Latin-1), and what to do."""
    return f"not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset {exc.start}); {fix}"


class NotText(StateError):
    """A stored file that is no UTF-8 text: what it holds is damaged, not the store, so a reader that
    passes over a damaged record (an old night's) passes over this one as well. ``line``: where the
    first bad byte is; ``error``: the decode error."""

    def __init__(self, where: str, error: UnicodeDecodeError):
        self.where, self.error = where, error
        self.line = bytes(error.object).count(b"\n", 0, error.start) + 1
        super().__init__(f"{where}: {not_utf8(error)}")


class Undecodable(str):
    """What a store's ``update`` (local or S3) hands its change for a file that is no UTF-8 text: that text with
    the bad bytes as U+FFFD, so a change that keeps a copy (``nights/latest.json``) replaces it as it replaces
    garbled JSON; a change whose document must never be lost (a quarantine) raises ``.error`` (the
    :class:`NotText` a ``get`` raises), and the file stays as it was."""

    error: NotText

    def __new__(cls, error: NotText) -> Undecodable:
        text = super().__new__(cls, bytes(error.error.object).decode("utf-8", errors="replace"))
        text.error = error
        return text


def must_be_writable(root: Path) -> str:
    """What to do about a state folder that cannot be written (one wording for every command)."""
    return f"the state folder {root} must be writable (set NIGHTLY_HOME or --home to a writable folder)"


def writable_home(home: Path) -> Path:
    """Create the state folder and make (and remove) a file in it, before a command does any work:
    an unwritable home (read-only install, a file in the path) is then one message and exit 2,
    not a traceback halfway through a night."""
    home = Path(home)
    try:
        home.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=home, prefix=".writable-")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise StateError(f"{home}: cannot be written ({exc.strerror}); {must_be_writable(home)}") from exc
    return home


def _check_key(key: str) -> str:
    parts = key.split("/")
    if not key or key.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise StateError(f"{key!r}: not a relative state key (no empty, '.' or '..' parts)")
    return key


class StateStore(Protocol):
    """Small texts and files a night leaves for the next run, wherever that run starts."""

    def get(self, key: str) -> str | None: ...

    def get_end(self, key: str, max_bytes: int) -> tuple[str, bool] | None: ...

    def put(self, key: str, text: str) -> str: ...

    def put_file(self, key: str, path: Path) -> str: ...

    def keys(self, prefix: str) -> list[str]: ...

    def uri(self, key: str) -> str: ...

    def update(self, key: str, change: Callable[[str | None], str]) -> str: ...

    def delete(self, key: str) -> None: ...


#: how many times an update is tried again when another writer changed the object meanwhile
UPDATE_TRIES = 20


def _conflict(where: str, tries: int) -> StateError:
    return StateError(f"{where}: changed by another writer {tries} times while this change was being made; "
                      "nothing was recorded; run the command again")


def read_end(path: Path | str, max_bytes: int) -> tuple[str, bool]:
    """The last ``max_bytes`` of a file, bytes that are no UTF-8 replaced, and whether its first line lacks
    its start (one byte more is read to tell); only the end is read, whatever the file's size."""
    from pipelines.core.report import decode_end

    with open(path, "rb") as fh:
        start = max(0, fh.seek(0, os.SEEK_END) - max_bytes - 1)
        fh.seek(start)
        return decode_end(fh.read(), start)


class LocalStateStore:
    """Files under the state folder; writes are atomic (temp file + rename)."""

    def __init__(self, root: Path):
        self.root = Path(root)

    def __repr__(self) -> str:
        return f"LocalStateStore({self.root})"

    def path(self, key: str) -> Path:
        return self.root / _check_key(key)

    def uri(self, key: str) -> str:
        return str(self.path(key))

    def get(self, key: str) -> str | None:
        try:
            return self.path(key).read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StateError(f"{self.path(key)}: cannot be read ({exc.strerror}); check its permissions") from exc
        except UnicodeDecodeError as exc:
            raise NotText(str(self.path(key)), exc) from exc

    def get_end(self, key: str, max_bytes: int) -> tuple[str, bool] | None:
        """The last ``max_bytes`` of a file (a log's end for its last lines, without reading 20 MB), bytes that
        are no UTF-8 replaced, and whether its first line lacks its start; None when there is no such file."""
        try:
            return read_end(self.path(key), max_bytes)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StateError(f"{self.path(key)}: cannot be read ({exc.strerror}); check its permissions") from exc

    def put(self, key: str, text: str) -> str:
        target = self.path(key)
        try:
            write_atomic(target, text)  # whole or not at all, with the mode a plain write gives
        except OSError as exc:
            raise StateError(f"{target}: cannot be written ({exc.strerror}); {must_be_writable(self.root)}") from exc
        return str(target)

    def put_file(self, key: str, path: Path) -> str:
        target = self.path(key)
        if Path(path).resolve() == target.resolve():
            return str(target)  # already where it belongs (local attempt logs are written in place)
        return self.put(key, Path(path).read_text(encoding="utf-8", errors="replace"))

    def update(self, key: str, change: Callable[[str | None], str]) -> str:
        """Read-modify-write of one file, atomic against every other ``update`` of it (any process):
        ``change`` gets the current text (None when absent; :class:`Undecodable` when it is no UTF-8
        text) and returns the new one; whatever it raises leaves the file as it was. An exclusive lock
        on ``.<name>.lock`` beside it is held throughout, so two writers never both build on the same
        text (neither change is lost)."""
        target = self.path(key)
        lock = target.with_name(f".{target.name}.lock")
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError as exc:
            raise StateError(f"{lock}: cannot be created ({exc.strerror}); {must_be_writable(self.root)}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # released when fd closes, also if this process dies
            try:
                text = self.get(key)
            except NotText as exc:
                text = Undecodable(exc)
            return self.put(key, change(text))
        finally:
            os.close(fd)

    def delete(self, key: str) -> None:
        """Remove a file that no longer holds (a stale patch); absent is fine."""
        try:
            self.path(key).unlink(missing_ok=True)
        except OSError as exc:
            raise StateError(f"{self.path(key)}: cannot be removed ({exc.strerror}); check its permissions") from exc

    def keys(self, prefix: str) -> list[str]:
        base = self.root / prefix if prefix else self.root
        if not base.is_dir():
            return []
        return sorted(str(p.relative_to(self.root)) for p in base.rglob("*") if p.is_file() and not p.name.startswith("."))


class S3StateStore:
    """Objects under ``s3://bucket/<prefix>state/``; each put is one checksummed PUT."""

    def __init__(self, bucket: str, prefix: str = "", client=None, endpoint_url: str | None = None):
        from pipelines.storage.s3 import S3Artifacts  # boto3 only where S3 is used

        self.artifacts = S3Artifacts(bucket, f"{prefix.strip('/')}/state/" if prefix.strip("/") else "state/",
                                     client=client, endpoint_url=endpoint_url)

    def __repr__(self) -> str:
        return f"S3StateStore({self.uri('')})"

    def uri(self, key: str) -> str:
        return self.artifacts.uri(key)

    def get(self, key: str) -> str | None:
        from pipelines.storage.s3 import ArtifactError

        try:
            got = self.artifacts.get_text(_check_key(key))
        except ArtifactError as exc:
            if isinstance(exc.__cause__, UnicodeDecodeError):
                raise NotText(self.uri(key), exc.__cause__) from exc
            raise _state_error(exc) from exc
        return got[0] if got is not None else None

    def get_end(self, key: str, max_bytes: int) -> tuple[str, bool] | None:
        """The last ``max_bytes`` of an object (one ranged GET), as :meth:`LocalStateStore.get_end`."""
        from pipelines.core.report import decode_end
        from pipelines.storage.s3 import ArtifactError

        try:
            got = self.artifacts.get_end(_check_key(key), max_bytes + 1)  # one byte more: is it a line's start?
        except ArtifactError as exc:
            raise _state_error(exc) from exc
        return decode_end(*got) if got is not None else None

    def put(self, key: str, text: str) -> str:
        from pipelines.storage.s3 import ArtifactError

        try:
            return self.artifacts.put_text(_check_key(key), text)
        except ArtifactError as exc:
            raise _state_error(exc) from exc

    def put_file(self, key: str, path: Path) -> str:
        from pipelines.storage.s3 import ArtifactError

        try:
            return self.artifacts.upload_file(path, _check_key(key))
        except ArtifactError as exc:
            raise _state_error(exc) from exc

    def update(self, key: str, change: Callable[[str | None], str]) -> str:
        """Read-modify-write of one object with S3's conditional write: the new text is stored only
        if the object is still the one read (``If-Match`` its ETag; ``If-None-Match: *`` when there was
        none); otherwise it is read again and ``change`` applied to the newer text. ``change`` may
        raise to store nothing. After UPDATE_TRIES conflicts it gives up with a StateError (nothing
        stored, nothing lost)."""
        from pipelines.storage.s3 import ArtifactError

        _check_key(key)
        for attempt in range(UPDATE_TRIES):
            try:
                try:
                    got = self.artifacts.get_text(key)
                    text, etag = got if got is not None else (None, None)
                except ArtifactError as exc:
                    if not isinstance(exc.__cause__, UnicodeDecodeError):
                        raise
                    # as LocalStateStore.update: the change sees the damaged text; one that keeps a copy
                    # (nights/latest.json) replaces it, one whose document must never be lost raises .error
                    text, etag = Undecodable(NotText(self.uri(key), exc.__cause__)), getattr(exc, "etag", None)
                new = change(text)
                if self.artifacts.put_text_if(key, new, etag):
                    return self.uri(key)
            except ArtifactError as exc:
                raise _state_error(exc) from exc
            time.sleep(random.uniform(0.05, 0.2) * min(attempt + 1, 5))  # let the other writer finish
        raise _conflict(self.uri(key), UPDATE_TRIES)

    def delete(self, key: str) -> None:
        """Remove an object that no longer holds (a stale patch); absent is fine."""
        from pipelines.storage.s3 import ArtifactError

        try:
            self.artifacts.delete(_check_key(key))
        except ArtifactError as exc:
            raise _state_error(exc) from exc

    def keys(self, prefix: str) -> list[str]:
        from pipelines.storage.s3 import ArtifactError

        try:
            return self.artifacts.keys(prefix)
        except ArtifactError as exc:
            raise _state_error(exc) from exc


def state_store(deployment: DeploymentSpec, home: Path, env: Mapping[str, str] | None = None) -> StateStore:
    """The deployment's store: ``local`` -> the state folder, ``s3`` -> the deployment's bucket."""
    if deployment.storage == "s3":
        from pipelines.storage.history import history_store, s3_endpoint

        history_store(deployment, home, env)  # same checks (bucket named) and the same messages
        return S3StateStore(deployment.s3_bucket, deployment.s3_prefix, endpoint_url=s3_endpoint(env))
    return LocalStateStore(Path(home))
