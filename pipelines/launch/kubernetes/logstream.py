"""Follow a container's log into the attempt log, masking tokens, resuming after drops.

The API server, a proxy or a load balancer may cut a ``follow`` stream at any time; the test is
still running. The follower opens the stream again and skips the lines it already wrote, so the
attempt log has every line once. It follows with ``timestamps=true`` (each line carries the
kubelet's time to the nanosecond, stripped before it is written) and skips by time, not by counting
lines: the kubelet rotates a container's log (10 MiB by default) and a reopened stream then
starts in the newest file, not at the log's first line. A reopened stream that no longer holds
the last line written (the lines between were rotated away), a stream still open when the
attempt ended, or one that could not be reopened leaves the log *unfinished*: the follower says
so in the log and in :attr:`LogFollower.unfinished`, and such an attempt never passes (a failure
reported in the lines it lacks would be lost), as on the local launcher. When the API or the
connection would not serve the log to its end (its last try answered 403, or 5xx from the kubelet's
proxy; or the connection broke: a reset, an incomplete chunk) the pass becomes
``infra_error/log_unreadable`` (the test's outcome is unknown, not its failure); lines lost to a
rotation stay ``failed``.
"""

from __future__ import annotations

import json
import re
import threading
import time
from datetime import datetime

import urllib3
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from pipelines.launch.base import LogSink
from pipelines.launch.kubernetes.outcomes import MAIN_CONTAINER, Verdict
from pipelines.launch.logcap import over_head_note

#: Hugging Face tokens printed by a careless test are masked before any log is written.
_TOKEN = re.compile(r"hf_[A-Za-z0-9]{20,}")
STREAM_ERRORS = (ApiException, urllib3.exceptions.HTTPError, OSError, ValueError)
#: the longest wait for a log stream still bringing lines after its pod ended (``LogFollower.join``): a slow
#: link still sending a long log is waited for; one that is never done is the connection's, not the test's
JOIN_MOST_S = 300.0
#: the timestamp the API server puts before each line with ``timestamps=true``, then one space: RFC3339
#: with nanoseconds (before Kubernetes 1.19 Go's RFC3339Nano, which drops the fraction's trailing zeros)
_STAMP = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)(?: |$)")

Stamp = tuple[int, int]  # (seconds since the epoch, nanoseconds)


def redact(line: str) -> str:
    return _TOKEN.sub("hf_***", line)


def split_stamp(line: str) -> tuple[Stamp | None, str]:
    """(the line's timestamp, the line without it); (None, line) for a line without one."""
    m = _STAMP.match(line)
    if m is None:
        return None, line
    try:
        seconds = datetime.fromisoformat(m[1] + ("+00:00" if m[3] == "Z" else m[3])).timestamp()
    except ValueError:
        return None, line
    return (int(seconds), int((m[2] or "").ljust(9, "0"))), line[m.end():]


def _why(error: BaseException) -> str:
    """A dropped stream's error in a few words: the API's status, or the connection's failure."""
    if isinstance(error, ApiException):
        return f"{error.status} {error.reason}".strip()
    return type(error).__name__


class LogFollower:
    """Follows a container's log once it has started; writes redacted lines to the file and ``on_log``.

    A stream that drops (a proxy timeout, an API server restart) is opened again and the lines
    already written are skipped, so the attempt log has every line once. ``max_resumes``: how many
    reopened streams in a row may bring no new line before the follower gives up. :meth:`join`
    stops the backoff, so a stream that dropped near the end is reopened at once, not after it.
    ``unfinished`` says why the log may lack lines ("" when it is whole).
    """

    def __init__(self, log, on_log: LogSink | None, backoff_s: float = 0.5, max_resumes: int = 20):
        self.log, self.on_log = log, on_log
        self.backoff_s, self.max_resumes = backoff_s, max_resumes
        self.thread: threading.Thread | None = None
        self.lock = threading.Lock()
        self.closed = False
        self.count = 0
        #: lines the streams brought, those a reopened stream replays (skipped) included: how :meth:`join`
        #: tells a stream still moving from one that stalled
        self.received = 0
        #: the timestamp of the last line written and how many written lines carry it: where a
        #: reopened stream picks up
        self.mark: tuple[Stamp, int] | None = None
        self.unfinished = ""
        #: the log is unfinished because the API or the connection would not serve it (an HTTP error or a
        #: broken connection on the last try), not for the test's output: a pass is then an infra error,
        #: not the test's failure
        self.unreadable = False
        #: why the last stream ended ("" while one is open, or after one that ended by itself)
        self.dropped = ""
        #: the last try failed: answered with an HTTP error (403 RBAC, 5xx from the kubelet's proxy) or cut
        #: by the connection (a reset, an incomplete chunk, a dropped proxy), and no stream since brought a line
        self._refused = False
        self._hurry = threading.Event()
        self._said_capped = False

    def start(self, api: client.CoreV1Api, name: str, namespace: str, container: str = MAIN_CONTAINER) -> None:
        if self.thread is None:
            self.thread = threading.Thread(target=self._run, args=(api, name, namespace, container), daemon=True,
                                           name=f"logs:{name}")
            self.thread.start()

    def _run(self, api: client.CoreV1Api, name: str, namespace: str, container: str) -> None:
        fruitless = 0  # reopened streams in a row that brought no new line
        whole = False  # a stream ended by itself (the container's end) and none added lines since
        while not self.closed:
            error, wrote = self._stream(api, name, namespace, container)
            self.dropped = _why(error) if error is not None else ""
            self._refused = error is not None  # an HTTP status or a broken connection alike: not the test's doing
            whole = error is None or (whole and not wrote)
            if self.closed:
                return
            if self._ended(api, name, namespace, container, error):
                if not whole:  # 404 after a drop: what the stream had not sent yet is gone with the pod
                    self.unfinish("the pod was gone before its log stream could be read to its end"
                                  f"{f' (the last try: {self.dropped})' if self._refused else ''}",
                                  f"after {self.count} lines; the lines above may not be the test's last",
                                  unreadable=self._refused)
                return
            if error is not None:  # a clean close before the status says terminated is only status lag
                self.note(f"# nightly: log stream dropped after {self.count} lines ({self.dropped}); resuming")
            fruitless = 0 if wrote else fruitless + 1
            if fruitless > self.max_resumes:
                self.unfinish(f"the pod's log stream could not be reopened ({self.max_resumes} tries in a row"
                              f"{f', the last: {self.dropped}' if self._refused else ''})",
                              f"after {self.count} lines; the lines above may not be the test's last",
                              unreadable=self._refused)
                return
            if self._hurry.is_set():  # the attempt has ended: its last lines are wanted now
                time.sleep(self.backoff_s)
            else:
                self._hurry.wait(min(10.0, self.backoff_s * 2 ** fruitless))

    def _stream(self, api: client.CoreV1Api, name: str, namespace: str,
                container: str) -> tuple[BaseException | None, int]:
        """Follow one stream; returns the error that cut it (None: it ended) and how many lines it added."""
        mark = self.mark  # None: nothing written yet, every line is new
        skipped = at_mark = wrote = 0
        try:
            for raw in watch.Watch().stream(api.read_namespaced_pod_log, name=name, namespace=namespace,
                                            container=container, follow=True, timestamps=True):
                if self.closed:
                    break
                self.received += 1
                stamp, line = split_stamp(raw)
                if mark is not None and stamp is not None:
                    if stamp < mark[0] or (stamp == mark[0] and at_mark < mark[1]):
                        skipped += 1  # written before the drop
                        if stamp == mark[0]:
                            at_mark += 1
                        continue
                    if not skipped:  # the stream starts after the last line written
                        self._lost()
                    mark = None
                self.write(redact(line), stamp)
                self._refused = False  # the log is served again
                wrote += 1
        except STREAM_ERRORS as exc:
            return exc, wrote
        if mark is not None and not skipped and not wrote:
            # a stream replays the container's log file: one without the lines written is a newer file,
            # whose every line is new to the next stream
            self._lost()
            with self.lock:
                self.mark = None
        return None, wrote

    def _lost(self) -> None:
        self.unfinish("the pod's log stream, opened again after a drop, no longer held the last line written "
                      "(the kubelet rotated the container's log meanwhile), so lines may be lost",
                      f"after {self.count} lines; lines may be missing here")

    def _ended(self, api: client.CoreV1Api, name: str, namespace: str, container: str,
               error: BaseException | None) -> bool:
        """The log is complete: the pod is gone, or the stream ended cleanly after the container did."""
        try:
            pod = api.read_namespaced_pod(name, namespace, _preload_content=False)
        except ApiException as exc:
            return exc.status == 404
        except STREAM_ERRORS:
            return False
        state = next((s.get("state") or {} for s in (json.loads(pod.data).get("status") or {}).get("containerStatuses") or []
                      if s.get("name") == container), {})
        return error is None and "terminated" in state

    def unfinish(self, why: str, where: str, close: bool = False, unreadable: bool = False) -> None:
        """Record that the log lacks lines (``why``, for the attempt's reason) and say so in it;
        ``close``: and write nothing more; ``unreadable``: because the API refused to serve it."""
        with self.lock:
            if not self.unfinished:
                self.unreadable = unreadable
            self.unfinished = self.unfinished or why
            if not self.closed:
                self.log.write(f"# nightly: {why}: its log is unfinished ({where})\n")
                self.log.flush()
            self.closed = self.closed or close

    def judge(self, verdict: Verdict, message: str) -> tuple[Verdict, str]:
        """The verdict and its message once the log is known whole or not: a pass needs the whole log (a
        failure the test reported in the lines it lacks would be lost), as on the local launcher. Without
        it the pass is ``failed``, or ``infra_error/log_unreadable`` (retriable) when the API or the connection
        would not serve the log."""
        if not self.unfinished or verdict.outcome != "passed":
            return verdict, message
        if self.unreadable:  # the API's doing, not the test's: its outcome is unknown, worth another try
            unknown = Verdict("infra_error", "log_unreadable", True, verdict.node)
            return unknown, (f"{self.unfinished}: its log is unfinished, so the test's outcome is unknown "
                             f"({message})")
        failed = Verdict("failed", f"{self.unfinished}: its log is unfinished, so it cannot pass", False, verdict.node)
        return failed, f"{failed.reason} ({message})"

    def note(self, line: str) -> None:
        with self.lock:
            if not self.closed:
                self.log.write(line + "\n")
                self.log.flush()

    def write(self, line: str, stamp: Stamp | None = None) -> None:
        with self.lock:
            if self.closed:
                return
            self.log.write(line + "\n")
            self.log.flush()
            self.count += 1
            if stamp is not None:
                self.mark = (stamp, self.mark[1] + 1 if self.mark and self.mark[0] == stamp else 1)
            # a capped log (logcap.CappedText) past its head: the UI gets one line saying so, as locally
            streaming = getattr(self.log, "streaming", True)
            said, self._said_capped = self._said_capped, self._said_capped or not streaming
        if self.on_log:
            if streaming:
                self.on_log(line)
            elif not said:
                self.on_log(over_head_note(self.log.cap))

    def join(self, timeout_s: float, most_s: float | None = None) -> None:
        """Wait for the stream to end: up to ``timeout_s`` while it brings no line, for as long as it does
        (a slow link to the kubelet still sending a long log, or replaying the lines written before a drop)
        up to ``most_s`` in all (:data:`JOIN_MOST_S`).
        One still open then leaves the log unfinished and writes nothing more. The container has ended, so
        a stream that neither ends nor brings lines is the API's or the connection's doing (a proxy keeping
        it open), never the test's: its outcome is unknown (``unreadable``), not its failure."""
        self._hurry.set()
        if self.thread is not None:
            started = time.monotonic()
            deadline = started + (JOIN_MOST_S if most_s is None else most_s)
            extended = False  # lines came during the wait (``flowing``: during its last round)
            while True:
                seen = self.received
                self.thread.join(max(0.0, min(timeout_s, deadline - time.monotonic())))
                flowing = self.received != seen
                if not self.thread.is_alive() or not flowing or time.monotonic() >= deadline:
                    break
                extended = True
            if self.thread.is_alive():
                tried = f" (the last try: {self.dropped})" if self.dropped else ""
                waited = time.monotonic() - started
                why = (f"was still bringing lines {waited:.0f} s after the attempt ended" if flowing
                       else f"had not ended {timeout_s:g} s after its last line ({waited:.0f} s after the attempt did)"
                       if extended else f"had not ended {timeout_s:g} s after the attempt did")
                self.unfinish(f"the pod's log stream {why}{tried}",
                              "the lines above may not be the test's last", close=True, unreadable=True)
        with self.lock:
            self.closed = True
