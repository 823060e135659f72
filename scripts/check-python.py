"""Exit 1, saying what to do, when the interpreter running this is not one pyproject.toml's
requires-python allows (the Makefile runs it with $(PY) before it makes the virtualenv).

Without it a wrong Python fails deep in the resolver ("the current Python version (3.10.13) does
not satisfy Python>=3.11"), or a too-new one installs a set nobody tested. Plain syntax: it must run
on whatever python3 a machine has (3.6 or newer).
"""

import operator
import os
import re
import shutil
import subprocess
import sys

OPS = {">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt, "==": operator.eq,
       "!=": operator.ne}


def requires_python(pyproject):
    with open(pyproject) as f:
        m = re.search(r'^requires-python\s*=\s*["\']([^"\']+)["\']', f.read(), re.M)
    return m.group(1) if m else ""


def allows(spec, version):
    """Whether ``version`` (a tuple of ints) meets every clause of ``spec`` (">=3.11,<3.13")."""
    for clause in filter(None, (c.strip() for c in spec.split(","))):
        m = re.match(r"(>=|<=|==|!=|>|<)\s*([\d.]+)(\.\*)?$", clause)
        if not m:
            continue  # a form this check does not know (~=): left to the installer
        op, want = m.group(1), tuple(int(x) for x in m.group(2).split("."))
        have = version[:len(want)] if m.group(3) or op in ("==", "!=") else version
        if not OPS[op](have, want + (0,) * (len(have) - len(want))):
            return False
    return True


def runs_and_fits(name, spec):
    """Whether ``name`` on PATH runs and is a version ``spec`` allows (a pyenv shim may only say it is not set up)."""
    if not shutil.which(name):
        return False
    try:
        out = subprocess.run([name, "-c", "import sys; print(*sys.version_info[:3])"], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, universal_newlines=True, timeout=20)
        return out.returncode == 0 and allows(spec, tuple(int(x) for x in out.stdout.split()))
    except (OSError, ValueError, subprocess.SubprocessError):
        return False


def main(argv):
    py, goal, pyproject = argv[1], argv[2].strip() or "install", argv[3]
    spec = requires_python(pyproject)
    version = tuple(sys.version_info[:3])
    if not spec or allows(spec, version):
        return 0
    fits = [f"python3.{n}" for n in range(0, 30) if allows(spec, (3, n, 99)) or allows(spec, (3, n, 0))]
    found = [name for name in fits if runs_and_fits(name, spec)]
    shown = ".".join(map(str, version))
    if found:
        todo = f"{found[0]} is on PATH: run `make {goal} PY={found[0]}`"
    elif fits:
        todo = f"install {fits[0]} (Debian: apt-get install {fits[0]} {fits[0]}-venv) and run `make {goal} PY={fits[0]}`"
    else:
        todo = "install a Python that fits and pass it as PY=..."
    sys.stderr.write(f"make: {py} is Python {shown} ({os.path.realpath(sys.executable)}); this project needs "
                     f"Python {spec} (requires-python in {pyproject}): {todo}\n")
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
