"""Dynamic dispatch: start tests in plan priority as soon as enough GPUs free up.

The choice of what starts next is the pure ``DispatchQueue`` of the planner; this module only
adds threads, the launcher calls, retries on another node (infra errors, and failures on a node
found bad) and progress callbacks. A
launcher never decides what runs next; this loop never decides how a test is launched.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from pipelines.core.health import retries_due
from pipelines.core.model import Assignment, Attempt, Plan, Pool
from pipelines.core.plan import DispatchQueue
from pipelines.launch.base import Launcher, LaunchRequest, LogSink, judge_reported_configs

RequestFactory = Callable[[Assignment, int, tuple[int, ...], int, tuple[str, ...]], LaunchRequest]


@dataclass
class DispatchResult:
    """Every attempt of the night, in finishing order, and the measured makespan."""

    attempts: list[Attempt] = field(default_factory=list)
    makespan_s: float = 0.0
    started_at: float = 0.0

    def final(self) -> dict[str, Attempt]:
        """The last attempt of each test (the one that decides its outcome)."""
        out: dict[str, Attempt] = {}
        for a in self.attempts:
            out[a.test_id] = a
        return out


def run_plan(
    plan: Plan,
    pools: Sequence[Pool],
    launcher: Launcher,
    make_request: RequestFactory,
    *,
    max_infra_retries: int = 0,
    on_start: Callable[[LaunchRequest], None] | None = None,
    on_finish: Callable[[Attempt], None] | None = None,
    on_log: Callable[[str], LogSink | None] | None = None,
    avoid_nodes: Callable[[], tuple[str, ...]] | None = None,
    stop: threading.Event | None = None,
) -> DispatchResult:
    """Run every assignment of ``plan``; returns when all have finished.

    Infra errors (lost node, unusable GPU, eviction) are retried up to ``max_infra_retries``
    times, avoiding the nodes they failed on and every node ``avoid_nodes()`` names at that
    moment; infra errors a launcher marks ``retriable=false`` (unschedulable, config errors:
    another node would not help) are final. A test failure or timeout is final unless it
    happened on a node ``avoid_nodes()`` names (found bad, or suspect, at any time later in the
    night): then the test gets one retry elsewhere (``details["retry_of"]``: the node it left),
    whose outcome is the test's; the retry goes back into the queue first in priority and starts
    on GPUs freed on another node, so the pool is never oversubscribed; not in a one-node pool, where there is no elsewhere. Once ``stop`` is
    set (the run was interrupted) nothing new starts and no retry is made; running attempts end
    as their launcher ends them (``interrupt()`` kills them) and are still returned.
    """
    stop = stop or threading.Event()
    queue = DispatchQueue(plan, pools, clock=time.monotonic)  # live: predicted ends follow reality
    result = DispatchResult(started_at=time.monotonic())
    finished = threading.Condition()
    done_ids: list[str] = []
    errors: list[BaseException] = []
    threads: list[threading.Thread] = []
    placed: dict[str, tuple[Assignment, int, tuple[int, ...]]] = {}
    retried: set[str] = set()
    requeued: dict[str, tuple[int, str]] = {}  # test -> (attempt number, node name it left)
    nodes_of = {p.name: p.nodes for p in pools}

    def worker(a: Assignment, node: int, slots: tuple[int, ...], attempt_no: int = 1,
               failed_nodes: tuple[str, ...] = ()) -> None:
        first = attempt_no
        try:
            while True:
                avoid = tuple(dict.fromkeys((*failed_nodes, *(avoid_nodes() if avoid_nodes else ()))))
                req = make_request(a, node, slots, attempt_no, avoid)
                if on_start:
                    on_start(req)
                # a pass whose log reports a failed configuration fails
                attempt = judge_reported_configs(launcher.launch(req, on_log(a.test_id) if on_log else None))
                attempt.details.setdefault("pool", a.pool)  # bad nodes are judged within their pool
                if first > 1 and attempt_no == first:  # the retry of a failure on a node found bad
                    attempt.details["retry_of"] = failed_nodes[-1]
                with finished:
                    result.attempts.append(attempt)
                if on_finish:
                    on_finish(attempt)
                retriable = attempt.details.get("retriable", "true") != "false"
                if (attempt.outcome != "infra_error" or not retriable or attempt_no - first >= max_infra_retries
                        or stop.is_set()):
                    break
                attempt_no += 1
                failed_nodes = (*failed_nodes, attempt.node) if attempt.node else failed_nodes
        except BaseException as exc:  # surface launcher bugs instead of hanging the night
            with finished:
                errors.append(exc)
        finally:
            with finished:
                done_ids.append(a.test_id)
                finished.notify_all()

    def start(*args) -> None:
        t = threading.Thread(target=worker, args=args, name=f"test:{args[0].test_id}", daemon=True)
        threads.append(t)
        t.start()

    def requeue_retries() -> None:
        """One retry elsewhere for each failure on a node tonight's attempts now say to avoid: back
        into the queue, first in priority, so it starts on GPUs freed on another node (the ones the
        failure ran on are already released and may be another test's)."""
        avoid = avoid_nodes() if avoid_nodes and not stop.is_set() else ()
        for failed in retries_due(result.attempts, avoid, retried) if avoid else ():
            if failed.test_id in running:  # its worker has not ended yet: next round
                continue
            retried.add(failed.test_id)
            a, node, _ = placed[failed.test_id]
            if nodes_of.get(a.pool, 0) > 1:  # a one-node pool has nowhere else to go: the failure stands
                requeued[a.test_id] = (failed.attempt + 1, failed.node)
                queue.requeue(a, node)

    running: set[str] = set()
    with finished:
        while not queue.done() and not errors and not stop.is_set():
            for a, node, slots in queue.start_ready():
                placed[a.test_id] = (a, node, slots)
                running.add(a.test_id)
                attempt_no, left = requeued.pop(a.test_id, (1, ""))
                start(a, node, slots, attempt_no, (left,) if left else ())
            while not done_ids and not errors and not stop.is_set():
                finished.wait(timeout=0.5)
            for test_id in done_ids:
                queue.finish(test_id)
                running.discard(test_id)
            done_ids.clear()
            requeue_retries()
    # after an error no new test starts, but the running ones finish (each has its timeout):
    # returning early would leave their processes or pods behind
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    result.makespan_s = round(time.monotonic() - result.started_at, 3)
    return result
