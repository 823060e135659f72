"""`nightly run --dry-run`: every pod the night would create, as YAML a maintainer can diff, no cluster touched."""

from __future__ import annotations

import subprocess
import sys

import kubernetes_validate
import yaml

from pipelines.cli import main
from pipelines.launch.kubernetes.podspec import WRAPPER_PYTHONPATH
from tests.support.assets import example_assets


def _assets(tmp_path, project_root):
    assets = example_assets(tmp_path / "assets")
    cluster = yaml.safe_load((assets / "cluster.yaml").read_text())
    cluster["deployments"]["production"]["storage"] = "local"  # the night's state here; no S3 needed to look
    (assets / "cluster.yaml").write_text(yaml.safe_dump(cluster))
    return assets


def test_dry_run_prints_every_pod_of_the_night_and_each_validates_strictly(tmp_path, capsys, monkeypatch, project_root):
    monkeypatch.setenv("NIGHTLY_ASSETS_DIR", str(_assets(tmp_path, project_root)))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-such-kubeconfig"))  # proof: no cluster is reached
    assert main(["run", "--home", str(tmp_path / "home"), "--deployment", "production", "--dry-run"]) == 0
    pods = [p for p in yaml.safe_load_all(capsys.readouterr().out) if p]
    tests = [p for p in pods if p["metadata"]["labels"]["app.kubernetes.io/name"] != "nightly-e2e-build"]
    assert len(tests) >= 9 and len(pods) > len(tests)
    for pod in pods:
        kubernetes_validate.validate(pod, "1.31", strict=True)
        spec = pod["spec"]
        main_c = spec["containers"][0]
        assert "@sha256:" in main_c["image"], main_c["image"]
        assert main_c["resources"]["requests"]["cpu"] and main_c["resources"]["requests"]["memory"]
    for pod in tests:
        assert pod["spec"].get("initContainers"), "the pre-flight runs as an init container"
        env = {e["name"] for c in pod["spec"]["containers"] for e in c.get("env", [])}
        assert "HF_TOKEN" not in env, "test pods never get the Hub token"
    assert not (tmp_path / "home" / "dagster").exists()


def _test_pods(tmp_path, capsys, monkeypatch, project_root) -> list[dict]:
    monkeypatch.setenv("NIGHTLY_ASSETS_DIR", str(_assets(tmp_path, project_root)))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-such-kubeconfig"))
    assert main(["run", "--home", str(tmp_path / "home"), "--deployment", "production", "--dry-run"]) == 0
    pods = [p for p in yaml.safe_load_all(capsys.readouterr().out) if p]
    return [p for p in pods if p["metadata"]["labels"]["app.kubernetes.io/name"] == "nightly-e2e-test"]


def test_each_test_pod_asks_the_wrapper_for_its_completion_record_with_a_token_of_its_own(tmp_path, capsys, monkeypatch,
                                                                                         project_root):
    """Exit 0 alone is no pass: the record goes to the termination message, with the attempt's token."""
    tokens = []
    for pod in _test_pods(tmp_path, capsys, monkeypatch, project_root):
        c = pod["spec"]["containers"][0]
        assert c["command"][c["command"].index("--result") + 1] == "/dev/termination-log" == c["terminationMessagePath"]
        tokens += [e["value"] for e in c["env"] if e["name"] == "NIGHTLY_ATTEMPT_TOKEN"]
    assert len(tokens) == len(set(tokens)) >= 9 and all(len(t) == 32 for t in tokens)


def test_with_the_pods_env_the_wrapper_is_importable_in_the_image_and_the_checkout_stays_on_the_path(
        tmp_path, capsys, monkeypatch, project_root):
    """assets/repos.yaml sets PYTHONPATH "{repo}" ("." in a pod), which replaces the image's
    PYTHONPATH=/opt/nightly-e2e: the pod must put the image's wrapper folder back."""
    pod = _test_pods(tmp_path, capsys, monkeypatch, project_root)[0]
    c = pod["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in c["env"] if "value" in e}
    assert env["PYTHONPATH"] == f"{WRAPPER_PYTHONPATH}:."
    # the image as a folder: its wrapper package where the Dockerfile puts it; the checkout has no pipelines
    image = tmp_path / "image"
    (image / WRAPPER_PYTHONPATH.lstrip("/")).mkdir(parents=True)
    (image / WRAPPER_PYTHONPATH.lstrip("/") / "pipelines").symlink_to(project_root / "pipelines")
    (tmp_path / "checkout").mkdir()
    pythonpath = ":".join(str(image / p.lstrip("/")) if p.startswith("/") else p for p in env["PYTHONPATH"].split(":"))
    argv = [sys.executable, "-S", *c["command"][1:3], "--help"]  # python3 -m pipelines.launch.wrapper --help
    proc = subprocess.run(argv, cwd=tmp_path / "checkout", env={"PATH": "/usr/bin:/bin", "PYTHONPATH": pythonpath},
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "--result" in proc.stdout


def test_dry_run_of_a_local_deployment_says_what_to_use_instead(tmp_path, capsys):
    assert main(["run", "--home", str(tmp_path), "--dry-run"]) == 2
    assert "--dry-run shows the pods of a Kubernetes deployment" in capsys.readouterr().err


def test_a_kubernetes_night_without_a_usable_kubeconfig_stops_before_it_starts(tmp_path, capsys, monkeypatch,
                                                                             project_root):
    monkeypatch.setenv("NIGHTLY_ASSETS_DIR", str(_assets(tmp_path, project_root)))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-such-kubeconfig"))
    assert main(["run", "--home", str(tmp_path / "home"), "--deployment", "production"]) == 2
    err = capsys.readouterr().err
    assert f"nightly run: error:\nkubeconfig {tmp_path / 'no-such-kubeconfig'}: no such file; pass --kubeconfig" in err
    assert not (tmp_path / "home" / "dagster").exists(), "no Dagster run was started"
