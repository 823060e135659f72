"""The example's LoRA MoE sibling pair really trains on CPU, and together its diagonals cover the grid."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from pipelines.core.coverage import TreeSource, check_repo, config_outcomes, locate

MINIRL = Path(__file__).resolve().parents[2] / "examples" / "minirl"
SIBLINGS = ("tests/e2e/lora/test_lora_moe_5layer.py", "tests/e2e/lora/test_lora_moe_6layer.py")


def test_each_sibling_runs_both_of_its_configurations_and_each_passes(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MINIRL_")}
    env.update(MINIRL_ROOT=str(tmp_path), MINIRL_HUB=str(MINIRL / "hub"), PYTHONPATH=str(MINIRL),
               CUDA_VISIBLE_DEVICES="0,1", OMP_NUM_THREADS="1")
    outcomes = {}
    for test in SIBLINGS:
        done = subprocess.run([sys.executable, test], cwd=MINIRL, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        outcomes.update(config_outcomes(done.stdout))

    assert outcomes == {"megatron-shared-outer-virtual": "passed", "tilelang-per-expert": "passed",
                        "megatron-per-expert": "passed", "tilelang-shared-outer-virtual": "passed"}


def test_each_sibling_alone_covers_half_the_grid_and_the_pair_all_of_it():
    where = locate(MINIRL)
    (group,) = [g for g in check_repo(where).groups if g.group.name == "lora-moe-diagonals"]

    assert group.ok and len(group.cells) == 4
    for test in SIBLINGS:
        alone = [c for c in group.cells if any(x.test == test for x in group.covered_by(c))]
        assert len(alone) == 2, test
    assert TreeSource(MINIRL).read(SIBLINGS[0]).count(b"# coverage-group: lora-moe-diagonals") == 1
