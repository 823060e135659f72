"""A whole night on a framework of the SGLang family that nobody configured (examples/sglangish).

No ``assets/`` entry: the dialect comes from the example's own registry module. The night must
select exactly the ``nightly=True`` registrations (the family's meaning of nightly), run them,
report the disabled one as skipped, and exit 0. Expected rows come from the example's files
(tests/examples/test_sglangish.py records them by importing each file), not from the catalog.
Assertions are on outcomes, the exit code and the table's rows, not on wording.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.examples.test_sglangish import SGLANGISH, collected, recorded
from tests.support.env import child_env

pytestmark = pytest.mark.slow

PROJECT = Path(__file__).resolve().parents[2]


def nightly(*args: str, home: Path) -> subprocess.CompletedProcess:
    env = child_env("NIGHTLY_", "DAGSTER_")
    return subprocess.run([sys.executable, "-m", "pipelines", *args], cwd=PROJECT, env={**env, "NIGHTLY_HOME": str(home)},
                          capture_output=True, text=True, timeout=900, check=False)  # hang guard: minutes loaded


def expected_rows() -> dict[str, str]:
    """test id -> outcome the night must report: nightly registrations pass, disabled ones are skipped."""
    sys.path.insert(0, str(SGLANGISH))
    try:
        regs = {rel: recorded(rel) for rel in collected()}
    finally:
        sys.path.remove(str(SGLANGISH))
    out = {}
    for rel, calls in regs.items():
        for c in calls:
            if c["nightly"]:
                test_id = rel if len(calls) == 1 else f"{rel}::{c['backend']}-{c['suite']}"
                out[test_id] = "skipped" if c["disabled"] else "passed"
    return out


def test_the_example_is_not_configured():
    repos = yaml.safe_load((PROJECT / "assets" / "repos.yaml").read_text())["repos"]
    assert not any("sglangish" in str(r.get("path", "")) for r in repos.values())


def test_a_night_on_the_unconfigured_sglang_family_example_runs_exactly_its_nightly_registrations(tmp_path):
    expected = expected_rows()
    assert "passed" in expected.values() and "skipped" in expected.values()
    done = nightly("run", "--repo", "examples/sglangish", "--home", str(tmp_path / "home"), home=tmp_path / "home")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = {}
    for line in done.stdout.splitlines():
        cells = line.split()
        if len(cells) >= 2 and cells[0].startswith("test/registered/") and cells[1] in ("passed", "failed", "skipped",
                                                                                      "timed_out", "infra_error"):
            rows[cells[0]] = cells[1]
    assert rows == expected


def test_the_catalog_of_the_example_says_which_dialect_and_roots_it_assumed(tmp_path):
    done = nightly("catalog", "--repo", "examples/sglangish", home=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "dialect sglang (sglangish/test/ci/ci_register.py" in done.stderr
    assert "roots: test/registered" in done.stderr


REGISTER = ("from sglangish.test.ci.ci_register import register_cuda_ci\n"
            'register_cuda_ci(est_time={est}, suite="{suite}", nightly=True)\n')

#: files a framework's runner would judge by `python3 FILE`, each with what the night must say of it
FALSE_PASSES = {
    "test_main_check.py": ("def prepare(): pass\ndef execute(): print('training done')\n"
                           "if __name__ == '__main__':\n    prepare()\n    execute()\n"
                           "    raise SystemExit('accuracy 0.12 < 0.80')\n", "accuracy 0.12 < 0.80"),
    "test_configs.py": ("def prepare(): pass\ndef execute():\n"
                        "    print('config megatron-tp2: passed'); print('config fsdp-tp1: failed')\n",
                        "config fsdp-tp1 reported failed"),
    "test_logged_configs.py": ("import logging\ndef prepare(): pass\ndef execute():\n"
                               "    logging.basicConfig(level=logging.INFO)\n"
                               "    logging.getLogger(__name__).info('config fsdp-tp2: failed')\n",
                               "config fsdp-tp2 reported failed"),
    "test_nothing_ran.py": ("import unittest\nclass TestGen(unittest.TestCase):\n    pass\n"
                            "if __name__ == '__main__':\n    unittest.main()\n", "ran no test"),
    "test_pytest_only.py": ("def test_x(): assert False\n", "would run no test"),
    "test_pytest_skipped.py": ("import sys, pytest\n@pytest.mark.skip(reason='needs 8 GPUs')\n"
                               "def test_train(): assert False\n"
                               "if __name__ == '__main__':\n    sys.exit(pytest.main([__file__, '-q']))\n",
                               "ran no test: all 1 of its pytest tests were skipped"),
    "test_closed_output.py": ("import os\ndef prepare(): pass\ndef execute():\n"
                              "    os.close(1); os.close(2); raise RuntimeError('real error')\n", "RuntimeError: real error"),
}


def test_a_night_fails_what_its_runner_would_fail_and_a_stray_daemon_never_holds_the_gpus(tmp_path):
    """One night of a fixture framework through `nightly run`: a check in the __main__ block, a failed
    configuration (bare or behind Python logging's prefix), a file that ran no test (unittest, or pytest
    skipping all), a test that closed its output; a process that escapes marker, group and locks but
    keeps the test's output (killed and named); and a daemon that escapes
    the attempt's marker and group (`env -i setsid`) with the test's GPU locks: killed at its test's
    end, so the next 8-GPU test starts without waiting."""
    repo = tmp_path / "fw"
    (repo / "test" / "registered").mkdir(parents=True)
    shutil.copytree(SGLANGISH / "sglangish", repo / "sglangish")
    (repo / "test" / "registered" / "__init__.py").touch()
    for name, (body, _) in FALSE_PASSES.items():
        (repo / "test" / "registered" / name).write_text(REGISTER.format(est=2, suite="nightly-1-gpu") + body)
    (repo / "test" / "registered" / "t_a_daemon.py").write_text(
        REGISTER.format(est=5, suite="nightly-8-gpu") + "import os\ndef prepare(): pass\n"
        "def execute(): os.system('env -i setsid sleep 30 >/dev/null 2>&1 </dev/null &')\n")
    (repo / "test" / "registered" / "test_output_escape.py").write_text(
        REGISTER.format(est=2, suite="nightly-1-gpu") + "import subprocess, sys\ndef prepare(): pass\n"
        "def execute():\n    subprocess.Popen([sys.executable, '-c', \"import time; time.sleep(20); "
        "print('config cell-b: failed', flush=True)\"], env={'PATH': '/usr/bin:/bin'}, start_new_session=True)\n"
        "    print('config cell-a: passed', flush=True)\n")
    (repo / "test" / "registered" / "t_b_next.py").write_text(
        REGISTER.format(est=4, suite="nightly-8-gpu") + "def prepare(): pass\ndef execute(): print('b ran')\n")
    git = ["git", "-c", "user.email=a@b", "-c", "user.name=a"]
    for cmd in (["git", "init", "-q"], ["git", "add", "-A"], [*git, "commit", "-qm", "fixture"]):
        subprocess.run(cmd, cwd=repo, check=True)
    home = tmp_path / "home"
    done = nightly("run", "--repo", str(repo), "--home", str(home), "--timeout-floor", "20", home=home)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    record = json.loads((home / "nights" / "latest.json").read_text())
    attempts = {Path(a["test_id"]).name: a for a in record["attempts"]}
    for name, (_, reason) in FALSE_PASSES.items():
        assert attempts[name]["outcome"] == "failed" and reason in attempts[name]["reason"], attempts[name]
    daemon, after = attempts["t_a_daemon.py"], attempts["t_b_next.py"]
    assert daemon["outcome"] == "passed" and daemon["details"]["killed_leftovers"]
    assert after["outcome"] == "passed" and float(after["details"]["gpu_wait_s"]) < 10, after
    # escaped marker, group and locks but kept the output: killed and named, the log judged whole at once
    escape = attempts["test_output_escape.py"]
    assert escape["outcome"] == "passed" and escape["details"]["killed_leftovers"], escape
    assert "still writing to the test's output" in Path(escape["log_path"]).read_text()
    assert sorted(record["verdict"]["failed"]) == sorted(f"test/registered/{name}" for name in FALSE_PASSES)
