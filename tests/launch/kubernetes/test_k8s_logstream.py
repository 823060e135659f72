"""The log follower's own rules: the API server's line timestamps, and skipping by them on resume.

The lifecycle (drops, rotations, a stream that outlasts the attempt) is checked against the
stand-in API server in ``test_k8s_robustness.py``; here only what the stand-in cannot produce:
the pre-1.19 timestamp format and lines that share a timestamp.
"""

from __future__ import annotations

import io
import json

import pytest
import urllib3

from pipelines.launch.kubernetes import logstream
from pipelines.launch.kubernetes.logstream import LogFollower, split_stamp


@pytest.mark.parametrize("line, stamp, text", [
    ("2026-12-01T02:00:00.123456789Z step 1", (1796090400, 123456789), "step 1"),
    ("2026-12-01T02:00:00.1234567Z step 1", (1796090400, 123456700), "step 1"),  # RFC3339Nano before 1.19
    ("2026-12-01T02:00:00Z step 1", (1796090400, 0), "step 1"),
    ("2026-12-01T03:00:00.5+01:00 step 1", (1796090400, 500000000), "step 1"),
    ("2026-12-01T02:00:00.000000001Z ", (1796090400, 1), ""),  # an empty line
    ("2026-12-01T02:00:00.000000001Z", (1796090400, 1), ""),
    ("2026-12-01T02:00:00.000000001Z  two spaces", (1796090400, 1), " two spaces"),
    ("step 1 at 2026-12-01T02:00:00Z", None, "step 1 at 2026-12-01T02:00:00Z"),
], ids=["fixed width", "zeros trimmed", "whole second", "offset", "empty", "empty, no space", "spaces kept", "none"])
def test_the_api_servers_timestamp_is_read_and_stripped(line, stamp, text):
    assert split_stamp(line) == (stamp, text)


class _Api:
    """What the follower asks besides the stream: the container has ended."""

    def read_namespaced_pod_log(self, **kwargs):  # only named; the stream is the fake Watch's
        raise AssertionError("read through watch.Watch().stream")

    def read_namespaced_pod(self, *args, **kwargs):
        class Answer:
            data = json.dumps({"status": {"containerStatuses": [
                {"name": logstream.MAIN_CONTAINER, "state": {"terminated": {"exitCode": 0}}}]}})
        return Answer()


def test_lines_sharing_a_timestamp_are_skipped_only_as_often_as_they_were_written(monkeypatch):
    """Two lines written at the same nanosecond before the drop; the reopened stream has a third
    with that time: it is new, not one already written."""
    t = "2026-12-01T02:00:00.000000001Z"
    streams = iter([
        ([f"{t} a", f"{t} b"], urllib3.exceptions.ProtocolError("cut")),
        ([f"{t} a", f"{t} b", f"{t} c", "2026-12-01T02:00:00.000000002Z d"], None),
    ])
    seen: list[dict] = []

    class Watch:
        def stream(self, func, **kwargs):
            seen.append(kwargs)
            lines, error = next(streams)
            yield from lines
            if error is not None:
                raise error

    monkeypatch.setattr(logstream.watch, "Watch", Watch)
    log, lines = io.StringIO(), []
    follower = LogFollower(log, lines.append, backoff_s=0.01)
    follower.start(_Api(), "pod", "ns")
    follower.join(10)
    assert lines == ["a", "b", "c", "d"] and not follower.unfinished
    assert all(kw["timestamps"] is True and kw["follow"] is True for kw in seen) and len(seen) == 2
