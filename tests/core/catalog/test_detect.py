"""Finding the framework's own registry module, whatever the file is called."""

from __future__ import annotations

import shutil

import pytest

from pipelines.core.catalog import load_catalog
from pipelines.core.model import CatalogError
from pipelines.core.specs import RepoSpec, load_specs

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


SG_MODULE = "".join(f"def register_{b}_ci(est_time, suite=None, nightly=False, disabled=None, *, stage=None, "
                    "runner_config=None):\n    pass\n" for b in ("cpu", "cuda", "amd", "npu", "xpu"))
SG_CHECKOUT = "external/sglang/python/sglang/test/ci/ci_register.py"
GRPO = 'register_cuda_ci(600, "stage-c-4-gpu-h200", labels=["megatron"])\n'


def test_an_sglang_checkout_outside_the_vendored_folder_names_does_not_take_over_the_repos_own_rules(tree):
    """The SGLang copy defines more functions, but the tests import the register functions from fw/ci_register.py."""
    repo = tree({"fw/ci_register.py": M_MODULE, SG_CHECKOUT: SG_MODULE,
                 "tests/e2e/test_grpo.py": "from fw.ci_register import register_cuda_ci\n" + GRPO})
    cat = load_catalog(repo)
    assert [t.id for t in cat.tests] == ["tests/e2e/test_grpo.py"] and cat.problems == ()
    assert any(n.startswith("dialect m (fw/ci_register.py, m profile)") for n in cat.assumptions)
    assert any(n.startswith(f"several files define register_*_ci ({SG_CHECKOUT}, fw/ci_register.py); the rules come "
                            "from fw/ci_register.py (1 test file imports the register functions from it; set "
                            "`registry_module:`") for n in cat.assumptions)


def test_a_pinned_dialect_takes_the_module_that_fits_its_profile(tree):
    """No import says which module is the repo's (a conftest puts them in scope): `dialect: m` decides."""
    repo = tree({"fw/ci_register.py": M_MODULE, SG_CHECKOUT: SG_MODULE, "tests/e2e/test_grpo.py": GRPO})
    spec = RepoSpec(name="fw", path=repo, dialect="m")
    cat = load_catalog(repo, spec)
    assert [t.id for t in cat.tests] == ["tests/e2e/test_grpo.py"] and cat.problems == ()
    assert any("the rules come from fw/ci_register.py (the m profile pinned in assets/repos.yaml" in n
               for n in cat.assumptions)


def test_registry_module_in_repos_yaml_names_the_module_the_rules_come_from(tree):
    repo = tree({"fw/ci_register.py": M_MODULE, SG_CHECKOUT: SG_MODULE, "tests/e2e/test_grpo.py": GRPO})
    cat = load_catalog(repo, RepoSpec(name="fw", path=repo, registry_module="fw/ci_register.py"))
    assert [t.id for t in cat.tests] == ["tests/e2e/test_grpo.py"] and cat.problems == ()
    missing = load_catalog(repo, RepoSpec(name="fw", path=repo, registry_module="fw/gone.py"))
    assert any(n.startswith("registry_module fw/gone.py (assets/repos.yaml) cannot be read (") for n in missing.assumptions)


def test_registry_module_is_checked_like_the_other_keys_of_repos_yaml(project_root, tmp_path):
    d = tmp_path / "assets"
    shutil.copytree(project_root / "assets", d)
    (d / "repos.yaml").write_text("repos:\n  fw:\n    path: .\n    registry_module: ../x/ci.py\n")
    with pytest.raises(CatalogError) as exc:
        load_specs(d)
    assert ":4: repos.fw.registry_module: '../x/ci.py' is not the path of a .py file inside the repository" in str(exc.value)
    (d / "repos.yaml").write_text("repos:\n  fw:\n    path: .\n    registry_module: fw/ci_register.py\n")
    assert load_specs(d).repo("fw").registry_module == "fw/ci_register.py"
