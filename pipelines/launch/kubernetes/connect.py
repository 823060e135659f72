"""Credentials for the API: the pod's service account in the cluster, else a kubeconfig.

Also where a launcher for a deployment is made, with the run's own pod as the owner of the
pods it creates (:func:`ownership.run_pod_owner`). A kubeconfig that cannot give credentials
(missing, not YAML, no such context) is a :class:`KubeconfigError` naming the file and the fix,
never the client's traceback: it is the first thing a maintainer gets wrong on a new cluster.

Every call has a deadline (:class:`TimedApiClient`): the kubernetes client waits for ever by
default, so an API server or load balancer that accepts a connection and never answers would
hang the doctor, the launcher and the infra probe. With a deadline that becomes a timeout, which
each caller already reports as an unreachable cluster (``api: cluster unreachable``,
``infra_error/api_unreachable``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from pipelines.core.specs import DeploymentSpec
from pipelines.launch.kubernetes.launcher import KubernetesLauncher

#: (connect, read) seconds for a call that is not a stream. An API call answers in well under a
#: second; admission webhooks may take up to 30 s.
REQUEST_TIMEOUT_S: tuple[float, float] = (10.0, 60.0)
#: a watch ends by itself after its ``timeoutSeconds``; this much longer without a byte is a hang
WATCH_GRACE_S = 30.0


class TimedApiClient(client.ApiClient):
    """An ``ApiClient`` that gives every call a deadline unless the call names its own.

    Plain calls get ``timeout`` (connect, read). A watch (``watch=true``) may be quiet for its
    whole ``timeoutSeconds``, so its read limit is that plus :data:`WATCH_GRACE_S`. A log
    ``follow`` stream of a quiet test may rightly say nothing for an hour: it gets the connect
    limit only (the watch of its pod, not its log, decides the verdict).
    """

    def __init__(self, configuration: Any = None, *, timeout: tuple[float, float] | None = None):
        super().__init__(configuration)
        self.timeout = timeout or REQUEST_TIMEOUT_S

    def timeout_for(self, query_params: Any) -> tuple[float, float | None]:
        query = dict(query_params or ())
        connect, read = self.timeout
        if str(query.get("follow")).lower() == "true":
            return connect, None
        if str(query.get("watch")).lower() == "true":
            window = query.get("timeoutSeconds")
            return connect, (float(window) + WATCH_GRACE_S if window else None)
        return connect, read

    def request(self, method: str, url: str, query_params: Any = None, headers: Any = None, post_params: Any = None,
                body: Any = None, _preload_content: bool = True, _request_timeout: Any = None) -> Any:
        if _request_timeout is None:
            _request_timeout = self.timeout_for(query_params)
        return super().request(method, url, query_params=query_params, headers=headers, post_params=post_params,
                               body=body, _preload_content=_preload_content, _request_timeout=_request_timeout)


def launcher_from_deployment(deployment: DeploymentSpec, *, kubeconfig: str | None = None,
                             context: str | None = None, retries: int = 0, owner: Any = "auto",
                             **kwargs: Any) -> KubernetesLauncher:
    """A launcher for ``deployment`` with credentials from the pod (in cluster) or the kubeconfig.

    ``retries`` defaults to 0 because :func:`pipelines.launch.dispatch.run_plan` already retries
    infra errors on another node; use ``deployment.max_infra_retries`` when calling directly.
    ``owner="auto"``: the run's own pod when there is one (:func:`ownership.run_pod_owner`).
    """
    api = core_v1_api(kubeconfig=kubeconfig, context=context)
    if owner == "auto":
        from pipelines.launch.kubernetes.ownership import run_pod_owner

        owner = run_pod_owner(api, deployment.namespace)
    return KubernetesLauncher(api, deployment, retries=retries, owner=owner, **kwargs)


class KubeconfigError(ValueError):
    """No credentials for the API; the message names the kubeconfig and how to fix it."""


def kubeconfig_paths(kubeconfig: str | None = None) -> list[str]:
    """The files the client reads: ``kubeconfig``, else ``$KUBECONFIG`` (``:``-separated), else ~/.kube/config."""
    raw = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
    return [os.path.expanduser(p) for p in raw.split(os.pathsep) if p]


def check_kubeconfig(paths: list[str], context: str | None = None) -> None:
    """Raise :class:`KubeconfigError` unless the files exist, parse, and hold the context to use."""
    shown = os.pathsep.join(paths)
    found = [p for p in paths if os.path.isfile(p)]
    if not found:
        raise KubeconfigError(f"kubeconfig {shown}: no such file; pass --kubeconfig with the launcher's kubeconfig "
                              "or set KUBECONFIG (inside a pod the service account is used)")
    contexts: list[str] = []
    current = None
    for path in found:
        try:
            doc = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
        except OSError as exc:
            raise KubeconfigError(f"kubeconfig {path}: cannot be read ({exc.strerror}); check its permissions") from exc
        except (yaml.YAMLError, UnicodeDecodeError) as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f"{path}:{mark.line + 1}" if mark else path
            what = getattr(exc, "problem", None) or str(exc).splitlines()[0]
            raise KubeconfigError(f"kubeconfig {where}: not valid YAML ({what}); fix the file "
                                  "(`kubectl config view` shows what it reads) or get a new one") from exc
        if doc is None:
            continue
        if not isinstance(doc, dict) or not all(isinstance(doc.get(k) or [], list) for k in ("clusters", "users", "contexts")):
            raise KubeconfigError(f"kubeconfig {path}: not a kubeconfig (expected a mapping with clusters, users and "
                                  "contexts lists); fix the file or get a new one")
        contexts += [c["name"] for c in doc.get("contexts") or [] if isinstance(c, dict) and c.get("name")]
        current = current or doc.get("current-context")
    listed = ", ".join(f"{c} (current)" if c == current else c for c in dict.fromkeys(contexts))
    if not contexts:
        raise KubeconfigError(f"kubeconfig {shown}: no contexts; add one (`kubectl config set-context`, or your "
                              "cloud's get-credentials command) or pass --kubeconfig with another file")
    if context and context not in contexts:
        raise KubeconfigError(f"kubeconfig {shown}: no context {context!r}; its contexts are: {listed}; "
                              "pass --context with one of them")
    if not context and current not in contexts:
        said = f"current-context {current!r} is not among its contexts" if current else "no current-context"
        raise KubeconfigError(f"kubeconfig {shown}: {said}; its contexts are: {listed}; pass --context with one of "
                              "them (or `kubectl config use-context NAME`)")


def core_v1_api(*, kubeconfig: str | None = None, context: str | None = None) -> client.CoreV1Api:
    """A CoreV1Api from the in-cluster service account, or ``--kubeconfig`` / ``$KUBECONFIG`` / ``~/.kube/config``.

    Raises :class:`KubeconfigError` (a message, no traceback) when neither gives credentials.
    """
    from kubernetes import config
    from kubernetes.config.config_exception import ConfigException

    if os.environ.get("KUBERNETES_SERVICE_HOST") and not kubeconfig:
        try:
            config.load_incluster_config()
        except ConfigException as exc:
            raise KubeconfigError(f"in-cluster service account: {exc}; run in a pod with the nightly-launcher "
                                  "ServiceAccount, or pass --kubeconfig") from exc
        return client.CoreV1Api(TimedApiClient())
    # $KUBECONFIG read now: the client reads it once, when kubernetes is first imported
    paths = kubeconfig_paths(kubeconfig)
    check_kubeconfig(paths, context)
    try:
        config.load_kube_config(config_file=os.pathsep.join(paths), context=context)
    except (ConfigException, ValueError, TypeError, OSError) as exc:  # a cluster or user entry it cannot use
        first = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise KubeconfigError(f"kubeconfig {os.pathsep.join(paths)}: {first}; check the context's cluster and user "
                              "(`kubectl config view --minify`)") from exc
    return client.CoreV1Api(TimedApiClient())
