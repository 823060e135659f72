"""Follow a container's log into the attempt log, masking tokens, resuming after drops.

The API server, a proxy or a load balancer may cut a ``follow`` stream at any time; the test is
still running. The follower opens the stream again and skips the lines it already wrote (line
counting: ``sinceTime`` has only second precision), so the attempt log has every line once.
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


class LogFollower:
    """Follows a container's log once it has started; writes redacted lines to the file and ``on_log``.

    A stream that drops (a proxy timeout, an API server restart) is opened again and the lines
    already written are skipped, so the attempt log has every line once.
    """

    def __init__(self, log, on_log: LogSink | None, backoff_s: float = 0.5, max_resumes: int = 20):
        self.log, self.on_log = log, on_log
        self.backoff_s, self.max_resumes = backoff_s, max_resumes
        self.thread: threading.Thread | None = None
        self.lock = threading.Lock()
        self.closed = False
        self.count = 0

    def start(self, api: client.CoreV1Api, name: str, namespace: str, container: str = MAIN_CONTAINER) -> None:
        if self.thread is None:
            self.thread = threading.Thread(target=self._run, args=(api, name, namespace, container), daemon=True,
                                           name=f"logs:{name}")
            self.thread.start()

    def _run(self, api: client.CoreV1Api, name: str, namespace: str, container: str) -> None:
        for resume in range(self.max_resumes + 1):
            error: BaseException | None = None
            seen = 0
            try:
                for line in watch.Watch().stream(api.read_namespaced_pod_log, name=name, namespace=namespace,
                                                 container=container, follow=True):
                    seen += 1
                    if seen > self.count:  # lines before a drop were written already
                        self.count = seen
                        self.write(redact(line))
            except STREAM_ERRORS as exc:
                error = exc
            if self.closed or self._ended(api, name, namespace, container, error):
                return
            if error is not None:  # a clean close before the status says terminated is only status lag
                self.note(f"# nightly: log stream dropped after {self.count} lines ({type(error).__name__}); resuming")
            time.sleep(min(10.0, self.backoff_s * 2 ** resume))
        self.note(f"# nightly: log stream ended after {self.max_resumes} resumes")

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
        if self.on_log:
            self.on_log(line)

    def join(self, timeout_s: float) -> None:
        """Wait for the stream to end; a stream still open after ``timeout_s`` writes nothing more."""
        if self.thread is not None:
            self.thread.join(timeout_s)
        with self.lock:
            self.closed = True
