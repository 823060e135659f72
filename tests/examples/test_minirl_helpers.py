"""minirl's own helpers: hub downloads, path mapping, conversion, sharded checkpoints."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

MINIRL = Path(__file__).resolve().parents[2] / "examples" / "minirl"


@pytest.fixture
def minirl(monkeypatch, tmp_path):
    """The example package on sys.path, with /root mapped to a temporary folder."""
    monkeypatch.syspath_prepend(str(MINIRL))
    monkeypatch.setenv("MINIRL_ROOT", str(tmp_path / "root"))
    monkeypatch.setenv("MINIRL_HUB", str(MINIRL / "hub"))
    import minirl.testing

    return minirl


def test_host_path_maps_only_the_root_prefix(minirl, tmp_path, monkeypatch):
    host_path = minirl.testing.host_path
    assert host_path("/root/models/tiny-lm") == tmp_path / "root" / "models" / "tiny-lm"
    assert host_path("/root") == tmp_path / "root"
    assert host_path("/rootless/x") == Path("/rootless/x")
    assert host_path("/dev/shm/x") == Path("/dev/shm/x")
    monkeypatch.delenv("MINIRL_ROOT")
    assert host_path("/root/models/tiny-lm") == Path("/root/models/tiny-lm")


def test_hf_download_copies_a_model_from_the_local_hub(minirl, tmp_path):
    minirl.testing.exec_command("hf download minirl/tiny-lm --local-dir /root/models/tiny-lm")
    got = tmp_path / "root" / "models" / "tiny-lm"
    assert sorted(p.name for p in got.iterdir()) == ["config.json", "weights.npz"]
    assert (got / "weights.npz").read_bytes() == (
        MINIRL / "hub/models/minirl/tiny-lm/weights.npz"
    ).read_bytes()


def test_hf_download_dataset_lands_in_root_datasets(minirl, tmp_path):
    assert minirl.testing.hf_download_dataset("minirl/toy-chat") == "/root/datasets/toy-chat"
    assert (tmp_path / "root" / "datasets" / "toy-chat" / "train.jsonl").is_file()


@pytest.mark.parametrize(
    ("cmd", "message"),
    [
        ("rm -rf /root", "is not supported; expected `hf download"),
        ("hf download minirl/tiny-lm", "has no --local-dir"),
        ("hf download minirl/tiny-lm --local-dir /x --revision main", "unsupported argument '--revision'"),
        ("hf download ../../etc --local-dir /x", "is not of the form org/name"),
        ("hf download minirl/tiny-lm --repo-type space --local-dir /x", "is not model or dataset"),
        ("hf download 'minirl/tiny-lm --local-dir /x", "cannot parse"),
    ],
)
def test_exec_command_rejects_anything_but_hf_download(minirl, cmd, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace("[", r"\[")):
        minirl.testing.exec_command(cmd)


def test_exec_command_names_the_hub_variable_when_it_is_unset(minirl, monkeypatch):
    monkeypatch.delenv("MINIRL_HUB")
    with pytest.raises(RuntimeError, match="MINIRL_HUB is not set"):
        minirl.testing.exec_command("hf download minirl/tiny-lm --local-dir /root/models/tiny-lm")


def test_exec_command_reports_a_repo_missing_from_the_hub(minirl):
    with pytest.raises(FileNotFoundError, match="model 'minirl/nope' is not in the hub"):
        minirl.testing.exec_command("hf download minirl/nope --local-dir /root/models/nope")


def test_convert_checkpoint_runs_once_and_skips_an_existing_output(minirl, tmp_path, capfd):
    minirl.testing.exec_command("hf download minirl/tiny-lm-wide --local-dir /root/models/tiny-lm-wide")
    dst = minirl.testing.convert_checkpoint("tiny-lm-wide", "tiny", 3, dir_dst="/root/models")
    assert dst == "/root/models/tiny-lm-wide_torch_dist"
    out = tmp_path / "root" / "models" / "tiny-lm-wide_torch_dist"
    assert json.loads((out / "metadata.json").read_text())["num_ranks"] == 3
    assert (out / "latest_checkpointed_iteration.txt").read_text() == "0\n"
    minirl.testing.convert_checkpoint("tiny-lm-wide", "tiny", 3, dir_dst="/root/models")
    assert "exists; skipping conversion" in capfd.readouterr().out


def test_a_failed_conversion_raises_with_the_argv(minirl):
    with pytest.raises(RuntimeError, match=r"conversion of absent failed with exit 2: .*--num-gpus 2"):
        minirl.testing.convert_checkpoint("absent", "tiny", 2)


def test_sharded_checkpoints_round_trip_bit_exactly_with_uneven_shards(minirl, tmp_path):
    from minirl.checkpoint import load_torch_dist, read_hub, save_torch_dist

    config, params = read_hub(MINIRL / "hub/models/minirl/tiny-lm")
    save_torch_dist(tmp_path / "ck", config, params, num_ranks=7, iteration=42)
    loaded_config, loaded, metadata = load_torch_dist(tmp_path / "ck")
    assert loaded_config == config and metadata["iteration"] == 42
    assert all(np.array_equal(loaded[k], v) and loaded[k].dtype == v.dtype for k, v in params.items())
    assert [p.name for p in tmp_path.iterdir()] == ["ck"]


def test_loading_a_folder_that_was_never_converted_says_what_to_run(minirl, tmp_path):
    from minirl.checkpoint import CheckpointError, load_torch_dist

    with pytest.raises(CheckpointError, match="is not a converted checkpoint .*convert_checkpoint"):
        load_torch_dist(tmp_path)


def test_a_bad_dataset_row_is_reported_with_path_and_line(minirl, tmp_path):
    from minirl.data import load_dataset

    (tmp_path / "train.jsonl").write_text(
        textwrap.dedent("""\
        {"prompt": "1+1=", "response": "2"}
        {"prompt": "1+2="}
    """)
    )
    with pytest.raises(ValueError, match=rf"{tmp_path / 'train.jsonl'}:2: row: 'response'"):
        load_dataset(tmp_path)


def test_megatron_and_fsdp_backends_compute_the_same_update(minirl):
    from minirl.checkpoint import read_hub
    from minirl.data import load_dataset, split_eval
    from minirl.train import TrainConfig, sft

    config, params = read_hub(MINIRL / "hub/models/minirl/tiny-lm")
    train, held = split_eval(load_dataset(MINIRL / "hub/datasets/minirl/toy-math"))
    runs = [sft(params, config, train, held, TrainConfig(steps=20, backend=b, world=w)) for b, w in
            (("megatron", 1), ("megatron", 4), ("fsdp", 3))]  # fmt: skip
    for other in runs[1:]:
        assert all(np.allclose(other.params[k], runs[0].params[k], atol=1e-5) for k in params)
    assert runs[0].eval_after < runs[0].eval_before


def test_the_shipped_hub_is_what_generate_py_builds():
    done = subprocess.run(
        [sys.executable, "hub/generate.py", "--check"], cwd=MINIRL, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


def test_saving_over_an_existing_checkpoint_is_refused_and_leaves_no_temporary_folder(minirl, tmp_path):
    from minirl.checkpoint import CheckpointError, read_hub, save_torch_dist

    config, params = read_hub(MINIRL / "hub/models/minirl/tiny-lm")
    save_torch_dist(tmp_path / "ck", config, params, num_ranks=2)
    with pytest.raises(
        CheckpointError, match=r"ck: cannot be created .*; remove it or choose another folder"
    ):
        save_torch_dist(tmp_path / "ck", config, params, num_ranks=2)
    assert [p.name for p in tmp_path.iterdir()] == ["ck"]
