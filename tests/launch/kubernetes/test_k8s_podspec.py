"""The test pod: what a platform engineer would check in it, and strict schema validation."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import kubernetes_validate
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.core.specs import load_specs
from pipelines.launch.base import LaunchRequest
from pipelines.launch.kubernetes.podspec import build_pod, label_value
from pipelines.launch.kubernetes.preflight import PREFLIGHT_COMMAND
from pipelines.launch.kubernetes.resources import bytes_of, millicores
from tests.conftest import PROJECT_ROOT, make_test

SPECS = load_specs(PROJECT_ROOT / "assets")
PRODUCTION = SPECS.deployment("production")
POOL = PRODUCTION.pools[0]
SECRET = "hf_" + "x1y2z3" * 6


def request(**kw) -> LaunchRequest:
    test = kw.pop("test", make_test(id="tests/e2e/megatron/test_qwen.py[fp8]", path="tests/e2e/megatron/test_qwen.py",
                                    gpus=8, args=("--config", "fp8; rm -rf /"), env=(("USE_FP8", "1"),)))
    return LaunchRequest(test=test, repo_path=Path("/repo"), timeout_s=1500, log_path=Path("/tmp/x.log"),
                         env={"HF_TOKEN": SECRET, "HUGGING_FACE_HUB_TOKEN": SECRET, "MARK": "m"}, attempt=2,
                         run_id="b7c1e0f2-run", night="2026-12-01", pool="h200", **kw)


def container(pod):
    return pod["spec"]["containers"][0]


def test_the_production_pod_validates_strictly_against_kubernetes_1_31():
    pod = build_pod(request(avoid_nodes=("h200-a",)), POOL, PRODUCTION)
    kubernetes_validate.validate(pod, "1.31", strict=True)


def test_a_misspelled_field_fails_strict_validation_so_the_check_can_fail():
    pod = build_pod(request(), POOL, PRODUCTION)
    container(pod)["volumeMount"] = []
    with pytest.raises(kubernetes_validate.ValidationError, match="volumeMount"):
        kubernetes_validate.validate(pod, "1.31", strict=True)


def test_gpus_cpu_and_memory_are_requested_per_gpu_and_memory_is_limited_to_its_request():
    res = container(build_pod(request(), POOL, PRODUCTION))["resources"]
    assert res == {"requests": {"nvidia.com/gpu": "8", "cpu": "160", "memory": "1600Gi"},
                   "limits": {"nvidia.com/gpu": "8", "memory": "1600Gi"}}


def test_a_cpu_only_pod_gets_one_gpus_share_so_it_is_never_best_effort():
    res = container(build_pod(request(test=make_test(gpus=0)), POOL, PRODUCTION))["resources"]
    assert res == {"requests": {"cpu": "20", "memory": "200Gi"}, "limits": {"memory": "200Gi"}}


def test_fractional_shares_are_exact():
    pool = dataclasses.replace(POOL, cpu_per_gpu="1.5", memory_per_gpu="1536Mi")
    res = container(build_pod(request(test=make_test(gpus=3)), pool, PRODUCTION))["resources"]["requests"]
    assert (res["cpu"], res["memory"]) == ("4500m", "4608Mi")
    assert (millicores(res["cpu"]), bytes_of(res["memory"])) == (4500, 4608 * 2**20)


def test_a_quantity_that_is_not_one_is_refused_with_the_fix():
    with pytest.raises(ValueError, match=r"'12 cores' is not a Kubernetes quantity; write e.g. \"12\""):
        millicores("12 cores")
    with pytest.raises(ValueError, match="'200Gi' is not a CPU quantity"):
        millicores("200Gi")


def test_pool_placement_priority_queue_and_image_come_from_assets():
    pod = build_pod(request(), POOL, PRODUCTION)
    spec = pod["spec"]
    assert spec["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H200"}
    assert spec["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert spec["priorityClassName"] == "nightly-e2e"
    assert pod["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "h200-nightly"
    assert spec["restartPolicy"] == "Never" and "affinity" not in spec


def test_avoided_nodes_become_node_name_not_in_requirements_one_per_node():
    pod = build_pod(request(avoid_nodes=("h200-c", "h200-a", "h200-c")), POOL, PRODUCTION)
    terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    # by name, not the kubernetes.io/hostname label; the API server takes one value per field requirement
    assert terms == [{"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["h200-a"]},
                                      {"key": "metadata.name", "operator": "NotIn", "values": ["h200-c"]}]}]
    kubernetes_validate.validate(pod, "1.31", strict=True)


def test_shm_is_a_memory_empty_dir_and_caches_are_read_only_sub_paths():
    pod = build_pod(request(), POOL, PRODUCTION)
    vols = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert vols["dshm"] == {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "32Gi"}}
    assert vols["cache"]["persistentVolumeClaim"] == {"claimName": "nightly-model-cache", "readOnly": True}
    mounts = {m["mountPath"]: m for m in container(pod)["volumeMounts"]}
    assert mounts["/dev/shm"]["name"] == "dshm"
    assert (mounts["/root/models"]["subPath"], mounts["/root/models"]["readOnly"]) == ("models", True)
    assert (mounts["/root/datasets"]["subPath"], mounts["/root/datasets"]["readOnly"]) == ("datasets", True)


def test_test_pods_get_no_token_at_all_neither_literal_nor_from_the_secret():
    pod = build_pod(request(), POOL, PRODUCTION)
    assert SECRET not in json.dumps(pod)
    # the attempt token is no credential: the wrapper's completion record must carry it for a pass
    assert not [e for e in container(pod)["env"] if "TOKEN" in e["name"] and e["name"] != "NIGHTLY_ATTEMPT_TOKEN"]
    assert "hf-token" not in json.dumps(pod), "downloads happen in build pods only"


def test_labels_carry_the_test_run_night_attempt_and_the_full_id_is_annotated():
    meta = build_pod(request(), POOL, PRODUCTION)["metadata"]
    assert meta["labels"]["nightly-e2e.io/test"] == "tests-e2e-megatron-test_qwen.py-fp8"
    assert meta["labels"]["nightly-e2e.io/run-id"] == "b7c1e0f2-run"
    assert meta["labels"]["nightly-e2e.io/night"] == "2026-12-01"
    assert meta["labels"]["nightly-e2e.io/attempt"] == "2"
    assert meta["annotations"]["nightly-e2e.io/test-id"] == "tests/e2e/megatron/test_qwen.py[fp8]"
    assert meta["name"].startswith("nt-test-qwen-") and meta["name"].endswith("-a2") and len(meta["name"]) <= 63


@settings(max_examples=60, deadline=None)
@given(st.text(min_size=1, max_size=200))
def test_any_test_id_becomes_a_valid_label_value(text):
    value = label_value(text)
    assert len(value) <= 63
    pod = build_pod(request(test=make_test(id=text, path="tests/t.py")), POOL, PRODUCTION)
    assert pod["metadata"]["labels"]["nightly-e2e.io/test"] == value
    if value:
        assert value[0].isalnum() and value[-1].isalnum()


def test_the_image_is_pinned_by_digest_so_if_not_present_is_safe():
    c = container(build_pod(request(), POOL, PRODUCTION))
    assert c["image"] == f"ghcr.io/example/rl-framework-nightly-e2e:nightly-0.1.0@{POOL.image_digest}"
    assert c["imagePullPolicy"] == "IfNotPresent"


def test_the_nights_digest_wins_and_an_unpinned_tag_is_always_pulled():
    tonight = "sha256:" + "1" * 64
    assert container(build_pod(request(), POOL, PRODUCTION, digest=tonight))["image"].endswith("@" + tonight)
    c = container(build_pod(request(), dataclasses.replace(POOL, image_digest=""), PRODUCTION))
    assert (c["image"], c["imagePullPolicy"]) == ("ghcr.io/example/rl-framework-nightly-e2e:nightly-0.1.0", "Always")


def test_the_preflight_is_an_init_container_with_the_same_image_gpus_and_resources():
    pod = build_pod(request(), POOL, PRODUCTION)
    [init] = pod["spec"]["initContainers"]
    assert init["name"] == "preflight" and init["command"] == list(PREFLIGHT_COMMAND)
    assert (init["image"], init["resources"]) == (container(pod)["image"], container(pod)["resources"])
    assert {e["name"]: e.get("value") for e in init["env"]}["NIGHTLY_PREFLIGHT_GPUS"] == "8"
    assert "preflight" not in json.dumps(container(pod)["command"])


def test_a_cpu_only_pod_preflights_only_the_wrapper_and_sees_no_gpu():
    """It runs ``python3 -m pipelines.launch.wrapper`` too: a plain framework image is exit 87, not a test failure."""
    pod = build_pod(request(test=make_test(gpus=0)), POOL, PRODUCTION)
    assert container(pod)["command"][:3] == ["python3", "-m", "pipelines.launch.wrapper"]
    [init] = pod["spec"]["initContainers"]
    env = {e["name"]: e.get("value") for e in init["env"]}
    assert (env["NIGHTLY_PREFLIGHT_GPUS"], env["NIGHTLY_PREFLIGHT_WRAPPER"]) == ("0", "1")
    assert init["resources"] == container(pod)["resources"] and "nvidia.com/gpu" not in json.dumps(init["resources"])
    assert {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"} in container(pod)["env"]
    gpu_pod = build_pod(request(), POOL, PRODUCTION)
    assert "NVIDIA_VISIBLE_DEVICES" not in json.dumps(container(gpu_pod)["env"])


def test_the_backstop_deadline_leaves_room_for_pulls_and_preflight():
    assert build_pod(request(), POOL, PRODUCTION)["spec"]["activeDeadlineSeconds"] == 1500 + PRODUCTION.startup_wait_s


def test_the_command_is_the_wrapper_with_python3_and_test_data_as_plain_arguments():
    cmd = container(build_pod(request(), POOL, PRODUCTION))["command"]
    assert cmd == ["python3", "-m", "pipelines.launch.wrapper", "--file", "tests/e2e/megatron/test_qwen.py",
                   "--func", "execute", "--result", "/dev/termination-log", "--", "--config", "fp8; rm -rf /"]


def test_each_attempt_gets_a_fresh_token_and_the_record_goes_where_the_kubelet_reads_it():
    """A pass needs the wrapper's completion record with this attempt's token (as locally)."""
    def token(pod):
        return next(e["value"] for e in container(pod)["env"] if e["name"] == "NIGHTLY_ATTEMPT_TOKEN")
    first, second = build_pod(request(), POOL, PRODUCTION), build_pod(request(), POOL, PRODUCTION)
    assert len(token(first)) == 32 and token(first) != token(second)
    assert token(build_pod(request(), POOL, PRODUCTION, token="t-1")) == "t-1"
    c = container(first)
    # the log's end when the wrapper could not write the record: its line there tells its 74 from the test's
    assert (c["terminationMessagePath"], c["terminationMessagePolicy"]) == ("/dev/termination-log", "FallbackToLogsOnError")
    assert c["command"][c["command"].index("--result") + 1] == c["terminationMessagePath"]
    kubernetes_validate.validate(first, "1.31", strict=True)


def test_a_pinned_node_is_required_unless_it_is_to_be_avoided():
    def exprs(pod):
        return pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"][0]["matchFields"]
    pinned = build_pod(request(), POOL, PRODUCTION, node_name="h200-c")
    assert exprs(pinned) == [{"key": "metadata.name", "operator": "In", "values": ["h200-c"]}]
    avoided = build_pod(request(avoid_nodes=("h200-c",)), POOL, PRODUCTION, node_name="h200-c")
    assert exprs(avoided) == [{"key": "metadata.name", "operator": "NotIn", "values": ["h200-c"]}]
    kubernetes_validate.validate(pinned, "1.31", strict=True)


def test_the_runs_pod_owns_the_test_pod():
    owner = {"apiVersion": "v1", "kind": "Pod", "name": "dagster-run-1a2b", "uid": "0b7c-uid"}
    pod = build_pod(request(), POOL, PRODUCTION, owner=owner, attempt_uid="u1")
    assert pod["metadata"]["ownerReferences"] == [owner]
    assert pod["metadata"]["annotations"]["nightly-e2e.io/attempt-uid"] == "u1"
    kubernetes_validate.validate(pod, "1.31", strict=True)


@pytest.mark.parametrize("value, expected", [
    (".", "/opt/nightly-e2e:."),
    ("/src:/src/megatron", "/opt/nightly-e2e:/src:/src/megatron"),
    ("/opt/nightly-e2e:.", "/opt/nightly-e2e:."),
    (".:/opt/nightly-e2e", "/opt/nightly-e2e:."),
    ("", "/opt/nightly-e2e"),
])
def test_a_pythonpath_the_pod_sets_starts_with_the_images_wrapper_folder(value, expected):
    """A container's PYTHONPATH replaces the image's: without its folder the wrapper has no package."""
    pod = build_pod(dataclasses.replace(request(), env={"PYTHONPATH": value}), POOL, PRODUCTION)
    assert {e["name"]: e.get("value") for e in container(pod)["env"]}["PYTHONPATH"] == expected


def test_a_pod_that_sets_no_pythonpath_keeps_the_images():
    assert "PYTHONPATH" not in {e["name"] for e in container(build_pod(request(), POOL, PRODUCTION))["env"]}
