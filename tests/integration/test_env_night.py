"""A failure injected with ``--env`` on alternate nights is that environment's, not flakiness.

The README's failure-injection recipe, four short nights through ``run_tests`` (the body every way
in shares) with a stand-in launcher that fails the test named by ``MINIRL_FAIL`` as the example
does: the injected failures never quarantine the test, so the fourth night fails as the second did.
Each record and sample keeps the names of the extra environment and a hash, never the values.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from pipelines.core.model import Attempt
from pipelines.core.runset import RunSelection
from pipelines.execute import NightDone, run_tests
from pipelines.night import Night, NightSettings
from tests.support.assets import example_assets

pytestmark = pytest.mark.slow  # the example's catalog and inputs

TEST = "tests/e2e/megatron/test_sft_math.py"
SECRET = "hunter2-never-stored"


class FailsWhatTheEnvNames:
    """Fails the test ``MINIRL_FAIL`` names (as examples/minirl does), passes the others at once."""

    name = "stand-in"

    def launch(self, request, on_log=None) -> Attempt:
        failed = request.env.get("MINIRL_FAIL", "") in request.test.id and "MINIRL_FAIL" in request.env
        return Attempt(request.test.id, "failed" if failed else "passed", 1.0, datetime.now(UTC).isoformat(),
                       node="stand-in-0", exit_code=1 if failed else 0, timeout_s=request.timeout_s)


def night_with(tmp_path, env: dict[str, str]) -> dict:
    night = Night(NightSettings(home=tmp_path / "home", assets_dir=tmp_path / "assets",
                                extra_env=tuple(sorted(env.items()))))
    runset = night.runset([TEST], RunSelection())
    [done] = [e for e in run_tests(night, runset, RunSelection(), launcher=FailsWhatTheEnvNames(),
                                   say=lambda _: None) if isinstance(e, NightDone)]
    return done.summary


def test_alternating_injected_failures_never_quarantine_the_test_and_values_are_never_kept(tmp_path):
    example_assets(tmp_path / "assets")
    inject = {"MINIRL_FAIL": "test_sft_math", "A_TOKEN": SECRET}
    nights = [night_with(tmp_path, env) for env in ({}, inject, {}, inject)]
    assert [n["verdict"]["ok"] for n in nights] == [True, False, True, False]
    assert nights[3]["verdict"]["failed"] == [TEST] and nights[3]["verdict"]["excused_quarantined"] == []
    assert TEST not in nights[3]["flaky"]  # no flip: each night compared with the last under its own env
    assert nights[0]["env"] == "" and nights[1]["env"].startswith("A_TOKEN,MINIRL_FAIL#")
    assert nights[1]["env"] == nights[3]["env"]
    home = tmp_path / "home"
    samples = Night(NightSettings(home=home, assets_dir=tmp_path / "assets")).history.read()
    assert [s.env for s in samples] == [n["env"] for n in nights]
    for path in [home / "history.sqlite", *(home / "runs").glob("*.json")]:
        assert SECRET.encode() not in path.read_bytes(), path
    assert all(SECRET not in json.dumps(n) for n in nights)


def test_nightly_run_records_the_env_digest_on_the_night_and_its_samples(tmp_path):
    """`nightly run --env` (the CLI hands the names to the Dagster run, which reads the values)."""
    import subprocess
    import sys

    from pipelines.core.history import FileHistoryStore
    from pipelines.core.model import env_digest
    from tests.conftest import PROJECT_ROOT
    from tests.support.env import child_env

    assets, home = example_assets(tmp_path / "assets"), tmp_path / "home"
    env = {**child_env("NIGHTLY_", "DAGSTER_", "MINIRL_"), "NIGHTLY_HOME": str(home), "NIGHTLY_ASSETS_DIR": str(assets)}
    night = subprocess.run([sys.executable, "-m", "pipelines", "run", "--labels", "lora", "--env",
                            "MINIRL_FAIL=test_lora_math", "--env", f"A_TOKEN={SECRET}"],
                           cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert night.returncode == 1, night.stdout[-2000:] + night.stderr[-2000:]
    assert "verdict: FAILED: 1 test(s) failed" in night.stdout  # a CI job's log says why the night is red
    assert "failing on purpose because MINIRL_FAIL names it" in night.stdout, night.stdout[-2000:]
    digest = env_digest([("MINIRL_FAIL", "test_lora_math"), ("A_TOKEN", SECRET)])
    [record] = (home / "runs").glob("*.json")
    assert json.loads(record.read_text())["env"] == digest
    samples = FileHistoryStore(home / "history.sqlite").read()
    assert samples and {s.env for s in samples} == {digest}
    for path in [record, home / "history.sqlite", *(home / "dagster").rglob("*.db")]:
        assert SECRET.encode() not in path.read_bytes(), path
