"""The one resource as every Dagster way in builds it: from the environment the user started Dagster with."""

from __future__ import annotations

import dagster as dg
import pytest

from pipelines.definitions import build_definitions
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
