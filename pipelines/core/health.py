"""Bad GPU nodes, found from one night's attempts.

The real case: one H200 host returned CUDA "Error 802" and failed 12 of 12 tests that passed on
another host; nothing pointed at the host. Two rules, both needing only :class:`Attempt` records
with ``node`` set:

- *infra*: the node's attempts end in node-attributable infra errors (GPU not usable, node lost,
  shutdown, eviction). One "GPU not usable" is enough (the pre-flight proved it); others need
  ``min_infra`` hits.
- *failure rate*: the node's failure rate stands far above the rest of the night's nodes *and*
  tests that failed there passed elsewhere the same night (so it is the node, not the tests).

The findings carry the evidence text the night report prints; the dispatcher passes their nodes
as ``avoid_nodes`` to later attempts.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from pipelines.core.model import Attempt

#: Infra reasons that point at the node the attempt ran on (the launchers' Attempt.reason values).
NODE_FAULTS = frozenset({"gpu_unusable", "node_lost", "node_shutdown", "evicted"})
#: One of these alone proves the node bad.
HARD_FAULTS = frozenset({"gpu_unusable"})


@dataclass(frozen=True)
class NodeFinding:
    """A node the night should stop using, and why."""

    node: str
    rule: str  # "infra" or "failure_rate"
    failed: int
    total: int
    rest_failed: int
    rest_total: int
    tests: tuple[str, ...]
    evidence: str

    @property
    def summary(self) -> str:
        return f"bad node {self.node}: {self.evidence}"


def _failed(a: Attempt) -> bool:
    return a.outcome in ("failed", "timed_out") or (a.outcome == "infra_error" and a.reason in NODE_FAULTS)


def detect_bad_nodes(
    attempts: Sequence[Attempt],
    *,
    min_infra: int = 2,
    min_attempts: int = 3,
    min_rate: float = 0.5,
    min_gap: float = 0.5,
    min_passed_elsewhere: int = 2,
) -> list[NodeFinding]:
    """Nodes whose attempts this night say the node, not the tests, is broken (worst first)."""
    by_node: dict[str, list[Attempt]] = defaultdict(list)
    passed_on: dict[str, set[str]] = defaultdict(set)
    for a in attempts:
        if not a.node or a.outcome == "skipped":
            continue
        by_node[a.node].append(a)
        if a.outcome == "passed":
            passed_on[a.test_id].add(a.node)

    findings: list[NodeFinding] = []
    for node, mine in sorted(by_node.items()):
        rest = [a for n, xs in by_node.items() if n != node for a in xs]
        failed = [a for a in mine if _failed(a)]
        rest_failed = sum(1 for a in rest if _failed(a))
        infra = [a for a in mine if a.outcome == "infra_error" and a.reason in NODE_FAULTS]
        tests = tuple(dict.fromkeys(a.test_id for a in failed))
        base = dict(node=node, failed=len(failed), total=len(mine), rest_failed=rest_failed, rest_total=len(rest), tests=tests)
        if infra and (len(infra) >= min_infra or any(a.reason in HARD_FAULTS for a in infra)):
            kinds = ", ".join(f"{k} x{sum(1 for a in infra if a.reason == k)}" for k in sorted({a.reason for a in infra}))
            evidence = (f"{len(infra)} infra error(s) on this node ({kinds}); "
                        f"{len(failed)} of {len(mine)} attempts failed here; {_examples(infra)}")
            findings.append(NodeFinding(rule="infra", evidence=evidence, **base))
            continue
        if len(mine) < min_attempts or not rest:
            continue
        rate = len(failed) / len(mine)
        rest_rate = rest_failed / len(rest)
        elsewhere = {a.test_id: sorted(passed_on[a.test_id] - {node}) for a in failed if passed_on[a.test_id] - {node}}
        if rate >= min_rate and rate - rest_rate >= min_gap and len(elsewhere) >= min(min_passed_elsewhere, len(failed)):
            hosts: dict[str, int] = defaultdict(int)
            for nodes in elsewhere.values():
                for n in nodes:
                    hosts[n] += 1
            where = ", ".join(f"{n}: {c}" for n, c in sorted(hosts.items(), key=lambda x: (-x[1], x[0])))
            evidence = (f"{len(failed)} of {len(mine)} attempts failed here (other nodes: {rest_failed} of {len(rest)}); "
                        f"{len(elsewhere)} of these tests passed elsewhere the same night ({where}); "
                        f"{_examples([a for a in failed if a.test_id in elsewhere])}")
            findings.append(NodeFinding(rule="failure_rate", evidence=evidence, **base))
    return sorted(findings, key=lambda f: (-f.failed, f.node))


def _examples(attempts: Sequence[Attempt], limit: int = 3) -> str:
    shown = [f"{a.test_id} ({a.reason or a.outcome}{'' if a.exit_code is None else f', exit {a.exit_code}'})"
             for a in attempts[:limit]]
    more = f" and {len(attempts) - limit} more" if len(attempts) > limit else ""
    return "e.g. " + "; ".join(shown) + more


def avoid_nodes(findings: Sequence[NodeFinding]) -> tuple[str, ...]:
    """The nodes later attempts must not land on."""
    return tuple(f.node for f in findings)


def report_lines(findings: Sequence[NodeFinding]) -> list[str]:
    """Lines for the night report, one per bad node."""
    return [f"- {f.summary}" for f in findings]
