"""Registry dialects read from the framework's own registry module, one fixture per dialect."""

from __future__ import annotations

from pipelines.core.catalog import load_catalog
from pipelines.core.catalog.dialect import SGLANG, M, derive
from pipelines.core.select import Selection, select
from pipelines.core.specs import RepoSpec

M_MODULE = '''
def register_cuda_ci(est_time: int, suite: str, *, labels: list[str], nightly: bool = False, disabled=None):
    """GPU run."""


def register_cpu_ci(est_time: int, suite: str, *, labels=None, nightly: bool = False, disabled=None):
    """CPU run."""
'''

SG_ARGS = "(est_time, suite=None, nightly=False, disabled=None, *, stage=None, runner_config=None)"
SG_MODULE = "".join(f"def register_{b}_ci{SG_ARGS}:\n    pass\n\n\n" for b in ("cpu", "cuda", "amd", "npu"))
SG_HEADER = "from pkg.test.ci.ci_register import register_amd_ci, register_cpu_ci, register_cuda_ci, register_npu_ci\n"


def sglang_repo(tree, files: dict[str, str]):
    return tree({"python/pkg/test/ci/ci_register.py": SG_MODULE, **files})


def test_an_m_style_module_gives_its_functions_and_requires_labels_where_it_has_no_default():
    dialect, notes = derive("fw/ci.py", M_MODULE)
    assert notes == []
    assert dialect.name == "m" and dialect.backends == {"register_cpu_ci": "cpu", "register_cuda_ci": "cuda"}
    assert "labels" in dialect.signature("register_cuda_ci").required
    assert "labels" not in dialect.signature("register_cpu_ci").required
    assert dialect.source == "fw/ci.py, m profile"


def test_an_sglang_style_module_gives_every_backend_no_labels_and_the_sglang_runner_rules():
    dialect, _ = derive("python/pkg/test/ci/ci_register.py", SG_MODULE)
    assert dialect.name == "sglang"
    assert sorted(dialect.backends.values()) == ["amd", "cpu", "cuda", "npu"]
    assert all("labels" not in s.keywords for s in dialect.functions)
    assert (dialect.discovery, dialect.exclude, dialect.roots) == (("*.py",), ("conftest.py", "__init__.py"), ("test/registered",))
    assert (dialect.est_time, dialect.suites, dialect.nightly) == ("non-negative", "free", "exclusive")


def test_an_est_time_check_in_the_module_body_sets_the_bound():
    source = SG_MODULE.replace("def register_cuda_ci" + SG_ARGS + ":\n    pass",
                               "def register_cuda_ci" + SG_ARGS + ":\n    assert est_time > 0")
    dialect, _ = derive("ci.py", source)
    assert dialect.est_time == "positive"


OLD_SG_MODULE = "".join(
    f"def register_{b}_ci(est_time: float, suite: str, nightly: bool = False, disabled: Optional[str] = None):\n"
    "    return None\n" for b in ("cuda", "amd"))


def test_an_sglang_module_with_the_older_signature_without_stage_is_read_with_the_sglang_rules(tree):
    """SGLang before stage=/runner_config=: no labels, so not framework M (whose GPU functions always take labels)."""
    header = "from sglang.test.ci.ci_register import register_cuda_ci\n"
    repo = tree({"python/sglang/test/ci/ci_register.py": "from typing import Optional\n" + OLD_SG_MODULE,
                 "test/registered/test_srt.py": header + 'register_cuda_ci(est_time=120, suite="stage-a-test-1")\n',
                 "test/registered/test_nightly.py": header + 'register_cuda_ci(300, "nightly-1-gpu", nightly=True)\n',
                 "test/registered/kernels/bench_moe.py": header + 'register_cuda_ci(30, "stage-b-test-large-2-gpu")\n'})
    cat = load_catalog(repo)
    assert cat.problems == ()
    assert any(n.startswith("dialect sglang (python/sglang/test/ci/ci_register.py, sglang profile)") for n in cat.assumptions)
    assert "roots: test/registered (the sglang runner's; set `roots:` in assets/repos.yaml to change)" in cat.assumptions
    assert sorted((t.id, t.suite, t.gpus) for t in cat.tests) == [
        ("test/registered/kernels/bench_moe.py", "stage-b-test-large-2-gpu", 2),
        ("test/registered/test_nightly.py", "nightly-1-gpu", 1),
        ("test/registered/test_srt.py", "stage-a-test-1", 1)]
    assert [t.path for t in select(cat.tests, Selection(cadence="nightly"))] == ["test/registered/test_nightly.py"]


def test_a_module_defining_a_backend_m_lacks_is_the_sglang_family_even_when_its_signatures_say_nothing():
    dialect, _ = derive("ci.py", "def register_cuda_ci(*args, **kwargs):\n    pass\n"
                                 "def register_npu_ci(*args, **kwargs):\n    pass\n")
    assert dialect.name == "sglang"
    dialect, _ = derive("ci.py", "def register_cuda_ci(*args, **kwargs):\n    pass\n")
    assert dialect.name == "m"


def test_an_sglang_signature_beside_a_star_args_wrapper_is_still_the_sglang_family():
    """`stage=`/`runner_config=` are SGLang's alone: a `*args, **kwargs` wrapper beside them changes nothing."""
    source = (f"def register_cuda_ci{SG_ARGS}:\n    pass\n\n\n"
              "def register_cpu_ci(*args, **kwargs):\n    return register_cuda_ci(*args, **kwargs)\n")
    dialect, notes = derive("ci_register.py", source)
    assert dialect.name == "sglang"
    assert notes == ["ci_register.py: register_cpu_ci takes *args/**kwargs, so its signature cannot say which arguments "
                     "are allowed; checking it with the built-in profile sglang's arguments (set `dialect:` in assets/repos.yaml "
                     "to pick the profile)"]


def test_rules_differ_so_cached_results_of_one_dialect_never_serve_another():
    assert M.digest() != SGLANG.digest()


def test_the_sglang_family_loads_every_backend_stage_form_legacy_suites_and_bench_files(tree):
    repo = sglang_repo(tree, {
        "test/registered/test_a.py": SG_HEADER + (
            'register_cuda_ci(est_time=90, stage="stage-b", runner_config="1-gpu-large")\n'
            'register_amd_ci(12.5, "nightly-amd-1-gpu", nightly=True)\n'
            'register_npu_ci(0, "per-commit-npu")\n'),
        "test/registered/kernels/bench_attn.py": SG_HEADER + 'register_cuda_ci(30, stage="stage-c", runner_config="8-gpu-b200")\n',
        "test/registered/stress/run_stress.py": SG_HEADER + 'register_cuda_ci(600, suite="stress", nightly=True)\n',
        "test/registered/conftest.py": "import pytest\n",
        "test/registered/__init__.py": "",
        "test/unit/test_not_registered_root.py": "x = 1\n",
    })
    cat = load_catalog(repo)
    assert cat.problems == ()
    got = {(t.id, t.backend, t.suite, t.gpus, t.hardware, t.est_time, t.labels) for t in cat.tests}
    assert got == {
        ("test/registered/test_a.py::cuda-stage-b-test-1-gpu-large", "cuda", "stage-b-test-1-gpu-large", 1, "1-gpu-large", 90, ()),
        ("test/registered/test_a.py::amd-nightly-amd-1-gpu", "amd", "nightly-amd-1-gpu", 1, "amd", 13, ()),
        ("test/registered/test_a.py::npu-per-commit-npu", "npu", "per-commit-npu", 1, "npu", 0, ()),
        ("test/registered/kernels/bench_attn.py", "cuda", "stage-c-test-8-gpu-b200", 8, "b200", 30, ()),
        ("test/registered/stress/run_stress.py", "cuda", "stress", 1, "", 600, ()),
    }
    assert ("suite(s) per-commit-npu, stress name no GPU count (-<N>-gpu); their GPU tests are planned on 1 GPU"
            in cat.assumptions)


def test_sglang_rules_reject_what_its_runner_rejects_and_quote_only_its_own_signature(tree):
    repo = sglang_repo(tree, {
        "test/registered/test_labels.py": SG_HEADER + 'register_cuda_ci(60, "nightly-1-gpu", labels=["x"])\n',
        "test/registered/test_negative.py": SG_HEADER + 'register_cuda_ci(-1, "nightly-1-gpu")\n',
        "test/registered/test_ok.py": SG_HEADER + 'register_cuda_ci(60, "nightly-1-gpu")\n',
        "test/registered/helper.py": "def helper():\n    return 1\n",
    })
    problems = [str(p) for p in load_catalog(repo).problems]
    assert problems == [
        "test/registered/helper.py:1: registration: no register_amd_ci/register_cpu_ci/register_cuda_ci/"
        'register_npu_ci call at module level; register the file e.g. register_cuda_ci(60, "nightly-1-gpu", ...) '
        "as other files here do",
        "test/registered/test_labels.py:2: labels: unknown argument to register_cuda_ci; known: disabled, est_time, "
        "nightly, runner_config, stage, suite; remove it or fix the spelling",
        "test/registered/test_negative.py:2: est_time: must be 0 or more, got -1; set the expected run time in seconds",
    ]
    assert not any("megatron" in p or "stage-c-4-gpu-h200" in p for p in problems)


def test_an_unregistered_sglang_file_is_shown_a_registration_in_the_form_the_repo_writes_it(tree):
    """`est_time=120.5, stage=..., runner_config=...` is shown as 120.5 with the stage= pair, not as the rounded
    121 with the joined suite name positional; a call naming no suite is shown the same."""
    repo = sglang_repo(tree, {
        "test/registered/test_gen.py": SG_HEADER
        + 'register_cuda_ci(est_time=120.5, stage="stage-b", runner_config="1-gpu-large")\n',
        "test/registered/helper.py": "def helper():\n    return 1\n",
        "test/registered/test_missing.py": SG_HEADER + "register_cuda_ci(30)\n"})
    example = 'e.g. register_cuda_ci(120.5, stage="stage-b", runner_config="1-gpu-large", ...) as other files here do'
    assert [p.message.endswith(example) for p in load_catalog(repo).problems] == [True, True]


def test_an_sglang_call_without_a_suite_is_told_the_suite_form_other_files_here_use(tree):
    """Never framework M's `<stage>-<N>-gpu-<hardware>`: a registration of the repo when there is one, else
    the SGLang family's own forms."""
    missing = SG_HEADER + "register_cuda_ci(60)\n"
    repo = sglang_repo(tree, {"test/registered/test_missing.py": missing, "test/registered/test_ok.py": SG_HEADER
                              + 'register_cuda_ci(300, stage="stage-b", runner_config="1-gpu-large")\n'})
    (problem,) = load_catalog(repo).problems
    assert str(problem) == (
        "test/registered/test_missing.py:2: suite: required: the suite name (or stage= with runner_config=); "
        'e.g. register_cuda_ci(300, stage="stage-b", runner_config="1-gpu-large", ...) as other files here do')
    legacy = sglang_repo(tree, {"test/registered/test_ok.py": SG_HEADER + 'register_cuda_ci(60, "nightly-1-gpu")\n'})
    (problem,) = load_catalog(legacy).problems
    assert problem.message.endswith('; e.g. register_cuda_ci(60, "nightly-1-gpu", ...) as other files here do')
    (legacy / "test/registered/test_ok.py").unlink()
    (problem,) = load_catalog(legacy).problems
    assert str(problem) == (
        "test/registered/test_missing.py:2: suite: required: the suite name (or stage= with runner_config=); give "
        'stage= and runner_config= (the suite is <stage>-test-<runner_config>), e.g. register_cuda_ci(60, '
        'stage="stage-b", runner_config="1-gpu-large"), or a suite as the second argument, e.g. '
        'register_cuda_ci(60, "nightly-1-gpu")')
    assert "<N>-gpu-<hardware>" not in str(problem)


def test_m_rules_still_require_labels_on_gpu_calls_without_quoting_a_label(tree):
    repo = tree({"fw/ci.py": M_MODULE, "tests/test_a.py": 'register_cuda_ci(60, "stage-c-4-gpu-h200")\n'})
    (problem,) = load_catalog(repo).problems
    assert str(problem) == ("tests/test_a.py:1: labels: required for GPU tests by this framework's register function: "
                            "a list of label strings; add labels=[\"<label>\"]")


def test_a_positional_argument_beyond_the_signature_names_the_framework_signature(tree):
    repo = sglang_repo(tree, {"test/registered/test_a.py": SG_HEADER + 'register_cuda_ci(60, "s-1-gpu", False, None, 1)\n'})
    (problem,) = load_catalog(repo).problems
    assert str(problem) == (
        "test/registered/test_a.py:2: register_cuda_ci: only est_time, suite, nightly, disabled may be positional, got 5 "
        "positional arguments; pass the others as keywords: register_cuda_ci(est_time, suite=..., nightly=..., "
        "disabled=..., *, stage=..., runner_config=...)")


def test_in_the_sglang_family_the_nightly_cadence_runs_exactly_the_nightly_registrations(tree):
    repo = sglang_repo(tree, {"test/registered/test_a.py": SG_HEADER + (
        'register_cuda_ci(60, "per-commit-1-gpu")\nregister_cuda_ci(60, "nightly-1-gpu", nightly=True)\n')})
    tests = load_catalog(repo).tests
    assert [t.suite for t in select(tests, Selection(cadence="nightly"))] == ["nightly-1-gpu"]
    assert [t.suite for t in select(tests, Selection(cadence="pr"))] == ["per-commit-1-gpu"]
    assert len(select(tests, Selection(cadence="weekly"))) == 2


def test_in_framework_m_nightly_adds_a_test_to_the_nightly_cadence_without_removing_the_others(tree):
    repo = tree({"fw/ci.py": M_MODULE, "tests/test_a.py": (
        'register_cuda_ci(60, "stage-a-1-gpu-h200", labels=["x"])\n'
        'register_cuda_ci(60, "stage-b-1-gpu-h200", labels=["x"], nightly=True)\n')})
    tests = load_catalog(repo).tests
    assert len(select(tests, Selection(cadence="nightly"))) == 2
    assert [t.suite for t in select(tests, Selection(cadence="pr"))] == ["stage-a-1-gpu-h200"]


def test_the_catalog_says_which_module_gave_the_rules(tree):
    repo = sglang_repo(tree, {"test/registered/test_a.py": SG_HEADER + 'register_cuda_ci(60, "nightly-1-gpu")\n'})
    notes = load_catalog(repo).assumptions
    assert any(n.startswith("dialect sglang (python/pkg/test/ci/ci_register.py, sglang profile): register_amd_ci, "
                            "register_cpu_ci, register_cuda_ci, register_npu_ci; no labels; collects *.py except "
                            "conftest.py, __init__.py; est_time >= 0") for n in notes)
    assert "roots: test/registered (the sglang runner's; set `roots:` in assets/repos.yaml to change)" in notes


def test_assets_may_name_the_profile_when_the_framework_has_no_registry_module(tree):
    repo = tree({"test/registered/bench_x.py": 'register_cuda_ci(0, "stress")\n'})
    cat = load_catalog(repo, RepoSpec(name="fw", path=repo, dialect="sglang"))
    assert cat.problems == ()
    assert [(t.id, t.est_time, t.gpus, t.nightly_rule) for t in cat.tests] == [("test/registered/bench_x.py", 0, 1, "exclusive")]


def test_the_implicit_cpu_suite_is_the_runner_s_name_and_configurable(tree):
    repo = tree({"tests/fast/test_unit.py": "x = 1\n"})
    spec = RepoSpec(name="fw", path=repo, implicit_cpu_dirs=("tests/fast",))
    assert [t.suite for t in load_catalog(repo, spec).tests] == ["stage-a-cpu"]
    spec = RepoSpec(name="fw", path=repo, implicit_cpu_dirs=("tests/fast",), implicit_cpu_suite="unit-cpu")
    assert [t.suite for t in load_catalog(repo, spec).tests] == ["unit-cpu"]


def test_a_vendored_copy_of_another_framework_s_registry_module_is_not_the_repo_s(tree):
    repo = sglang_repo(tree, {
        "venv/lib/site-packages/otherfw/ci.py": M_MODULE,
        "test/registered/test_a.py": SG_HEADER + 'register_cuda_ci(60, "nightly-1-gpu")\n',
    })
    cat = load_catalog(repo)
    assert cat.problems == () and cat.tests[0].nightly_rule == "exclusive"
    assert not any("several files" in n for n in cat.assumptions)


def test_two_registry_modules_use_the_richer_one_and_say_so_even_to_a_configured_repo(tree):
    repo = sglang_repo(tree, {"tools/old_ci.py": "def register_cuda_ci(est_time, suite):\n    pass\n",
                              "test/registered/test_a.py": SG_HEADER + 'register_cuda_ci(60, "nightly-1-gpu")\n'})
    cat = load_catalog(repo, RepoSpec(name="fw", path=repo, roots=("test/registered",)))
    assert cat.problems == ()
    assert ("several files define register_*_ci (python/pkg/test/ci/ci_register.py, tools/old_ci.py); the rules come "
            "from python/pkg/test/ci/ci_register.py (1 test file imports the register functions from it; set "
            "`registry_module:` in assets/repos.yaml to name another)") in cat.assumptions


def test_a_vendored_sglang_checkout_does_not_take_over_the_repo_s_own_m_registry(tree):
    repo = tree({
        "3rdparty/sglang/python/sglang/test/ci/ci_register.py": SG_MODULE,
        "fwm/ci/registry.py": M_MODULE,
        "tests/e2e/test_a.py": ('from fwm.ci.registry import register_cuda_ci\n'
                                'register_cuda_ci(600, "stage-c-4-gpu-h200", labels=["megatron"])\n'),
    })
    cat = load_catalog(repo)
    assert cat.problems == ()
    assert [(t.path, t.gpus) for t in cat.tests] == [("tests/e2e/test_a.py", 4)]
    assert any("ignored the registry module(s) of vendored checkouts (3rdparty/sglang/python/sglang/test/ci/"
               "ci_register.py)" in n for n in cat.assumptions)
    assert any(n.startswith("dialect m (fwm/ci/registry.py") for n in cat.assumptions)


def test_a_registry_module_saved_with_a_utf8_bom_still_gives_the_dialect(tree):
    repo = tree({"tests/e2e/test_a.py": ('from fw.ci import register_cuda_ci\n'
                                         'register_cuda_ci(600, "stage-c-4-gpu-h200", labels=["megatron"])\n')})
    (repo / "fw").mkdir()
    (repo / "fw/ci.py").write_bytes(b"\xef\xbb\xbf" + M_MODULE.encode())
    cat = load_catalog(repo)
    assert cat.problems == () and any(n.startswith("dialect m (fw/ci.py, m profile)") for n in cat.assumptions)
    assert not any("cannot be parsed" in n for n in cat.assumptions)


def test_every_parameter_the_signature_leaves_without_a_default_must_be_given(tree):
    module = ("def register_cuda_ci(est_time, suite, *, labels, hardware, nightly=False, disabled=None):\n    pass\n"
              "def register_cpu_ci(est_time, suite, *, labels=None, nightly=False, disabled=None):\n    pass\n")
    header = "from fw.ci import register_cuda_ci\n"
    repo = tree({"fw/ci.py": module,
                 "tests/test_hw.py": header + 'register_cuda_ci(600, "stage-c-4-gpu", labels=["a"], hardware=["h200"])\n',
                 "tests/test_nohw.py": header + 'register_cuda_ci(600, "stage-c-8-gpu-h200", labels=["a"])\n'})
    cat = load_catalog(repo)
    assert [t.id for t in cat.tests] == ["tests/test_hw.py"]
    assert [str(p) for p in cat.problems] == [
        "tests/test_nohw.py:2: hardware: required by this framework's register_cuda_ci (no default in its signature): "
        "a list of hardware names; add hardware=[\"<gpu type>\"]"]


def test_a_register_function_taking_star_args_is_checked_with_the_built_in_profile_and_said_once(tree):
    repo = tree({"fw/ci.py": "def register_cuda_ci(*args, **kwargs):\n    pass\n",
                 "tests/test_a.py": ('from fw.ci import register_cuda_ci\n'
                                     'register_cuda_ci(600, "stage-c-2-gpu-h200", labels=["x"])\n'),
                 "tests/test_b.py": ('from fw.ci import register_cuda_ci\n'
                                     'register_cuda_ci(600, "stage-c-2-gpu-h200", labels=["x"], owner="me")\n')})
    cat = load_catalog(repo)
    assert [t.id for t in cat.tests] == ["tests/test_a.py"]
    assert [(p.path, p.field) for p in cat.problems] == [("tests/test_b.py", "owner")]  # M's unknown keyword
    said = [n for n in cat.assumptions if "*args/**kwargs" in n]
    assert said == ["fw/ci.py: register_cuda_ci takes *args/**kwargs, so its signature cannot say which arguments are "
                    "allowed; checking it with the built-in profile m's arguments (set `dialect:` in assets/repos.yaml "
                    "to pick the profile)"]
    configured = load_catalog(repo, RepoSpec(name="fw", path=repo))
    assert said[0] in configured.assumptions


def test_sglang_device_counts_read_npu_and_xpu_suites_and_amd_hardware_is_named_one_way(tree):
    repo = sglang_repo(tree, {
        "test/registered/test_npu.py": SG_HEADER + 'register_npu_ci(400, "stage-c-test-2-npu-a3")\n',
        "test/registered/test_npu_plain.py": SG_HEADER + 'register_npu_ci(400, "nightly-4-npu")\n',
        "test/registered/test_amd_stage.py": SG_HEADER + 'register_amd_ci(200, "stage-b-test-1-gpu-amd")\n',
        "test/registered/test_amd_legacy.py": SG_HEADER + 'register_amd_ci(300, "nightly-amd-2-gpu", nightly=True)\n',
        "test/registered/test_amd_typed.py": SG_HEADER + 'register_amd_ci(300, "stage-c-test-8-gpu-mi300x")\n',
    })
    cat = load_catalog(repo)
    assert cat.problems == ()
    assert {t.path.rpartition("/")[2]: (t.gpus, t.hardware) for t in cat.tests} == {
        "test_npu.py": (2, "a3"), "test_npu_plain.py": (4, "npu"), "test_amd_stage.py": (1, "amd"),
        "test_amd_legacy.py": (2, "amd"), "test_amd_typed.py": (8, "mi300x")}
    assert not any("name no GPU count" in n for n in cat.assumptions)


def test_the_catalog_says_where_the_runner_collects_tests_also_when_it_comes_from_the_cache(tree, tmp_path):
    from pipelines.core.model import Discovery

    repo = sglang_repo(tree, {"test/registered/test_a.py": SG_HEADER + 'register_cuda_ci(60, "nightly-1-gpu")\n'})
    want = Discovery(("test/registered",), ("*.py",), ("conftest.py", "__init__.py"))
    assert load_catalog(repo).discovery == want
    for _ in range(2):  # read, then kept whole by the cache
        assert load_catalog(repo, cache_dir=tmp_path / "cache").discovery == want
    m = tree({"fw/ci.py": M_MODULE, "fw/test_only_helpers.py": "x = 1\n"})
    assert load_catalog(m, roots=("tests", "more")).discovery.roots == ("tests", "more")
