"""``nightly run --deployment production --dry-run``: every pod of the example night as YAML.

The night is the real one (the example's catalog, selection and plan through :class:`Night`,
with history kept locally so no S3 is needed); no API server runs, so nothing can be created.
"""

from __future__ import annotations

import json

import kubernetes_validate
import pytest
import yaml

from pipelines.launch.kubernetes.dryrun import render_night_pods
from pipelines.night import Night, NightSettings
from tests.conftest import PROJECT_ROOT
from tests.support.assets import example_assets

EXAMPLE = PROJECT_ROOT / "examples" / "minirl"
TONIGHT = "sha256:" + "5d" * 32


@pytest.fixture(scope="module")
def night_yaml(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dry-run")
    assets = example_assets(tmp / "assets")
    cluster = assets / "cluster.yaml"
    cluster.write_text(cluster.read_text().replace("storage: s3", "storage: local"))
    night = Night(NightSettings(home=tmp / "home", assets_dir=assets, deployment="production",
                                extra_env=(("HF_TOKEN", "hf_" + "DryRunT0ken" * 3),)))
    tests, _ = night.selected()
    plan = night.plan(tests)
    text = render_night_pods(plan, night.deployment, night.request, requirements=night.requirements_for(tests),
                             conversion=night.specs.conversion, run_id=night.run_id, repo=night.repo_spec.path,
                             **night.pod_settings())
    return text, plan, night


def pods_of(text: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(text) if d]


def test_every_planned_test_and_every_input_has_one_pod(night_yaml):
    text, plan, night = night_yaml
    pods = pods_of(text)
    tests = [p for p in pods if p["metadata"]["labels"]["app.kubernetes.io/name"] == "nightly-e2e-test"]
    builds = [p for p in pods if p["metadata"]["labels"]["app.kubernetes.io/name"] == "nightly-e2e-build"]
    assert [p["metadata"]["annotations"]["nightly-e2e.io/test-id"] for p in tests] == [a.test_id for a in plan.ordered()]
    assert len(builds) == len(night.requirements_for(night.selected()[0])) > 0
    assert text.startswith("---\n") and text.count("\n---\n") == len(pods) - 1


def test_the_yaml_reads_like_kubectls_with_no_anchors_or_aliases(night_yaml):
    """The pre-flight shares its resources dict with the test container: written as ``&id001`` and
    ``*id001`` it read like nothing ``kubectl -o yaml`` prints, and a reviewer had to chase the anchor."""
    text = night_yaml[0]
    events = list(yaml.parse(text, Loader=yaml.SafeLoader))
    assert not [e for e in events if isinstance(e, yaml.AliasEvent) or getattr(e, "anchor", None)]
    for pod in pods_of(text):
        if pod["spec"].get("initContainers"):
            init, test = pod["spec"]["initContainers"][0], pod["spec"]["containers"][0]
            assert init["resources"] == test["resources"] and init["resources"]["requests"]


def test_every_pod_validates_strictly_against_kubernetes_1_31(night_yaml):
    for pod in pods_of(night_yaml[0]):
        kubernetes_validate.validate(pod, "1.31", strict=True)


def test_every_pod_requests_cpu_and_memory_and_runs_a_digest_pinned_image(night_yaml):
    for pod in pods_of(night_yaml[0]):
        for c in pod["spec"].get("initContainers", []) + pod["spec"]["containers"]:
            assert {"cpu", "memory"} <= set(c["resources"]["requests"]), pod["metadata"]["name"]
            assert "@sha256:" in c["image"] and c["imagePullPolicy"] == "IfNotPresent"


def test_test_pods_and_gpu_conversions_start_with_the_preflight_and_only_downloads_get_the_token(night_yaml):
    conversions = 0
    for pod in pods_of(night_yaml[0]):
        labels = pod["metadata"]["labels"]
        env = json.dumps(pod["spec"]["containers"][0]["env"])
        downloads = labels.get("nightly-e2e.io/kind") in ("model", "dataset")
        assert ("HF_TOKEN" in env) == downloads, pod["metadata"]["name"]
        assert "DryRunT0ken" not in json.dumps(pod)
        gpus = int(pod["spec"]["containers"][0]["resources"]["requests"].get("nvidia.com/gpu", 0))
        inits = [c["name"] for c in pod["spec"].get("initContainers", [])]
        is_test = labels["app.kubernetes.io/name"] == "nightly-e2e-test"
        assert inits == (["preflight"] if gpus or is_test else []), pod["metadata"]["name"]
        conversions += labels.get("nightly-e2e.io/kind") == "conversion"
    assert conversions > 0, "the example night converts checkpoints on GPUs"


def test_only_test_pods_preflight_checks_the_wrapper_is_in_the_image(night_yaml):
    """Test pods run ``python3 -m pipelines.launch.wrapper``; build pods run a script of their own."""
    seen = set()
    for pod in pods_of(night_yaml[0]):
        for init in pod["spec"].get("initContainers", []):
            wanted = pod["metadata"]["labels"]["app.kubernetes.io/name"] == "nightly-e2e-test"
            env = {e["name"]: e.get("value") for e in init["env"]}
            assert env["NIGHTLY_PREFLIGHT_WRAPPER"] == ("1" if wanted else "0"), pod["metadata"]["name"]
            seen.add(wanted)
    assert seen == {True, False}, "the example night has GPU test pods and GPU build pods"


def test_the_nights_digest_replaces_the_pools(night_yaml):
    _, plan, night = night_yaml
    text = render_night_pods(plan, night.deployment, night.request, image_digests={"h200": TONIGHT},
                             **night.pod_settings())
    images = {c["image"] for p in pods_of(text) for c in p["spec"]["containers"]}
    assert images == {f"ghcr.io/example/rl-framework-nightly-e2e:nightly-0.1.0@{TONIGHT}"}


def test_dry_run_build_pods_use_the_deployments_build_timeout(tmp_path):
    """``cache: build_timeout_s`` reaches the printed build pods, not only the night's builds."""
    assets = example_assets(tmp_path / "assets")
    cluster = assets / "cluster.yaml"
    cluster.write_text(cluster.read_text().replace("storage: s3", "storage: local")
                       .replace("  production:\n", "  production:\n    cache: {build_timeout_s: 600}\n", 1))
    night = Night(NightSettings(home=tmp_path / "home", assets_dir=assets, deployment="production"))
    assert night.deployment.build_timeout_s == 600
    tests, _ = night.selected()
    text = render_night_pods(night.plan(tests), night.deployment, night.request,
                             requirements=night.requirements_for(tests), conversion=night.specs.conversion,
                             run_id=night.run_id, repo=night.repo_spec.path, **night.pod_settings())
    builds = [p for p in pods_of(text) if p["metadata"]["labels"]["app.kubernetes.io/name"] == "nightly-e2e-build"]
    assert builds and {p["spec"]["activeDeadlineSeconds"] for p in builds} == {600}
    envs = [{e["name"]: e.get("value") for e in p["spec"]["containers"][0]["env"]} for p in builds]
    assert {e["NIGHTLY_BUILD_TIMEOUT_S"] for e in envs} == {"600"}
