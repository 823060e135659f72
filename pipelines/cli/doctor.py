"""``nightly doctor``: check a Kubernetes cluster before the first night, and say how to fix it.

Checks, for the deployment in assets/cluster.yaml: RBAC for every verb the launcher uses
(SelfSubjectAccessReview, so run it with the launcher's identity), each pool's nodes (GPU
product and count labels, allocatable GPUs/CPU/memory, taints against the pool's
tolerations), the cache PVC (Bound, ReadWriteMany), the Kueue queues, the image digest, and
a 1-GPU and a whole-node pre-flight pod per pool (GPU count, CUDA init, /dev/shm size).
Prints one table; exits 1 when any check fails, 0 when all pass, 2 when there are no credentials
(a missing or malformed kubeconfig, an unknown --context: the message says which and how to fix it).
"""

from __future__ import annotations

import argparse
import math
import sys

from pipelines.cli.flags import FlagError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("doctor", help="check a Kubernetes cluster before the first night (RBAC, nodes, PVC, GPUs)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--deployment", help="deployment in assets/cluster.yaml (default: $NIGHTLY_DEPLOYMENT or its default)")
    p.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster, else $KUBECONFIG or ~/.kube/config)")
    p.add_argument("--context", help="kubeconfig context (default: the current one)")
    p.add_argument("--no-pods", action="store_true", help="skip the pre-flight pods (uses no GPUs)")
    p.add_argument("--wait", type=float, default=900.0, metavar="S",
                   help="seconds (> 0) a pre-flight pod may wait for a node, then pull and start (default 900)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pipelines.core.specs import load_specs

    if not (math.isfinite(args.wait) and args.wait > 0):
        raise FlagError(f"--wait: {args.wait:g} is not a positive number of seconds; give how long a pre-flight "
                        "pod may wait, e.g. --wait 900")
    deployment = load_specs().deployment(args.deployment)
    if deployment.launcher != "kubernetes":
        print(f"nightly doctor: deployment {deployment.name} runs tests locally (launcher: {deployment.launcher}); "
              "pass --deployment with a kubernetes deployment of assets/cluster.yaml", file=sys.stderr)
        return 2
    from pipelines.launch.kubernetes.connect import KubeconfigError, core_v1_api
    from pipelines.launch.kubernetes.doctor import diagnose, table

    try:
        api = core_v1_api(kubeconfig=args.kubeconfig, context=args.context)
    except KubeconfigError as exc:
        print(f"nightly doctor: {exc}", file=sys.stderr)
        return 2
    print(f"nightly doctor: deployment {deployment.name}, namespace {deployment.namespace}, "
          f"{api.api_client.configuration.host}", flush=True)
    checks = diagnose(api, deployment, pods=not args.no_pods, pending_wait_s=args.wait, startup_wait_s=args.wait)
    print(table(checks))
    failed = [c for c in checks if not c.ok]
    print(f"\n{len(checks) - len(failed)} of {len(checks)} checks passed"
          + (f"; fix the {len(failed)} marked FAIL, then run nightly doctor again" if failed else "; ready for a night"))
    return 1 if failed else 0
