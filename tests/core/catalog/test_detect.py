"""Finding the framework's own registry module, whatever the file is called."""

from __future__ import annotations

from pipelines.core.catalog import load_catalog

M_MODULE = '''
def register_cuda_ci(est_time, suite, *, labels, nightly=False, disabled=None):
    pass


def register_cpu_ci(est_time, suite, *, labels=None, nightly=False, disabled=None):
    pass
'''
HEADER = "from ci.test_utils import register_cuda_ci\n"


def test_a_registry_module_named_test_something_outside_the_test_roots_is_found_and_enforced(tree):
    repo = tree({"ci/test_utils.py": M_MODULE,
                 "tests/e2e/test_ok.py": HEADER + 'register_cuda_ci(600, "stage-c-4-gpu-h200", labels=["megatron"])\n',
                 "tests/e2e/test_nolabels.py": HEADER + 'register_cuda_ci(600, "stage-c-4-gpu-h200")\n'})
    cat = load_catalog(repo)
    assert not any("no module of the repo defines" in n for n in cat.assumptions)
    assert any(n.startswith("dialect m (ci/test_utils.py, m profile)") for n in cat.assumptions)
    assert [t.path for t in cat.tests] == ["tests/e2e/test_ok.py"]
    assert [(p.path, p.line, p.field) for p in cat.problems] == [("tests/e2e/test_nolabels.py", 2, "labels")]


def test_a_test_file_under_the_roots_is_not_taken_for_the_registry_module_when_a_real_one_exists(tree):
    fake = "def register_cuda_ci(est_time, suite):\n    pass\n"
    repo = tree({"fw/ci.py": M_MODULE, "tests/test_fake_registry.py": fake + 'register_cuda_ci(60, "stage-a-1-gpu")\n',
                 "tests/e2e/test_ok.py": HEADER + 'register_cuda_ci(600, "stage-c-4-gpu-h200", labels=["megatron"])\n'})
    cat = load_catalog(repo)
    assert any(n.startswith("dialect m (fw/ci.py, m profile)") for n in cat.assumptions)
    assert not any("several files define" in n for n in cat.assumptions)


def test_a_test_file_under_the_roots_that_is_the_only_one_defining_register_functions_gives_the_rules(tree):
    repo = tree({"tests/test_registry.py": M_MODULE,
                 "tests/e2e/test_ok.py": HEADER + 'register_cuda_ci(600, "stage-c-4-gpu-h200", labels=["megatron"])\n'})
    cat = load_catalog(repo)
    assert any(n.startswith("dialect m (tests/test_registry.py, m profile)") for n in cat.assumptions)


def test_an_unconfigured_framework_m_repo_takes_its_fast_folder_as_cpu_tests_of_est_time_1_and_says_so(tree):
    """M's runner: a file of its "fast" folder with no registration is a CPU test of est_time 1 (ci-facts)."""
    repo = tree({"fw/ci.py": M_MODULE,
                 "tests/fast/test_utils_cpu.py": "def test_x():\n    assert True\n",
                 "tests/e2e/test_ok.py": HEADER + 'register_cuda_ci(600, "stage-c-4-gpu-h200", labels=["megatron"])\n'})
    cat = load_catalog(repo)
    assert cat.problems == ()
    fast = next(t for t in cat.tests if t.path == "tests/fast/test_utils_cpu.py")
    assert (fast.backend, fast.est_time, fast.gpus) == ("cpu", 1, 0)
    assert any(n.startswith("implicit CPU folder(s) tests/fast: framework M's runner") for n in cat.assumptions)
    assert any("using defaults: implicit CPU folders tests/fast," in n for n in cat.assumptions)
