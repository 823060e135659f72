"""``nightly quarantine add|release`` run at the same time by several maintainers: every action is kept.

Four processes quarantine four tests at once, each from its own empty folder against one S3 state
(a real moto server), as four pods or laptops would; then four release them at once; then the same
on one local state folder. Two that add the same test at once: one records, the other is told.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from tests.conftest import PROJECT_ROOT
from tests.support.assets import example_assets
from tests.support.env import child_env
from tests.support.moto import CREDENTIALS, moto_server, s3_client

pytestmark = pytest.mark.slow  # parallel fresh interpreters, a moto server

BUCKET = "nightly-e2e-history"
TESTS = [f"tests/e2e/{t}" for t in ("lora/test_lora_math.py", "megatron/test_sft_math.py",
                                     "megatron/test_grpo_math.py", "fsdp/test_fsdp_sft_chat.py")]


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    assets = example_assets(tmp_path_factory.mktemp("assets"))
    cluster = yaml.safe_load((assets / "cluster.yaml").read_text())
    cluster["deployments"]["s3race"] = {"launcher": "local", "storage": "s3", "s3_bucket": BUCKET,
                                        "skip_hardware": ["mi300"], "pools": {"h200": {"nodes": 1, "gpus_per_node": 8}}}
    (assets / "cluster.yaml").write_text(yaml.safe_dump(cluster))
    return assets


@pytest.fixture(scope="module")
def s3_env(assets):
    with moto_server() as url:
        s3_client(url).create_bucket(Bucket=BUCKET)
        yield {**CREDENTIALS, "NIGHTLY_S3_ENDPOINT": url, "NIGHTLY_DEPLOYMENT": "s3race"}


def at_once(commands: list[tuple[list[str], dict]]) -> list[subprocess.CompletedProcess]:
    """Start every command, then wait for all: their reads and writes overlap."""
    base = child_env("NIGHTLY_", "DAGSTER_", "AWS_")
    procs = [(argv, subprocess.Popen([sys.executable, "-m", "pipelines", *argv], cwd=PROJECT_ROOT,
                                     env={**base, **env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
             for argv, env in commands]
    done = []
    for argv, p in procs:
        out, err = p.communicate(timeout=600)
        done.append(subprocess.CompletedProcess(argv, p.returncode, out, err))
    return done


def listed(env: dict, home) -> dict[str, dict]:
    [r] = at_once([(["quarantine", "list", "--json", "--home", str(home), "--repo", "minirl"], env)])
    assert r.returncode == 0, r.stderr
    return {s["test_id"]: s for s in json.loads(r.stdout)}


def test_four_maintainers_on_four_hosts_quarantine_and_release_at_once_and_nothing_is_lost(assets, s3_env, tmp_path):
    env = {**s3_env, "NIGHTLY_ASSETS_DIR": str(assets)}
    homes = [tmp_path / f"h{i}" for i in range(4)]
    added = at_once([(["quarantine", "add", t, "--by", f"m{i}", "--why", "race", "--home", str(h), "--repo",
                       "minirl"], env) for i, (t, h) in enumerate(zip(TESTS, homes, strict=True))])
    assert [r.returncode for r in added] == [0] * 4, [r.stderr for r in added]
    states = listed(env, tmp_path / "reader")
    assert {t: (states[t]["state"], states[t]["by"]) for t in TESTS} == \
        {t: ("quarantined", f"m{i}") for i, t in enumerate(TESTS)}
    released = at_once([(["quarantine", "release", t, "--by", f"r{i}", "--why", "fixed", "--home", str(h), "--repo",
                          "minirl"], env) for i, (t, h) in enumerate(zip(TESTS, homes, strict=True))])
    assert [r.returncode for r in released] == [0] * 4, [r.stderr for r in released]
    states = listed(env, tmp_path / "reader")
    assert {t: (states[t]["state"], states[t]["by"]) for t in TESTS} == \
        {t: ("released", f"r{i}") for i, t in enumerate(TESTS)}


def test_four_maintainers_on_one_local_state_folder_quarantine_at_once_and_nothing_is_lost(assets, tmp_path):
    env = {"NIGHTLY_ASSETS_DIR": str(assets)}
    home = tmp_path / "home"
    added = at_once([(["quarantine", "add", t, "--by", f"m{i}", "--why", "race", "--home", str(home), "--repo",
                       "minirl"], env) for i, t in enumerate(TESTS)])
    assert [r.returncode for r in added] == [0] * 4, [r.stderr for r in added]
    doc = json.loads((home / "quarantine" / "minirl.json").read_text())
    assert sorted(a["test"] for a in doc["actions"]) == sorted(TESTS)


def test_two_maintainers_adding_the_same_test_at_once_record_it_once_and_the_other_is_told(assets, s3_env, tmp_path):
    env = {**s3_env, "NIGHTLY_ASSETS_DIR": str(assets)}
    test = "tests/e2e/megatron/test_dp8_chat.py"
    both = at_once([(["quarantine", "add", test, "--by", who, "--why", "flaky", "--home", str(tmp_path / who),
                      "--repo", "minirl"], env) for who in ("alice", "bob")])
    assert sorted(r.returncode for r in both) == [0, 1], [r.stderr for r in both]
    refused = next(r for r in both if r.returncode == 1)
    assert f"TEST: {test} is not added again (it is already quarantined by " in refused.stderr
    assert "nothing changed" in refused.stderr and "Traceback" not in refused.stderr
    winner = next(r for r in both if r.returncode == 0).args[4]  # --by
    assert listed(env, tmp_path / "reader")[test]["by"] == winner


@pytest.mark.parametrize("where", ["local", "s3"])
def test_an_action_recorded_while_another_is_being_made_is_kept(where, assets, s3_env, tmp_path, monkeypatch, capsys):
    """Deterministic overlap in one process: A has read the document and is adding its action when B
    records its action and finishes; A must then build on B's document, not on the one it read."""
    import threading

    import pipelines.core.flaky as flaky
    from pipelines.cli import main

    monkeypatch.setenv("NIGHTLY_ASSETS_DIR", str(assets))
    for k, v in (s3_env.items() if where == "s3" else ()):
        monkeypatch.setenv(k, v)
    if where == "local":
        monkeypatch.setenv("NIGHTLY_DEPLOYMENT", "local")
    repo, home = "--repo=minirl", str(tmp_path / "home")
    home_b = home if where == "local" else str(tmp_path / "home-b")  # S3: another host's empty folder
    deciding, b_done = threading.Event(), threading.Event()
    real_record = flaky.record

    def slow_record(*args, **kw):
        if threading.current_thread() is threading.main_thread() and not deciding.is_set():
            deciding.set()
            b_done.wait(1.5)  # with the fix B cannot finish first locally (lock), or A's write is refused (S3)
        return real_record(*args, **kw)

    monkeypatch.setattr(flaky, "record", slow_record)
    codes = {}

    def b():
        deciding.wait(60)
        codes["b"] = main(["quarantine", "add", TESTS[1], "--by", "bob", "--why", "w", "--home", home_b, repo])
        b_done.set()

    other = threading.Thread(target=b)
    other.start()
    codes["a"] = main(["quarantine", "add", TESTS[0], "--by", "alice", "--why", "w", "--home", home, repo])
    other.join(120)
    assert codes == {"a": 0, "b": 0}, capsys.readouterr().err
    monkeypatch.setattr(flaky, "record", real_record)
    capsys.readouterr()
    assert main(["quarantine", "list", "--json", "--home", home, repo]) == 0
    states = {s["test_id"]: s for s in json.loads(capsys.readouterr().out)}
    assert [(states[t]["state"], states[t]["by"]) for t in TESTS[:2]] == [("quarantined", "alice"), ("quarantined", "bob")]
