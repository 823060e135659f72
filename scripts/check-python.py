"""Exit 1, saying what to do, when the interpreter running this is not one pyproject.toml's
requires-python allows (the Makefile runs it with $(PY) before it makes the virtualenv).

With ``--venv-maker PYPROJECT``, run by the virtualenv's python: print the interpreter that made the
virtualenv when requires-python allows it, nothing otherwise. The Makefile takes it as $(PY) when none
was given, so one `make install PY=python3.11` on a machine whose python3 is 3.10 serves every later
plain `make test`.

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


def venv_maker(pyproject):
    """The interpreter that made the virtualenv running this, or "" when it does not fit or is gone."""
    spec = requires_python(pyproject)
    base = getattr(sys, "_base_executable", "")
    if sys.prefix == sys.base_prefix or not base or (spec and not allows(spec, tuple(sys.version_info[:3]))):
        return ""
    return base if os.access(base, os.X_OK) else ""


def install_hint(fits, goal):
    """Where to get an interpreter that fits, without naming one distribution's package names."""
    versions = " or ".join(f[len("python"):] for f in fits) if len(fits) <= 3 else f"{fits[0][len('python'):]} or newer"
    newest = fits[-1][len("python"):] if len(fits) <= 3 else fits[0][len("python"):]
    return (f"install a Python {versions} with its venv module (your distribution's packages where it has one, "
            f"else e.g. `uv python install {newest}`) and run `make {goal} PY={fits[0]}` (or PY=/path/to/it)")


def main(argv):
    if argv[1] == "--venv-maker":
        print(venv_maker(argv[2]))
        return 0
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
        todo = install_hint(fits, goal)
    else:
        todo = "install a Python that fits and pass it as PY=..."
    sys.stderr.write(f"make: {py} is Python {shown} ({os.path.realpath(sys.executable)}); this project needs "
                     f"Python {spec} (requires-python in {pyproject}): {todo}\n")
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
