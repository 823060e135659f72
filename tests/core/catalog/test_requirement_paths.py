"""A test's download or conversion the cache could never build is a catalog problem at its line,
not an ``infra_error`` at night (pipelines.core.catalog.requirements)."""

from __future__ import annotations

import argparse
import textwrap
from pathlib import Path

import pytest

from pipelines.cli import catalog as catalog_cli
from pipelines.core.catalog.requirements import cache_path_problem, hub_id_problem


@pytest.fixture(autouse=True)
def home(tmp_path_factory, monkeypatch) -> Path:
    path = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("NIGHTLY_HOME", str(path))
    return path


def catalog(repo: Path, prepare: str) -> int:
    """``nightly catalog --strict --repo REPO`` over one test whose prepare() is ``prepare``."""
    test = repo / "tests/e2e/test_x.py"
    test.parent.mkdir(parents=True, exist_ok=True)
    test.write_text('register_cuda_ci(10, "stage-b-2-gpu-h200", labels=["x"])\n'
                    "def prepare():\n" + textwrap.indent(textwrap.dedent(prepare).strip("\n"), "    ") + "\n")
    parser = argparse.ArgumentParser(prog="nightly")
    catalog_cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["catalog", "--strict", "--repo", str(repo)])
    return args.func(args)


@pytest.mark.parametrize(("prepare", "said"), [
    ('exec_command("hf download minirl/tiny-lm --local-dir /root/models/../../../tmp/rv_escape")',
     "tests/e2e/test_x.py:3: prepare: model 'rv_escape': download folder '/root/models/../../../tmp/rv_escape' is "
     "not a usable path for a cached asset"),
    ('exec_command("hf download minirl/tiny-lm --local-dir models/tiny-lm")',
     "tests/e2e/test_x.py:3: prepare: model 'tiny-lm': download folder 'models/tiny-lm' is not a usable path"),
    # a trailing slash typo: the build would remove /root/models, every cached model and checkpoint in it
    ('exec_command("hf download minirl/tiny-lm-wide --local-dir /root/models/")',
     "tests/e2e/test_x.py:3: prepare: model 'models': download folder '/root/models' holds other cached inputs: "
     "building into it would delete every one of them; use a folder of its own inside it"),
    ('exec_command("hf download minirl/toy-math --repo-type dataset --local-dir /dev/shm")',
     "tests/e2e/test_x.py:3: prepare: dataset 'shm': download folder '/dev/shm' holds other cached inputs"),
    ('hf_download_dataset("../../etc/passwd")',
     "tests/e2e/test_x.py:3: prepare: dataset 'passwd': '../../etc/passwd' is not a Hub id (org/name)"),
    ('exec_command("hf download --include=x minirl/tiny-lm --local-dir /root/models/tiny-lm")\n'
     'convert_checkpoint("tiny-lm", "gpt", 1, dir_dst="/../../tmp")',
     "tests/e2e/test_x.py:4: convert_checkpoint: output folder '/../../tmp/tiny-lm_torch_dist' is not a usable path"),
    # what could pass for an option is refused here, as models.yaml refuses it and the build would
    ('exec_command("hf download --revision=--help minirl/tiny-lm --local-dir /root/models/x")',
     "tests/e2e/test_x.py:3: prepare: model 'x': --revision '--help' is not a revision (a branch, tag or commit); "
     "fix prepare() or declare it in assets/models.yaml"),
    ('exec_command("hf download minirl/tiny-lm --include=-x --local-dir /root/models/x")',
     "tests/e2e/test_x.py:3: prepare: model 'x': --include '-x' is not a file pattern"),
    ('exec_command("hf download minirl/tiny-lm --local-dir /root/models/x -- --quiet")',
     "tests/e2e/test_x.py:3: prepare: model 'x': '--quiet' is not a file name"),
    # a shell's `;` is no part of a folder name, and said so as a folder, not as a test id's variant
    ('exec_command("hf download minirl/tiny-lm --local-dir /root/models/tiny-lm; touch /tmp/x")',
     "tests/e2e/test_x.py:3: prepare: download folder '/root/models/tiny-lm;': its name contains character ';'; "
     "a download folder's name may only use ASCII letters, digits and ._-+=@ (it names the cached input)"),
    ('exec_command("hf download minirl/tiny-lm --local-dir /root/models/tiny-lm")\n'
     'convert_checkpoint("tiny-lm", "gpt", 1, extra_args="--note \'unclosed")',
     "tests/e2e/test_x.py:4: convert_checkpoint: extra_args \"--note 'unclosed\" cannot be split into words as a "
     "shell would (No closing quotation); fix its quotes"),
    ('convert_checkpoint("tiny lm", "gpt", 1)',
     "tests/e2e/test_x.py:3: convert_checkpoint: model name 'tiny lm' contains whitespace ' '; a model name may "
     "only use ASCII letters, digits and ._-+=@ (it names the converted checkpoint's folder)"),
])
def test_a_download_or_conversion_outside_the_cache_is_a_problem_at_its_line(tmp_path, capsys, prepare, said):
    code = catalog(tmp_path, prepare)
    err = capsys.readouterr().err
    assert code == 1, err  # --strict: problems fail the catalog, as they stop a night (exit 3)
    assert said in err


def test_the_usual_downloads_and_conversions_are_no_problem(tmp_path, capsys):
    code = catalog(tmp_path, """
        exec_command("hf download minirl/tiny-lm --local-dir /root/models/tiny-lm")
        hf_download_dataset("minirl/math-toy")
        convert_checkpoint("tiny-lm", "gpt", 1, dir_dst="/dev/shm")
    """)
    assert code == 0, capsys.readouterr().err


def test_a_declared_revision_replaces_the_inferred_one_and_is_no_problem(tmp_path, capsys, monkeypatch, project_root):
    """models.yaml's entry replaces what prepare() says (source, folder, revision): its own check is the
    specs' (at load), so the inferred revision is not held against the test."""
    import shutil

    assets = tmp_path / "assets"
    shutil.copytree(project_root / "assets", assets)
    (assets / "models.yaml").write_text("models:\n  x: {source: minirl/tiny-lm, path: /root/models/x, revision: v1}\n")
    (assets / "repos.yaml").write_text(f"repos:\n  fw: {{path: {tmp_path / 'repo'}}}\n")  # declared entries: configured repos
    monkeypatch.setenv("NIGHTLY_ASSETS_DIR", str(assets))
    code = catalog(tmp_path / "repo", 'exec_command("hf download --revision=--help minirl/tiny-lm --local-dir /root/models/x")')
    assert code == 0, capsys.readouterr().err


def test_the_option_rule_is_the_one_the_builds_and_models_yaml_apply():
    from pipelines.core.asset_rules import download_option_problem

    for good in ("main", "v1.0", "refs/pr/3", "0" * 40):
        assert download_option_problem("revision", good) is None, good
    for bad in ("--help", "-x", "", "a b"):
        assert download_option_problem("revision", bad), bad
    assert download_option_problem("include", "*.json *.safetensors") is None
    assert download_option_problem("exclude", "*.bin --force-download")


def test_the_rule_is_the_one_the_builds_apply():
    assert cache_path_problem("/root/models/x") is None and cache_path_problem("/dev/shm/x_torch_dist") is None
    for bad in ("/root/../etc", "/root", "/", "models/x", "", "/root/models", "/root/models/", "/root/datasets",
                "/dev", "/dev/shm/", "//root//models"):
        assert cache_path_problem(bad), bad
    assert hub_id_problem("org/name") is None
    for bad in ("--local-dir", "org/../x", "../../etc/passwd", "name"):
        assert hub_id_problem(bad), bad


def test_a_model_download_named_like_a_declared_dataset_is_a_problem_at_its_line(tmp_path, capsys, monkeypatch,
                                                                                  project_root):
    """datasets.yaml declares toy-math: a model downloaded into /root/models/toy-math was silently replaced by
    that dataset (the test then found a dataset where its model should be, a test failure)."""
    import shutil

    assets = tmp_path / "assets"
    shutil.copytree(project_root / "assets", assets)
    (assets / "repos.yaml").write_text(f"repos:\n  fw: {{path: {tmp_path / 'repo'}}}\n")
    monkeypatch.setenv("NIGHTLY_ASSETS_DIR", str(assets))
    code = catalog(tmp_path / "repo", """
        exec_command("hf download minirl/tiny-lm --local-dir /root/models/toy-math")
        hf_download_dataset("minirl/toy-math")
    """)
    err = capsys.readouterr().err
    assert code == 1, err
    assert ("tests/e2e/test_x.py:3: prepare: model download folder '/root/models/toy-math' has the name of the "
            "dataset 'toy-math' declared in assets/datasets.yaml (/root/datasets/toy-math); a model and a dataset "
            "may not share a name") in err


@pytest.mark.parametrize(("download", "said"), [
    ("/root/models/tiny-lm_torch_dist", "has that folder"),
    ("/root/ckpt/tiny-lm_torch_dist", "has the name of its folder /root/models/tiny-lm_torch_dist"),
])
def test_a_download_and_a_conversion_into_one_folder_or_name_are_a_problem_at_the_conversion(tmp_path, capsys,
                                                                                             download, said):
    """The conversion was silently dropped: the download took its folder's name, and the test ran on
    whatever the download fetched."""
    code = catalog(tmp_path, f"""
        exec_command("hf download minirl/tiny-lm_torch_dist --local-dir {download}")
        exec_command("hf download minirl/tiny-lm --local-dir /root/models/tiny-lm")
        convert_checkpoint("tiny-lm", "tiny", 2, dir_dst="/root/models")
    """)
    err = capsys.readouterr().err
    assert code == 1, err
    assert (f"tests/e2e/test_x.py:5: convert_checkpoint: converts into /root/models/tiny-lm_torch_dist, but the "
            f"model download 'tiny-lm_torch_dist' (minirl/tiny-lm_torch_dist at {download}) {said}: one folder, "
            "one input") in err


def test_a_download_into_the_folder_of_one_of_a_models_two_conversions_is_a_problem_at_that_conversion(
        tmp_path, capsys):
    """A model converted into two folders gets hashed conversion keys, which the download's key never
    matched: catalog --strict exited 0 and every night rebuilt both into one folder."""
    code = catalog(tmp_path, """
        exec_command("hf download minirl/tiny-lm --local-dir /root/models/tiny-lm")
        exec_command("hf download minirl/tiny-lm --local-dir /root/models/tiny-lm_torch_dist")
        convert_checkpoint("tiny-lm", "tiny", 2, dir_dst="/root/models")
        convert_checkpoint("tiny-lm", "tiny", 2, dir_dst="/root/ckpt")
    """)
    err = capsys.readouterr().err
    assert code == 1, err
    assert ("tests/e2e/test_x.py:5: convert_checkpoint: converts into /root/models/tiny-lm_torch_dist, but the "
            "model download 'tiny-lm_torch_dist' (minirl/tiny-lm at /root/models/tiny-lm_torch_dist) has that "
            "folder: one folder, one input") in err
    assert "tests/e2e/test_x.py:6:" not in err, "the conversion into /root/ckpt has a folder of its own"
