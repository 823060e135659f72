"""Cross-night bad-node rule (``history``): how often it names a healthy node, how soon a broken one.

A fleet is one pool of N nodes running the same T tests every night for 30 nights, one test at a
time, through the pure functions a night uses: before each test the night's attempts so far are
judged (``judge_nodes``, as ``Night.bad_nodes`` does) and the test goes to a node not avoided
(``avoid_nodes``); then every failure on an avoided node gets its retry elsewhere (``retries_due``);
at the night's end ``detect_bad_nodes`` and ``flaky.night_verdict`` judge it. Between nights the
samples go to history: ``flaky.replay`` gives the states (quarantines) and ``passed_nodes`` with
``leave_out`` of the quarantined the node history, as ``nightly run`` computes them.
Thresholds: ``history_named_chance`` 1 in 1,000, ``history_suspect_chance`` 1 in 20,
``tonight_named_chance`` 1 in 1,000 (``pipelines/core/health.py``; docs/reliability.md, row "one
node broken"; ``--tonight-chance`` tries another).

1. False positives: no bad node; every test fails at random with probability p (0.1, 0.2) on any
   node; 2, 4 and 8 nodes, 10 and 20 tests, tests placed at random each night (``--sticky``: each
   test on its own node while that node is not avoided). Per setting, of --fleets fleets: how many
   ever had a healthy node named by the history rule at a night's end (and on how many nights), named
   at any call during a night (what the night acted on: its record keeps it), and made a cross-night
   suspect (``history_suspect``) at any call; also how many had one named by a one-night rule
   (failure_rate, contrast, infra), and so again with the one-night rules as they were before they
   weighed the chance (``tonight_named_chance`` 1, column "(old)"; the same fleets replayed).
2. Detection: h200-0 fails one random test a night (the test is put on it while it is not avoided;
   every other test passes there), plus flaky noise on every node at each --noise probability
   (default 0 and 0.05); 2, 4 and 8 nodes, 5, 10 and 20 tests; random placement. Per setting: the
   night h200-0 is first suspected (avoided at some call: suspect or named, any rule) and first named
   at any call, median and max over the fleets that got there, how many fleets never got there in 30
   nights, and the nights before its naming where a quarantine excused the failure h200-0 caused
   (victim: docs/reliability.md says never; printed, not asserted), or any failure there (all: a
   noise failure of a quarantined test too).

Seeds are the fleet's number, so every run prints the same figures. Defaults take about 6-8 minutes
on 2 CPUs; ``--quick`` runs 5 fleets per setting.

    .venv/bin/python bench/nodes.py [--fleets 25] [--nights 30] [--sticky] [--noise 0,0.05] [--quick]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipelines.core.flaky import night_verdict, replay  # noqa: E402
from pipelines.core.health import (  # noqa: E402
    Thresholds,
    avoid_nodes,
    detect_bad_nodes,
    judge_nodes,
    leave_out,
    passed_nodes,
    retries_due,
)
from pipelines.core.model import Attempt, Sample  # noqa: E402

T0 = datetime(2026, 1, 1, tzinfo=UTC)
POOL = "h200"
BAD = f"{POOL}-0"
#: the cross-night rules; every other rule judges one night
HISTORY_RULES = ("history", "history_suspect")
#: the project's thresholds
DEFAULTS = Thresholds()


@dataclass(frozen=True)
class NightSeen:
    """What one simulated night decided about its nodes."""

    named_end: frozenset[tuple[str, str]]  # (node, rule) of detect_bad_nodes at the night's end
    named_any: frozenset[tuple[str, str]]  # named at any call during the night (what it acted on)
    suspect_any: frozenset[tuple[str, str]]  # suspect at any call during the night
    excused_on: tuple[str, ...]  # the node of each excused test's last attempt
    victim_excused: bool = False  # the test the bad node failed tonight was excused, failed there


class Fleet:
    """One pool's nodes and tests, night after night; ``bad``: node 0 fails one random test a night
    (put on it while it is not avoided), besides the noise ``p`` every test has on every node."""

    def __init__(self, nnodes: int, ntests: int, p: float, seed: int, *, sticky: bool = False, bad: bool = False,
                 limits: Thresholds = DEFAULTS):
        self.limits = limits
        self.rng = random.Random(seed)
        self.nodes = [f"{POOL}-{i}" for i in range(nnodes)]
        self.tests = [f"tests/test_{i}.py" for i in range(ntests)]
        self.home = {t: self.nodes[i % nnodes] for i, t in enumerate(self.tests)}
        self.pools = dict.fromkeys(self.tests, POOL)
        self.p, self.sticky, self.bad = p, sticky, bad
        self.samples: list[Sample] = []
        self.clock = T0

    def tick(self) -> str:
        self.clock += timedelta(seconds=10)
        return self.clock.isoformat()

    def outcome(self, test: str, node: str, victim: str | None) -> str:
        if node == BAD and test == victim:
            return "failed"
        return "failed" if self.rng.random() < self.p else "passed"

    def night(self, number: int) -> NightSeen:
        """One night: each test in turn on a node the night does not avoid, then the retries due."""
        rng, nodes, run = self.rng, self.nodes, f"run{number:03d}"
        states = replay(self.samples)
        quarantined = [t for t, s in states.items() if s.state == "quarantined"]
        hist = leave_out(passed_nodes(self.samples, exclude_run=run), quarantined)
        order = self.tests[:]
        rng.shuffle(order)
        victim = rng.choice(self.tests) if self.bad else None
        seen: list[Attempt] = []
        named_any: set[tuple[str, str]] = set()
        suspect_any: set[tuple[str, str]] = set()

        def avoided() -> set[str]:
            findings, suspects = judge_nodes(seen, history=hist, pools=self.pools, limits=self.limits)
            named_any.update((f.node, f.rule) for f in findings)
            suspect_any.update((f.node, f.rule) for f in suspects)
            return set(avoid_nodes(findings, [f.node for f in suspects]))

        for t in order:
            avoid = avoided()
            cands = [n for n in nodes if n not in avoid] or nodes
            if t == victim and BAD in cands:
                n = BAD
            else:
                n = self.home[t] if self.sticky and self.home[t] in cands else rng.choice(cands)
            seen.append(Attempt(t, self.outcome(t, n, victim), 1.0, self.tick(), 1, node=n, details={"pool": POOL}))
        retried: set[str] = set()
        while due := retries_due(seen, avoid := avoided(), retried):
            for a in due:
                retried.add(a.test_id)
                cands = [n for n in nodes if n not in avoid and n != a.node] or [n for n in nodes if n != a.node]
                n = rng.choice(cands)
                seen.append(Attempt(a.test_id, self.outcome(a.test_id, n, victim), 1.0, self.tick(), a.attempt + 1,
                                    node=n, details={"pool": POOL, "retry_of": a.node}))
        findings = detect_bad_nodes(seen, history=hist, limits=self.limits)
        verdict = night_verdict(seen, states, hist)
        last = {a.test_id: a for a in seen}
        self.samples += [Sample(a.test_id, POOL, "0" * 64, a.outcome, 1.0, a.started_at, node=a.node, run_id=run,
                                attempt=a.attempt) for a in seen]
        return NightSeen(frozenset((f.node, f.rule) for f in findings), frozenset(named_any), frozenset(suspect_any),
                         tuple(last[t].node for t in verdict.excused),
                         victim in verdict.excused and last[victim].node == BAD)


def fleet(nnodes: int, ntests: int, p: float, nights: int, seed: int, *, sticky: bool = False,
          bad: bool = False, limits: Thresholds = DEFAULTS) -> list[NightSeen]:
    """``nights`` nights of one fleet (:class:`Fleet`)."""
    f = Fleet(nnodes, ntests, p, seed, sticky=sticky, bad=bad, limits=limits)
    return [f.night(i) for i in range(nights)]


def false_positives(nodes: int, tests: int, p: float, nights: int, fleets: int, sticky: bool,
                    limits: Thresholds = DEFAULTS) -> str:
    """One row of table 1: fleets (nights) with a healthy node named or suspected; the last column
    replays the same fleets with the one-night rules as they were before their chance
    (``tonight_named_chance`` 1: any suspect whose tests passed elsewhere was named)."""
    end = end_nights = mid = sus = other = old = 0
    before = replace(limits, tonight_named_chance=1.0)
    for seed in range(fleets):
        old += any(r not in HISTORY_RULES for s in fleet(nodes, tests, p, nights, seed, sticky=sticky, limits=before)
                   for _, r in s.named_any)
        seen = fleet(nodes, tests, p, nights, seed, sticky=sticky, limits=limits)
        named_end = sum(1 for s in seen if any(r == "history" for _, r in s.named_end))
        end += bool(named_end)
        end_nights += named_end
        mid += any(r == "history" for s in seen for _, r in s.named_any)
        sus += any(r == "history_suspect" for s in seen for _, r in s.suspect_any)
        other += any(r not in HISTORY_RULES for s in seen for _, r in s.named_any)
    return (f"{nodes:5d} {tests:5d} {p:5.2f} {fleets:6d}   {f'{end} ({end_nights})':>14s} {mid:13d} "
            f"{sus:13d} {other:15d} {old:13d}")


def _spread(nights: list[int]) -> str:
    return f"{statistics.median(nights):6g} {max(nights):4d}" if nights else f"{'-':>6s} {'-':>4s}"


def detection(nodes: int, tests: int, noise: float, nights: int, fleets: int, limits: Thresholds = DEFAULTS) -> str:
    """One row of table 2: when node-0, failing one test a night, is first suspected and named."""
    suspected, named, victims, excused = [], [], 0, 0
    for seed in range(fleets):
        seen = fleet(nodes, tests, noise, nights, seed, bad=True, limits=limits)
        first_named = next((i for i, s in enumerate(seen, 1) if any(n == BAD for n, _ in s.named_any)), None)
        first_suspect = next((i for i, s in enumerate(seen, 1)
                              if any(n == BAD for n, _ in (*s.named_any, *s.suspect_any))), None)
        if first_named is not None:
            named.append(first_named)
        if first_suspect is not None:
            suspected.append(first_suspect)
        before = seen[:first_named - 1] if first_named is not None else seen
        victims += sum(1 for s in before if s.victim_excused)
        excused += sum(1 for s in before if BAD in s.excused_on)
    return (f"{nodes:5d} {tests:5d} {noise:5.2f} {fleets:6d}   {_spread(suspected)} {fleets - len(suspected):5d}   "
            f"{_spread(named)} {fleets - len(named):5d}   {victims:7d} {excused:7d}")


def _probabilities(text: str) -> list[float]:
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give probabilities separated by commas, e.g. 0,0.05") from None
    if not values or any(not 0 <= v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: every probability must be at least 0 and below 1")
    return values


def _whole(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number >= 1")
    return int(text)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="bench/nodes.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--fleets", type=_whole, help="fleets per setting (default 25; 5 with --quick)")
    p.add_argument("--nights", type=_whole, default=30, help="nights per fleet (default 30)")
    p.add_argument("--sticky", action="store_true",
                   help="false positives: each test runs on its own node (while it is not avoided), not at random")
    p.add_argument("--noise", type=_probabilities, default=[0.0, 0.05],
                   help="detection: the flaky failure probabilities of every test, comma-separated (default 0,0.05)")
    p.add_argument("--quick", action="store_true", help="5 fleets per setting (a quick look, about 50 s)")
    p.add_argument("--tonight-chance", type=float, default=DEFAULTS.tonight_named_chance,
                   help="the one-night rules' Thresholds.tonight_named_chance to try (default: the project's)")
    return p


def main(argv: list[str]) -> None:
    args = parser().parse_args(argv)
    fleets = args.fleets or (5 if args.quick else 25)
    limits = replace(DEFAULTS, tonight_named_chance=args.tonight_chance)
    print(f"history rule: named at 1 in {1 / limits.history_named_chance:,.0f}, suspect at 1 in "
          f"{1 / limits.history_suspect_chance:,.0f}; one-night rules named at 1 in {1 / limits.tonight_named_chance:,.0f}; "
          f"{args.nights} nights per fleet, {fleets} fleets per setting")
    t0 = time.perf_counter()
    print(f"\n1. false positives: no bad node, tests failing at random on any node "
          f"({'each test on its own node' if args.sticky else 'placed at random each night'})")
    print("fleets with a healthy node named by the history rule: at a night's end (on how many nights), at any")
    print("call during a night; a cross-night suspect at any call; named by a one-night rule at any call (failure_rate,")
    print("contrast, infra), and so with the one-night rules as they were before their chance (old)")
    print(f"{'nodes':>5s} {'tests':>5s} {'p':>5s} {'fleets':>6s}   {'named at end':>14s} {'named in-night':>13s} "
          f"{'hist. suspect':>13s} {'one-night rules':>15s} {'(old)':>13s}")
    for nodes in (2, 4, 8):
        for tests in (10, 20):
            for p in (0.1, 0.2):
                print(false_positives(nodes, tests, p, args.nights, fleets, args.sticky, limits), flush=True)
    t1 = time.perf_counter()
    print(f"({t1 - t0:.0f} s)")
    print(f"\n2. detection: {BAD} fails one random test a night (random placement), flaky noise on every node")
    print("night first suspected (avoided: suspect or named) and first named, at any call: median and max over the")
    print("fleets that got there, and how many never did; nights before its naming where a quarantine excused the")
    print("failure it caused (victim), or any failure on it (all: noise too)")
    print(f"{'nodes':>5s} {'tests':>5s} {'noise':>5s} {'fleets':>6s}   {'suspected':>11s} {'never':>5s}   "
          f"{'named':>11s} {'never':>5s}   {'victim':>7s} {'all':>7s}")
    for nodes in (2, 4, 8):
        for tests in (5, 10, 20):
            for noise in args.noise:
                print(detection(nodes, tests, noise, args.nights, fleets, limits), flush=True)
    print(f"({time.perf_counter() - t1:.0f} s)")


if __name__ == "__main__":
    main(sys.argv[1:])
