"""The test's ``sys.path`` under the wrapper is exactly what ``python3 FILE`` gives it in CI: a module at
the checkout's root is not importable (no false pass), and the wrapper's own folder, which holds a
``kubernetes`` package, does not shadow the real client (no false fail)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pipelines.launch.base import LaunchRequest, tail
from pipelines.launch.local import WRAPPER, LocalLauncher
from tests.conftest import make_test

PROJECT_ROOT = Path(__file__).resolve().parents[2]

DUMP_PATH = textwrap.dedent("""\
    import json, os, sys

    if __name__ == "__main__":
        with open(os.environ["PATH_OUT"], "w") as fh:
            json.dump(sys.path, fh)
""")


def _sys_path(argv: list[str], cwd: Path, env: dict[str, str], out: Path) -> list[str]:
    run = subprocess.run(argv, cwd=cwd, env={**env, "PATH_OUT": str(out)}, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    return json.loads(out.read_text())


@pytest.mark.parametrize("start", ["script", "module"], ids=["local launcher", "kubernetes pod"])
@pytest.mark.parametrize("extra", [{}, {"PYTHONPATH": ".:rel"}, {"PYTHONSAFEPATH": "1"}, {"LINK": "1"}],
                         ids=["plain", "PYTHONPATH .:rel", "PYTHONSAFEPATH", "symlinked file"])
def test_the_tests_sys_path_is_what_python3_file_gives_it(tmp_path, start, extra):
    checkout = tmp_path / "checkout"
    (checkout / "tests" / "e2e").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "real.py").write_text(DUMP_PATH)
    test = checkout / "tests" / "e2e" / "test_x.py"
    if extra.pop("LINK", None):  # CPython puts the folder of the file the link points to first
        test.symlink_to(tmp_path / "elsewhere" / "real.py")
    else:
        test.write_text(DUMP_PATH)
    env = {"PATH": os.environ["PATH"], **extra}
    if start == "module":  # a pod: `python3 -m pipelines.launch.wrapper`, the package on the image's PYTHONPATH
        env["PYTHONPATH"] = ":".join(filter(None, [str(PROJECT_ROOT), env.get("PYTHONPATH")]))
        wrapper = [sys.executable, "-m", "pipelines.launch.wrapper"]
    else:
        wrapper = [sys.executable, str(WRAPPER)]
    plain = _sys_path([sys.executable, "tests/e2e/test_x.py"], checkout, env, tmp_path / "plain.json")
    wrapped = _sys_path([*wrapper, "--file", "tests/e2e/test_x.py"], checkout, env, tmp_path / "wrapped.json")
    assert wrapped == plain


def _launch(tmp_path: Path, body: str) -> tuple[str, str]:
    """Run a test file of a checkout that also has ``roothelper.py`` at its root, as a night does."""
    repo = tmp_path / "repo"
    (repo / "tests" / "e2e").mkdir(parents=True)
    (repo / "roothelper.py").write_text("VALUE = 42\n")
    (repo / "tests" / "e2e" / "test_x.py").write_text(textwrap.dedent(body))
    test = make_test(id="tests/e2e/test_x.py", path="tests/e2e/test_x.py", gpus=1)
    request = LaunchRequest(test=test, repo_path=repo, timeout_s=60, log_path=tmp_path / "logs" / "x.log",
                            pool="h200", gpu_slots=(0,), env={"PYTHONPATH": ""})
    attempt = LocalLauncher(tmp_path / "state", lock_dir=tmp_path / "locks").launch(request)
    return attempt.outcome, tail(attempt.log_path)


def test_a_module_at_the_checkout_root_is_not_importable_as_in_ci(tmp_path):
    outcome, log = _launch(tmp_path, """
        def execute():
            import roothelper  # `python3 tests/e2e/test_x.py` fails here: no false pass
    """)
    assert outcome == "failed", log
    assert "No module named 'roothelper'" in log


def test_the_real_kubernetes_client_is_not_shadowed_by_the_wrappers_own_folder(tmp_path):
    outcome, log = _launch(tmp_path, """
        def execute():
            from kubernetes import client
            print("client from", client.__file__)
    """)
    assert outcome == "passed", log
    assert "site-packages" in log and "pipelines/launch" not in log.split("client from", 1)[1]
