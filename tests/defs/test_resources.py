"""The one resource as every Dagster way in builds it, and the specs folder it points at."""

from __future__ import annotations

import shutil

import dagster as dg
import pytest

from pipelines.core.model import CatalogError
from pipelines.definitions import build_definitions
from pipelines.defs.resources import NightlyResource
from tests.support.assets import copied_example

CONVERSION = "tiny-lm_torch_dist-936247"


@pytest.mark.slow  # a real model download and conversion in a temporary instance: ~3 s
def test_a_relative_nightly_home_and_assets_dir_resolve_against_where_dagster_was_started(tmp_path, monkeypatch):
    """`NIGHTLY_HOME=relhome dagster asset materialize ...` from the project root: the converter runs
    with the framework checkout as its working folder, so a relative cache path would point into it."""
    copied_example(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NIGHTLY_HOME", "relhome")
    monkeypatch.setenv("NIGHTLY_ASSETS_DIR", "assets")
    defs = build_definitions()  # the code location reads the environment, as `-m pipelines.definitions` does
    settings = defs.resources["nightly"].settings()
    assert settings.home == tmp_path / "relhome" and settings.assets_dir == tmp_path / "assets"
    job = defs.resolve_implicit_global_asset_job_def()
    with dg.instance_for_test() as instance:
        for asset, key in (("model_weights", "tiny-lm"), ("converted_checkpoints", CONVERSION)):
            result = job.get_subset(asset_selection={dg.AssetKey(asset)}).execute_in_process(
                instance=instance, partition_key=key, raise_on_error=False)
            assert result.success, [e.message for e in result.all_events if e.is_failure]
    assert (tmp_path / "relhome" / "cache").is_dir()


@pytest.mark.slow  # the example's catalog and a model download in a temporary instance: ~2 s
def test_a_copy_of_assets_kept_outside_the_project_still_finds_the_repo_and_hub_it_names(tmp_path, project_root):
    """NIGHTLY_ASSETS_DIR at an unchanged copy of assets/ (docs/run.md): its relative `path:` and `hub:`
    are this project's, as repos.yaml says, not folders beside the copy."""
    specs = tmp_path / "specs" / "assets"
    shutil.copytree(project_root / "assets", specs)
    defs = build_definitions(nightly=NightlyResource(home=str(tmp_path / "home"), assets_dir=str(specs)))
    keys = defs.resolve_assets_def("test_runs").partitions_def.get_partition_keys()
    assert "tests/e2e/megatron/test_sft_math.py" in keys
    job = defs.resolve_implicit_global_asset_job_def().get_subset(asset_selection={dg.AssetKey("model_weights")})
    with dg.instance_for_test() as instance:
        result = job.execute_in_process(instance=instance, partition_key="tiny-lm", raise_on_error=False)
        assert result.success, [e.message for e in result.all_events if e.is_failure]


def test_a_repo_path_that_is_no_folder_says_what_it_was_resolved_against(tmp_path, project_root):
    specs = tmp_path / "specs"
    shutil.copytree(project_root / "assets", specs)
    repos = specs / "repos.yaml"
    repos.write_text(repos.read_text().replace("path: examples/minirl", "path: examples/nosuch"))
    line = next(i for i, text in enumerate(repos.read_text().splitlines(), 1) if "path: examples/nosuch" in text)
    with pytest.raises(CatalogError) as caught:
        build_definitions(nightly=NightlyResource(home=str(tmp_path / "home"), assets_dir=str(specs)))
    assert str(caught.value) == (
        f"{repos}:{line}: repos.minirl.path: {project_root / 'examples' / 'nosuch'} is not a folder "
        f"(examples/nosuch, relative to this project's root {project_root}); point it at the framework "
        "checkout, by an absolute path or one relative to the project's root")
