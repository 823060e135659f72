"""load_catalog on whole repositories: format detection, assumptions, stability, the example framework."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from pipelines.core import model
from pipelines.core.catalog import load_catalog
from pipelines.core.catalog.assemble import new_test
from pipelines.core.specs import RepoSpec, unconfigured_name

PROJECT = Path(__file__).resolve().parents[3]
EXAMPLE = PROJECT / "examples" / "minirl"

CUDA = 'register_cuda_ci(60, "stage-c-4-gpu-h200", labels=["megatron"])\n'
TEMPLATE = "<% set jobs = {'j': {'label': 'run-ci-j', 'tests': [{'test_file': 'test_a.py', 'num_gpus': 2}]}} %>\n"


def test_an_unconfigured_registry_repo_is_detected_and_the_assumptions_listed(tree):
    repo = tree({"tests/e2e/test_a.py": CUDA, "tests/e2e/test_b.py": CUDA.replace("60", "90")})
    cat = load_catalog(repo)
    assert [t.est_time for t in cat.tests] == [60, 90]
    assert cat.assumptions[:2] == (
        f"repo {repo} is not configured in assets/repos.yaml; using defaults: no implicit CPU folders, "
        "NUM_GPUS default 8, est_time default 1800 s for template tests, local tests run with the checkout "
        "importable (PYTHONPATH=<checkout> ahead of the shell's, as after the `pip install -e .` CI does first; "
        "pods rely on the framework's image having it installed); its estimates, calibration, quarantine "
        f"and nights go by the name {unconfigured_name(repo)} (the folder name and a digest of the path, so that no "
        "other checkout's state is read or overwritten)",
        "format: registry (2 of 2 test_*.py files under tests/e2e call register_*_ci)",
    )
    assert cat.assumptions[2].startswith("dialect m (built-in profile m): register_cuda_ci, register_rocm_ci, "
                                         "register_cpu_ci; labels required by register_cuda_ci, register_rocm_ci; "
                                         "collects test_*.py; est_time > 0")
    assert cat.assumptions[3:] == (
        "no module of the repo defines register_*_ci; assuming the built-in profile m (set `dialect:` in assets/repos.yaml)",
        "roots: tests/e2e (the m runner's; set `roots:` in assets/repos.yaml to change)",
    )


def test_an_unconfigured_template_repo_is_detected_from_its_workflow(tree):
    repo = tree({".github/workflows/ci.yml.j2": TEMPLATE, "tests/test_a.py": ""})
    cat = load_catalog(repo)
    assert [(t.id, t.gpus, t.fmt) for t in cat.tests] == [("tests/test_a.py", 2, "template")]
    assert cat.assumptions[1:3] == (
        "format: template (.github/workflows/ci.yml.j2 sets the test lists)",
        "template: .github/workflows/ci.yml.j2 (found under .github/workflows; set `template:` in assets/repos.yaml to pin it)",
    )
    assert cat.assumptions[3].startswith("1 template test(s) have no history: ") and len(cat.assumptions) == 4


def test_registry_calls_win_over_a_template_when_both_exist(tree):
    repo = tree({".github/workflows/ci.yml.j2": TEMPLATE, "tests/test_a.py": CUDA})
    cat = load_catalog(repo)
    assert cat.tests[0].fmt == "registry"


def test_a_repo_with_neither_format_says_so(tree):
    repo = tree({"tests/test_a.py": "x = 1\n"})
    cat = load_catalog(repo)
    assert cat.assumptions[1] == ("format: registry (no register_*_ci call in 1 test_*.py files under tests and no workflow template "
                                  "under .github/workflows; every file will be reported as unregistered)")
    assert [p.field for p in cat.problems] == ["registration"]


def test_a_missing_repo_is_a_problem_not_a_crash(tmp_path):
    cat = load_catalog(tmp_path / "nope", RepoSpec(name="x", path=tmp_path / "nope"))
    assert [str(p) for p in cat.problems] == [
        f"{tmp_path / 'nope'}:1: repo: is not a folder; check --repo or the path in assets/repos.yaml"]


def test_an_unknown_format_is_a_problem(tree):
    repo = tree({"tests/test_a.py": CUDA})
    cat = load_catalog(repo, RepoSpec(name="fw", path=repo, format="bazel"))
    assert [str(p) for p in cat.problems] == ["repos.fw:1: format: unknown format 'bazel'; use registry, template or auto"]


def test_ids_and_hashes_are_stable_across_loads_and_parallel_parsing(tree):
    repo = tree({f"tests/s{i % 3}/test_{i}.py": CUDA for i in range(30)})
    one = load_catalog(repo, workers=1)
    again = load_catalog(repo, workers=2)
    assert one == again
    assert len({t.id for t in one.tests}) == 30


def test_a_file_edit_changes_its_sha256_and_nothing_else(tree):
    repo = tree({"tests/test_a.py": CUDA, "tests/test_b.py": CUDA})
    before = load_catalog(repo).by_id()
    (repo / "tests/test_a.py").write_text(CUDA + "# edited\n")
    after = load_catalog(repo).by_id()
    assert before["tests/test_a.py"].sha256 != after["tests/test_a.py"].sha256
    assert before["tests/test_b.py"] == after["tests/test_b.py"]


def test_every_example_test_file_registers_and_loads_without_problems():
    from pipelines.core.specs import load_specs

    specs = load_specs()
    spec = next(s for s in specs.repos.values() if s.path.resolve() == EXAMPLE.resolve())
    cat = load_catalog(EXAMPLE, spec, specs)
    assert cat.problems == ()
    files = sorted(str(p.relative_to(EXAMPLE)) for p in (EXAMPLE / "tests").rglob("test_*.py"))
    assert sorted({t.path for t in cat.tests}) == files
    for t in cat.tests:
        source = (EXAMPLE / t.path).read_text()
        assert f'"{t.suite}"' in source, t.id
        assert t.gpus == int(t.suite.split("-gpu-")[0].rsplit("-", 1)[1])
        assert t.unresolved == ()
        kinds = {cat.requirement(k).kind for k in t.requirements}
        assert kinds == {"model", "dataset", "conversion"}, t.id
    assert cat == load_catalog(EXAMPLE, spec, specs)


def test_a_test_built_the_fast_way_is_the_record_the_constructor_makes():
    every = dict(id="tests/a.py::x", path="tests/a.py", backend="rocm", suite="s", gpus=2, est_time=7, labels=("l",),
                 nightly=True, disabled="why", sha256="f" * 64, line=3, hardware="mi300", est_source="history",
                 fmt="template", env=(("K", "v"),), args=("--x",), requirements=("m",), unresolved=("u",),
                 nightly_rule="exclusive", also_suites=("t",), est_literal=6.5)
    assert set(every) == {f.name for f in dataclasses.fields(model.Test)}, "a new Test field: give it a value here"
    fast, slow = new_test(**every), model.Test(**every)
    assert fast == slow and hash(fast) == hash(slow) and repr(fast) == repr(slow)
    assert list(vars(fast).items()) == list(vars(slow).items())
    least = dict(id="a", path="a", backend="cpu", suite="s", gpus=0, est_time=1)
    assert list(vars(new_test(**least)).items()) == list(vars(model.Test(**least)).items())
