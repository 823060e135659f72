"""The declarative inputs in ``assets/``: repos, cluster pools, models, datasets, conversions.

A CI maintainer edits these YAML files; every mistake is reported as ``file:line: key: what is
wrong`` before anything runs.
"""

from __future__ import annotations

import os
import string
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from pipelines.core.model import CatalogError, Pool, Problem

DEFAULT_ASSETS_DIR = Path(__file__).resolve().parents[2] / "assets"


class _LineLoader(yaml.SafeLoader):
    """A SafeLoader whose mappings remember the line of each key."""


class LineDict(dict):
    lines: dict[str, int]


def _construct_mapping(loader: _LineLoader, node: yaml.MappingNode) -> LineDict:
    loader.flatten_mapping(node)
    out = LineDict()
    out.lines = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        out[key] = loader.construct_object(value_node, deep=True)
        out.lines[str(key)] = key_node.start_mark.line + 1
    return out


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def load_yaml(path: Path) -> Any:
    """Parse one YAML file; syntax errors name the file and line."""
    try:
        with open(path, encoding="utf-8") as fh:
            return yaml.load(fh, Loader=_LineLoader) or {}
    except OSError as exc:
        raise CatalogError(Problem(str(path), 1, "file", (
            f"cannot be read ({exc.strerror}); point NIGHTLY_ASSETS_DIR at the project's assets/ folder"))) from exc
    except yaml.MarkedYAMLError as exc:
        line = exc.problem_mark.line + 1 if exc.problem_mark else 1
        raise CatalogError(Problem(str(path), line, "yaml", str(exc.problem))) from exc


#: what a repo's `env:` values may refer to (filled in per night by pipelines.night)
ENV_PLACEHOLDERS = ("cache", "repo", "home", "hub")


def _env_problem(value: str) -> str | None:
    """Why an env template cannot be filled, or None."""
    try:
        names = [name for _, name, _, _ in string.Formatter().parse(value) if name is not None]
    except ValueError as exc:
        return f"{exc}; write a literal brace as {{{{ or }}}}"
    unknown = [n for n in names if n not in ENV_PLACEHOLDERS]
    if unknown:
        return (f"unknown placeholder {{{unknown[0]}}}; use {', '.join('{' + p + '}' for p in ENV_PLACEHOLDERS)}, "
                "and write a literal brace as {{ or }}")
    return None


def _line(mapping: Any, key: str) -> int:
    return getattr(mapping, "lines", {}).get(key, 1)


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

    def pool(self) -> Pool:
        return Pool(self.name, self.nodes, self.gpus_per_node)


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
    timeout_floor_s: int = 1800
    timeout_factor: float = 1.25
    #: environment for every test; ``{cache}`` expands to the local asset cache root
    env: dict[str, str] = field(default_factory=dict)
    #: extra requirement keys per test id glob, for what prepare() inference cannot resolve
    requirements: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: failure injection and similar per-run switches, passed to tests as environment
    hub: str = ""


@dataclass(frozen=True)
class ModelSpec:
    key: str
    source: str
    path: str


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
        name = name or os.environ.get("NIGHTLY_REPO_NAME") or self.default_repo
        if name not in self.repos:
            raise CatalogError(
                Problem(str(self.root / "repos.yaml"), 1, "repos", f"unknown repo {name!r}; known: {sorted(self.repos)}")
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
            raise CatalogError(Problem(str(value), 1, "--repo", (
                f"not a folder nor a repo name in {self.root / 'repos.yaml'} (known: {', '.join(sorted(self.repos)) or 'none'})")))
        return path, next((s for s in self.repos.values() if s.path.resolve() == path), None)

    def deployment(self, name: str | None = None) -> DeploymentSpec:
        name = name or os.environ.get("NIGHTLY_DEPLOYMENT") or self.default_deployment
        if name not in self.deployments:
            raise CatalogError(
                Problem(
                    str(self.root / "cluster.yaml"),
                    1,
                    "deployments",
                    f"unknown deployment {name!r}; known: {sorted(self.deployments)}",
                )
            )
        return self.deployments[name]


class _Reader:
    """Typed field access that collects located problems instead of raising on the first."""

    def __init__(self, path: Path):
        self.path = path
        self.problems: list[Problem] = []

    def get(self, m: Any, key: str, typ: type | tuple[type, ...], default: Any = ..., where: str = "") -> Any:
        label = f"{where}.{key}" if where else key
        if not isinstance(m, dict):
            self.problems.append(Problem(str(self.path), 1, where or key, "expected a mapping"))
            return None if default is ... else default
        if key not in m:
            if default is ...:
                self.problems.append(Problem(str(self.path), _line(m, key), label, "required key is missing"))
                return None
            return default
        value = m[key]
        if typ is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        bad_bool = isinstance(value, bool) and typ in (int, float)
        if bad_bool or not isinstance(value, typ):
            names = typ.__name__ if isinstance(typ, type) else "/".join(t.__name__ for t in typ)
            self.problems.append(
                Problem(str(self.path), _line(m, key), label, f"expected {names}, got {type(value).__name__} {value!r}")
            )
            return None if default is ... else default
        return value


def _pools(r: _Reader, raw: Any, where: str) -> tuple[PoolSpec, ...]:
    pools = []
    for name, p in (raw or {}).items():
        w = f"{where}.{name}"
        nodes = r.get(p, "nodes", int, where=w)
        gpn = r.get(p, "gpus_per_node", int, where=w)
        for k, v in (("nodes", nodes), ("gpus_per_node", gpn)):
            if isinstance(v, int) and v <= 0:
                r.problems.append(Problem(str(r.path), _line(p, k), f"{w}.{k}", f"must be positive, got {v}"))
        pools.append(
            PoolSpec(
                name=str(name),
                nodes=nodes or 1,
                gpus_per_node=gpn or 1,
                hardware=tuple(r.get(p, "hardware", list, [], where=w)) or (str(name),),
                image=r.get(p, "image", str, "", where=w),
                node_selector=dict(r.get(p, "node_selector", dict, {}, where=w)),
                tolerations=tuple(dict(t) for t in r.get(p, "tolerations", list, [], where=w)),
                shm_size=r.get(p, "shm_size", str, "32Gi", where=w),
                priority_class=r.get(p, "priority_class", str, "", where=w),
                queue=r.get(p, "queue", str, "", where=w),
                cpu_per_gpu=str(r.get(p, "cpu_per_gpu", (str, int), "4", where=w)),
                memory_per_gpu=str(r.get(p, "memory_per_gpu", str, "32Gi", where=w)),
                image_digest=r.get(p, "image_digest", str, "", where=w),
            )
        )
    return tuple(pools)


def load_specs(assets_dir: Path | str | None = None) -> Specs:
    """Read and validate every spec file in ``assets/``; raise one CatalogError listing all problems."""
    root = Path(assets_dir or os.environ.get("NIGHTLY_ASSETS_DIR") or DEFAULT_ASSETS_DIR).resolve()
    problems: list[Problem] = []

    repos_path = root / "repos.yaml"
    r = _Reader(repos_path)
    raw = load_yaml(repos_path)
    repos: dict[str, RepoSpec] = {}
    for name, m in (r.get(raw, "repos", dict, {}) or {}).items():
        w = f"repos.{name}"
        rel = r.get(m, "path", str, where=w) or "."
        timeout = r.get(m, "timeout", dict, {}, where=w)
        policy = r.get(m, "calibration", dict, {}, where=w)
        reqs = r.get(m, "requirements", dict, {}, where=w)
        for glob, keys in list(reqs.items()):
            if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
                r.problems.append(Problem(str(repos_path), _line(reqs, str(glob)), f"{w}.requirements.{glob}",
                                          f"expected a list of requirement keys, got {keys!r}"))
                reqs.pop(glob)
        env = r.get(m, "env", dict, {}, where=w)
        for key, value in env.items():
            bad = _env_problem(str(value))
            if bad:
                r.problems.append(Problem(str(repos_path), _line(env, str(key)), f"{w}.env.{key}", bad))
        repos[str(name)] = RepoSpec(
            name=str(name),
            path=(root.parent / rel).resolve() if not os.path.isabs(rel) else Path(rel),
            format=r.get(m, "format", str, "auto", where=w),
            roots=tuple(r.get(m, "roots", list, ["tests"], where=w)),
            implicit_cpu_dirs=tuple(r.get(m, "implicit_cpu_dirs", list, [], where=w)),
            template=r.get(m, "template", str, "", where=w),
            default_est_time=r.get(m, "default_est_time", int, 1800, where=w),
            default_num_gpus=r.get(m, "default_num_gpus", int, 8, where=w),
            policy=r.get(policy, "policy", str, "bucket125", where=f"{w}.calibration"),
            policy_params={k: v for k, v in policy.items() if k != "policy"},
            timeout_floor_s=r.get(timeout, "floor_s", int, 1800, where=f"{w}.timeout"),
            timeout_factor=r.get(timeout, "factor", float, 1.25, where=f"{w}.timeout"),
            env={str(k): str(v) for k, v in env.items()},
            requirements={str(k): tuple(map(str, v or ())) for k, v in reqs.items()},
            hub=r.get(m, "hub", str, "", where=w),
        )
    default_repo = r.get(raw, "default", str, next(iter(repos), ""))
    problems += r.problems

    cluster_path = root / "cluster.yaml"
    r = _Reader(cluster_path)
    raw = load_yaml(cluster_path)
    deployments: dict[str, DeploymentSpec] = {}
    for name, m in (r.get(raw, "deployments", dict, {}) or {}).items():
        w = f"deployments.{name}"
        launcher = r.get(m, "launcher", str, "local", where=w)
        if launcher not in ("local", "kubernetes"):
            r.problems.append(
                Problem(str(cluster_path), _line(m, "launcher"), f"{w}.launcher", f"must be local or kubernetes, got {launcher!r}")
            )
        storage = r.get(m, "storage", str, "local", where=w)
        if storage not in ("local", "s3"):
            r.problems.append(
                Problem(str(cluster_path), _line(m, "storage"), f"{w}.storage", f"must be local or s3, got {storage!r}")
            )
        deployments[str(name)] = DeploymentSpec(
            name=str(name),
            launcher=launcher,
            pools=_pools(r, r.get(m, "pools", dict, where=w), f"{w}.pools"),
            namespace=r.get(m, "namespace", str, "nightly-e2e", where=w),
            storage=storage,
            s3_bucket=r.get(m, "s3_bucket", str, "", where=w),
            s3_prefix=r.get(m, "s3_prefix", str, "", where=w),
            cache_pvc=r.get(m, "cache_pvc", str, "", where=w),
            hf_token_secret=r.get(m, "hf_token_secret", str, "", where=w),
            max_infra_retries=r.get(m, "max_infra_retries", int, 2, where=w),
            unschedulable_wait_s=r.get(m, "unschedulable_wait_s", int, 1800, where=w),
            cordon_bad_nodes=r.get(m, "cordon_bad_nodes", bool, False, where=w),
            startup_wait_s=r.get(m, "startup_wait_s", int, 900, where=w),
        )
    default_deployment = r.get(raw, "default", str, "local")
    problems += r.problems

    models: dict[str, ModelSpec] = {}
    datasets: dict[str, ModelSpec] = {}
    for fname, section, into in (("models.yaml", "models", models), ("datasets.yaml", "datasets", datasets)):
        p = root / fname
        if not p.exists():
            continue
        r = _Reader(p)
        raw = load_yaml(p)
        for key, m in (r.get(raw, section, dict, {}) or {}).items():
            w = f"{section}.{key}"
            into[str(key)] = ModelSpec(str(key), r.get(m, "source", str, where=w) or "", r.get(m, "path", str, where=w) or "")
        problems += r.problems

    conversion = None
    conv_path = root / "checkpoints.yaml"
    if conv_path.exists():
        r = _Reader(conv_path)
        raw = load_yaml(conv_path)
        m = r.get(raw, "conversion", dict, {})
        if m:
            conversion = ConversionSpec(
                command=tuple(map(str, r.get(m, "command", list, where="conversion") or ())),
                env={str(k): str(v) for k, v in r.get(m, "env", dict, {}, where="conversion").items()},
            )
        problems += r.problems

    if problems:
        raise CatalogError(problems)
    return Specs(root, repos, deployments, models, datasets, conversion, default_repo, default_deployment)
