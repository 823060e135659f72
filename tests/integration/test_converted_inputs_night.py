"""A converted checkpoint is rebuilt when what the conversion runs changes, on every way in.

The example's converter is changed between real nights (``run_tests``, the body every night
shares, with the real input builds and a stand-in launcher for the seconds-long training): an
unchanged converter is reused, a converter that now raises fails the conversion and so the
night, instead of a pass on yesterday's checkpoint. The Dagster input asset, materialized by
partition as the UI or a backfill does, rebuilds after a change in a module the converter imports.
"""

from __future__ import annotations

from datetime import UTC, datetime

import dagster as dg
import pytest

from pipelines.core.model import Attempt
from pipelines.core.runset import RunSelection
from pipelines.definitions import build_definitions
from pipelines.defs.resources import NightlyResource
from pipelines.execute import InputReady, NightDone, run_tests
from pipelines.night import Night, NightSettings
from tests.support.assets import copied_example

pytestmark = pytest.mark.slow  # the example's catalog and real conversions

TEST = "tests/e2e/megatron/test_sft_math.py"
CONVERSION = "tiny-lm_torch_dist-936247"
MAIN = "def main(argv: list[str] | None = None) -> int:\n"
REGRESSION = '    raise RuntimeError("converter regression")\n'


class PassesWithItsCheckpoint:
    """Passes a test whose inputs were built (blocked tests never reach a launcher)."""

    name = "stand-in"

    def launch(self, request, on_log=None) -> Attempt:
        return Attempt(
            request.test.id,
            "passed",
            1.0,
            datetime.now(UTC).isoformat(),
            node="stand-in-0",
            exit_code=0,
            timeout_s=request.timeout_s,
        )


def night(tmp_path) -> tuple[dict, dict[str, str]]:
    n = Night(NightSettings(home=tmp_path / "home", assets_dir=tmp_path / "assets"))
    events = list(
        run_tests(
            n,
            n.runset([TEST], RunSelection()),
            RunSelection(),
            launcher=PassesWithItsCheckpoint(),
            say=lambda _: None,
        )
    )
    inputs = {
        e.requirement.key: ("reused" if e.built.reused else f"built {e.built.rebuilt}".strip())
        for e in events
        if isinstance(e, InputReady)
    }
    [done] = [e for e in events if isinstance(e, NightDone)]
    return done.summary, inputs


def test_a_converter_change_rebuilds_the_checkpoint_and_a_broken_converter_fails_the_night(tmp_path):
    repo, _ = copied_example(tmp_path)
    converter = repo / "tools" / "convert_hf_to_torch_dist.py"
    first, built = night(tmp_path)
    assert first["verdict"]["ok"] and built[CONVERSION] == "built"
    second, reused = night(tmp_path)
    assert second["verdict"]["ok"] and reused[CONVERSION] == "reused", "an unchanged converter is reused"
    text = converter.read_text()
    assert MAIN in text
    converter.write_text(text.replace(MAIN, MAIN + REGRESSION, 1))  # the regression
    third, inputs = night(tmp_path)
    assert CONVERSION not in inputs and not third["verdict"]["ok"], (
        "the night must not pass on yesterday's checkpoint"
    )
    [attempt] = [a for a in third["attempts"] if a["test_id"] == TEST]
    assert attempt["outcome"] != "passed" and "converter regression" in attempt["reason"]
    converter.write_text(text)  # the fix is in: yesterday's checkpoint is the same recipe's again
    fourth, inputs = night(tmp_path)
    assert fourth["verdict"]["ok"] and inputs[CONVERSION] == "reused"


def test_the_converted_checkpoints_asset_rebuilds_a_partition_after_an_imported_module_changes(tmp_path):
    repo, assets = copied_example(tmp_path)
    defs = build_definitions(nightly=NightlyResource(home=str(tmp_path / "home"), assets_dir=str(assets)))
    job = defs.resolve_implicit_global_asset_job_def()

    def materialize(asset: str, partition: str) -> dict:
        result = job.get_subset(asset_selection={dg.AssetKey(asset)}).execute_in_process(
            instance=instance, partition_key=partition
        )
        [mat] = result.asset_materializations_for_node(asset)
        return {k: v.value for k, v in mat.metadata.items()}

    with dg.instance_for_test() as instance:
        materialize("model_weights", "tiny-lm")
        first = materialize("converted_checkpoints", CONVERSION)
        same = materialize("converted_checkpoints", CONVERSION)
        checkpoint = repo / "minirl" / "checkpoint.py"  # imported by the converter, never run by name
        checkpoint.write_text(checkpoint.read_text() + "\n# a change in how shards are written\n")
        again = materialize("converted_checkpoints", CONVERSION)
    assert (first["reused"], same["reused"], again["reused"]) == (False, True, False)
    assert same["identity"] == first["identity"] != again["identity"]
    assert "files minirl/checkpoint.py" in again["rebuilt_because"] and "rebuilt_because" not in same
