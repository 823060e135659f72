"""What each test needs, read from its prepare(): downloads, datasets, conversions, and what is unknown."""

from __future__ import annotations

from pathlib import Path
from textwrap import dedent

from pipelines.core.catalog import load_catalog
from pipelines.core.model import Requirement
from pipelines.core.specs import ModelSpec, RepoSpec, Specs

REG = 'register_cuda_ci(60, "stage-c-4-gpu-h200", labels=["megatron"])\n'

GRPO = REG + dedent('''
MODEL_NAME = "Qwen3-0.6B"
MODEL_ORG = "Qwen"
NUM_GPUS = 4

def prepare():
    exec_command(f"hf download {MODEL_ORG}/{MODEL_NAME} --local-dir /root/models/{MODEL_NAME}")
    hf_download_dataset("zhuzilin/dapo-math-17k")
    convert_checkpoint(model_name=MODEL_NAME, megatron_model_type="qwen3-0.6B", num_gpus_per_node=NUM_GPUS,
                       dir_dst="/root/models")
''').lstrip("\n")


def specs_with(tmp_path: Path, models=None, datasets=None) -> Specs:
    return Specs(tmp_path, {}, {}, models or {}, datasets or {}, None, "", "")


def load(tree, files, specs=None, **spec):
    repo = tree(files)
    return load_catalog(repo, RepoSpec(name="fw", path=repo, format="registry", **spec), specs)


def test_constants_and_f_strings_give_model_dataset_and_conversion(tree):
    cat = load(tree, {"tests/test_grpo.py": GRPO})
    assert cat.problems == ()
    (t,) = cat.tests
    assert t.requirements == ("Qwen3-0.6B", "dapo-math-17k", "Qwen3-0.6B_torch_dist")
    assert t.unresolved == ()
    assert cat.requirement("Qwen3-0.6B") == Requirement("model", "Qwen3-0.6B", "Qwen/Qwen3-0.6B", "/root/models/Qwen3-0.6B")
    assert cat.requirement("dapo-math-17k") == Requirement(
        "dataset", "dapo-math-17k", "zhuzilin/dapo-math-17k", "/root/datasets/dapo-math-17k")
    assert cat.requirement("Qwen3-0.6B_torch_dist") == Requirement(
        "conversion", "Qwen3-0.6B_torch_dist", "Qwen3-0.6B", "/root/models/Qwen3-0.6B_torch_dist",
        params=(("dir_dst", "/root/models"), ("extra_args", ""), ("megatron_model_type", "qwen3-0.6B"),
                ("model_name", "Qwen3-0.6B"), ("multinode", "False"), ("num_gpus_per_node", "4")),
        depends_on=("Qwen3-0.6B",))


def test_positional_conversion_arguments_local_names_and_concatenation_resolve(tree):
    cat = load(tree, {"tests/test_pos.py": REG + dedent('''
        BASE = "GLM-4"
        def prepare():
            name = BASE + "-9B"
            exec_command("hf download zai/" + name + " --local-dir /root/models/" + name)
            convert_checkpoint(name, "glm4-9B", 8, True, "--tp 2", "/dev/shm")
        ''').lstrip("\n")})
    (t,) = cat.tests
    conv = cat.requirement("GLM-4-9B_torch_dist")
    assert (conv.path, dict(conv.params)["extra_args"], dict(conv.params)["multinode"]) == (
        "/dev/shm/GLM-4-9B_torch_dist", "--tp 2", "True")
    assert t.requirements == ("GLM-4-9B", "GLM-4-9B_torch_dist")


def test_a_dataset_downloaded_with_hf_download_is_a_dataset(tree):
    cat = load(tree, {"tests/test_d.py": REG + dedent('''
        def prepare():
            exec_command("hf download org/gsm8k --repo-type dataset --local-dir /root/datasets/gsm8k")
        ''').lstrip("\n")})
    assert cat.requirement("gsm8k") == Requirement("dataset", "gsm8k", "org/gsm8k", "/root/datasets/gsm8k")


def test_options_before_the_repo_id_do_not_hide_the_model(tree):
    cat = load(tree, {"tests/test_o.py": REG + dedent('''
        def prepare():
            exec_command("hf download --local-dir /root/models/Qwen3-8B Qwen/Qwen3-8B")
            exec_command("hf download --quiet --repo-type=dataset --include *.json *.parquet --local-dir /root/datasets/gsm8k -- org/gsm8k")
        ''').lstrip("\n")})
    assert cat.requirement("Qwen3-8B") == Requirement("model", "Qwen3-8B", "Qwen/Qwen3-8B", "/root/models/Qwen3-8B")
    assert cat.requirement("gsm8k") == Requirement("dataset", "gsm8k", "org/gsm8k", "/root/datasets/gsm8k",
                                                   params=(("include", "*.json *.parquet"),))
    assert cat.tests[0].unresolved == ()


def test_a_download_s_revision_and_file_filters_are_part_of_its_requirement(tree):
    cat = load(tree, {"tests/test_r.py": REG + dedent('''
        def prepare():
            exec_command("hf download Qwen/Qwen3-0.6B --revision v1.0 --include '*.safetensors' config.json "
                         "--exclude '*.bin' --local-dir /root/models/Qwen3-0.6B")
        ''').lstrip("\n")})
    assert cat.requirement("Qwen3-0.6B") == Requirement(
        "model", "Qwen3-0.6B", "Qwen/Qwen3-0.6B", "/root/models/Qwen3-0.6B",
        params=(("exclude", "*.bin"), ("include", "*.safetensors config.json"), ("revision", "v1.0")))


def test_file_names_after_the_repo_id_are_part_of_the_requirement_and_replace_its_filters(tree):
    """``hf download org/m config.json`` fetches that file only (hf then ignores --include/--exclude)."""
    cat = load(tree, {"tests/test_f.py": REG + dedent('''
        def prepare():
            exec_command("hf download Qwen/Qwen3-0.6B config.json tokenizer.json --include '*.bin' "
                         "--revision v1.0 --local-dir /root/models/Qwen3-0.6B")
        ''').lstrip("\n")})
    assert cat.requirement("Qwen3-0.6B") == Requirement(
        "model", "Qwen3-0.6B", "Qwen/Qwen3-0.6B", "/root/models/Qwen3-0.6B",
        params=(("files", "config.json tokenizer.json"), ("revision", "v1.0")))


def test_one_folder_downloaded_at_two_revisions_is_a_problem_on_the_call_s_line(tree):
    pinned = REG + "def prepare():\n    exec_command('hf download Qwen/Qwen3-0.6B --revision {} --local-dir /root/models/Qwen3-0.6B')\n"
    cat = load(tree, {"tests/test_a.py": pinned.format("v1.0"), "tests/test_b.py": pinned.format("main")})
    assert [str(p) for p in cat.problems] == [
        "tests/test_b.py:3: prepare: model 'Qwen3-0.6B' is Qwen/Qwen3-0.6B --revision main at /root/models/Qwen3-0.6B "
        "here but model Qwen/Qwen3-0.6B --revision v1.0 at /root/models/Qwen3-0.6B in tests/test_a.py; use one source "
        "(and revision) per folder or declare it in assets/models.yaml"]


def test_a_declared_model_s_revision_reaches_its_requirement(tree, tmp_path):
    specs = specs_with(tmp_path, models={"Qwen3-0.6B": ModelSpec("Qwen3-0.6B", "Qwen/Qwen3-0.6B",
                                                                 "/root/models/Qwen3-0.6B", "v2")})
    cat = load(tree, {"tests/test_grpo.py": GRPO}, specs)
    assert cat.requirement("Qwen3-0.6B").params == (("revision", "v2"),)


def test_what_cannot_be_resolved_is_listed_per_test_without_a_problem(tree):
    cat = load(tree, {"tests/test_glm5.py": REG + dedent('''
        def prepare(args=None):
            hf_download_dataset(f"{args.model_org}/GLM-5")
            exec_command(f"hf download {get_org()}/X --local-dir /root/models/X")
            exec_command("hf download org/Y")
            convert_checkpoint(model_name=MODEL, megatron_model_type="glm5", num_gpus_per_node=8)
            convert_checkpoint(model_name="Z")
        ''').lstrip("\n")})
    assert cat.problems == ()
    (t,) = cat.tests
    assert t.requirements == ()
    assert t.unresolved == (
        "unresolved: {args.model_org}/GLM-5 (hf_download_dataset, line 3)",
        "unresolved: hf download {get_org()}/X --local-dir /root/models/X (hf download, line 4)",
        "unresolved: hf download org/Y (hf download without --local-dir: where it lands is unknown, line 5)",
        "unresolved: {MODEL} (convert_checkpoint model_name, line 6)",
        "unresolved: {megatron_model_type, num_gpus_per_node} (convert_checkpoint: missing arguments, line 7)",
    )


def test_identical_conversions_across_tests_collapse_into_one_requirement(tree):
    cat = load(tree, {"tests/test_a.py": GRPO, "tests/test_b.py": GRPO.replace("dapo-math-17k", "gsm8k")})
    conversions = [r for r in cat.requirements if r.kind == "conversion"]
    assert [r.key for r in conversions] == ["Qwen3-0.6B_torch_dist"]
    assert {t.requirements[-1] for t in cat.tests} == {"Qwen3-0.6B_torch_dist"}


def test_conversions_of_one_model_into_different_folders_get_distinct_suffixed_keys(tree):
    other = GRPO.replace("NUM_GPUS = 4", "NUM_GPUS = 8").replace('dir_dst="/root/models"', 'dir_dst="/dev/shm"')
    cat = load(tree, {"tests/test_a.py": GRPO, "tests/test_b.py": other})
    assert cat.problems == ()
    keys = sorted(r.key for r in cat.requirements if r.kind == "conversion")
    assert len(keys) == 2 and all(k.startswith("Qwen3-0.6B_torch_dist-") and len(k) == len("Qwen3-0.6B_torch_dist-") + 6
                                  for k in keys)
    assert {t.requirements[-1] for t in cat.tests} == set(keys)


def test_two_conversions_into_one_folder_with_other_parameters_are_a_problem_on_the_call_s_line(tree):
    other = GRPO.replace('megatron_model_type="qwen3-0.6B"', 'megatron_model_type="qwen3-1.7B"')
    cat = load(tree, {"tests/test_a.py": GRPO, "tests/test_b.py": other})
    (problem,) = cat.problems
    assert str(problem).startswith("tests/test_b.py:9: convert_checkpoint: converts into /root/models/Qwen3-0.6B_torch_dist"
                                   " like tests/test_a.py but with other parameters "
                                   "(megatron_model_type='qwen3-1.7B' vs 'qwen3-0.6B')")
    assert "give one of them another dir_dst" in str(problem)


def test_the_gpu_count_of_a_conversion_alone_does_not_make_another_checkpoint(tree):
    """num_gpus_per_node is torchrun's process count: the framework reuses the folder whoever converted it."""
    cat = load(tree, {"tests/test_a.py": GRPO, "tests/test_b.py": GRPO.replace("NUM_GPUS = 4", "NUM_GPUS = 8")})
    assert cat.problems == ()
    assert [r.key for r in cat.requirements if r.kind == "conversion"] == ["Qwen3-0.6B_torch_dist"]


def test_a_merged_conversion_launches_with_the_most_gpus_any_of_its_tests_asks_whichever_sorts_first(tree):
    """The build's argv and GPU request follow the set of tests, not which of them sorts first."""
    eight, two = GRPO.replace("NUM_GPUS = 4", "NUM_GPUS = 8"), GRPO.replace("NUM_GPUS = 4", "NUM_GPUS = 2")
    for files in ({"tests/test_a.py": GRPO, "tests/test_b.py": eight, "tests/test_c.py": two},
                  {"tests/test_a.py": two, "tests/test_b.py": GRPO, "tests/test_c.py": eight}):
        params = dict(load(tree, files).requirement("Qwen3-0.6B_torch_dist").params)
        assert params["num_gpus_per_node"] == "8", files


def test_multinode_alone_does_not_make_another_checkpoint(tree):
    multi = GRPO.replace('dir_dst="/root/models")', 'dir_dst="/root/models", multinode=True)')
    cat = load(tree, {"tests/test_a.py": GRPO, "tests/test_b.py": multi})
    assert cat.problems == ()
    assert [r.key for r in cat.requirements if r.kind == "conversion"] == ["Qwen3-0.6B_torch_dist"]
    assert dict(cat.requirement("Qwen3-0.6B_torch_dist").params)["multinode"] == "True"


def test_hf_checkpoint_makes_the_conversion_depend_on_that_model(tree):
    cat = load(tree, {"tests/test_h.py": REG + dedent('''
        def prepare():
            exec_command("hf download org/Base --local-dir /root/models/Base")
            convert_checkpoint("Tuned", "x", 2, hf_checkpoint="/root/models/Base")
        ''').lstrip("\n")})
    assert cat.requirement("Tuned_torch_dist").depends_on == ("Base",)


def test_declared_models_override_inferred_sources_and_paths(tree, tmp_path):
    specs = specs_with(tmp_path, models={"Qwen3-0.6B": ModelSpec("Qwen3-0.6B", "mirror/Qwen3-0.6B", "/root/models/Qwen3-0.6B")},
                       datasets={"dapo-math-17k": ModelSpec("dapo-math-17k", "mirror/dapo", "/data/dapo")})
    cat = load(tree, {"tests/test_grpo.py": GRPO}, specs)
    assert cat.requirement("Qwen3-0.6B").source == "mirror/Qwen3-0.6B"
    assert (cat.requirement("dapo-math-17k").source, cat.requirement("dapo-math-17k").path) == ("mirror/dapo", "/data/dapo")


def test_declared_requirements_fill_what_inference_misses(tree, tmp_path):
    specs = specs_with(tmp_path, models={"GLM-5": ModelSpec("GLM-5", "zai/GLM-5", "/root/models/GLM-5")})
    cat = load(tree, {"tests/e2e/test_glm5.py": REG + "def prepare():\n    hf_download_dataset(f'{ORG}/x')\n"}, specs,
               requirements={"tests/e2e/test_glm5*": ("GLM-5",)})
    (t,) = cat.tests
    assert t.requirements == ("GLM-5",)
    assert t.unresolved == ("unresolved: {ORG}/x (hf_download_dataset, line 3)",)
    assert cat.requirement("GLM-5").source == "zai/GLM-5"


def test_unknown_declared_keys_and_globs_matching_nothing_are_problems(tree, tmp_path):
    cat = load(tree, {"tests/test_grpo.py": GRPO}, specs_with(tmp_path),
               requirements={"tests/test_grpo.py": ("nope",), "tests/gone/*": ("Qwen3-0.6B",)})
    assert [str(p) for p in cat.problems] == [
        f"{tmp_path}/repos.yaml:1: repos.fw.requirements: tests/test_grpo.py: unknown requirement 'nope'; "
        "declare it in assets/models.yaml or datasets.yaml",
        f"{tmp_path}/repos.yaml:1: repos.fw.requirements: tests/gone/*: matches no test id; fix or remove the glob",
    ]


def test_a_conversion_of_a_model_nothing_downloads_is_a_problem_at_its_line_and_no_requirement(tree):
    """Nothing would build its model: the conversion failed at night, and its model dependency broke the
    Dagster asset graph (tests/defs/test_definitions.py)."""
    cat = load(tree, {"tests/test_c.py": REG + "def prepare():\n    hf_download_dataset('org/D')\n"
                                               "    convert_checkpoint('M', 'x', 8)\n    convert_checkpoint('D', 'x', 8)\n"})
    (t,) = cat.tests
    assert t.requirements == ("D",) and [r.key for r in cat.requirements] == ["D"]
    assert [str(p) for p in cat.problems] == [
        "tests/test_c.py:4: convert_checkpoint: converts model 'M', which is neither downloaded in prepare() nor "
        "declared in assets/models.yaml; download it in prepare() (hf download ... --local-dir /root/models/M) or "
        "declare it in assets/models.yaml",
        "tests/test_c.py:5: convert_checkpoint: converts model 'D', which is a dataset, not a model; download it "
        "in prepare() (hf download ... --local-dir /root/models/D) or declare it in assets/models.yaml"]


def test_one_folder_downloaded_from_two_sources_is_a_problem(tree):
    other = GRPO.replace('MODEL_ORG = "Qwen"', 'MODEL_ORG = "Fork"')
    cat = load(tree, {"tests/test_a.py": GRPO, "tests/test_b.py": other})
    assert [str(p) for p in cat.problems] == [
        "tests/test_b.py:7: prepare: model 'Qwen3-0.6B' is Fork/Qwen3-0.6B at /root/models/Qwen3-0.6B here but model "
        "Qwen/Qwen3-0.6B at /root/models/Qwen3-0.6B in tests/test_a.py; use one source (and revision) per "
        "folder or declare it in assets/models.yaml"]


def test_a_download_folder_that_cannot_be_a_key_is_a_problem(tree):
    cat = load(tree, {"tests/test_k.py": REG + "def prepare():\n    exec_command('hf download o/m --local-dir \"/root/models/a b\"')\n"})
    assert [str(p) for p in cat.problems] == [
        "tests/test_k.py:3: prepare: download folder '/root/models/a b': its name contains whitespace ' '; a download "
        "folder's name may only use ASCII letters, digits and ._-+=@ (it names the cached input); fix prepare()"]


def test_files_with_the_same_prepare_each_get_their_own_problems_and_requirements(tree):
    """Files sharing one prepare() share one inferred Needs; what it gives is worked out once, but every
    problem still names each file, and every test gets the keys and unresolved notes."""
    shared = REG + dedent('''
        def prepare():
            exec_command('hf download o/m --local-dir "/root/models/a b"')
            exec_command("hf download Fork/Qwen3-0.6B --local-dir /root/models/Qwen3-0.6B")
            convert_checkpoint("Qwen3-0.6B", "qwen3", 8, dir_dst="/root/models")
            hf_download_dataset(f"{ORG}/x")
        ''').lstrip("\n")
    files = {"tests/test_a.py": GRPO, "tests/test_b.py": shared, "tests/test_c.py": shared, "tests/test_d.py": shared}
    cat = load(tree, files)
    for path in ("tests/test_b.py", "tests/test_c.py", "tests/test_d.py"):
        assert [(p.line, p.message.split(";")[0]) for p in cat.problems if p.path == path] == [
            (3, "download folder '/root/models/a b': its name contains whitespace ' '"),
            (4, "model 'Qwen3-0.6B' is Fork/Qwen3-0.6B at /root/models/Qwen3-0.6B here but model Qwen/Qwen3-0.6B at "
                "/root/models/Qwen3-0.6B in tests/test_a.py"),
            (5, "converts into /root/models/Qwen3-0.6B_torch_dist like tests/test_a.py but with other parameters "
                "(megatron_model_type='qwen3' vs 'qwen3-0.6B')")], path
    by_path = {t.path: t for t in cat.tests}
    for path in ("tests/test_c.py", "tests/test_d.py"):
        assert (by_path[path].requirements, by_path[path].unresolved) == (
            by_path["tests/test_b.py"].requirements, by_path["tests/test_b.py"].unresolved)
    assert by_path["tests/test_b.py"].requirements == ("Qwen3-0.6B", "Qwen3-0.6B_torch_dist")
    assert by_path["tests/test_b.py"].unresolved == ("unresolved: {ORG}/x (hf_download_dataset, line 6)",)
