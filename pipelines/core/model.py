"""The records that flow through the loop: catalog -> plan -> launch -> history -> calibrate.

Plain frozen dataclasses with no Dagster, Kubernetes or boto3 import, so every stage can be
unit-tested on its own and every edge converts foreign payloads into these once.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal, get_args

Backend = Literal["cuda", "rocm", "cpu"]
Outcome = Literal["passed", "failed", "timed_out", "infra_error", "skipped", "interrupted"]
RequirementKind = Literal["model", "dataset", "conversion"]

#: every outcome an attempt can have
OUTCOMES: frozenset[str] = frozenset(get_args(Outcome))
#: Outcomes that say something about the test itself (infra errors and skips do not).
TEST_OUTCOMES: frozenset[str] = frozenset({"passed", "failed", "timed_out"})


@dataclass(frozen=True)
class Problem:
    """One thing wrong with the input, located precisely enough to fix it.

    Renders as ``path:line: field: message`` (the format compilers and linters use) so editors
    and CI annotations can jump to it.
    """

    path: str
    line: int
    field: str
    message: str

    def __str__(self) -> str:
        # line 0: the path is no file but a flag's value (``--repo /tmp/nosuch``): no line to jump to
        return f"{self.path}:{self.line}: {self.field}: {self.message}" if self.line else \
            f"{self.path}: {self.field}: {self.message}"


class CatalogError(ValueError):
    """Raised when input cannot be read at all; carries the located problems."""

    def __init__(self, problems: list[Problem] | Problem):
        self.problems = [problems] if isinstance(problems, Problem) else list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


@dataclass(frozen=True)
class Requirement:
    """Something a test needs before it runs: model weights, a dataset or a converted checkpoint.

    ``key`` is the Dagster partition key of the asset that builds it; ``path`` is where the test
    expects it inside its container (e.g. ``/root/models/Qwen3-0.6B``).
    """

    kind: RequirementKind
    key: str
    source: str
    path: str
    #: conversion arguments (model_name, megatron_model_type, num_gpus_per_node, extra_args ...)
    params: tuple[tuple[str, str], ...] = ()
    #: keys of the requirements this one is built from (a conversion needs its model)
    depends_on: tuple[str, ...] = ()


@dataclass(frozen=True)
class Test:
    """One registered e2e test (one registration, or one template matrix entry)."""

    id: str
    path: str
    backend: Backend
    suite: str
    gpus: int
    est_time: int
    labels: tuple[str, ...] = ()
    nightly: bool = False
    disabled: str | None = None
    #: what its samples are keyed by: the file's sha256, or for a template test :func:`template_digest`
    sha256: str = ""
    line: int = 1
    hardware: str = ""
    #: where est_time came from: "registered", "history" or "default" (uncalibrated)
    est_source: str = "registered"
    fmt: str = "registry"
    env: tuple[tuple[str, str], ...] = ()
    args: tuple[str, ...] = ()
    requirements: tuple[str, ...] = ()
    unresolved: tuple[str, ...] = ()
    #: what nightly=True means in the test's framework: "also" (M) or "exclusive" (SGLang family)
    nightly_rule: str = "also"
    #: other template jobs that list this same entry (each job is a suite ``--suite`` selects)
    also_suites: tuple[str, ...] = ()
    #: the registered est_time as its file writes it when that is not whole seconds (SGLang's ``12.5``):
    #: ``est_time`` is it rounded up, which plans and timeouts use; calibration shows the file's value
    est_literal: float | None = None

    @property
    def enabled(self) -> bool:
        return self.disabled is None

    @property
    def uncalibrated(self) -> bool:
        return self.est_source == "default"


@dataclass(frozen=True)
class Discovery:
    """Where the framework's runner collects test files: folders of the repository (``.`` = all of it)
    and file-name globs, less excluded names. A changed file outside it is library code, whatever its
    name (SGLang's ``python/sglang/test/test_utils.py``)."""

    roots: tuple[str, ...] = ("tests",)
    globs: tuple[str, ...] = ("test_*.py",)
    exclude: tuple[str, ...] = ()


@dataclass(frozen=True)
class Catalog:
    """What a framework repository registers, what its tests need, and what was wrong with it."""

    repo: str
    tests: tuple[Test, ...]
    requirements: tuple[Requirement, ...] = ()
    problems: tuple[Problem, ...] = ()
    #: human-readable notes on what was assumed for an unconfigured repo
    assumptions: tuple[str, ...] = ()
    #: where the runner the catalog was read for collects test files
    discovery: Discovery = Discovery()
    #: how the repo declares its tests: ``registry`` (register calls in the files) or ``template`` (a
    #: workflow template lists them), as the catalog read it
    fmt: str = "registry"

    def by_id(self) -> dict[str, Test]:
        return {t.id: t for t in self.tests}

    def requirement(self, key: str) -> Requirement:
        for r in self.requirements:
            if r.key == key:
                return r
        raise KeyError(key)


@dataclass(frozen=True)
class Pool:
    """Identical GPU nodes that tests of some hardware run on."""

    name: str
    nodes: int
    gpus_per_node: int

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node


@dataclass(frozen=True)
class Assignment:
    """One test placed on one node of a pool for a predicted interval."""

    test_id: str
    pool: str
    node: int
    start_s: float
    end_s: float
    gpus: int
    timeout_s: int
    #: 0 = run first; the dispatcher starts tests in this order as GPUs free up
    priority: int = 0


@dataclass(frozen=True)
class Plan:
    """A night's schedule and the figures that say how good it is."""

    assignments: tuple[Assignment, ...]
    makespan_s: float
    lower_bound_s: float
    unplanned: tuple[str, ...] = ()
    #: per pool: makespan, lower bound, utilization
    pools: tuple[tuple[str, float, float, float], ...] = ()
    #: planned from measured durations (plan/durations.py): makespan over simulated noisy nights;
    #: 0.0 when planned from est_time alone
    predicted_median_s: float = 0.0
    predicted_p90_s: float = 0.0
    #: per test: (test_id, median s, p90 s, source) the plan assumed; () from est_time. source: "history"
    #: (passing runs), "timeouts" (only timed out: at least the timeout) or "fallback" (est_time / 1.25)
    expected: tuple[tuple[str, float, float, str], ...] = ()
    #: per test whose duration is not from its passing runs: (test_id, what it rests on, in words:
    #: "no history: est_time / 1.25", "timed out in its last 5 runs: at least 1800 s", ...)
    duration_notes: tuple[tuple[str, str], ...] = ()

    @property
    def ratio(self) -> float:
        return self.makespan_s / self.lower_bound_s if self.lower_bound_s else 1.0

    def ordered(self) -> list[Assignment]:
        return sorted(self.assignments, key=lambda a: (a.priority, a.start_s, a.test_id))


@dataclass(frozen=True)
class Attempt:
    """What one launch of one test did; the same record from every launcher."""

    test_id: str
    outcome: Outcome
    elapsed_s: float
    started_at: str
    attempt: int = 1
    node: str = ""
    gpu_slots: tuple[int, ...] = ()
    exit_code: int | None = None
    reason: str = ""
    log_path: str = ""
    timeout_s: int = 0
    details: dict[str, str] = field(default_factory=dict, compare=False)


#: a runner config naming a size, not a GPU type (SGLang's ``1-gpu-large``)
UNTYPED_RUNNER = re.compile(r"^\d+-gpu-[^0-9]*$")


def names_no_gpu_type(test: Test) -> bool:
    """Whether ``test`` runs on whichever pool takes it: its registration names no GPU type (framework
    S's template entries, SGLang's ``nightly-1-gpu``), only a runner size (``1-gpu-large``), or it needs
    no GPU. Its runs are keyed by the hardware of the pool they ran on (``plan.cluster.ran_on``), and
    its est_time, one literal whatever runs it, is calibrated from its runs on every hardware."""
    return test.gpus == 0 or not test.hardware or bool(UNTYPED_RUNNER.match(test.hardware))


@dataclass(frozen=True)
class Sample:
    """One attempt as history keeps it: the evidence calibration is computed from."""

    test_id: str
    hardware: str
    sha256: str
    outcome: Outcome
    elapsed_s: float
    started_at: str
    node: str = ""
    image: str = ""
    run_id: str = ""
    attempt: int = 1
    source: str = ""
    #: True when the attempt was cut by its timeout (its elapsed says nothing about the test)
    capped: bool = False
    #: why this sample is implausible (negative, NaN, over the ceiling); kept, never used
    outlier: str = ""
    #: the night's extra environment as ``env_digest`` gives it ("" for none, and in older records)
    env: str = ""
    #: an infra error's kind, the launcher's ``Attempt.reason`` ("unknown" when it gave none); "" for
    #: other outcomes and in older records. Flaky history needs it: only a node fault
    #: (``health.NODE_FAULTS``) says the node's other failures were not the tests'
    reason: str = ""


def template_digest(file_sha256: str, gpus: int, env: Iterable[tuple[str, str]], args: Iterable[str]) -> str:
    """The digest a template test's samples are keyed by: its file's sha256 and what its entry sets (the GPUs it
    runs on, the environment its job gets, the arguments). A registry test's registration is in its file, so
    the file's sha256 covers it; a template entry is not, and a new ``num_gpus`` or ``enable_eval`` must make
    earlier runs stale evidence as a file edit does. "" when the file's digest is not known."""
    if not file_sha256:
        return ""
    setup = json.dumps({"gpus": gpus, "env": [list(pair) for pair in env], "args": list(args)}, sort_keys=True)
    return hashlib.sha256(f"template-test-v1\n{file_sha256}\n{setup}".encode()).hexdigest()


#: a name word that says the variable holds a credential (``WANDB_API_KEY``, ``HF_TOKEN``, ``DB_PASSWORD``)
_SECRET_WORD = re.compile(r"(?:^|[^A-Z0-9])(?:KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH|COOKIE)S?(?:$|[^A-Z0-9])",
                          re.IGNORECASE)


def is_secret_name(name: str) -> bool:
    """Whether an environment variable's name says it holds a credential (KEY, TOKEN, SECRET,
    PASSWORD, PASSWD, CREDENTIAL, AUTH or COOKIE as a word of it, any case)."""
    return bool(_SECRET_WORD.search(name))


def env_digest(env: Iterable[tuple[str, str]]) -> str:
    """A night's extra environment (``--env``, a run's ``env_from``) as its records keep it: the
    names and a short hash of names and values, e.g. ``MINIRL_FAIL#3f2a9c1b0d4e``; "" for none.
    Never the values: they may be secrets. Two nights with the same one ran under the same
    environment, which flaky evidence needs (a failure injected one night is no flip). A
    credential's value (:func:`is_secret_name`) is left out of the hash, only its name counts: a
    token rotated between nights changes nothing about how the tests run."""
    pairs = sorted(env)
    if not pairs:
        return ""
    hashed = [(name, None if is_secret_name(name) else value) for name, value in pairs]
    digest = hashlib.sha256(json.dumps(hashed).encode()).hexdigest()[:12]
    return ",".join(name for name, _ in pairs) + "#" + digest


@dataclass(frozen=True)
class Estimate:
    """A proposed est_time for one (test, hardware) and why."""

    test_id: str
    hardware: str
    current: int
    proposed: int
    samples_used: int
    reason: str
    max_s: float | None = None
    p90_s: float | None = None
    median_s: float | None = None
    stale_samples: int = 0
    sources: tuple[str, ...] = ()
    #: a proposal held back for explicit acceptance (it moves est_time too far in one step)
    held: int | None = None
    #: samples of this test left out as implausible, each with its reason
    outliers: tuple[str, ...] = ()
    #: the calibrated est_time in force (the last calibration's, which the night plans with) when
    #: there is one: the step guard judged from it, not from ``current`` (the registered value)
    in_force: int | None = None
    #: the file's est_time when it is not whole seconds (``Test.est_literal``, SGLang's ``12.5``): ``current``
    #: is it rounded up; the table, evidence and drift show this one, as the file and the patch do
    current_literal: float | None = None

    @property
    def delta(self) -> int:
        return self.proposed - self.current

    @property
    def registered(self) -> float:
        """The est_time the test's file registers, as written (``12.5``, not the rounded-up 13)."""
        return self.current if self.current_literal is None else self.current_literal

    @property
    def registered_proposed(self) -> float:
        """The est_time the file holds after the patch: the literal as written when the proposal is it
        rounded up (12.5 kept as 13: the patch leaves the file alone), else the proposal."""
        return self.registered if self.proposed == self.current else self.proposed

    @property
    def registered_delta(self) -> float:
        """The proposal's change to the file's est_time as written."""
        return self.registered_proposed - self.registered

    @property
    def baseline(self) -> int:
        """The est_time this proposal moves: the one in force, else the registered one."""
        return self.current if self.in_force is None else self.in_force


#: No est_time (nor timeout) above one day: a longer nightly test cannot fit in a night, and a
#: poisoned sample must never set a timeout of years.
MAX_EST_TIME_S = 86_400


def timeout_floor_problem(floor_s: int) -> str:
    """What is wrong with a timeout floor given on the command line or in a run's config ("" if nothing).

    The range is the one assets/repos.yaml accepts (``timeout.floor_s``): a floor of 0 or less
    would let a test with est_time 0 be killed at once, and one above a day hides a hung test
    for the whole night.
    """
    if floor_s < 1:
        return f"{floor_s} is below 1 second; give a floor from 1 to {MAX_EST_TIME_S} seconds, or leave it out for the repo's"
    if floor_s > MAX_EST_TIME_S:
        return (f"{floor_s} is more than one day; give a floor from 1 to {MAX_EST_TIME_S} seconds, "
                "or leave it out for the repo's")
    return ""


def effective_timeout(est_time: int, floor_s: int = 1800, factor: float = 1.25) -> int:
    """The framework runners' per-file timeout: ``max(floor, int(est_time * factor))``, never under 1 s
    (a timeout of 0 would kill a test with est_time 0 before it starts)."""
    return max(1, int(floor_s), int(est_time * factor))
