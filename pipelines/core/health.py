"""Bad GPU nodes, found from one night's attempts (and, where the caller has it, recent history).

The real case: one H200 host returned CUDA "Error 802" and failed 12 of 12 tests that passed on
another host; nothing pointed at the host. Every node is judged against the night's other nodes:

- *infra*: the node's attempts end in node-attributable infra errors (GPU not usable, node lost,
  shutdown, eviction, a container runtime that could not start a container). One "GPU not usable" is enough (the pre-flight proved it); others need
  ``min_infra`` hits.
- *suspect*: the node's failure rate stands far above the other nodes' (``min_rate``, ``min_gap``)
  on at least ``min_tests`` *different* tests that did not also fail on another node tonight (a
  test failing everywhere is the test's). The rates count first attempts only (a retry is a test
  that already failed) and leave out the tests failing on another node too. A suspect is not
  named: it is avoided, and the night retries its failures elsewhere (``retries_due``) to learn
  which it is; a node retried from stays suspect, however the rates move, while ``min_tests`` of
  its failures are not repeated elsewhere.
- *failure_rate*: a suspect whose tests are fine: ``min_tests`` of them passed on another node
  tonight (a retry), or passed on another node in their recent history (``passed_nodes``).
- *contrast*: a suspect whose contrast alone is overwhelming: ``contrast_tests`` different tests
  failed there while the other nodes ran ``contrast_rest`` attempts with at most
  ``contrast_rest_rate`` failing, counted as the rates count them (12 of 12 against 0 of 23).
- Both name a suspect only when its failures are improbable for a healthy node: a flaky test's
  retry passes elsewhere too, so two flaky tests failing on one node of a handful of attempts
  there named healthy nodes. Of the pool's F rated failures tonight a healthy node takes each with
  its share of the rated attempts: P(Binomial(F, share) >= its failures), times the pool's node
  count, at most ``tonight_named_chance`` (the binomial, as the cross-night rule: its tail is
  heavier than the hypergeometric's, so it names less readily). Otherwise it stays a suspect.
- *history*: a node that fails one test a night is never named within a night, and its victims
  looked flaky (a flip each, node against no node). Across the recent runs (``passed_nodes``'
  window) and tonight: ``history_tests`` different tests failed on it in ``history_nights``
  different runs, each a test that failed on no other node in them (failures spread over several
  nodes are the test's) and passed on another node (recently or tonight), and no other node of its
  pool had more than a ``history_ratio``-th as many such tests. Judged only on a night it failed so.

The rates also leave out a broken test (one that failed in each of its last ``broken_runs`` runs
and passed in none, not even on a retry) and a quarantined one (``unreliable``): their failure is
their own on any node; counted, a broken test failing on the healthy node hid the broken one.

A ``failure_rate`` or ``contrast`` finding shows the counts and tests the rules judged (the rates'
attempts, the tests blamed on the node) and names what the rates left out; counting every attempt
showed "3 of 3" for a node judged on 2 of 2, and listed a test failing on every node among its tests.
An ``infra`` finding, judged on its infra errors alone, counts every attempt.

Nodes are compared only with nodes of their own pool (a test's pool: the caller's ``pools`` map,
else the ``details["pool"]`` the dispatcher stamps): a hardware-specific regression fails every
test of a one-node mi300 pool without the h200 nodes passing theirs saying anything about it. A
node with no other node of its pool tonight is never named by ``failure_rate`` or ``contrast``
(only by ``infra``), and history counts passes only on other nodes of its pool seen tonight (a
replaced node's old passes say nothing about the one there now).

Guards: one broken test failing three times on a node is one test, never a node; a night where
everything fails everywhere has no gap; failures the retry repeats elsewhere clear the node.
The findings carry the evidence text the night report prints; the dispatcher passes their nodes
(and the suspects) as ``avoid_nodes`` to later attempts.
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from pipelines.core.model import Attempt, Sample

#: Infra reasons that point at the node the attempt ran on (the launchers' Attempt.reason values).
NODE_FAULTS = frozenset({"gpu_unusable", "node_lost", "node_shutdown", "evicted",
                         "start_error"})  # the node's container runtime could not start a container
#: One of these alone proves the node bad.
HARD_FAULTS = frozenset({"gpu_unusable"})
#: Outcomes a retry on another node may turn around.
RETRIABLE = ("failed", "timed_out")


@dataclass(frozen=True)
class NodeFinding:
    """A node the night should stop using, and why."""

    node: str
    rule: str  # "infra", "failure_rate", "contrast" or "history"; a suspect's: "suspect", "history_suspect"
    failed: int
    total: int
    rest_failed: int
    rest_total: int
    tests: tuple[str, ...]
    evidence: str

    @property
    def summary(self) -> str:
        return f"bad node {self.node}: {self.evidence}"


@dataclass(frozen=True)
class Thresholds:
    """When a node is suspect, and when it is bad (defaults: see the module's docstring)."""

    min_infra: int = 2
    min_attempts: int = 2
    min_rate: float = 0.5
    min_gap: float = 0.5
    min_tests: int = 2
    contrast_tests: int = 3
    contrast_rest: int = 10
    contrast_rest_rate: float = 0.1
    #: a test that failed in each of its last ``broken_runs`` runs or more (passing in none, not even
    #: on a retry) is broken: its failures count in no node's failure rate
    broken_runs: int = 3
    #: the cross-night rule (``history``): at least ``history_tests`` different tests failed on the node
    #: (each failing on no other node and passing on another) in at least ``history_nights`` different
    #: runs (tonight's included) of the recent ones ...
    history_tests: int = 3
    history_nights: int = 3
    #: ... and so many of the pool's such failures landed on it that a healthy node (taking each with
    #: its share of the pool's attempts) would draw as many at most this often, times the pool's node
    #: count: the chance that a healthy node of the pool is named, per night it is judged. A pool is
    #: judged night after night on overlapping windows, so the chance over a month is some ten times
    #: this: at 1 in 100 a healthy node was named in 12-24 % of simulated fleets of flaky tests placed at
    #: random over 30 nights (2-8 nodes); 1 in 1,000 keeps that near 1-2 %
    history_named_chance: float = 0.001
    #: as likely as this or less (times the node count, ``history_tests`` tests): a cross-night suspect,
    #: avoided and retried from, its quarantined tests' failures not excused, but not named bad (at 1 in
    #: 5 most small fleets of flaky tests had a suspect some night, and their quarantines excused nothing)
    history_suspect_chance: float = 0.05
    #: the one-night rules (``failure_rate``, ``contrast``) name a suspect only when so many of the pool's
    #: rated failures tonight landed on it that a healthy node (taking each with its share of the pool's
    #: rated attempts) would draw as many at most this often, times the pool's node count. A flaky test
    #: fails on any node: two failing on one node of a handful of attempts there, their retries passing
    #: elsewhere, named a healthy node in most simulated fleets of flaky tests over 30 nights; the night
    #: is judged after every attempt, night after night, hence 1 in 1,000 (``bench/nodes.py``, table 1)
    tonight_named_chance: float = 0.001


def _failed(a: Attempt) -> bool:
    return a.outcome in RETRIABLE or (a.outcome == "infra_error" and a.reason in NODE_FAULTS)


@dataclass(frozen=True)
class RunFailures:
    """What the cross-night rule keeps of one earlier run: its failures and the nodes it ran on."""

    run_id: str
    #: (test, node) of each failed or timed-out attempt that ran on a node
    failures: tuple[tuple[str, str], ...]
    #: node -> attempts there (skips left out)
    attempts: Mapping[str, int]
    #: node -> the hardware its samples ran on (a sample's hardware stands for its pool)
    hardware: Mapping[str, str]


def _run_failures(run_id: str, samples: Iterable[Sample]) -> RunFailures:
    failures, attempts, hardware = [], defaultdict(int), {}
    for s in samples:
        if not s.node or s.outcome == "skipped":
            continue
        attempts[s.node] += 1
        if s.hardware:
            hardware[s.node] = s.hardware
        if s.outcome in RETRIABLE:
            failures.append((s.test_id, s.node))
    return RunFailures(run_id, tuple(failures), dict(attempts), hardware)


class NodeHistory(dict):
    """:func:`passed_nodes`' answer: per test, the nodes it passed on in its recent runs (a plain
    mapping, as it always was), and what else the recent runs say about nodes and tests:

    - ``runs``: the newest runs' failures, oldest first (:class:`RunFailures`): a node that fails
      one test a night is only seen across nights (the ``history`` rule);
    - ``unpassed``: test -> how many of its recent runs it failed, for a test that passed in none of
      them (not even on a retry): one failing in each of its last ``broken_runs`` runs is broken,
      and its failure says nothing of the node it ran on;
    - ``unreliable``: tests the caller knows say nothing of a node (the quarantined: a flaky
      test's failure is its own), left out of the node failure rates like the broken ones.
    """

    def __init__(self, passed: Mapping[str, frozenset[str]] | None = None, runs: Iterable[RunFailures] = (),
                 unpassed: Mapping[str, int] | None = None, unreliable: Iterable[str] = ()):
        super().__init__(passed or {})
        self.runs = tuple(runs)
        self.unpassed = dict(unpassed or {})
        self.unreliable = frozenset(unreliable)


def leave_out(history: Mapping[str, Collection[str]] | None, tests: Iterable[str]) -> NodeHistory:
    """``history`` with ``tests`` (the night's quarantined tests) left out of the node failure rates."""
    h = as_node_history(history)
    return NodeHistory(h, h.runs, h.unpassed, h.unreliable | frozenset(tests))


def as_node_history(history: Mapping[str, Collection[str]] | None) -> NodeHistory:
    """A plain ``passed_nodes`` mapping (or None) as a :class:`NodeHistory` that knows nothing more."""
    if isinstance(history, NodeHistory):
        return history
    return NodeHistory({t: frozenset(ns) for t, ns in (history or {}).items()})


def passed_nodes(history: Iterable[Sample], runs: int = 14, exclude_run: str = "") -> NodeHistory:
    """Per test, the nodes it passed on in its newest ``runs`` runs of ``history`` (``exclude_run``:
    tonight's, whose attempts are judged as such): the "its recent history says it passes" evidence.
    Also the failures of the newest ``runs`` runs of all, and the tests that passed in none of
    their newest runs (:class:`NodeHistory`)."""
    by_run: dict[str, dict[str, tuple[str, set[str], bool, bool]]] = defaultdict(dict)
    samples: dict[str, list[Sample]] = defaultdict(list)
    newest: dict[str, str] = {}
    for s in history:
        if s.run_id == exclude_run:
            continue
        when, nodes, passed, failed = by_run[s.test_id].get(s.run_id, ("", set(), False, False))
        if s.outcome == "passed" and s.node:
            nodes.add(s.node)
        by_run[s.test_id][s.run_id] = (max(when, s.started_at), nodes, passed or s.outcome == "passed",
                                       failed or s.outcome in RETRIABLE)
        samples[s.run_id].append(s)
        newest[s.run_id] = max(newest.get(s.run_id, ""), s.started_at)
    out, unpassed = {}, {}
    for test_id, per_run in by_run.items():
        kept = sorted(per_run.values(), key=lambda x: x[0])[-runs:]
        nodes = frozenset(n for _, ns, *_ in kept for n in ns)
        if nodes:
            out[test_id] = nodes
        if not any(passed for _, _, passed, _ in kept) and any(failed for *_, failed in kept):
            unpassed[test_id] = sum(1 for *_, failed in kept if failed)
    window = sorted(samples, key=lambda r: newest[r])[-runs:]
    return NodeHistory(out, [_run_failures(r, samples[r]) for r in window], unpassed)


class RecentPasses:
    """:func:`passed_nodes` kept up to date run by run, for a replay of the whole history.

    Replaying years of nights asked ``passed_nodes`` of every earlier run again at each run: time
    grew with the square of the history (3 minutes at 1,000 nights of 100 tests). Each test keeps
    only its newest ``runs`` runs here (a heap on the run's newest start, ties to the run added
    later, as ``passed_nodes``' stable sort has them), and so does the window of runs whose
    failures the cross-night rule reads, so adding a run costs its own samples and asking costs
    the tests' kept runs. Runs must be added whole, in the order ``passed_nodes`` would meet them
    in its ``history``."""

    def __init__(self, runs: int = 14):
        self._runs = runs
        self._added = 0
        self._newest: dict[str, list[tuple[str, int, frozenset[str], bool, bool]]] = {}
        self._window: list[tuple[str, int, RunFailures]] = []

    def _keep(self, heap: list, entry: tuple) -> None:
        if len(heap) < self._runs or self._runs <= 0:  # 0: every run, as passed_nodes' [-0:]
            heapq.heappush(heap, entry)
        elif entry[:2] > heap[0][:2]:
            heapq.heapreplace(heap, entry)

    def add_run(self, samples: Iterable[Sample]) -> None:
        """One run's samples (every test of it), after every run added before."""
        samples = list(samples)
        mine: dict[str, tuple[str, set[str], bool, bool]] = {}
        for s in samples:
            when, nodes, passed, failed = mine.get(s.test_id, ("", set(), False, False))
            if s.outcome == "passed" and s.node:
                nodes.add(s.node)
            mine[s.test_id] = (max(when, s.started_at), nodes, passed or s.outcome == "passed",
                               failed or s.outcome in RETRIABLE)
        self._added += 1
        for test_id, (when, nodes, passed, failed) in mine.items():
            self._keep(self._newest.setdefault(test_id, []), (when, self._added, frozenset(nodes), passed, failed))
        if samples:
            when = max(s.started_at for s in samples)
            self._keep(self._window, (when, self._added, _run_failures(samples[0].run_id, samples)))

    def failing_nodes(self) -> set[str]:
        """The nodes with a failure in the window of runs (cheap: the replay's quick check)."""
        return {n for *_, run in self._window for _, n in run.failures}

    def nodes(self) -> NodeHistory:
        """As ``passed_nodes`` of every run added so far."""
        out, unpassed = {}, {}
        for test_id, heap in self._newest.items():
            nodes = frozenset(n for _, _, ns, *_ in heap for n in ns)
            if nodes:
                out[test_id] = nodes
            if not any(passed for *_, passed, _ in heap) and any(failed for *_, failed in heap):
                unpassed[test_id] = sum(1 for *_, failed in heap if failed)
        return NodeHistory(out, [run for *_, run in sorted(self._window, key=lambda e: e[:2])], unpassed)


def detect_bad_nodes(attempts: Sequence[Attempt], *, history: Mapping[str, Collection[str]] | None = None,
                     pools: Mapping[str, str] | None = None, limits: Thresholds = Thresholds(),
                     unreliable: Collection[str] = ()) -> list[NodeFinding]:
    """Nodes whose attempts this night say the node, not the tests, is broken (worst first).

    ``history``: ``passed_nodes(...)`` of the runs before this one, where the caller has them;
    ``pools``: each test's pool (see ``pool_of``); ``unreliable``: tests left out of the failure
    rates (the quarantined)."""
    return assess_nodes(attempts, history=history, pools=pools, limits=limits, unreliable=unreliable)[0]


def suspect_nodes(attempts: Sequence[Attempt], *, history: Mapping[str, Collection[str]] | None = None,
                  pools: Mapping[str, str] | None = None, limits: Thresholds = Thresholds(),
                  unreliable: Collection[str] = ()) -> tuple[str, ...]:
    """Nodes failing far more than the others tonight without the evidence yet to name them."""
    return assess_nodes(attempts, history=history, pools=pools, limits=limits, unreliable=unreliable)[1]


def pool_of(a: Attempt, pools: Mapping[str, str] | None = None) -> str:
    """The pool the attempt ran in: ``pools[test]`` where the caller knows it, else what the
    dispatcher stamped in ``details["pool"]``; "" (one pool for all) when neither says."""
    return (pools or {}).get(a.test_id) or a.details.get("pool", "")


def assess_nodes(attempts: Sequence[Attempt], *, history: Mapping[str, Collection[str]] | None = None,
                 pools: Mapping[str, str] | None = None, limits: Thresholds = Thresholds(),
                 unreliable: Collection[str] = ()) -> tuple[list[NodeFinding], tuple[str, ...]]:
    """(bad nodes, worst first; suspects that are not bad), from the night's attempts so far.
    ``pools``: test id -> pool; a node is judged against the other nodes of its pool only.
    ``unreliable``: tests whose failures say nothing of a node (the quarantined), besides those
    ``history`` knows (:class:`NodeHistory`: its ``unreliable``, and the broken tests)."""
    findings, suspects = judge_nodes(attempts, history=history, pools=pools, limits=limits, unreliable=unreliable)
    return findings, tuple(f.node for f in suspects)


def judge_nodes(attempts: Sequence[Attempt], *, history: Mapping[str, Collection[str]] | None = None,
                pools: Mapping[str, str] | None = None, limits: Thresholds = Thresholds(),
                unreliable: Collection[str] = ()) -> tuple[list[NodeFinding], list[NodeFinding]]:
    """As :func:`assess_nodes`, with each suspect's evidence (rule ``suspect``: tonight's rates;
    ``history_suspect``: across nights): what the night acted on when it avoided the node."""
    hist = as_node_history(history)
    broken = frozenset(t for t, n in hist.unpassed.items() if n >= limits.broken_runs)
    quarantined = (hist.unreliable | frozenset(unreliable)) - broken
    by_node: dict[str, list[Attempt]] = defaultdict(list)
    node_pool: dict[str, str] = {}
    passed_on: dict[str, set[str]] = defaultdict(set)
    failed_on: dict[str, set[str]] = defaultdict(set)
    for a in attempts:
        if not a.node or a.outcome == "skipped":
            continue
        by_node[a.node].append(a)
        node_pool.setdefault(a.node, pool_of(a, pools))
        if a.outcome == "passed":
            passed_on[a.test_id].add(a.node)
        elif a.outcome in RETRIABLE:
            failed_on[a.test_id].add(a.node)
    retry_of = _retries(attempts)

    def own(test_id: str, node: str) -> bool:
        """The test's failure on ``node`` is its own: it failed on another node too and passed on none."""
        return bool(failed_on[test_id] - {node} and not passed_on[test_id] - {node})

    def rated(xs: list[Attempt]) -> list[Attempt]:
        """The attempts a failure rate counts: no retries (tests that already failed once), no test
        failing there that is failing elsewhere too (the test's, the same on every node), and no
        broken or quarantined test (its failure is its own wherever it runs)."""
        return [a for a in xs if not retry_of[id(a)] and a.test_id not in broken and a.test_id not in quarantined
                and not (a.node in failed_on[a.test_id] and own(a.test_id, a.node))]

    lone = _lone_failures(attempts, hist, passed_on, broken)

    findings: list[NodeFinding] = []
    suspects: list[NodeFinding] = []
    for node, mine in sorted(by_node.items()):
        peers = {n for n, p in node_pool.items() if p == node_pool[node]} - {node}
        rest = [a for n in sorted(peers) for a in by_node[n]]
        failed = [a for a in mine if _failed(a)]
        infra = _infra(node, mine, failed, rest, limits)
        if infra is not None:
            findings.append(infra)
            continue
        # a test that failed on another node tonight too, and passed on none, is the test's own doing;
        # a broken or quarantined test's failure is its own wherever it runs
        blamed = [a for a in failed if a.outcome in RETRIABLE and not own(a.test_id, node)
                  and a.test_id not in broken and a.test_id not in quarantined]
        # once the night retried this node's failures elsewhere it had been suspect: it stays so while
        # min_tests of its failures are not repeated elsewhere, however the rates have moved since
        retried = any(retry_of[id(a)] == node for n in peers for a in by_node[n])
        counted, counted_rest = rated(mine), rated(rest)
        suspect = (_suspect(counted, blamed, counted_rest, limits)
                   or (retried and len(_distinct(blamed)) >= limits.min_tests))
        finding = None
        if suspect:
            # the finding shows the counts and tests the rules judged, and says what they left out
            kept = {id(a) for a in (*counted, *counted_rest)}
            left = [a for a in (*mine, *rest) if id(a) not in kept]
            retries = sum(1 for a in left if retry_of[id(a)])
            firsts = [a for a in left if not retry_of[id(a)]]
            left_out = _left_out(retries, _distinct(a for a in firsts if a.test_id in broken),
                                 _distinct(a for a in firsts if a.test_id in quarantined and a.test_id not in broken),
                                 _distinct(a for a in firsts if a.test_id not in broken and a.test_id not in quarantined))
            base = dict(node=node, failed=sum(1 for a in counted if _failed(a)), total=len(counted),
                        rest_failed=sum(1 for a in counted_rest if _failed(a)), rest_total=len(counted_rest),
                        tests=tuple(_distinct(blamed)))
            # named only when a healthy node would rarely draw so many of the pool's rated failures
            one = (_tail(base["failed"] + base["rest_failed"], base["failed"],
                         len(counted) / (len(counted) + len(counted_rest))) if counted and counted_rest else 1.0)
            # for any of the pool's nodes; a chance, so at most 1 (with tonight_named_chance 1 every suspect is
            # judged, as before the chance)
            chance = min(1.0, one * (len(peers) + 1))
            odds = _odds(base, one, chance, len(peers) + 1, limits)
            finding = (_judged(node, peers, blamed, base, left_out, odds, passed_on, hist, limits)
                       if chance <= limits.tonight_named_chance else None)
            if finding is None:
                held = NodeFinding(rule="suspect", evidence=(
                    f"{base['failed']} of {base['total']} attempts failed here (other nodes: {base['rest_failed']} "
                    f"of {base['rest_total']}{left_out}); {odds}; not yet named: its failures are retried "
                    f"elsewhere; {_examples(blamed)}"), **base)
        cross = _across_nights(node, peers, lone, hist, by_node, limits) if finding is None and peers else None
        if cross is not None and cross[1]:
            finding = cross[0]
        if finding is not None:
            findings.append(finding)
        elif suspect:
            suspects.append(held)
        elif cross is not None:
            suspects.append(cross[0])
    return sorted(findings, key=lambda f: (-f.failed, f.node)), suspects


def _lone_failures(attempts: Sequence[Attempt], hist: NodeHistory, passed_on: Mapping[str, set[str]],
                   broken: Collection[str]) -> dict[str, list[tuple[str, str, bool]]]:
    """Node -> (run id, "" for tonight; test; whether the test passed on another node, recently or
    tonight) of each failure there, in the recent runs and tonight, of a test that failed on no
    other node in them: what the cross-night rule counts. A test whose failures spread over several
    nodes is the test's, on every node; a broken test's failures are its own. Only the failures of
    tests that passed elsewhere can name the node (and are laid at it), but every lone failure
    counts in the pool's tally: counting only those would count, on a pool whose tests stay on
    their node, just the failures of the tests a suspicion already moved elsewhere."""
    fails = [(r.run_id, t, n) for r in hist.runs for t, n in r.failures]
    fails += [("", a.test_id, a.node) for a in attempts if a.node and a.outcome in RETRIABLE]
    where: dict[str, set[str]] = defaultdict(set)
    for _, t, n in fails:
        where[t].add(n)
    out: dict[str, list[tuple[str, str, bool]]] = defaultdict(list)
    for r, t, n in fails:
        if where[t] == {n} and t not in broken:
            out[n].append((r, t, bool((set(hist.get(t, ())) | passed_on.get(t, set())) - {n})))
    return out


def _tail(n: int, k: int, s: float) -> float:
    """P(Binomial(n, s) >= k): the chance that ``k`` or more of ``n`` failures land on a node that
    takes each with probability ``s``."""
    if k <= 0:
        return 1.0
    if s <= 0.0:
        return 0.0
    if s >= 1.0:
        return 1.0 if k <= n else 0.0
    if k > n:
        return 0.0
    # each term in log space: comb(n, i) * s**i overflows a float once n passes about a thousand
    log_s, log_r, log_n = math.log(s), math.log1p(-s), math.lgamma(n + 1)
    return min(1.0, math.fsum(math.exp(log_n - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * log_s
                                       + (n - i) * log_r) for i in range(k, n + 1)))


def _across_nights(node: str, peers: Collection[str], lone: Mapping[str, list[tuple[str, str, bool]]],
                   hist: NodeHistory, by_node: Mapping[str, list[Attempt]],
                   limits: Thresholds) -> tuple[NodeFinding, bool] | None:
    """The ``history`` rule: a node that fails one test a night is never named within a night; across
    the recent runs, its failures of tests that pass elsewhere (``lone``) name it. Judged only when
    it failed so tonight, against the other nodes of its pool (tonight's ``peers``, and the nodes of
    its hardware in the recent runs). (finding, named): named bad, or only a cross-night suspect.

    Flaky tests fail on healthy nodes too, one failure at a time, and each such failure is "lone":
    comparing counts named healthy nodes of small pools. Under "no bad node", each of the pool's
    lone failures lands on the node with its share of the pool's attempts, so the node's count is
    judged by the chance a healthy node draws as many (binomial), times the pool's node count (any
    of them could have): ``history_named_chance`` names it, ``history_suspect_chance`` suspects it."""
    counted = sorted(dict.fromkeys(lone.get(node, ())), key=lambda x: x[0] != "")
    mine = [(r, t) for r, t, elsewhere in counted if elsewhere]
    if not any(r == "" for r, _ in mine):
        return None
    tests = list(dict.fromkeys(t for _, t in mine))
    nights = {r for r, _ in mine}
    if len(tests) < limits.history_tests:
        return None
    hardware = {n: h for r in hist.runs for n, h in r.hardware.items()}
    group = (set(peers) | {n for n, h in hardware.items() if node in hardware and h == hardware[node]}) - {node}

    def ran(n: str) -> int:
        return sum(r.attempts.get(n, 0) for r in hist.runs) + sum(1 for a in by_node.get(n, ()) if a.outcome != "skipped")

    rest_failed, rest_total = sum(len(set(lone.get(p, ()))) for p in group), sum(ran(p) for p in group)
    total = ran(node)
    if not rest_total or not total:
        return None
    n, k, share = len(counted) + rest_failed, len(counted), total / (total + rest_total)
    chance = _tail(n, k, share) * (len(group) + 1)
    named = chance <= limits.history_named_chance and len(nights) >= limits.history_nights
    if not named and chance > limits.history_suspect_chance:
        return None
    tonight = [a for a in by_node[node] if a.outcome in RETRIABLE and ("", a.test_id) in mine]
    before = [f"{t} in run {r}" for r, t in mine if r]
    shown = before[-3:] + ([f"and {len(before) - 3} more"] if len(before) > 3 else [])
    window = len(hist.runs) + 1
    nodes = len(group) + 1
    evidence = (f"{len(tests)} different tests failed here in {len(nights)} of the last {window} runs (tonight "
                f"and the {len(hist.runs)} before it), each passing on another node and failing on no other node; "
                f"{k} of the pool's {n} failures of tests failing on one node only were here, {k} or more a chance "
                f"of {_chance(chance / nodes)} for a healthy node with its {total} of the {total + rest_total} "
                f"attempts ({_chance(chance)} for any of the pool's {nodes} nodes; "
                f"{'named at' if named else 'suspect, not named, above'} {_chance(limits.history_named_chance)}); "
                f"tonight: {_examples(tonight)}; before: {', '.join(shown) or 'none'}")
    return NodeFinding(node=node, rule="history" if named else "history_suspect", failed=k, total=total,
                       rest_failed=rest_failed, rest_total=rest_total, tests=tuple(tests), evidence=evidence), named


def _odds(base: Mapping[str, int], one: float, chance: float, nodes: int, limits: Thresholds) -> str:
    """The one-night rules' chance, said beside the counts: how often a healthy node draws as many of
    the pool's rated failures with its share of the rated attempts (``one``), and any of the pool's
    ``nodes`` (``chance``)."""
    k, n = base["failed"], base["failed"] + base["rest_failed"]
    return (f"{k} of the pool's {n} failures here, {k} or more a chance of {_chance(one)} for a "
            f"healthy node with its {base['total']} of the {base['total'] + base['rest_total']} attempts "
            f"({_chance(chance)} for any of the pool's {nodes} nodes; "
            f"{'named at' if chance <= limits.tonight_named_chance else 'suspect, not named, above'} "
            f"{_chance(limits.tonight_named_chance)})")


def _chance(x: float) -> str:
    """A probability as the evidence says it: "1 in 256"."""
    return "1 in 1" if x >= 1 else f"1 in {round(1 / x):,}" if x > 0 else "0"


def _infra(node: str, mine: list[Attempt], failed: list[Attempt], rest: list[Attempt],
           limits: Thresholds) -> NodeFinding | None:
    """Named by its infra errors alone: the counts shown are every attempt's, as the rule needs no rates."""
    infra = [a for a in mine if a.outcome == "infra_error" and a.reason in NODE_FAULTS]
    if not infra or (len(infra) < limits.min_infra and not any(a.reason in HARD_FAULTS for a in infra)):
        return None
    base = dict(node=node, failed=len(failed), total=len(mine), rest_failed=sum(1 for a in rest if _failed(a)),
                rest_total=len(rest), tests=tuple(_distinct(failed)))
    kinds = ", ".join(f"{k} x{sum(1 for a in infra if a.reason == k)}" for k in sorted({a.reason for a in infra}))
    return NodeFinding(rule="infra", evidence=(f"{len(infra)} infra error(s) on this node ({kinds}); "
                                               f"{len(failed)} of {len(mine)} attempts failed here; {_examples(infra)}"),
                       **base)


def _distinct(attempts: Iterable[Attempt]) -> list[str]:
    return list(dict.fromkeys(a.test_id for a in attempts))


def _retries(attempts: Sequence[Attempt]) -> dict[int, str]:
    """For each attempt (by ``id``), the node whose failure it retries elsewhere, else "": the
    dispatcher's ``details["retry_of"]``, or (history samples keep no details) a later attempt of a
    test that failed or timed out on another node: only a suspect's failures are ever retried."""
    fails: dict[str, list[Attempt]] = defaultdict(list)
    for a in attempts:
        if a.node and a.outcome in RETRIABLE:
            fails[a.test_id].append(a)
    out = {}
    for a in attempts:
        earlier = [f for f in fails.get(a.test_id, ()) if f.attempt < a.attempt and f.node != a.node]
        out[id(a)] = a.details.get("retry_of") or (max(earlier, key=lambda f: f.attempt).node if earlier else "")
    return out


def _suspect(mine: list[Attempt], blamed: list[Attempt], rest: list[Attempt], limits: Thresholds) -> bool:
    """Far more failures here than on the other nodes, on different tests (``mine``, ``rest``: the
    attempts the rates count)."""
    if len(mine) < limits.min_attempts or not rest or len(_distinct(blamed)) < limits.min_tests:
        return False
    rate = sum(1 for a in mine if _failed(a)) / len(mine)
    return rate >= limits.min_rate and rate - sum(1 for a in rest if _failed(a)) / len(rest) >= limits.min_gap


def _left_out(retries: int, broken: Sequence[str], quarantined: Sequence[str], tests: Sequence[str]) -> str:
    """What the rates did not count, said beside them (else the counts look wrong against the night's attempts)."""
    parts = [f"{retries} retr{'y' if retries == 1 else 'ies'}"] if retries else []
    if tests:
        parts.append(f"the attempts of {len(tests)} test(s) failing on another node too ({', '.join(tests)})")
    if broken:
        parts.append(f"{len(broken)} test(s) failing in each of their recent runs ({', '.join(broken)})")
    if quarantined:
        parts.append(f"{len(quarantined)} quarantined test(s) ({', '.join(quarantined)})")
    return f"; first attempts only, not counted: {' and '.join(parts)}" if parts else ""


def _judged(node: str, peers: Collection[str], blamed: list[Attempt], base: dict, left_out: str, odds: str,
            passed_on: Mapping[str, set[str]], history: Mapping[str, Collection[str]],
            limits: Thresholds) -> NodeFinding | None:
    """The suspect named bad when the evidence says its tests are fine (passes on ``peers``: the
    other nodes of its pool tonight); None while it does not. ``base``: the counts the rates used;
    ``odds``: their chance for a healthy node (the caller names no suspect whose chance is not small)."""
    tests = _distinct(blamed)
    tonight = {t: passed_on[t] & set(peers) for t in tests if passed_on[t] & set(peers)}
    recent = {t: set(history.get(t, ())) & set(peers) for t in tests
              if t not in tonight and set(history.get(t, ())) & set(peers)}
    head = (f"{base['failed']} of {base['total']} attempts failed here "
            f"(other nodes: {base['rest_failed']} of {base['rest_total']}{left_out}); {odds}; ")
    if len(tonight) + len(recent) >= limits.min_tests:
        parts = []
        if tonight:
            parts.append(f"{len(tonight)} of these tests passed elsewhere the same night ({_hosts(tonight)})")
        if recent:
            parts.append(f"{len(recent)} passed on other nodes in their recent history ({_hosts(recent)})")
        shown = [a for a in blamed if a.test_id in tonight or a.test_id in recent]
        return NodeFinding(rule="failure_rate", evidence=head + "; ".join(parts) + f"; {_examples(shown)}", **base)
    rest_total = base["rest_total"]
    if (len(tests) >= limits.contrast_tests and rest_total and rest_total >= limits.contrast_rest
            and base["rest_failed"] / rest_total <= limits.contrast_rest_rate):
        return NodeFinding(rule="contrast", evidence=(
            head + f"{len(tests)} different tests failed here while the other nodes almost never failed: "
            f"the node, not {len(tests)} tests at once; {_examples(blamed)}"), **base)
    return None


def _hosts(where: Mapping[str, Collection[str]]) -> str:
    count: dict[str, int] = defaultdict(int)
    for nodes in where.values():
        for n in nodes:
            count[n] += 1
    return ", ".join(f"{n}: {c}" for n, c in sorted(count.items(), key=lambda x: (-x[1], x[0])))


def _examples(attempts: Sequence[Attempt], limit: int = 3) -> str:
    shown = [f"{a.test_id} ({a.reason or a.outcome}{'' if a.exit_code is None else f', exit {a.exit_code}'})"
             for a in attempts[:limit]]
    more = f" and {len(attempts) - limit} more" if len(attempts) > limit else ""
    return "e.g. " + "; ".join(shown) + more


def avoid_nodes(findings: Sequence[NodeFinding], suspects: Sequence[str] = ()) -> tuple[str, ...]:
    """The nodes later attempts must not land on: the bad ones, and the suspects until they are cleared."""
    return tuple(dict.fromkeys((*(f.node for f in findings), *suspects)))


def retries_due(attempts: Sequence[Attempt], avoid: Collection[str], retried: Collection[str] = ()) -> list[Attempt]:
    """The failed or timed-out attempts on an avoided node whose test has had no later attempt and
    no such retry yet (``retried``): each gets one retry on another node, whose outcome is the test's.
    Failures from before the node was found count too: they were the node's all along."""
    last: dict[str, Attempt] = {}
    for a in attempts:
        last[a.test_id] = a
    return [a for a in last.values() if a.outcome in RETRIABLE and a.node in avoid and a.test_id not in retried]


def report_lines(findings: Sequence[NodeFinding]) -> list[str]:
    """Lines for the night report, one per bad node."""
    return [f"- {f.summary}" for f in findings]
