"""``nightly doctor`` against the stand-in API server: a healthy cluster passes every check; each
broken one fails its own check, says how to fix it and exits 1.

The command runs as a maintainer runs it (``nightly doctor --deployment production`` with a
kubeconfig); the pre-flight pods are scripted by the stand-in from the GPU count they request.
"""

from __future__ import annotations

import json
import re
import textwrap

import pytest

from pipelines.cli import main
from pipelines.launch.kubernetes.preflight import OK_PREFIX
from tests.launch.kubernetes import pods
from tests.launch.kubernetes.apiserver import StandInApiServer, gpu_node

HEALTHY_PVC = {"metadata": {"name": "nightly-model-cache"}, "spec": {"accessModes": ["ReadWriteMany"]},
               "status": {"phase": "Bound", "accessModes": ["ReadWriteMany"]}}
QUEUES = {"namespaces/nightly-e2e/localqueues/h200-nightly": {"spec": {"clusterQueue": "h200-nightly"}},
          "clusterqueues/h200-nightly": {"spec": {}}}


def preflight_passes(pod, node):
    gpus = int({e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}["NIGHTLY_PREFLIGHT_GPUS"])
    facts = {"node": node, "gpus": gpus, "listed": gpus, "shm_bytes": 32 * 2**30}
    return pods.ends(node, pods.terminated("Succeeded", 0, "Completed"), logs=(OK_PREFIX + json.dumps(facts),))


def preflight_fails(pod, node):
    return pods.ends(node, pods.terminated("Failed", 86, "Error"),
                     logs=(f"nightly-preflight: CUDA init failed on {node}: CUresult 802 (fabric manager down)",))


def doctor(tmp_path, monkeypatch, capsys, *, nodes=None, pvc=HEALTHY_PVC, denied=(), script=preflight_passes,
           args=(), forbidden=()) -> tuple[int, str]:
    """``forbidden``: (method, path fragment) the API answers 403 Forbidden, every time."""
    server = StandInApiServer(script=script, node_objects=nodes)
    server.pvcs = {"nightly-model-cache": pvc}
    server.kueue = dict(QUEUES)
    server.denied = set(denied)
    for method, fragment in forbidden:
        server.fail(method, fragment, 403, times=1000)
    with server:
        (tmp_path / "kubeconfig").write_text(textwrap.dedent(f"""\
            apiVersion: v1
            kind: Config
            clusters: [{{name: stand-in, cluster: {{server: "{server.url}"}}}}]
            users: [{{name: launcher, user: {{token: stand-in}}}}]
            contexts: [{{name: stand-in, context: {{cluster: stand-in, user: launcher}}}}]
            current-context: stand-in
        """))
        monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
        code = main(["doctor", "--deployment", "production", "--kubeconfig", str(tmp_path / "kubeconfig"), "--wait", "30",
                     *args])
    return code, capsys.readouterr().out


def line(out: str, check: str) -> str:
    return next(x for x in out.splitlines() if x.startswith(check))


def cols(out: str, check: str) -> list[str]:
    """check, result, detail, fix of one row of the table."""
    return re.split(r"\s{2,}", line(out, check + " "))


def test_a_healthy_cluster_passes_every_check(tmp_path, monkeypatch, capsys):
    code, out = doctor(tmp_path, monkeypatch, capsys)
    assert code == 0, out
    assert "FAIL" not in out and out.rstrip().endswith("checks passed; ready for a night")
    for check in ("rbac: create pods", "rbac: get pods/log", "rbac: list nodes", "cache PVC nightly-model-cache",
                  "pool h200: nodes: h200-d", "pool h200: Kueue queue h200-nightly", "pool h200: image pinned",
                  "pool h200: pre-flight 1 GPU", "pool h200: pre-flight 8 GPUs", "pool h200: image digest"):
        assert cols(out, check)[1] == "ok", check
    assert "8 GPU(s) on h200-a, /dev/shm 32.0 GiB" in line(out, "pool h200: pre-flight 8 GPUs")


def test_a_missing_rbac_verb_fails_its_check_with_the_overlay_to_apply(tmp_path, monkeypatch, capsys):
    code, out = doctor(tmp_path, monkeypatch, capsys, denied={("pods/log", "get")}, args=("--no-pods",))
    assert code == 1
    assert cols(out, "rbac: get pods/log") == ["rbac: get pods/log", "FAIL", "denied in nightly-e2e",
                                               "kubectl apply -k k8s/overlays/production (grants get pods/log to nightly-launcher)"]
    assert cols(out, "rbac: create pods")[1] == "ok"


def test_a_node_without_gpu_labels_fails_and_the_pool_is_short_of_nodes(tmp_path, monkeypatch, capsys):
    nodes = [gpu_node(n) for n in ("h200-a", "h200-b", "h200-c", "h200-d")]
    del nodes[1]["metadata"]["labels"]["nvidia.com/gpu.count"]
    code, out = doctor(tmp_path, monkeypatch, capsys, nodes=nodes, args=("--no-pods",))
    assert code == 1
    bad = line(out, "pool h200: nodes: h200-b")
    assert "FAIL" in bad and "no nvidia.com/gpu.product/count labels" in bad and "install GPU feature discovery" in bad
    assert cols(out, "pool h200: nodes")[1:] == ["FAIL", "3 usable of 4 matching nvidia.com/gpu.product=NVIDIA-H200; the plan has 4",
                                                 "fix the nodes below or set pools.h200.nodes: 3"]


def test_an_untolerated_taint_is_named_with_the_toleration_to_add(tmp_path, monkeypatch, capsys):
    nodes = [gpu_node(n) for n in ("h200-a", "h200-b", "h200-c", "h200-d")]
    nodes[2]["spec"]["taints"].append({"key": "team", "value": "infer", "effect": "NoSchedule"})
    code, out = doctor(tmp_path, monkeypatch, capsys, nodes=nodes, args=("--no-pods",))
    assert code == 1
    assert "taint team=infer:NoSchedule not tolerated" in line(out, "pool h200: nodes: h200-c")
    assert "add a toleration for team to pools.h200.tolerations" in line(out, "pool h200: nodes: h200-c")


def test_an_unbound_pvc_fails_with_the_storage_it_needs(tmp_path, monkeypatch, capsys):
    pending = {**HEALTHY_PVC, "status": {"phase": "Pending"}}
    code, out = doctor(tmp_path, monkeypatch, capsys, pvc=pending, args=("--no-pods",))
    assert code == 1
    check = line(out, "cache PVC nightly-model-cache")
    assert cols(out, "cache PVC nightly-model-cache")[1:3] == ["FAIL", "Pending, ReadWriteMany"]
    assert "provisions ReadWriteMany volumes" in check


def test_a_failing_preflight_fails_with_what_the_node_said(tmp_path, monkeypatch, capsys):
    code, out = doctor(tmp_path, monkeypatch, capsys, script=preflight_fails)
    assert code == 1
    check = cols(out, "pool h200: pre-flight 1 GPU")
    assert check[1:3] == ["FAIL", "infra_error/gpu_unusable on h200-a: nightly-preflight: CUDA init failed on h200-a: "
                                  "CUresult 802 (fabric manager down)"]
    assert "fix the node's driver / fabric manager (gpu_unusable)" in check[3]


def api_rows(out: str) -> list[str]:
    return [x for x in out.splitlines() if x.startswith("api")]


def test_nodes_the_launcher_may_not_list_fail_the_pools_nodes_check_with_the_overlay(tmp_path, monkeypatch, capsys):
    """Without the node-reader ClusterRole the node list is 403: that is the nodes check, not the API's address."""
    code, out = doctor(tmp_path, monkeypatch, capsys, forbidden=[("GET", "/api/v1/nodes")], args=("--no-pods",))
    assert code == 1 and not api_rows(out)
    assert cols(out, "pool h200: nodes")[1:] == [
        "FAIL", "listing nodes refused (403 stand-in fault 403)",
        "kubectl apply -k k8s/overlays/production (its node-reader ClusterRole grants get/list nodes to nightly-launcher)"]
    assert cols(out, "cache PVC nightly-model-cache")[1] == "ok", "the checks after it still ran"


def test_an_identity_refused_access_reviews_is_one_rbac_row_and_the_other_checks_run(tmp_path, monkeypatch, capsys):
    code, out = doctor(tmp_path, monkeypatch, capsys, forbidden=[("POST", "selfsubjectaccessreviews")],
                       args=("--no-pods",))
    assert code == 1 and not api_rows(out)
    row = cols(out, "rbac: access review")
    assert row[1] == "FAIL" and row[2].startswith("SelfSubjectAccessReview refused (403 ")
    assert "run the doctor with the nightly-launcher's identity" in row[3]
    assert cols(out, "pool h200: nodes")[1] == "ok" and cols(out, "cache PVC nightly-model-cache")[1] == "ok"


def test_preflight_pods_the_api_refuses_say_which_rights_are_missing_not_a_nodes_driver(tmp_path, monkeypatch, capsys):
    code, out = doctor(tmp_path, monkeypatch, capsys, forbidden=[("POST", "/namespaces/nightly-e2e/pods")])
    assert code == 1
    for check in ("pool h200: pre-flight 1 GPU", "pool h200: pre-flight 8 GPUs"):
        row = cols(out, check)
        assert row[1] == "FAIL" and row[2].startswith("infra_error/create_rejected on -: the API refused the pod (403")
        assert row[3] == "kubectl apply -k k8s/overlays/production (its Role grants create pods in nightly-e2e to nightly-launcher)"
        assert "driver" not in row[3]


def test_a_local_deployment_is_refused_with_the_fix(capsys):
    assert main(["doctor", "--deployment", "local"]) == 2
    assert "deployment local runs tests locally (launcher: local); pass --deployment with a kubernetes deployment" \
           in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--no-pods", "--wait", "--kubeconfig", "--deployment"])
def test_help_documents_every_flag(flag, capsys):
    with pytest.raises(SystemExit):
        main(["doctor", "--help"])
    assert flag in capsys.readouterr().out


# ---- a kubeconfig that gives no credentials: one located line, exit 2, no traceback ----------------


def doctor_with(kubeconfig, monkeypatch, capsys, *args: str) -> tuple[int, str]:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBECONFIG", raising=False)
    code = main(["doctor", "--deployment", "production", "--no-pods", *(["--kubeconfig", str(kubeconfig)] if kubeconfig else []),
                 *args])
    return code, capsys.readouterr().err


ONE_CONTEXT = textwrap.dedent("""\
    apiVersion: v1
    kind: Config
    clusters: [{name: h200, cluster: {server: "https://127.0.0.1:1"}}]
    users: [{name: launcher, user: {token: t}}]
    contexts: [{name: h200-launcher, context: {cluster: h200, user: launcher}}]
    current-context: h200-launcher
""")


def test_a_missing_kubeconfig_is_named_with_how_to_point_at_one(tmp_path, monkeypatch, capsys):
    code, err = doctor_with(tmp_path / "nope", monkeypatch, capsys)
    assert code == 2
    assert err == (f"nightly doctor: kubeconfig {tmp_path / 'nope'}: no such file; pass --kubeconfig with the "
                   "launcher's kubeconfig or set KUBECONFIG (inside a pod the service account is used)\n")


def test_without_any_kubeconfig_the_default_path_is_the_one_named(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HOME", str(tmp_path))
    code, err = doctor_with(None, monkeypatch, capsys)
    assert code == 2
    assert err.startswith(f"nightly doctor: kubeconfig {tmp_path}/.kube/config: no such file; pass --kubeconfig")


def test_a_malformed_kubeconfig_is_located_to_its_line(tmp_path, monkeypatch, capsys):
    (tmp_path / "kubeconfig").write_text("apiVersion: v1\nclusters: [\n")
    code, err = doctor_with(tmp_path / "kubeconfig", monkeypatch, capsys)
    assert code == 2
    assert err.startswith(f"nightly doctor: kubeconfig {tmp_path / 'kubeconfig'}:3: not valid YAML (")
    assert err.rstrip().endswith("; fix the file (`kubectl config view` shows what it reads) or get a new one")
    assert "Traceback" not in err


def test_a_kubeconfig_of_the_wrong_shape_says_what_it_should_hold(tmp_path, monkeypatch, capsys):
    (tmp_path / "kubeconfig").write_text("- just\n- a list\n")
    code, err = doctor_with(tmp_path / "kubeconfig", monkeypatch, capsys)
    assert code == 2
    assert err == (f"nightly doctor: kubeconfig {tmp_path / 'kubeconfig'}: not a kubeconfig (expected a mapping with "
                   "clusters, users and contexts lists); fix the file or get a new one\n")


def test_an_unknown_context_lists_the_contexts_there_are(tmp_path, monkeypatch, capsys):
    (tmp_path / "kubeconfig").write_text(ONE_CONTEXT)
    code, err = doctor_with(tmp_path / "kubeconfig", monkeypatch, capsys, "--context", "h100")
    assert code == 2
    assert err == (f"nightly doctor: kubeconfig {tmp_path / 'kubeconfig'}: no context 'h100'; its contexts are: "
                   "h200-launcher (current); pass --context with one of them\n")


def test_an_unreachable_api_server_is_one_row_with_what_to_check_and_the_api_checks_stop(tmp_path, monkeypatch, capsys):
    import socket

    with socket.socket() as s:  # a port nobody listens on once closed: the connection is refused at once
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
    (tmp_path / "kubeconfig").write_text(ONE_CONTEXT.replace("https://127.0.0.1:1", url))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    code = main(["doctor", "--deployment", "production", "--kubeconfig", str(tmp_path / "kubeconfig")])
    out = capsys.readouterr().out
    assert code == 1
    row = cols(out, "api: cluster unreachable")
    assert row[:2] == ["api: cluster unreachable", "FAIL"]
    assert row[2].startswith(f"{url}: ") and row[2].endswith("Connection refused") and "object at 0x" not in row[2]
    assert row[3] == ("check the server address in the kubeconfig (`kubectl cluster-info`), the network or VPN to it, "
                      "and that the API server is up; the checks that need the API were not run")
    assert [x.split()[0] for x in out.splitlines()[2:] if x and not x[0].isdigit()] == ["api:", "pool"]
    assert cols(out, "pool h200: image pinned")[1] == "ok"  # the one check that needs no API still runs


@pytest.mark.parametrize("wait", ["0", "-5", "nan", "inf"])
def test_a_wait_that_is_not_a_positive_number_of_seconds_is_refused_before_connecting(wait, capsys):
    assert main(["doctor", "--deployment", "production", "--kubeconfig", "/nonexistent", "--wait", wait]) == 2
    assert capsys.readouterr().err == (f"nightly doctor: error:\n--wait: {float(wait):g} is not a positive number of "
                                       "seconds; give how long a pre-flight pod may wait, e.g. --wait 900\n")


def test_refused_credentials_are_one_row_with_how_to_renew_them_and_the_api_checks_stop(tmp_path, monkeypatch, capsys):
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Unauthorized(BaseHTTPRequestHandler):
        def _refuse(self) -> None:
            body = json.dumps({"kind": "Status", "status": "Failure", "message": "Unauthorized", "code": 401}).encode()
            self.send_response(401)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _refuse

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Unauthorized)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        (tmp_path / "kubeconfig").write_text(ONE_CONTEXT.replace("https://127.0.0.1:1", url))
        monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
        code = main(["doctor", "--deployment", "production", "--kubeconfig", str(tmp_path / "kubeconfig")])
    finally:
        server.shutdown()
        server.server_close()
    out = capsys.readouterr().out
    assert code == 1
    assert cols(out, "api: credentials refused") == [
        "api: credentials refused", "FAIL", f"{url}: 401 Unauthorized",
        "the kubeconfig's token or certificate is not accepted (expired?): get a fresh one, e.g. "
        "`kubectl -n nightly-e2e create token nightly-launcher`; the checks that need the API were not run"]
    assert [x.split()[0] for x in out.splitlines()[2:] if x and not x[0].isdigit()] == ["api:", "pool"]
