"""What one run works with, located once from the specs: catalog, pools, stores, cache, launcher.

The Dagster assets, the CLI and the tests reach the deployment through it: the history store,
the state store (summaries, estimates, reports, logs), the input cache and the launcher are all
chosen here by the deployment's name, local by default. What a run *does* is in
``pipelines.execute`` (one generator every way in shares) and in the pure core.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import shlex
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path

from pipelines.core.asset_rules import under_root
from pipelines.core.calibrate import Lineage, calibrate, drift, evidence_csv, near_timeout
from pipelines.core.calibrate.evidence import recorded_floor
from pipelines.core.catalog import load_catalog
from pipelines.core.catalog.ids import safe_filename
from pipelines.core.catalog.requirements import outside_root_problems
from pipelines.core.health import NodeFinding, avoid_nodes, judge_nodes, passed_nodes
from pipelines.core.history import HistoryError, HistoryStore, sample_from_attempt
from pipelines.core.jsonlines import key_lines
from pipelines.core.model import (
    MAX_EST_TIME_S,
    Assignment,
    Attempt,
    Catalog,
    CatalogError,
    Estimate,
    Plan,
    Problem,
    Requirement,
    Sample,
    Test,
    effective_timeout,
    env_digest,
)
from pipelines.core.plan import make_plan, pool_for
from pipelines.core.plan.cluster import ran_on
from pipelines.core.plan.durations import duration_model
from pipelines.core.plan.planner import planned_tests
from pipelines.core.report import Row, attempts_of, near_timeouts, night_rows, replaces_latest
from pipelines.core.runset import RunSelection, RunSet, resolve_run
from pipelines.core.select import SelectionError
from pipelines.core.specs import PoolSpec, RepoSpec, Specs, load_specs, project_path, unconfigured_spec
from pipelines.launch.base import Launcher, LaunchRequest
from pipelines.launch.dispatch import DispatchResult, run_plan
from pipelines.storage.cache import AssetCache, Built
from pipelines.storage.history import history_store, lineage, recorded_patch, successions
from pipelines.storage.state import StateStore, state_store

PROJECT_ROOT = Path(__file__).resolve().parents[1]
log = logging.getLogger(__name__)


def unread_tests(catalog: Catalog, repo: Path) -> Callable[[str], bool] | None:
    """Whether a test id the catalog lacks is one it could not read, not one that is gone: its file (the id
    up to ``::``) has a problem; or, in a template catalog with a problem (an entry it skips), the test file
    is still in the checkout. A deleted file's test is gone. None: the catalog read everything."""
    paths = {p.path for p in catalog.problems}
    if not paths:
        return None
    template = catalog.fmt == "template"

    def unread(test_id: str) -> bool:
        file = test_id.split("::")[0]
        return file in paths or (template and (Path(repo) / file).is_file())

    return unread


def calibrated_est_time(test: Test, calibrated: dict[str, dict], rewrites: Lineage | None = None) -> int | None:
    """Last calibration's est_time for ``test`` when it was made for the test's current file and
    hardware (an entry without hardware, from an older file, is taken for any), else None.

    A file calibrate rewrote since (``--write``, or the night's patch applied) is the same file: its
    entry was stored under the digest before the rewrite, and ``rewrites`` (the recorded digest
    successions) leads from it to the digest now. Without them a proposal the rewrite did not carry
    into the file (left alone, or kept only in the estimates) would be lost the next night."""
    e = calibrated.get(test.id)
    if not e or e.get("hardware", test.hardware) != test.hardware:
        return None
    sha = e.get("sha256")
    if sha == test.sha256 or (rewrites is not None and sha in rewrites.same_revision(test.sha256)):
        return int(e["est_time"])
    return None


def with_calibrated(catalog: Catalog, calibrated: dict[str, dict], rewrites: Lineage | None = None) -> Catalog:
    """The catalog with last calibration's est_time, for tests whose file is unchanged since, or changed
    only by calibrate's own rewrites (any format)."""
    tests = []
    for t in catalog.tests:
        est = calibrated_est_time(t, calibrated, rewrites)
        if est is not None:
            t = dataclasses.replace(t, est_time=est, est_source="history")
        tests.append(t)
    return dataclasses.replace(catalog, tests=tuple(tests))


def in_force_est_times(tests: Iterable[Test], calibrated: dict[str, dict],
                       rewrites: Lineage | None = None) -> dict[tuple[str, str], int]:
    """(test id, hardware) -> the calibrated est_time a night plans ``tests`` with (with_calibrated):
    what the step guard judges the next proposal from (pipelines.core.calibrate.guards)."""
    return {(t.id, t.hardware): est for t in tests
            if (est := calibrated_est_time(t, calibrated, rewrites)) is not None}


def checked_estimates(data: dict, text: str, where: str) -> tuple[dict[str, dict], list[Problem]]:
    """The well-formed entries of an estimates file, and a located problem for each other one.

    An entry is ``{"est_time": whole seconds in 0..MAX_EST_TIME_S, "sha256": "...", "hardware": "..."}``
    (what ``Night.calibrate`` writes; ``hardware`` may be missing in older files); a hand edit or a half-written file must not stop a night, so a
    bad entry only loses its calibrated est_time (the test keeps the registered one).
    """
    good: dict[str, dict] = {}
    bad: list[Problem] = []
    fix = "the test plans with its registered est_time; the next calibration rewrites the entry (or delete the file)"
    lines = key_lines(text)
    for test_id, entry in data.items():
        line = lines.get((test_id,), 1)
        if not isinstance(entry, dict):
            bad.append(Problem(where, line, f"estimates[{test_id!r}]", f"expected an object with est_time and sha256, got "
                                                          f"{type(entry).__name__}; {fix}"))
            continue
        est = entry.get("est_time")
        if isinstance(est, float) and est.is_integer():
            est = int(est)
        if isinstance(est, bool) or not isinstance(est, int) or not 0 <= est <= MAX_EST_TIME_S:
            bad.append(Problem(where, lines.get((test_id, "est_time"), line), f"estimates[{test_id!r}].est_time",
                               f"expected whole seconds from 0 to {MAX_EST_TIME_S}, got {est!r}; {fix}"))
            continue
        if not isinstance(entry.get("sha256"), str):
            bad.append(Problem(where, lines.get((test_id, "sha256"), line), f"estimates[{test_id!r}].sha256",
                               f"expected the test file's sha256 as text, got {entry.get('sha256')!r}; {fix}"))
            continue
        if "hardware" in entry and not isinstance(entry["hardware"], str):  # would match no test: silently unused
            bad.append(Problem(where, lines.get((test_id, "hardware"), line), f"estimates[{test_id!r}].hardware",
                               f"expected the suite's hardware as text (e.g. h200), got {entry['hardware']!r}; {fix}"))
            continue
        good[test_id] = {**entry, "est_time": est}
    return good, bad


#: the folder under the home where a night keeps what its stores refused (Night.keep_unsaved)
UNSAVED = "unsaved"


class SamplesNotStored(HistoryError):
    """``Night.run``: every test ran, but the history store refused these samples, the retry too."""

    def __init__(self, message: str, samples: list, result: DispatchResult):
        super().__init__(message)
        self.samples = samples
        self.result = result


class ResultsNotStored(RuntimeError):
    """The stores refused a night's results; ``folder`` keeps them (Night.keep_unsaved says how to re-add)."""

    def __init__(self, message: str, folder: Path):
        super().__init__(message)
        self.folder = folder


def unsaved_roots(home: Path) -> list[Path]:
    """Where a night keeps what its stores refused: ``<home>/unsaved``, else (the home's disk is full, or
    it went read-only) ``nightly-unsaved/<home id>`` in the temp folder ($TMPDIR), which is often another
    disk. The home id (12 hex digits of the home's path) keeps nights of different homes on one host apart:
    one night's message must never name another home's kept results."""
    import hashlib
    import tempfile

    home = Path(home)
    home_id = hashlib.sha256(str(home.resolve()).encode()).hexdigest()[:12]
    return [home / UNSAVED, Path(tempfile.gettempdir()) / f"nightly-{UNSAVED}" / home_id]


def unsaved_folder(home: Path, run_id: str) -> Path | None:
    """The folder that keeps run ``run_id``'s refused results (with its README.txt), None when none does."""
    for root in unsaved_roots(home):
        for record in sorted(root.glob(f"*/state/runs/{safe_filename(run_id)}.json")):
            if (record.parents[2] / "README.txt").is_file():
                return record.parents[2]
    return None


def unsaved_since(home: Path, since: float) -> Path | None:
    """The newest kept folder whose README.txt was written at or after ``since`` (a time.time()), for a
    command whose run ended without a run id (Dagster's own storage failed); None when there is none."""
    found = [(readme.stat().st_mtime, readme.parent) for root in unsaved_roots(home)
             for readme in root.glob("*/README.txt") if readme.stat().st_mtime >= since]
    return max(found)[1] if found else None


def _text_of(path: Path) -> str | None:
    """A test file's text for :func:`outside_root_problems` (None: unreadable; its problem then names the
    test's registration line)."""
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def default_home() -> Path:
    """Where the embedded default keeps its state: ``$NIGHTLY_HOME`` or ``<project>/.nightly``."""
    return Path(os.environ.get("NIGHTLY_HOME") or PROJECT_ROOT / ".nightly").resolve()


def _quarantined_how(state) -> str:
    """How a held test came to be quarantined, in the hold's words (by hand, with who; or the flaky rules)."""
    return f"quarantined by hand by {state.by}" if state.manual and state.by else (
        "quarantined by hand" if state.manual else "quarantined as flaky")


@dataclass(frozen=True)
class NightSettings:
    """What a run chooses; everything else comes from ``assets/``."""

    home: Path = field(default_factory=default_home)
    assets_dir: Path | None = None
    repo: str | None = None
    deployment: str | None = None
    cadence: str = "nightly"
    labels: tuple[str, ...] = ()
    suites: tuple[str, ...] = ()
    #: extra environment for every test (e.g. the example's failure injection)
    extra_env: tuple[tuple[str, str], ...] = ()
    #: override the repo's timeout floor (seconds)
    timeout_floor_s: int | None = None
    image: str = ""


class Night:
    """Everything one night works with, loaded once from the specs and the state folder."""

    def __init__(self, settings: NightSettings | None = None, run_id: str | None = None):
        self.settings = settings or NightSettings()
        self.run_id = run_id or uuid.uuid4().hex[:12]
        #: the night's name: when it started, and which run (two runs may start in one second)
        self.night = datetime.now(UTC).strftime("%Y-%m-%dT%H%M%SZ") + "-" + self.run_id.replace("-", "")[:8]
        self.home = Path(self.settings.home)
        #: tonight's image digest per pool (the infra probe's): every pod of the night runs exactly it
        self.image_digests: dict[str, str] = {}
        #: pin_images had a probe's findings (whatever digests they hold): a build need not probe again
        self.images_pinned = False
        #: (node, "named" or "suspect") -> the finding the night first acted on (avoided the node, retried
        #: its failures): a finding can fade as later tests pass, the record keeps what the night did
        self.nodes_acted_on: dict[tuple[str, str], NodeFinding] = {}
        #: the probe's digest per pool, whatever it holds (locally the Python environment's): what samples
        #: record as their image (``tonight``) and local conversions' image
        self.probed_images: dict[str, str] = {}
        self._local_image: str | None = None
        #: a local night's problems of inputs outside /root, each with the tests that need the input
        self._outside_root: dict[Problem, set[str]] = {}
        #: what the launchers noted on the way (unpinned pods, refused cordons) for the night's record
        self.notes: list[str] = []
        #: entries of the estimates file left out for their shape (``calibrated``), each located
        self.estimate_warnings: list[Problem] = []
        #: tonight's logs folder's running lock (night_logs.hold_running): held while this process lives
        self._running_lock = None

    # -- state -------------------------------------------------------------------------
    @cached_property
    def specs(self) -> Specs:
        return load_specs(self.settings.assets_dir)

    @cached_property
    def repo_spec(self) -> RepoSpec:
        """The configured repo, or runner defaults for a checkout nobody configured."""
        from pipelines.core.calibrate.policies import repo_policy  # its framework family's rule when unset

        path, spec = self.specs.locate_repo(self.settings.repo)
        policy, params, _ = repo_policy(spec, path)
        return dataclasses.replace(spec or unconfigured_spec(path), policy=policy,
                                   policy_params=params)

    @cached_property
    def deployment(self):
        return self.specs.deployment(self.settings.deployment)

    @property
    def cache(self) -> AssetCache:
        hub = self.repo_spec.hub
        hub_path = project_path(hub) if hub else None
        return AssetCache(self.home / "cache", hub_path, build_timeout_s=self.deployment.build_timeout_s,
                          verify=self.deployment.cache_verify)

    @cached_property
    def history(self) -> HistoryStore:
        """Local SQLite file by default; S3 when the deployment says ``storage: s3``."""
        return history_store(self.deployment, self.home)

    @cached_property
    def history_at_start(self) -> list[Sample]:
        """The history as this night found it, read once (on S3 a read lists and fetches every
        object): the plan's durations and the node evidence start from it. What must see the
        night's own samples (the flaky states after it, calibration) reads the store afresh."""
        return self.history.read()

    @cached_property
    def state(self) -> StateStore:
        """Summaries, estimates, reports and logs: the state folder, or S3 when ``storage: s3``."""
        return state_store(self.deployment, self.home)

    @property
    def env_digest(self) -> str:
        """The night's extra environment as its record and samples keep it: names and a hash, never values."""
        return env_digest(self.settings.extra_env)

    @property
    def timeout_floor_s(self) -> int:
        if self.settings.timeout_floor_s is not None:
            return self.settings.timeout_floor_s
        return self.repo_spec.timeout_floor_s

    def timeout_for(self, test: Test) -> int:
        return effective_timeout(test.est_time, self.timeout_floor_s, self.repo_spec.timeout_factor)

    # -- catalog -----------------------------------------------------------------------
    def calibrated(self) -> dict[str, dict]:
        """Last calibration's proposals, keyed by test id (only for the file contents they saw).

        An entry of the wrong shape is left out and noted in ``estimate_warnings`` (its test plans
        with the est_time its file registers); a file that is not a JSON object stops the caller.
        """
        good, bad = self._stored_calibrated()
        self.estimate_warnings = bad  # the CLI prints them; the night goes on without those entries
        self.notes.extend(f"estimates entry left out: {p}" for p in bad)  # every way in: the night's record
        return good

    def rewrites_for(self, tests: Iterable[Test], calibrated: dict[str, dict]) -> Lineage | None:
        """Calibrate's est_time rewrites (the history's digest successions), only when an entry of
        ``calibrated`` was made for another digest than its test's file has now (``calibrated_est_time``),
        and read afresh only when the store's record of them changed (``storage.history.lineage``: a code
        server plans at every sensor tick). A history that cannot be read is a note: those tests plan
        with their registered est_time."""
        if all(calibrated[t.id].get("sha256") == t.sha256 for t in tests if t.id in calibrated):
            return None
        try:
            return lineage(self.history)
        except HistoryError as exc:
            note = (f"calibrated est_time of files calibrate rewrote not used: {exc}; those tests plan with the "
                    "est_time their file registers")
            log.warning(note)
            self.notes.append(note)
            return None

    def _stored_calibrated(self) -> tuple[dict[str, dict], list[Problem]]:
        key = self.calibration_keys()["estimates"]
        text = self.state.get(key)
        if text is None:
            return {}, []
        try:
            data = json.loads(text)
            if not isinstance(data, dict):
                raise ValueError(f"expected an object, got {type(data).__name__}")
        except ValueError as exc:
            raise CatalogError(Problem(self.state.uri(key), getattr(exc, "lineno", 1), "estimates",
                                       f"corrupt estimates file ({exc}); delete it, the next calibration writes it again")) from exc
        return checked_estimates(data, text, self.state.uri(key))

    @cached_property
    def catalog(self) -> Catalog:
        problem = self.repo_spec.path_problem(self.specs.root)
        if problem is not None:
            raise CatalogError(problem)
        calibrated = self.calibrated()
        return with_calibrated(self.registered, calibrated, self.rewrites_for(self.registered.tests, calibrated))

    @cached_property
    def registered(self) -> Catalog:
        """The catalog with est_time as written in the files (what calibration and the patch start from)."""
        problem = self.repo_spec.path_problem(self.specs.root)
        if problem is not None:
            raise CatalogError(problem)
        path, configured = self.specs.locate_repo(self.settings.repo)
        # an unconfigured checkout gets spec=None: the catalog detects its dialect and says what it assumed
        catalog = load_catalog(path, spec=configured, specs=self.specs, cache_dir=self.home / "cache")
        if self.deployment.launcher == "local":  # its tests see the cache as /root only: say so at the call
            outside = {r.key for r in catalog.requirements if not under_root(r.path)}
            for t in self._launched([t for t in catalog.tests if outside.intersection(t.requirements)], catalog):
                for problem in outside_root_problems([t], catalog.requirements, lambda rel: _text_of(path / rel)):
                    self._outside_root.setdefault(problem, set()).add(t.id)
            if self._outside_root:
                catalog = dataclasses.replace(catalog, problems=(*catalog.problems, *self._outside_root))
        return catalog

    def _launched(self, tests: list[Test], catalog: Catalog) -> list[Test]:
        """Those of ``tests`` this deployment launches on the settings' cadence: a disabled test's input,
        or one on hardware it never runs, is no problem of its nights (:meth:`problems_for` narrows them
        to a night's selection). All of them when the settings name something unknown (said where the
        selection is resolved)."""
        if not tests:
            return []
        s = self.settings
        try:
            launched = resolve_run(None, catalog.tests, RunSelection(cadence=s.cadence, labels=s.labels,
                                                                     suites=s.suites),
                                   self.deployment.pools, self.deployment.skip_hardware).run
        except SelectionError:
            return tests
        ids = {t.id for t in launched}
        return [t for t in tests if t.id in ids]

    def problems_for(self, runset: RunSet) -> list[Problem]:
        """The catalog's problems that keep a night of ``runset`` from green: an input outside /root of
        a local night counts only when a test it launches needs it (a test it does not launch cannot
        miss it)."""
        run = {t.id for t in runset.run}
        return [p for p in self.catalog.problems if p not in self._outside_root or self._outside_root[p] & run]

    @cached_property
    def tests_by_id(self) -> dict[str, Test]:
        return self.catalog.by_id()

    def selected(self) -> tuple[list[Test], list[Test]]:
        """(tests to run, disabled tests) for the settings' selection: ``runset`` over every test."""
        s = self.settings
        rs = self.runset(None, RunSelection(cadence=s.cadence, labels=s.labels, suites=s.suites))
        return list(rs.run), rs.disabled

    def runset(self, keys: Iterable[str] | None, selection: RunSelection) -> RunSet:
        """What a run of ``keys`` (None = every test) with ``selection`` launches, and why not the rest
        (quarantined tests too, when the repo's ``flaky: run_quarantined`` is off)."""
        rs = resolve_run(keys, self.catalog.tests, selection, self.deployment.pools, self.deployment.skip_hardware)
        return self._hold_quarantined(rs)

    def flaky_rules(self):
        """The repo's ``flaky:`` rules (assets/repos.yaml); a located CatalogError when they are wrong."""
        from pipelines.core.flaky import FlakyRules

        return FlakyRules.for_repo(self.repo_spec)

    def quarantine_doc(self) -> dict:
        """The repo's quarantine document, as `nightly quarantine` reads it (an unconfigured checkout's
        from before its name had a digest too: reporting.state.legacy_doc); a located CatalogError when
        it cannot be used."""
        from pipelines.core.specs import legacy_checkout
        from pipelines.reporting.state import load_doc

        spec = self.repo_spec
        return load_doc(self.state, spec.name, legacy_checkout(spec.path, spec, self.specs.repos))

    def flaky_states(self, tonight: dict[str, tuple[str, str]] | None = None) -> dict:
        """Test id -> FlakyState: history replayed with the quarantine document's manual actions, as
        the night's verdict and `nightly quarantine` see them; with ``tonight`` (test id -> (sha256,
        image)), as a night of that code and image starts (``flaky.for_tonight``). Calibrate's est_time
        rewrites (the history's successions) change no test: a quarantine outlasts them."""
        from pipelines.core.flaky import for_tonight, own_tests, replay

        doc = self.quarantine_doc()
        mine = own_tests((t.id for t in self.catalog.tests), doc)  # every repo's nights share one history store
        rewrites = lineage(self.history)
        states = replay([s for s in self.history.read() if s.test_id in mine], self.flaky_rules(), doc, rewrites)
        return states if tonight is None else for_tonight(states, tonight, self.run_id, rewrites)

    def tonight(self, tests: Iterable[Test]) -> dict[str, tuple[str, str]]:
        """Test id -> (sha256, image) as tonight's samples record them (``run``): the infra probe's
        digest for the test's pool once ``pin_images`` has it, else the night's image setting ("" by
        default, which compares no image). The flaky states a night starts from and the quarantines it
        holds back are judged on this, so the two never disagree on what changed."""
        return {t.id: (t.sha256, self.probed_images.get(self.pool_of(t)) or self.settings.image) for t in tests}

    def quarantine_holds(self, tests: Iterable[Test]) -> dict[str, str]:
        """Test id -> why it is not launched: quarantined as flaky while the repo's
        ``flaky: run_quarantined`` is off (empty when it is on, or the rules are wrong: the
        night's record notes those, see execute.flaky_verdict). Judged with each test's file and image
        tonight as a test that runs is (``flaky.for_tonight``): a held test never runs, so no sample
        of it would ever show that its file changed and its automatic quarantine ended."""
        tests = list(tests)
        try:
            if self.flaky_rules().run_quarantined or not tests:
                return {}
        except CatalogError:
            return {}
        states = self.flaky_states(self.tonight(tests))
        return {t.id: f"{_quarantined_how(states[t.id])} since {states[t.id].since or '?'} and run_quarantined is off "
                      f"(repos.yaml flaky:); `{self._release_command(t.id)}` to run it again"
                for t in tests if getattr(states.get(t.id), "state", "") == "quarantined"}

    def _release_command(self, test_id: str) -> str:
        """The `nightly quarantine release` line that releases ``test_id`` from this night's state, as
        it runs when pasted: the flags it requires, and the repo, home and deployment this night used
        where they are not the defaults the command would take."""
        where = []
        if self.settings.repo:
            where += ["--repo", str(self.settings.repo)]
        if self.home != default_home():
            where += ["--home", str(self.home)]
        if self.settings.deployment:
            where += ["--deployment", self.settings.deployment]
        return " ".join(part for part in (shlex.join(["nightly", "quarantine", "release", test_id]),
                                          "--by <who> --why <why>", shlex.join(where)) if part)

    def _hold_quarantined(self, rs: RunSet) -> RunSet:
        why = self.quarantine_holds(rs.run)
        if not why:
            return rs
        return dataclasses.replace(rs, run=tuple(t for t in rs.run if t.id not in why),
                                   skipped=(*rs.skipped, *((t, why[t.id]) for t in rs.run if t.id in why)))

    # -- plan --------------------------------------------------------------------------
    def plan(self, tests: Iterable[Test], *, pools: Sequence[PoolSpec] | None = None, improve: bool = True) -> Plan:
        """Order and predictions from measured durations (history); timeouts from est_time.

        The one way every caller plans (the night, ``nightly run --list-only``, ``nightly plan``),
        so they predict the same night: the duration model is fitted over the tests the plan places
        (``planned_tests``); a test no pool runs would otherwise widen the spread pooled over them.
        ``pools``: the deployment's unless given (``nightly plan --pool``)."""
        tests = list(tests)
        pools = self.deployment.pools if pools is None else pools
        planned = planned_tests(tests, pools)
        model = duration_model(planned, self.history_at_start, successions=successions(self.history),
                               hardware={t.id: ran_on(t, pool_for(t, pools)) for t in planned})
        return make_plan(tests, pools, timeout_floor_s=self.timeout_floor_s,
                         timeout_factor=self.repo_spec.timeout_factor, improve=improve, durations=model)

    def pool_shapes(self, plan: Plan) -> dict[str, dict[str, int]]:
        """Each pool the plan places tests on, as the deployment in force has it (nodes, GPUs per node):
        the night's record keeps it, so the report's capacity and idle GPU-hours are the pools' own, not
        guessed from the GPU slots the tests happened to use."""
        used = {a.pool for a in plan.assignments}
        return {p.name: {"nodes": p.nodes, "gpus_per_node": p.gpus_per_node}
                for p in self.deployment.pools if p.name in used}

    # -- requirements ------------------------------------------------------------------
    def requirements_for(self, tests: Iterable[Test]) -> list[Requirement]:
        """What the tests need, models and datasets before the conversions built from them."""
        by_key = {r.key: r for r in self.catalog.requirements}
        keys: dict[str, None] = {}
        for t in tests:
            for k in t.requirements:
                for dep in by_key[k].depends_on if k in by_key else ():
                    keys[dep] = None
                keys[k] = None
        # the catalog lists requirements models first, then datasets, then conversions
        return [r for r in self.catalog.requirements if r.key in keys]

    def build(self, req: Requirement) -> Built:
        """Build one input: into the local cache, or on the cluster into the cache PVC (kubernetes)."""
        models = {r.key: r for r in self.catalog.requirements if r.kind == "model"}
        log_path = self.home / "logs" / "builds" / f"{safe_filename(req.key)}.log"
        if self.deployment.launcher == "kubernetes":
            from pipelines.launch.kubernetes.builds import builder_from_deployment
            from pipelines.launch.kubernetes.podspec import pod_env

            if not self.images_pinned:  # built alone (the UI's converted_checkpoints): the image a night pins
                from pipelines.launch.infra import probe

                self.pin_images(probe(self.deployment))
            env = pod_env(self.repo_spec.env, dict(self.settings.extra_env))
            pool = max(self.deployment.pools, key=lambda p: p.gpus_per_node)  # where builds run
            builder = builder_from_deployment(self.deployment, run_id=self.run_id,
                                              digest=self.image_digests.get(pool.name, ""))
            return builder.build(req, models, self.specs.conversion, env, repo=self.repo_spec.path, log_path=log_path)
        return self.cache.build(
            req, repo=self.repo_spec.path, conversion=self.specs.conversion, env=self.test_env(),
            models=models, log_path=log_path, image=self.local_image() if req.kind == "conversion" else "",
            take_gpus=self.conversion_gpus,
        )

    @contextlib.contextmanager
    def conversion_gpus(self, count: int) -> Iterator[tuple[dict[str, str], tuple[int, ...]]]:
        """Hold ``count`` GPUs of the largest pool (where builds run) while a local conversion runs, taken
        as the local launcher takes a test's (the host's ``flock`` GPU locks, shared by every night on it):
        a torchrun converter otherwise lands on GPUs another run's tests hold. Gives the converter's
        ``CUDA_VISIBLE_DEVICES`` and the lock files it inherits; waits (saying who holds them) while they are
        busy, past the build timeout only while nightly tests or builds hold them; once it ends, kills what
        still holds its locks."""
        from pipelines.launch import gpu_slots
        from pipelines.launch.gpu_hold import GpuHold
        from pipelines.launch.local import KILL_GRACE_S, PUMP_JOIN_S
        from pipelines.launch.procs import MARKER, kill_lock_holders
        from pipelines.storage.cache import BuildError

        pool = max(self.deployment.pools, key=lambda p: p.gpus_per_node)
        if count > pool.gpus_per_node:
            raise BuildError(f"the conversion asks for {count} GPUs (num_gpus_per_node) but a {pool.name} node has "
                             f"{pool.gpus_per_node}; lower num_gpus_per_node in the test's convert_checkpoint() call, "
                             "or give the deployment a larger pool in assets/cluster.yaml")
        lock_dir = gpu_slots.host_lock_dir()
        timeout_s = self.deployment.build_timeout_s
        # as a test's wait: past the conversion's own timeout, waits on only while nightly tests hold them
        with GpuHold(lock_dir, pool.name, count, range(pool.nodes), pool.gpus_per_node, subject="conversion",
                     confirm_s=KILL_GRACE_S + PUMP_JOIN_S, log=log) as gpus:
            try:
                gpus.mark()  # another night must not take this process for a stray
                held = gpus.wait(timeout_s)
            except OSError as exc:
                raise BuildError(f"cannot lock GPUs for the conversion in {lock_dir} ({exc.strerror or exc}); make "
                                 f"the folder writable or point {gpu_slots.LOCK_DIR_ENV} at one that is") from None
            if held is None:
                raise BuildError(f"{gpus.busy(gpus.waited_s)}; gave up after the conversion's {timeout_s} s build "
                                 f"timeout: {gpus.strays_text()} is not a nightly test or build (no {MARKER} in its "
                                 "environment), likely a process that escaped a kill; end it to free the GPUs")
            try:
                yield {"CUDA_VISIBLE_DEVICES": ",".join(str(s) for s in held.slots)}, held.fds
            finally:
                # what the converter left that escaped its marker and group but holds its GPU locks (as for a test)
                left = kill_lock_holders(held.paths)
                if left:
                    log.warning("conversion: killed %s, left holding its GPU locks after it ended",
                                ", ".join(left.values()))

    def local_image(self) -> str:
        """What a local conversion runs outside the checkout, as its identity's ``image``: the digest
        the night's infra probe saw for the largest pool (this Python environment's packages unless
        the pool names an image digest; a build on its own probes first), else the environment's own
        digest. A new venv or package version then rebuilds the checkpoints it converted, as a new
        image digest does on Kubernetes; the same environment gives the same digest night after night."""
        if self._local_image is None:
            if not self.images_pinned:  # built alone (the UI's converted_checkpoints): probe as a night does
                from pipelines.launch.infra import probe

                self.pin_images(probe(self.deployment))
            pool = max(self.deployment.pools, key=lambda p: p.gpus_per_node)
            digest = self.probed_images.get(pool.name, "")
            if not digest:
                from pipelines.launch.infra import environment_digest

                digest = environment_digest()
            self._local_image = digest
        return self._local_image

    # -- launch ------------------------------------------------------------------------
    def test_env(self) -> dict[str, str]:
        cache = self.cache
        values = {"cache": str(cache.root), "repo": str(self.repo_spec.path), "home": str(self.home),
                  "hub": str(cache.hub or "")}
        env = {k: v.format(**values) for k, v in self.repo_spec.env.items()}
        if self.repo_spec.importable and "PYTHONPATH" not in env:  # ahead of what this shell has, not instead
            env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(self.repo_spec.path), os.environ.get("PYTHONPATH"))))
        env.update(dict(self.settings.extra_env))
        return env

    def pod_settings(self) -> dict:
        """What every test pod needs beyond its request: its inputs' container paths and its env."""
        from pipelines.launch.kubernetes.podspec import pod_env

        out = {"cache_paths": {r.key: r.path for r in self.catalog.requirements},
               "env": pod_env(self.repo_spec.env, dict(self.settings.extra_env))}
        if self.image_digests:
            out["image_digests"] = dict(self.image_digests)
        return out

    def launcher(self) -> Launcher:
        if self.deployment.launcher == "kubernetes":
            from pipelines.launch.kubernetes import launcher_from_deployment

            # pods see the cache PVC at /root, not this machine's folders (request.env names those)
            return launcher_from_deployment(self.deployment, **self.pod_settings())
        from pipelines.launch.local import LocalLauncher

        return LocalLauncher(self.home, pools=[p.pool() for p in self.deployment.pools], night=self.night,
                             hold_inputs=self.hold_inputs)

    def hold_inputs(self, test: Test) -> tuple[int, ...]:
        """Shared locks on the cached folders ``test`` reads, held (by the local launcher and the test) while
        it runs: a rebuild by another run waits for them before it replaces a folder (:class:`AssetCache`)."""
        by_key = {r.key: r for r in self.catalog.requirements}
        return self.cache.hold_for_reading([by_key[k] for k in test.requirements if k in by_key])

    def pin_images(self, infra: dict[str, dict[str, str]]) -> None:
        """Pods of this night run exactly the digests the infra probe saw (Kubernetes; locally a no-op).
        Its builds too: a build on its own (``build`` before any pin) probes and pins first, so an
        input materialized from the UI is built by the image, and so with the identity, a night uses."""
        self.images_pinned = bool(infra)  # no probe given (run_tests without one): a build probes
        self.probed_images = {pool: info.get("image_digest", "") for pool, info in infra.items()}
        self._local_image = None
        if self.deployment.launcher == "kubernetes":
            self.image_digests = {pool: info["image_digest"] for pool, info in infra.items()
                                  if info.get("image_digest", "").startswith("sha256:")}

    def sweep_pods(self, ended: Callable[[list[str]], Iterable[str]] | None) -> list[str]:
        """Delete our pods left running by runs that ended (Kubernetes; ``ended``: which of the given
        run ids the Dagster instance knows to have ended); returns their names."""
        if self.deployment.launcher != "kubernetes" or ended is None:
            return []
        from pipelines.launch.kubernetes import launcher_from_deployment
        from pipelines.launch.kubernetes.ownership import sweep_stale_pods

        try:
            return sweep_stale_pods(launcher_from_deployment(self.deployment).api, self.deployment,
                                    lambda runs: [r for r in ended(runs) if r != self.run_id])
        except Exception as exc:  # noqa: BLE001 - a sweep that cannot run must not stop the night
            self.notes.append(f"stale pods not swept: {exc}")
            return []

    def reap_orphans(self, refused: Callable[[str], None] | None = None) -> list[Attempt]:
        """Kill test processes an earlier night left behind (a ``kill -9``) and record them as interrupted.
        ``refused`` (the night's say) is told of each running file that is no record, set aside untouched
        (launch.orphans)."""
        return self._reap_orphans(refused) if self.deployment.launcher == "local" else []

    def prune_logs(self) -> str:
        """Mark tonight's logs folder as running (a lock held while this process lives), then remove the
        folders of nights older than the last ``keep_log_nights`` under ``<home>/logs/``; the line saying so
        ("" when nothing was removed). A retention that cannot run never stops the night: it says why."""
        from pipelines.launch.orphans import live_nights
        from pipelines.storage.night_logs import hold_running, prune

        logs = self.home / "logs"
        try:
            if self._running_lock is None:
                self._running_lock = hold_running(logs, self.night)
            done = prune(logs, self.night, self.deployment.keep_log_nights, live_nights(self.home))
        except OSError as exc:
            return f"old night logs not removed: {logs}: {exc.strerror or exc}; check the folder's permissions"
        return done.line(logs)

    def _reap_orphans(self, refused: Callable[[str], None] | None) -> list[Attempt]:
        from pipelines.core.model import Sample
        from pipelines.launch.orphans import reap_orphans

        by_id = self.tests_by_id

        def record(a: Attempt) -> None:
            test = by_id.get(a.test_id)
            sample = sample_from_attempt(a, test, a.details.get("run_id", ""), self.settings.image,
                                         hardware=self.hardware_on(test)) if test else \
                Sample(a.test_id, "", "", a.outcome, float(a.elapsed_s), a.started_at, node=a.node,
                       run_id=a.details.get("run_id", ""), attempt=a.attempt, source="orphan")
            self.history.append([sample])

        return reap_orphans(self.home, record=record, refused=refused)

    def log_path(self, test: Test, attempt: int) -> Path:
        return self.home / "logs" / self.night / f"{safe_filename(test.id)}.attempt{attempt}.log"

    def request(self, assignment: Assignment, node: int, slots: tuple[int, ...], attempt: int,
                avoid: tuple[str, ...]) -> LaunchRequest:
        test = self.tests_by_id[assignment.test_id]
        return LaunchRequest(
            test=test, repo_path=self.repo_spec.path, timeout_s=assignment.timeout_s,
            log_path=self.log_path(test, attempt), env=self.test_env(), attempt=attempt,
            run_id=self.run_id, night=self.night, pool=assignment.pool, node=node, gpu_slots=slots,
            avoid_nodes=avoid,
        )

    def run(self, plan: Plan, on_start: Callable | None = None, on_finish: Callable[[Attempt], None] | None = None,
            launcher: Launcher | None = None, stop: threading.Event | None = None,
            images: dict[str, str] | None = None, ended: Sequence[Attempt] = ()) -> DispatchResult:
        """Dispatch the plan; each finished attempt goes to history before ``on_finish`` sees it.
        ``ended``: attempts of tests that never reached the plan (an input they need failed to build),
        which go to history with the night's own, as every attempt does."""
        by_id = self.tests_by_id
        store = self.history
        seen: list[Attempt] = []

        lock = threading.Lock()

        def sample(attempt: Attempt):
            test = by_id[attempt.test_id]
            image = attempt.details.get("image_digest") or (images or {}).get(self.pool_of(test)) or self.settings.image
            made = sample_from_attempt(attempt, test, self.run_id, image, env=self.env_digest,
                                       hardware=self.hardware_on(test))
            kept = self.log_home(attempt)  # not yet uploaded (a store outage): where the retry puts it
            return dataclasses.replace(made, source=kept) if kept and not attempt.details.get("log_uri") else made

        unsaved: list = [sample(a) for a in ended]  # stored with the first finished attempt, or at the end

        def finished(attempt: Attempt) -> None:
            self.store_log(attempt)  # before history: a sample's source is the copy that outlives the pod
            with lock:
                unsaved.append(sample(attempt))
                try:
                    store.append(list(unsaved))
                    unsaved.clear()
                except HistoryError as exc:  # keep the night going; the samples are retried below
                    log.warning("history store unavailable, %d sample(s) kept for a retry: %s", len(unsaved), exc)
                seen.append(attempt)
            if on_finish:
                on_finish(attempt)

        recent = self.node_history
        pool_by_test = {a.test_id: a.pool for a in plan.assignments}  # a node is judged within its pool

        def bad_nodes() -> tuple[str, ...]:
            """Nodes tonight's attempts so far prove bad or make suspect: later attempts keep off
            them, and each failure there is retried once elsewhere (the evidence that names a suspect)."""
            with lock:
                attempts = list(seen)
            findings, suspects = judge_nodes(attempts, history=recent, pools=pool_by_test)
            with lock:  # the evidence as it stood when the night first acted on the node (named, suspect)
                for f in findings:
                    self.nodes_acted_on.setdefault((f.node, "named"), f)
                for f in suspects:
                    self.nodes_acted_on.setdefault((f.node, "suspect"), f)
            return avoid_nodes(findings, [f.node for f in suspects])

        pools = [p.pool() for p in self.deployment.pools]
        result = run_plan(plan, pools, launcher or self.launcher(), self.request, max_infra_retries=self.deployment.max_infra_retries,
                          on_start=on_start, on_finish=finished, avoid_nodes=bad_nodes, stop=stop)
        if unsaved:
            try:
                store.append(unsaved)
            except HistoryError as exc:  # the caller keeps them (keep_unsaved): never lost in memory
                raise SamplesNotStored(str(exc), list(unsaved), result) from exc
        return result

    @cached_property
    def node_history(self) -> dict[str, frozenset[str]]:
        """Per test, the nodes it passed on in its recent runs before this one: what says a test
        that failed on a suspect node tonight is fine (pipelines.core.health.passed_nodes), from
        the history the night started with (tonight's own samples are left out anyway)."""
        try:
            return passed_nodes(self.history_at_start, exclude_run=self.run_id)
        except HistoryError as exc:  # the night goes on judging nodes by tonight's attempts alone
            log.warning("history store unavailable for judging nodes: %s", exc)
            return {}

    def store_log(self, attempt: Attempt, notes: list[str] | None = None) -> str | None:
        """Put the attempt's log in the state store (S3 in production, where the pod's folder goes
        with the pod) as ``logs/<night>/<file>``, once: where it went is kept in
        ``attempt.details["log_uri"]`` and returned. None for local state (the log is already in
        place) or a failure, which goes to ``notes`` when given (else the log): a later call tries again."""
        from pipelines.storage.state import StateError

        if attempt.details.get("log_uri"):
            return attempt.details["log_uri"]
        key = self.log_key(attempt)
        if key is None:
            return None
        try:
            attempt.details["log_uri"] = self.state.put_file(key, Path(attempt.log_path))
        except StateError as exc:
            if notes is None:
                log.warning("log of %s not stored yet: %s", attempt.test_id, exc)
            else:
                notes.append(f"log of {attempt.test_id} not stored: {exc}")
            return None
        return attempt.details["log_uri"]

    def log_key(self, attempt: Attempt) -> str | None:
        """The state store's key for the attempt's log, ``logs/<night>/<file>``; None for local state (the
        log is already in place) or an attempt without a log file."""
        from pipelines.storage.state import LocalStateStore

        path = Path(attempt.log_path) if attempt.log_path else None
        if isinstance(self.state, LocalStateStore) or path is None or not path.is_file():
            return None
        return self._log_key_of(path)

    def _log_key_of(self, path: Path) -> str:
        """``logs/<night>/<file>``: the key of a log file in a state store (this deployment's or a kept folder's)."""
        return f"logs/{self.night}/{path.name}"

    def log_home(self, attempt: Attempt) -> str | None:
        """Where the attempt's log lives for good: its copy in the state store (S3), the one ``store_log``
        uploads now or on a retry later this night, and the re-add of a refused night puts back
        (``keep_unsaved``). A history sample names it as its ``source`` even while an outage holds the upload
        back: a sample is never rewritten, and the run pod's own path goes with the pod. None locally."""
        key = self.log_key(attempt)
        return self.state.uri(key) if key is not None else None

    def cordon(self, findings) -> list[str]:
        """Cordon bad nodes when the deployment asks for it; returns notes (a refusal is a note, not a crash)."""
        if not findings or not self.deployment.cordon_bad_nodes or self.deployment.launcher != "kubernetes":
            return []
        from pipelines.launch.kubernetes import cordon_bad_nodes, launcher_from_deployment

        try:
            api = launcher_from_deployment(self.deployment).api
            notes: list[str] = []
            done = cordon_bad_nodes(api, self.deployment, [(f.node, f.evidence) for f in findings], notes)
            return [f"cordoned {n}" for n in done] + notes
        except Exception as exc:  # noqa: BLE001 - the night's results matter more than the cordon
            return [f"cordon of {', '.join(f.node for f in findings)} failed: {exc}; cordon by hand "
                    "(`kubectl cordon NODE`) or grant the node-cordon ClusterRole"]

    # -- calibrate ---------------------------------------------------------------------
    def registered_tests(self) -> list[Test]:
        return list(self.registered.tests)

    def estimates(self, tests: list[Test] | None = None) -> list[Estimate]:
        """Proposed est_time per test from history, computed without writing anything; each step is
        judged from the est_time in force (the estimates file as it is now, see ``in_force``)."""
        tests = self.registered_tests() if tests is None else tests
        return calibrate(tests, self.history.read(), self.repo_spec.policy, self.repo_spec.policy_params,
                         successions=successions(self.history), in_force=self.in_force(tests))

    def in_force(self, tests: Iterable[Test]) -> dict[tuple[str, str], int]:
        """The calibrated est_time each of ``tests`` plans with now (``in_force_est_times``), read afresh:
        a calibration after the catalog was loaded counts. A corrupt estimates file is none (this
        calibration writes it again); its bad entries are noted where the catalog reads it."""
        tests = list(tests)
        try:
            calibrated = self._stored_calibrated()[0]
            return in_force_est_times(tests, calibrated, self.rewrites_for(tests, calibrated))
        except CatalogError as exc:
            log.warning("est_time steps judged from the registered values: %s", exc)
            return {}

    def calibrate(self, source_run: str | None = None) -> tuple[list[Estimate], dict[str, str], tuple[str, ...]]:
        """Propose est_time from history; store estimates, evidence CSV and source patch in the state
        store; returns (estimates, where each went, the test files the patch left alone and why).

        ``source_run``: the run this calibration follows; its evidence is also kept under that run,
        so a later report of that night shows the proposals made after it, not the newest ones.
        A patch that would change nothing is not stored (``git apply`` refuses one without hunks)
        and an earlier night's, now stale, is removed: where it would be is then "". The evidence
        and estimates are written first: a stale patch that cannot be removed (no s3:DeleteObject)
        is a warning in ``notes``, never a calibration without estimates."""
        tests = self.registered_tests()
        estimates = self.estimates(tests)
        keys = self.calibration_keys()
        if source_run:
            from pipelines.reporting.inputs import evidence_key

            self.state.put(evidence_key(self.repo_spec.name, source_run), evidence_csv(estimates))
        diff, left_alone = recorded_patch(self.history, self.repo_spec.path, tests, estimates)
        where = {
            "evidence": self.state.put(keys["evidence"], evidence_csv(estimates)),
            "estimates": self.store_estimates(tests, estimates,
                                              unread=unread_tests(self.registered, self.repo_spec.path)),
            "patch": self.state.put(keys["patch"], diff) if diff is not None else "",
        }
        if diff is None:
            self._remove_stale_patch(keys["patch"])
        return estimates, where, left_alone

    def store_estimates(self, tests: list[Test], estimates: list[Estimate],
                        unread: Callable[[str], bool] | None = None) -> str:
        """Store the proposals the next night plans with (``estimates/<repo>.json``; where it went is
        returned): each test with evidence, with the sha256 of the file they are for, so an edited
        file plans with its own est_time again (:func:`with_calibrated`). A template test has no
        est_time in any file: this is where its calibrated one lives. ``nightly calibrate --write``
        stores its proposals here too.

        ``unread``: whether a test id missing from ``tests`` is one the catalog could not read this time
        (:func:`unread_tests`): its stored estimate stays as it was: a syntax error in one file (or one
        template entry) must not lose what its history says, which it planned with before and will again
        once fixed."""
        sha = {t.id: t.sha256 for t in tests}
        # an estimate in force stays with too few samples while a pass for it is in the window (else
        # calibrate() released it): keeping it is not re-deciding it
        data = {e.test_id: {"est_time": e.proposed, "sha256": sha.get(e.test_id, ""), "hardware": e.hardware}
                for e in estimates if e.samples_used or e.in_force is not None}
        if unread is not None:
            try:
                earlier, _ = self._stored_calibrated()
            except CatalogError:  # a corrupt estimates file keeps nothing: this calibration writes it again
                earlier = {}
            data.update({tid: entry for tid, entry in earlier.items() if tid not in sha and tid not in data
                         and unread(tid)})
        return self.state.put(self.calibration_keys()["estimates"], json.dumps(data, indent=1, sort_keys=True))

    def _remove_stale_patch(self, key: str) -> None:
        """Delete an earlier calibration's patch that no longer holds; one that cannot be deleted is a
        warning (``notes`` and the log): applying it would set est_time this calibration did not propose."""
        from pipelines.storage.state import StateError

        try:
            if self.state.get(key) is not None:  # nothing to delete on a first calibration
                self.state.delete(key)
        except StateError as exc:
            note = (f"stale est_time patch not removed: {exc}; it is an earlier calibration's, do not apply it: "
                    "delete it by hand, and grant s3:DeleteObject (docs/storage.md)")
            log.warning(note)
            self.notes.append(note)

    def calibration_keys(self) -> dict[str, str]:
        name = safe_filename(self.repo_spec.name)
        return {"evidence": f"calibration/{name}/evidence.csv", "patch": f"calibration/{name}/est_time.patch",
                "estimates": f"estimates/{name}.json"}

    def calibration_paths(self) -> dict[str, str]:
        """Where the calibration outputs are (file paths locally, s3:// URIs in production)."""
        return {k: self.state.uri(v) for k, v in self.calibration_keys().items()}

    def checks(self, estimates: list[Estimate], run_id: str | None = None) -> tuple[list[Estimate], list]:
        """(drifted estimates, tests near their timeout by the report's rule, ``near_timeouts``: an attempt of
        the night that used over 90 % of the timeout it ran with, or a last run over 90 % of the timeout next
        night gives it: the proposal's, or the shorter one their file's est_time gives the framework's runner).

        The night is run ``run_id``'s (None: no night's attempts, history alone). Its timeout is judged with the floor
        the night ran with: this Night's (``--timeout-floor``), or, where this Night has none of its own, the
        one the record keeps, as its report does."""
        tests = self.registered_tests()
        floor = self.timeout_floor_s
        try:
            # no run named: history alone, never the newest record, which may be another repo's night (several
            # repos share one store's nights/latest.json)
            record = self.summary(run_id) if run_id else {}
        except CatalogError:  # no record (or a corrupt one): history alone, with the repo's floor
            record = {}
        record = record if isinstance(record, dict) else {}
        if run_id and self.settings.timeout_floor_s is None:
            floor = recorded_floor(record, floor)
        try:
            attempts = attempts_of(record)
        except (AttributeError, KeyError, TypeError, ValueError):  # a record of another shape: its attempts are not judged
            attempts = []
        every = near_timeout(tests, self.history.read(), floor, self.repo_spec.timeout_factor, threshold=0.0,
                             estimates=estimates, runner_floor=self.repo_spec.timeout_floor_s)
        return drift(estimates), list(near_timeouts(attempts, every, {t.id: t for t in tests},
                                                    injected=bool(record.get("env"))))

    # -- the night's record ----------------------------------------------------------------
    def write_summary(self, summary: dict, store: StateStore | None = None) -> dict:
        """Store the run's record where the next run finds it: ``nights/<night>.json``, ``runs/<run id>.json``
        and ``nights/latest.json`` (not in another ``store``: a copy re-added later is not the newest)."""
        text = json.dumps(summary, indent=1)
        store = store or self.state
        store.put(f"nights/{summary['night']}.json", text)
        store.put(f"runs/{safe_filename(summary['run_id'])}.json", text)
        if store is self.state:
            write_latest(store, summary, text)
        if summary.get("status") != "running" and self._running_lock is not None:
            self._running_lock.close()  # its tests have ended: its logs are an ended night's, kept or not by age
            self._running_lock = None
        return summary

    def keep_unsaved(self, summary: dict, samples: list, attempts: Iterable[Attempt], why: str,
                     record_stored: bool = False) -> ResultsNotStored:
        """What the stores refused (the samples, the record, the logs not uploaded) written under
        ``<home>/unsaved/<night>/`` in the stores' own formats and layout, with a README.txt saying
        how to re-add it; returns the error that says so (``nightly run`` prints the README, exit 4).
        The kept record links each kept log where the re-add puts it. When the home's disk refuses them
        too (full), they go to ``$TMPDIR/nightly-unsaved/<home id>/<night>/``; when that fails as well, the error's
        message carries the samples as JSON lines, since Dagster's run log is on the home's disk."""
        from pipelines.core.calibrate.output import write_atomic
        from pipelines.storage.s3 import encode  # the S3 history's object format; `history import` reads it
        from pipelines.storage.state import LocalStateStore, StateError

        what = (f"{len(samples)} result(s) of night {self.night}" + (" and its record" if not record_stored else "")
                + " were not stored" + (" (its record was)" if record_stored else "")) if samples \
            else f"the record of night {self.night} was not stored"
        failed: list[str] = []
        for root in unsaved_roots(self.home):  # the home's disk may be the one that is full: then outside it
            folder = root / self.night
            try:
                kept = LocalStateStore(folder / "state")
                logs: dict[tuple, str] = {}
                for a in attempts:
                    if not a.details.get("log_uri") and a.log_path and Path(a.log_path).is_file():
                        key = self._log_key_of(Path(a.log_path))  # log_key's, for the kept (local) store too
                        kept.put_file(key, Path(a.log_path))
                        logs[(a.test_id, a.attempt)] = self.state.uri(key)
                self.write_summary({**summary, "attempts": [
                    {**r, **({"log_uri": logs[r["test_id"], r["attempt"]]} if (r["test_id"], r["attempt"]) in logs
                             else {})}
                    for r in summary["attempts"]]}, kept)
                if samples:
                    write_atomic(folder / "history.jsonl", encode(samples).decode())
                message = (f"{what}: the store refused writes ({why}).\nThey are kept in {folder}"
                           + "".join(f" (not {f})" for f in failed) + "; when the store takes writes again, re-add "
                           f"them:\n  {self._readd(folder)}")
                write_atomic(folder / "README.txt", message + "\n")
            except (OSError, StateError) as exc:
                failed.append(f"in {folder}: {exc}")
                continue
            return ResultsNotStored(message, folder)
        # nowhere to keep them: the message itself carries the samples (Dagster's run log may be on the full disk)
        lines = encode(samples).decode()
        return ResultsNotStored(
            f"{what}: the store refused writes ({why}); keeping them failed too ({'; '.join(failed)})"
            + (f"; the {len(samples)} sample(s) follow, one JSON object per line: save them as a .jsonl file and "
               f"`nightly history import` it when the store takes writes again:\n{lines}" if samples else ""),
            folder)

    def _readd(self, folder: Path) -> str:
        """The command that puts a kept folder (keep_unsaved) back into this deployment's stores (readd_unsaved)."""
        import shlex

        return (f"nightly readd --deployment {shlex.quote(self.deployment.name)} --home {shlex.quote(str(self.home))} "
                f"{shlex.quote(str(folder))}")

    def summary(self, run_id: str | None = None) -> dict:
        """A run's record (the latest night when ``run_id`` is None); a clear error when there is none."""
        key = f"runs/{safe_filename(run_id)}.json" if run_id else "nights/latest.json"
        text = self.state.get(key)
        if text is None:
            what = f"run {run_id} recorded no tests" if run_id else "no tests have run yet"
            raise CatalogError(Problem(self.state.uri(key), 1, "summary",
                                       f"{what}; run `nightly run` (or materialize test_runs) first"))
        try:
            return json.loads(text)
        except ValueError as exc:
            from pipelines.reporting.inputs import restore_advice

            raise CatalogError(Problem(self.state.uri(key), getattr(exc, "lineno", 1), "summary",
                                       f"corrupt night record ({exc}); {restore_advice(self.state, key)}")) from exc

    def recorded_repo(self, run_id: str) -> str | None:
        """The ``--repo`` run ``run_id`` ran with, from its record, as ``nightly calibrate --repo`` takes it:
        a repo name of assets/repos.yaml, else the checkout's path (``nightly run --repo <checkout>``).
        None when there is no record or it names no repo (an older record): this Night's repo then.

        A calibration of that run must work on that repo: this Night's (the code location's) would
        recalibrate another repo and find the night not of it. A checkout that is no longer a folder,
        or a record naming an unconfigured repo without its path, is a located error."""
        key = f"runs/{safe_filename(run_id)}.json"
        text = self.state.get(key)
        if text is None:
            return None
        record = self.summary(run_id)  # a corrupt record: its located error
        if not isinstance(record, dict) or not record.get("repo"):
            return None
        name, path = record["repo"], record.get("repo_path")
        if isinstance(name, str) and name in self.specs.repos:
            return name
        where, lines = self.state.uri(key), key_lines(text)
        if not isinstance(path, str) or not path:
            raise CatalogError(Problem(where, lines.get(("repo",), 1), "repo_path", (
                f"run {run_id} is of repo {name!r}, which {self.specs.root / 'repos.yaml'} does not name, and its "
                "record keeps no checkout path; calibrate it from its checkout with `nightly calibrate --repo "
                f"CHECKOUT`, or add {name!r} to repos.yaml and re-execute this calibration run")))
        if not Path(path).is_dir():
            raise CatalogError(Problem(where, lines.get(("repo_path",), 1), "repo_path", (
                f"run {run_id} ran in checkout {path} (repo {name!r}), which is no longer a folder: its night "
                f"cannot be calibrated without it (the code location's own repo is another one); put the "
                f"checkout back at {path} and re-execute this calibration run, or run `nightly calibrate --repo {path}` once "
                f"it is there; `nightly report --night {run_id}` writes the night's report without it")))
        return path

    def report_rows(self, summary: dict, estimates: list[Estimate] | None = None) -> list[Row]:
        """The report's rows for a night summary (``write_summary``), with the current proposals
        (``estimates``, computed from history when not given)."""
        by_id = self.tests_by_id
        attempts = [attempt_from_dict(a) for a in summary["attempts"]]
        tests = [by_id[i] for i in summary["selected"] if i in by_id]
        skipped = [by_id[i] for i in summary["skipped"] if i in by_id]
        return night_rows(tests, skipped, attempts, self.estimates() if estimates is None else estimates,
                          summary.get("unplanned", ()))

    def pool_of(self, test: Test) -> str:
        p = pool_for(test, self.deployment.pools)
        return p.name if p else ""

    def hardware_on(self, test: Test) -> str:
        """The hardware ``test``'s runs tonight are recorded with: its pool's (``ran_on``)."""
        return ran_on(test, pool_for(test, self.deployment.pools))


@dataclass(frozen=True)
class Readded:
    """What ``readd_unsaved`` put back."""

    #: the kept samples that read, how many of them the history did not hold yet, and each line that did not read
    samples: int
    new: int
    problems: list[Problem]
    #: where each kept state file went (logs, then the records)
    stored: list[str]
    #: the nights whose record is now ``nights/latest.json`` (none when a night that started later wrote it)
    latest: list[str]


def readd_unsaved(folder: Path, state: StateStore, history: HistoryStore) -> Readded:
    """Put back what a night kept when its stores refused writes (``Night.keep_unsaved``): the samples of its
    ``history.jsonl`` (each attempt once, so a second re-add adds nothing; a line that does not read, cut off
    by a full disk, is a problem and the rest are added), its ``state/`` files under the same keys (the logs
    first: a record never links a log that is not there yet), and its record as ``nights/latest.json`` when no
    night that started later has written its own there (``write_latest``): what the night left there before
    its store refused is its partial record, ``status: running``, which a copy of the files never replaces."""
    from pipelines.reporting.inputs import parse_summary
    from pipelines.storage.s3 import decode_lines
    from pipelines.storage.state import LocalStateStore, StateError

    folder = Path(folder)
    if not (folder / "README.txt").is_file():
        raise StateError(f"{folder}: not a folder a night kept its refused results in (no README.txt there); give "
                         f"the one `nightly run` named, <home>/{UNSAVED}/<night>")
    kept = folder / "history.jsonl"
    samples, problems = decode_lines(str(kept), kept.read_bytes(), imported=True) if kept.is_file() else ([], [])
    new = history.add(samples) if samples else 0
    files = LocalStateStore(folder / "state")
    keys = [k for k in files.keys("") if k != "nights/latest.json"]
    # a damaged kept record is its located error before anything of it is stored
    records = {k: (parse_summary(files.uri(k), text), text) for k in keys
               if k.startswith("nights/") and "/" not in k[len("nights/"):] and (text := files.get(k)) is not None}
    stored = [state.put_file(k, files.path(k)) for k in sorted(keys, key=lambda k: (not k.startswith("logs/"), k))]
    latest = [str(summary["night"]) for summary, text in records.values() if write_latest(state, summary, text)]
    return Readded(len(samples), new, problems, stored, latest)


def write_latest(store: StateStore, summary: dict, text: str) -> bool:
    """``nights/latest.json`` becomes this record unless it holds a night that started later (a run whose
    step outlived its worker writes its record late; a refused night is re-added days later): read and
    replaced as one ``update``, under a file lock locally and as a conditional write on S3, so a newer
    night's record is never overwritten by an older one, whichever writes last. Whether it was written."""

    class Newer(Exception):
        pass

    def change(current: str | None) -> str:
        try:
            latest = json.loads(current) if current else None
        except ValueError:  # a damaged latest.json orders nothing: replaced
            latest = None
        if isinstance(latest, dict) and not replaces_latest(latest, summary):
            raise Newer(latest.get("night"))
        return text

    try:
        store.update("nights/latest.json", change)
    except Newer as newer:
        log.info("%s: left as it is: it holds night %s, which started after this night (%s); this run's "
                 "record is %s", store.uri("nights/latest.json"), newer, summary["night"],
                 store.uri(f"runs/{safe_filename(str(summary.get('run_id') or '?'))}.json"))
        return False
    return True


def attempt_from_dict(a: dict) -> Attempt:
    """An Attempt back from a night summary (JSON lists back to tuples)."""
    known = {f.name for f in dataclasses.fields(Attempt)}
    return Attempt(**{**{k: v for k, v in a.items() if k in known}, "gpu_slots": tuple(a.get("gpu_slots", ()))})
