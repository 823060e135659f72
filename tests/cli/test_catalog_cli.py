"""``nightly catalog``: the listing a CI maintainer reads, its JSON, filters and exit codes."""

from __future__ import annotations

import argparse
import json
import platform
import textwrap
from pathlib import Path

import pytest

from pipelines.cli import catalog as catalog_cli

PROJECT = Path(__file__).resolve().parents[2]
EXAMPLE = PROJECT / "examples" / "minirl"
SGLANGISH = PROJECT / "examples" / "sglangish"


@pytest.fixture(autouse=True)
def home(tmp_path_factory, monkeypatch) -> Path:
    """Each test its own state folder (the catalog cache lives there)."""
    path = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("NIGHTLY_HOME", str(path))
    return path


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="nightly")
    catalog_cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["catalog", *argv])
    return args.func(args)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    files = {
        "tests/e2e/test_grpo.py": """
            register_cuda_ci(600, "stage-c-4-gpu-h200", labels=["megatron"])
            def prepare():
                exec_command("hf download Qwen/Qwen3-0.6B --local-dir /root/models/Qwen3-0.6B")
            """,
        "tests/e2e/test_long.py": 'register_cuda_ci(3000, "stage-c-8-gpu-h200", labels=["fsdp", "long"], nightly=True)\n',
        "tests/e2e/test_rocm.py": 'register_rocm_ci(500, "stage-c-8-gpu-mi300", labels=["megatron"], disabled="no runner")\n',
    }
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"))
    return tmp_path


def test_the_table_lists_every_field_and_the_assumptions_go_to_stderr(repo, capsys):
    assert run(["--repo", str(repo)]) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert lines[0].split() == ["id", "backend", "suite", "gpus", "est_time", "labels", "nightly", "disabled", "requirements"]
    assert lines[2].split() == ["tests/e2e/test_grpo.py", "cuda", "stage-c-4-gpu-h200", "4", "600", "megatron", "-", "-",
                                "Qwen3-0.6B"]
    assert lines[3].split() == ["tests/e2e/test_long.py", "cuda", "stage-c-8-gpu-h200", "8", "3000", "fsdp,long", "yes",
                                "-", "-"]
    assert lines[4].split()[:8] == ["tests/e2e/test_rocm.py", "rocm", "stage-c-8-gpu-mi300", "8", "500", "megatron", "-",
                                    "no"]
    assert lines[-1] == f"3 tests (3 on GPUs, 1 disabled) of 3 in {repo}; 1 requirements; 0 problems"
    assert err.startswith(f"assumed: repo {repo} is not configured in assets/repos.yaml")


def test_json_has_exactly_the_documented_fields(repo, capsys):
    assert run(["--repo", str(repo), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [sorted(r) for r in rows] == [sorted(catalog_cli.JSON_FIELDS)] * 3
    assert rows[0] == {"id": "tests/e2e/test_grpo.py", "path": "tests/e2e/test_grpo.py", "backend": "cuda",
                       "suite": "stage-c-4-gpu-h200", "gpus": 4, "est_time": 600, "labels": ["megatron"],
                       "nightly": False, "disabled": None, "requirements": ["Qwen3-0.6B"]}


@pytest.mark.parametrize(("flags", "ids"), [
    (["--backend", "rocm"], ["tests/e2e/test_rocm.py"]),
    (["--suite", "stage-c-8-gpu-h200"], ["tests/e2e/test_long.py"]),
    (["--labels", "fsdp,nothing"], ["tests/e2e/test_long.py"]),
    (["--cadence", "nightly"], ["tests/e2e/test_grpo.py", "tests/e2e/test_rocm.py"]),
    (["--cadence", "pr"], ["tests/e2e/test_grpo.py", "tests/e2e/test_rocm.py"]),
    (["--cadence", "weekly"], ["tests/e2e/test_grpo.py", "tests/e2e/test_long.py", "tests/e2e/test_rocm.py"]),
])
def test_selection_flags_filter_like_the_runner(repo, capsys, flags, ids):
    assert run(["--repo", str(repo), "--json", *flags]) == 0
    assert [r["id"] for r in json.loads(capsys.readouterr().out)] == ids


def test_an_unknown_suite_is_an_error_not_an_empty_list(repo, capsys):
    assert run(["--repo", str(repo), "--suite", "stage-z"]) == 2
    err = capsys.readouterr().err
    assert "nightly catalog: error: unknown suite(s) stage-z; registered suites: stage-c-4-gpu-h200, " in err


def test_problems_go_to_stderr_and_strict_makes_them_fail(repo, capsys):
    (repo / "tests/e2e/test_bad.py").write_text('register_cuda_ci(-1, "stage-c-4-gpu-h200", labels=["x"])\n')
    assert run(["--repo", str(repo)]) == 0
    out, err = capsys.readouterr()
    assert "tests/e2e/test_bad.py:1: est_time: must be positive, got -1; set the expected run time in seconds\n" in err
    assert out.splitlines()[-1].endswith("; 1 problems")
    assert run(["--repo", str(repo), "--strict"]) == 1
    assert "nightly catalog: --strict: 1 problem(s)" in capsys.readouterr().err


def test_unresolved_requirements_and_uncalibrated_estimates_are_shown(tmp_path, capsys):
    (tmp_path / ".github/workflows").mkdir(parents=True)
    (tmp_path / ".github/workflows/ci.yml.j2").write_text(
        "<% set jobs = {'j': {'label': 'run-ci-j', 'tests': [{'test_file': 'test_a.py', 'num_gpus': 2}]}} %>\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests/test_a.py").write_text("def prepare(args):\n    hf_download_dataset(f'{args.org}/d')\n")
    assert run(["--repo", str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[2].split()[:6] == ["tests/test_a.py", "cuda", "j", "2", "1800", "uncalibrated"]
    assert out[3] == "tests/test_a.py: unresolved: {args.org}/d (hf_download_dataset, line 2)"


def test_without_repo_the_default_repo_of_the_assets_is_listed_with_its_spec(capsys):
    assert run(["--json"]) == 0
    out, err = capsys.readouterr()
    default = {r["id"] for r in json.loads(out)}
    assert err == ""
    assert run(["--repo", str(EXAMPLE), "--json"]) == 0
    out, err = capsys.readouterr()
    assert {r["id"] for r in json.loads(out)} == default and err == ""


def test_an_unseen_repo_of_another_dialect_is_listed_with_the_dialect_and_roots_it_assumed(capsys):
    assert run(["--repo", str(SGLANGISH)]) == 0
    out, err = capsys.readouterr()
    assert "assumed: dialect sglang (sglangish/test/ci/ci_register.py, sglang profile): register_amd_ci," in err
    assert "assumed: roots: test/registered (the sglang runner's; set `roots:` in assets/repos.yaml or pass --roots" in err
    rows = {line.split()[0]: line.split() for line in out.splitlines()[2:] if line.startswith("test/")}
    assert rows["test/registered/kernels/bench_matmul.py"][1:5] == ["cuda", "nightly-1-gpu", "1", "4"]
    assert rows["test/registered/multi/test_tp2_consistency.py::cuda-stage-c-test-8-gpu-b200"][1:4] == [
        "cuda", "stage-c-test-8-gpu-b200", "8"]
    assert not any("conftest" in r or "__init__" in r for r in rows)


def test_roots_override_the_assumed_ones_and_an_empty_catalog_exits_1_with_the_next_step(tmp_path, capsys):
    (tmp_path / "e2e").mkdir()
    (tmp_path / "e2e/test_a.py").write_text('register_cpu_ci(5, "stage-a-cpu")\n')
    assert run(["--repo", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "nightly catalog: no test file found; pass --roots DIR with the folder(s) your CI runner collects tests " \
           "from, or set `roots:` (and `dialect:`) for this repo in assets/repos.yaml" in err
    assert run(["--repo", str(tmp_path), "--roots", "e2e", "--json"]) == 0
    assert [r["id"] for r in json.loads(capsys.readouterr().out)] == ["e2e/test_a.py"]


def test_roots_may_be_written_as_a_shell_user_does_and_may_not_leave_the_repository(capsys):
    """``.`` is the whole checkout and ``./tests`` is ``tests``; ``..`` is refused where it was written."""
    assert run(["--repo", str(EXAMPLE), "--roots", "tests", "--json"]) == 0
    expected = [r["id"] for r in json.loads(capsys.readouterr().out)]
    assert len(expected) == 14
    for root in (".", "./tests", "/", "tests/", "./tests/../tests"):
        assert run(["--repo", str(EXAMPLE), "--roots", root, "--json"]) == 0, root
        out, err = capsys.readouterr()
        assert [r["id"] for r in json.loads(out)] == expected and "roots:" not in err, root
    for root, shown in (("..", ".."), ("./tests/../..", ".."), ("../minirl/tests", "../minirl/tests")):
        assert run(["--repo", str(EXAMPLE), "--roots", root]) == 1
        assert f"{shown}:1: roots: must be a folder inside the repository; set `roots:` in assets/repos.yaml or " \
               "pass --roots" in capsys.readouterr().err, root


def test_the_roots_hint_names_the_flag_only_where_the_command_has_it(capsys):
    """``nightly run`` prints the same assumptions and has no --roots: the catalog names assets/repos.yaml, and
    ``nightly catalog`` adds its own flag."""
    from pipelines.core.catalog import load_catalog

    assert "roots: test/registered (the sglang runner's; set `roots:` in assets/repos.yaml to change)" in (
        load_catalog(SGLANGISH).assumptions)
    assert run(["--repo", str(SGLANGISH)]) == 0
    assert "assumed: roots: test/registered (the sglang runner's; set `roots:` in assets/repos.yaml or pass --roots " \
           "to change)" in capsys.readouterr().err


def test_a_selection_that_matches_nothing_exits_1_and_says_what_exists(repo, capsys):
    assert run(["--repo", str(repo), "--backend", "cpu"]) == 1
    assert ("nightly catalog: nothing matches the selection among 3 tests; drop or change --suite/--backend/--labels/"
            "--cadence") in capsys.readouterr().err


def test_a_second_listing_reuses_the_cache_in_the_state_folder_and_no_cache_bypasses_it(repo, home, capsys):
    assert run(["--repo", str(repo), "--json"]) == 0
    first = capsys.readouterr().out
    (cache,) = [p for p in (home / "cache").glob("catalog-*.json") if p.name.count(".") == 1]
    cache.write_text("{not json")
    assert run(["--repo", str(repo), "--json"]) == 0
    out, err = capsys.readouterr()
    assert out == first
    assert f"assumed: cache {cache} is corrupt (" in err and "); ignored and rebuilt" in err
    assert run(["--repo", str(repo), "--json", "--no-cache"]) == 0
    assert capsys.readouterr().out == first


def test_the_listing_shows_each_tests_matrix_configurations(capsys):
    from pipelines.cli import main as nightly

    assert nightly(["catalog"]) == 0
    out = capsys.readouterr().out
    five = "tests/e2e/lora/test_lora_moe_5layer.py: config "
    assert f"{five}megatron-shared-outer-virtual: backend=megatron, shared_outer=true, virtual_experts=true" in out
    assert f"{five}tilelang-per-expert: backend=tilelang, shared_outer=false, virtual_experts=false" in out
    assert "tests/e2e/lora/test_lora_moe_6layer.py: config megatron-per-expert:" in out


def test_a_configured_repo_hears_which_rules_its_assets_entry_overrides(tmp_path, monkeypatch, capsys):
    repo = tmp_path / "fw"
    (repo / "tests").mkdir(parents=True)
    (repo / "tests" / "test_a.py").write_text('register_cpu_ci(0, "per-commit")\n')
    assets = tmp_path / "assets"
    assets.mkdir()
    (assets / "cluster.yaml").write_text((PROJECT / "assets" / "cluster.yaml").read_text())
    (assets / "repos.yaml").write_text(f"default: fw\nrepos:\n  fw:\n    path: {repo}\n    rules: {{est_time: non-negative}}\n")
    monkeypatch.setenv("NIGHTLY_ASSETS_DIR", str(assets))
    assert run(["--repo", str(repo)]) == 0
    err = capsys.readouterr().err.splitlines()
    assert "assumed: rules from assets/repos.yaml override the m dialect: est_time=non-negative (was positive)" in err


def test_a_template_job_labelled_long_runs_on_every_cadence_its_workflow_does(tmp_path, capsys):
    """Skipping `long` on nightly is framework M's runner's rule; a template's jobs run when their workflow runs."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests/test_a.py").write_text("NUM_GPUS = 2\n")
    (tmp_path / ".github/workflows").mkdir(parents=True)
    (tmp_path / ".github/workflows/pr-test.yml.j2").write_text(textwrap.dedent("""\
        <% set jobs = {
            'e2e-test-fsdp': {'label': 'run-ci-fsdp', 'tests': [{'test_file': 'test_a.py', 'num_gpus': 2}]},
            'e2e-test-long': {'label': 'run-ci-long', 'tests': [{'test_file': 'test_a.py', 'num_gpus': 2}]},
        } %>
        on:
          pull_request:
        jobs:
          x: {}
        """))
    for cadence in ("pr", "nightly", "weekly"):
        assert run(["--repo", str(tmp_path), "--cadence", cadence, "--json"]) == 0, cadence
        assert [t["id"] for t in json.loads(capsys.readouterr().out)] == ["tests/test_a.py"], cadence


def test_a_problem_in_a_test_list_several_jobs_reuse_is_reported_once(tmp_path, capsys):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests/test_a.py").write_text("NUM_GPUS = 2\n")
    (tmp_path / ".github/workflows").mkdir(parents=True)
    (tmp_path / ".github/workflows/n.yml.j2").write_text(textwrap.dedent("""\
        <% set a_tests = [
            {'test_file': 'test_a.py'},
            {'test_file': 'test_missing.py'},
        ] %>
        <% set jobs = {'j1': {'label': 'run-ci-a', 'tests': a_tests}, 'j2': {'label': 'run-ci-b', 'tests': a_tests},
                       'j3': {'label': 'run-ci-c', 'tests': a_tests + []}} %>
        on:
          schedule:
            - cron: "0 15 * * *"
        """))
    assert run(["--repo", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    problems = [line for line in err.splitlines() if not line.startswith("assumed:")]
    assert problems == [".github/workflows/n.yml.j2:3: test_file: tests/test_missing.py does not exist: test_file is "
                        "read relative to tests/; write it as the file's path under tests/ ('e2e/test_x.py' for "
                        "tests/e2e/test_x.py), or `cd` into its folder in the job's run line (`cd tests/e2e && python "
                        "${{ matrix.info.test_file }}`)"]
    assert out.rstrip().endswith("1 problems")


def test_the_home_folder_or_the_root_as_repo_is_refused_before_anything_walks_it(repo, monkeypatch, capsys):
    """`--repo "$UNSET/"` is `/` and `--repo ~` the home folder: walking either read every file below it
    (/proc and /sys too) for minutes before saying there was no test. A checkout that is the home folder
    (here: a real one) is refused the same way, with what to check."""
    monkeypatch.setenv("HOME", str(repo))
    assert run(["--repo", str(repo)]) == 1
    err = capsys.readouterr().err
    assert f"{repo}:1: repo: is your home folder, not a framework's checkout; check --repo" in err
    from pipelines.core.catalog.detect import not_a_checkout, python_files

    assert "file system's root" in not_a_checkout(Path("/")) and python_files(Path("/")) == []
    assert not_a_checkout(repo / "tests") == ""
    (repo / ".git").mkdir()  # a container whose HOME and WORKDIR are the checkout
    assert run(["--repo", str(repo)]) == 0


def test_a_module_level_call_of_a_register_function_the_module_does_not_define_is_a_located_problem(
        tmp_path, capsys):
    """`register_npu_ci` where the module defines cuda/rocm/cpu, and the typo `register_cuda_cl`, registered
    nothing without a word; `register_fixture(...)` is an ordinary call."""
    (tmp_path / "minirl").mkdir()
    (tmp_path / "minirl/ci_register.py").write_bytes((EXAMPLE / "minirl/ci_register.py").read_bytes())
    (tmp_path / "tests/e2e").mkdir(parents=True)
    (tmp_path / "tests/e2e/test_x.py").write_text(textwrap.dedent("""\
        from minirl.ci_register import register_cuda_ci
        register_cuda_ci(100, "stage-b-1-gpu-h100", labels=["lora"])
        register_npu_ci(100, "stage-b-1-npu-a3", labels=["lora"])
        register_fixture("x")
        """))
    (tmp_path / "tests/e2e/test_typo.py").write_text('register_cuda_cl(100, "stage-c-8-gpu-h200", labels=["lora"])\n')

    assert run(["--repo", str(tmp_path), "--strict"]) == 1
    problems = [line for line in capsys.readouterr().err.splitlines() if not line.startswith(("assumed:", "nightly"))]
    said = ("not a register function: minirl/ci_register.py (the repo's registry module) defines register_cpu_ci, "
            "register_cuda_ci, register_rocm_ci, and only calls of those register a test, so this call registers nothing")
    assert problems == [
        f"tests/e2e/test_typo.py:1: register_cuda_cl: {said}; did you mean register_cuda_ci? fix the name",
        f"tests/e2e/test_x.py:3: register_npu_ci: {said}; call one of those, or define register_npu_ci in "
        "minirl/ci_register.py",
    ]


def test_an_sglang_style_call_in_a_repo_without_its_registry_module_says_which_dialect_reads_it(tmp_path, capsys):
    (tmp_path / "test/registered/amd").mkdir(parents=True)
    (tmp_path / "test/registered/amd/test_a.py").write_text(
        'register_amd_ci(est_time=60, suite="nightly-amd-1-gpu", nightly=True)\n')

    assert run(["--repo", str(tmp_path), "--roots", "test/registered"]) == 1
    err = capsys.readouterr().err
    assert ("test/registered/amd/test_a.py:1: register_amd_ci: not a register function: no module of the repo defines "
            "register_*_ci, so the built-in profile m's register_cpu_ci, register_cuda_ci, register_rocm_ci are read, "
            "and only calls of those register a test, so this call registers nothing; the built-in profile sglang has "
            "register_amd_ci: set `dialect: sglang` for this repo in assets/repos.yaml (or `registry_module:` naming "
            "the module that defines it)") in err


NIGHTLY_TEMPLATE = """\
<% set e2e_tests = [{'test_file': 'test_one.py', 'num_gpus': 1}] %>
<% set jobs = {'e2e-test': {'label': 'run-ci-e2e', 'tests': e2e_tests}} %>
name: Nightly
on:
  schedule:
    - cron: '0 15 * * *'
jobs:
<% for name, config in jobs.items() %>
  << name >>:
    strategy:
      matrix:
        info: << config.tests | tojson >>
    steps:
      - uses: actions/checkout@v4
      - name: Execute
        run: RUN
<% endfor %>
"""


@pytest.mark.parametrize("run_line", [
    "cd tests/e2e && python ${{ matrix.info.test_file }}",
    "|\n          cd tests/e2e\n          python ${{ matrix.info.test_file }}",
    '|\n          echo "Running ${{ matrix.info.test_file }} on $(hostname)"\n          cd tests/e2e\n'
    "          python ${{ matrix.info.test_file }}",
    "echo ${{ matrix.info.test_file }} && cd tests/e2e && torchrun --nproc_per_node 1 ${{ matrix.info.test_file }} "
    "| tee logs/${{ matrix.info.test_file }}.log",
    "|\n          cd tests/e2e\n          FOO=1 timeout 600 python3 -u ${{ matrix.info.test_file }}\n"
    "          mv logs/${{ matrix.info.test_file }}.out .",
], ids=["cd on the run line", "cd in a run block", "echo first", "echo and tee on its line", "mv after"])
def test_a_template_job_that_cds_into_a_folder_finds_its_files_there(tmp_path, capsys, run_line):
    """Its file was looked for under tests/ alone: every entry was `tests/test_one.py does not exist`.
    Only the command that runs the file says its folder: an `echo`, `tee` or `mv` naming the file counted as
    a run line too, the lines disagreed, and the file was looked for under tests/."""
    (tmp_path / "tests/e2e").mkdir(parents=True)
    (tmp_path / "tests/e2e/test_one.py").write_text("NUM_GPUS = 1\n")
    (tmp_path / ".github/workflows").mkdir(parents=True)
    (tmp_path / ".github/workflows/nightly.yml.jinja").write_text(NIGHTLY_TEMPLATE.replace("RUN", run_line))

    assert run(["--repo", str(tmp_path), "--strict", "--json"]) == 0
    out, err = capsys.readouterr()
    assert [t["id"] for t in json.loads(out)] == ["tests/e2e/test_one.py"]
    assert "assumed: .github/workflows/nightly.yml.jinja: test_file is read relative to tests/e2e/ (`" in err


@pytest.mark.parametrize("run_line", [
    "cd tests\\e2e && python ${{ matrix.info.test_file }}",
    "python tests\\e2e\\${{ matrix.info.test_file }}",
], ids=["cd", "glued"])
def test_a_template_folder_written_with_a_backslash_falls_back_to_tests_and_says_why(tmp_path, capsys, run_line):
    """`cd tests\\e2e` was split as bash does (backslash escapes) and read as folder testse2e/."""
    (tmp_path / "tests/e2e").mkdir(parents=True)
    (tmp_path / "tests/e2e/test_one.py").write_text("NUM_GPUS = 1\n")
    (tmp_path / ".github/workflows").mkdir(parents=True)
    (tmp_path / ".github/workflows/nightly.yml.jinja").write_text(
        NIGHTLY_TEMPLATE.replace("RUN", run_line).replace("'test_one.py'", "'e2e/test_one.py'"))

    assert run(["--repo", str(tmp_path), "--json"]) == 0
    out, err = capsys.readouterr()
    assert [t["id"] for t in json.loads(out)] == ["tests/e2e/test_one.py"]
    assert (f"assumed: .github/workflows/nightly.yml.jinja: test_file is read relative to tests/ because `run: {run_line}` "
            "at line 16 ") in err
    assert ("backslash, which bash reads as an escape and a Windows shell as a folder separator, so the catalog "
            "cannot tell the folder (write it with /)\n") in err
    assert "testse2e" not in err


def test_a_missing_template_file_says_where_test_file_is_read_from_and_never_hints_at_roots(tmp_path, capsys):
    (tmp_path / "tests/e2e").mkdir(parents=True)
    (tmp_path / "tests/e2e/test_one.py").write_text("NUM_GPUS = 1\n")
    (tmp_path / ".github/workflows").mkdir(parents=True)
    (tmp_path / ".github/workflows/nightly.yml.jinja").write_text(
        NIGHTLY_TEMPLATE.replace("RUN", 'cd "$TEST_DIR" && python ${{ matrix.info.test_file }}'))

    assert run(["--repo", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert (".github/workflows/nightly.yml.jinja:1: test_file: tests/test_one.py does not exist: test_file is read "
            "relative to tests/ because `run: cd \"$TEST_DIR\" && python ${{ matrix.info.test_file }}` at line 16 "
            "changes to a folder the catalog cannot read (a variable, an absolute path or an option); write it as the "
            "file's path under tests/ ('e2e/test_x.py' for tests/e2e/test_x.py), or `cd` into its folder in the job's "
            "run line (`cd tests/e2e && python ${{ matrix.info.test_file }}`)\n") in err
    assert "--roots" not in err
    assert err.endswith("nightly catalog: no test loaded; fix the 1 problem(s) above (each says how)\n")


def test_a_register_like_helper_the_test_file_binds_itself_is_left_alone(tmp_path, capsys):
    """`def register_trace_ci(name): ...` then `register_trace_ci("ckpt")`, or one imported from a helper module,
    was "not a register function ... define register_trace_ci in minirl/ci_register.py", and every night exited 3;
    a name imported from the registry module that it lacks, and an unbound one, are still problems."""
    (tmp_path / "minirl").mkdir()
    (tmp_path / "minirl/ci_register.py").write_bytes((EXAMPLE / "minirl/ci_register.py").read_bytes())
    (tmp_path / "tests/e2e").mkdir(parents=True)
    (tmp_path / "tests/helpers").mkdir()
    (tmp_path / "tests/helpers/trace.py").write_text("def register_span_ci(name):\n    return name\n")
    (tmp_path / "tests/e2e/test_x.py").write_text(textwrap.dedent("""\
        from minirl.ci_register import register_cuda_ci, register_npu_ci
        from tests.helpers.trace import register_span_ci
        from tests.helpers import trace as _trace
        register_cuda_ci(100, "stage-b-1-gpu-h100", labels=["lora"])


        def register_trace_ci(name):
            return name


        class register_hook_ci:
            pass


        try:
            register_env_ci = _trace.register_span_ci
        except AttributeError:
            pass
        register_trace_ci("ckpt")
        register_span_ci("ckpt")
        register_hook_ci()
        register_env_ci("x")
        register_npu_ci(100, "stage-b-1-npu-a3")
        register_xpu_ci(100, "stage-b-1-xpu")
        """))

    assert run(["--repo", str(tmp_path), "--strict"]) == 1
    problems = [line for line in capsys.readouterr().err.splitlines() if not line.startswith(("assumed:", "nightly"))]
    assert [line.split(": not a register function")[0] for line in problems] == [
        "tests/e2e/test_x.py:23: register_npu_ci", "tests/e2e/test_x.py:24: register_xpu_ci"]
    # no registry module in the repo (an SGLang checkout read with profile m): its ci_register still counts as one
    (tmp_path / "minirl/ci_register.py").unlink()
    (tmp_path / "tests/helpers/trace.py").write_text("register_span_ci = print\n")  # a `def` would be a registry module
    (tmp_path / "tests/e2e/test_x.py").write_text(
        "from sglang.test.ci.ci_register import register_amd_ci\nfrom tests.helpers.trace import register_span_ci\n"
        'register_amd_ci(est_time=60, suite="nightly-amd-1-gpu")\nregister_span_ci("ckpt")\n')
    assert run(["--repo", str(tmp_path), "--roots", "tests/e2e"]) == 1
    problems = [line for line in capsys.readouterr().err.splitlines() if ": not a register function" in line]
    assert [line.split(": not a register function")[0] for line in problems] == ["tests/e2e/test_x.py:3: register_amd_ci"]


SG_REGISTER = "".join(f"def register_{b}_ci(est_time: float, suite=None, nightly=False, disabled=None, *, stage=None, "
                      "runner_config=None):\n    return None\n\n" for b in ("cpu", "cuda", "amd"))


def write_tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_an_explicit_suite_none_beside_the_stage_pair_is_refused_as_sglang_s_runner_refuses_it(tmp_path, capsys):
    """SGLang's runner counts `suite=None` as a suite given: with stage= and runner_config= it raises "must specify
    exactly one of (stage, runner_config) pair or suite". Framework M's catalog keeps reading suite=None as absent."""
    sg = write_tree(tmp_path / "sg", {
        "python/sgl/test/ci/ci_register.py": SG_REGISTER,
        "test/registered/test_none.py": 'register_cuda_ci(60, suite=None, stage="stage-b", runner_config="1-gpu-large")\n',
        "test/registered/test_positional.py": 'register_cuda_ci(60, None, stage="stage-b", runner_config="1-gpu-large")\n',
        "test/registered/test_ok.py": 'register_cuda_ci(60, stage="stage-b", runner_config="1-gpu-large")\n'})
    assert run(["--repo", str(sg), "--json", "--strict"]) == 1
    out, err = capsys.readouterr()
    assert [r["id"] for r in json.loads(out)] == ["test/registered/test_ok.py"]
    problems = [line for line in err.splitlines() if not line.startswith(("assumed:", "nightly"))]
    assert [line.split(" is still")[0] for line in problems] == [
        "test/registered/test_none.py:1: suite: suite=None", "test/registered/test_positional.py:1: suite: suite=None"]
    assert problems[0].endswith("remove suite=None and keep the stage= and runner_config= pair")
    m = write_tree(tmp_path / "m", {"tests/e2e/test_none.py": (
        'register_cuda_ci(60, suite=None, stage="stage-b", runner_config="2-gpu-h200", labels=["x"])\n')})
    assert run(["--repo", str(m), "--json", "--strict"]) == 0
    assert [r["suite"] for r in json.loads(capsys.readouterr().out)] == ["stage-b-test-2-gpu-h200"]


def test_a_gpu_registration_in_framework_m_s_fast_folder_is_a_located_problem_not_a_gpu_test(tmp_path, capsys):
    """M's runner refuses `register_cuda_ci` under tests/fast/ ("register_cuda_ci is forbidden in tests/fast/; move the
    file to tests/fast-gpu/"): the catalog says so at the call, plans no GPU test, and keeps the folder's CPU tests."""
    repo = write_tree(tmp_path / "m", {
        "tests/fast/test_gpu.py": 'import os\nregister_cuda_ci(60, "stage-b-2-gpu-h200", labels=["megatron"])\n',
        "tests/fast/test_plain.py": "def test_x():\n    pass\n",
        "tests/fast-gpu/test_gpu_ok.py": 'register_cuda_ci(60, "stage-b-2-gpu-h200", labels=["megatron"])\n'})
    assert run(["--repo", str(repo), "--json", "--strict"]) == 1
    out, err = capsys.readouterr()
    assert [(r["id"], r["backend"]) for r in json.loads(out)] == [
        ("tests/fast-gpu/test_gpu_ok.py", "cuda"), ("tests/fast/test_plain.py", "cpu")]
    assert ("tests/fast/test_gpu.py:2: register_cuda_ci: register_cuda_ci is forbidden in tests/fast/, framework M's "
            "CPU-only folder (its runner refuses the file there); move the file to tests/fast-gpu/, or register it "
            "with register_cpu_ci if it needs no GPU") in err.splitlines()


def test_registered_files_outside_framework_m_s_roots_are_named_not_dropped_silently(tmp_path, capsys):
    """An unconfigured M-like checkout is read under M's runner's folders; its registered tests elsewhere
    (tests/gpu/, tests/ itself) are not listed, and an assumed: line names them, says why and how to read them.
    A note, not a problem: --strict stays green for a checkout M's runner reads as it is."""
    repo = write_tree(tmp_path / "fw", {
        "tests/ci/ci_register.py": ("def register_cuda_ci(est_time, suite, *, labels, nightly=False, disabled=None):\n"
                                    "    pass\n"),
        "tests/gpu/test_a.py": 'register_cuda_ci(100, "stage-b-1-gpu-h200", labels=["megatron"])\n',
        "tests/test_b.py": 'register_cuda_ci(100, "stage-b-1-gpu-h200", labels=["megatron"])\n',
        "tests/unit/test_plain.py": "def test_x():\n    pass\n",
        "tests/e2e/test_ok.py": 'register_cuda_ci(100, "stage-b-1-gpu-h200", labels=["megatron"])\n'})
    assert run(["--repo", str(repo), "--json", "--strict"]) == 0
    out, err = capsys.readouterr()
    assert [r["id"] for r in json.loads(out)] == ["tests/e2e/test_ok.py"]
    assert ("assumed: 2 file(s) outside the roots call register_cuda_ci: tests/gpu/test_a.py, tests/test_b.py; they "
            "are not listed: the m runner collects only tests/fast, tests/fast-gpu, tests/e2e, tests/ci, so its CI never "
            "runs them either; move them under one of those folders, or set `roots:` in assets/repos.yaml or pass "
            "--roots (e.g. `roots: [tests]`) to read them") in err.splitlines()
    assert run(["--repo", str(repo), "--json", "--roots", "tests"]) == 0  # as the note says: now they are read
    assert [r["id"] for r in json.loads(capsys.readouterr().out)] == [
        "tests/e2e/test_ok.py", "tests/gpu/test_a.py", "tests/test_b.py"]


def test_a_gpu_registration_in_a_configured_implicit_cpu_folder_other_than_tests_fast_stays_a_gpu_test(
        tmp_path, monkeypatch, capsys):
    """Only M's tests/fast is refused GPU registrations (its runner's rule). A configured `implicit_cpu_dirs:
    [tests/unit]` makes that folder's unregistered files CPU tests; its registered files stay what they register."""
    repo = write_tree(tmp_path / "fw", {
        "tests/unit/test_gpu_kernel.py": 'register_cuda_ci(100, "stage-b-1-gpu-h200", labels=["kernels"])\n',
        "tests/unit/test_cpu_only.py": "print(1)\n",
        "tests/e2e/test_e.py": 'register_cuda_ci(100, "stage-b-1-gpu-h200", labels=["a"])\n'})
    assets = tmp_path / "assets"
    assets.mkdir()
    (assets / "cluster.yaml").write_text((PROJECT / "assets" / "cluster.yaml").read_text())
    (assets / "repos.yaml").write_text(f"default: fw\nrepos:\n  fw:\n    path: {repo}\n    roots: [tests]\n"
                                       "    implicit_cpu_dirs: [tests/unit]\n")
    monkeypatch.setenv("NIGHTLY_ASSETS_DIR", str(assets))
    assert run(["--repo", str(repo), "--json", "--strict"]) == 0
    assert [(r["id"], r["backend"]) for r in json.loads(capsys.readouterr().out)] == [
        ("tests/e2e/test_e.py", "cuda"), ("tests/unit/test_cpu_only.py", "cpu"), ("tests/unit/test_gpu_kernel.py", "cuda")]


def test_only_framework_m_s_tests_fast_is_its_implicit_cpu_folder_not_a_fast_folder_under_another_root(tmp_path, capsys):
    """M's runner treats tests/fast alone as its CPU-only folder: tests/e2e/fast/ holds ordinary files, so a GPU test
    there is a GPU test and an unregistered file there is unregistered (never a CPU test it does not run)."""
    m = write_tree(tmp_path / "m", {
        "tests/fast/test_cpu.py": "def test_x():\n    pass\n",
        "tests/e2e/fast/test_quick_grpo.py": 'register_cuda_ci(300, "stage-b-2-gpu-h200", labels=["megatron"])\n',
        "tests/e2e/fast/test_helper.py": "def test_y():\n    pass\n"})
    assert run(["--repo", str(m), "--json"]) == 0
    out, err = capsys.readouterr()
    assert [(r["id"], r["backend"]) for r in json.loads(out)] == [
        ("tests/e2e/fast/test_quick_grpo.py", "cuda"), ("tests/fast/test_cpu.py", "cpu")]
    assert [line.split(":")[0] for line in err.splitlines() if line.startswith("tests/")] == [
        "tests/e2e/fast/test_helper.py"]
    assert "assumed: implicit CPU folder(s) tests/fast: framework M's runner" in err


def test_refusing_one_registration_of_a_file_keeps_the_id_of_the_registrations_that_stay(tmp_path, capsys):
    """The ids are made over every registration of the file: a GPU call refused in M's tests/fast, or an SGLang call
    refused for suite=None, is a problem, but the file's other test keeps `<path>::<backend>-<suite>`, the id its
    history is under, rather than becoming the bare path."""
    m = write_tree(tmp_path / "m", {
        "tests/fast/test_x.py": ('register_cpu_ci(12, "stage-a-cpu")\n'
                                 'register_cuda_ci(60, "stage-b-2-gpu-h200", labels=["megatron"])\n'),
        "tests/e2e/test_y.py": 'register_cuda_ci(60, "stage-b-2-gpu-h200", labels=["megatron"])\n'})
    sg = write_tree(tmp_path / "sg", {
        "python/sgl/test/ci/ci_register.py": SG_REGISTER,
        "test/registered/test_x.py": ('register_cuda_ci(60, "nightly-1-gpu")\n'
                                      'register_cuda_ci(90, suite=None, stage="stage-b", runner_config="1-gpu-large")\n')})
    for repo, kept, refused in ((m, "tests/fast/test_x.py::cpu-stage-a-cpu", "tests/fast/test_x.py:2: register_cuda_ci"),
                                (sg, "test/registered/test_x.py::cuda-nightly-1-gpu", "test/registered/test_x.py:2: suite")):
        assert run(["--repo", str(repo), "--json", "--no-cache"]) == 0
        out, err = capsys.readouterr()
        assert kept in [r["id"] for r in json.loads(out)]
        assert any(line.startswith(refused) for line in err.splitlines())
        assert run(["--repo", str(repo), "--json"]) == 0  # the cached catalog says the same
        assert kept in [r["id"] for r in json.loads(capsys.readouterr().out)]
        assert run(["--repo", str(repo), "--json"]) == 0
        assert kept in [r["id"] for r in json.loads(capsys.readouterr().out)]


def test_an_sglang_file_registering_a_suite_per_commit_and_nightly_gives_two_tests_each_on_its_cadence(tmp_path, capsys):
    """SGLang keys a registration on (backend, suite, nightly): the pair is two tests, not a duplicate id with the
    nightly one dropped. Only the colliding nightly one gets `+nightly`; every other id stays as it was."""
    sg = write_tree(tmp_path / "sg", {
        "python/sgl/test/ci/ci_register.py": SG_REGISTER,
        "test/registered/test_both.py": ('register_cuda_ci(60, "nightly-1-gpu")\n'
                                         'register_cuda_ci(300, "nightly-1-gpu", nightly=True)\n'
                                         'register_amd_ci(90, "nightly-amd-1-gpu", nightly=True)\n'),
        "test/registered/test_one.py": 'register_cuda_ci(30, "nightly-1-gpu", nightly=True)\n'})
    assert run(["--repo", str(sg), "--json", "--strict"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["id"], r["est_time"], r["nightly"]) for r in rows] == [
        ("test/registered/test_both.py::cuda-nightly-1-gpu", 60, False),
        ("test/registered/test_both.py::cuda-nightly-1-gpu+nightly", 300, True),
        ("test/registered/test_both.py::amd-nightly-amd-1-gpu", 90, True),
        ("test/registered/test_one.py", 30, True)]
    assert run(["--repo", str(sg), "--json", "--cadence", "pr"]) == 0
    assert [r["id"] for r in json.loads(capsys.readouterr().out)] == ["test/registered/test_both.py::cuda-nightly-1-gpu"]
    assert run(["--repo", str(sg), "--json", "--cadence", "nightly", "--backend", "cuda"]) == 0
    assert [r["id"] for r in json.loads(capsys.readouterr().out)] == [
        "test/registered/test_both.py::cuda-nightly-1-gpu+nightly", "test/registered/test_one.py"]


def test_the_first_of_an_sglang_per_commit_and_nightly_pair_keeps_the_id_it_always_had(tmp_path, capsys):
    """Before the pair was two tests, the first call in the file owned `::cuda-nightly-1-gpu` (the later one was
    dropped as a duplicate), so its history, calibration and quarantine are under that id. With the nightly call
    first, the id must stay the nightly 300 s test's; the later per-commit one is the new id, `+per-commit`."""
    sg = write_tree(tmp_path / "sg", {
        "python/sgl/test/ci/ci_register.py": SG_REGISTER,
        "test/registered/test_both.py": ('register_cuda_ci(300, "nightly-1-gpu", nightly=True)\n'
                                         'register_cuda_ci(60, "nightly-1-gpu")\n')})
    assert run(["--repo", str(sg), "--json", "--strict"]) == 0
    assert [(r["id"], r["est_time"], r["nightly"]) for r in json.loads(capsys.readouterr().out)] == [
        ("test/registered/test_both.py::cuda-nightly-1-gpu", 300, True),
        ("test/registered/test_both.py::cuda-nightly-1-gpu+per-commit", 60, False)]
    assert run(["--repo", str(sg), "--json", "--cadence", "nightly"]) == 0
    assert [r["id"] for r in json.loads(capsys.readouterr().out)] == ["test/registered/test_both.py::cuda-nightly-1-gpu"]


def test_an_empty_disabled_reason_disables_the_test_as_both_runners_do(tmp_path, capsys):
    """M's and SGLang's runners skip a registration whose `disabled` is any string, "" too: listed as disabled with
    a placeholder reason, not refused as a bad registration (which would make the night's verdict PROBLEMS)."""
    m = write_tree(tmp_path / "m", {
        "tests/e2e/test_off.py": 'register_cuda_ci(60, "stage-c-4-gpu-h200", labels=["x"], disabled="")\n'})
    sg = write_tree(tmp_path / "sg", {"python/sgl/test/ci/ci_register.py": SG_REGISTER,
                                      "test/registered/test_off.py": 'register_cuda_ci(60, "nightly-1-gpu", disabled=" ")\n'})
    for repo, shown in ((m, "no reason given (disabled='')"), (sg, "no reason given (disabled=' ')")):
        assert run(["--repo", str(repo), "--json", "--strict"]) == 0
        assert [r["disabled"] for r in json.loads(capsys.readouterr().out)] == [shown]
    assert run(["--repo", str(m)]) == 0
    assert capsys.readouterr().out.splitlines()[-1].endswith("(1 on GPUs, 1 disabled) of 1 in " + str(m)
                                                             + "; 0 requirements; 0 problems")


@pytest.mark.parametrize(("damage", "problem"), [
    (b"# caf\xe9\n", "file: is not UTF-8 (invalid continuation byte at byte "),
    (b"# bell \x07\n", "yaml: character '\\x07' at column 8 is not allowed in YAML; "),
])
def test_a_coverage_yaml_that_is_not_utf8_leaves_the_listing_standing_without_its_config_lines(
        tmp_path, monkeypatch, capsys, damage, problem):
    from pipelines.cli import main as nightly
    from tests.support.assets import example_assets

    assets = example_assets(tmp_path / "assets")
    groups = assets / "coverage.yaml"
    lines = groups.read_bytes().count(b"\n")
    groups.write_bytes(groups.read_bytes() + damage)
    monkeypatch.setenv("NIGHTLY_ASSETS_DIR", str(assets))

    assert nightly(["catalog", "--repo", "minirl"]) == 0
    out = capsys.readouterr().out
    assert f"configurations not read: {groups}:{lines + 1}: {problem}" in out
    assert "tests/e2e/lora/test_lora_moe_5layer.py  " in out and ": config " not in out
    assert out.splitlines()[-1].endswith("problems")


def test_a_registered_sglang_bench_file_gets_its_config_lines_as_a_test_named_test_does(tmp_path, capsys):
    """SGLang's runner collects every .py under test/registered (kernel bench_*.py files are tests): the
    listing shows their matrices too, decided by the catalog's tests, never by the file name."""
    matrix = '# (name, dtype)\n_CONFIGS = [("small", "bf16"), ("big", "fp8")]\n'
    sg = write_tree(tmp_path / "sg", {
        "python/sgl/test/ci/ci_register.py": SG_REGISTER,
        "test/registered/kernels/bench_matmul.py": 'register_cuda_ci(60, "nightly-1-gpu")\n' + matrix,
        "test/registered/basic/test_gen.py": 'register_cuda_ci(60, "nightly-1-gpu")\n' + matrix,
        "test/registered/conftest.py": matrix})  # collected by no runner: no test, so no config lines

    assert run(["--repo", str(sg)]) == 0
    out = capsys.readouterr().out
    for path in ("test/registered/kernels/bench_matmul.py", "test/registered/basic/test_gen.py"):
        assert f"{path}: config small: dtype=bf16\n{path}: config big: dtype=fp8\n" in out
    assert "conftest.py: config" not in out


@pytest.mark.parametrize(("expression", "error"), [
    (" + ".join(['"x"'] * 5000), "RecursionError"),  # a prompt pasted as thousands of joined strings
    ("-" * 100_000 + "1", "MemoryError"),
])
def test_a_file_too_deeply_nested_for_python_s_parser_is_one_located_problem_and_the_rest_loads(
        tmp_path, capsys, expression, error):
    call = 'register_cuda_ci(100, "stage-c-1-gpu-h200", labels=["a"])\n'
    write_tree(tmp_path, {"tests/e2e/test_good.py": call, "tests/e2e/test_bad.py": f"{call}PROMPT = {expression}\n"})
    assert run(["--repo", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert [line.split()[0] for line in out.splitlines()[2:-1]] == ["tests/e2e/test_good.py"]
    assert out.splitlines()[-1].endswith("; 1 problems")
    problem = next(line for line in err.splitlines() if line.startswith("tests/e2e/test_bad.py"))
    assert problem.startswith("tests/e2e/test_bad.py:1: syntax: an expression is nested too deeply for the parser of "
                              f"this Python ({platform.python_version()}: {error}); split it")


@pytest.mark.parametrize("expression", [
    " + ".join(['"x"'] * 1500),  # parses, but deeper than Python's recursion limit
    " + ".join(['"x"'] * 1500) + " + 1", " * ".join(["2"] * 1500), "-" * 1500 + "1", "f" + "()" * 1500,
])
def test_a_long_operator_chain_python_runs_is_read_without_a_problem(tmp_path, capsys, expression):
    call = 'register_cuda_ci(100, "stage-c-1-gpu-h200", labels=["a"])\n'
    write_tree(tmp_path, {"tests/e2e/test_long_prompt.py": f"{call}P = {expression}\n"
                                                             f"def prepare():\n    exec_command('hf download ' + {expression})\n"})
    assert run(["--repo", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines()[2].split()[:2] == ["tests/e2e/test_long_prompt.py", "cuda"]
    assert out.splitlines()[-1] == f"1 tests (1 on GPUs, 0 disabled) of 1 in {tmp_path}; 0 requirements; 0 problems"


def test_an_entry_one_job_lists_twice_is_a_duplicate_while_one_listed_by_two_jobs_is_one_test(tmp_path, capsys):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests/test_a.py").write_text("NUM_GPUS = 2\n")
    (tmp_path / ".github/workflows").mkdir(parents=True)
    (tmp_path / ".github/workflows/pr-test.yml.j2").write_text(textwrap.dedent("""\
        <% set a_tests = [
            {'test_file': 'test_a.py', 'test_args': '--mode b'},
            {'test_file': 'test_a.py', 'test_args': '--mode b'},
        ] %>
        <% set b_tests = [{'test_file': 'test_a.py', 'test_args': '--mode b'}] %>
        <% set jobs = {'j1': {'label': 'run-ci-a', 'tests': a_tests}, 'j2': {'label': 'run-ci-b', 'tests': b_tests}} %>
        on:
          pull_request:
        """))
    assert run(["--repo", str(tmp_path), "--json"]) == 0
    out, err = capsys.readouterr()
    assert [(t["id"], t["labels"]) for t in json.loads(out)] == [("tests/test_a.py", ["a", "b"])]
    problems = [line for line in err.splitlines() if line.startswith(".github/")]
    assert problems == [".github/workflows/pr-test.yml.j2:3: id: duplicate test id 'tests/test_a.py': this entry and "
                        "the one at line 2 give the same test file and arguments; remove one"]


def test_an_unregistered_file_is_advised_a_registration_from_its_own_folder(tmp_path, capsys):
    """Not the repo's first call (a CPU one elsewhere): a GPU folder's file is shown its neighbours' GPU call."""
    write_tree(tmp_path, {
        "fw/ci_register.py": (EXAMPLE / "minirl/ci_register.py").read_text(),
        "tests/ci/test_cpu.py": "from fw.ci_register import register_cpu_ci\nregister_cpu_ci(30, \"stage-a-cpu\")\n",
        "tests/e2e/gpu/test_one.py": ("from fw.ci_register import register_cuda_ci\n"
                                     "register_cuda_ci(600, \"stage-c-2-gpu-h200\", labels=[\"fsdp\"])\n"),
        "tests/e2e/gpu/deeper/test_forgot.py": "def test_x():\n    pass\n",
    })
    assert run(["--repo", str(tmp_path), "--roots", "tests"]) == 0
    err = capsys.readouterr().err
    problem = next(line for line in err.splitlines() if line.startswith("tests/e2e/gpu/deeper/test_forgot.py"))
    assert problem.endswith('register the file e.g. register_cuda_ci(600, "stage-c-2-gpu-h200", ...) as other files here do')


@pytest.mark.parametrize(("files", "advised"), [
    ({  # a tie of one CPU and one GPU file in tests/e2e: not the CPU call, though it comes first
        "tests/e2e/test_cpu_smoke.py": 'register_cpu_ci(30, "stage-a-cpu")\n',
        "tests/e2e/megatron/test_x.py": 'register_cuda_ci(1300, "stage-c-4-gpu-h200", labels=["megatron"])\n',
     }, 'register_cuda_ci(1300, "stage-c-4-gpu-h200", ...)'),
    ({  # most files under tests/e2e register CPU calls: the nearest of those, not the GPU one beside the file
        "tests/e2e/a/deep/test_cpu_far.py": 'register_cpu_ci(40, "stage-a-cpu")\n',
        "tests/e2e/b/test_cpu_near.py": 'register_cpu_ci(20, "stage-a-cpu")\n',
        "tests/e2e/test_gpu.py": 'register_cuda_ci(600, "stage-c-2-gpu-h200", labels=["fsdp"])\n',
     }, 'register_cpu_ci(20, "stage-a-cpu", ...)'),
    ({  # the file's own folder registers a GPU call: that, not the repo's CPU majority elsewhere
        "tests/e2e/newdir/test_gpu.py": 'register_cuda_ci(600, "stage-c-2-gpu-h200", labels=["fsdp"])\n',
        "tests/e2e/test_cpu_a.py": 'register_cpu_ci(30, "stage-a-cpu")\n',
        "tests/e2e/test_cpu_b.py": 'register_cpu_ci(30, "stage-a-cpu")\n',
     }, 'register_cuda_ci(600, "stage-c-2-gpu-h200", ...)'),
])
def test_an_unregistered_file_is_advised_the_call_most_files_of_the_nearest_registering_folder_make(
        tmp_path, capsys, files, advised):
    """The smallest folder above the file whose subtree registers any; there the backend most files register (a tie:
    not the CPU one), from the folder nearest the file."""
    write_tree(tmp_path, {"fw/ci_register.py": (EXAMPLE / "minirl/ci_register.py").read_text(), **files,
                          "tests/e2e/newdir/test_new.py": "def execute(): pass\n"})
    assert run(["--repo", str(tmp_path)]) == 0
    err = capsys.readouterr().err
    problem = next(line for line in err.splitlines() if line.startswith("tests/e2e/newdir/test_new.py"))
    assert problem.endswith(f"register the file e.g. {advised} as other files here do")


def _at_depth(depth: int, call):
    """``call()`` from ``depth`` frames deeper than here, as a Dagster op or a deep caller runs the catalog."""
    return call() if depth == 0 else _at_depth(depth - 1, call)


def test_whether_a_long_chain_parses_does_not_depend_on_how_deep_the_catalog_is_called(tmp_path, capsys):
    """Python 3.11's parser gives up on a 2,000-term chain from 600 frames deep but not from a shallow stack: the
    catalog reads the file as from a shallow stack wherever it is called, one answer for the same file."""
    call = 'register_cuda_ci(100, "stage-c-1-gpu-h200", labels=["a"])\n'
    chain = " + ".join(['"x"'] * 2000)
    write_tree(tmp_path, {"tests/e2e/test_long_prompt.py": f"{call}P = {chain}\n"})
    listings = []
    for depth in (0, 600):
        assert _at_depth(depth, lambda: run(["--repo", str(tmp_path), "--no-cache"])) == 0
        listings.append(capsys.readouterr()[0].splitlines()[-1])
    assert listings == [f"1 tests (1 on GPUs, 0 disabled) of 1 in {tmp_path}; 0 requirements; 0 problems"] * 2


def test_an_entry_a_job_lists_twice_by_joining_a_list_with_itself_names_the_job_not_a_second_entry(tmp_path, capsys):
    """The file has one entry (line 2); the repeat is the job's `a_tests + a_tests` (line 9), which is what to fix."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests/test_a.py").write_text("NUM_GPUS = 2\n")
    (tmp_path / ".github/workflows").mkdir(parents=True)
    (tmp_path / ".github/workflows/pr-test.yml.j2").write_text(textwrap.dedent("""\
        <% set a_tests = [
            {'test_file': 'test_a.py', 'test_args': '--mode b'},
        ] %>
        <% set b_tests = [
            {'test_file': 'test_a.py', 'test_args': '--mode b'},
        ] %>
        <% set jobs = {
            'j0': {'label': 'run-ci-b', 'tests': b_tests},
            'j1': {'label': 'run-ci-a', 'tests': a_tests + a_tests},
        } %>
        on:
          pull_request:
        """))
    assert run(["--repo", str(tmp_path), "--json"]) == 0
    out, err = capsys.readouterr()
    assert [(t["id"], t["labels"]) for t in json.loads(out)] == [("tests/test_a.py", ["b", "a"])]
    problems = [line for line in err.splitlines() if line.startswith(".github/")]
    assert problems == [".github/workflows/pr-test.yml.j2:9: jobs.j1.tests: job 'j1' lists the entry of line 2 "
                        "(test id 'tests/test_a.py') twice, so it would run it twice; list it once"]
