"""A stand-in kubelet for build pods: really runs the container's command on this machine.

The stand-in API server scripts pod *states*; build pods must also really write the cache, so
that a second night can find the marker. This runs the pod's command as a subprocess with the
pod's environment (Secrets from a dict, ``spec.nodeName`` from the scheduler), each cache-volume
mount mapped to a folder of a local "PVC", a fake ``hf`` reading the example's hub, and
``python3`` = this interpreter. Paths are mapped in the environment and the argv only, never in
the constant script. It is a stand-in: no image, no isolation, no GPUs.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.launch.kubernetes import pods
from tests.launch.kubernetes.apiserver import Step

Pod = dict[str, Any]

FAKE_HF = textwrap.dedent('''\
    """hf download <repo> [--repo-type dataset] --local-dir DIR, from $FAKE_HUB (a stand-in for the Hub)."""
    import os, shutil, sys
    args = sys.argv[1:]
    assert args[0] == "download", args
    repo, rest = args[1], args[2:]
    kind = rest[rest.index("--repo-type") + 1] if "--repo-type" in rest else "model"
    dest = rest[rest.index("--local-dir") + 1]
    print("hf: token", "present" if os.environ.get("HF_TOKEN") else "absent",
          "endpoint", os.environ.get("HF_ENDPOINT", "default"), flush=True)
    src = os.path.join(os.environ["FAKE_HUB"], "datasets" if kind == "dataset" else "models", repo)
    if not os.path.isdir(src):
        print(f"404 Client Error: Repository Not Found for url: {repo}", file=sys.stderr)
        sys.exit(1)
    shutil.copytree(src, dest, dirs_exist_ok=True)
    print("hf: downloaded", repo, flush=True)
''')


@dataclass
class Kubelet:
    """Runs build pods against ``pvc`` (the cache volume's root on this machine)."""

    pvc: Path
    workdir: Path
    hub: Path
    bin_dir: Path
    secrets: dict[str, dict[str, str]] = field(default_factory=dict)
    claim: str = "nightly-model-cache"
    ran: list[str] = field(default_factory=list)

    @classmethod
    def create(cls, tmp: Path, workdir: Path, hub: Path, secrets: dict[str, dict[str, str]]) -> Kubelet:
        bin_dir = tmp / "kubelet-bin"
        bin_dir.mkdir(parents=True, exist_ok=True)
        python = bin_dir / "python3"  # a wrapper, not a symlink: a symlinked venv python loses the venv
        python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
        python.chmod(0o755)
        hf = bin_dir / "hf"
        hf.write_text(f"#!{sys.executable}\n{FAKE_HF}")
        hf.chmod(0o755)
        (tmp / "pvc").mkdir(parents=True, exist_ok=True)
        return cls(tmp / "pvc", workdir, hub, bin_dir, secrets)

    # -- mounts ------------------------------------------------------------------------
    def mounts(self, pod: Pod) -> dict[str, tuple[Path, bool]]:
        """mountPath -> (local folder, read-only) for every mount of the cache PVC."""
        spec = pod["spec"]
        claims = {v["name"]: v["persistentVolumeClaim"] for v in spec.get("volumes", []) if "persistentVolumeClaim" in v}
        out = {}
        for m in spec["containers"][0].get("volumeMounts", []):
            pvc = claims.get(m["name"])
            if pvc is None:
                continue
            assert pvc["claimName"] == self.claim, pvc
            out[m["mountPath"]] = (self.pvc / m.get("subPath", ""), bool(m.get("readOnly") or pvc.get("readOnly")))
        return out

    def local(self, pod: Pod, path: str) -> Path | None:
        """Where a container path of ``pod`` lies in the local PVC (None: not on the cache volume)."""
        for mount, (folder, _ro) in sorted(self.mounts(pod).items(), key=lambda kv: -len(kv[0])):
            if path == mount or path.startswith(mount + "/"):
                return folder / path[len(mount):].lstrip("/")
        return None

    def _map(self, pod: Pod, value: str) -> str:
        mapped = self.local(pod, value) if value.startswith("/") else None
        return str(mapped) if mapped is not None else value

    # -- running -----------------------------------------------------------------------
    def env(self, pod: Pod, node: str) -> dict[str, str]:
        out = {"PATH": f"{self.bin_dir}:/usr/bin:/bin", "FAKE_HUB": str(self.hub)}
        for e in pod["spec"]["containers"][0].get("env", []):
            if "value" in e:
                out[e["name"]] = self._map(pod, e["value"])
            elif "secretKeyRef" in e["valueFrom"]:
                ref = e["valueFrom"]["secretKeyRef"]
                out[e["name"]] = self.secrets[ref["name"]][ref["key"]]
            elif e["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName":
                out[e["name"]] = node
        return out

    def run(self, pod: Pod, node: str) -> tuple[int, list[str]]:
        container = pod["spec"]["containers"][0]
        command = container["command"]
        assert command[:2] == ["python3", "-c"], command
        argv = [*command[:3], *(self._map(pod, a) for a in command[3:])]
        cwd = container.get("workingDir") or str(self.workdir)
        self.ran.append(pod["metadata"]["name"])
        proc = subprocess.run(argv, env=self.env(pod, node), cwd=cwd, stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=600)  # an example test takes seconds, ~1 min loaded: only a hang guard
        return proc.returncode, proc.stdout.splitlines()

    def steps(self, pod: Pod, node: str) -> list[Step]:
        """Scheduled, running, then the real command's exit code and output."""
        def work() -> Step:
            rc, lines = self.run(pod, node)
            phase, reason = ("Succeeded", "Completed") if rc == 0 else ("Failed", "Error")
            return Step(mutate=pods.terminated(phase, rc, reason), logs=tuple(lines))
        return [Step(mutate=pods.scheduled(node)), Step(mutate=pods.running()), Step(work=work)]


@dataclass
class TestPodKubelet:
    """Runs a test pod's container for real, as the test image and the kubelet would.

    The image is a folder: ``image/opt/nightly-e2e/pipelines`` is a link to this checkout's
    package (the Dockerfile's ``test-pod`` layer) and the image's own ``PYTHONPATH`` is the
    Dockerfile's; the pod's env replaces the image's names it sets, as a container's env does.
    Container paths under ``/opt`` are mapped into the image folder, ``--result
    /dev/termination-log`` to a file of this machine, whose first 4096 bytes become the
    termination message (with ``FallbackToLogsOnError``, the output's last 80 lines or 2048 bytes when
    that file is empty and the container failed). ``python3`` is this interpreter; the working
    directory is ``repo``.
    """

    __test__ = False  # not a pytest class

    repo: Path
    root: Path
    bin_dir: Path
    image_env: dict[str, str]
    runs: list[tuple[int, str]] = field(default_factory=list)

    @classmethod
    def create(cls, tmp: Path, repo: Path, image_pythonpath: str) -> TestPodKubelet:
        from tests.conftest import PROJECT_ROOT

        root = tmp / "image"
        site = root / image_pythonpath.lstrip("/")
        site.mkdir(parents=True, exist_ok=True)
        (site / "pipelines").symlink_to(PROJECT_ROOT / "pipelines", target_is_directory=True)
        bin_dir = tmp / "image-bin"
        bin_dir.mkdir(parents=True, exist_ok=True)
        python = bin_dir / "python3"
        python.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')  # -S: no site-packages, as a bare image
        python.chmod(0o755)
        return cls(repo, root, bin_dir, {"PATH": f"{bin_dir}:/usr/bin:/bin", "PYTHONPATH": image_pythonpath})

    def _map(self, value: str, log: Path) -> str:
        if value == "/dev/termination-log":
            return str(log)
        return ":".join(str(self.root / p.lstrip("/")) if p.startswith("/opt/") else p for p in value.split(":"))

    def run(self, pod: Pod, log: Path) -> tuple[int, str, str]:
        """(exit code, output, termination message) of the pod's test container."""
        container = pod["spec"]["containers"][0]
        env = {k: self._map(v, log) for k, v in self.image_env.items()}
        env.update({e["name"]: self._map(e["value"], log) for e in container.get("env", []) if "value" in e})
        argv = [self._map(a, log) for a in container["command"]]
        log.write_text("")  # the kubelet creates the file before the container starts
        proc = subprocess.run(argv, env=env, cwd=self.repo, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=120)
        try:
            message = log.read_bytes()[:4096].decode(errors="replace")
        except OSError:  # not a file any more: the container could not write it either
            message = ""
        if not message and proc.returncode != 0 and container.get("terminationMessagePolicy") == "FallbackToLogsOnError":
            message = "\n".join(proc.stdout.splitlines()[-80:])[-2048:]  # the kubelet's limits
        self.runs.append((proc.returncode, proc.stdout))
        return proc.returncode, proc.stdout, message

    def steps(self, pod: Pod, node: str) -> list[Step]:
        log = self.root.parent / f"termination-{pod['metadata']['name']}.log"

        def work() -> Step:
            rc, out, message = self.run(pod, log)

            def ended(p: Pod) -> None:
                pods.terminated("Succeeded" if rc == 0 else "Failed", rc, "Completed" if rc == 0 else "Error",
                                record=False)(p)
                if message:
                    p["status"]["containerStatuses"][0]["state"]["terminated"]["message"] = message
            return Step(mutate=ended, logs=tuple(out.splitlines()))
        return [Step(mutate=pods.scheduled(node)), Step(mutate=pods.running()), Step(work=work)]
