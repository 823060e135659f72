"""The declarative inputs in ``assets/``: repos, cluster pools, models, datasets, conversions.

A CI maintainer edits these YAML files; every mistake is reported as ``file:line: key: what is
wrong; how to fix`` before anything runs (the schema: :mod:`pipelines.core.specs_schema`).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Container
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from pipelines.core.model import CatalogError, Pool, Problem
from pipelines.core.specs_schema import (
    CheckpointsFile,
    ClusterFile,
    DatasetsFile,
    DeploymentModel,
    ModelsFile,
    PoolModel,
    RepoModel,
    ReposFile,
    validate,
)

DEFAULT_ASSETS_DIR = Path(__file__).resolve().parents[2] / "assets"
#: where relative paths in repos.yaml (a repo's ``path:`` and ``hub:``) start: this project's root, whichever
#: specs folder is read, so a copy of ``assets/`` kept elsewhere (``NIGHTLY_ASSETS_DIR``) names the same
#: folders as the original; installed images keep ``examples/`` beside ``assets/`` here too (Dockerfile)
PROJECT_ROOT = DEFAULT_ASSETS_DIR.parent


def project_path(value: str | Path) -> Path:
    """A path as repos.yaml writes it: an absolute one as it is, a relative one from this project's root."""
    return Path(value) if os.path.isabs(value) else (PROJECT_ROOT / value).resolve()


class _LineLoader(yaml.SafeLoader):
    """A SafeLoader whose mappings and lists remember the line of each key and item, and which
    collects duplicate keys (YAML's "last wins" would silently drop a setting)."""

    def __init__(self, stream: Any):
        super().__init__(stream)
        self.duplicates: list[tuple[str, int, int]] = []


class LineDict(dict):
    lines: dict[Any, int]


class LineList(list):
    lines: list[int]


def _construct_mapping(loader: _LineLoader, node: yaml.MappingNode) -> LineDict:
    first: dict[Any, int] = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge" or not isinstance(key_node, yaml.ScalarNode):
            continue
        key, line = key_node.value, key_node.start_mark.line + 1
        if key in first:
            loader.duplicates.append((str(key), line, first[key]))
        else:
            first[key] = line
    loader.flatten_mapping(node)  # merged keys come first, so explicit keys override them
    out = LineDict()
    out.lines = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        out[key] = loader.construct_object(value_node, deep=True)
        out.lines[key] = key_node.start_mark.line + 1
    return out


def _construct_sequence(loader: _LineLoader, node: yaml.SequenceNode) -> LineList:
    out = LineList(loader.construct_object(child, deep=True) for child in node.value)
    out.lines = [child.start_mark.line + 1 for child in node.value]
    return out


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _construct_sequence)


def _read_yaml(path: Path) -> tuple[Any, list[Problem]]:
    try:
        with open(path, encoding="utf-8") as fh:
            loader = _LineLoader(fh)
            try:
                data = loader.get_single_data()
            finally:
                loader.dispose()
    except OSError as exc:
        raise CatalogError(Problem(str(path), 1, "file", (
            f"cannot be read ({exc.strerror}); point NIGHTLY_ASSETS_DIR at the project's assets/ folder"))) from exc
    except yaml.MarkedYAMLError as exc:
        line = exc.problem_mark.line + 1 if exc.problem_mark else 1
        raise CatalogError(Problem(str(path), line, "yaml", f"{exc.problem}; fix the YAML syntax")) from exc
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise CatalogError(Problem(str(path), 1, "yaml", f"{exc}; fix the YAML syntax")) from exc
    problems = [Problem(str(path), line, key, f"duplicate key (first at line {was}); keep one of them")
                for key, line, was in loader.duplicates]
    return (data if data is not None else {}), problems


def load_yaml(path: Path) -> Any:
    """Parse one YAML file; syntax errors and duplicate keys name the file and line."""
    data, problems = _read_yaml(path)
    if problems:
        raise CatalogError(problems)
    return data


@dataclass(frozen=True)
class PoolSpec:
    """A pool of identical GPU nodes, plus how pods are shaped there (Kubernetes only)."""

    name: str
    nodes: int
    gpus_per_node: int
    #: which suite hardware names run here (default: the pool name)
    hardware: tuple[str, ...] = ()
    image: str = ""
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: tuple[dict[str, Any], ...] = ()
    shm_size: str = "32Gi"
    priority_class: str = ""
    queue: str = ""
    #: CPU and memory requested per GPU (a 0-GPU pod gets one GPU's share): never BestEffort
    cpu_per_gpu: str = "4"
    memory_per_gpu: str = "32Gi"
    #: ``sha256:...`` the image is pinned to (nodes never run a stale ``:nightly``)
    image_digest: str = ""
    #: argv printing the image's current digest; a change under the same tag is an infra change
    image_digest_command: tuple[str, ...] = ()
    #: declared GPU driver / CUDA version (used where nvidia-smi and node labels cannot tell)
    driver: str = ""

    def pool(self) -> Pool:
        return Pool(self.name, self.nodes, self.gpus_per_node)


def unconfigured_name(path: Path) -> str:
    """The name a checkout nobody configured goes by: its folder name and 6 hex of its resolved path.

    Every state key is derived from a repo's name (``estimates/<name>.json``, ``calibration/<name>/``,
    the quarantine document, the nights a report or ``quarantine list`` counts as the repo's), so a
    checkout named like a configured repo, or like another checkout (``src``, ``repo``, GitHub's
    ``work/<n>/<n>``), must not go by that name alone: it would read and overwrite the other's state.
    """
    path = Path(path).resolve()
    return f"{path.name or 'repo'}-{hashlib.sha256(str(path).encode()).hexdigest()[:6]}"


def repo_name(path: Path, spec: RepoSpec | None) -> str:
    """The state name of ``--repo``: its name in assets/repos.yaml, else :func:`unconfigured_name`."""
    return spec.name if spec is not None else unconfigured_name(path)


def legacy_checkout(path: Path, spec: RepoSpec | None, configured: Container[str]) -> Path | None:
    """The checkout whose state may still be under its folder name alone, as an unconfigured checkout's
    was before :func:`unconfigured_name`: None for a configured repo, and for a folder called like one
    (``configured``: the names in assets/repos.yaml), whose state under that name is that repo's."""
    if spec is not None and spec.name != unconfigured_name(spec.path):
        return None
    return None if Path(path).name in configured else Path(path)


@dataclass(frozen=True)
class RepoSpec:
    """A framework repository the nightly runs and how its runner behaves."""

    name: str
    path: Path
    format: str = "auto"
    roots: tuple[str, ...] = ("tests",)
    implicit_cpu_dirs: tuple[str, ...] = ()
    template: str = ""
    default_est_time: int = 1800
    default_num_gpus: int = 8
    policy: str = "bucket125"
    policy_params: dict[str, Any] = field(default_factory=dict)
    #: repos.yaml sets ``calibration.policy`` (else the framework family's rule applies: policies.repo_policy)
    policy_explicit: bool = False
    timeout_floor_s: int = 1800
    timeout_factor: float = 1.25
    #: environment for every test; ``{cache}`` expands to the local asset cache root
    env: dict[str, str] = field(default_factory=dict)
    #: extra requirement keys per test id glob, for what prepare() inference cannot resolve
    requirements: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: failure injection and similar per-run switches, passed to tests as environment
    hub: str = ""
    #: registry dialect profile ("auto": from the framework's registry module; "m", "sglang")
    dialect: str = "auto"
    #: suite of tests in implicit CPU folders ("": the dialect's, e.g. framework M's stage-a-cpu)
    implicit_cpu_suite: str = ""
    #: overrides of the registry dialect's rules as set in repos.yaml (``rules:``; lists as tuples);
    #: applied by pipelines.core.catalog.dialect.with_rules
    rules: dict[str, Any] = field(default_factory=dict)
    #: flaky-test rules as set in repos.yaml (pipelines.core.flaky.FlakyRules.from_mapping)
    flaky: dict[str, Any] = field(default_factory=dict)
    #: the repo's own registry module ("": the one found, see pipelines.core.catalog.detect.choose)
    registry_module: str = ""
    #: line of each ``requirements:`` glob in repos.yaml (problems about a glob name its line)
    requirement_lines: dict[str, int] = field(default_factory=dict)
    #: put the checkout first on the PYTHONPATH local tests and builds inherit (an unconfigured repo: as
    #: after `pip install -e .`); pods run the framework's image, which has it installed, and keep its path
    importable: bool = False
    #: ``path:`` as repos.yaml writes it, and its line (a checkout that is not there is located by them)
    path_written: str = ""
    path_line: int = 1

    def path_problem(self, specs_root: Path) -> Problem | None:
        """Why the checkout cannot be read (None when it can), naming what a relative path was taken from."""
        if self.path.is_dir():
            return None
        how = "" if not self.path_written or os.path.isabs(self.path_written) else (
            f" ({self.path_written}, relative to this project's root {PROJECT_ROOT})")
        return Problem(str(specs_root / "repos.yaml"), self.path_line, f"repos.{self.name}.path",
                       f"{self.path} is not a folder{how}; point it at the framework checkout, by an absolute path "
                       "or one relative to the project's root")


def unconfigured_spec(path: Path) -> RepoSpec:
    """The runner defaults a checkout nobody configured gets (named by :func:`unconfigured_name`): its
    root importable by local tests and builds, as after the `pip install -e .` a framework's CI job
    does first (``python3 FILE`` alone puts only the test's own folder on the path)."""
    return RepoSpec(name=unconfigured_name(path), path=path, importable=True)


@dataclass(frozen=True)
class ModelSpec:
    key: str
    source: str
    path: str
    #: the Hub revision to download (branch, tag or commit); "" for the default branch
    revision: str = ""


@dataclass(frozen=True)
class ConversionSpec:
    """How the framework converts a model: an argv template run in the repository."""

    command: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class DeploymentSpec:
    name: str
    launcher: str
    pools: tuple[PoolSpec, ...]
    namespace: str = "nightly-e2e"
    storage: str = "local"
    s3_bucket: str = ""
    s3_prefix: str = ""
    cache_pvc: str = ""
    hf_token_secret: str = ""
    max_infra_retries: int = 2
    unschedulable_wait_s: int = 1800
    cordon_bad_nodes: bool = False
    #: seconds a scheduled pod may spend pulling its image and in the pre-flight (infra, not test time)
    startup_wait_s: int = 900
    #: suite hardware this deployment knowingly never runs: reported as not run here, not a problem
    skip_hardware: tuple[str, ...] = ()
    #: the input cache's reuse check ("full": sha256 of every file, "size": names and sizes) and build limit
    cache_verify: str = "full"
    build_timeout_s: int = 4 * 3600
    #: nights whose logs stay under <home>/logs/ (the newest; older ones are removed as a night starts); 0: all
    keep_log_nights: int = 30


@dataclass(frozen=True)
class Specs:
    root: Path
    repos: dict[str, RepoSpec]
    deployments: dict[str, DeploymentSpec]
    models: dict[str, ModelSpec]
    datasets: dict[str, ModelSpec]
    conversion: ConversionSpec | None
    default_repo: str
    default_deployment: str

    def repo(self, name: str | None = None) -> RepoSpec:
        name, said = _chosen(name, "NIGHTLY_REPO_NAME", "--repo", self.default_repo)
        if name not in self.repos:
            raise CatalogError(
                Problem(str(self.root / "repos.yaml"), 1, "repos",
                        f"unknown repo {name!r}{said[0]}; known: {sorted(self.repos)}{said[1]}")
            )
        return self.repos[name]

    def locate_repo(self, value: str | Path | None) -> tuple[Path, RepoSpec | None]:
        """``--repo`` as a CI maintainer types it: a repo name here, or any checkout path.

        Returns the checkout and its spec; the spec is None for a checkout nobody configured
        (the catalog then detects its format and says what it assumed).
        """
        if value is None:
            spec = self.repo()
            return spec.path, spec
        if str(value) in self.repos and not Path(value).is_dir():
            spec = self.repos[str(value)]
            return spec.path, spec
        path = Path(value).resolve()
        if not path.is_dir():
            raise CatalogError(Problem(str(value), 0, "--repo", (
                f"not a folder nor a repo name in {self.root / 'repos.yaml'} (known: {', '.join(sorted(self.repos)) or 'none'})")))
        return path, next((s for s in self.repos.values() if s.path.resolve() == path), None)

    def deployment(self, name: str | None = None) -> DeploymentSpec:
        name, said = _chosen(name, "NIGHTLY_DEPLOYMENT", "--deployment", self.default_deployment)
        if name not in self.deployments:
            raise CatalogError(
                Problem(
                    str(self.root / "cluster.yaml"),
                    1,
                    "deployments",
                    f"unknown deployment {name!r}{said[0]}; known: {sorted(self.deployments)}{said[1]}",
                )
            )
        return self.deployments[name]


def _chosen(name: str | None, env: str, flag: str, default: str) -> tuple[str, tuple[str, str]]:
    """The name asked for (else ``$env``'s, else the file's default) and, when the variable chose it, what
    an error about it adds: where the name came from and what to do, since the command line never named it."""
    if name:
        return name, ("", "")
    if os.environ.get(env):
        return os.environ[env], (f" (from ${env})", f"; unset {env} or set it to a known one, or pass {flag}")
    return default, ("", "")


def _pool(name: str, m: PoolModel) -> PoolSpec:
    return PoolSpec(name=name, nodes=m.nodes, gpus_per_node=m.gpus_per_node, hardware=tuple(m.hardware) or (name,),
                    image=m.image, node_selector=dict(m.node_selector), tolerations=tuple(dict(t) for t in m.tolerations),
                    shm_size=m.shm_size, priority_class=m.priority_class, queue=m.queue,
                    cpu_per_gpu=m.cpu_per_gpu, memory_per_gpu=m.memory_per_gpu, image_digest=m.image_digest,
                    image_digest_command=tuple(m.image_digest_command), driver=m.driver)


def _repo(name: str, m: RepoModel, root: Path, raw: Any = None) -> RepoSpec:
    params = m.calibration.model_dump(exclude_unset=True, exclude={"policy"})
    if "accept" in params:
        params["accept"] = tuple(params["accept"])
    return RepoSpec(
        name=name, path=project_path(m.path), path_written=m.path,
        path_line=_lines(raw, "repos", name).get("path", 1),
        format=m.format, roots=tuple(m.roots), implicit_cpu_dirs=tuple(m.implicit_cpu_dirs), template=m.template,
        default_est_time=m.default_est_time, default_num_gpus=m.default_num_gpus, policy=m.calibration.policy,
        policy_params=params, policy_explicit="policy" in m.calibration.model_fields_set, timeout_floor_s=m.timeout.floor_s, timeout_factor=m.timeout.factor,
        env=dict(m.env), requirements={k: tuple(v) for k, v in m.requirements.items()}, hub=m.hub,
        dialect=m.dialect, implicit_cpu_suite=m.implicit_cpu_suite,
        rules={k: tuple(v) if isinstance(v, list) else v for k, v in m.rules.model_dump(exclude_unset=True).items()},
        flaky=m.flaky.model_dump(exclude_unset=True), registry_module=m.registry_module,
        requirement_lines=_lines(raw, "repos", name, "requirements"),
    )


def _lines(raw: Any, *keys: str) -> dict[str, int]:
    """The line of each key of the mapping at ``raw[keys[0]][keys[1]]...`` as read from the file ({} when absent)."""
    for key in keys:
        raw = raw.get(key) if isinstance(raw, dict) else None
    return {str(k): line for k, line in getattr(raw, "lines", {}).items()}


def _deployment(name: str, m: DeploymentModel) -> DeploymentSpec:
    return DeploymentSpec(
        name=name, launcher=m.launcher, pools=tuple(_pool(str(k), p) for k, p in m.pools.items()),
        namespace=m.namespace, storage=m.storage, s3_bucket=m.s3_bucket, s3_prefix=m.s3_prefix,
        cache_pvc=m.cache_pvc, hf_token_secret=m.hf_token_secret, max_infra_retries=m.max_infra_retries,
        unschedulable_wait_s=m.unschedulable_wait_s, cordon_bad_nodes=m.cordon_bad_nodes,
        startup_wait_s=m.startup_wait_s, skip_hardware=tuple(m.skip_hardware),
        cache_verify=m.cache.verify, build_timeout_s=m.cache.build_timeout_s, keep_log_nights=m.keep_log_nights,
    )


def _file(path: Path, model: type, problems: list[Problem], optional: bool = False, keep: dict | None = None) -> Any:
    """One spec file validated against its schema; problems are collected, never raised here.
    ``keep`` receives the file as read (``keep["raw"]``, mappings with their lines)."""
    if optional and not path.exists():
        return model()
    raw, dupes = _read_yaml(path)
    if keep is not None:
        keep["raw"] = raw
    parsed, bad = validate(model, raw, path)
    problems += dupes + bad
    return parsed


def load_specs(assets_dir: Path | str | None = None) -> Specs:
    """Read and validate every spec file in ``assets/``; raise one CatalogError listing all problems.

    Everything is checked before anything runs: unknown and duplicate keys, types, ranges,
    policies and formats (see :mod:`pipelines.core.specs_schema`).
    """
    root = Path(assets_dir or os.environ.get("NIGHTLY_ASSETS_DIR") or DEFAULT_ASSETS_DIR).resolve()
    problems: list[Problem] = []
    repos_raw: dict[str, Any] = {}
    repos_file = _file(root / "repos.yaml", ReposFile, problems, keep=repos_raw)
    cluster_file = _file(root / "cluster.yaml", ClusterFile, problems)
    models_file = _file(root / "models.yaml", ModelsFile, problems, optional=True)
    datasets_file = _file(root / "datasets.yaml", DatasetsFile, problems, optional=True)
    checkpoints_file = _file(root / "checkpoints.yaml", CheckpointsFile, problems, optional=True)
    if problems:
        raise CatalogError(problems)
    repos = {str(k): _repo(str(k), m, root, repos_raw.get("raw")) for k, m in repos_file.repos.items()}
    deployments = {str(k): _deployment(str(k), m) for k, m in cluster_file.deployments.items()}
    models = {str(k): ModelSpec(str(k), m.source, m.path, m.revision or "") for k, m in models_file.models.items()}
    datasets = {str(k): ModelSpec(str(k), m.source, m.path, m.revision or "") for k, m in datasets_file.datasets.items()}
    conv = checkpoints_file.conversion
    conversion = ConversionSpec(tuple(conv.command), dict(conv.env)) if conv else None
    default_repo = repos_file.default or next(iter(repos), "")
    return Specs(root, repos, deployments, models, datasets, conversion, default_repo, cluster_file.default)
