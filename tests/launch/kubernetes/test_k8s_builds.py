"""Building inputs on the cluster: one pod per requirement writing the cache PVC the test pods read.

Build pods run for real on this machine through the stand-in kubelet (``kubelet.py``): the
constant build script, the fake ``hf`` over the example's hub and the example's own converter
write a local "PVC", so the marker, the rename and the reuse are the real ones.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import kubernetes_validate
import pytest

from pipelines.core.model import Requirement
from pipelines.core.specs import load_specs
from pipelines.launch.base import LaunchRequest
from pipelines.launch.kubernetes.builds import BUILD_MOUNT, BUILD_SCRIPT, REUSED, ClusterBuilder, on_pvc
from pipelines.launch.kubernetes.podspec import build_pod, cache_mounts, pod_env
from pipelines.storage.cache import MARKER, BuildError
from tests.conftest import PROJECT_ROOT, make_test
from tests.launch.kubernetes import pods
from tests.launch.kubernetes.apiserver import StandInApiServer, Step
from tests.launch.kubernetes.kubelet import Kubelet

SPECS = load_specs(PROJECT_ROOT / "assets")
PRODUCTION = SPECS.deployment("production")
POOL = PRODUCTION.pools[0]
CONVERSION = SPECS.conversion
EXAMPLE = PROJECT_ROOT / "examples" / "minirl"
SECRET = "hf_" + "BuildT0kenValue" * 3

MODEL = Requirement("model", "tiny-lm", "minirl/tiny-lm", "/root/models/tiny-lm")
DATASET = Requirement("dataset", "toy-math", "minirl/toy-math", "/root/datasets/toy-math")
#: converted into /root (not /root/models): the test pod needs a mount of its own for it
CONVERTED = Requirement("conversion", "tiny-lm_torch_dist-8e0219", "tiny-lm", "/root/tiny-lm_torch_dist",
                        params=(("megatron_model_type", "tiny"), ("num_gpus_per_node", "8"), ("extra_args", "")),
                        depends_on=("tiny-lm",))
MODELS = {"tiny-lm": MODEL}
FAST = {"tick_s": 0.02, "watch_timeout_s": 1, "log_join_s": 5.0, "pending_wait_s": 1.0}


@pytest.fixture
def kubelet(tmp_path) -> Kubelet:
    return Kubelet.create(tmp_path, EXAMPLE, EXAMPLE / "hub", {"hf-token": {"token": SECRET}})


def serve(kubelet: Kubelet, other=None) -> StandInApiServer:
    """Build pods run for real; ``other(pod, node)`` may script them instead (None: run)."""
    def script(pod, node):
        steps = other(pod, node) if other else None
        return steps if steps is not None else kubelet.steps(pod, node)
    return StandInApiServer(script=script)


def builder(server: StandInApiServer, **kw) -> ClusterBuilder:
    return ClusterBuilder(server.core_v1(), PRODUCTION, POOL, **{**FAST, **kw})


def container(body: dict) -> dict:
    return body["spec"]["containers"][0]


def test_a_model_is_downloaded_into_the_pvc_once_and_reused_by_the_next_pod(kubelet, tmp_path):
    with serve(kubelet) as server:
        first = builder(server).build(MODEL, MODELS, CONVERSION, {}, repo=EXAMPLE, log_path=tmp_path / "logs" / "tiny-lm.log")
        marker = kubelet.pvc / "models" / "tiny-lm" / MARKER
        stamp = marker.stat().st_mtime_ns
        second = builder(server).build(MODEL, MODELS, CONVERSION, {}, repo=EXAMPLE)
    assert (first.reused, first.path, first.key) == (False, Path("/root/models/tiny-lm"), "tiny-lm")
    hub_files = sorted(p.name for p in (EXAMPLE / "hub" / "models" / "minirl" / "tiny-lm").rglob("*") if p.is_file())
    assert first.files == len(hub_files) and first.bytes > 0
    assert json.loads(marker.read_text())["key"] == "tiny-lm"
    assert (second.reused, second.files, second.bytes) == (True, first.files, first.bytes)
    assert marker.stat().st_mtime_ns == stamp, "a reused input is not rewritten"
    assert len(server.created) == 2 and server.deleted == [b["metadata"]["name"] for b in server.created]
    assert "nightly: built files=" in (tmp_path / "logs" / "tiny-lm.log").read_text()
    assert not [p for p in (kubelet.pvc / "models").iterdir() if ".partial-" in p.name]


def test_the_reused_pod_says_so_in_its_log(kubelet, tmp_path):
    with serve(kubelet) as server:
        builder(server).build(MODEL, MODELS, CONVERSION, {}, repo=EXAMPLE)
        builder(server).build(MODEL, MODELS, CONVERSION, {}, repo=EXAMPLE, log_path=tmp_path / "again.log")
    assert f"{REUSED} files=" in (tmp_path / "again.log").read_text()


def test_a_dataset_pod_downloads_with_the_token_from_the_secret_and_the_configured_endpoint(kubelet, tmp_path):
    env = {"HF_ENDPOINT": "https://hf-mirror.internal", "HF_TOKEN": SECRET, "MARK": "m"}
    with serve(kubelet) as server:
        built = builder(server).build(DATASET, MODELS, CONVERSION, env, repo=EXAMPLE, log_path=tmp_path / "ds.log")
    body = server.created[0]
    argv = container(body)["command"][3:]
    assert argv[:5] == ["hf", "download", "minirl/toy-math", "--repo-type", "dataset"]
    assert argv[5] == "--local-dir" and argv[6].startswith(f"{BUILD_MOUNT}/datasets/.toy-math.partial-")
    envs = {e["name"]: e for e in container(body)["env"]}
    assert envs["HF_TOKEN"] == {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token"}}}
    assert envs["HF_ENDPOINT"]["value"] == "https://hf-mirror.internal"
    assert envs["NVIDIA_VISIBLE_DEVICES"]["value"] == "void" and "nvidia.com/gpu" not in container(body)["resources"]["limits"]
    log = (tmp_path / "ds.log").read_text()
    assert "hf: token present endpoint https://hf-mirror.internal" in log
    assert SECRET not in json.dumps(server.created) and SECRET not in log
    assert (kubelet.pvc / "datasets" / "toy-math" / MARKER).is_file() and not built.reused


def test_a_download_pod_gets_the_revision_and_filters_and_its_marker_records_them(kubelet):
    pinned = dataclasses.replace(MODEL, params=(("include", "*.json"), ("revision", "v1.0")))
    with serve(kubelet) as server:
        argv, env, _gpus = builder(server).prepared(pinned, MODELS, CONVERSION, {}, "n1", repo=EXAMPLE)
    assert argv[:7] == ["hf", "download", "minirl/tiny-lm", "--include", "*.json", "--revision", "v1.0"]
    assert env["NIGHTLY_SOURCE"] == "minirl/tiny-lm --include *.json --revision v1.0"


def test_a_conversion_pod_runs_the_declared_argv_on_pvc_paths_with_the_gpus_it_asks_for(kubelet):
    with serve(kubelet) as server:
        builder(server).build(MODEL, MODELS, CONVERSION, {}, repo=EXAMPLE)
        built = builder(server).build(CONVERTED, MODELS, CONVERSION, {"MINIRL_ROOT": "/root"}, repo=EXAMPLE)
    body = server.created[1]
    argv = container(body)["command"][3:]
    assert argv[:4] == ["python3", "tools/convert_hf_to_torch_dist.py", "--hf-checkpoint", f"{BUILD_MOUNT}/models/tiny-lm"]
    assert argv[4] == "--save" and argv[5].startswith(f"{BUILD_MOUNT}/.tiny-lm_torch_dist.partial-")
    assert argv[6:] == ["--model-type", "tiny", "--num-gpus", "8"]
    assert container(body)["resources"] == {"requests": {"nvidia.com/gpu": "8", "cpu": "160", "memory": "1600Gi"},
                                            "limits": {"nvidia.com/gpu": "8", "memory": "1600Gi"}}
    assert container(body)["image"] == f"{POOL.image}@{POOL.image_digest}"
    assert "HF_TOKEN" not in {e["name"] for e in container(body)["env"]}, "only downloads get the token"
    shards = sorted(p.name for p in (kubelet.pvc / "tiny-lm_torch_dist").iterdir())
    assert MARKER in shards and len(shards) > 2 and not built.reused


def test_the_test_pod_reads_every_input_where_the_build_pod_wrote_it(kubelet, tmp_path):
    with serve(kubelet) as server:
        for req in (MODEL, DATASET, CONVERTED):
            builder(server).build(req, MODELS, CONVERSION, {}, repo=EXAMPLE)
    test = make_test(gpus=8, requirements=(MODEL.key, DATASET.key, CONVERTED.key))
    request = LaunchRequest(test=test, repo_path=tmp_path, timeout_s=600, log_path=tmp_path / "t.log", pool="h200")
    pod = build_pod(request, POOL, PRODUCTION, cache_paths=[MODEL.path, DATASET.path, CONVERTED.path])
    for req in (MODEL, DATASET, CONVERTED):
        local = kubelet.local(pod, req.path)
        assert local is not None and (local / MARKER).is_file(), req.path
    assert all(ro for _folder, ro in kubelet.mounts(pod).values()), "test pods mount the cache read-only"
    assert not any(ro for path, (_f, ro) in kubelet.mounts(server.created[0]).items()), "build pods write it"


def test_cache_mounts_add_a_read_only_mount_only_for_paths_outside_models_and_datasets():
    mounts = cache_mounts(["/root/models/a_torch_dist", "/root/ckpt/b", "/root/ckpt/b/inner", "/root/c"])
    assert [(m["mountPath"], m["subPath"], m["readOnly"]) for m in mounts] == [
        ("/root/models", "models", True), ("/root/datasets", "datasets", True),
        ("/root/c", "c", True), ("/root/ckpt/b", "ckpt/b", True)]
    with pytest.raises(ValueError, match=r"'/root/\.\./etc': not a usable path for a cached asset; use an absolute path"):
        cache_mounts(["/root/../etc"])


def test_a_conversion_before_its_model_fails_with_the_missing_input_named(kubelet):
    with serve(kubelet) as server, pytest.raises(BuildError) as err:
        builder(server).build(CONVERTED, MODELS, CONVERSION, {}, repo=EXAMPLE)
    assert "conversion tiny-lm_torch_dist-8e0219: build pod nb-conve" in str(err.value)
    assert "ended failed/exit_code" in str(err.value)
    assert f"nightly: input missing: {kubelet.pvc}/models/tiny-lm (build it first)" in str(err.value)


def test_a_failed_download_is_a_build_error_with_the_log_tail_and_leaves_nothing_behind(kubelet):
    missing = dataclasses.replace(MODEL, key="ghost", source="minirl/ghost", path="/root/models/ghost")
    with serve(kubelet) as server, pytest.raises(BuildError) as err:
        builder(server).build(missing, MODELS, CONVERSION, {}, repo=EXAMPLE)
    assert "model ghost: build pod" in str(err.value) and "ended failed/exit_code on h200-a" in str(err.value)
    assert "404 Client Error: Repository Not Found for url: minirl/ghost" in str(err.value)
    assert "nightly: command exited 1" in str(err.value)
    left = [p.name for p in (kubelet.pvc / "models").iterdir()]
    assert left == [".ghost.lock"], "no partial folder, no destination (the empty lock file stays, as locally)"
    assert len(server.created) == 1, "a failing command is not retried"


def test_an_oom_killed_build_is_a_build_error_naming_the_reason(kubelet):
    def oom(pod, node):
        return pods.ends(node, pods.terminated("Failed", 137, "OOMKilled"), logs=("converting...",))
    with serve(kubelet, oom) as server, pytest.raises(BuildError, match=r"ended failed/oom_killed on h200-a: .*OOMKilled"):
        builder(server).build(MODEL, MODELS, CONVERSION, {}, repo=EXAMPLE)


def test_a_build_pod_on_a_broken_node_is_retried_on_another_node(kubelet):
    def broken_a(pod, node):
        if node == "h200-a":
            return [Step(mutate=pods.scheduled(node)), Step(mutate=pods.failed_at_admission())]
        return None
    with serve(kubelet, broken_a) as server:
        built = builder(server).build(MODEL, MODELS, CONVERSION, {}, repo=EXAMPLE)
    assert not built.reused and len(server.created) == 2
    terms = server.created[1]["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"][0]["matchFields"] == [
        {"key": "metadata.name", "operator": "NotIn", "values": ["h200-a"]}]
    assert server.created[1]["metadata"]["name"].endswith("-a2")


def test_a_conversion_needing_more_gpus_than_a_node_has_fails_before_any_pod(kubelet):
    big = dataclasses.replace(CONVERTED, params=(("num_gpus_per_node", "16"),))
    with serve(kubelet) as server:
        with pytest.raises(BuildError, match=r"conversion tiny-lm_torch_dist-8e0219: needs 16 GPUs but pool h200 has 8 "
                                             r"per node; lower num_gpus_per_node or add a larger pool"):
            builder(server).build(big, MODELS, CONVERSION, {}, repo=EXAMPLE)
        assert server.created == []


def test_a_deployment_without_a_cache_pvc_cannot_build_on_the_cluster(kubelet):
    with serve(kubelet) as server, pytest.raises(BuildError, match=r"deployment production: no cache_pvc; set "
                                                                     r"deployments.production.cache_pvc in assets/cluster.yaml"):
        ClusterBuilder(server.core_v1(), dataclasses.replace(PRODUCTION, cache_pvc=""), POOL)


def test_every_build_pod_validates_strictly_and_runs_a_constant_script(kubelet):
    with serve(kubelet) as server:
        for req in (MODEL, DATASET, CONVERTED, MODEL):
            builder(server).build(req, MODELS, CONVERSION, {"X": "$(rm -rf /); `id`"}, repo=EXAMPLE)
    assert len(server.created) == 4
    for body in server.created:
        kubernetes_validate.validate(body, "1.31", strict=True)
        assert container(body)["command"][:3] == ["python3", "-c", BUILD_SCRIPT]
        assert body["spec"]["nodeSelector"] == POOL.node_selector and body["spec"]["restartPolicy"] == "Never"
    assert "tiny-lm" not in BUILD_SCRIPT and "toy-math" not in BUILD_SCRIPT


def test_pods_see_the_cache_at_root_not_the_planning_machines_folders():
    env = pod_env({"MINIRL_ROOT": "{cache}", "PYTHONPATH": "{repo}", "HUB": "{hub}", "HF_TOKEN": "x"}, {"MINIRL_FAIL": "t"})
    assert env == {"MINIRL_ROOT": "/root", "PYTHONPATH": ".", "HUB": "", "MINIRL_FAIL": "t"}
    assert on_pvc("/root/models/x") == f"{BUILD_MOUNT}/models/x"


def test_build_pods_carry_the_run_id_and_owner_so_a_dead_runs_builds_are_cleaned_up(kubelet):
    owner = {"apiVersion": "v1", "kind": "Pod", "name": "dagster-run-7", "uid": "uid-7"}
    with serve(kubelet) as server:
        builder(server, run_id="run-7", owner=owner).build(MODEL, MODELS, CONVERSION, {}, repo=EXAMPLE)
    meta = server.created[0]["metadata"]
    assert meta["labels"]["nightly-e2e.io/run-id"] == "run-7" and meta["ownerReferences"] == [owner]
    kubernetes_validate.validate(server.created[0], "1.31", strict=True)


def test_a_conversion_pod_reuses_the_same_converter_and_rebuilds_after_a_change_in_a_module_it_imports(tmp_path):
    import shutil

    from pipelines.core.recipe import identity, model_identity
    from pipelines.storage.cache import conversion_recipe

    repo = tmp_path / "minirl"
    shutil.copytree(EXAMPLE, repo, ignore=shutil.ignore_patterns("hub"))
    kubelet = Kubelet.create(tmp_path, repo, EXAMPLE / "hub", {"hf-token": {"token": SECRET}})
    marker = kubelet.pvc / "tiny-lm_torch_dist" / MARKER
    with serve(kubelet) as server:
        builder(server).build(MODEL, MODELS, CONVERSION, {}, repo=repo)
        first = builder(server).build(CONVERTED, MODELS, CONVERSION, {}, repo=repo)
        recorded = json.loads(marker.read_text())
        same = builder(server).build(CONVERTED, MODELS, CONVERSION, {}, repo=repo, log_path=tmp_path / "same.log")
        checkpoint = repo / "minirl" / "checkpoint.py"  # imported by tools/convert_hf_to_torch_dist.py
        checkpoint.write_text(checkpoint.read_text() + "\n# a converter change\n")
        again = builder(server).build(CONVERTED, MODELS, CONVERSION, {}, repo=repo, log_path=tmp_path / "again.log")
    assert (first.reused, same.reused, again.reused) == (False, True, False)
    assert f"{REUSED} files=" in (tmp_path / "same.log").read_text()
    assert "its marker is from another source or conversion identity" in (tmp_path / "again.log").read_text()
    # the pod records the identity the local cache would: the recipe (image digest included) and its model
    recipe = {e["name"]: e.get("value") for e in container(server.created[1])["env"]}["NIGHTLY_RECIPE"]
    model_marker = json.loads((kubelet.pvc / "models" / "tiny-lm" / MARKER).read_text())
    assert recipe == recorded["recipe"]["digest"]
    assert recorded["identity"] == identity(recipe, model_identity(model_marker))
    shutil.copy(EXAMPLE / "minirl" / "checkpoint.py", checkpoint)
    assert recipe == conversion_recipe(CONVERSION, CONVERTED, repo, {}, image=POOL.image_digest).digest
    assert json.loads(marker.read_text())["identity"] != recorded["identity"]


def test_a_rebuilt_conversion_pod_says_its_identity_and_why_it_was_rebuilt_as_the_local_cache_does(tmp_path):
    import shutil

    repo = tmp_path / "minirl"
    shutil.copytree(EXAMPLE, repo, ignore=shutil.ignore_patterns("hub"))
    kubelet = Kubelet.create(tmp_path, repo, EXAMPLE / "hub", {"hf-token": {"token": SECRET}})
    marker = kubelet.pvc / "tiny-lm_torch_dist" / MARKER
    with serve(kubelet) as server:
        builder(server).build(MODEL, MODELS, CONVERSION, {}, repo=repo)
        first = builder(server).build(CONVERTED, MODELS, CONVERSION, {}, repo=repo)
        recorded = json.loads(marker.read_text())
        same = builder(server).build(CONVERTED, MODELS, CONVERSION, {}, repo=repo)
        checkpoint = repo / "minirl" / "checkpoint.py"  # imported by tools/convert_hf_to_torch_dist.py
        checkpoint.write_text(checkpoint.read_text() + "\n# a converter change\n")
        again = builder(server).build(CONVERTED, MODELS, CONVERSION, {}, repo=repo)
        after = json.loads(marker.read_text())
        image = builder(server, digest="sha256:" + "c" * 64).build(CONVERTED, MODELS, CONVERSION, {}, repo=repo)
    assert first.identity == same.identity == recorded["identity"] and (first.rebuilt, same.rebuilt) == ("", "")
    # the marker records the whole recipe, as the local cache's does
    assert recorded["recipe"]["files"]["minirl/checkpoint.py"] and recorded["recipe"]["image"] == POOL.image_digest
    assert again.identity == after["identity"] != first.identity
    assert again.rebuilt == "the conversion's identity changed: files minirl/checkpoint.py"
    assert image.rebuilt == "the conversion's identity changed: its image"


def test_a_conversion_pods_marker_without_the_recipes_parts_still_says_its_identity_changed():
    lines = ['nightly: replacing {"source": "tiny-lm", "identity": "ab12", "recipe": {"digest": "cd34"}}',
             "nightly: built files=3 bytes=10 identity=ef56"]
    from pipelines.launch.kubernetes.builds import _built

    built = _built(CONVERTED, lines, 1.0)
    assert (built.identity, built.reused) == ("ef56", False)
    assert built.rebuilt == "the conversion's identity changed: the recorded identity differs"


def test_a_conversion_pod_checks_its_gpus_first_so_a_node_with_its_fabric_manager_down_is_retried_elsewhere():
    """CUDA Error 802 (fabric manager down) is the node's fault: the pre-flight says so, the build moves on."""
    def fabric_down_on_a(pod, node):
        if node == "h200-a" and pod["spec"].get("initContainers"):
            return [Step(mutate=pods.scheduled(node)), Step(mutate=pods.preflight_running()),
                    Step(mutate=pods.preflight_failed(86, "CUDA init failed on h200-a: CUresult 802"))]
        if node == "h200-a":  # no pre-flight: the converter meets the broken GPUs itself
            return pods.ends(node, pods.terminated("Failed", 1, "Error"),
                             logs=("RuntimeError: CUDA error: system not yet initialized (802)",))
        return pods.ends(node, pods.terminated("Succeeded", 0, "Completed"),
                         logs=("nightly: built files=3 bytes=100 identity=" + "a" * 64,))
    with StandInApiServer(script=fabric_down_on_a) as server:
        built = builder(server).build(CONVERTED, MODELS, CONVERSION, {}, repo=EXAMPLE)
    assert not built.reused and built.identity == "a" * 64
    first, second = server.created
    [preflight] = first["spec"]["initContainers"]
    assert preflight["name"] == "preflight" and preflight["image"] == container(first)["image"]
    assert preflight["resources"] == container(first)["resources"], "it must see the GPUs the conversion gets"
    assert {e["name"]: e.get("value") for e in preflight["env"]}["NIGHTLY_PREFLIGHT_GPUS"] == "8"
    terms = second["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"][0]["matchFields"] == [
        {"key": "metadata.name", "operator": "NotIn", "values": ["h200-a"]}]
    kubernetes_validate.validate(first, "1.31", strict=True)


def test_a_download_pod_has_no_gpu_preflight():
    with StandInApiServer() as server:
        body = builder(server).pod(MODEL, "x", ["true"], {}, 0)
    assert "initContainers" not in body["spec"]


def test_the_stand_in_api_server_refuses_an_env_name_a_real_one_refuses():
    """A name the specs now refuse would fail every pod on a 1.31 cluster: the stand-in says so too."""
    with StandInApiServer() as server, pytest.raises(BuildError, match=r"ended infra_error/create_rejected .*422.*"
                                                                       r'env\[\d+\]\.name: Invalid value: "9LIVES"'):
        builder(server).build(MODEL, MODELS, CONVERSION, {"9LIVES": "1"}, repo=EXAMPLE)
    assert server.created == []


# -- the build script against a folder standing in for the PVC (several pods = several processes) --
SLOW_BUILD = """\
import pathlib, sys, time
out = pathlib.Path(sys.argv[1])
with open(sys.argv[2], "a") as fh:
    fh.write("start\\n")
out.mkdir(parents=True)
for i in range(3):
    (out / f"shard{i}").write_text("x" * 100)
    time.sleep(0.2)
"""


def _build_script(pvc: Path, nonce: str, **env: str):
    """One build pod's script on ``pvc``, building ``m_torch_dist`` with a slow command (a Popen)."""
    import subprocess
    import sys

    (pvc / "slow_build.py").write_text(SLOW_BUILD)
    tmp = pvc / f".m_torch_dist.partial-{nonce}"
    pod_env = {"NIGHTLY_DEST": str(pvc / "m_torch_dist"), "NIGHTLY_TMP": str(tmp), "NIGHTLY_KEY": "m_torch_dist",
               "NIGHTLY_SOURCE": "m", "NIGHTLY_RECIPE": "abc", "PATH": "/usr/bin:/bin", **env}
    argv = [sys.executable, "-c", BUILD_SCRIPT, sys.executable, str(pvc / "slow_build.py"), str(tmp),
            str(pvc / "starts")]
    return subprocess.Popen(argv, env=pod_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_two_build_pods_of_one_input_at_once_build_it_once_and_the_second_reuses_it(tmp_path):
    import time

    first = _build_script(tmp_path, "aaa")
    deadline = time.monotonic() + 20
    while not (tmp_path / "starts").exists() and time.monotonic() < deadline:  # the first one builds
        time.sleep(0.02)
    second = _build_script(tmp_path, "bbb")
    out1, out2 = first.communicate(timeout=60)[0], second.communicate(timeout=60)[0]
    assert (first.returncode, second.returncode) == (0, 0), (out1, out2)
    assert (tmp_path / "starts").read_text() == "start\n", "the conversion ran once"
    assert "nightly: built files=3" in out1
    assert "nightly: waiting for another build of m_torch_dist" in out2 and "nightly: reused files=3" in out2
    assert sorted(p.name for p in tmp_path.iterdir() if ".partial-" in p.name) == []


def test_a_half_built_folder_a_killed_pod_left_is_removed_by_the_next_build(tmp_path):
    left = tmp_path / ".m_torch_dist.partial-eee"
    (left / "sub").mkdir(parents=True)
    (left / "sub" / "shard0").write_text("half")
    out = _build_script(tmp_path, "fff").communicate(timeout=60)[0]
    assert f"nightly: removed a half-built folder an earlier build left: {left}" in out
    assert not left.exists() and (tmp_path / "m_torch_dist" / MARKER).is_file()


def test_without_a_working_lock_only_leftovers_older_than_the_build_timeout_are_removed(tmp_path):
    import os
    import time

    (tmp_path / ".m_torch_dist.lock").mkdir()  # cannot be opened as a file: as a PVC without locks
    old, fresh = tmp_path / ".m_torch_dist.partial-old", tmp_path / ".m_torch_dist.partial-new"
    old.mkdir()
    fresh.mkdir()
    os.utime(old, (time.time() - 7200, time.time() - 7200))
    out = _build_script(tmp_path, "ggg", NIGHTLY_BUILD_TIMEOUT_S="3600").communicate(timeout=60)[0]
    assert "nightly: cannot lock" in out and "building without a lock" in out
    assert not old.exists() and fresh.exists(), "a folder younger than the build timeout may be a live build's"
    assert "nightly: built files=3" in out


def test_build_pods_say_their_timeout_so_the_script_knows_which_leftovers_are_dead(kubelet):
    with serve(kubelet) as server:
        builder(server, timeout_s=5400).build(MODEL, MODELS, CONVERSION, {}, repo=EXAMPLE)
    env = {e["name"]: e.get("value") for e in container(server.created[0])["env"]}
    assert env["NIGHTLY_BUILD_TIMEOUT_S"] == "5400" == str(server.created[0]["spec"]["activeDeadlineSeconds"])
