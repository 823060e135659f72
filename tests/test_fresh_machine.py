"""What a fresh Debian machine gets: scripts/system-deps.sh and the Makefile's virtualenv step.

Both run with stand-in commands on a PATH of their own (no apt, no network): a kubectl that says
its version, a python3 whose venv has pip or not.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from tests.conftest import PROJECT_ROOT

MAKEFILE = (PROJECT_ROOT / "Makefile").read_text()
TOOLS = ("bash", "sed", "head", "mktemp", "rm", "mkdir", "id", "cat", "ls", "env", "sh", "chmod")


def script(path: Path, text: str) -> Path:
    path.write_text("#!/bin/sh\n" + text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def fake_python(path: Path, pip: bool, version: str = "3.11.2") -> Path:
    """A python3 whose ``-m venv DIR`` makes DIR/bin/python, with pip or (no python3-venv) without;
    both answer ``-c CODE`` with ``version`` (what ``print(sys.version)`` would say)."""
    inner = "exit 0" if pip else 'echo "No module named pip" >&2; exit 1'
    status = 0 if pip else 1  # Debian's: "ensurepip is not available", the venv left without pip
    return script(path, f"""[ "$1" = "-c" ] && {{ echo "{version}"; exit 0; }}
[ "$1 $2" = "-m venv" ] || exit 1
echo "$3" >> "{path}.made"
mkdir -p "$3/bin"
printf '#!/bin/sh\\n[ "$1" = "-c" ] && {{ echo "{version}"; exit 0; }}\\n{inner}\\n' > "$3/bin/python"
chmod +x "$3/bin/python"
exit {status}
""")


def machine(tmp_path: Path, kubectl: str | None, venv_pip: bool = True) -> dict[str, str]:
    """A PATH with only the stand-ins (and every other tool system-deps looks for, present)."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    for tool in TOOLS:
        os.symlink(shutil.which(tool), bin_ / tool)
    for present in ("chromium", "nix-instantiate", "initdb"):
        script(bin_ / present, "exit 0\n")
    if kubectl is not None:
        version = json.dumps({"clientVersion": {"gitVersion": kubectl}})
        script(bin_ / "kubectl", f"echo '{version}'\n")
    fake_python(bin_ / "python3", venv_pip)
    (tmp_path / "tmp").mkdir()
    return {"PATH": str(bin_), "HOME": str(tmp_path), "TMPDIR": str(tmp_path / "tmp")}


def dry_run(env: dict[str, str]) -> str:
    out = subprocess.run(["bash", str(PROJECT_ROOT / "scripts" / "system-deps.sh"), "--dry-run"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


@pytest.mark.parametrize("kubectl", [None, "v1.20.2", "v1.21.14"])
def test_system_deps_installs_kubectl_from_pkgs_k8s_io_when_missing_or_older_than_1_22(tmp_path, kubectl):
    assert dry_run(machine(tmp_path, kubectl)) == ("system-deps: would install kubectl "
                                                   "(kubectl from https://pkgs.k8s.io/core:/stable:/v1.32/deb/)")


@pytest.mark.parametrize("kubectl", ["v1.22.0", "v1.32.4-dispatcher"])
def test_system_deps_keeps_a_current_kubectl(tmp_path, kubectl):
    assert dry_run(machine(tmp_path, kubectl)) == ""


def test_system_deps_installs_python3_venv_when_a_venv_gets_no_pip(tmp_path):
    assert dry_run(machine(tmp_path, "v1.32.0", venv_pip=False)) == "system-deps: would install python3-venv"
    assert not list((tmp_path / "tmp").iterdir()), "the trial venv is removed"


def test_make_system_deps_checks_the_venv_module_of_the_py_the_virtualenv_is_made_with(tmp_path):
    """Ubuntu 22.04 after `make install PY=python3.11`: python3 (3.10) has no venv module, python3.11 has one.
    The target ran the script without PY, so a plain `make test` checked python3 and wanted python3-venv."""
    [line] = re.findall(r"(?m)^system-deps:\n\t(.*)$", MAKEFILE)
    env = machine(tmp_path, "v1.32.0", venv_pip=False)
    fake_python(tmp_path / "bin" / "python3.11", pip=True)

    def dry_run_target(py: str) -> str:
        out = subprocess.run(["bash", "-c", line.replace("$(PY)", py) + " --dry-run"], cwd=PROJECT_ROOT, env=env,
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        return out.stdout.strip()

    assert dry_run_target("python3.11") == ""
    assert dry_run_target("python3") == "system-deps: would install python3-venv"


def test_system_deps_names_the_venv_package_of_the_py_it_checks_and_leaves_a_missing_py_to_make(tmp_path):
    """python3 is 3.10 and PY=python3.11 (deadsnakes) lacks its venv module: that is python3.11-venv, which
    python3-venv (3.10's) does not install. A PY that is not there gets no package: make says so next."""
    env = machine(tmp_path, "v1.32.0")
    fake_python(tmp_path / "bin" / "python3", pip=True, version="3.10.12")
    fake_python(tmp_path / "bin" / "python3.11", pip=False, version="3.11.9")
    assert dry_run({**env, "PY": "python3.11"}) == "system-deps: would install python3.11-venv"
    assert dry_run({**env, "PY": "python3.99"}) == ""


def test_make_test_installs_system_packages_before_it_makes_the_virtualenv():
    """`test: install system-deps` made the virtualenv first, so a missing python3-venv stopped make before
    system-deps could install it."""
    both = {target: prereqs.split() for target, prereqs in re.findall(r"(?m)^([\w-]+):(.*)$", MAKEFILE)
            if {"install", "system-deps"} <= set(prereqs.split())}
    assert {"test", "test-loaded"} <= set(both)
    assert {t: p.index("system-deps") < p.index("install") for t, p in both.items()} == dict.fromkeys(both, True)


def venv_step() -> str:
    """The Makefile's recipe line that makes the virtualenv."""
    [line] = [ln.strip() for ln in (PROJECT_ROOT / "Makefile").read_text().splitlines() if "-m venv" in ln]
    return line


def run_venv_step(tmp_path: Path, pip: bool, version: str = "3.11.2") -> subprocess.CompletedProcess:
    py = fake_python(tmp_path / "python3", pip, version)
    venv = tmp_path / ".venv"
    line = venv_step().replace("$(BIN)", f"{venv}/bin").replace("$(VENV)", str(venv)).replace("$(PY)", str(py))
    assert not re.search(r"\$\([A-Z_]+\)", line.replace("$$", "")), line  # every make variable replaced
    line = line.replace("$$", "$")  # make's escape for the shell's $
    return subprocess.run(["bash", "-c", line], capture_output=True, text=True, timeout=60)


def test_make_remakes_a_venv_that_has_no_pip(tmp_path):
    broken = tmp_path / ".venv" / "bin"
    broken.mkdir(parents=True)
    script(broken / "python", 'echo "No module named pip" >&2; exit 1\n')  # made before python3-venv was installed
    (broken / "leftover").write_text("")
    assert run_venv_step(tmp_path, pip=True).returncode == 0
    assert (tmp_path / "python3.made").read_text().split() == [str(tmp_path / ".venv")]
    assert not (broken / "leftover").exists()
    assert subprocess.run([broken / "python", "-m", "pip", "--version"]).returncode == 0


def test_make_keeps_a_working_venv(tmp_path):
    fake_python(tmp_path / "first", pip=True)
    subprocess.run([tmp_path / "first", "-m", "venv", tmp_path / ".venv"], check=True)
    assert run_venv_step(tmp_path, pip=True).returncode == 0
    assert not (tmp_path / "python3.made").exists()


def test_make_remakes_a_venv_made_by_another_python(tmp_path):
    """`make nightly PY=python3.11` after a python3 of 3.10 made the venv (uv then refused every 3.11-only
    pin): the old venv has pip, but it is made again with $(PY); the stamp names the interpreter's version,
    so a different PY reaches this step at all."""
    fake_python(tmp_path / "old", pip=True, version="3.10.13")
    subprocess.run([tmp_path / "old", "-m", "venv", tmp_path / ".venv"], check=True)
    assert run_venv_step(tmp_path, pip=True, version="3.11.2").returncode == 0
    assert (tmp_path / "python3.made").read_text().split() == [str(tmp_path / ".venv")]
    assert subprocess.run([tmp_path / ".venv" / "bin" / "python", "-c", "v"], capture_output=True,
                          text=True).stdout.strip() == "3.11.2"
    [stamp] = [ln for ln in (PROJECT_ROOT / "Makefile").read_text().splitlines() if ln.startswith("STAMP")]
    assert "$(PY_VERSION)" in stamp


def installed(venv: Path, name: str, version: str) -> Path:
    """A distribution as an installer records it (dist-info with METADATA and RECORD), without its files."""
    [site] = venv.glob("lib/python3.*/site-packages")
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "RECORD").write_text(f"{info.name}/METADATA,,\n{info.name}/RECORD,,\n")
    return info


def test_make_install_removes_a_package_the_lock_no_longer_pins(tmp_path):
    """`uv pip install -r requirements.lock` only added to .venv: a pin dropped from the lock stayed, so a
    local `make test` could pass on a package CI no longer installs. The project, which the sync removes,
    is installed after it."""
    import sys

    uv = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    if uv is None:
        pytest.skip("no uv (make install puts it in .venv)")
    steps = [ln.strip() for ln in MAKEFILE.splitlines() if ln.startswith("\t$(BIN)/uv pip ")]
    [lock_step] = [ln for ln in steps if "requirements.lock" in ln]
    assert steps.index(lock_step) < next(i for i, ln in enumerate(steps) if ln.endswith(" -e ."))
    venv = tmp_path / ".venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True, timeout=60)
    kept, dropped = installed(venv, "kept-pin", "1.0"), installed(venv, "dropped-pin", "2.0")
    (tmp_path / "requirements.lock").write_text("kept-pin==1.0\n")
    line = lock_step.replace("$(BIN)/uv", uv).replace("$(BIN)", str(venv / "bin"))
    assert not re.search(r"\$\([A-Z_]+\)", line), line
    env = {**os.environ, "UV_OFFLINE": "1", "UV_CACHE_DIR": str(tmp_path / "cache")}
    out = subprocess.run(["bash", "-c", line], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert kept.exists() and not dropped.exists()


def run_python_check(tmp_path: Path, py: str, requires: str | None = None, on_path: str = "") -> subprocess.CompletedProcess:
    """The Makefile's first recipe line of the venv step (is $(PY) one requires-python allows?), in a copy
    of the project whose pyproject.toml requires ``requires`` (None: the real one), for `make nightly`."""
    [line] = [ln.strip().lstrip("@") for ln in MAKEFILE.splitlines()
              if ln.startswith("\t") and "scripts/check-python.py" in ln]
    line = line.replace("$(PY)", py).replace("$(MAKECMDGOALS)", "nightly")
    assert not re.search(r"\$\([A-Z_]+\)", line), line
    (tmp_path / "scripts").mkdir(parents=True)
    os.symlink(PROJECT_ROOT / "scripts" / "check-python.py", tmp_path / "scripts" / "check-python.py")
    text = (PROJECT_ROOT / "pyproject.toml").read_text()
    if requires is not None:
        text = re.sub(r'(?m)^requires-python = ".*"$', f'requires-python = "{requires}"', text)
    (tmp_path / "pyproject.toml").write_text(text)
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    if on_path:  # another interpreter the machine has, answering the version check
        minor = on_path.split(".")[1]
        script(bin_ / on_path, f'echo "3 {minor} 1"\n')
    return subprocess.run([shutil.which("bash"), "-c", line], cwd=tmp_path, env={"PATH": str(bin_)},
                          capture_output=True, text=True, timeout=60)


def test_make_stops_on_a_python_that_requires_python_excludes_and_names_the_py_to_pass(tmp_path):
    """python3 is 3.10 (or 3.13) where the project needs >=3.11,<3.13: stop before the venv, not in uv's
    resolver, and say which PY= to pass (one on PATH that fits, else the one to install)."""
    import sys

    here = f"{sys.version_info[0]}.{sys.version_info[1]}"
    nxt = f"python3.{sys.version_info[1] + 1}"
    needs = f">=3.{sys.version_info[1] + 1},<3.{sys.version_info[1] + 2}"
    out = run_python_check(tmp_path / "a", sys.executable, needs, on_path=nxt)
    assert out.returncode == 1
    assert f"make: {sys.executable} is Python {here}." in out.stderr
    assert out.stderr.rstrip().endswith(f"this project needs Python {needs} (requires-python in pyproject.toml): "
                                        f"{nxt} is on PATH: run `make nightly PY={nxt}`"), out.stderr
    out = run_python_check(tmp_path / "b", sys.executable, needs)
    assert out.returncode == 1
    # no distribution's package names: Debian 13 has no python3.11 package (its python3 is 3.13)
    assert out.stderr.rstrip().endswith(f"install a Python {nxt[6:]} with its venv module (your distribution's "
                                        f"packages where it has one, else e.g. `uv python install {nxt[6:]}`) and run "
                                        f"`make nightly PY={nxt}` (or PY=/path/to/it)"), out.stderr
    assert run_python_check(tmp_path / "c", sys.executable).returncode == 0, "the project's own range fits"
    missing = run_python_check(tmp_path / "d", "python3.99")
    assert missing.returncode == 1 and "make: python3.99 not found: install a Python 3.11 or 3.12" in missing.stderr
    assert "apt-get" not in missing.stderr


def test_check_python_passes_lint_as_written_for_python_3_6():
    """It runs on whatever python3 a machine has (3.6 or newer); `ruff check .` lints it with the project's
    py311 target, whose UP021 fix (text= for universal_newlines=, 3.7+) would break it there."""
    import sys

    out = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "scripts/check-python.py"],
                         cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout
    assert "universal_newlines=True" in (PROJECT_ROOT / "scripts" / "check-python.py").read_text()


def default_py(project: Path) -> str:
    """$(PY) as make sets it when none is given: the Makefile's `ifeq ($(origin PY),undefined)` block, its
    $(shell ...) run with bash in ``project`` (a folder with scripts/check-python.py and pyproject.toml)."""
    block = re.search(r"(?ms)^ifeq \(\$\(origin PY\),undefined\)\n(.*?)^endif$", MAKEFILE)
    assert block, "PY given nowhere has no default of its own"
    assert "PY      := $(or $(VENV_MAKER),python3)" in block.group(1)
    [command] = re.findall(r"(?m)^VENV_MAKER := \$\(shell (.*)\)$", block.group(1))
    command = command.replace("$(BIN)", ".venv/bin")
    assert not re.search(r"\$\([A-Z_]+\)", command), command
    out = subprocess.run(["bash", "-c", command], cwd=project, capture_output=True, text=True, timeout=60)
    return out.stdout.strip() or "python3"


def _version(python: str | Path) -> str:
    """What the Makefile's PY_VERSION (the stamp's name) would be for ``python``."""
    [line] = [ln for ln in MAKEFILE.splitlines() if ln.startswith("PY_VERSION")]
    command = re.fullmatch(r"PY_VERSION := \$\(shell (.*)\)", line).group(1).replace("$(PY)", str(python))
    return subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=60).stdout.strip()


def test_a_plain_make_after_one_make_install_with_py_keeps_the_python_that_made_the_venv(tmp_path):
    """Ubuntu 22.04: python3 is 3.10; after one `make install PY=python3.11` a plain `make test` named its
    stamp after python3's 3.10 and stopped every time ("python3.11 is on PATH: run `make test PY=...`").
    Not given, PY is the interpreter that made .venv when requires-python allows it, else python3."""
    import sys

    project = tmp_path / "p"
    (project / "scripts").mkdir(parents=True)
    os.symlink(PROJECT_ROOT / "scripts" / "check-python.py", project / "scripts" / "check-python.py")
    pyproject = (PROJECT_ROOT / "pyproject.toml").read_text()
    (project / "pyproject.toml").write_text(pyproject)
    assert default_py(project) == "python3", "no .venv yet"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", project / ".venv"], check=True, timeout=60)
    py = default_py(project)
    assert Path(py).is_absolute() and not Path(py).resolve().is_relative_to(project.resolve()), py
    assert _version(py) == _version(project / ".venv" / "bin" / "python") != "", "the stamp PY= wrote is current"
    # the check passes with it where python3 is 3.10 and python3.11 is on PATH (what stopped before)
    out = run_python_check(tmp_path / "check", py, on_path="python3.11")
    assert out.returncode == 0, out.stderr
    # a .venv requires-python no longer allows (it was raised) is not kept: python3, checked as before
    minor = sys.version_info[1]
    (project / "pyproject.toml").write_text(re.sub(r'(?m)^requires-python = ".*"$',
                                                   f'requires-python = ">=3.{minor + 1}"', pyproject))
    assert default_py(project) == "python3"


def test_make_says_to_install_python3_venv_when_the_venv_it_makes_has_no_pip(tmp_path):
    out = run_venv_step(tmp_path, pip=False)
    assert out.returncode != 0
    assert re.search(r"-m venv' failed: install python3-venv \(apt-get install python3-venv\)", out.stderr)
    assert not (tmp_path / ".venv").exists(), "no broken venv is left for the next make to trust"
