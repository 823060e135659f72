"""The Dockerfile (the path without Nix) installs from requirements.lock, like the flake.

Docker is not available here, so the Dockerfile is parsed: its stages, what each RUN installs,
and the user the code location runs as."""

from __future__ import annotations

import json
import re
import shlex
import subprocess

import yaml

from pipelines.launch.kubernetes.podspec import WRAPPER_PYTHONPATH
from tests.conftest import PROJECT_ROOT


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n", " ", "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#")))
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1].strip())
            for line in joined.splitlines() if line.strip()]


def stages(text: str) -> dict[str, list[tuple[str, str]]]:
    found: dict[str, list[tuple[str, str]]] = {}
    current = None
    for op, args in instructions(text):
        if op == "FROM":
            current = args.split(" AS ")[1].strip() if " AS " in args else args
            found[current] = [(op, args)]
        elif current:
            found[current].append((op, args))
    return found


def install_problems(text: str) -> list[str]:
    """Every package install must come from requirements.lock, be this project without
    dependencies, or be the pinned uv; anything else would drift from the lock."""
    problems = []
    for op, args in instructions(text):
        if op != "RUN":
            continue
        for command in re.split(r"&&|;", args):
            argv = shlex.split(command)
            if "install" not in argv or not ({"pip", "uv"} & set(argv)):
                continue
            ok = ("-r" in argv and "requirements.lock" in argv) or ("--no-deps" in argv and "." in argv) \
                or re.fullmatch(r"uv==[\d.]+", argv[-1] or "")
            if not ok:
                problems.append(f"Dockerfile: RUN {command.strip()}: installs outside requirements.lock; "
                                "install from -r requirements.lock or the project with --no-deps")
    return problems


DOCKERFILE = (PROJECT_ROOT / "Dockerfile").read_text()


def test_the_stages_build_once_and_the_default_target_is_the_code_location():
    assert list(stages(DOCKERFILE)) == ["build", "test-pod", "code-location"]


def test_the_build_stage_installs_the_lock_first_and_then_the_project_without_dependencies():
    build = [args for op, args in stages(DOCKERFILE)["build"]]
    lock_at = next(i for i, a in enumerate(build) if "-r requirements.lock" in a)
    project_at = next(i for i, a in enumerate(build) if "--no-deps --build-constraint build-constraints.lock ." in a)
    copy_lock_at = next(i for i, a in enumerate(build) if a.startswith("requirements.lock"))
    copy_code_at = next(i for i, a in enumerate(build) if a.startswith("pipelines"))
    assert copy_lock_at < lock_at < copy_code_at < project_at, "the locked layer must not depend on the code"
    assert install_problems(DOCKERFILE) == []


def test_uv_comes_from_pypi_at_the_version_the_makefile_uses():
    makefile_pin = re.search(r"install -q --disable-pip-version-check (uv==[\d.]+)", (PROJECT_ROOT / "Makefile").read_text())
    assert makefile_pin and f"python -m pip install {makefile_pin.group(1)}" in DOCKERFILE


def test_an_install_outside_the_lock_is_reported_with_the_command():
    broken = DOCKERFILE.replace("RUN python -m pip install uv==0.13.9", "RUN python -m pip install uv dagster")
    assert install_problems(broken) == [
        "Dockerfile: RUN python -m pip install uv dagster: installs outside requirements.lock; "
        "install from -r requirements.lock or the project with --no-deps"]


def test_both_images_start_from_python_3_11_like_the_lock():
    args = dict(a.split("=", 1) for op, a in instructions(DOCKERFILE) if op == "ARG" and "=" in a)
    assert args["PYTHON_IMAGE"].startswith("python:3.11-")
    assert "--python-version 3.11" in (PROJECT_ROOT / "requirements.lock").read_text()


def test_the_code_location_runs_as_a_non_root_user_with_the_kubernetes_command():
    final = stages(DOCKERFILE)["code-location"]
    user = [a for op, a in final if op == "USER"]
    assert user == ["10001"]
    assert any(op == "RUN" and "--uid 10001" in a for op, a in final)
    deployment = next(d for d in yaml.safe_load_all((PROJECT_ROOT / "k8s/base/code-location.yaml").read_text())
                      if d["kind"] == "Deployment")
    cmd = json.loads(next(a for op, a in final if op == "CMD"))
    assert cmd == deployment["spec"]["template"]["spec"]["containers"][0]["command"]


def test_the_test_pod_target_adds_the_pipelines_package_to_the_framework_image_by_digest():
    base = json.loads((PROJECT_ROOT / "nix/base-images.json").read_text())["images"]["rl-framework"]
    args = dict(a.split("=", 1) for op, a in instructions(DOCKERFILE) if op == "ARG" and "=" in a)
    assert args["FRAMEWORK_IMAGE"] == f'{base["imageName"]}@{base["imageDigest"]}'
    pod = stages(DOCKERFILE)["test-pod"]
    assert pod[0] == ("FROM", "${FRAMEWORK_IMAGE} AS test-pod")
    copies = [a for op, a in pod if op == "COPY"]
    assert f"--from=build /src/pipelines {WRAPPER_PYTHONPATH}/pipelines" in copies
    assert any(a.endswith(f"/dagster_pipes {WRAPPER_PYTHONPATH}/dagster_pipes") for a in copies)
    assert ("ENV", f"PYTHONPATH={WRAPPER_PYTHONPATH}${{PYTHONPATH:+:${{PYTHONPATH}}}}") in pod


def test_the_build_finds_site_packages_whatever_python_the_python_image_has(tmp_path):
    """/opt/venv/lib/python3.11/site-packages was written out while PYTHON_IMAGE is a build argument: with
    python:3.12 the data files and the test pod's dagster_pipes missed. The build stage's project step,
    after its install, runs here on a venv laid out as a python3.12 image's, in place of /opt/venv."""
    assert not re.search(r"/lib/python3\.\d", DOCKERFILE), "a python3.N written out"
    [step] = [a for op, a in stages(DOCKERFILE)["build"] if op == "RUN" and "--no-deps" in a]
    install, *rest = step.split(" && ")
    assert "uv pip install" in install and rest
    venv = tmp_path / "venv"
    site = venv / "lib" / "python3.12" / "site-packages"
    (site / "dagster_pipes").mkdir(parents=True)
    (site / "dagster_pipes" / "__init__.py").write_text("")
    src = tmp_path / "src"
    for folder in ("assets", "examples"):
        (src / folder).mkdir(parents=True)
    (src / "workspace.yaml").write_text("")
    script = " && ".join(rest).replace("/opt/venv/", f"{venv}/")
    out = subprocess.run(["sh", "-ec", script], cwd=src, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert {"assets", "examples", "workspace.yaml"} <= {p.name for p in site.iterdir()}
    pod_copies = [a.split()[1:] for op, a in stages(DOCKERFILE)["test-pod"] if op == "COPY"]
    [source] = [s for s, dest in pod_copies if dest == f"{WRAPPER_PYTHONPATH}/dagster_pipes"]
    assert source.startswith("/src/") and (src / source.removeprefix("/src/") / "__init__.py").exists()


def test_the_images_wrapper_folder_is_the_one_every_test_pod_puts_on_a_pythonpath_it_sets():
    """A pod's PYTHONPATH replaces the image's: podspec puts this folder back (the same constant)."""
    assert ("ENV", f"PYTHONPATH={WRAPPER_PYTHONPATH}${{PYTHONPATH:+:${{PYTHONPATH}}}}") in stages(DOCKERFILE)["test-pod"]
    nix = (PROJECT_ROOT / "nix/images.nix").read_text()
    assert f"$out{WRAPPER_PYTHONPATH}/pipelines" in nix and f'"PYTHONPATH={WRAPPER_PYTHONPATH}"' in nix


def test_local_state_and_virtualenvs_stay_out_of_the_build_context():
    ignored = (PROJECT_ROOT / ".dockerignore").read_text().split()
    assert {".git", ".venv", ".nightly", "**/__pycache__"} <= set(ignored)


def _writable(path: str, container: dict) -> bool:
    """Whether ``path`` can be written in ``container``: under a mount that is not read-only, or
    anywhere when the root filesystem is writable."""
    if not container.get("securityContext", {}).get("readOnlyRootFilesystem"):
        return True
    return any(path == m["mountPath"] or path.startswith(m["mountPath"].rstrip("/") + "/")
               for m in container.get("volumeMounts", []) if not m.get("readOnly"))


def test_both_images_keep_the_nightly_state_where_the_code_location_deployment_can_write():
    """The Deployment's root filesystem is read-only: a NIGHTLY_HOME outside its writable mounts
    (the Dockerfile once had /home/nightly/.nightly) fails the first time anything writes state."""
    deployment = next(d for d in yaml.safe_load_all((PROJECT_ROOT / "k8s/base/code-location.yaml").read_text())
                      if d["kind"] == "Deployment")
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    env = {e["name"]: e.get("value") for e in container.get("env", [])}
    docker_env = dict(kv.split("=", 1) for op, a in stages(DOCKERFILE)["code-location"] if op == "ENV"
                      for kv in shlex.split(a))
    [nix_home] = re.findall(r'"NIGHTLY_HOME=([^"]+)"', (PROJECT_ROOT / "nix/images.nix").read_text())
    for image, home in (("Dockerfile", docker_env["NIGHTLY_HOME"]), ("nix/images.nix", nix_home)):
        home = env.get("NIGHTLY_HOME", home)  # the Deployment's own value would win
        assert _writable(home, container), f"{image}: NIGHTLY_HOME={home} is read-only in the Deployment"
    assert docker_env["NIGHTLY_HOME"] == nix_home, "both images keep state in the same place"
