"""All Dagster definitions load, and their wiring matches the reviewed snapshot.

The snapshot (wiring.json beside this file) lists asset keys, dependencies, partition keys,
jobs, schedules and sensors. After an intended change, regenerate it with
``NIGHTLY_UPDATE_SNAPSHOT=1 make test PYTEST_ARGS=tests/defs`` and review the diff.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from pipelines.definitions import build_definitions, defs

SNAPSHOT = Path(__file__).with_name("wiring.json")


def wiring(d: dg.Definitions) -> dict:
    graph = d.resolve_asset_graph()
    assets = {}
    for key in sorted(graph.get_all_asset_keys(), key=lambda k: k.to_user_string()):
        node = graph.get(key)
        pd = node.partitions_def
        assets[key.to_user_string()] = {
            "deps": sorted(k.to_user_string() for k in node.parent_keys),
            "partitions": sorted(pd.get_partition_keys()) if pd else None,
            "group": node.group_name,
            "checks": sorted(c.name for c in node.check_keys),
            "has_description": bool(node.description),
        }
    repo = d.get_repository_def()
    return {
        "assets": assets,
        "jobs": sorted(j.name for j in repo.get_all_jobs() if not j.name.startswith("__")),
        "schedules": {s.name: s.cron_schedule for s in repo.schedule_defs},
        "sensors": sorted(s.name for s in repo.sensor_defs),
    }


def test_all_definitions_load_and_validate():
    dg.Definitions.validate_loadable(defs)
    repo = defs.get_repository_def()
    repo.load_all_definitions()
    assert {j.name for j in repo.get_all_jobs()} >= {"nightly", "weekly", "tests", "calibration"}


def test_every_test_job_is_a_selection_of_the_one_test_runs_asset():
    graph = defs.resolve_asset_graph()
    for name in ("nightly", "weekly", "tests"):
        job = defs.resolve_job_def(name)
        assert [n.name for n in job.nodes] == ["test_runs"], name
    node = graph.get(dg.AssetKey("test_runs"))
    assert node.backfill_policy == dg.BackfillPolicy.single_run()
    assert dg.AssetCheckKey(dg.AssetKey("test_runs"), "test_passed") in node.check_keys


def test_the_wiring_matches_the_snapshot():
    current = wiring(defs)
    if os.environ.get("NIGHTLY_UPDATE_SNAPSHOT"):
        SNAPSHOT.write_text(json.dumps(current, indent=1, sort_keys=True) + "\n")
    assert current == json.loads(SNAPSHOT.read_text()), "wiring changed; see the module docstring to update"


def test_every_asset_has_a_description_for_the_ui():
    assert all(a["has_description"] for a in wiring(defs)["assets"].values())


def test_lineage_runs_from_model_to_checkpoint_to_test_runs_to_report():
    assets = wiring(defs)["assets"]
    assert assets["converted_checkpoints"]["deps"] == ["model_weights"]
    assert set(assets["test_runs"]["deps"]) == {"converted_checkpoints", "datasets", "model_weights"}
    assert assets["calibrated_estimates"]["deps"] == ["test_runs"]
    assert assets["night_report"]["deps"] == ["calibrated_estimates"]


def test_each_test_run_partition_depends_on_exactly_its_own_checkpoint():
    from pipelines.night import Night

    graph = defs.resolve_asset_graph()
    test_runs = graph.get(dg.AssetKey("test_runs"))
    converted = graph.get(dg.AssetKey("converted_checkpoints"))
    mapping = graph.get_partition_mapping(test_runs.key, converted.key)
    checked = 0
    for test in Night().catalog.tests:
        subset = test_runs.partitions_def.subset_with_partition_keys([test.id])
        result = mapping.get_upstream_mapped_partitions_result_for_partitions(
            subset, test_runs.partitions_def, converted.partitions_def)
        upstream = sorted(result.partitions_subset.get_partition_keys())
        assert upstream == sorted(r for r in test.requirements if "_torch_dist" in r), test.id
        checked += bool(upstream)
    assert checked >= 8


@pytest.mark.slow  # the `dagster` CLI in a subprocess: ~8 s idle
def test_dagster_cli_validates_the_workspace(project_root: Path, tmp_path: Path):
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path), "NIGHTLY_HOME": str(tmp_path / "home")}
    dagster = Path(sys.executable).with_name("dagster")
    proc = subprocess.run([str(dagster), "definitions", "validate", "-w", str(project_root / "workspace.yaml")],
                          cwd=project_root, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.slow  # the `dagster` CLI in a subprocess: ~8 s idle
def test_broken_assets_stop_the_code_location_with_the_located_message_and_no_project_frames(project_root: Path,
                                                                                           tmp_path: Path):
    """`gpus_per_node: eight`: Dagster printed the located message, then a "Stack Trace:" through
    definitions.py, night.py and specs.py, though docs/reliability.md promises the message alone."""
    from tests.support.assets import example_assets

    assets = example_assets(tmp_path / "assets")
    cluster = assets / "cluster.yaml"
    text = cluster.read_text()
    assert "gpus_per_node: 8}" in text
    cluster.write_text(text.replace("gpus_per_node: 8}", "gpus_per_node: eight}", 1))
    line = 1 + text[:text.index("gpus_per_node: 8}")].count("\n")
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path), "NIGHTLY_HOME": str(tmp_path / "home"),
           "NIGHTLY_ASSETS_DIR": str(assets)}
    dagster = Path(sys.executable).with_name("dagster")
    proc = subprocess.run([str(dagster), "definitions", "validate", "-w", str(project_root / "workspace.yaml")],
                          cwd=project_root, env=env, capture_output=True, text=True, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert (f"pipelines.core.model.CatalogError: {cluster}:{line}: deployments.local.pools.h200.gpus_per_node: "
            "expected a whole number, got text 'eight'; write a whole number") in out
    stack = out[out.index("Stack Trace:"):]
    project_frames = [x for x in stack.splitlines() if x.strip().startswith("File ") and "site-packages" not in x]
    assert len(project_frames) == 1 and "pipelines/definitions.py" in project_frames[0], stack
    assert "The above exception" not in out and "During handling" not in out


def test_definitions_build_for_a_catalog_of_thousands_of_tests():
    from pipelines.core.model import Catalog
    from tests.conftest import make_test

    tests = tuple(make_test(id=f"tests/t{i:05d}.py", path=f"tests/t{i:05d}.py") for i in range(5000))
    d = build_definitions(catalog=Catalog(repo="x", tests=tests))
    assert len(wiring(d)["assets"]["test_runs"]["partitions"]) == 5000


def test_a_corrupt_estimates_file_leaves_the_code_location_loading_and_fails_the_tick_that_reads_it(tmp_path):
    """The estimates file is state: broken, it must not take the schedules and sensors down with the location."""
    from pipelines.defs.resources import NightlyResource
    from tests.support.assets import example_assets

    nightly = NightlyResource(home=str(tmp_path / "home"), assets_dir=str(example_assets(tmp_path / "assets")))
    night = nightly.night()
    night.state.put(night.calibration_keys()["estimates"], "{not json")
    loaded = build_definitions(nightly=nightly)  # the partitions are the registered tests
    keys = loaded.resolve_assets_def("test_runs").partitions_def.get_partition_keys()
    assert sorted(keys) == sorted(t.id for t in night.registered.tests)
    tick = loaded.resolve_sensor_def("rerun_changed_tests").evaluate_tick(
        dg.build_sensor_context(resources={"nightly": nightly}, definitions=loaded))
    assert "corrupt estimates file" in tick.skip_message and "estimates/minirl.json:1" in tick.skip_message


GHOST = """from minirl.ci_register import register_cuda_ci
from minirl.testing import convert_checkpoint

register_cuda_ci(est_time=5, suite="stage-b-2-gpu-h200", labels=["ghost"])


def prepare():
    convert_checkpoint(model_name="ghost-lm", megatron_model_type="tiny", num_gpus_per_node=2)
"""


def test_a_conversion_of_a_model_nothing_downloads_is_a_located_problem_and_the_definitions_still_load(
        tmp_path, monkeypatch, capsys):
    """`catalog --strict` passed, and the code location failed to load with Dagster's invalid partition mapping
    (converted_checkpoints -> model_weights: 'ghost-lm' not in upstream partitions)."""
    from pipelines.cli import main
    from pipelines.defs.resources import NightlyResource
    from tests.support.assets import copied_example

    repo, assets = copied_example(tmp_path)
    (repo / "tests" / "e2e" / "test_ghost.py").write_text(GHOST)
    monkeypatch.setenv("NIGHTLY_ASSETS_DIR", str(assets))
    monkeypatch.setenv("NIGHTLY_HOME", str(tmp_path / "home"))
    assert main(["catalog", "--strict", "--labels", "ghost"]) == 1
    assert ("tests/e2e/test_ghost.py:8: convert_checkpoint: converts model 'ghost-lm', which is neither downloaded "
            "in prepare() nor declared in assets/models.yaml") in capsys.readouterr().err
    d = build_definitions(nightly=NightlyResource(home=str(tmp_path / "home"), assets_dir=str(assets)))
    graph = d.resolve_asset_graph()
    graph.validate_partitions()
    keys = graph.get(dg.AssetKey("converted_checkpoints")).partitions_def.get_partition_keys()
    assert not any(k.startswith("ghost-lm") for k in keys), keys
