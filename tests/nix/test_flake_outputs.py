"""flake.nix evaluates, offline, to the application, its apps, a dev shell, the images and checks."""

from __future__ import annotations

import json
import os
import subprocess

import yaml

from tests.nix.conftest import evaluate, needs_nix

pytestmark = needs_nix
X86 = "x86_64-linux"


def test_the_flake_parses(project_root):
    proc = subprocess.run(["nix-instantiate", "--parse", str(project_root / "flake.nix")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_every_output_of_both_systems_evaluates_against_the_recorded_release(project_root):
    # deepSeq forces every attribute the flake touches, so a name the release lacks cannot hide.
    out = evaluate("builtins.deepSeq out (builtins.attrNames out)", project_root).value
    assert out == ["apps", "checks", "devShells", "formatter", "legacyPackages", "packages", "specs"]


def test_the_default_package_is_python_with_the_project_built_from_pyproject(project_root):
    out = evaluate(f"""let p = out.packages.{X86}; n = p.nightly-e2e; in {{
        default = map (x: x.name) build.app.packages;
        inherit (n) pname version pyproject pythonImportsCheck postInstall;
        build = map (x: x.name) n.build-system;
        deps = map (x: x.pname) n.dependencies;
    }}""", project_root).value
    assert out["default"] == ["python3.11-nightly-e2e-0.1.0"]
    assert (out["pname"], out["version"], out["pyproject"]) == ("nightly-e2e", "0.1.0", True)
    assert out["build"] == ["setuptools"]
    assert "pipelines.launch.wrapper" in out["pythonImportsCheck"]
    assert "cp -r assets examples workspace.yaml" in out["postInstall"]
    assert {"dagster", "dagster-k8s", "kubernetes", "boto3", "pyyaml"} <= set(out["deps"])
    assert not {"pytest", "moto", "ruff"} & set(out["deps"]), "test tools must stay out of the application"


def test_each_dependency_is_the_locked_wheel_for_its_system(project_root):
    lock = json.loads((project_root / "nix/python-lock.json").read_text())["packages"]
    for system in ("x86_64-linux", "aarch64-linux"):
        out = evaluate(f"""map (d: {{ inherit (d) pname version; inherit (d.src) url sha256;
            patched = d.nativeBuildInputs != [ ]; }}) out.packages.{system}.nightly-e2e.dependencies""",
                       project_root).value
        assert len(out) == sum(p["group"] == "runtime" for p in lock.values())
        for dep in out:
            pin = lock[dep["pname"]]
            wheel = pin["wheels"].get("any") or pin["wheels"][system]
            assert (dep["version"], dep["url"], dep["sha256"]) == (pin["version"], wheel["url"], wheel["sha256"])
            assert dep["patched"] == pin["native"], dep["pname"]


def test_nix_build_gives_the_commands_that_keep_state_outside_the_store(project_root):
    """result/bin/nightly is the NIGHTLY_HOME wrapper (docs/nix.md: state in ./.nightly), beside the app's bin/."""
    out = evaluate(f"""{{
        inherit (out.packages.{X86}.default) name script;
        app = build.app.outPath; nightly = build.nightly.outPath; ui = build.nightly-ui.outPath;
    }}""", project_root).value
    assert out["name"] == "nightly-e2e-0.1.0"
    lines = [line.strip() for line in out["script"].strip().splitlines()]
    assert lines == ["mkdir -p $out/bin", f"ln -s {out['app']}/bin/* $out/bin/",
                     f"ln -sfn {out['nightly']}/bin/nightly $out/bin/nightly",
                     f"ln -sfn {out['ui']}/bin/nightly-ui $out/bin/nightly-ui"]


def test_apps_run_the_nightly_cli_and_the_ui_with_state_outside_the_store(project_root):
    out = evaluate(f"""{{
        apps = builtins.mapAttrs (_: a: a.program) out.apps.{X86};
        nightly = build.nightly.text; ui = build.nightly-ui.text; app = build.app.outPath;
    }}""", project_root).value
    assert sorted(out["apps"]) == ["default", "ui"]
    assert out["apps"]["default"].endswith("-nightly/bin/nightly")
    assert out["apps"]["ui"].endswith("-nightly-ui/bin/nightly-ui")
    assert f'exec {out["app"]}/bin/nightly  "$@"' in out["nightly"]
    assert f'exec {out["app"]}/bin/nightly ui "$@"' in out["ui"]
    for text in (out["nightly"], out["ui"]):
        assert 'export NIGHTLY_HOME="${NIGHTLY_HOME:-$PWD/.nightly}"' in text


def test_the_dev_shell_has_the_tools_and_finds_native_libraries_without_fhs(project_root):
    out = evaluate(f"""let s = out.devShells.{X86}.default; in {{
        packages = map (p: p.name) s.packages; inherit (s) env shellHook;
        everyPin = builtins.length (builtins.head s.packages).packages;
    }}""", project_root).value
    assert {"python3-3.11-env", "uv", "kubectl", "kustomize", "chromium", "postgresql", "nix", "nixfmt"} \
        <= set(out["packages"])
    assert out["everyPin"] == len(json.loads((project_root / "nix/python-lock.json").read_text())["packages"])
    assert out["env"]["UV_PYTHON_DOWNLOADS"] == "never"
    assert out["env"]["UV_PYTHON"].endswith("-python3-3.11/bin/python3")
    assert out["env"]["LD_LIBRARY_PATH"].split(":") == [p for p in out["env"]["LD_LIBRARY_PATH"].split(":")
                                                        if p.startswith("/nix/store/")]
    assert 'export PYTHONPATH="$nightly_root' in out["shellHook"]


def test_the_dev_shell_puts_the_checkout_on_pythonpath_when_started_from_a_subfolder(project_root, tmp_path):
    """nix develop finds flake.nix upward from a subfolder; the hook took $PWD as the checkout, so
    `import pipelines` failed and the state went to pipelines/core/.nightly."""
    hook = evaluate(f"out.devShells.{X86}.default.shellHook", project_root).value
    checkout, outside = tmp_path / "checkout", tmp_path / "elsewhere"
    (checkout / "pipelines" / "core").mkdir(parents=True)
    (checkout / "flake.nix").write_text("{ }")
    outside.mkdir()

    def started_in(folder):
        env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "PYTHONPATH": "/extra"}
        out = subprocess.run(["bash", "-c", hook + 'printf "%s\\n" "$PYTHONPATH" "$NIGHTLY_HOME" "${nightly_root-unset}"'],
                             cwd=folder, env=env, capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        return out.stdout.splitlines()[1:]  # after the hook's own greeting

    assert started_in(checkout / "pipelines" / "core") == [f"{checkout}:/extra", f"{checkout}/.nightly", "unset"]
    assert started_in(checkout) == [f"{checkout}:/extra", f"{checkout}/.nightly", "unset"]
    assert started_in(outside) == [f"{outside}:/extra", f"{outside}/.nightly", "unset"], "no flake.nix above"


def test_the_dev_shell_and_its_docs_name_the_lint_command_make_and_the_checks_run(project_root):
    """They said `ruff check .`, which also lints scripts/ (not part of the lint) and failed on a clean tree."""
    import re

    [lint] = re.findall(r"(?m)^lint: .*\n\t\$\(BIN\)/(ruff check .*)$", (project_root / "Makefile").read_text())
    hook = evaluate(f"out.devShells.{X86}.default.shellHook", project_root).value
    checks = evaluate(f"out.checks.{X86}.ruff.script", project_root).value
    assert f"| {lint}\"" in hook
    assert lint.replace("ruff check", "ruff check --no-cache") in checks
    assert f"`{lint}`" in " ".join((project_root / "docs" / "nix.md").read_text().split())
    assert "ruff check ." not in hook + (project_root / "docs" / "nix.md").read_text()


def test_checks_run_ruff_and_the_unit_tests_and_the_formatter_is_nixfmt(project_root):
    out = evaluate(f"""{{
        checks = builtins.mapAttrs (_: c: c.script) out.checks.{X86};
        formatter = out.formatter.{X86}.name;
    }}""", project_root).value
    assert sorted(out["checks"]) == ["ruff", "unit"]
    assert "ruff check --no-cache pipelines tests bench examples" in out["checks"]["ruff"]
    assert 'python -m pytest -q -p no:cacheprovider -m "not slow"' in out["checks"]["unit"]
    assert out["formatter"] == "nixfmt"


def test_the_code_location_image_matches_the_kubernetes_deployment(project_root):
    deployment = next(d for d in yaml.safe_load_all((project_root / "k8s/base/code-location.yaml").read_text())
                      if d["kind"] == "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    out = evaluate(f"""let i = out.legacyPackages.{X86}.images.code-location; in {{
        inherit (i) imageName config; contents = map (c: c.name) i.contents;
    }}""", project_root).value
    assert out["imageName"] == container["image"].rsplit(":", 1)[0]
    assert out["config"]["Cmd"] == container["command"]
    assert out["config"]["User"] == "65534:65534"
    assert "PATH=/bin" in out["config"]["Env"] and "NIGHTLY_HOME=/tmp/nightly" in out["config"]["Env"]
    assert "python3-3.11-env" in out["contents"]


def test_the_test_pod_image_is_the_framework_image_by_digest_plus_the_pipelines_layer(project_root):
    bases = json.loads((project_root / "nix/base-images.json").read_text())["images"]
    out = evaluate(f"""builtins.mapAttrs (_: i: {{
        inherit (i) imageName imageTag config; base = {{ inherit (i.fromImage) imageName imageDigest sha256; }};
        layer = (builtins.head i.contents).script;
    }}) out.legacyPackages.{X86}.images.test-pod""", project_root).value
    assert sorted(out) == sorted(bases)
    for name, image in out.items():
        base = bases[name]
        assert image["base"]["imageName"] == base["imageName"]
        assert image["base"]["imageDigest"] == base["imageDigest"]
        assert image["imageName"] == base["podImage"]
        assert image["imageTag"] == f'{base["finalImageTag"]}-0.1.0'
        assert image["config"]["WorkingDir"] == base["workdir"]
        assert image["config"]["Env"] == ["PYTHONPATH=/opt/nightly-e2e"]
        assert "-nightly-e2e-app-source/pipelines $out/opt/nightly-e2e/pipelines" in image["layer"]
        assert "/lib/python3.11/site-packages/dagster_pipes $out/opt/nightly-e2e/dagster_pipes" in image["layer"]


def test_the_specs_output_names_files_that_exist(project_root):
    out = evaluate("builtins.mapAttrs (_: p: builtins.pathExists p) out.specs", project_root).value
    assert out and all(out.values()), out
