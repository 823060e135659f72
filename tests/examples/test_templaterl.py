"""The template-format example runs as its own CI would run it: every workflow entry, standalone.

Entries come from rendering the example's workflow template and reading the YAML GitHub would
see; ``${{ matrix.info.<key> || 'default' }}`` is expanded here the way GitHub Actions does, so the
env and arguments each test gets are the workflow's, not the nightly catalog's.
"""

from __future__ import annotations

import ast
import os
import re
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import jinja2
import pytest
import yaml

TEMPLATERL = Path(__file__).resolve().parents[2] / "examples" / "templaterl"
WORKFLOWS = TEMPLATERL / ".github" / "workflows"
_EXPR = re.compile(r"\$\{\{\s*matrix\.info\.([A-Za-z_]\w*)\s*(?:\|\|\s*(?:'([^']*)'|(\d+))\s*)?\}\}")
_LABEL = re.compile(r"'run-ci-([^']+)'")


@dataclass(frozen=True)
class Run:
    """One matrix job of the rendered workflow: what GitHub would execute."""

    job: str
    label: str
    info: dict
    env: dict[str, str]
    argv: tuple[str, ...]  # after `python`

    @property
    def test_file(self) -> str:
        return f"tests/{self.info['test_file']}"

    @property
    def name(self) -> str:
        return " ".join((self.job, *self.argv, *(f"{k}={v}" for k, v in sorted(self.env.items()))))


def render_workflow() -> dict:
    """pr-test.yml.j2 rendered with Jinja2 and parsed as YAML (independently of the nightly catalog)."""
    env = jinja2.Environment(block_start_string="<%", block_end_string="%>", variable_start_string="<<",
                             variable_end_string=">>", comment_start_string="<#", comment_end_string="#>",
                             undefined=jinja2.StrictUndefined)
    return yaml.safe_load(env.from_string((WORKFLOWS / "pr-test.yml.j2").read_text()).render())


def _expand(text: str, info: dict) -> str:
    """GitHub's ``${{ matrix.info.key || 'default' }}``: the value when set and non-empty, else the default."""
    def value(m: re.Match) -> str:
        given = info.get(m[1])
        return str(given) if given not in (None, "") else (m[2] if m[2] is not None else m[3] or "")

    return _EXPR.sub(value, text)


def workflow_runs() -> list[Run]:
    runs = []
    for job, spec in render_workflow()["jobs"].items():
        label = _LABEL.search(spec["if"])[1]
        (execute,) = [s["run"] for s in spec["steps"] if s.get("name") == "Execute"]
        for info in spec["strategy"]["matrix"]["info"]:
            env = {k: _expand(v, info) for k, v in spec.get("env", {}).items()}
            argv = shlex.split(_expand(execute, info))
            assert argv[0] == "python", execute
            runs.append(Run(job, label, info, env, tuple(argv[1:])))
    return runs


def num_gpus_declared(path: Path) -> int | None:
    """The module-level ``NUM_GPUS = <int>`` of a test file, if it has one."""
    for node in ast.parse(path.read_text()).body:
        if (isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["NUM_GPUS"]
                and isinstance(node.value, ast.Constant)):
            return node.value.value
    return None


def _environ(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("CUDA_VISIBLE_DEVICES", "ENABLE_EVAL", "USE_FP8_ROLLOUT", "PYTHONPATH")}
    return {**env, "PYTHONPATH": str(TEMPLATERL), **extra}  # PYTHONPATH: the workflow's `pip install -e .`


def _python(argv: tuple[str, ...], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *argv], cwd=TEMPLATERL, env=env, capture_output=True, text=True,
                          timeout=120, check=False)


RUNS = workflow_runs()
# Failures the tests must report: (name, argv, extra env, expected stderr)
BAD = [
    ("diverging learning rate", ("tests/test_grpo_moe.py", "--optimizer", "sgd", "--lr", "5"), {},
     "FAILED: expert 0: loss"),
    ("fewer GPUs than NUM_GPUS", ("tests/test_sft_dense.py",), {"CUDA_VISIBLE_DEVICES": "0,1"},
     "FAILED: test needs 4 GPUs but CUDA_VISIBLE_DEVICES gives 2 (0,1)"),
    ("fewer GPUs than the default 8", ("tests/test_dpo_short.py",), {"CUDA_VISIBLE_DEVICES": "0"},
     "FAILED: test needs 8 GPUs but CUDA_VISIBLE_DEVICES gives 1 (0)"),
    ("a switch that is not 0 or 1", ("tests/test_fp8_rollout.py",), {"USE_FP8_ROLLOUT": "yes"},
     "FAILED: USE_FP8_ROLLOUT='yes': expected '0' or '1'"),
]


@pytest.fixture(scope="module")
def outcomes() -> dict[str, subprocess.CompletedProcess]:
    """Every workflow entry and every bad case, run side by side (each takes a second or two; the
    tests that read these are marked slow)."""
    jobs = {r.name: (r.argv, _environ(**r.env)) for r in RUNS}
    jobs.update({name: (argv, _environ(**extra)) for name, argv, extra, _ in BAD})
    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = {name: pool.submit(_python, argv, env) for name, (argv, env) in jobs.items()}
        return {name: f.result() for name, f in futures.items()}


def test_every_template_entry_names_a_test_file_with_prepare_execute_and_a_main_block():
    assert len(RUNS) >= 7
    for run in RUNS:
        path = TEMPLATERL / run.test_file
        assert path.is_file(), f"{run.job}: {run.test_file} does not exist"
        tree = ast.parse(path.read_text())
        functions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
        assert {"prepare", "execute"} <= functions, run.test_file
        assert 'if __name__ == "__main__":' in path.read_text(), run.test_file


def test_every_test_file_is_in_the_template_and_all_but_one_declare_num_gpus():
    files = sorted(p.relative_to(TEMPLATERL).as_posix() for p in (TEMPLATERL / "tests").glob("test_*.py"))
    assert len(files) >= 5
    assert files == sorted({r.test_file for r in RUNS})
    undeclared = [f for f in files if num_gpus_declared(TEMPLATERL / f) is None]
    assert undeclared == ["tests/test_dpo_short.py"]
    for run in RUNS:  # an entry's num_gpus, where given, agrees with the file's own NUM_GPUS
        if "num_gpus" in run.info:
            assert run.info["num_gpus"] == num_gpus_declared(TEMPLATERL / run.test_file), run.name


def test_the_template_has_a_test_args_matrix_and_an_env_key_matrix():
    by_file: dict[str, list[Run]] = {}
    for run in RUNS:
        by_file.setdefault(run.test_file, []).append(run)
    args_matrix = [f for f, rs in by_file.items() if len({r.info.get("test_args") for r in rs}) > 1]
    env_matrix = [f for f, rs in by_file.items() if len({r.info.get("use_fp8_rollout") for r in rs}) > 1]
    assert args_matrix == ["tests/test_grpo_moe.py"]
    assert env_matrix == ["tests/test_fp8_rollout.py"]
    assert {r.label for r in RUNS} == {"fsdp", "megatron"}


def test_the_rendered_workflow_matches_the_template():
    done = _python((str(WORKFLOWS / "generate_github_workflows.py"), "--check"), _environ())
    assert done.returncode == 0, done.stderr


@pytest.mark.slow
@pytest.mark.parametrize("run", RUNS, ids=lambda r: r.name)
def test_each_entry_runs_standalone_with_its_workflow_env_and_args_and_exits_zero(outcomes, run):
    done = outcomes[run.name]
    assert done.returncode == 0, done.stdout + done.stderr
    assert "FAILED" not in done.stderr
    assert re.search(r"^ok: ", done.stdout, re.M), done.stdout
    gpus = run.info.get("num_gpus") or num_gpus_declared(TEMPLATERL / run.test_file) or 8
    assert f"world size {gpus}" in done.stdout


@pytest.mark.slow
def test_the_env_keys_of_an_entry_change_what_its_test_does(outcomes):
    fp8 = {r.env["USE_FP8_ROLLOUT"]: outcomes[r.name].stdout for r in RUNS if r.test_file.endswith("fp8_rollout.py")}
    assert "rollout weights: fp8" in fp8["1"] and "fp8 rollout weights differ" in fp8["1"]
    assert "rollout weights: bf16" in fp8["0"] and "fp8" not in fp8["0"].replace("bf16", "")
    evals = {r.info["test_file"]: (r.env["ENABLE_EVAL"], outcomes[r.name].stdout) for r in RUNS if "enable_eval" in r.info}
    assert evals["test_sft_dense.py"][0] == "1" and "held-out loss" in evals["test_sft_dense.py"][1]
    assert evals["test_dpo_short.py"][0] == "0" and "held-out" not in evals["test_dpo_short.py"][1]


@pytest.mark.slow
def test_the_test_args_of_an_entry_reach_its_test(outcomes):
    grpo = [r for r in RUNS if r.test_file.endswith("grpo_moe.py")]
    assert {r.argv[1:] for r in grpo} == {("--optimizer", "adam"), ("--optimizer", "sgd", "--lr", "0.05")}
    for r in grpo:
        assert f"({r.argv[2]}, lr " in outcomes[r.name].stdout


@pytest.mark.slow
@pytest.mark.parametrize("name, argv, extra, message", BAD, ids=[b[0] for b in BAD])
def test_a_bad_result_or_setup_exits_non_zero_and_says_why(outcomes, name, argv, extra, message):
    done = outcomes[name]
    assert done.returncode == 1, done.stdout + done.stderr
    assert message in done.stderr
