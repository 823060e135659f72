"""Every pod a night would create, as YAML, without touching a cluster (``nightly run --dry-run``).

What a platform engineer reviews before the first night, like ``kubectl create --dry-run=client
-o yaml``: the build pods of the night's inputs (models and datasets first, then conversions),
then one test pod per planned test (first attempts; retries differ only in name, attempt and
the nodes they avoid). The bodies come from the same code that creates them
(:meth:`ClusterBuilder.pod`, :meth:`KubernetesLauncher.pod_for`), so what is printed is what
would be sent. Nodes are not pinned here (that needs the API); everything else is final.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from pipelines.core.model import Assignment, Plan, Requirement
from pipelines.core.specs import ConversionSpec, DeploymentSpec
from pipelines.launch.base import LaunchRequest
from pipelines.launch.kubernetes.builds import ClusterBuilder, build_pod_name
from pipelines.launch.kubernetes.launcher import KubernetesLauncher

RequestFactory = Callable[[Assignment, int, tuple[int, ...], int, tuple[str, ...]], LaunchRequest]
DRY_RUN_NONCE = "dry-run"


def night_pods(plan: Plan, deployment: DeploymentSpec, make_request: RequestFactory, *,
               requirements: Iterable[Requirement] = (), conversion: ConversionSpec | None = None,
               env: Mapping[str, str] | None = None, cache_paths: Mapping[str, str] | None = None,
               image_digests: Mapping[str, str] | None = None, run_id: str = "", workdir: str = "",
               owner: Mapping[str, Any] | None = None, repo: Path | None = None) -> list[dict[str, Any]]:
    """The pod bodies, builds first then tests in the order the dispatcher starts them."""
    reqs = list(requirements)
    models = {r.key: r for r in reqs if r.kind == "model"}
    pods: list[dict[str, Any]] = []
    if reqs and deployment.cache_pvc and deployment.pools:
        pool = max(deployment.pools, key=lambda p: p.gpus_per_node)  # where ClusterBuilder builds
        builder = ClusterBuilder(None, deployment, pool, workdir=workdir, run_id=run_id,  # type: ignore[arg-type]
                                 digest=(image_digests or {}).get(pool.name, ""), owner=dict(owner) if owner else None)
        for req in reqs:
            argv, pod_env, gpus = builder.prepared(req, models, conversion, dict(env or {}), DRY_RUN_NONCE, repo)
            pods.append(builder.pod(req, build_pod_name(req, DRY_RUN_NONCE, 1), argv, pod_env, gpus))
    launcher = KubernetesLauncher(None, deployment, pin_nodes=False, workdir=workdir,  # type: ignore[arg-type]
                                  cache_paths=cache_paths, env=env, image_digests=image_digests, owner=owner)
    for a in plan.ordered():
        request = make_request(a, a.node, tuple(range(a.gpus)), 1, ())
        pods.append(launcher.pod_for(request))
    return pods


class _NoAliases(yaml.SafeDumper):
    """Writes a dict shared by two places (the pre-flight's and the test's ``resources``) out in full
    each time, as ``kubectl -o yaml`` does, not as a ``&id001`` anchor and ``*id001`` alias."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def render_night_pods(plan: Plan, deployment: DeploymentSpec, make_request: RequestFactory, **kwargs: Any) -> str:
    """:func:`night_pods` as multi-document YAML (``---`` between pods), ready for ``kubectl apply --dry-run``."""
    pods = night_pods(plan, deployment, make_request, **kwargs)
    return yaml.dump_all(pods, Dumper=_NoAliases, sort_keys=False, explicit_start=True, width=120)
