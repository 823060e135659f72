"""The whole production path on a stand-in cluster: Night -> builds -> dispatch -> pods -> outcomes -> history.

The ``production`` deployment of a copy of ``assets/`` is reached through a kubeconfig file
(``KUBECONFIG``), so the real config loading path of the launcher is used; its S3 history is a
moto server. Build pods really
run on this machine (``tests/launch/kubernetes/kubelet.py``) and fill a local "PVC"; test pods
are scripted: one fails with exit 1, one is OOM-killed, one hits UnexpectedAdmissionError on
the node its first attempt is pinned to and passes on another node; the rest pass only if every input they need is visible
through their own mounts. A second night runs the Dagster ``nightly`` job on the same cluster
and must reuse every built input.
"""

from __future__ import annotations

import json
import textwrap

import dagster as dg
import pytest

from pipelines.definitions import build_definitions
from pipelines.defs.resources import NightlyResource
from pipelines.night import Night, NightSettings
from pipelines.storage.cache import MARKER
from tests.conftest import PROJECT_ROOT
from tests.launch.kubernetes import pods
from tests.launch.kubernetes.apiserver import StandInApiServer, Step
from tests.launch.kubernetes.kubelet import Kubelet
from tests.support.assets import example_assets
from tests.support.moto import CREDENTIALS, moto_server, s3_client

pytestmark = pytest.mark.slow

EXAMPLE = PROJECT_ROOT / "examples" / "minirl"
SECRET = "hf_" + "NightT0kenValue" * 3
FAIL_ID = "tests/e2e/megatron/test_sft_math.py"
OOM_ID = "tests/e2e/test_backend_matrix.py"
ADMIT_ID = "tests/e2e/fsdp/test_fsdp_6gpu_chat.py"
CARELESS_ID = "tests/e2e/megatron/test_grpo_math.py"  # prints a token it found somewhere
LABELS = ("megatron", "fsdp")
# every test's timeout: nothing here hangs, and a passing example test took up to 41 s on the
# loaded 2-CPU machine (the example's own floor is 60 s), so a generous floor costs nothing
FLOOR_S = 300
RERUN_ID = "tests/e2e/megatron/test_dp8_chat.py"  # rerun alone through the PipesK8sClient path
POD_KIND = "app.kubernetes.io/name"
BUCKET = "nightly-e2e-history"  # the production deployment's s3_bucket in assets/cluster.yaml
LEFTOVER = "leftover"
ANOTHER_RUN = "0b7c1d2e-9f3a-4c55-8e21-another-instance"


def _kubeconfig(path, url: str) -> None:
    path.write_text(textwrap.dedent(f"""\
        apiVersion: v1
        kind: Config
        clusters: [{{name: stand-in, cluster: {{server: "{url}"}}}}]
        users: [{{name: nightly, user: {{token: stand-in-token}}}}]
        contexts: [{{name: stand-in, context: {{cluster: stand-in, user: nightly, namespace: nightly-e2e}}}}]
        current-context: stand-in
    """))


def _settings(home, assets) -> NightSettings:
    return NightSettings(home=home, assets_dir=assets, deployment="production", labels=LABELS,
                         extra_env=(("HF_TOKEN", SECRET),), timeout_floor_s=FLOOR_S)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("k8s-night")
    home, assets = tmp / "home", tmp / "assets"
    example_assets(assets)
    kubelet = Kubelet.create(tmp, EXAMPLE, EXAMPLE / "hub", {"hf-token": {"token": SECRET}})
    needs: dict[str, list[str]] = {}  # test id -> container paths of its inputs, once the night is open

    def test_pod(pod, node):
        tid = pod["metadata"]["annotations"]["nightly-e2e.io/test-id"]
        if tid == FAIL_ID:
            return pods.ends(node, pods.terminated("Failed", 1, "Error"), logs=("loss went up",))
        if tid == OOM_ID:
            return pods.ends(node, pods.terminated("Failed", 137, "OOMKilled"))
        if tid == ADMIT_ID and pod["metadata"]["labels"]["nightly-e2e.io/attempt"] == "1":
            return [Step(mutate=pods.scheduled(node)), Step(mutate=pods.failed_at_admission())]

        def work() -> Step:  # the test runs only if each input is there, through this pod's mounts
            missing = [p for p in needs[tid] if not ((kubelet.local(pod, p) or tmp / "none") / MARKER).is_file()]
            if missing:
                return Step(mutate=pods.terminated("Failed", 1, "Error"), logs=(f"missing inputs: {missing}",))
            said = (f"HF_TOKEN={SECRET}",) if tid == CARELESS_ID else ()
            return Step(mutate=pods.terminated("Succeeded", 0, "Completed"), logs=(*said, "loss went down"))
        return [Step(mutate=pods.scheduled(node)), Step(mutate=pods.running()), Step(work=work)]

    def script(pod, node):
        kind = pod["metadata"]["labels"][POD_KIND]
        if kind == LEFTOVER:  # a test pod some other run left running
            return [Step(mutate=pods.scheduled(node)), Step(mutate=pods.running())]
        return kubelet.steps(pod, node) if kind == "nightly-e2e-build" else test_pod(pod, node)

    with StandInApiServer(script=script) as server, moto_server() as s3_url, pytest.MonkeyPatch.context() as mp:
        s3_client(s3_url).create_bucket(Bucket=BUCKET)
        for k, v in {**CREDENTIALS, "NIGHTLY_S3_ENDPOINT": s3_url}.items():
            mp.setenv(k, v)
        _kubeconfig(tmp / "kubeconfig", server.url)
        mp.setenv("KUBECONFIG", str(tmp / "kubeconfig"))
        mp.delenv("KUBERNETES_SERVICE_HOST", raising=False)
        mp.delenv("HF_ENDPOINT", raising=False)
        night = Night(_settings(home, assets))
        paths = {r.key: r.path for r in night.catalog.requirements}
        needs.update({t.id: [paths[k] for k in t.requirements] for t in night.catalog.tests})
        tests, _ = night.selected()
        plan = night.plan(tests)
        first_builds = [night.build(req) for req in night.requirements_for(tests)]
        result = night.run(plan)
        after_first = len(server.created)
        markers = {p: p.stat().st_mtime_ns for p in kubelet.pvc.rglob(MARKER)}
        with dg.instance_for_test() as instance:
            resource = NightlyResource(home=str(home), assets_dir=str(assets), deployment="production")
            defs = build_definitions(nightly=resource)
            keys = sorted(t.id for t in night.catalog.tests)
            tags = {"dagster/asset_partition_range_start": keys[0], "dagster/asset_partition_range_end": keys[-1]}
            second = defs.resolve_job_def("nightly").execute_in_process(instance=instance, tags=tags, run_config={
                "ops": {"test_runs": {"config": {"cadence": "nightly", "labels": list(LABELS), "timeout_floor_s": FLOOR_S}}}})
            second_summary = Night(_settings(home, assets)).summary(second.run_id)
            reused = _observed(instance, "converted_checkpoints") | _observed(instance, "model_weights") | _observed(
                instance, "datasets")
            yield {"night": night, "plan": plan, "result": result, "builds": first_builds, "server": server,
                   "kubelet": kubelet, "after_first": after_first, "markers": markers, "second": second,
                   "second_summary": second_summary, "reused": reused, "home": home, "needs": needs,
                   "instance": instance, "defs": defs}


@pytest.fixture(scope="module")
def rerun(cluster):
    """One test_runs partition alone, as a rerun from the UI: the PipesK8sClient path."""
    server, instance = cluster["server"], cluster["instance"]
    # pods left running: one by a run pod of a nightly run this instance saw end, one by such a run
    # pod that could not own it (in another namespace), one by a run of another instance, and one
    # by a workstation's night this instance has as ended (the cluster's run monitor fails such a
    # night while it runs): only the first two may go
    owner = {"ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "dagster-run-x", "uid": "u"}]}
    unowned = {"annotations": {"nightly-e2e.io/launched-by": "run-pod=dagster-run-y"}}
    workstation = {"annotations": {"nightly-e2e.io/launched-by": "host=laptop-7 boot=b pidns=1 pid=4242 start=9"}}
    for name, run_id, meta in (("left-by-an-ended-run", cluster["second"].run_id, owner),
                               ("left-by-an-ended-run-unowned", cluster["second"].run_id, unowned),
                               ("another-instances", ANOTHER_RUN, owner),
                               ("a-live-workstations", cluster["second"].run_id, workstation)):
        server.core_v1().create_namespaced_pod("nightly-e2e", {
            "apiVersion": "v1", "kind": "Pod", "spec": {"containers": [{"name": "test", "image": "x"}]},
            "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "nightly-e2e", POD_KIND: LEFTOVER,
                                                  "nightly-e2e.io/run-id": run_id}, **meta}})
    before = len(server.created)
    result = cluster["defs"].resolve_job_def("tests").execute_in_process(instance=instance, partition_key=RERUN_ID,
                                                                         raise_on_error=False)
    mats = [r.event_log_entry.dagster_event.event_specific_data.materialization for r in
            instance.fetch_materializations(dg.AssetKey("test_runs"), limit=1000).records if r.run_id == result.run_id]
    return {"result": result, "pods": server.created[before:], "mats": mats}


def _observed(instance, key: str) -> dict[str, dict]:
    out = {}
    for r in instance.fetch_observations(dg.AssetKey(key), limit=1000).records:
        obs = r.event_log_entry.dagster_event.event_specific_data.asset_observation
        out[obs.partition] = {k: v.value for k, v in obs.metadata.items()}
    return out


def _pods(server, kind: str) -> list[dict]:
    return [b for b in server.created if b["metadata"]["labels"][POD_KIND] == kind]


def test_each_test_ends_with_the_outcome_its_pod_showed(cluster):
    final = cluster["result"].final()
    planned = {a.test_id for a in cluster["plan"].assignments}
    assert set(final) == planned and len(planned) >= 6
    assert (final[FAIL_ID].outcome, final[FAIL_ID].reason, final[FAIL_ID].exit_code) == ("failed", "exit_code", 1)
    assert (final[OOM_ID].outcome, final[OOM_ID].reason) == ("failed", "oom_killed")
    passed = {t for t, a in final.items() if a.outcome == "passed"}
    assert passed == planned - {FAIL_ID, OOM_ID}, {t: (a.outcome, a.details.get("message")) for t, a in final.items()}


def test_the_gpu_admission_failure_is_retried_on_another_node_with_anti_affinity(cluster):
    tries = [a for a in cluster["result"].attempts if a.test_id == ADMIT_ID]
    bad = tries[0].node
    assert [(a.attempt, a.outcome, a.reason, a.node) for a in tries] == [
        (1, "infra_error", "gpu_unusable", bad), (2, "passed", "", tries[1].node)]
    assert bad.startswith("h200-") and tries[1].node not in ("", bad)
    first, retry = (next(b for b in _pods(cluster["server"], "nightly-e2e-test")
                         if b["metadata"]["annotations"]["nightly-e2e.io/test-id"] == ADMIT_ID
                         and b["metadata"]["labels"]["nightly-e2e.io/attempt"] == n) for n in ("1", "2"))
    def exprs(body):
        return body["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"][0]["matchFields"]
    assert exprs(first) == [{"key": "metadata.name", "operator": "In", "values": [bad]}], "pinned to the plan's node"
    assert {"key": "metadata.name", "operator": "NotIn", "values": [bad]} in exprs(retry)


def test_history_records_every_attempt_with_its_node(cluster):
    night = cluster["night"]
    samples = [s for s in night.history.read() if s.run_id == night.run_id]
    assert len(samples) == len(cluster["result"].attempts)
    assert all(s.node.startswith("h200-") for s in samples)
    bad = next(a.node for a in cluster["result"].attempts if a.test_id == ADMIT_ID and a.attempt == 1)
    assert {(s.outcome, s.node) for s in samples if s.test_id == ADMIT_ID} >= {("infra_error", bad)}


def test_inputs_are_built_once_on_the_cluster_and_reused_the_next_night(cluster):
    builds = cluster["builds"]
    keys = [b.key for b in builds]
    assert len(keys) == len(set(keys)) >= 7 and not any(b.reused for b in builds)
    # the single-partition rerun at the end probes its own inputs again: not part of the two nights
    build_pods = _pods(cluster["server"], "nightly-e2e-build")[:2 * len(builds)]
    first, later = build_pods[:len(builds)], build_pods[len(builds):]
    assert [b["metadata"]["annotations"]["nightly-e2e.io/requirement-key"] for b in first] == keys
    assert len(later) == len(builds), "the second night probes each input once"
    assert set(cluster["reused"]) == set(keys) and all(m["reused"] for m in cluster["reused"].values())
    assert {p: p.stat().st_mtime_ns for p in cluster["kubelet"].pvc.rglob(MARKER)} == cluster["markers"]
    logs = cluster["server"].state.logs
    assert all(any(line.startswith("nightly: reused") for line in logs[b["metadata"]["name"]]) for b in later)
    assert all(any(line.startswith("nightly: built") for line in logs[b["metadata"]["name"]]) for b in first)


def test_the_dagster_nightly_job_ran_the_same_tests_on_the_cluster(cluster):
    assert cluster["second"].success
    summary = cluster["second_summary"]
    final = {a["test_id"]: a for a in summary["attempts"]}
    assert set(final) == {a.test_id for a in cluster["plan"].assignments}
    assert all(a["node"].startswith("h200-") for a in summary["attempts"])
    assert final[OOM_ID]["reason"] == "oom_killed"


def test_test_pods_mount_their_inputs_read_only_and_see_pod_paths_not_this_machine(cluster):
    tests = _pods(cluster["server"], "nightly-e2e-test")
    kubelet = cluster["kubelet"]
    for body in tests:
        tid = body["metadata"]["annotations"]["nightly-e2e.io/test-id"]
        for path in cluster["needs"][tid]:
            assert kubelet.local(body, path) is not None, (tid, path)
        assert all(ro for _f, ro in kubelet.mounts(body).values())
        env = {e["name"]: e.get("value") for e in body["spec"]["containers"][0]["env"]}
        assert env["MINIRL_ROOT"] == "/root"
        assert not [v for v in env.values() if v and str(cluster["home"]) in v]
        assert not [v for v in env.values() if v and str(PROJECT_ROOT) in v]


def test_the_hf_token_never_appears_in_a_pod_spec_or_a_log(cluster):
    server = cluster["server"]
    assert SECRET not in json.dumps(server.created)
    printed = [name for name, lines in server.state.logs.items() if any(SECRET in line for line in lines)]
    assert printed, "the careless test did print a token, so the check below can fail"
    files = [p for p in cluster["home"].rglob("*") if p.is_file()]
    assert files and not [p for p in files if SECRET.encode() in p.read_bytes()]
    for body in server.created:
        refs = [e for e in body["spec"]["containers"][0]["env"] if e["name"] == "HF_TOKEN"]
        kind = body["metadata"]["labels"][POD_KIND]
        downloads = kind == "nightly-e2e-build" and body["metadata"]["labels"]["nightly-e2e.io/kind"] in ("model", "dataset")
        expected = [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token"}}}] if downloads else []
        assert refs == expected, body["metadata"]["name"]


def test_a_single_partition_rerun_goes_through_pipes_k8s_with_the_same_pod_and_our_verdict(cluster, rerun):
    assert rerun["result"].success, [e.message for e in rerun["result"].all_events if e.is_failure][:3]
    (mat,) = rerun["mats"]
    assert mat.partition == RERUN_ID
    assert mat.metadata["outcome"].value == "passed" and mat.metadata["node"].value.startswith("h200-")
    (pod,) = [p for p in rerun["pods"] if p["metadata"].get("annotations", {}).get("nightly-e2e.io/test-id")]
    env = {e["name"] for e in pod["spec"]["containers"][0]["env"]}
    assert "DAGSTER_PIPES_CONTEXT" in env, "the pod was not created by PipesK8sClient"
    for path in cluster["needs"][RERUN_ID]:
        assert cluster["kubelet"].local(pod, path) is not None, path


def test_a_run_deletes_the_pods_of_runs_its_instance_saw_end_and_no_others(cluster, rerun):
    assert rerun["result"].success
    left = set(cluster["server"].state.pods)
    assert "left-by-an-ended-run" not in left
    assert "left-by-an-ended-run-unowned" not in left, "a cluster run's pod without an owner was never swept"
    assert "another-instances" in left, "a pod of another instance's night was deleted"
    assert "a-live-workstations" in left, "a pod of a workstation's night was deleted by its Dagster status"
