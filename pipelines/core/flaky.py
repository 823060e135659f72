"""Flaky tests from history, and the quarantine that keeps them from failing the night.

Two kinds of evidence, both on the *same code, image and environment* (a test file's sha256, the
image digest and the night's extra environment, ``env_digest``), so a fix, a new image or a
failure injected with ``--env`` is never mistaken for flakiness:

- *passed on retry*: a night where the test failed (or hung) and a later attempt passed;
- *alternating*: the test's final outcome flips between passed and failed from one of its nights
  to the next night run under the same extra environment (a night with ``--env MINIRL_FAIL=...``
  is compared with the last such night, not with the plain night between them); ``min_flips``
  flips within the window are needed (one flip is a breakage or a fix).

States: healthy -> flaky -> quarantined -> released (after ``release_after`` consecutive passing
nights) -> healthy (after one more clean night; a failed one keeps it released). A quarantine the
rules made excuses failures only of the code and image it was judged on: it ends (released, its
failures count again) when the test file (calibrate's own est_time rewrites aside: the history's
successions, ``calibrate.lineage``) or the image changes, or after ``lapse_after``
consecutive failing nights (a flaky test passes now and then; one that never does is broken).
Infra errors and skips say nothing about a test: they are ignored here, and
failures on a node the night found bad are the node's, not the test's, and so are the earlier
failures that named a node across nights (``health``'s ``history`` rule). A quarantine the rules
made keeps the evidence that made it; what came since is its ``passes`` and ``failing``. Manual
overrides (who, why, when) come from a JSON document: a hand-made quarantine holds until released by hand.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields, replace
from datetime import UTC, datetime
from typing import NamedTuple

from pipelines.core.calibrate.lineage import Lineage
from pipelines.core.calibrate.policies import parse_time
from pipelines.core.health import (
    HARD_FAULTS,
    NODE_FAULTS,
    NodeHistory,
    RecentPasses,
    assess_nodes,
    detect_bad_nodes,
)
from pipelines.core.model import Attempt, CatalogError, Problem, Sample

STATES = ("healthy", "flaky", "quarantined", "released")
#: no est_time rewrites recorded: every digest is its own revision
NO_REWRITES = Lineage()
_FAIL = ("failed", "timed_out")


@dataclass(frozen=True)
class FlakyRules:
    """Per-repo thresholds (``flaky:`` in assets/repos.yaml)."""

    #: evidence older than this many of the test's own nights is forgotten
    window_nights: int = 14
    #: outcome flips within the window that make a test flaky without any retry evidence
    min_flips: int = 2
    #: pieces of evidence (retry passes + flips) within the window that quarantine it
    quarantine_after: int = 3
    #: consecutive clean passing nights that release an automatic quarantine
    release_after: int = 5
    #: consecutive failing nights (no pass at all, not even on retry) that end an automatic
    #: quarantine: a flaky test passes now and then, one that fails this many nights in a row is
    #: broken and must fail the night again. As many as release it: a test failing half its nights
    #: at random starts such a run about once in 64 nights; a broken one is excused 5 nights at most
    lapse_after: int = 5
    #: a quarantined test still runs (its result is reported, it does not fail the night)
    run_quarantined: bool = True

    @classmethod
    def from_mapping(cls, data: Mapping | None, where: str = "assets/repos.yaml", key: str = "flaky",
                     line: int = 1) -> FlakyRules:
        """Rules from YAML; unknown names and non-positive counts are errors that say the fix."""
        if data is None:
            return cls()
        if not isinstance(data, Mapping):
            raise CatalogError(Problem(where, line, key, f"expected a mapping of rules, got {type(data).__name__}"))
        known = {f.name: f for f in fields(cls)}
        values = {}
        for name, value in data.items():
            if name not in known:
                raise CatalogError(Problem(where, line, f"{key}.{name}",
                                           f"unknown rule; use one of {', '.join(known)}"))
            if name == "run_quarantined":
                if not isinstance(value, bool):
                    raise CatalogError(Problem(where, line, f"{key}.{name}", f"expected true or false, got {value!r}"))
            elif isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise CatalogError(Problem(where, line, f"{key}.{name}", f"expected a whole number >= 1, got {value!r}"))
            values[name] = value
        return cls(**values)

    @classmethod
    def for_repo(cls, spec) -> FlakyRules:
        """The rules of a RepoSpec from assets/repos.yaml (its ``flaky:``); defaults for None (a
        checkout nobody configured)."""
        if spec is None:
            return cls()
        return cls.from_mapping(spec.flaky, key=f"repos.{spec.name}.flaky")


@dataclass(frozen=True)
class Evidence:
    """One reason to call a test flaky, citing the run it came from."""

    kind: str  # "passed_on_retry" | "alternating"
    run_id: str
    started_at: str
    text: str


@dataclass(frozen=True)
class FlakyState:
    """Where one test stands, with the evidence that put it there."""

    test_id: str
    state: str = "healthy"
    evidence: tuple[Evidence, ...] = ()
    #: consecutive clean passing nights while quarantined
    passes: int = 0
    since: str = ""
    by: str = ""
    why: str = ""
    manual: bool = False
    #: the test file's sha256 and the image an automatic quarantine was judged on ("" unknown): it
    #: excuses failures of that code and image only
    sha256: str = ""
    image: str = ""
    #: consecutive failing nights while quarantined
    failing: int = 0
    #: the rules ended the quarantine without clean passes (``why`` says why): its failures count
    lapsed: bool = False

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping) -> FlakyState:
        ev = tuple(Evidence(**e) for e in d.get("evidence", ()))
        return cls(**{**{k: v for k, v in d.items() if k in {f.name for f in fields(cls)}}, "evidence": ev})


def recorded_state_problem(d: object) -> tuple[tuple, str] | None:
    """What keeps :meth:`FlakyState.from_dict` from reading one state a night recorded
    (``summary["flaky"][test]``), as (the field's path in it, what is wrong), or None when it reads: a damaged
    record is named by whoever reads it, never a traceback."""
    if not isinstance(d, Mapping):
        return (), f"expected a flaky state object (test_id, state, evidence, ...), got {d!r:.80}"
    if not isinstance(d.get("test_id"), str) or not d["test_id"]:
        return ("test_id",), f"expected a test id, got {d.get('test_id')!r:.80}"
    if "state" in d and d["state"] not in STATES:
        return ("state",), f"expected one of {', '.join(STATES)}, got {d['state']!r:.80}"
    for name in ("since", "by", "why", "sha256", "image"):
        if name in d and not isinstance(d[name], str):
            return (name,), f"expected a string, got {d[name]!r:.80}"
    for name in ("passes", "failing"):
        if name in d and (isinstance(d[name], bool) or not isinstance(d[name], int) or d[name] < 0):
            return (name,), f"expected a whole number >= 0, got {d[name]!r:.80}"
    for name in ("manual", "lapsed"):
        if name in d and not isinstance(d[name], bool):
            return (name,), f"expected true or false, got {d[name]!r:.80}"
    evidence = d.get("evidence", [])
    if not isinstance(evidence, list):
        return ("evidence",), f"expected a list of evidence objects, got {evidence!r:.80}"
    keys = [f.name for f in fields(Evidence)]
    for i, e in enumerate(evidence):
        if not isinstance(e, Mapping) or set(e) != set(keys) or not all(isinstance(v, str) for v in e.values()):
            return ("evidence", i), f"expected an object of the strings {', '.join(keys)}, got {e!r:.80}"
    return None


class NightRecord(NamedTuple):
    """One test's attempts in one run that say something about the test (infra and bad nodes removed).

    A named tuple, not a dataclass: replaying 100 nights of 1,000 tests makes 100,000 of them.
    """

    test_id: str
    run_id: str
    started_at: str
    sha256: str
    image: str
    outcomes: tuple[str, ...]
    #: the night's extra environment (``env_digest``; "" for none)
    env: str = ""

    @property
    def final(self) -> str:
        return self.outcomes[-1]

    @property
    def clean_pass(self) -> bool:
        return all(o == "passed" for o in self.outcomes)


def _time(value: str) -> datetime:
    return parse_time(value) or datetime.min.replace(tzinfo=UTC)


def night_records(samples: Sequence[Sample]) -> list[NightRecord]:
    """Samples grouped into per-test nights, oldest run first; infra, skips and bad-node failures dropped.

    A node named by the cross-night rule (``health``'s ``history``) takes with it the earlier
    failures that named it: they were the node's from the first (a test is never blamed for a
    node, though the night before it was named had to count them)."""
    runs: dict[str, list[Sample]] = defaultdict(list)
    first: dict[str, str] = {}
    for s in samples:
        runs[s.run_id].append(s)
        if s.started_at and (s.run_id not in first or s.started_at < first[s.run_id]):
            first[s.run_id] = s.started_at
    out = []
    order = sorted(runs, key=lambda r: _time(first.get(r, "")))
    before = RecentPasses()  # passed_nodes of the runs before this one, kept as the replay goes
    judged, nodes_own = [], set()
    for run_id in order:
        mine = runs[run_id]
        bad, earlier = _judged_run(mine, before.nodes, before.failing_nodes())
        nodes_own |= earlier
        before.add_run(mine)
        judged.append((run_id, bad))
    for run_id, bad in judged:
        mine = runs[run_id]
        per_test: dict[str, list[Sample]] = {}
        for s in mine:
            if s.outcome == "passed" or (s.outcome in _FAIL and s.node not in bad
                                         and (run_id, s.test_id, s.node) not in nodes_own):
                per_test.setdefault(s.test_id, []).append(s)
        for test_id, xs in per_test.items():
            if len(xs) > 1:
                xs.sort(key=lambda s: (s.attempt, s.started_at))
            out.append(NightRecord(test_id, run_id, xs[0].started_at, xs[-1].sha256, xs[-1].image,
                                   tuple(s.outcome for s in xs), xs[-1].env))
    return out


def _judged_run(run: Sequence[Sample], earlier: Callable[[], Mapping[str, Collection[str]]] = dict,
                failing_before: Collection[str] = ()) -> tuple[set[str], set[tuple[str, str, str]]]:
    """(the run's bad nodes, the earlier failures (run id, test, node) the cross-night rule laid at
    one of them), judged as the night judged them: from the run's samples (a failure retried
    elsewhere that passed is there) and the runs before it (``earlier``: their ``passed_nodes``,
    asked for only when needed; ``failing_before``: the nodes that failed a test in them).
    An infra error names its node as the night's rules do, by its reason (``_attempt``): only a node
    fault counts (one unusable GPU alone, a node lost or an eviction twice); a pod deleted, an image
    not pulled or a pod never scheduled on its pinned node says nothing of the node. Otherwise asked
    only when some node failed twice (the failure-rate rules need failures on two different tests:
    a node the night retried from is named once two of them passed elsewhere, whatever its rate by
    then), or failed tonight and in the runs before (the cross-night rule).
    """
    failed: dict[str, int] = defaultdict(int)
    for s in run:
        if s.node and s.outcome in _FAIL:
            failed[s.node] += 1
    if not any(n >= 2 for n in failed.values()) and not any(s.node and _node_fault(s) for s in run) \
            and not set(failed) & set(failing_before):
        return set(), set()
    history = earlier()
    # a sample's hardware stands for its pool: nodes are judged only against nodes of the same hardware
    findings = detect_bad_nodes([_attempt(s) for s in run if s.node], history=history,
                                pools={s.test_id: s.hardware for s in run if s.hardware})
    runs = history.runs if isinstance(history, NodeHistory) else ()
    earlier_own = {(r.run_id, t, n) for f in findings if f.rule == "history" for r in runs
                   for t, n in r.failures if n == f.node and t in f.tests}
    return {f.node for f in findings}, earlier_own


def _node_fault(s: Sample) -> bool:
    """An infra error that may say its node is bad: a node fault, or one from a record that kept no reason."""
    return s.outcome == "infra_error" and (not s.reason or s.reason in NODE_FAULTS)


def _attempt(s: Sample) -> Attempt:
    """The sample as the attempt it was, with the infra reason it kept. An older record's infra
    error kept none: it is taken, as before reasons were kept, as the hard node fault that names
    its node on its own (the safe side: the node's failures then never make a test flaky), so
    replaying old nights judges them as they were judged."""
    reason = (s.reason or next(iter(HARD_FAULTS))) if s.outcome == "infra_error" else ""
    return Attempt(test_id=s.test_id, outcome=s.outcome, elapsed_s=s.elapsed_s, started_at=s.started_at,
                   attempt=s.attempt, node=s.node, reason=reason)


def step(state: FlakyState, night: NightRecord, prev: NightRecord | None, rules: FlakyRules,
         window: Sequence[tuple[int, Evidence]] = (), index: int = 0,
         evidence_envs: frozenset[str] = frozenset(),
         lineage: Lineage = NO_REWRITES) -> tuple[FlakyState, list[tuple[int, Evidence]]]:
    """One night of one test: the new state and the evidence window (``(night index, evidence)`` pairs).

    ``evidence_envs``: the extra environments the evidence of a quarantine came from; a night of a
    quarantined test that failed under another one (a failure injected with ``--env``) says nothing
    of the flakiness it was quarantined for: it neither resets the release streak nor counts in it.
    ``lineage``: calibrate's est_time rewrites (:func:`changed_since`): a flip across one is a flip
    of the same code.
    """
    outs = night.outcomes
    if state.state == "healthy" and not window and not state.evidence and outs == ("passed",) and \
            (prev is None or prev.final == "passed"):
        return state, []  # the common night: nothing to note
    changed = changed_since(state, night.sha256, night.image, lineage)
    if changed:  # the evidence was of other code or another image: tonight is judged afresh
        state, window = ended(state, changed, night.run_id), []
    new = [(i, e) for i, e in window if index - i < rules.window_nights]
    if any(o in _FAIL for o in outs[:-1]) and outs[-1] == "passed":
        first = next(o for o in outs if o in _FAIL)
        new.append((index, Evidence("passed_on_retry", night.run_id, night.started_at,
                                    f"{first} then passed on attempt {len(outs)} in run {night.run_id}")))
    elif prev is not None and (prev.image, prev.env) == (night.image, night.env) and \
            prev.sha256 in lineage.same_revision(night.sha256) and (prev.final == "passed") != (night.final == "passed"):
        same = "on the same code and image" + (f" with the same extra environment ({_names(night.env)})"
                                               if night.env else "")
        new.append((index, Evidence("alternating", night.run_id, night.started_at,
                                    f"{prev.final} in run {prev.run_id}, {night.final} in run {night.run_id} {same}")))
    retries = sum(1 for _, e in new if e.kind == "passed_on_retry")
    flips = sum(1 for _, e in new if e.kind == "alternating")
    score = retries + flips
    is_flaky = retries >= 1 or flips >= rules.min_flips
    evidence = tuple(e for _, e in new)
    s = state.state
    if s == "quarantined":
        other_env = bool(evidence_envs) and night.env not in evidence_envs
        if night.clean_pass:
            passes = state.passes + 1
        else:
            passes = state.passes if other_env else 0
        if night.final == "passed":
            failing = 0
        else:
            failing = state.failing if other_env else state.failing + 1
        if passes >= rules.release_after and not state.manual:
            return replace(state, state="released", passes=passes, failing=0, since=night.run_id, by="flaky rules",
                           why=f"{passes} consecutive passing nights", evidence=()), []
        if failing >= rules.lapse_after and not state.manual:
            return ended(state, f"failed {failing} nights in a row since quarantined (the last in run "
                                f"{night.run_id})", night.run_id), []
        # the rules' quarantine keeps the evidence that quarantined it, as its why says it; what came since
        # is ``passes`` and ``failing`` (a flip back to passing is a night towards release, no new evidence).
        # A quarantine by hand keeps what led to it and adds what comes, each piece for the window
        kept = (evidence or state.evidence) if state.manual else state.evidence
        return replace(state, passes=passes, failing=failing, evidence=kept), new
    if is_flaky and score >= rules.quarantine_after:
        return FlakyState(state.test_id, "quarantined", evidence, 0, night.run_id, "flaky rules",
                          f"{retries} pass(es) on retry and {flips} flip(s) in the last {rules.window_nights} nights",
                          sha256=night.sha256, image=night.image), new
    if is_flaky:
        keep = state.since if s == "flaky" else night.run_id
        return FlakyState(state.test_id, "flaky", evidence, 0, keep, "flaky rules",
                          f"{retries} pass(es) on retry and {flips} flip(s) in the last {rules.window_nights} nights"), new
    if s == "released" and not night.clean_pass:  # healthy again only after a clean night
        return replace(state, evidence=evidence), new
    if s in ("flaky", "released"):
        return FlakyState(state.test_id, "healthy", evidence, 0, night.run_id), new
    return replace(state, evidence=evidence), new


def changed_since(state: FlakyState, sha256: str, image: str, lineage: Lineage = NO_REWRITES) -> str:
    """Why an automatic quarantine does not excuse a failure of this code and image ("" when it
    does): it was judged on another test file or another image. A file calibrate only re-estimated
    (a digest ``lineage``, the history store's successions, leads from the quarantine's to this one)
    is the same test, as calibration and the planner count it. An unknown value on either side
    (older records, a sample without an image) compares nothing. A quarantine by hand is a
    person's decision: it holds whatever changes."""
    if state.state != "quarantined" or state.manual:
        return ""
    if state.sha256 and sha256 and state.sha256 not in lineage.same_revision(sha256):
        return f"test file changed since quarantined (sha256 {state.sha256[:12]} -> {sha256[:12]})"
    if state.image and image and state.image != image:
        return f"image changed since quarantined ({_short(state.image)} -> {_short(image)})"
    return ""


def _short(digest: str) -> str:
    """An image digest as a line can show it: ``sha256:`` and 12 hex digits, as git shortens a hash."""
    return digest[:19] if digest.startswith("sha256:") else digest


def ended(state: FlakyState, why: str, run_id: str) -> FlakyState:
    """An automatic quarantine ended without clean passes: released, its failures count again
    (``lapsed``), its evidence cleared as a release clears it; healthy again after a clean night."""
    return FlakyState(state.test_id, "released", (), 0, run_id, "flaky rules",
                      f"quarantine ended: {why}; its failures count again", lapsed=True)


def for_tonight(states: Mapping[str, FlakyState], tonight: Mapping[str, tuple[str, str]],
                run_id: str, lineage: Lineage = NO_REWRITES) -> dict[str, FlakyState]:
    """The states a night starts with, given each test's code and image tonight (test id ->
    (sha256, image), "" where not known yet): an automatic quarantine judged on another file or
    image ends before the night, so tonight's failure of the changed test counts. The replay after
    the night reaches the same state from tonight's samples, given the same ``lineage``
    (calibrate's est_time rewrites, which change no test)."""
    out = dict(states)
    for tid, (sha256, image) in tonight.items():
        state = out.get(tid)
        why = changed_since(state, sha256, image, lineage) if state is not None else ""
        if why:
            out[tid] = ended(state, why, run_id)
    return out


def replay(samples: Sequence[Sample], rules: FlakyRules = FlakyRules(),
           overrides: Mapping | None = None, lineage: Lineage = NO_REWRITES) -> dict[str, FlakyState]:
    """Every test's state after all of history, manual overrides applied at the time they were made.
    ``lineage``: the history store's successions (calibrate's est_time rewrites), so a quarantine
    outlasts a rewrite of its file's est_time; without them such a rewrite counts as a changed file."""
    actions: dict[str, list[dict]] = defaultdict(list)
    for a in sorted(overrides_of(overrides), key=lambda a: _time(a["at"])):
        actions[a["test"]].append(a)
    nights: dict[str, list[NightRecord]] = defaultdict(list)
    for night in night_records(samples):
        nights[night.test_id].append(night)
    states = {}
    for tid in [*nights, *(t for t in actions if t not in nights)]:
        mine = nights.get(tid, [])
        if tid not in actions and all(n.outcomes == ("passed",) for n in mine):
            states[tid] = FlakyState(tid)  # the common test: it always passed
            continue
        states[tid] = _replay_one(tid, mine, actions.get(tid, []), rules, lineage)
    return states


def _replay_one(tid: str, nights: Sequence[NightRecord], actions: Sequence[Mapping], rules: FlakyRules,
                lineage: Lineage = NO_REWRITES) -> FlakyState:
    """Each night is compared with the test's last night under the same extra environment."""
    state, window, before, k = FlakyState(tid), [], {}, 0
    env_of: dict[str, str] = {}  # each run's extra environment, for the evidence that cites it
    for i, night in enumerate(nights):
        env_of[night.run_id] = night.env
        while k < len(actions) and _time(actions[k]["at"]) <= _time(night.started_at):
            state, window = _apply(state, actions[k]), _window_after(actions[k], window)
            k += 1
        envs = frozenset(env_of[e.run_id] for e in state.evidence if e.run_id in env_of) \
            if state.state == "quarantined" else frozenset()
        state, window = step(state, night, before.get(night.env), rules, window, i, envs, lineage)
        before[night.env] = night
    for action in actions[k:]:
        state = _apply(state, action)
    return state


def _names(env: str) -> str:
    """The variable names of an ``env_digest`` (never values: the digest holds none)."""
    return env.partition("#")[0].replace(",", ", ")


def _window_after(action: Mapping, window: list) -> list:
    """The evidence window after a manual action: a release starts it afresh; a quarantine by hand
    keeps it, so the evidence that led to the quarantine stays with it after the next night (it ages
    out of ``window_nights`` as any evidence does). A manual quarantine is only released by hand,
    so the window never decides its state."""
    return window if action["action"] == "add" else []


def _apply(state: FlakyState, action: Mapping) -> FlakyState:
    """A manual action: a quarantine by hand keeps the evidence; a release clears it (and the window).
    Anything else is refused: a misspelled action once counted as a release."""
    if action["action"] == "add":
        return FlakyState(state.test_id, "quarantined", state.evidence, 0, action["at"], action["by"], action["why"],
                          manual=True)
    if action["action"] == "release":
        return FlakyState(state.test_id, "released", (), 0, action["at"], action["by"], action["why"])
    raise ValueError(f"quarantine: action: unknown action {action['action']!r}; use add or release")


def states_from_summary(recorded: Mapping, overrides: Mapping | None = None, after: str = "") -> dict[str, FlakyState]:
    """States a night recorded (``summary["flaky"]``: test -> ``FlakyState.to_dict()``), with the manual
    actions made after ``after`` (the night's end) applied: the morning report needs no replay."""
    states = {k: FlakyState.from_dict(v) for k, v in recorded.items()}
    cut = _time(after)
    for action in sorted(overrides_of(overrides), key=lambda a: _time(a["at"])):
        if _time(action["at"]) > cut:
            tid = action["test"]
            states[tid] = _apply(states.get(tid) or FlakyState(tid), action)
    return states


def recorded_states(states: Mapping[str, FlakyState]) -> dict[str, dict]:
    """What a night summary keeps under ``flaky``: every test that is not plainly healthy."""
    return {k: s.to_dict() for k, s in sorted(states.items()) if s.state != "healthy" or s.evidence}


def own_tests(registered: Iterable[str], doc: Mapping | None, *named: Iterable[str]) -> set[str]:
    """The ids of one repo's tests, for flaky states kept apart per repo: its catalog's, those its
    quarantine file names (a test quarantined by hand and since renamed or removed stays listable
    and releasable), and any its own records name (``named``). Every repo's nights share one
    history store and a sample carries no repo, so test ids are what tell repos apart."""
    out = set(registered) | {a["test"] for a in overrides_of(doc)}
    for ids in named:
        out.update(ids)
    return out


def overrides_of(doc: Mapping | None) -> list[dict]:
    """The manual actions in a quarantine document (``{"actions": [{test, action, by, why, at}]}``)."""
    return [dict(a) for a in (doc or {}).get("actions", ())]


#: the longest who (a name or handle) and why (an issue link and a few words) a manual action keeps:
#: both are printed whole by `quarantine list` and the report, and kept in the document for good
MAX_TEXT = {"--by": 100, "--why": 500}


def length_problem(flag: str, value: str) -> str | None:
    """Why a --by/--why value is too long to record, or None."""
    most = MAX_TEXT[flag]
    if len(value.strip()) <= most:
        return None
    return (f"{flag}: {len(value.strip())} characters; give at most {most} ({_HINT[flag]}; a long story belongs in "
            "the issue it links to)")


def record(doc: Mapping | None, test: str, action: str, by: str, why: str, at: str) -> dict:
    """The document with one more manual action; who and why are required (they are the point)."""
    if action not in ACTIONS:
        raise ValueError(f"quarantine: action: unknown action {action!r}; use add or release")
    for name, value in (("test", test), ("--by", by), ("--why", why)):
        if not value or not value.strip():
            raise ValueError(f"quarantine {action}: {name}: must not be empty; say {_HINT[name]}")
        too_long = length_problem(name, value) if name != "test" else None
        if too_long:
            raise ValueError(f"quarantine {action}: {too_long}")
    bad_id = _id_problem(test)
    if bad_id:
        raise ValueError(f"quarantine {action}: TEST: {bad_id}")
    actions = overrides_of(doc)
    actions.append({"test": test, "action": action, "by": by.strip(), "why": why.strip(), "at": at})
    return {"version": 1, "actions": actions}


def not_releasable(state: FlakyState | None) -> str | None:
    """Why releasing this test would change nothing (where it stands instead), or None when it is quarantined.

    A release of a test that is not quarantined used to be recorded and reported as done, which
    hid a mistyped or wrong test id behind a success.
    """
    if state is None:
        return "it is healthy, not quarantined"
    if state.state == "quarantined":
        return None
    if state.state == "released":
        return f"it was already released by {state.by or '-'} at {state.since or '-'}: {state.why or '-'}"
    return f"it is {state.state}, not quarantined"


def not_addable(state: FlakyState | None) -> str | None:
    """Why quarantining this test by hand would change nothing, or None. A test the rules
    quarantined can still be held by hand (a manual quarantine outlasts clean nights)."""
    if state is not None and state.state == "quarantined" and state.manual:
        return f"it is already quarantined by {state.by or '-'} since {state.since or '-'}: {state.why or '-'}"
    return None


_WHO, _WHY = "who decides (a name or handle)", "why, e.g. an issue link"
_HINT = {"test": "which test (its id as `nightly catalog` prints it)", "--by": _WHO, "--why": _WHY, "by": _WHO, "why": _WHY}

ACTIONS = ("add", "release")
#: the fields of every manual action, all strings
ACTION_FIELDS = ("test", "action", "by", "why", "at")


def doc_problems(doc: object) -> list[tuple[tuple, str]]:
    """What is wrong with a quarantine document, as (JSON path, message) pairs; [] when it can be used.

    Strict, because anything read loosely is lost on the next write: a misspelled ``actions`` read
    as no actions was rewritten with only the next maintainer's action.
    """
    if not isinstance(doc, Mapping):
        return [((), f'expected {{"version": 1, "actions": [...]}}, got {type(doc).__name__}')]
    out = [((key,), f"unknown key{_did_you_mean(key, ('version', 'actions'))} a quarantine document is "
                    '{"version": 1, "actions": [...]}') for key in doc if key not in ("version", "actions")]
    if "version" not in doc:
        out.append((("version",), 'missing; a quarantine document is {"version": 1, "actions": [...]}'))
    elif type(doc["version"]) is not int or doc["version"] != 1:
        out.append((("version",), f"expected 1, got {doc['version']!r} (written by a newer nightly-e2e?)"))
    actions = doc.get("actions")
    if "actions" not in doc:
        if not out:
            out.append((("actions",), 'missing; a quarantine document is {"version": 1, "actions": [...]}'))
    elif not isinstance(actions, list):
        out.append((("actions",), f"expected a list of actions, got {type(actions).__name__}"))
    else:
        for i, action in enumerate(actions):
            out += _action_problems(("actions", i), action)
    return out


def _action_problems(path: tuple, a: object) -> list[tuple[tuple, str]]:
    shape = ", ".join(ACTION_FIELDS)
    if not isinstance(a, Mapping):
        return [(path, f"expected an object {{{shape}}}, got {type(a).__name__}")]
    out = []
    for key, value in a.items():
        where = (*path, key)
        if key not in ACTION_FIELDS:
            out.append((where, f"unknown key{_did_you_mean(key, ACTION_FIELDS)} an action has {shape}"))
        elif not isinstance(value, str):
            out.append((where, f"expected a string, got {value!r} ({type(value).__name__})"))
        elif key in ("by", "why") and not value.strip():
            out.append((where, f"must not be empty; say {_HINT[key]}"))
        elif key == "action" and value not in ACTIONS:
            out.append((where, f"unknown action {value!r}; use add or release"))
        elif key == "at" and parse_time(value) is None:
            out.append((where, f"{value!r} is not an ISO-8601 time; write it like 2026-11-01T09:00:00+00:00"))
        elif key == "test" and (bad := _id_problem(value)):
            out.append((where, bad))
    missing = [k for k in ACTION_FIELDS if k not in a]
    if missing:
        out.append((path, f"missing {', '.join(missing)}; every action needs {shape}"))
    return out


def _id_problem(test: str) -> str | None:
    from pipelines.core.catalog.ids import id_problem  # the catalog's own rule for ids from outside

    why = id_problem(test)
    return f"{test!r} is not a test id ({why}); use the id as `nightly catalog` prints it" if why else None


def _did_you_mean(key: object, known: Sequence[str]) -> str:
    """``; did you mean 'x'?`` for a near miss, else ``;``: the sentence goes on after it."""
    import difflib

    near = difflib.get_close_matches(str(key), known, n=1)
    return f"; did you mean {near[0]!r}?" if near else ";"


@dataclass(frozen=True)
class Verdict:
    """Whether the night failed, and which failures a quarantine excused (never infra or bad nodes)."""

    failed: tuple[str, ...]
    excused: tuple[str, ...]
    infra: tuple[str, ...]
    bad_nodes: tuple[str, ...]
    #: tests whose last attempt the run's interruption cut short (not the test's doing, not a pass either)
    interrupted: tuple[str, ...] = ()
    #: failed tests whose automatic quarantine ended (their state's ``why`` says why): in ``failed`` too
    quarantine_ended: tuple[str, ...] = ()
    #: tests the night was to launch that have no attempt: it stopped (a signal, an error) before they
    #: started. Not the test's doing, and no pass either
    never_started: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """A bad node alone does not fail the night: its failures were retried elsewhere, and a test
        whose retry failed too (or that had nowhere else to go) is in ``failed``."""
        return not (self.failed or self.infra or self.interrupted or self.never_started)


def night_verdict(attempts: Iterable[Attempt], states: Mapping[str, FlakyState],
                  history: Mapping[str, Iterable[str]] | None = None, launched: Iterable[str] = (),
                  named: Iterable[str] = (), suspected: Iterable[str] = ()) -> Verdict:
    """Each test's last attempt decides; a quarantined test's failure is excused unless its node was
    bad or suspect (a quarantine never hides a node: one failing a test a night is only seen across
    nights, and its victims look flaky).
    ``named``, ``suspected``: the nodes the night named or suspected while it ran (``Night.nodes_acted_on``),
    bad or suspect here too though the findings at its end faded (later passes elsewhere lowered the
    rates): the record keeps them in ``bad_nodes``, and the verdict must say the same nodes.
    ``history``: ``passed_nodes`` of the runs before, as the night judged its nodes with. ``states``
    are those the night started with (:func:`for_tonight`): a quarantine that ended is no excuse.
    ``launched``: the tests the night was to launch; those without an attempt never started."""
    attempts = list(attempts)
    quarantined = [t for t, st in states.items() if st.state == "quarantined"]
    findings, suspects = assess_nodes(attempts, history=history, unreliable=quarantined)
    bad = {f.node for f in findings} | set(named)
    suspects = (*suspects, *suspected)
    last: dict[str, Attempt] = {}
    for a in attempts:
        last[a.test_id] = a
    failed, excused, infra, interrupted, lapsed = [], [], [], [], []
    for tid, a in last.items():
        if a.outcome == "infra_error":
            infra.append(tid)
        elif a.outcome == "interrupted":
            interrupted.append(tid)
        elif a.outcome in _FAIL:
            state = states.get(tid, FlakyState(tid))
            (excused if state.state == "quarantined" and a.node not in bad and a.node not in suspects
             and not failing_there_only(tid, a.node, history) else failed).append(tid)
            if state.lapsed:
                lapsed.append(tid)
    never = tuple(dict.fromkeys(t for t in launched if t not in last))
    return Verdict(tuple(failed), tuple(excused), tuple(infra), tuple(sorted(bad)), tuple(interrupted), tuple(lapsed),
                   never)


def failing_there_only(test_id: str, node: str, history: Mapping[str, Iterable[str]] | None) -> bool:
    """Whether a quarantined test's failure on ``node`` looks like the node's, not the test's: every failure
    of it in the recent runs was on ``node`` too, and it passed on another node. A node that fails one
    test a night quarantines its victims by their flips (node against no node) nights before the
    cross-night rule can suspect it; a flaky test's failures land on any node."""
    if not node or not isinstance(history, NodeHistory):
        return False
    nodes = {n for run in history.runs for t, n in run.failures if t == test_id and n}
    return nodes == {node} and bool(set(history.get(test_id, ())) - {node})


def ended_notes(v: Verdict, states: Mapping[str, FlakyState]) -> list[str]:
    """The night's note for each failure its ended quarantine no longer excuses, with why."""
    return [f"{tid} failed and fails the night: {states[tid].why} (`nightly quarantine list`)"
            for tid in v.quarantine_ended if tid in states]


def verdict_record(v: Verdict) -> dict:
    """The verdict as a night's record keeps it (``recorded_verdict`` reads it back)."""
    return {"ok": v.ok, "failed": list(v.failed), "excused_quarantined": list(v.excused), "infra": list(v.infra),
            "bad_nodes": list(v.bad_nodes), "interrupted": list(v.interrupted),
            "quarantine_ended": list(v.quarantine_ended), "never_started": list(v.never_started)}


def recorded_verdict(summary: Mapping) -> Verdict | None:
    """The verdict the night itself reached (its exit status), as its record keeps it; None for a
    record written before verdicts were kept. A report must not recompute it from this morning's
    quarantine: releasing a test would turn a night that passed into a failed one after the fact."""
    v = summary.get("verdict")
    if not isinstance(v, Mapping) or "failed" not in v:
        return None
    return Verdict(tuple(v.get("failed", ())), tuple(v.get("excused_quarantined", ())), tuple(v.get("infra", ())),
                   tuple(v.get("bad_nodes", ())), tuple(v.get("interrupted", ())), tuple(v.get("quarantine_ended", ())),
                   tuple(v.get("never_started", ())))


def unlisted(v: Verdict, attempts: Iterable[Attempt]) -> dict[str, str]:
    """Test id -> outcome of each test whose last attempt did not pass and that the verdict lists nowhere
    (failed, excused, infra, interrupted): a record whose verdict its own attempts contradict (edited by
    hand, or written by a buggy version). Empty for a consistent record."""
    last: dict[str, str] = {}
    for a in attempts:
        last[a.test_id] = a.outcome
    listed = {*v.failed, *v.excused, *v.infra, *v.interrupted}
    return {t: o for t, o in last.items() if o not in ("passed", "skipped") and t not in listed}


def with_unlisted(v: Verdict, missing: Mapping[str, str]) -> Verdict:
    """``v`` with the tests :func:`unlisted` found, each where its outcome puts it (a failure is not excused:
    the record does not say the night excused it)."""
    infra = tuple(t for t, o in missing.items() if o == "infra_error")
    interrupted = tuple(t for t, o in missing.items() if o == "interrupted")
    failed = tuple(t for t in missing if t not in (*infra, *interrupted))  # failed, timed_out, or unknown
    return replace(v, failed=(*v.failed, *failed), infra=(*v.infra, *infra), interrupted=(*v.interrupted, *interrupted))


def runnable(test_ids: Iterable[str], states: Mapping[str, FlakyState], rules: FlakyRules) -> list[str]:
    """The tests to launch: all of them, or without the quarantined ones when ``run_quarantined`` is off."""
    if rules.run_quarantined:
        return list(test_ids)
    return [t for t in test_ids if states.get(t, FlakyState(t)).state != "quarantined"]
