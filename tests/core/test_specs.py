"""assets/ specs: the real files load; mistakes name file, line and key."""

from __future__ import annotations

import shutil
import textwrap

import pytest

from pipelines.core.model import CatalogError
from pipelines.core.specs import load_specs


def test_the_shipped_specs_load_with_a_local_default_and_a_production_h200_pool(project_root):
    specs = load_specs(project_root / "assets")
    assert specs.deployment().launcher == "local"
    prod = specs.deployment("production")
    assert prod.launcher == "kubernetes"
    (h200,) = prod.pools
    assert (h200.nodes, h200.gpus_per_node) == (4, 8)
    assert specs.repo().path == project_root / "examples" / "minirl"
    assert specs.conversion is not None and "{output}" in specs.conversion.command


def _copy(project_root, tmp_path):
    d = tmp_path / "assets"
    shutil.copytree(project_root / "assets", d)
    return d


def test_a_wrong_type_names_file_line_and_key(project_root, tmp_path):
    d = _copy(project_root, tmp_path)
    (d / "cluster.yaml").write_text(textwrap.dedent("""\
        default: local
        deployments:
          local:
            launcher: local
            pools:
              h200: {nodes: two, gpus_per_node: 8}
    """))
    with pytest.raises(CatalogError) as exc:
        load_specs(d)
    assert f"{d / 'cluster.yaml'}:6: deployments.local.pools.h200.nodes: expected int, got str 'two'" in str(exc.value)


def test_an_unknown_deployment_lists_the_known_ones(project_root):
    with pytest.raises(CatalogError, match=r"unknown deployment 'staging'; known: \['local', 'production'\]"):
        load_specs(project_root / "assets").deployment("staging")


def test_a_yaml_syntax_error_names_the_line(project_root, tmp_path):
    d = _copy(project_root, tmp_path)
    (d / "repos.yaml").write_text("repos:\n  a: [unclosed\n")
    with pytest.raises(CatalogError, match=r"repos.yaml:3: yaml:"):
        load_specs(d)


def test_a_missing_assets_folder_says_where_to_point(tmp_path):
    with pytest.raises(CatalogError, match=r"repos.yaml:1: file: cannot be read .*NIGHTLY_ASSETS_DIR"):
        load_specs(tmp_path / "nowhere")


def test_env_placeholders_and_requirement_lists_are_checked_on_load(project_root, tmp_path):
    d = _copy(project_root, tmp_path)
    (d / "repos.yaml").write_text(textwrap.dedent("""\
        repos:
          fw:
            path: .
            env:
              CFG: '{"a": 1}'
              ROOT: "{cahce}"
              OK: "{cache}/x and {{literal}}"
            requirements:
              "tests/*": Qwen3-0.6B
    """))
    with pytest.raises(CatalogError) as exc:
        load_specs(d)
    text = str(exc.value)
    assert ':5: repos.fw.env.CFG: unknown placeholder {"a"}' in text
    assert ":6: repos.fw.env.ROOT: unknown placeholder {cahce}; use {cache}, {repo}, {home}, {hub}" in text
    assert "repos.fw.env.OK" not in text
    assert ":9: repos.fw.requirements.tests/*: expected a list of requirement keys, got 'Qwen3-0.6B'" in text
