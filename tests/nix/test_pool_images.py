"""The shipped pools run the built test-pod images, never the framework images they are built on.

A pool pointed at a base image (nix/base-images.json ``imageName``) runs every test into
``No module named 'pipelines'``: the wrapper lives only in the test-pod image (``podImage``).
"""

from __future__ import annotations

import json

from pipelines.core.specs import load_specs
from tests.conftest import PROJECT_ROOT

BASES = json.loads((PROJECT_ROOT / "nix/base-images.json").read_text())["images"]


def repository(image: str) -> str:
    """``name[:tag][@digest]`` -> name (a registry port's colon comes before the last slash)."""
    name = image.split("@", 1)[0]
    head, _, last = name.rpartition("/")
    return f"{head}/{last.split(':', 1)[0]}" if head else last.split(":", 1)[0]


def kubernetes_pools():
    specs = load_specs(PROJECT_ROOT / "assets")
    return [(d.name, p) for d in specs.deployments.values() if d.launcher == "kubernetes" for p in d.pools]


def test_the_shipped_cluster_has_kubernetes_pools_to_check():
    assert kubernetes_pools(), "assets/cluster.yaml has no kubernetes pool: this test checks nothing"


def test_every_kubernetes_pool_runs_a_test_pod_image_pinned_by_its_own_digest():
    pod_images = {b["podImage"] for b in BASES.values()}
    base_names = {b["imageName"] for b in BASES.values()}
    base_digests = {b["imageDigest"] for b in BASES.values()}
    for deployment, pool in kubernetes_pools():
        where = f"assets/cluster.yaml: deployments.{deployment}.pools.{pool.name}"
        assert repository(pool.image) not in base_names, f"{where}.image is a base image; use its podImage"
        assert repository(pool.image) in pod_images, (
            f"{where}.image {pool.image} is no podImage of nix/base-images.json"
        )
        assert pool.image_digest not in base_digests, f"{where}.image_digest is the base image's digest"


def test_repository_drops_tag_and_digest_but_keeps_a_registry_port():
    assert repository("ghcr.io/example/x:nightly@sha256:ab") == "ghcr.io/example/x"
    assert repository("registry:5000/x") == "registry:5000/x"
