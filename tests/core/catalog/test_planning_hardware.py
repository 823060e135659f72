"""Runner configs without a GPU type reach a pool through aliases; unplanned tests are summarized per hardware."""

from __future__ import annotations

from pathlib import Path

from pipelines.cli.plan import hardware_summary
from pipelines.core.catalog import load_catalog
from pipelines.core.plan import make_plan, pool_for
from pipelines.core.specs import PoolSpec
from tests.conftest import make_test

SGLANGISH = Path(__file__).resolve().parents[3] / "examples" / "sglangish"
H200 = PoolSpec(name="h200", nodes=1, gpus_per_node=8, hardware=("h200",))
LARGE = PoolSpec(name="big", nodes=1, gpus_per_node=8, hardware=("1-gpu-large",))


def sized(hw: str, backend: str = "cuda"):
    return make_test(id=f"t-{hw}", suite=f"stage-b-test-{hw}", hardware=hw, gpus=1, backend=backend)


def test_a_runner_config_listed_as_a_pool_alias_runs_on_that_pool():
    assert pool_for(sized("1-gpu-large"), [H200, LARGE]) is LARGE


def test_a_runner_config_without_a_gpu_type_and_no_alias_runs_on_the_default_pool():
    assert pool_for(sized("1-gpu-large"), [H200]) is H200


def test_a_gpu_type_no_pool_runs_stays_unplanned_and_so_does_another_vendor_s_untyped_config():
    assert pool_for(sized("b200"), [H200]) is None
    assert pool_for(sized("1-gpu-amd", backend="amd"), [H200]) is None


def test_the_example_catalog_plans_its_untyped_configs_and_summarizes_the_rest_per_hardware():
    cat = load_catalog(SGLANGISH)
    tests = [t for t in cat.tests if t.enabled]
    plan = make_plan(tests, [H200], timeout_floor_s=60, improve=False)
    by_id = {t.id: t for t in cat.tests}
    assert "test/registered/basic/test_generate.py::cuda-stage-b-test-1-gpu-large" not in plan.unplanned
    assert "test/registered/multi/test_tp2_consistency.py::cuda-stage-c-test-8-gpu-b200" in plan.unplanned
    lines = hardware_summary(plan, [H200], by_id)
    assert lines[0] == f"\n  unplanned: {len(plan.unplanned)} test(s) need hardware no pool runs:"
    b200 = next(line for line in lines if line.lstrip().startswith("b200 "))
    assert b200.split()[:5] == ["b200", "1", "test(s),", "up", "to"]
    assert ("add a pool with `hardware: [b200]` in assets/cluster.yaml (or --pool b200=NODESxGPUS), or list b200 "
            "as an alias of pool h200") in b200
    npu = next(line for line in lines if line.lstrip().startswith("a2 "))  # per-commit-1-npu-a2
    assert npu.endswith("(or --pool a2=NODESxGPUS)"), "another vendor's hardware is never an alias of an NVIDIA pool"
    assert ("\n  1 test(s) of runner config 1-gpu-large (no GPU type) planned on pool h200, the first whose nodes "
            "hold them; list 1-gpu-large under another pool's `hardware:` in assets/cluster.yaml to move them") in lines


def test_a_suite_with_words_after_the_gpu_type_runs_on_that_gpu_type(tree):
    """`nightly-8-gpu-h200-basic` is an h200 suite; the words after the chip qualify it, they are no hardware."""
    sg = "".join(f"def register_{b}_ci(est_time, suite=None, nightly=False, disabled=None, *, stage=None, "
                 "runner_config=None):\n    pass\n" for b in ("cpu", "cuda", "amd"))
    suites = {"nightly-8-gpu-h200": "cuda", "nightly-8-gpu-h200-basic": "cuda", "nightly-4-gpu-gb300-kimi-k25": "cuda",
              "nightly-amd-2-gpu-mi35x-deepseek-r1-mxfp4-tp2": "amd", "stage-b-test-1-gpu-large": "cuda"}
    files = {f"test/registered/test_{i}.py": f'from sgx.test.ci.ci_register import register_{b}_ci\n'
                                             f'register_{b}_ci(100, "{s}", nightly=True)\n'
             for i, (s, b) in enumerate(suites.items())}
    cat = load_catalog(tree({"python/sgx/test/ci/ci_register.py": sg, **files}))
    assert [t.hardware for t in cat.tests] == ["h200", "h200", "gb300", "mi35x", "1-gpu-large"]
    assert make_plan([t for t in cat.tests if t.hardware == "h200"], [H200], timeout_floor_s=60).unplanned == ()


def test_a_framework_m_suite_with_a_qualifier_keeps_its_gpu_type_and_agrees_with_hardware(tree):
    m = "def register_cuda_ci(est_time, suite, *, labels, nightly=False, disabled=None, hardware=None):\n    pass\n"
    repo = tree({"fw/ci.py": m, "tests/test_fp8.py": (
        'register_cuda_ci(60, "stage-c-4-gpu-h200-fp8", labels=["x"])\n'
        'register_cuda_ci(60, "stage-c-8-gpu-h200-fp8", labels=["x"], hardware=["h200"])\n')})
    cat = load_catalog(repo)
    assert cat.problems == () and [t.hardware for t in cat.tests] == ["h200", "h200"]


def test_a_hardware_entry_naming_the_whole_suite_tail_runs_on_the_chip_and_is_one_test(tree):
    """`h200` and `4-gpu-h200-fp8` in `stage-c-4-gpu-h200-fp8` both name the h200: one test on the pool that
    runs h200 (the fp8 word qualifies the suite), and a problem for the repeat, never a second test on `h200-fp8`."""
    m = "def register_cuda_ci(est_time, suite, *, labels, hardware, nightly=False, disabled=None):\n    pass\n"
    cat = load_catalog(tree({"tests/ci/ci_utils.py": m, "tests/e2e/test_fp8.py": (
        "from tests.ci.ci_utils import register_cuda_ci\n"
        'register_cuda_ci(1200, "stage-c-4-gpu-h200-fp8", labels=["fp8"], hardware=["h200", "4-gpu-h200-fp8"])\n'
        'register_cuda_ci(600, "stage-d-2-gpu-h200", labels=["x"], hardware=["2-gpu-h200", "h200"])\n')}))
    assert sorted((t.id, t.gpus, t.hardware) for t in cat.tests) == [
        ("tests/e2e/test_fp8.py::cuda-stage-c-4-gpu-h200-fp8", 4, "h200"),
        ("tests/e2e/test_fp8.py::cuda-stage-d-2-gpu-h200", 2, "h200")]
    assert [str(p) for p in cat.problems] == [
        "tests/e2e/test_fp8.py:2: hardware: ['h200', '4-gpu-h200-fp8'] names the same hardware twice ('h200' and "
        "'4-gpu-h200-fp8' both name 4 GPUs of 'h200'); list it once",
        "tests/e2e/test_fp8.py:3: hardware: ['2-gpu-h200', 'h200'] names the same hardware twice ('2-gpu-h200' and "
        "'h200' both name 2 GPUs of 'h200'); list it once"]
    assert make_plan(list(cat.tests), [H200], timeout_floor_s=60).unplanned == ()


def test_a_chip_s_memory_or_form_factor_word_stays_part_of_its_hardware(tree):
    """`h100-80gb`, `a100-40g`, `h200-sxm` name a chip variant pools and history know; `fp8` only qualifies."""
    m = "def register_cuda_ci(est_time, suite, *, labels, nightly=False, disabled=None, hardware=None):\n    pass\n"
    calls = ['"stage-c-8-gpu-h100-80gb", labels=["x"], hardware=["8-gpu-h100-80gb"]',
             '"stage-c-8-gpu-a100-40g", labels=["x"]',
             '"stage-c-4-gpu-h200-sxm-fp8", labels=["x"]',
             '"stage-c-8-gpu-gb200-nvl72", labels=["x"]',
             '"stage-c-8-gpu-h100-80gb-perf", labels=["x"], hardware=["h100"]',
             '"stage-c-4-gpu-h200-fp8", labels=["x"], hardware=["4-gpu-h200-fp8"]',
             '"stage-c-4-gpu-h200-basic", labels=["x"], hardware=["h200-fp8"]']
    files = {f"tests/test_{i}.py": f"register_cuda_ci(60, {c})\n" for i, c in enumerate(calls)}
    cat = load_catalog(tree({"fw/ci.py": m, **files}))
    assert [t.hardware for t in cat.tests] == ["h100-80gb", "a100-40g", "h200-sxm", "gb200-nvl72", "h100", "h200"]
    assert [(p.field, p.message) for p in cat.problems] == [("hardware",
        "'h200-fp8' is not 'h200', which the suite name 'stage-c-4-gpu-h200-basic' asks for; "
        "list only 'h200' or register the file once per suite")]
