"""Run one test attempt as a local subprocess on free (virtual) GPU slots.

What makes a local outcome trustworthy:
- a pass needs the wrapper's completion record, not just exit code 0 (a test that calls
  ``os._exit(0)`` halfway is ``failed``: "exited before the test finished"), written by the
  wrapper process this launcher started (its pid in the record);
- every process of the attempt carries ``NIGHTLY_ATTEMPT_TOKEN``; at the end (pass, timeout or
  interrupt) the process group and every marked process, ``setsid`` daemons included, are killed;
- GPU slots are ``flock`` locks the test process itself holds (see :mod:`gpu_slots`), taken
  from whatever is free on the pool's nodes right now, in the host's lock folder (not the state
  folder: nights with different homes share the host's GPUs);
- a running record in ``<state>/running/`` lets a later night reap what a killed night left
  behind (see :mod:`orphans`); ``interrupt()`` ends every running attempt as ``interrupted``, and
  one that the signal stopping the night ended first too (a test dead of a stop signal waits up to
  :data:`SIGNAL_SETTLE_S` for it; see :meth:`LocalLauncher._stopped_with_the_night`);
- output goes through a capped writer (head and tail kept, the cut noted); a process that escaped
  the marker and the group but still writes to the test's output is killed at the end too, and an
  attempt whose output is still open after that is not passed on its unfinished log.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

from pipelines.core.model import Attempt, Test
from pipelines.launch import gpu_slots
from pipelines.launch.base import LaunchRequest, LogSink
from pipelines.launch.gpu_hold import GpuHold
from pipelines.launch.logcap import DEFAULT_LOG_CAP_BYTES, CappedLog, pump
from pipelines.launch.orphans import owner_fields, write_record
from pipelines.launch.procs import (
    MARKER,
    describe,
    kill_attempt,
    kill_lock_holders,
    kill_pipe_writers,
    marked_pids,
    start_process,
)
from pipelines.launch.wrapper import RESULT_NOT_WRITTEN, why_result_not_written

logger = logging.getLogger(__name__)

WRAPPER = Path(__file__).with_name("wrapper.py")
KILL_GRACE_S = 5.0
#: how long an attempt's end waits for the last of its output after its processes were killed
PUMP_JOIN_S = 10.0
#: the wrapper kills its own group this long after the timeout if the night never did
WRAPPER_BACKSTOP_S = 60
#: a test dead of a stop signal (:data:`STOP_DEATHS`) waits this long for the night's own stop to show (``interrupt()``):
#: one signal to every process (systemctl stop, kill -TERM -1) may reach the test first, and the night acts on
#: it only after its current wait for a finished test (up to half a second) or Dagster's storing of an event
SIGNAL_SETTLE_S = 3.0
#: a test that ended at most this long before the signal that stopped its night arrived may have died of it:
#: the night notes the signal when its handler runs, which may come a little after the test got its own copy
SIGNAL_WINDOW_S = 1.0
#: the stop signals a test dies of by default (``-N``, or a runner's ``128 + N``): only such a death waits the settle
#: (any other ending is judged at once, by a signal the night already noted: an ordinary failure never waits, and its
#: GPUs go to the next test at once)
STOP_DEATHS = frozenset(code for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)
                        for code in (-sig, 128 + sig))
#: a stop sends SIGTERM (or SIGINT, SIGHUP) first: a test dead of SIGKILL (or a runner's exit 137 for it) was
#: killed by the kernel's OOM killer or someone's kill -9, whatever stopped the night around then
KILLED = frozenset({-signal.SIGKILL, 128 + signal.SIGKILL})


class _PoolShape(Protocol):
    name: str
    nodes: int
    gpus_per_node: int


class LocalLauncher:
    """Subprocesses on this machine; ``CUDA_VISIBLE_DEVICES`` from the slots actually held."""

    name = "local"

    def __init__(self, state_dir: Path, python: str = sys.executable, kill_grace_s: float = KILL_GRACE_S, *,
                 pools: Sequence[_PoolShape] = (), log_cap_bytes: int = DEFAULT_LOG_CAP_BYTES,
                 poll_s: float = 0.2, night: str = "", backstop_s: float = WRAPPER_BACKSTOP_S,
                 lock_dir: Path | None = None, gpu_wait_note_s: float = 5.0, gpu_recheck_s: float = 5.0,
                 stray_confirm_s: float | None = None, signal_settle_s: float = SIGNAL_SETTLE_S,
                 hold_inputs: Callable[[Test], tuple[int, ...]] | None = None):
        self.state_dir = Path(state_dir)
        self.lock_dir = Path(lock_dir) if lock_dir else gpu_slots.host_lock_dir()
        self.python = python
        self.kill_grace_s = kill_grace_s
        self.pools = {p.name: (p.nodes, p.gpus_per_node) for p in pools}
        self.log_cap_bytes = log_cap_bytes
        self.poll_s = poll_s
        self.night = night
        self.backstop_s = backstop_s
        #: a wait for busy GPUs is said (a warning naming who holds them) after this long, then every minute
        self.gpu_wait_note_s = gpu_wait_note_s
        #: past the test's timeout, how often to check that only nightly tests still hold the GPUs it waits for
        self.gpu_recheck_s = gpu_recheck_s
        #: a holder must still look stray this long after it first did before a launch gives up on it: a
        #: night ending an attempt (its kill's grace, then the wait for the last output) lets go after that
        self.stray_confirm_s = kill_grace_s + PUMP_JOIN_S if stray_confirm_s is None else stray_confirm_s
        #: see :data:`SIGNAL_SETTLE_S`
        self.signal_settle_s = signal_settle_s
        #: shared locks on the cached inputs a test reads (the asset cache's ``hold_for_reading``), passed to
        #: the test like its GPU locks: another run's rebuild never replaces a folder the test is reading
        self.hold_inputs = hold_inputs
        self._stop = threading.Event()
        #: (signum, when it arrived) of the signal that stopped the night; None: not stopped, or not by a signal
        self._stopped_by: tuple[int, float] | None = None
        #: (signum, when it arrived) of the first stop signal the night noted as it came, before it acts on it
        self._signal_seen: tuple[int, float] | None = None
        self._lock = threading.Lock()
        self._running: dict[str, str] = {}

    def signal_arrived(self, signum: int, at: float) -> None:
        """The night's handler noted a stop signal as it came (``time.monotonic()``), before it stops the
        night: a test that ends by its own handler of the same signal (torchrun's SignalException, exit 1) is
        judged by it at once (:meth:`_stopped_with_the_night`). Called in a signal handler: no lock."""
        if self._signal_seen is None:
            self._signal_seen = (signum, at)

    def interrupt(self, signum: int = 0, at: float | None = None) -> list[str]:
        """End the night's attempts: each running ``launch()`` kills its processes and returns
        ``interrupted``; later calls start nothing. Returns the ids of the tests that were running.
        ``at``: when the signal that stopped the night arrived (``time.monotonic()``), ``signum`` which
        one (0: not known); None: not a signal (an error stopping the night), which relabels no test
        that ended by itself (see :meth:`_stopped_with_the_night`)."""
        if at is not None and not self._stop.is_set():  # the first stop is the night's
            self._stopped_by = (signum, at)
        self._stop.set()
        with self._lock:
            return sorted(self._running.values())

    def argv(self, request: LaunchRequest, result_path: Path) -> list[str]:
        test = request.test
        deadline = request.timeout_s + 2 * self.kill_grace_s + self.backstop_s
        return [self.python, str(WRAPPER), "--file", test.path, "--result", str(result_path),
                "--deadline-s", f"{deadline:g}", "--", *test.args]

    def _shape(self, request: LaunchRequest) -> tuple[list[int], int]:
        """Nodes to look on (the requested one first, none the night avoids unless it avoids them
        all: running there beats not running) and GPUs per node of the request's pool."""
        if request.pool in self.pools:
            nodes, per_node = self.pools[request.pool]
            order = [request.node, *(n for n in range(nodes) if n != request.node)]
            usable = [n for n in order if node_name(request.pool, n) not in request.avoid_nodes]
            return usable or order, per_node
        return [request.node], max([len(request.gpu_slots), *(s + 1 for s in request.gpu_slots)])

    def launch(self, request: LaunchRequest, on_log: LogSink | None = None) -> Attempt:
        pool = request.pool or "pool"
        nodes, per_node = self._shape(request)
        if len(request.gpu_slots) > per_node:
            return self._not_started(request, _now(), "infra_error",
                                     f"needs {len(request.gpu_slots)} GPUs but a {pool} node has {per_node}")
        with GpuHold(self.lock_dir, pool, len(request.gpu_slots), nodes, per_node, subject=request.test.id,
                     confirm_s=self.stray_confirm_s, log=logger) as gpus:
            if request.gpu_slots:
                self._mark_launcher(gpus)
            return self._launch(request, on_log, gpus)

    def _mark_launcher(self, gpus: GpuHold) -> None:
        """Say this process is a night's launcher (before any GPU lock is taken, until all are let go),
        so another night does not take it for a stray holding GPUs. Only a launch that takes GPU locks
        needs it, and a launchers file that cannot be made is a warning, not a failed test: the GPU
        locks themselves are what a launch needs, and taking them says what is wrong with the folder."""
        try:
            gpus.mark()
        except OSError as exc:
            logger.warning("%s: cannot mark this night as a launcher (%s); another night on this host may "
                           "take this one's process for a stray while it ends a test",
                           gpu_slots.launchers_path(self.lock_dir), exc.strerror or exc)

    def _launch(self, request: LaunchRequest, on_log: LogSink | None, gpus: GpuHold) -> Attempt:
        """Wait for free GPUs, then run the attempt on them."""
        try:
            held = gpus.wait(request.timeout_s, stop=self._stop, prefer=request.gpu_slots, poll_s=self.poll_s,
                             note_after_s=self.gpu_wait_note_s, recheck_s=self.gpu_recheck_s)
        except OSError as exc:
            return self._not_started(request, _now(), "infra_error", _lock_problem(self.lock_dir, exc))
        gpu_wait_s = round(gpus.waited_s, 3)
        if held is None and not self._stop.is_set():
            return self._not_started(request, _now(), "infra_error",
                                     f"{gpus.busy(gpu_wait_s)}; gave up after the test's {request.timeout_s}s timeout: "
                                     f"{gpus.strays_text()} is not a nightly test (no {MARKER} in its environment) "
                                     f"and still held them {self.stray_confirm_s:g} s after it was first seen, likely a "
                                     "process that escaped a kill; end it to free the GPUs",
                                     gpu_wait_s=gpu_wait_s)
        # a signal the night noted stops it (``signal_arrived``), though it acts on it (``interrupt()``) only once
        # its wait for a finished test ends: a test dispatched just before it, whose GPUs came free since, waits
        if held is None or self._stop.is_set() or self._signal_seen is not None:
            if held is not None:
                held.release()
            return self._not_started(request, _now(), "interrupted", "the night was interrupted before it started",
                                     gpu_wait_s=gpu_wait_s)
        # the test's time starts once its GPUs are held: a wait for GPUs another night (or a leftover
        # process) holds is not the test's, and the report's timeline must not overlap it with theirs
        started_at = _now()
        inputs: tuple[int, ...] = ()
        try:
            if self.hold_inputs is not None:
                inputs = self.hold_inputs(request.test)
            return self._run(request, held, node_name(request.pool, held.node), started_at, on_log, gpu_wait_s,
                             inputs)
        finally:
            held.release()
            for fd in inputs:
                with contextlib.suppress(OSError):
                    os.close(fd)

    def _not_started(self, request: LaunchRequest, started_at: str, outcome: str, reason: str,
                     gpu_wait_s: float | None = None) -> Attempt:
        details = {"retriable": "false"}
        if gpu_wait_s is not None:
            details["gpu_wait_s"] = str(gpu_wait_s)
        return Attempt(test_id=request.test.id, outcome=outcome, elapsed_s=0.0, started_at=started_at,  # type: ignore[arg-type]
                       attempt=request.attempt, reason=reason, log_path=str(request.log_path),
                       timeout_s=request.timeout_s, details=details)

    def _run(self, request: LaunchRequest, held: gpu_slots.HeldSlots, node: str, started_at: str,
             on_log: LogSink | None, gpu_wait_s: float = 0.0, inputs: tuple[int, ...] = ()) -> Attempt:
        token = uuid.uuid4().hex
        result_path = request.log_path.with_suffix(".result.json")
        record_fields = {
            "token": token, "pid": 0, "pgid": 0, "test_id": request.test.id, "attempt": request.attempt,
            "night": request.night or self.night, "run_id": request.run_id, "log_path": str(request.log_path),
            "started_at": started_at, "timeout_s": request.timeout_s, "node": node, "gpu_slots": list(held.slots),
            # a later night kills what still holds these if this night dies (kill -9) before the attempt ends
            "lock_paths": [str(p) for p in held.paths], **owner_fields()}
        try:  # the record first: an attempt without one could vanish with a killed night
            record = write_record(self.state_dir, record_fields)
        except OSError as exc:
            return self._not_started(request, started_at, "infra_error", _state_problem(self.state_dir, exc))
        try:
            request.log_path.parent.mkdir(parents=True, exist_ok=True)
            result_path.unlink(missing_ok=True)
            # truncated, then appended to: the night's own closing lines stay at the end even while a
            # process it could not kill still writes through the pump's handle
            log = open(os.open(request.log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o666),  # noqa: SIM115
                       "wb")  # closed by the pump's CappedLog
        except OSError as exc:  # the test never started: no record may say it ran
            record.unlink(missing_ok=True)
            return self._not_started(request, started_at, "infra_error", _log_problem(request.log_path, exc))
        env = {**os.environ, **request.env, **dict(request.test.env)}
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(s) for s in held.slots)
        env.update({"NIGHTLY_TEST_ID": request.test.id, "NIGHTLY_ATTEMPT": str(request.attempt), MARKER: token,
                    "NIGHTLY_NODE_NAME": node,
                    "NIGHTLY_GPU_LOCK_FDS": ",".join(map(str, held.fds))})
        env.setdefault("PYTHONUNBUFFERED", "1")
        log.write(f"# nightly: {request.test.id} attempt {request.attempt} on {node} gpus={env['CUDA_VISIBLE_DEVICES']} "
                  f"timeout={request.timeout_s}s{f' (waited {gpu_wait_s:.0f} s for free GPUs)' if gpu_wait_s >= 1 else ''}\n"
                  .encode())
        log.flush()
        t0 = time.monotonic()
        argv = self.argv(request, result_path)
        try:
            refused = _refused_by_the_os(env, argv, dict(request.test.env))
            if refused:
                raise ValueError(refused)
            # never while an ended attempt's lock holders are scanned: between fork and exec this child holds
            # that attempt's GPU locks too (a copy of every file of the night) and would be killed as its leftover
            proc = start_process(argv, cwd=request.repo_path, env=env,
                                 stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 start_new_session=True, pass_fds=(*held.fds, *inputs))
        except (OSError, ValueError) as exc:  # this test's, not the night's: the others still run
            log.write(f"# nightly: could not start the test: {exc}\n".encode())
            log.close()
            record.unlink(missing_ok=True)
            return self._not_started(request, started_at, "infra_error", f"could not start the test: {exc}")
        output_pipe = os.fstat(proc.stdout.fileno()).st_ino  # type: ignore[union-attr]
        with contextlib.suppress(OSError):
            write_record(self.state_dir, {**record_fields, "pid": proc.pid, "pgid": proc.pid})
        with self._lock:
            self._running[token] = request.test.id
        capped = CappedLog(log, self.log_cap_bytes, on_log)
        pumping = pump(proc.stdout, capped)  # type: ignore[arg-type]
        try:
            ended, elapsed = self._wait(proc, request.timeout_s, t0)
            ended_at = time.monotonic()
            relabelled = not ended and self._stopped_with_the_night(proc, result_path, token, ended_at)
            if relabelled:
                ended = "interrupted"
            grace = self.kill_grace_s if ended else 0.0
            # named before they die: the log says what a timeout or an interrupt killed
            running = {pid: describe(pid, limit=160) for pid in marked_pids(token)} if ended else {}
            leftover = kill_attempt(token, proc.pid, grace_s=grace)
            # what escaped the marker and the group (env -i + setsid) but still holds the test's GPU locks
            holding = kill_lock_holders(held.paths)
            proc.wait()
            # what escaped the marker and the group (a clean env + start_new_session) and holds no GPU lock
            # but still writes to the test's output: it would write into the log after the attempt was judged
            writing = {pid: who for pid, who in kill_pipe_writers(output_pipe).items() if pid not in holding}
            pumping.join(timeout=PUMP_JOIN_S)
            unfinished = pumping.is_alive()  # a writer this night could neither see nor kill
            lines = []
            if ended == "timed_out":  # the framework's runner's own line, so a maintainer finds it as in CI
                lines.append(f"TIMEOUT: {request.test.path} after {request.timeout_s} seconds")
            if ended:
                what = (f"timed out after {request.timeout_s} s" if ended == "timed_out"
                        else f"interrupted {elapsed:.0f} s into the test (the night was interrupted"
                             f"{self._by_the_signal(ended_at) if relabelled else ''})")
                killed = [running.get(pid) or f"PID {pid}" for pid in leftover]
                lines.append(f"# nightly: {what}: killed {len(killed)} process(es) of the test"
                             f"{': ' + ', '.join(killed) if killed else ' (none was left)'}")
            elif leftover:
                lines.append(f"# nightly: killed {len(leftover)} process(es) the test left running: "
                             f"{', '.join(map(str, leftover))}")
            if holding:
                lines.append(f"# nightly: killed {len(holding)} process(es) still holding the test's GPU locks: "
                             f"{', '.join(holding.values())}")
            if writing:
                lines.append(f"# nightly: killed {len(writing)} process(es) still writing to the test's output after "
                             f"the test ended: {', '.join(writing.values())}")
            if unfinished:
                lines.append(f"# nightly: {_unfinished()}; the lines above may not be the test's last")
            if lines:
                with contextlib.suppress(OSError), open(request.log_path, "ab") as fh:  # the log's folder may be gone
                    fh.write("".join(f"{line}\n" for line in lines).encode())
            attempt = self._attempt(request, proc, ended, elapsed, token, result_path, capped, started_at, node,
                                    held.slots, leftover)
            attempt.details["gpu_wait_s"] = str(gpu_wait_s)
            if holding or writing:  # however the test ended: these escaped every other kill
                kept = attempt.details.get("killed_leftovers", "")
                attempt.details["killed_leftovers"] = ",".join(filter(None, [kept, *map(str, [*holding, *writing])]))
            if unfinished:
                attempt.details["log_unfinished"] = "true"
                if attempt.outcome == "passed":  # a failure it reports later would come too late
                    attempt = dataclasses.replace(attempt, outcome="failed", reason=f"{_unfinished()}, so it cannot pass")
            record.unlink(missing_ok=True)
            return attempt
        except BaseException:
            # e.g. KeyboardInterrupt in this thread: never leave the test running; its record stays,
            # so a later night's reap_orphans() still records the attempt
            kill_attempt(token, proc.pid)
            raise
        finally:
            with self._lock:
                self._running.pop(token, None)

    def _wait(self, proc: subprocess.Popen, timeout_s: float, t0: float) -> tuple[str, float]:
        """Wait for the wrapper; returns ("", elapsed), ("timed_out", ...) or ("interrupted", ...)."""
        deadline = t0 + timeout_s
        while True:
            try:
                proc.wait(timeout=max(0.0, min(0.2, deadline - time.monotonic())))
                return "", time.monotonic() - t0
            except subprocess.TimeoutExpired:
                if self._stop.is_set():
                    return "interrupted", time.monotonic() - t0
                if time.monotonic() >= deadline:
                    return "timed_out", time.monotonic() - t0

    def _stopped_with_the_night(self, proc: subprocess.Popen, result_path: Path, token: str, ended_at: float) -> bool:
        """Whether a test that ended by itself (at ``ended_at``) ended of the signal that stops its night:
        one signal to every process of the night (systemctl stop, a container's kill, kill -TERM -1) may end
        the test before the night acts on its own copy, and it is then ``interrupted``, as every other test
        the stop kills, not ``failed``. That is so when the test did not pass, did not die of SIGKILL
        (:data:`KILLED`), and the night is stopped, now or within :attr:`signal_settle_s`, by a signal that
        arrived no later than :data:`SIGNAL_WINDOW_S` after the test ended. Any such ending counts: killed
        by the signal, a handler's exception (torchrun's SignalException, exit 1), ``sys.exit(signum)``, a
        cleanup's exit. Otherwise (a failure, an OOM kill, a night stopped by an error or a signal that came
        later) it is judged as it ended. Only a test dead of a stop signal (:data:`STOP_DEATHS`) waits, up to
        :attr:`signal_settle_s`, for the night to show it stops; any other ending is judged at once, by a signal
        the night already noted as it came (:meth:`signal_arrived`): an ordinary failure never waits."""
        result = _read_result(result_path)
        passed = proc.returncode == 0 and _wrapper_finished(result, proc, token) and result.get("ok") is True
        if passed or proc.returncode in KILLED:
            return False
        if proc.returncode not in STOP_DEATHS:  # a handler's exit, a failure: the signal, if any, is noted already
            seen = self._stopped_by or self._signal_seen
            return seen is not None and seen[1] <= ended_at + SIGNAL_WINDOW_S
        if not self._stop.wait(self.signal_settle_s):
            return False
        return self._stopped_by is not None and self._stopped_by[1] <= ended_at + SIGNAL_WINDOW_S

    def _by_the_signal(self, ended_at: float) -> str:
        """How the log says that the night's signal ended the test before the night did: `` by SIGTERM,
        which reached the test too: it ended 0.1 s after the signal arrived``."""
        signum, at = self._stopped_by or self._signal_seen or (0, ended_at)
        name = signal.Signals(signum).name if signum in signal.valid_signals() else "a signal"
        when = f"{ended_at - at:.1f} s after" if ended_at >= at else f"{at - ended_at:.1f} s before"
        return f" by {name}, which reached the test too: it ended {when} the signal arrived"

    def _attempt(self, request: LaunchRequest, proc: subprocess.Popen, ended: str, elapsed: float, token: str,
                 result_path: Path, capped: CappedLog, started_at: str, node: str, slots: tuple[int, ...],
                 leftover: list[int]) -> Attempt:
        result = _read_result(result_path)
        # the wrapper's own process wrote it: not a child the test forked, nor anything else with the token
        by_wrapper = result.get("pid") == proc.pid
        finished = _wrapper_finished(result, proc, token)
        if ended == "interrupted":
            outcome, reason = "interrupted", "the night was interrupted; the test's processes were killed"
        elif ended == "timed_out":
            outcome, reason = "timed_out", f"killed after the {request.timeout_s}s timeout"
        elif proc.returncode == RESULT_NOT_WRITTEN and not finished and (lost := _result_lost(request.log_path, result_path)):
            outcome = "infra_error"  # not the test's: its verdict was lost
            reason = (f"{result_path}: the test's wrapper could not write its result there ({lost}), "
                      "so the test's outcome is unknown (its log says how it ended); make the night's logs folder "
                      "writable by this user or point NIGHTLY_HOME at a writable folder")
        elif proc.returncode == 0 and finished and result.get("ok") is True:
            outcome, reason = "passed", ""
        elif proc.returncode == 0 and finished:  # the test ended and the wrapper judged it failed
            outcome = "failed"
            reason = result.get("error") or (f"the wrapper's completion record says the test failed (exit code "
                                             f"{result.get('exit_code')}) though its process exited 0")
        elif proc.returncode == 0 and result.get("token") == token and not by_wrapper:
            outcome = "failed"
            reason = (f"the completion record was written by PID {result.get('pid', '?')}, not by the test's wrapper "
                      f"(PID {proc.pid}), so it proves nothing; the wrapper exited 0 without its own")
        elif proc.returncode == 0:
            outcome, reason = "failed", "exited before the test finished (exit code 0 without the wrapper's completion record)"
        else:
            outcome = "failed"
            reason = result.get("error") or f"exit code {proc.returncode}"
            if proc.returncode < 0:
                reason = f"killed by signal {-proc.returncode}"
        details = {k: str(v) for k, v in result.items() if k in ("execute_s", "error")}
        if leftover and not ended:
            details["killed_leftovers"] = ",".join(map(str, leftover))
        if capped.dropped:
            details["log_cut_bytes"] = str(capped.dropped)
        if outcome == "infra_error":  # the folder, not the node: another node would fare no better
            details["retriable"] = "false"
        return Attempt(test_id=request.test.id, outcome=outcome, elapsed_s=round(elapsed, 3),  # type: ignore[arg-type]
                       started_at=started_at, attempt=request.attempt, node=node, gpu_slots=slots,
                       exit_code=proc.returncode, reason=reason, log_path=str(request.log_path),
                       timeout_s=request.timeout_s, details=details)


def _wrapper_finished(result: dict, proc: subprocess.Popen, token: str) -> bool:
    """Whether the completion record says this attempt's test finished, written by the wrapper's own process
    (not a child the test forked, nor anything else with the token)."""
    return result.get("finished") is True and result.get("token") == token and result.get("pid") == proc.pid


def _unfinished() -> str:
    """What an attempt's log and reason say when its output was still open after the wait for it."""
    return (f"the test's output was still open {PUMP_JOIN_S:g} s after the test ended and its processes were "
            "killed (a process this night can neither see nor kill holds it): its log is unfinished")


def _now() -> str:
    # to the millisecond: cut to the second, a retry placed on the report's timeline up to 1 s before the
    # test whose GPUs it waited for had ended; "Z" keeps it 24 characters, as wide as history show prints
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def node_name(pool: str, node: int) -> str:
    """A local node's name, as attempts, reports and ``avoid_nodes`` say it."""
    return f"local-{pool}-{node}" if pool else f"local-{node}"


def _state_problem(state_dir: Path, exc: OSError) -> str:
    return (f"{state_dir}: the state folder is not writable ({exc.strerror or exc}); the running records "
            "live there. Make it writable by this user or point NIGHTLY_HOME at a writable folder.")


def _log_problem(log_path: Path, exc: OSError) -> str:
    return (f"{exc.filename or log_path}: cannot write the test's log ({exc.strerror or exc}), so the test was not "
            f"started. Make {log_path.parent} writable by this user or point NIGHTLY_HOME at a writable folder.")


def _why_unwritable(path: Path) -> str:
    """What is wrong with the folder of ``path``, as far as this process can tell ("" when nothing is)."""
    if not path.parent.is_dir():
        return f"its folder {path.parent} is gone"
    if not os.access(path.parent, os.W_OK):
        return f"its folder {path.parent} is not writable"
    return ""


#: how much of a log's end is searched for the wrapper's line (only launcher lines and leftovers follow it)
_LOG_END_BYTES = 64 * 1024


def _result_lost(log_path: Path, result_path: Path) -> str:
    """Why an attempt that exited 74 without a result lost it to the wrapper's failed write, or "" when
    nothing shows that it did: then the test exited 74 itself (``os._exit(74)``, a C ``exit(74)``, an
    exec'd program) and is judged by that status like any other. Evidence is the result's folder being
    gone or not writable, or the wrapper's own line in the log's end (a test that closed its stderr
    leaves only the first)."""
    why = _why_unwritable(result_path)
    if why:
        return why
    try:
        with open(log_path, "rb") as fh:
            fh.seek(max(0, fh.seek(0, os.SEEK_END) - _LOG_END_BYTES))
            end = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    said = why_result_not_written(end, str(result_path))
    return f"it said: {said}" if said else ""


def _refused_by_the_os(env: dict[str, str], argv: list[str], test_env: dict[str, str]) -> str:
    """Why the OS cannot start a process with ``env`` and ``argv`` ("" when it can): a variable name
    that is empty or holds '=' or NUL, or a NUL in a value or an argument. Popen says only "illegal
    environment variable name"; this names the variable and where it came from."""
    for name, value in env.items():
        if not name or "=" in name or "\0" in name:
            why = "a name must be non-empty without '=' or NUL"
        elif "\0" in value:
            why = "its value holds a NUL character"
        else:
            continue
        whose = ("the test's own env (its matrix entry or registration)" if name in test_env
                 else "the night's env (repos.yaml env: or --env)")
        return f"environment variable {name!r} from {whose} cannot be set: {why}"
    bad = next((arg for arg in argv if "\0" in arg), None)
    return f"argument {bad!r} holds a NUL character" if bad is not None else ""


def gpu_lock_problem(launcher: str, tests: Iterable[Test]) -> str:
    """Why a night of ``tests`` on a ``launcher`` deployment cannot lock its GPUs ("" when it can, when
    the deployment is not local, or when no test takes a GPU: a 0-GPU test takes no lock)."""
    if launcher != "local" or not any(t.gpus for t in tests):
        return ""
    return lock_dir_problem()


def lock_dir_problem(lock_dir: Path | None = None) -> str:
    """Why the host's GPU lock folder cannot take this night's locks ("" when it can; created when
    missing): checked before a local night plans, so a bad ``NIGHTLY_GPU_LOCK_DIR`` is one message
    and exit 2 (a failed Dagster run before any test), not every test an ``infra_error``."""
    lock_dir = Path(lock_dir) if lock_dir else gpu_slots.host_lock_dir()
    try:
        gpu_slots.check_dir(lock_dir)
    except OSError as exc:
        return _lock_problem(lock_dir, exc)
    return ""


def _lock_problem(lock_dir: Path, exc: OSError) -> str:
    """What is wrong with the lock folder, by cause: chmod advice only for a folder that is there."""
    there = f"every night on this host locks its GPUs there ({gpu_slots.LOCK_DIR_ENV}, default {gpu_slots.DEFAULT_LOCK_DIR})"
    blocker = next((p for p in (lock_dir, *lock_dir.parents) if p.exists() and not p.is_dir()), None)
    if blocker is not None:
        what = "is not a folder" if blocker == lock_dir else f"cannot be created: {blocker} is not a folder"
        return (f"{lock_dir}: the host's GPU lock folder {what}; {there}. Point {gpu_slots.LOCK_DIR_ENV} at a "
                "folder (one that is missing is created).")
    if not lock_dir.is_dir():
        return (f"{lock_dir}: the host's GPU lock folder cannot be created ({exc.strerror or exc}); {there}. "
                f"Create it (mode 1777) or point {gpu_slots.LOCK_DIR_ENV} at a folder every user who runs "
                "nights can write.")
    return (f"{lock_dir}: the host's GPU lock folder is not writable ({exc.strerror or exc}); {there}. Make it "
            f"writable by every user who runs nights (chmod 1777 {lock_dir}) or point {gpu_slots.LOCK_DIR_ENV} "
            "at such a folder.")


def _read_result(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
