"""The GPU pre-flight really run: fake ``nvidia-smi`` and a fake ``libcuda.so.1`` (built with the C
compiler) stand in for the driver, so each exit code is the script's own answer, not a guess.

Only a CUDA failure or a wrong GPU count (86) blames the node; a missing tool (87) is the
image's fault; a hang (88) is stopped by the pre-flight's own timeout.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pipelines.launch.kubernetes.outcomes import classify
from pipelines.launch.kubernetes.preflight import (
    GPU_UNUSABLE_EXIT,
    HUNG_EXIT,
    OK_PREFIX,
    PREFLIGHT_COMMAND,
    TOOL_MISSING_EXIT,
)
from tests.conftest import PROJECT_ROOT

FAKE_CUDA = textwrap.dedent("""\
    #include <stdlib.h>
    #include <unistd.h>
    static int env(const char *k, int d) { const char *v = getenv(k); return v ? atoi(v) : d; }
    int cuInit(unsigned f) { if (env("FAKE_CUINIT_SLEEP", 0)) sleep(30); return env("FAKE_CUINIT", 0); }
    int cuDeviceGetCount(int *n) { *n = env("FAKE_GPUS", 8); return 0; }
    int cuDeviceGet(int *d, int i) { *d = i; return 0; }
    int cuDevicePrimaryCtxRetain(void **c, int d) { *c = (void *)1; return 0; }
    int cuDevicePrimaryCtxRelease(int d) { return 0; }
""")
FAKE_SMI = textwrap.dedent("""\
    #!/bin/sh
    [ -n "$FAKE_SMI_SLEEP" ] && exec /bin/sleep "$FAKE_SMI_SLEEP"
    i=0; while [ $i -lt "${FAKE_SMI_GPUS:-8}" ]; do echo "GPU $i: NVIDIA H200 (UUID: GPU-$i)"; i=$((i+1)); done
    exit "${FAKE_SMI_RC:-0}"
""")


@pytest.fixture(scope="module")
def driver(tmp_path_factory) -> Path:
    """A folder with nvidia-smi, python3 and (when a C compiler is here) libcuda.so.1."""
    d = tmp_path_factory.mktemp("driver")
    (d / "nvidia-smi").write_text(FAKE_SMI)
    # -S: no site-packages, as in a framework's image, where this project is not installed
    (d / "python3").write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    for f in ("nvidia-smi", "python3"):
        (d / f).chmod(0o755)
    if shutil.which("gcc"):
        (d / "cuda.c").write_text(FAKE_CUDA)
        subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(d / "libcuda.so.1"), str(d / "cuda.c")], check=True)
    return d


def preflight(driver: Path, gpus: int = 8, path: str | None = None, cwd: Path | None = None,
              **env: str) -> subprocess.CompletedProcess:
    full = {"PATH": path if path is not None else str(driver), "LD_LIBRARY_PATH": str(driver), "NIGHTLY_NODE_NAME": "h200-a",
            "NIGHTLY_PREFLIGHT_GPUS": str(gpus), "NIGHTLY_PREFLIGHT_TIMEOUT_S": "20", **env}
    return subprocess.run(["/bin/sh", *PREFLIGHT_COMMAND[1:]], capture_output=True, text=True, env=full, timeout=60,
                          cwd=cwd)


needs_cc = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs a C compiler for the fake libcuda")


@needs_cc
def test_healthy_gpus_pass_and_report_what_they_saw(driver):
    out = preflight(driver)
    assert out.returncode == 0, out.stdout + out.stderr
    [line] = [x for x in out.stdout.splitlines() if x.startswith(OK_PREFIX)]
    facts = json.loads(line[len(OK_PREFIX):])
    assert (facts["gpus"], facts["listed"], facts["node"]) == (8, 8, "h200-a") and facts["shm_bytes"] > 0


def test_an_image_without_python3_is_a_missing_tool_not_a_bad_node(driver, tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    out = preflight(driver, path=str(empty))
    assert out.returncode == TOOL_MISSING_EXIT and "python3 not found in the image" in out.stderr


def test_no_nvidia_smi_is_a_missing_tool(driver, tmp_path):
    only_python = tmp_path / "bin"
    only_python.mkdir()
    (only_python / "python3").symlink_to(driver / "python3")
    out = preflight(driver, path=str(only_python))
    assert out.returncode == TOOL_MISSING_EXIT and "nvidia-smi not found on PATH" in out.stdout


def test_a_hung_nvidia_smi_is_stopped_by_its_own_timeout(driver):
    out = preflight(driver, FAKE_SMI_SLEEP="30", NIGHTLY_PREFLIGHT_TIMEOUT_S="1")
    assert out.returncode == HUNG_EXIT and "nvidia-smi -L did not answer within 1s on h200-a" in out.stdout


def test_a_failing_nvidia_smi_means_the_gpus_are_unusable(driver):
    out = preflight(driver, FAKE_SMI_RC="9")
    assert out.returncode == GPU_UNUSABLE_EXIT and "nvidia-smi -L failed (exit 9) on h200-a" in out.stdout


def test_no_libcuda_is_a_missing_tool(driver, tmp_path):
    out = preflight(driver, LD_LIBRARY_PATH=str(tmp_path))
    assert out.returncode == TOOL_MISSING_EXIT and "cannot load libcuda.so.1" in out.stdout


def test_a_framework_image_without_the_wrapper_is_the_images_fault_not_a_test_failure(driver, tmp_path):
    """The plain framework image (no /opt/nightly-e2e): every test would die on ``No module named 'pipelines'``."""
    out = preflight(driver, cwd=tmp_path, NIGHTLY_PREFLIGHT_WRAPPER="1", PYTHONPATH="/opt/nightly-e2e")
    assert out.returncode == TOOL_MISSING_EXIT, out.stdout + out.stderr
    assert ("pipelines.launch.wrapper is not importable (ModuleNotFoundError: No module named 'pipelines'; "
            "PYTHONPATH=/opt/nightly-e2e)") in out.stdout
    assert "not the plain framework image" in out.stdout
    assert classify(_failed_preflight(out.returncode), False, 0, 1)[:3] == ("infra_error", "preflight_tool_missing", False)


def test_a_checkout_with_a_pipelines_package_of_its_own_is_no_wrapper(driver, tmp_path):
    (tmp_path / "pipelines").mkdir()
    (tmp_path / "pipelines" / "__init__.py").write_text("")
    out = preflight(driver, cwd=tmp_path, NIGHTLY_PREFLIGHT_WRAPPER="1")
    assert out.returncode == TOOL_MISSING_EXIT
    assert "not importable (ModuleNotFoundError: No module named 'pipelines.launch'" in out.stdout


@needs_cc
def test_the_wrapper_on_the_images_pythonpath_passes_and_build_pods_do_not_need_it(driver, tmp_path):
    image = preflight(driver, cwd=tmp_path, NIGHTLY_PREFLIGHT_WRAPPER="1", PYTHONPATH=str(PROJECT_ROOT))
    assert image.returncode == 0, image.stdout + image.stderr
    build = preflight(driver, cwd=tmp_path, NIGHTLY_PREFLIGHT_WRAPPER="0")
    assert build.returncode == 0, build.stdout + build.stderr


def test_a_cpu_only_pod_checks_the_wrapper_and_needs_no_gpu_tools(driver, tmp_path):
    """0 GPUs: no nvidia-smi or libcuda in the image is fine; the wrapper missing is exit 87 as on GPU pods."""
    only_python = tmp_path / "bin"
    only_python.mkdir()
    (only_python / "python3").symlink_to(driver / "python3")
    ok = preflight(driver, gpus=0, path=str(only_python), cwd=tmp_path, LD_LIBRARY_PATH=str(tmp_path),
                   NIGHTLY_PREFLIGHT_WRAPPER="1", PYTHONPATH=str(PROJECT_ROOT))
    assert ok.returncode == 0, ok.stdout + ok.stderr
    [line] = [x for x in ok.stdout.splitlines() if x.startswith(OK_PREFIX)]
    assert json.loads(line[len(OK_PREFIX):])["gpus"] == 0
    plain = preflight(driver, gpus=0, path=str(only_python), cwd=tmp_path, NIGHTLY_PREFLIGHT_WRAPPER="1")
    assert plain.returncode == TOOL_MISSING_EXIT and "pipelines.launch.wrapper is not importable" in plain.stdout
    assert classify(_failed_preflight(plain.returncode), False, 0, 1)[:3] == ("infra_error", "preflight_tool_missing", False)


@needs_cc
def test_cuda_error_802_means_the_gpus_are_unusable(driver):
    out = preflight(driver, FAKE_CUINIT="802")
    assert out.returncode == GPU_UNUSABLE_EXIT and "CUresult 802" in out.stdout and "fabric manager" in out.stdout


@needs_cc
def test_fewer_gpus_than_requested_means_the_gpus_are_unusable(driver):
    out = preflight(driver, gpus=8, FAKE_GPUS="7", FAKE_SMI_GPUS="7")
    assert out.returncode == GPU_UNUSABLE_EXIT
    assert "7 GPU(s) usable by CUDA, 7 listed by nvidia-smi, 8 requested on h200-a" in out.stdout


@needs_cc
def test_a_hung_cuda_init_is_stopped_by_its_own_timeout(driver):
    out = preflight(driver, FAKE_CUINIT_SLEEP="1", NIGHTLY_PREFLIGHT_TIMEOUT_S="1")
    assert out.returncode == HUNG_EXIT and "CUDA init did not answer within 1s" in out.stdout


def _failed_preflight(code: int) -> dict:
    return {"spec": {"nodeName": "h200-a"}, "status": {"phase": "Failed", "initContainerStatuses": [
        {"name": "preflight", "state": {"terminated": {"exitCode": code, "reason": "Error"}}}]}}


@pytest.mark.parametrize("code, reason, retriable", [
    (GPU_UNUSABLE_EXIT, "gpu_unusable", True),
    (TOOL_MISSING_EXIT, "preflight_tool_missing", False),
    (HUNG_EXIT, "preflight_hung", True),
    (1, "preflight_failed", False),
])
def test_each_preflight_exit_has_its_own_outcome(code, reason, retriable):
    assert classify(_failed_preflight(code), False, 0, 1) == ("infra_error", reason, retriable, "h200-a")


def test_a_test_that_exits_86_is_a_test_failure_not_a_bad_node():
    pod = {"spec": {"nodeName": "h200-a"}, "status": {"phase": "Failed", "containerStatuses": [
        {"name": "test", "state": {"terminated": {"exitCode": 86, "reason": "Error"}}}]}}
    assert classify(pod, False, 0, 1) == ("failed", "exit_code", False, "h200-a")
