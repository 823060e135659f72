"""Sensors: a changed test file reruns that test; a changed pool image reruns every test."""

import json
import shutil

import dagster as dg
import pytest

from pipelines.definitions import build_definitions
from pipelines.defs.resources import NightlyResource


@pytest.fixture
def setup(tmp_path, project_root):
    repo = tmp_path / "minirl"
    shutil.copytree(project_root / "examples" / "minirl", repo)
    assets = tmp_path / "assets"
    shutil.copytree(project_root / "assets", assets)
    repos = assets / "repos.yaml"
    repos.write_text(repos.read_text().replace("path: examples/minirl", f"path: {repo}"))
    resource = NightlyResource(home=str(tmp_path / "home"), assets_dir=str(assets))
    defs = build_definitions(nightly=resource)
    return defs, resource, repo, assets


def _tick(defs, resource, cursor):
    sensor = defs.resolve_sensor_def("rerun_changed_tests")
    ctx = dg.build_sensor_context(cursor=cursor, resources={"nightly": resource}, definitions=defs)
    result = sensor.evaluate_tick(ctx)
    return result, result.cursor


def test_the_first_tick_only_remembers_and_an_unchanged_tree_requests_nothing(setup):
    defs, resource, _, _ = setup
    result, cursor = _tick(defs, resource, None)
    assert result.run_requests == [] and "first evaluation" in result.skip_message
    result, _ = _tick(defs, resource, cursor)
    assert result.run_requests == [] and result.skip_message == "no test file or image changed"


def test_a_changed_test_file_reruns_only_that_test(setup):
    defs, resource, repo, _ = setup
    _, cursor = _tick(defs, resource, None)
    test_file = repo / "tests" / "e2e" / "megatron" / "test_sft_math.py"
    test_file.write_text(test_file.read_text() + "\n# tweaked\n")
    result, _ = _tick(defs, resource, cursor)
    assert [r.partition_key for r in result.run_requests] == ["tests/e2e/megatron/test_sft_math.py"]
    assert result.run_requests[0].tags["nightly/reason"] == "test file changed"


def test_a_new_pool_image_reruns_every_enabled_test(setup):
    defs, resource, _, assets = setup
    _, cursor = _tick(defs, resource, json.dumps({"shas": {}, "images": "older"}))
    result, _ = _tick(defs, resource, cursor)
    assert result.run_requests == []
    cluster = assets / "cluster.yaml"
    cluster.write_text(cluster.read_text().replace("rl-framework:nightly", "rl-framework:2026-12-04"))
    result, _ = _tick(defs, NightlyResource(home=resource.home, assets_dir=resource.assets_dir, deployment="production"),
                      cursor)
    keys = {r.partition_key for r in result.run_requests}
    assert "tests/e2e/megatron/test_sft_math.py" in keys and len(keys) >= 9
    assert "tests/e2e/megatron/test_multinode_sft.py" not in keys  # disabled
    assert {r.tags["nightly/reason"] for r in result.run_requests} == {"pool image changed"}
