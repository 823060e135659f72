"""assets/ specs: the real files load; mistakes name file, line and key."""

from __future__ import annotations

import shutil
import textwrap

import pytest

from pipelines.core.model import CatalogError
from pipelines.core.specs import load_specs
from pipelines.core.specs_schema import _root


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
    assert f"{d / 'cluster.yaml'}:6: deployments.local.pools.h200.nodes: expected a whole number, got text 'two'" in str(exc.value)


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


def test_a_nul_in_an_env_value_is_a_located_error_not_a_crash_at_night(project_root, tmp_path):
    d = _copy(project_root, tmp_path)
    (d / "repos.yaml").write_text('repos:\n  fw:\n    path: .\n    env:\n      OK: "a"\n      BAD: "x\\0y"\n')
    with pytest.raises(CatalogError) as exc:
        load_specs(d)
    text = str(exc.value)
    assert ":6: repos.fw.env.BAD: holds a NUL character (\\0), which no process environment can carry" in text
    assert "env.OK" not in text


@pytest.mark.parametrize("name", ["../../evil", "a/b", ".hidden", "", "my repo"])
def test_a_repo_name_that_cannot_name_its_state_files_is_a_located_error(project_root, tmp_path, name):
    d = _copy(project_root, tmp_path)
    (d / "repos.yaml").write_text(f'default: "{name}"\nrepos:\n  ok-1.x_y: {{path: .}}\n  "{name}":\n    path: .\n')
    with pytest.raises(CatalogError) as exc:
        load_specs(d)
    text = str(exc.value)
    assert f"repos.yaml:4: repos.{name}: {name!r} is not a usable repo name; use letters, digits" in text
    assert "ok-1.x_y" not in text.partition("use letters")[0]


def _errors(project_root, tmp_path, name: str, text: str) -> str:
    d = _copy(project_root, tmp_path)
    (d / name).write_text(textwrap.dedent(text))
    with pytest.raises(CatalogError) as exc:
        load_specs(d)
    return str(exc.value)


def test_an_unknown_key_is_rejected_with_the_closest_known_one(project_root, tmp_path):
    text = _errors(project_root, tmp_path, "repos.yaml", """\
        repos:
          fw:
            path: .
            timout: {floor_s: 60}
    """)
    assert ":4: repos.fw.timout: unknown key; did you mean 'timeout'?" in text


def test_a_duplicate_key_is_rejected_instead_of_the_last_one_winning(project_root, tmp_path):
    text = _errors(project_root, tmp_path, "repos.yaml", """\
        repos:
          fw:
            path: .
            format: registry
            format: template
    """)
    assert ":5: format: duplicate key (first at line 4); keep one of them" in text


def test_a_yaml_merge_may_override_a_merged_key_without_being_a_duplicate(project_root, tmp_path):
    d = _copy(project_root, tmp_path)
    (d / "repos.yaml").write_text(textwrap.dedent("""\
        base: &base {path: ., format: registry}
        repos:
          fw:
            <<: *base
            format: template
    """).replace("base: &base", "repos_base: &base"))
    with pytest.raises(CatalogError) as exc:  # the anchor's top-level key is unknown, nothing else
        load_specs(d)
    assert [p.field for p in exc.value.problems] == ["repos_base"]


def test_roots_of_numbers_is_a_located_error_not_a_traceback(project_root, tmp_path):
    text = _errors(project_root, tmp_path, "repos.yaml", """\
        repos:
          fw:
            path: .
            roots:
              - tests
              - 2
    """)
    assert ":6: repos.fw.roots.1: expected text, got a whole number 2; quote the value" in text


def test_a_root_leaving_the_repository_is_a_located_error_at_load(project_root, tmp_path):
    """Not a catalog problem at "../../..:1" once the night lists tests (exit 3): the repos.yaml line, exit 2."""
    text = _errors(project_root, tmp_path, "repos.yaml", """\
        repos:
          fw:
            path: .
            roots:
              - ./tests
              - tests/../../..
    """)
    assert ":6: repos.fw.roots.1: 'tests/../../..' leaves the repository; write a folder of the repository" in text
    for fine in (".", "/", "./tests", "test/registered", "a/../tests"):
        assert _root(fine) == fine


def test_a_zero_timeout_floor_and_a_negative_factor_are_rejected(project_root, tmp_path):
    text = _errors(project_root, tmp_path, "repos.yaml", """\
        repos:
          fw:
            path: .
            timeout:
              floor_s: 0
              factor: -1
    """)
    assert ":5: repos.fw.timeout.floor_s: must be > 0, got 0; fix the value" in text
    assert ":6: repos.fw.timeout.factor: must be >= 1, got -1; fix the value" in text


def test_a_default_est_time_above_one_day_is_rejected(project_root, tmp_path):
    text = _errors(project_root, tmp_path, "repos.yaml", """\
        repos:
          fw: {path: ., default_est_time: 1000000000000}
    """)
    assert ":2: repos.fw.default_est_time: must be <= 86400, got 1000000000000" in text


def test_an_unknown_policy_is_caught_on_load_not_after_the_night(project_root, tmp_path):
    text = _errors(project_root, tmp_path, "repos.yaml", """\
        repos:
          fw:
            path: .
            calibration: {policy: bogus}
    """)
    assert ":4: repos.fw.calibration.policy: must be one of 'bucket125', 'p90' or 'median', got 'bogus'" in text


def test_a_parameter_of_another_policy_is_rejected(project_root, tmp_path):
    text = _errors(project_root, tmp_path, "repos.yaml", """\
        repos:
          fw:
            path: .
            calibration: {policy: p90, factor: 1.5}
    """)
    assert ":4: repos.fw.calibration: factor is not a parameter of policy 'p90'" in text


def test_a_bogus_format_is_rejected(project_root, tmp_path):
    text = _errors(project_root, tmp_path, "repos.yaml", """\
        repos:
          fw: {path: ., format: yaml}
    """)
    assert ":2: repos.fw.format: must be one of 'registry', 'template' or 'auto', got 'yaml'" in text


def test_node_counts_must_be_positive(project_root, tmp_path):
    text = _errors(project_root, tmp_path, "cluster.yaml", """\
        default: local
        deployments:
          local:
            pools:
              h200: {nodes: 0, gpus_per_node: -8}
    """)
    assert ":5: deployments.local.pools.h200.nodes: must be > 0, got 0" in text
    assert ":5: deployments.local.pools.h200.gpus_per_node: must be > 0, got -8" in text


def test_one_hardware_claimed_by_two_pools_is_rejected(project_root, tmp_path):
    text = _errors(project_root, tmp_path, "cluster.yaml", """\
        default: local
        deployments:
          local:
            pools:
              h200: {nodes: 1, gpus_per_node: 8}
              big: {nodes: 1, gpus_per_node: 8, hardware: [h200, h100]}
    """)
    assert ":3: deployments.local: pools 'h200' and 'big' both run hardware 'h200'" in text


def test_a_hardware_alias_must_look_like_a_suite_hardware_name(project_root, tmp_path):
    text = _errors(project_root, tmp_path, "cluster.yaml", """\
        default: local
        deployments:
          local:
            pools:
              h200:
                nodes: 1
                gpus_per_node: 8
                hardware: [H200 SXM]
    """)
    assert ":8: deployments.local.pools.h200.hardware.0: 'H200 SXM' does not match" in text
    assert "use the hardware part of suite names" in text


def test_the_default_deployment_must_exist(project_root, tmp_path):
    text = _errors(project_root, tmp_path, "cluster.yaml", """\
        default: staging
        deployments:
          local:
            pools:
              h200: {nodes: 1, gpus_per_node: 8}
    """)
    assert ":1: cluster: default deployment 'staging' is not under deployments:; use one of ['local']" in text


def test_an_image_digest_must_be_a_sha256(project_root, tmp_path):
    text = _errors(project_root, tmp_path, "cluster.yaml", """\
        deployments:
          local:
            pools:
              h200: {nodes: 1, gpus_per_node: 8, image_digest: latest}
    """)
    assert ":4: deployments.local.pools.h200.image_digest: 'latest' does not match" in text


def test_a_model_may_pin_a_revision_and_an_option_in_its_place_names_the_line(project_root, tmp_path):
    d = _copy(project_root, tmp_path)
    (d / "models.yaml").write_text("models:\n  m: {source: org/m, path: /root/models/m, revision: v1.0}\n")
    assert load_specs(d).models["m"].revision == "v1.0"
    text = _errors(project_root, tmp_path / "b", "models.yaml", """\
        models:
          m: {source: org/m, path: /root/models/m, revision: --force-download}
    """)
    assert ":2: models.m.revision: '--force-download' does not match" in text


def test_a_declared_source_or_path_the_cache_could_never_build_names_the_line(project_root, tmp_path):
    # a declared entry replaces what prepare() says, so the catalog's check of inferred downloads never saw
    # it: without this, the night failed every test needing it at build time (infra_error)
    text = _errors(project_root, tmp_path, "models.yaml", """\
        models:
          tiny-lm: {source: 'minirl/../tiny-lm', path: /root/models/tiny-lm}
          tiny-lm-wide: {source: minirl/tiny-lm-wide, path: models/tiny-lm-wide}
    """)
    assert ":2: models.tiny-lm.source: 'minirl/../tiny-lm' is not a Hub id (org/name)" in text
    assert ":3: models.tiny-lm-wide.path: 'models/tiny-lm-wide' is not a usable path for a cached asset" in text
    text = _errors(project_root, tmp_path / "d", "datasets.yaml", """\
        datasets:
          toy: {source: --local-dir, path: /root/../etc}
    """)
    assert ":2: datasets.toy.source: '--local-dir' is not a Hub id" in text
    assert ":2: datasets.toy.path: '/root/../etc' is not a usable path" in text
    # the folder of every model: a download there would delete them all when it is built
    text = _errors(project_root, tmp_path / "e", "models.yaml", """\
        models:
          tiny-lm: {source: minirl/tiny-lm, path: /root/models/tiny-lm}
          tiny-lm-wide: {source: minirl/tiny-lm-wide, path: /root/models}
    """)
    assert ":3: models.tiny-lm-wide.path: '/root/models' holds other cached inputs" in text


def test_a_deployment_s_cache_settings_reach_the_night_s_cache_and_bad_ones_name_the_line(project_root, tmp_path):
    from pipelines.night import Night, NightSettings

    d = _copy(project_root, tmp_path)
    text = (d / "cluster.yaml").read_text().replace(
        "    skip_hardware: [mi300]\n    pools:\n      h200: {nodes: 1, gpus_per_node: 8}",
        "    skip_hardware: [mi300]\n    cache: {verify: size, build_timeout_s: 600}\n    pools:\n"
        "      h200: {nodes: 1, gpus_per_node: 8}", 1)
    (d / "cluster.yaml").write_text(text)
    cache = Night(NightSettings(home=tmp_path / "home", assets_dir=d)).cache
    assert (cache.verify, cache.build_timeout_s) == ("size", 600)
    assert Night(NightSettings(home=tmp_path / "home", assets_dir=project_root / "assets")).cache.verify == "full"
    bad = _errors(project_root, tmp_path / "b", "cluster.yaml", """\
        deployments:
          local:
            cache: {verify: sizes}
            pools:
              h200: {nodes: 1, gpus_per_node: 8}
    """)
    assert ":3: deployments.local.cache.verify: " in bad and "'sizes'" in bad


def test_an_env_name_kubernetes_or_a_shell_would_refuse_is_a_located_error(project_root, tmp_path):
    text = _errors(project_root, tmp_path, "repos.yaml", """\
        repos:
          fw:
            path: .
            env:
              "2ND STAGE": "1"
              9LIVES: "1"
              GOOD_NAME_2: "{cache}"
              _PRIVATE: x
    """)
    assert (":5: repos.fw.env.2ND STAGE: '2ND STAGE' is not a valid environment variable name; "
            "use ASCII letters, digits and '_', not starting with a digit") in text
    assert ":6: repos.fw.env.9LIVES: '9LIVES' is not a valid environment variable name" in text
    assert "GOOD_NAME_2" not in text and "_PRIVATE" not in text


def test_a_conversion_env_name_is_checked_too(project_root, tmp_path):
    text = _errors(project_root, tmp_path, "checkpoints.yaml", """\
        conversion:
          command: ["{python}", convert.py, "{output}"]
          env:
            MY-FLAG: "1"
    """)
    assert ":4: conversion.env.MY-FLAG: 'MY-FLAG' is not a valid environment variable name" in text


def test_a_nul_in_a_conversion_env_value_is_a_located_error(project_root, tmp_path):
    text = _errors(project_root, tmp_path, "checkpoints.yaml", """\
        conversion:
          command: ["{python}", convert.py, "{output}"]
          env:
            MODE: "a\\0b"
    """)
    assert ":4: conversion.env.MODE: " in text and "NUL" in text


@pytest.mark.parametrize(("value", "said"), [
    ("{output}", "{output} is not filled in env (values are passed as written"),
    ('{{"a": 1}}', "'{{' reaches the converter as written"),
])
def test_a_conversion_env_value_written_for_placeholder_filling_is_a_located_error(project_root, tmp_path, value, said):
    """Env values reach the converter as written (no str.format since 2026-12-05): one written for the old
    filling would arrive as that text, silently; it is refused at its line. Plain JSON loads as written."""
    text = _errors(project_root, tmp_path, "checkpoints.yaml", f"""\
        conversion:
          command: ["{{python}}", convert.py, "{{output}}"]
          env:
            MODE: '{value}'
    """)
    assert ":4: conversion.env.MODE: " in text and said in text, text
    from pipelines.core.specs_schema import conversion_env_problem

    assert conversion_env_problem('{"a": {"b": 1}}') is None and conversion_env_problem("{model}") is None


def test_a_misspelt_conversion_placeholder_stops_the_specs_at_its_line(project_root, tmp_path, monkeypatch, capsys):
    """Caught when the specs load (exit 2 before the plan), not after a night downloaded the models."""
    from pipelines.cli import main

    d = _copy(project_root, tmp_path)
    (d / "checkpoints.yaml").write_text(textwrap.dedent("""\
        conversion:
          command: ["{python}", convert.py, --hf, "{model_path}",
                    --save, "{outptu}", "{output.name}", "{{literal}}", "{extra_args}"]
    """))
    monkeypatch.setenv("NIGHTLY_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("NIGHTLY_ASSETS_DIR", str(d))
    assert main(["run", "--list-only"]) == 2
    err = capsys.readouterr().err
    assert (f"{d / 'checkpoints.yaml'}:3: conversion.command.5: unknown placeholder {{outptu}}; use {{python}}, "
            "{model_path}, {output}, {megatron_model_type}, {num_gpus_per_node}, {extra_args}") in err
    assert ":3: conversion.command.6: unknown placeholder {output.name}" in err
    assert "command.7" not in err and "command.8" not in err


def test_a_conversion_env_value_is_plain_text_braces_and_all(project_root, tmp_path):
    d = _copy(project_root, tmp_path)
    (d / "checkpoints.yaml").write_text(textwrap.dedent("""\
        conversion:
          command: ["{python}", convert.py, "{output}"]
          env:
            CFG: '{"a": 1}'
    """))
    assert load_specs(d).conversion.env == {"CFG": '{"a": 1}'}


def test_a_kueue_queue_must_be_a_valid_label_value_and_queue_name(project_root, tmp_path):
    text = _errors(project_root, tmp_path, "cluster.yaml", """\
        deployments:
          local:
            pools:
              h200: {nodes: 1, gpus_per_node: 8, queue: "H200 nightly"}
    """)
    assert ":4: deployments.local.pools.h200.queue: 'H200 nightly' is not a Kueue LocalQueue name" in text


def _pool(project_root, tmp_path, pool: str) -> str:
    """The errors of a cluster.yaml whose one pool (h200, line 4) has the lines ``pool``, from line 5."""
    head = "deployments:\n  local:\n    pools:\n      h200:\n"
    return _errors(project_root, tmp_path, "cluster.yaml", head + textwrap.indent(pool, " " * 8) + "\n")


@pytest.mark.parametrize(("pool", "where", "message"), [
    ("nodes: 1\ngpus_per_node: 8\nnode_selector: {nvidia.com/gpu.product: NVIDIA H200}",
     ":7: deployments.local.pools.h200.node_selector.nvidia.com/gpu.product: ", "'NVIDIA H200' is not a label value"),
    ("nodes: 1\ngpus_per_node: 8\nnode_selector: {nvidia.com/gpu.product: " + "x" * 64 + "}",
     ":7: deployments.local.pools.h200.node_selector.nvidia.com/gpu.product: ", " is not a label value"),
    ("nodes: 1\ngpus_per_node: 8\nnode_selector: {gpu product: H200}",
     ":7: deployments.local.pools.h200.node_selector.gpu product: ", "'gpu product' is not a label key: its name"),
    ("nodes: 1\ngpus_per_node: 8\nnode_selector: {NVIDIA.com/gpu: H200}",
     ":7: deployments.local.pools.h200.node_selector.NVIDIA.com/gpu: ", "its prefix 'NVIDIA.com' must be a DNS subdomain"),
    ("nodes: 1\ngpus_per_node: 8\nnode_selector: {a/b/c: H200}",
     ":7: deployments.local.pools.h200.node_selector.a/b/c: ", "'a/b/c' is not a label key; write [prefix/]name with one '/'"),
    ("nodes: 1\ngpus_per_node: 8\ntolerations:\n  - {key: nvidia.com/gpu, operator: Exist}",
     ":8: deployments.local.pools.h200.tolerations.0.operator: ", "must be one of 'Exists', 'Equal' or '', got 'Exist'"),
    ("nodes: 1\ngpus_per_node: 8\ntolerations:\n  - {key: nvidia.com/gpu, operator: Exists, efect: NoSchedule}",
     ":8: deployments.local.pools.h200.tolerations.0.efect: ", "unknown key; did you mean 'effect'?"),
    ("nodes: 1\ngpus_per_node: 8\ntolerations:\n  - {key: nvidia.com/gpu, operator: Exists, value: present}",
     ":8: deployments.local.pools.h200.tolerations.0: ", "operator Exists takes no value (got 'present')"),
    ("nodes: 1\ngpus_per_node: 8\ntolerations:\n  - {key: nvidia.com/gpu, effect: NoSchedul}",
     ":8: deployments.local.pools.h200.tolerations.0.effect: ", "must be one of 'NoSchedule', 'PreferNoSchedule', 'NoExecute' or '', got 'NoSchedul'"),
    ("nodes: 1\ngpus_per_node: 8\ntolerations:\n  - {key: a, value: b, tolerationSeconds: 30}",
     ":8: deployments.local.pools.h200.tolerations.0: ", "tolerationSeconds needs effect: NoExecute"),
    ("nodes: 1\ngpus_per_node: 8\ntolerations:\n  - {effect: NoSchedule}",
     ":8: deployments.local.pools.h200.tolerations.0: ", "a toleration without key must say operator: Exists"),
])
def test_a_node_selector_or_toleration_kubernetes_refuses_is_a_located_error(project_root, tmp_path, pool, where, message):
    """Each goes into every pod: the API server would refuse the whole night's pods (422), one by one."""
    text = _pool(project_root, tmp_path, pool)
    assert f"cluster.yaml{where}" in text and message in text, text


def test_node_selectors_and_tolerations_kubernetes_takes_load_as_written(project_root, tmp_path):
    d = _copy(project_root, tmp_path)
    (d / "cluster.yaml").write_text(textwrap.dedent("""\
        deployments:
          local:
            pools:
              h200:
                nodes: 1
                gpus_per_node: 8
                node_selector: {nvidia.com/gpu.product: NVIDIA-H200, pool: "", node.kubernetes.io/instance-type: p5en.48xlarge}
                tolerations:
                  - {key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}
                  - {operator: Exists}
                  - {key: dedicated, value: ci_gpu.1, effect: NoExecute, tolerationSeconds: 600}
                  - {key: nvidia.com/gpu, operator: "", value: present, effect: ""}
    """))
    (pool,) = load_specs(d).deployment("local").pools
    assert pool.node_selector == {"nvidia.com/gpu.product": "NVIDIA-H200", "pool": "",
                                  "node.kubernetes.io/instance-type": "p5en.48xlarge"}
    assert pool.tolerations == ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                                {"operator": "Exists"},
                                {"key": "dedicated", "value": "ci_gpu.1", "effect": "NoExecute", "tolerationSeconds": 600},
                                # "" is Equal and every effect, as the API server reads them
                                {"key": "nvidia.com/gpu", "operator": "", "value": "present", "effect": ""})


def test_a_bad_node_selector_stops_the_night_before_any_pod(project_root, tmp_path, monkeypatch, capsys):
    from pipelines.cli import main

    d = _copy(project_root, tmp_path)
    cluster = d / "cluster.yaml"
    cluster.write_text(cluster.read_text().replace("{nvidia.com/gpu.product: NVIDIA-H200}",
                                                   '{nvidia.com/gpu.product: "NVIDIA H200"}'))
    monkeypatch.setenv("NIGHTLY_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("NIGHTLY_ASSETS_DIR", str(d))
    assert main(["run", "--list-only", "--deployment", "production"]) == 2
    err = capsys.readouterr().err
    assert f"{cluster}:30: deployments.production.pools.h200.node_selector.nvidia.com/gpu.product: 'NVIDIA H200'" in err


@pytest.mark.parametrize(("variable", "command", "file", "flag"), [
    ("NIGHTLY_REPO_NAME", ["catalog"], "repos.yaml", "--repo"),
    ("NIGHTLY_DEPLOYMENT", ["run", "--list-only"], "cluster.yaml", "--deployment"),
])
def test_an_unknown_name_from_the_environment_names_the_variable(project_root, tmp_path, monkeypatch, capsys,
                                                                 variable, command, file, flag):
    """The command line never said 'nosuch': the error says which variable did, and what to do about it."""
    from pipelines.cli import main

    monkeypatch.setenv("NIGHTLY_HOME", str(tmp_path))
    monkeypatch.setenv(variable, "nosuch")
    assert main(command) == 2
    err = capsys.readouterr().err
    assert f"{project_root / 'assets' / file}:1: " in err
    assert f"'nosuch' (from ${variable}); known: " in err
    assert f"; unset {variable} or set it to a known one, or pass {flag}" in err


def test_keep_log_nights_reaches_the_night_and_a_bad_one_names_the_line(project_root, tmp_path):
    from pipelines.night import Night, NightSettings

    assert Night(NightSettings(home=tmp_path / "home", assets_dir=project_root / "assets")).deployment.keep_log_nights == 30
    bad = _errors(project_root, tmp_path / "b", "cluster.yaml", """\
        deployments:
          local:
            keep_log_nights: -1
            pools:
              h200: {nodes: 1, gpus_per_node: 8}
    """)
    assert "cluster.yaml:3: deployments.local.keep_log_nights: must be >= 0, got -1; fix the value" in bad
