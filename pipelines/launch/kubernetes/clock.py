"""The time limits a test pod is held to, judged every time it is looked at.

Kubernetes gives up on nothing by itself: a Pending pod waits for ever, a pod on a lost node
stays Running for minutes, and ``activeDeadlineSeconds`` counts image pulls and the pre-flight as
the test's time. So each launch path (the watch launcher and the dagster-k8s Pipes path) keeps one
PodClock per pod and asks it for a verdict as the pod changes and as time passes:
- unscheduled longer than ``pending_wait_s``: unschedulable (infra);
- scheduled but pulling its image or in the pre-flight longer than ``startup_wait_s``: infra;
- Running with Ready=False longer than ``node_lost_wait_s``: node lost (infra);
- its test container running longer than ``timeout_s``: timed out (the test's fault).
Pure: monotonic seconds in, :class:`outcomes.Verdict` out.
"""

from __future__ import annotations

from typing import Any

from pipelines.launch.kubernetes.outcomes import Verdict, classify, node_of, not_ready, test_started

#: how long a Running pod may report Ready=False (its node unreachable) before it counts as lost
NODE_LOST_WAIT_S = 300.0


class PodClock:
    """One pod's waits and its test's run time, from the moment it was created."""

    def __init__(self, created: float, *, pending_wait_s: float, startup_wait_s: float, timeout_s: float,
                 node_lost_wait_s: float = NODE_LOST_WAIT_S):
        self.created = created
        self.pending_wait_s, self.startup_wait_s = pending_wait_s, startup_wait_s
        self.node_lost_wait_s, self.timeout_s = node_lost_wait_s, timeout_s
        #: seconds the pod spent Pending (scheduling, image pull, pre-flight)
        self.pending_s = 0.0
        self._scheduled_at: float | None = None
        self._stuck_since: float | None = None
        self._test_since: float | None = None

    def ran_s(self, now: float) -> float | None:
        """Seconds the test container has run as seen here (None: it never started)."""
        return now - self._test_since if self._test_since is not None else None

    def judge(self, pod: dict[str, Any] | None, deleted: bool, now: float) -> Verdict | None:
        """The pod's verdict at ``now`` (:func:`outcomes.classify` with this pod's waits), a
        ``timed_out/test_timeout`` when its test has run past ``timeout_s``, else None."""
        phase = ((pod or {}).get("status") or {}).get("phase") or "Pending"
        if node_of(pod) and self._scheduled_at is None:
            self._scheduled_at = now
        if phase == "Pending":
            self.pending_s = now - self.created
            if self._scheduled_at is not None:  # pulling the image or in the pre-flight
                waited, limit = now - self._scheduled_at, self.startup_wait_s
            else:
                waited, limit = self.pending_s, self.pending_wait_s
        elif phase == "Running" and pod is not None and not_ready(pod):
            self._stuck_since = self._stuck_since or now
            waited, limit = now - self._stuck_since, self.node_lost_wait_s
        else:
            self._stuck_since = None
            waited, limit = 0.0, float("inf")
        if self._test_since is None and pod is not None and test_started(pod):
            self._test_since = now
        verdict = classify(pod, deleted, waited, limit)
        if verdict is None and self._test_since is not None and now - self._test_since > self.timeout_s:
            verdict = Verdict("timed_out", "test_timeout", False, node_of(pod))
        return verdict
