"""Attempts a dead night left behind: found, killed and recorded by the next night.

While an attempt runs, the launcher keeps a small JSON in ``<state>/running/`` (test, night, log,
start, the night's pid, the GPU lock files it holds). If the night dies with ``kill -9`` the file
stays; a later night calls :func:`reap_orphans`, which kills whatever of that attempt still runs
(found by its environment marker and process group, see :mod:`pipelines.launch.procs`, and then
whatever still holds its GPU locks: a daemon that dropped the marker and left the group) and
returns an ``interrupted`` :class:`Attempt` per file, so the attempt reaches history instead of
vanishing. A file that is no record this launcher wrote (not JSON, a test id the catalog would never
give, fields of the wrong kind, a pid no process can have) is named with what is wrong and set aside as
``<name>.refused``: nothing is killed or recorded for it. Only lock files inside the GPU lock folder are ever acted on.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from pipelines.core.catalog.ids import id_problem
from pipelines.core.model import Attempt
from pipelines.launch.gpu_slots import LAUNCHERS_FILE, host_lock_dir, launchers_path
from pipelines.launch.procs import (
    PID_LIMIT,
    attempt_token_of,
    kill_attempt,
    kill_lock_holders,
    lock_holders,
    lock_taker,
    marked_pids,
    pid_alive,
    start_time,
)


def running_dir(state_dir: Path) -> Path:
    return Path(state_dir) / "running"


def write_record(state_dir: Path, record: dict) -> Path:
    """Atomically write one running attempt's record; returns its path."""
    folder = running_dir(state_dir)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{record['token']}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, sort_keys=True))
    os.replace(tmp, path)
    return path


def owner_fields() -> dict:
    """Who runs the attempt: this process, told apart from a later one that reuses its pid."""
    return {"owner_pid": os.getpid(), "owner_start": start_time(os.getpid())}


@dataclass(frozen=True)
class Orphan:
    """A running record whose night is gone, and the pids of the attempt still alive."""

    path: Path
    record: dict
    pids: tuple[int, ...]


def _owner_alive(record: dict) -> bool:
    """Whether the night that wrote the record still runs. Its owner is a process of this user (the
    state folder is ours), whose start time we can always read; an unreadable one (hidepid) is
    another user's process that took the pid, so the owner is gone. The Kubernetes sweeper's
    ``process_gone`` answers the other way, because a launcher there may be another user's."""
    pid = int(record.get("owner_pid") or 0)
    return pid > 0 and pid_alive(pid) and start_time(pid) == record.get("owner_start", "")


#: what a running file that is no record of ours is renamed to, next to it: never read again
REFUSED_SUFFIX = ".refused"


def _whole(value: object, low: int, high: int | None = None) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= low and (high is None or value <= high)


def record_problem(path: Path, record: object) -> str:
    """What makes ``record`` (read from ``path``) no record :meth:`LocalLauncher._run` writes, "" when it is
    one. Its test id is checked as the catalog checks ids from outside, its numbers and lists by kind: a
    hand-made or damaged file must never become a sample, or have its pids and locks acted on."""
    if not isinstance(record, dict):
        return f"expected a JSON object, got {type(record).__name__}"
    token = record.get("token", path.stem)
    if token != path.stem:
        return f"token: {token!r} is not the file's name ({path.stem!r}), as the launcher writes it"
    test_id = record.get("test_id")
    if not isinstance(test_id, str) or not test_id:
        return f"test_id: expected a test id, got {test_id!r}"
    why = id_problem(test_id)
    if why:
        return f"test_id: {test_id!r} is not a test id ({why})"
    if not _whole(record.get("owner_pid"), 1, PID_LIMIT):  # no pid is above it: a larger one is no night's
        return (f"owner_pid: expected the night's pid (a whole number from 1 to {PID_LIMIT}), "
                f"got {record.get('owner_pid')!r}")
    for name in ("pid", "pgid"):
        if name in record and not _whole(record[name], 0, PID_LIMIT):
            return f"{name}: expected a whole number from 0 to {PID_LIMIT}, got {record[name]!r}"
    for name in ("attempt", "timeout_s"):
        if name in record and not _whole(record[name], 0):
            return f"{name}: expected a whole number, 0 or more, got {record[name]!r}"
    for name in ("night", "run_id", "log_path", "node", "started_at"):
        if name in record and not isinstance(record[name], str):
            return f"{name}: expected text, got {record[name]!r}"
    if record.get("started_at"):
        try:
            datetime.fromisoformat(record["started_at"])
        except ValueError:
            return f"started_at: {record['started_at']!r} is not an ISO-8601 time"
    slots, locks = record.get("gpu_slots", []), record.get("lock_paths", [])
    if not isinstance(slots, list) or not all(_whole(s, 0) for s in slots):
        return f"gpu_slots: expected a list of GPU numbers, got {slots!r}"
    if not isinstance(locks, list) or not all(isinstance(p, str) for p in locks):
        return f"lock_paths: expected a list of lock file paths, got {locks!r}"
    return ""


def _read(folder: Path) -> tuple[list[tuple[Path, dict]], list[tuple[Path, str]]]:
    """The records of ``folder`` and, apart, each file that is none with what is wrong with it."""
    good, bad = [], []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else ():
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError) as exc:  # a record is replaced whole (write_record): never half-written
            bad.append((path, f"cannot be read as JSON ({exc})"))
            continue
        why = record_problem(path, record)
        if why:
            bad.append((path, why))
        else:
            good.append((path, record))
    return good, bad


def live_nights(state_dir: Path) -> set[str]:
    """The nights with an attempt running now: a running record whose night process still lives."""
    good, _ = _read(running_dir(state_dir))
    return {str(r["night"]) for _, r in good if r.get("night") and _owner_alive(r)}


def find_orphans(state_dir: Path) -> list[Orphan]:
    """Records of attempts whose night process has died (a live night's attempts are not orphans); a file
    that is no record (:func:`record_problem`) is none, :func:`reap_orphans` sets it aside."""
    good, _ = _read(running_dir(state_dir))
    return [Orphan(path, record, tuple(marked_pids(str(record.get("token", path.stem)))))
            for path, record in good if not _owner_alive(record)]


def _set_aside(path: Path, why: str) -> str:
    """Rename a running file that is no record to ``<name>.refused`` beside it; what to tell the user."""
    target = path.with_name(path.name + REFUSED_SUFFIX)
    n = 1
    while target.exists():
        n += 1
        target = path.with_name(f"{path.name}{REFUSED_SUFFIX}.{n}")
    head = f"{path}: {why}; not a record of an attempt a night started: nothing was killed or recorded for it"
    try:
        os.replace(path, target)
    except OSError as exc:
        return f"{head}, and it could not be set aside ({exc.strerror or exc}): it is skipped every night until removed"
    return f"{head}; set aside as {target} (delete it once read)"


def in_lock_dir(path: str, lock_dir: Path) -> bool:
    """Whether ``path`` is a GPU lock file of ``lock_dir`` (through links, as the holders are found): a
    record naming any other file must never get that file's holders killed."""
    real = os.path.realpath(path)
    return (os.path.dirname(real) == os.path.realpath(lock_dir) and real.endswith(".lock")
            and os.path.basename(real) != LAUNCHERS_FILE)


def _kill_lock_holders(record: dict, lock_dir: Path) -> dict[int, str]:
    """Kill what still holds the dead attempt's GPU locks (a daemon started as ``env -i setsid ...``
    carries no marker and left the group, but inherited the test's lock files).

    Only a lock the dead night took itself is still the attempt's: the night calls ``flock()`` and the
    test inherits that open file, so its holders show the night's pid as the lock's taker (or 0, seen
    from a container, the taker being gone). Once the GPU was free anyone may have taken its lock: a
    live night, or a developer's ``flock LOCK sleep 600``; the taker is then that process, alive, and
    the holders are left alone, as are those of a lock whose holders include a night's launcher, a
    process of another attempt, or one whose taker or environment cannot be read. Only the lock files
    of ``lock_dir`` are looked at (:func:`in_lock_dir`)."""
    paths = [Path(p) for p in record.get("lock_paths") or () if p and in_lock_dir(p, lock_dir)]
    if not paths:
        return {}
    token = str(record.get("token", ""))
    dead_night = int(record.get("owner_pid") or -1)
    launchers = [launchers_path(lock_dir)]

    def not_the_attempts(path: str, holders: list[int]) -> bool:  # asked afresh each round: a lock just freed may be taken
        if any(lock_taker(pid, Path(path)) not in (dead_night, 0) for pid in holders):
            return True
        nights = set(lock_holders(launchers))
        return any(pid in nights or attempt_token_of(pid) not in ("", token) for pid in holders)

    return kill_lock_holders(paths, spare=not_the_attempts)


def _attempt(orphan: Orphan, now: datetime, holding: dict[int, str] | None = None,
             outside: list[str] | None = None) -> Attempt:
    r = orphan.record
    holding = holding or {}
    started = r.get("started_at", "")
    result = _result(r)
    elapsed = _elapsed(r, result, started, now, running=bool(orphan.pids))
    state = (f"still running (pids {', '.join(map(str, orphan.pids))}); killed" if orphan.pids
             else "no longer running; its result was never observed")
    if holding:
        state += (f"; {len(holding)} process(es) still holding its GPU locks were killed: "
                  f"{', '.join(holding.values())}")
    if outside:
        state += (f"; its lock file(s) outside the GPU lock folder were left alone (another "
                  f"NIGHTLY_GPU_LOCK_DIR, or not a lock): {', '.join(outside)}")
    details = {"night": str(r.get("night", "")), "run_id": str(r.get("run_id", "")), "orphan_record": str(orphan.path),
               "reaped": "killed" if orphan.pids or holding else "ended"}
    if holding:
        details["killed_leftovers"] = ",".join(map(str, holding))
    if result.get("finished") is True and result.get("token") == r.get("token") and _by_wrapper(result, r):
        # what the wrapper recorded, kept for the reader; the outcome stays interrupted (never observed)
        details["wrapper_result"] = "ok" if result.get("ok") is True else str(result.get("error") or "failed")
        if "execute_s" in result:
            details["execute_s"] = str(result["execute_s"])
    return Attempt(
        test_id=str(r["test_id"]), outcome="interrupted",
        elapsed_s=round(elapsed, 3), started_at=started, attempt=int(r.get("attempt") or 1),
        node=str(r.get("node", "")), gpu_slots=tuple(r.get("gpu_slots") or ()),
        reason=f"the night {r.get('night') or '?'} (pid {r.get('owner_pid', '?')}) ended before this attempt "
               f"finished; it was {state} by a later night",
        log_path=str(r.get("log_path", "")), timeout_s=int(r.get("timeout_s") or 0), details=details,
    )


def _elapsed(record: dict, result: dict, started: str, now: datetime, running: bool) -> float:
    """How long the attempt ran: until now if it was still running; else the wrapper's own
    measure if it finished, else until the last write to its log (when it went quiet, near when
    it died); until now only when neither is known."""
    try:
        start = datetime.fromisoformat(started)
    except (TypeError, ValueError):
        return 0.0
    if not running:
        if isinstance(result.get("elapsed_s"), int | float) and result.get("token") == record.get("token"):
            return max(0.0, float(result["elapsed_s"]))
        with contextlib.suppress(OSError, ValueError, TypeError):
            last = datetime.fromtimestamp(Path(str(record.get("log_path") or "")).stat().st_mtime, UTC)
            return max(0.0, min((last - start).total_seconds(), (now - start).total_seconds()))
    return max(0.0, (now - start).total_seconds())


def _by_wrapper(result: dict, record: dict) -> bool:
    """The record was written by the attempt's wrapper process (when both say which pid that is)."""
    return not result.get("pid") or not record.get("pid") or result["pid"] == record["pid"]


def _result(record: dict) -> dict:
    """The wrapper's completion record next to the attempt's log, if it wrote one."""
    log = str(record.get("log_path") or "")
    if not log:
        return {}
    try:
        data = json.loads(Path(log).with_suffix(".result.json").read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def reap_orphans(state_dir: Path, record: Callable[[Attempt], None] | None = None,
                 refused: Callable[[str], None] | None = None, lock_dir: Path | None = None) -> list[Attempt]:
    """Kill the orphans of earlier nights and return one ``interrupted`` attempt per orphan.

    With ``record`` (e.g. the history store's append), each attempt is passed to it and its
    running file is removed only once ``record`` returned, so a crash in between loses nothing.
    Without it, the files move to ``running/reaped/`` for the caller to keep. A file that is no
    record (:func:`record_problem`) is set aside as ``<name>.refused`` and ``refused`` is told the file,
    what is wrong and where it went. Lock files outside ``lock_dir`` (the host's GPU lock folder by
    default) are never acted on.
    """
    lock_dir = Path(lock_dir) if lock_dir else host_lock_dir()
    for path, why in _read(running_dir(state_dir))[1]:
        said = _set_aside(path, why)
        if refused is not None:
            refused(said)
    attempts = []
    now = datetime.now(UTC)
    for orphan in find_orphans(state_dir):
        pgid = int(orphan.record.get("pgid") or 0) or None
        if orphan.pids or pgid:
            kill_attempt(str(orphan.record.get("token", orphan.path.stem)), pgid if orphan.pids else None)
        outside = [p for p in orphan.record.get("lock_paths") or () if p and not in_lock_dir(p, lock_dir)]
        attempt = _attempt(orphan, now, _kill_lock_holders(orphan.record, lock_dir), outside)
        attempts.append(attempt)
        if record is not None:
            record(attempt)
            orphan.path.unlink(missing_ok=True)
        else:
            reaped = orphan.path.parent / "reaped"
            reaped.mkdir(exist_ok=True)
            with contextlib.suppress(OSError):
                os.replace(orphan.path, reaped / orphan.path.name)
    return attempts
