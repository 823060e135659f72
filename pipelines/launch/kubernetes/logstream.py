"""Follow a container's log into the attempt log, masking tokens, resuming after drops.

The API server, a proxy or a load balancer may cut a ``follow`` stream at any time; the test is
still running. The follower opens the stream again and skips the lines it already wrote (line
counting: ``sinceTime`` has only second precision), so the attempt log has every line once. A
stream still open when the attempt ended, or one that could not be read to its end, leaves the
log *unfinished*: the follower says so in the log and in :attr:`LogFollower.unfinished`, and such
an attempt never passes (a failure reported in the lines it lacks would be lost), as on the local
launcher.
"""

from __future__ import annotations

import json
import re
import threading
import time

import urllib3
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from pipelines.launch.base import LogSink
from pipelines.launch.kubernetes.outcomes import MAIN_CONTAINER

#: Hugging Face tokens printed by a careless test are masked before any log is written.
_TOKEN = re.compile(r"hf_[A-Za-z0-9]{20,}")
STREAM_ERRORS = (ApiException, urllib3.exceptions.HTTPError, OSError, ValueError)


def redact(line: str) -> str:
    return _TOKEN.sub("hf_***", line)


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
        self.unfinished = ""
        #: why the last stream ended ("" while one is open, or after one that ended by itself)
        self.dropped = ""
        self._hurry = threading.Event()

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
            whole = error is None or (whole and not wrote)
            if self.closed:
                return
            if self._ended(api, name, namespace, container, error):
                if not whole:  # 404 after a drop: what the stream had not sent yet is gone with the pod
                    self.unfinish("the pod was gone before its log stream could be read to its end",
                                  f"after {self.count} lines; the lines above may not be the test's last")
                return
            if error is not None:  # a clean close before the status says terminated is only status lag
                self.note(f"# nightly: log stream dropped after {self.count} lines ({self.dropped}); resuming")
            fruitless = 0 if wrote else fruitless + 1
            if fruitless > self.max_resumes:
                self.unfinish(f"the pod's log stream could not be reopened ({self.max_resumes} tries in a row)",
                              f"after {self.count} lines; the lines above may not be the test's last")
                return
            if self._hurry.is_set():  # the attempt has ended: its last lines are wanted now
                time.sleep(self.backoff_s)
            else:
                self._hurry.wait(min(10.0, self.backoff_s * 2 ** fruitless))

    def _stream(self, api: client.CoreV1Api, name: str, namespace: str,
                container: str) -> tuple[BaseException | None, int]:
        """Follow one stream; returns the error that cut it (None: it ended) and how many lines it added."""
        seen = wrote = 0
        try:
            for line in watch.Watch().stream(api.read_namespaced_pod_log, name=name, namespace=namespace,
                                             container=container, follow=True):
                if self.closed:
                    break
                seen += 1
                if seen > self.count:  # lines before a drop were written already
                    self.write(redact(line))
                    wrote += 1
        except STREAM_ERRORS as exc:
            return exc, wrote
        return None, wrote

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

    def unfinish(self, why: str, where: str, close: bool = False) -> None:
        """Record that the log lacks lines (``why``, for the attempt's reason) and say so in it;
        ``close``: and write nothing more."""
        with self.lock:
            self.unfinished = self.unfinished or why
            if not self.closed:
                self.log.write(f"# nightly: {why}: its log is unfinished ({where})\n")
                self.log.flush()
            self.closed = self.closed or close

    def note(self, line: str) -> None:
        with self.lock:
            if not self.closed:
                self.log.write(line + "\n")
                self.log.flush()

    def write(self, line: str) -> None:
        with self.lock:
            if self.closed:
                return
            self.log.write(line + "\n")
            self.log.flush()
            self.count += 1
        if self.on_log:
            self.on_log(line)

    def join(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for the stream to end; one still open then leaves the log unfinished
        and writes nothing more."""
        self._hurry.set()
        if self.thread is not None:
            self.thread.join(timeout_s)
            if self.thread.is_alive():
                tried = f" (the last try: {self.dropped})" if self.dropped else ""
                self.unfinish(f"the pod's log stream had not ended {timeout_s:g} s after the attempt did{tried}",
                              "the lines above may not be the test's last", close=True)
        with self.lock:
            self.closed = True
