"""A conversion's recipe: the converter script, the checkout's modules it imports, its argv."""

from __future__ import annotations

from pathlib import Path

from pipelines.core.recipe import converter_files, identity, make_recipe, model_identity

ARGV = (
    "{python}",
    "tools/convert.py",
    "--hf-checkpoint",
    "{model_path}",
    "--save",
    "{output}",
    "--num-gpus",
    "4",
)


def checkout(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    for rel, text in {
        "tools/convert.py": "import sys\nimport numpy\nfrom fw.checkpoint import save\nimport helper\n",
        "tools/helper.py": "def main():\n    from fw import extra  # imported inside a function\n",
        "fw/__init__.py": "",
        "fw/checkpoint.py": "from .model import Params\nfrom . import layout\n",
        "fw/model.py": "import json\n",
        "fw/layout.py": "",
        "fw/extra.py": "",
        "fw/unused.py": "",
        "tests/test_x.py": "import fw.unused\n",
    }.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    return repo


def test_the_script_and_every_checkout_module_it_imports_transitively_are_its_files(tmp_path):
    repo = checkout(tmp_path)
    assert converter_files(repo, ARGV) == [
        "fw/__init__.py",
        "fw/checkpoint.py",
        "fw/extra.py",
        "fw/layout.py",
        "fw/model.py",
        "tools/convert.py",
        "tools/helper.py",
    ]


def test_a_module_run_with_dash_m_and_pythonpath_roots_inside_the_checkout_count(tmp_path):
    repo = checkout(tmp_path)
    (repo / "src" / "conv").mkdir(parents=True)
    (repo / "src" / "conv" / "__init__.py").write_text("")
    (repo / "src" / "conv" / "run.py").write_text("import fw.layout\nimport conv.util\n")
    (repo / "src" / "conv" / "util.py").write_text("")
    argv = ("{python}", "-m", "conv.run", "--save", "{output}")
    assert converter_files(repo, argv) == []  # src/ is not on the path: nothing of the checkout runs
    assert converter_files(repo, argv, pythonpath=f"{repo / 'src'}:/usr/lib/python3/dist-packages") == [
        "fw/__init__.py",
        "fw/layout.py",
        "src/conv/__init__.py",
        "src/conv/run.py",
        "src/conv/util.py",
    ]


def test_the_digest_follows_an_imported_module_and_ignores_files_the_converter_never_imports(tmp_path):
    repo = checkout(tmp_path)
    before = make_recipe(repo, ARGV, {}).digest
    assert make_recipe(repo, ARGV, {}).digest == before, "unchanged checkout, same recipe"
    (repo / "fw" / "unused.py").write_text("changed = True\n")
    (repo / "tests" / "test_x.py").write_text("changed = True\n")
    assert make_recipe(repo, ARGV, {}).digest == before
    (repo / "fw" / "layout.py").write_text("SHARDS = 'row'\n")
    assert make_recipe(repo, ARGV, {}).digest != before


def test_argv_env_and_image_are_part_of_the_recipe(tmp_path):
    repo = checkout(tmp_path)
    base = make_recipe(repo, ARGV, {}).digest
    assert make_recipe(repo, (*ARGV[:-1], "8"), {}).digest != base
    assert make_recipe(repo, ARGV, {"CONVERT_DTYPE": "bf16"}).digest != base
    assert make_recipe(repo, ARGV, {}, image="sha256:" + "1" * 64).digest != base


def test_a_models_identity_is_its_files_digest_or_when_a_pod_built_it():
    assert model_identity({"manifest": {"digest": "abc"}, "built_at": 1}) == "files:abc"
    assert model_identity({"key": "m", "source": "o/m", "built_at": 5.0}) == "built:m|o/m|5.0"
    assert identity("r", "files:abc") != identity("r", "files:abd") != identity("s", "files:abd")
