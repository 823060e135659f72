"""Inputs built on Kubernetes from the UI: the same image and identity as a night's builds.

The ``converted_checkpoints`` asset is materialized by partition, as the UI or a backfill does,
against a stand-in cluster whose build pods really run (``tests/launch/kubernetes/kubelet.py``);
the pool's image digest comes from its ``image_digest_command`` (the tag has moved since
``image_digest`` was written). A night that then builds the same conversion must reuse it: a
conversion built with another image is another identity, and would cost hours of GPUs twice.
"""

from __future__ import annotations

import json
import textwrap

import dagster as dg
import pytest

from pipelines.definitions import build_definitions
from pipelines.defs.resources import NightlyResource
from pipelines.launch.infra import probe
from pipelines.night import Night
from pipelines.storage.cache import MARKER, conversion_recipe
from tests.launch.kubernetes.apiserver import StandInApiServer
from tests.launch.kubernetes.kubelet import Kubelet
from tests.support.assets import EXAMPLE, example_assets

MOVED = "sha256:" + "b" * 64  # what `crane digest` says tonight; the pool's image_digest is older


def _kubeconfig(path, url: str) -> None:
    path.write_text(
        textwrap.dedent(f"""\
        apiVersion: v1
        kind: Config
        clusters: [{{name: stand-in, cluster: {{server: "{url}"}}}}]
        users: [{{name: nightly, user: {{token: stand-in-token}}}}]
        contexts: [{{name: stand-in, context: {{cluster: stand-in, user: nightly, namespace: nightly-e2e}}}}]
        current-context: stand-in
    """)
    )


@pytest.fixture
def cluster(tmp_path, monkeypatch):
    """(assets, home, kubelet, server): production on a stand-in cluster, state kept locally."""
    assets = example_assets(tmp_path / "assets")
    cluster_yaml = assets / "cluster.yaml"
    text = cluster_yaml.read_text()
    text = text.replace("    storage: s3\n", "    storage: local\n", 1)
    text = text.replace(
        "        image_digest: sha256:",
        f"        image_digest_command: [echo, {MOVED}]\n        image_digest: sha256:",
        1,
    )
    cluster_yaml.write_text(text)
    kubelet = Kubelet.create(tmp_path, EXAMPLE, EXAMPLE / "hub", {"hf-token": {"token": "hf_x"}})
    with StandInApiServer(script=kubelet.steps) as server:
        _kubeconfig(tmp_path / "kubeconfig", server.url)
        monkeypatch.setenv("KUBECONFIG", str(tmp_path / "kubeconfig"))
        monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
        monkeypatch.delenv("HF_ENDPOINT", raising=False)
        yield assets, tmp_path / "home", kubelet, server


def _env(body: dict) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in body["spec"]["containers"][0]["env"]}


def test_a_conversion_built_from_the_ui_uses_the_nights_image_and_identity_and_the_night_reuses_it(cluster):
    assets, home, kubelet, server = cluster
    resource = NightlyResource(home=str(home), assets_dir=str(assets), deployment="production")
    night = Night(resource.settings())
    conv = next(r for r in night.catalog.requirements if r.kind == "conversion")
    job = build_definitions(nightly=resource).resolve_implicit_global_asset_job_def()
    with dg.instance_for_test() as instance:
        for asset, key in (("model_weights", conv.depends_on[0]), ("converted_checkpoints", conv.key)):
            result = job.get_subset(asset_selection={dg.AssetKey(asset)}).execute_in_process(
                instance=instance, partition_key=key
            )
        [mat] = result.asset_materializations_for_node("converted_checkpoints")
    [ui_pod] = [b for b in server.created if b["metadata"]["labels"]["nightly-e2e.io/kind"] == "conversion"]
    pool = night.deployment.pools[0]
    assert ui_pod["spec"]["containers"][0]["image"] == f"{pool.image}@{MOVED}", "the image the night pins"
    recipe = conversion_recipe(night.specs.conversion, conv, night.repo_spec.path, {}, image=MOVED)
    assert _env(ui_pod)["NIGHTLY_RECIPE"] == recipe.digest
    marker = json.loads((kubelet.local(ui_pod, conv.path) / MARKER).read_text())
    assert marker["recipe"]["digest"] == recipe.digest
    # the night, as execute.run_tests starts it: images pinned from the probe, then its inputs
    night.pin_images(probe(night.deployment))
    built = night.build(conv)
    assert built.reused, "the night rebuilt the checkpoint the UI built"
    assert built.identity == mat.metadata["identity"].value == marker["identity"], "the UI shows the identity"
