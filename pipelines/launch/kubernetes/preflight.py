"""The pre-flight: an init container that proves the node's GPUs work before the test starts.

Why an init container: its exit code is its own (a test that happens to exit 86 stays a test
failure), and the test container's clock starts only after it. Why three exit codes: only a
CUDA failure says the *node* is bad. A tool missing from the image (no ``python3``, no
``nvidia-smi``, no ``libcuda``, and for test pods no importable ``pipelines.launch.wrapper``) is
the image's fault and fails everywhere; a hung ``nvidia-smi`` is stopped by its own timeout and
retried elsewhere without condemning the node. Without the wrapper check, a pool pointed at the
plain framework image would run every test into ``No module named 'pipelines'`` (exit 1), which
reads as a test failure. So CPU-only test pods get the pre-flight too, with
``NIGHTLY_PREFLIGHT_GPUS=0``: ``python3`` and the wrapper only, no ``nvidia-smi`` or CUDA.

The script is constant: its inputs are environment variables only (expected GPU count, time
limit, node name, whether the test wrapper must be importable). It prints one ``nightly-preflight: ok {json}`` line with what it saw (GPUs,
``/dev/shm`` size) that ``nightly doctor`` reads.
"""

from __future__ import annotations

from typing import Any

PREFLIGHT_CONTAINER = "preflight"
#: CUDA init failed or the GPU count is wrong: the node is bad (retried elsewhere, counts against the node)
GPU_UNUSABLE_EXIT = 86
#: python3, nvidia-smi, libcuda or (test pods) the wrapper missing: the image is wrong (not retried, node not blamed)
TOOL_MISSING_EXIT = 87
#: nvidia-smi or CUDA init did not answer within the limit (retried elsewhere, the node is not blamed)
HUNG_EXIT = 88
PREFLIGHT_TIMEOUT_S = 60
OK_PREFIX = "nightly-preflight: ok "

#: Run in a child process so that a hung cuInit can be killed. Prints ``devices N``.
_CUDA_PY = """\
import ctypes, sys
try:
    cuda = ctypes.CDLL("libcuda.so.1")
except OSError as exc:
    print("cannot load libcuda.so.1:", exc)
    sys.exit(TOOL_MISSING)
count = ctypes.c_int(0)
rc = cuda.cuInit(0)
if rc == 0:
    rc = cuda.cuDeviceGetCount(ctypes.byref(count))
for i in range(count.value if rc == 0 else 0):
    dev, ctx = ctypes.c_int(0), ctypes.c_void_p()
    rc = cuda.cuDeviceGet(ctypes.byref(dev), i) or cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev)
    if rc:
        break
    cuda.cuDevicePrimaryCtxRelease(dev)
if rc != 0:
    print("CUresult", rc, "(802 = system not ready: fabric manager down on NVSwitch nodes)")
    sys.exit(1)
print("devices", count.value)
""".replace("TOOL_MISSING", str(TOOL_MISSING_EXIT))

PREFLIGHT_PY = f"""\
import json, os, shutil, subprocess, sys
limit = float(os.environ.get("NIGHTLY_PREFLIGHT_TIMEOUT_S", "{PREFLIGHT_TIMEOUT_S}"))
want = int(os.environ.get("NIGHTLY_PREFLIGHT_GPUS", "0") or 0)
node = os.environ.get("NIGHTLY_NODE_NAME", "this node")
def end(code, message):
    print("nightly-preflight:", message, flush=True)
    if os.path.exists("/dev/termination-log"):  # the kubelet's file: the reason lands in the pod status
        with open("/dev/termination-log", "w") as fh:
            fh.write(message[:1000])
    sys.exit(code)
if os.environ.get("NIGHTLY_PREFLIGHT_WRAPPER") == "1":
    import importlib.util
    try:
        found, why = importlib.util.find_spec("pipelines.launch.wrapper"), "not found"
    except Exception as exc:  # a package of that name that is not ours, or one that fails to import
        found, why = None, "%s: %s" % (type(exc).__name__, exc)
    if found is None:
        end({TOOL_MISSING_EXIT}, "pipelines.launch.wrapper is not importable (%s; PYTHONPATH=%s): the pool's image must be "
            "a test-pod image with /opt/nightly-e2e (docs/nix.md), not the plain framework image" % (why, os.environ.get("PYTHONPATH", "")))
def gpus_seen():  # (GPUs CUDA initialised, GPUs nvidia-smi listed); ends the pre-flight when they are wrong
    smi = shutil.which("nvidia-smi")
    if not smi:
        end({TOOL_MISSING_EXIT}, "nvidia-smi not found on PATH: the image or the NVIDIA container runtime lacks it")
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=limit)
    except subprocess.TimeoutExpired:
        end({HUNG_EXIT}, "nvidia-smi -L did not answer within %.0fs on %s" % (limit, node))
    if out.returncode != 0:
        end({GPU_UNUSABLE_EXIT}, "nvidia-smi -L failed (exit %d) on %s: %s" % (out.returncode, node, (out.stderr or out.stdout).strip()[-300:]))
    listed = sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))
    try:
        cu = subprocess.run([sys.executable, "-c", {_CUDA_PY!r}], capture_output=True, text=True, timeout=limit)
    except subprocess.TimeoutExpired:
        end({HUNG_EXIT}, "CUDA init did not answer within %.0fs on %s" % (limit, node))
    said = cu.stdout.strip()
    if cu.returncode == {TOOL_MISSING_EXIT}:
        end({TOOL_MISSING_EXIT}, said or "libcuda.so.1 missing")
    if cu.returncode != 0 or not said.startswith("devices "):
        end({GPU_UNUSABLE_EXIT}, "CUDA init failed on %s: %s" % (node, said[-300:] or cu.stderr.strip()[-300:]))
    count = int(said.split()[1])
    if count != want or listed != want:
        end({GPU_UNUSABLE_EXIT}, "%d GPU(s) usable by CUDA, %d listed by nvidia-smi, %d requested on %s" % (count, listed, want, node))
    return count, listed
count, listed = gpus_seen() if want > 0 else (0, 0)  # a CPU-only test pod: the wrapper check alone
st = os.statvfs("/dev/shm") if os.path.isdir("/dev/shm") else None
facts = {{"node": node, "gpus": count, "listed": listed, "shm_bytes": st.f_frsize * st.f_blocks if st else 0}}
print("{OK_PREFIX}" + json.dumps(facts, sort_keys=True), flush=True)
"""

#: ``sh -c`` only to say clearly that python3 is missing; the script travels as ``$1``.
PREFLIGHT_SH = (f'command -v python3 >/dev/null 2>&1 || {{ echo "nightly-preflight: python3 not found in the image" >&2; '
                f'exit {TOOL_MISSING_EXIT}; }}\nexec python3 -c "$1"\n')

PREFLIGHT_COMMAND = ("sh", "-c", PREFLIGHT_SH, "nightly-preflight", PREFLIGHT_PY)

#: exit code -> (Attempt.reason, worth retrying on another node)
VERDICTS = {
    GPU_UNUSABLE_EXIT: ("gpu_unusable", True),
    TOOL_MISSING_EXIT: ("preflight_tool_missing", False),
    HUNG_EXIT: ("preflight_hung", True),
}


def preflight_container(image: str, pull_policy: str, gpus: int, resources: dict[str, Any],
                        timeout_s: int = PREFLIGHT_TIMEOUT_S, *, needs_wrapper: bool = True) -> dict[str, Any]:
    """The init container: same image and resources as the test (so it sees the same GPUs).

    ``needs_wrapper``: the pod runs ``python3 -m pipelines.launch.wrapper`` (test pods and the
    doctor's probe of them); build pods run a script of their own and do not need the package.
    ``gpus`` 0 (a CPU-only test pod): only ``python3`` and the wrapper are checked.
    """
    env = [{"name": "NIGHTLY_PREFLIGHT_GPUS", "value": str(gpus)},
           {"name": "NIGHTLY_PREFLIGHT_TIMEOUT_S", "value": str(timeout_s)},
           {"name": "NIGHTLY_PREFLIGHT_WRAPPER", "value": "1" if needs_wrapper else "0"},
           {"name": "NIGHTLY_NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]
    return {
        "name": PREFLIGHT_CONTAINER,
        "image": image,
        "imagePullPolicy": pull_policy,
        "command": list(PREFLIGHT_COMMAND),
        "env": env,
        "resources": resources,
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
    }


def preflight_verdict(exit_code: int) -> tuple[str, bool]:
    """(reason, retriable) of a pre-flight that exited ``exit_code`` (non-zero)."""
    return VERDICTS.get(exit_code, ("preflight_failed", False))
