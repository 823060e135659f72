"""The test pod: what a platform engineer would check in it, and strict schema validation."""

from __future__ import annotations

import ctypes.util
import dataclasses
import json
import shutil
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.core.specs import load_specs
from pipelines.launch.base import LaunchRequest
from pipelines.launch.kubernetes.podspec import PREFLIGHT_SCRIPT, PREFLIGHT_TIMEOUT_S, build_pod, label_value
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


def test_gpus_are_requested_and_limited_to_the_test_gpus():
    res = container(build_pod(request(), POOL, PRODUCTION))["resources"]
    assert res == {"requests": {"nvidia.com/gpu": "8"}, "limits": {"nvidia.com/gpu": "8"}}


def test_pool_placement_priority_queue_and_image_come_from_assets():
    pod = build_pod(request(), POOL, PRODUCTION)
    spec = pod["spec"]
    assert spec["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H200"}
    assert spec["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert spec["priorityClassName"] == "nightly-e2e"
    assert pod["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "h200-nightly"
    assert container(pod)["image"] == "ghcr.io/example/rl-framework:nightly"
    assert spec["restartPolicy"] == "Never" and "affinity" not in spec


def test_avoided_nodes_become_a_hostname_not_in_node_affinity():
    spec = build_pod(request(avoid_nodes=("h200-c", "h200-a", "h200-c")), POOL, PRODUCTION)["spec"]
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["h200-a", "h200-c"]}]}]


def test_shm_is_a_memory_empty_dir_and_caches_are_read_only_sub_paths():
    pod = build_pod(request(), POOL, PRODUCTION)
    vols = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert vols["dshm"] == {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "32Gi"}}
    assert vols["cache"]["persistentVolumeClaim"] == {"claimName": "nightly-model-cache", "readOnly": True}
    mounts = {m["mountPath"]: m for m in container(pod)["volumeMounts"]}
    assert mounts["/dev/shm"]["name"] == "dshm"
    assert (mounts["/root/models"]["subPath"], mounts["/root/models"]["readOnly"]) == ("models", True)
    assert (mounts["/root/datasets"]["subPath"], mounts["/root/datasets"]["readOnly"]) == ("datasets", True)


def test_the_hf_token_comes_only_from_the_secret_never_as_a_literal():
    pod = build_pod(request(), POOL, PRODUCTION)
    assert SECRET not in json.dumps(pod)
    tokens = [e for e in container(pod)["env"] if "TOKEN" in e["name"]]
    assert tokens == [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token"}}}]


def test_without_a_secret_configured_no_token_is_passed_at_all():
    pod = build_pod(request(), POOL, dataclasses.replace(PRODUCTION, hf_token_secret=""))
    assert not [e for e in container(pod)["env"] if "TOKEN" in e["name"]]


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


def test_the_deadline_is_the_test_timeout_plus_the_preflight_budget():
    assert build_pod(request(), POOL, PRODUCTION)["spec"]["activeDeadlineSeconds"] == 1500 + PREFLIGHT_TIMEOUT_S
    cpu = build_pod(request(test=make_test(gpus=0)), POOL, PRODUCTION)
    assert cpu["spec"]["activeDeadlineSeconds"] == 1500 and "resources" not in container(cpu)


def test_the_command_is_a_constant_script_and_test_data_travels_as_arguments():
    cmd = container(build_pod(request(), POOL, PRODUCTION))["command"]
    assert cmd[:4] == ["sh", "-c", PREFLIGHT_SCRIPT, "nightly-preflight"]
    assert cmd[4:] == ["python", "-m", "pipelines.launch.wrapper", "--file", "tests/e2e/megatron/test_qwen.py",
                       "--func", "execute", "--", "--config", "fp8; rm -rf /"]
    assert "test_qwen" not in PREFLIGHT_SCRIPT


def _fake_bin(tmp_path: Path, nvidia_rc: int) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(f"#!/bin/sh\necho 'GPU 0: NVIDIA H200'\nexit {nvidia_rc}\n")
    (bin_dir / "nvidia-smi").chmod(0o755)
    return bin_dir


@pytest.mark.skipif(shutil.which("sh") is None, reason="needs a POSIX shell")
def test_the_preflight_exits_86_when_the_gpus_are_unusable_and_never_runs_the_test(tmp_path):
    bin_dir = _fake_bin(tmp_path, nvidia_rc=9)
    out = subprocess.run(["sh", "-c", PREFLIGHT_SCRIPT, "nightly-preflight", "echo", "TEST RAN"], capture_output=True,
                         text=True, env={"PATH": f"{bin_dir}:/usr/bin:/bin", "NIGHTLY_NODE_NAME": "h200-a"}, timeout=30)
    assert out.returncode == 86
    assert "nvidia-smi -L failed: GPUs not usable on h200-a" in out.stderr and "TEST RAN" not in out.stdout


@pytest.mark.skipif(ctypes.util.find_library("cuda") is not None, reason="this machine has a CUDA driver")
def test_the_preflight_fails_on_a_machine_without_cuda_and_passes_when_disabled(tmp_path):
    bin_dir = _fake_bin(tmp_path, nvidia_rc=0)
    env = {"PATH": f"{bin_dir}:{Path(shutil.which('python3') or '/usr/bin/python3').parent}:/usr/bin:/bin", "NIGHTLY_NODE_NAME": "n"}
    (bin_dir / "python").symlink_to(shutil.which("python3") or "/usr/bin/python3")
    argv = ["sh", "-c", PREFLIGHT_SCRIPT, "nightly-preflight", "echo", "TEST RAN; $(not expanded)"]
    out = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=30)
    assert out.returncode == 86 and "cannot load libcuda.so.1" in out.stdout  # no GPU on this machine
    out = subprocess.run(argv, capture_output=True, text=True, env={**env, "NIGHTLY_PREFLIGHT": "0"}, timeout=30)
    assert out.returncode == 0 and out.stdout == "TEST RAN; $(not expanded)\n"
