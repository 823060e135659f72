"""The example framework works end to end: a test prepares and trains, faults inject, the tree registers."""

from __future__ import annotations

import ast
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

MINIRL = Path(__file__).resolve().parents[2] / "examples" / "minirl"
E2E = MINIRL / "tests" / "e2e"
SFT_TEST = E2E / "megatron" / "test_sft_math.py"


def _env(root: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MINIRL_") and k != "CUDA_VISIBLE_DEVICES"}
    env.update(MINIRL_ROOT=str(root), MINIRL_HUB=str(MINIRL / "hub"), PYTHONPATH=str(MINIRL), **extra)
    return env


def _run(argv: list[str], env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=MINIRL, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow  # a whole example test (prepare, train, convert) in a subprocess
def test_a_test_file_prepares_trains_and_leaves_the_converted_checkpoint(tmp_path):
    done = _run([sys.executable, str(SFT_TEST)], _env(tmp_path, CUDA_VISIBLE_DEVICES="0,1,2,3"))

    assert done.returncode == 0, done.stdout + done.stderr
    ckpt = tmp_path / "models" / "tiny-lm_torch_dist"
    metadata = json.loads((ckpt / "metadata.json").read_text())
    assert metadata["num_ranks"] == 4
    assert sorted(p.name for p in (ckpt / "iter_0000000").iterdir()) == [
        f"__{r}_0.distcp.npz" for r in range(4)
    ]
    assert (tmp_path / "datasets" / "toy-math" / "train.jsonl").is_file()
    assert "got 4 GPUs" in done.stdout
    drop = re.search(r"held-out loss: ([\d.]+) -> ([\d.]+)", done.stdout)
    assert drop and float(drop[1]) - float(drop[2]) >= 1.0


@pytest.mark.slow  # a whole example test file in a subprocess
def test_minirl_fail_makes_the_named_test_exit_non_zero_with_a_message(tmp_path):
    done = _run([sys.executable, str(SFT_TEST)], _env(tmp_path, MINIRL_FAIL="test_other, test_sft_math"))

    assert done.returncode == 1
    assert "test_sft_math: failing on purpose because MINIRL_FAIL names it" in done.stderr


def _signal_state(pid: int) -> str:
    """The kernel's view of a process's state and signal masks (for a failure message)."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError as exc:
        return f"pid {pid}: {exc}"
    keep = ("State", "SigPnd", "ShdPnd", "SigBlk", "SigIgn", "Threads")
    return f"pid {pid}: " + ", ".join(line.replace("\t", " ") for line in lines if line.split(":")[0] in keep)


@pytest.mark.slow  # a whole example test file in a subprocess, left hanging for 2 s
def test_minirl_hang_keeps_the_test_running_until_sigterm(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, str(SFT_TEST)],
        cwd=MINIRL,
        env=_env(tmp_path, MINIRL_HANG="test_sft_math"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        for line in proc.stdout:
            if "hanging on purpose" in line:
                break
        time.sleep(2.0)
        assert proc.poll() is None, "a hanging test exited by itself"
        proc.send_signal(signal.SIGTERM)
        try:  # at once idle; the limit only stops a hang, and then says what the process was doing
            code = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the hanging test outlived SIGTERM by 60 s: {_signal_state(proc.pid)}; "
                        f"this process: {_signal_state(os.getpid())}")
        assert code == -signal.SIGTERM
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()


def test_the_converter_rejects_a_missing_checkpoint_with_a_clear_message(tmp_path):
    argv = [
        sys.executable, "tools/convert_hf_to_torch_dist.py",
        "--hf-checkpoint", str(tmp_path / "nope"), "--save", str(tmp_path / "out"),
        "--model-type", "tiny", "--num-gpus", "2",
    ]  # fmt: skip
    done = _run(argv, _env(tmp_path))

    assert done.returncode == 2
    assert f"{tmp_path / 'nope' / 'config.json'}: not found" in done.stderr
    assert not (tmp_path / "out").exists()


def test_the_converter_rejects_a_model_type_that_does_not_match_the_config(tmp_path):
    argv = [
        sys.executable, "tools/convert_hf_to_torch_dist.py",
        "--hf-checkpoint", str(MINIRL / "hub/models/minirl/tiny-lm"), "--save", str(tmp_path / "out"),
        "--model-type", "qwen3", "--num-gpus", "2",
    ]  # fmt: skip
    done = _run(argv, _env(tmp_path))

    assert done.returncode == 2
    assert "--model-type: 'qwen3' does not match model_type 'tiny'" in done.stderr
    assert list(tmp_path.iterdir()) == []


# ---- invariants over the real tree ----------------------------------------------------------


def _registrations(path: Path) -> list[tuple[str, dict]]:
    """Module-level register_*_ci calls as (function, literal arguments)."""
    calls = []
    for node in ast.parse(path.read_text(), str(path)).body:
        if (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Name)
        ):
            name = node.value.func.id
            if re.fullmatch(r"register_\w+_ci", name):
                args = dict(
                    zip(("est_time", "suite"), (ast.literal_eval(a) for a in node.value.args), strict=False)
                )
                args.update({k.arg: ast.literal_eval(k.value) for k in node.value.keywords})
                calls.append((name, args))
    return calls


def _module_constants(path: Path) -> dict:
    out = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                out[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                continue
    return out


TEST_FILES = sorted(MINIRL.glob("tests/**/test_*.py"))


@pytest.mark.parametrize("path", TEST_FILES, ids=lambda p: p.stem)
def test_every_example_test_registers_and_has_the_framework_anatomy(path):
    calls = _registrations(path)
    constants = _module_constants(path)
    functions = {n.name for n in ast.parse(path.read_text()).body if isinstance(n, ast.FunctionDef)}

    assert calls, f"{path}: no module-level register_*_ci call"
    assert {"prepare", "execute"} <= functions
    assert 'if __name__ == "__main__":' in path.read_text()
    cuda_suites = [args["suite"] for name, args in calls if name == "register_cuda_ci"]
    assert cuda_suites, f"{path}: no register_cuda_ci call"
    gpus = int(re.fullmatch(r"stage-[a-z]-(\d+)-gpu-h200", cuda_suites[0])[1])
    assert constants["NUM_GPUS"] == gpus, f"{path}: NUM_GPUS disagrees with suite {cuda_suites[0]}"
    assert constants["MODEL_NAME"] in ("tiny-lm", "tiny-lm-wide")


def test_the_registry_covers_every_case_the_nightly_must_handle():
    by_file = {p.relative_to(MINIRL).as_posix(): _registrations(p) for p in TEST_FILES}
    calls = [args for regs in by_file.values() for _, args in regs]
    cuda = [args for regs in by_file.values() for name, args in regs if name == "register_cuda_ci"]

    assert len(by_file) >= 9
    assert {"stage-b-2-gpu-h200", "stage-c-4-gpu-h200", "stage-c-8-gpu-h200"} <= {a["suite"] for a in cuda}
    assert len([a for a in calls if a.get("disabled")]) == 1
    assert len([a for a in calls if a.get("nightly")]) == 1
    assert any("long" in a["labels"] for a in calls)
    assert {"megatron", "fsdp", "sglang", "lora", "ckpt", "short", "long"} <= {
        x for a in calls for x in a["labels"]
    }
    two = [f for f, regs in by_file.items() if len(regs) == 2]
    assert len(two) == 1 and {name for name, _ in by_file[two[0]]} == {"register_cuda_ci", "register_rocm_ci"}
    assert len({args["suite"] for _, args in by_file[two[0]]}) == 2
    matrices = [_module_constants(MINIRL / f).get("_CONFIGS") for f in by_file]
    matrix = next(m for m in matrices if m)
    assert all(isinstance(row, tuple) and len(row) == 4 for row in matrix)


def test_at_least_two_tests_share_one_conversion_and_no_two_conversions_share_an_output():
    keys = []
    for path in TEST_FILES:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "convert_checkpoint":
                kw = {k.arg: k.value for k in node.keywords}
                keys.append((_module_constants(path)["MODEL_NAME"], ast.literal_eval(kw["dir_dst"]),
                             _module_constants(path)["NUM_GPUS"]))  # fmt: skip
    assert len(keys) == len(TEST_FILES)
    assert len(set(keys)) < len(keys)
    shards_by_output: dict[tuple, set] = {}
    for model, dir_dst, gpus in keys:
        shards_by_output.setdefault((model, dir_dst), set()).add(gpus)
    assert all(len(g) == 1 for g in shards_by_output.values()), shards_by_output
