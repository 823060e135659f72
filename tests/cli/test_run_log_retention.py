"""`nightly run` removes the logs of nights older than the deployment's last ``keep_log_nights`` as it
starts: night logs under ``<home>/logs/<night>/`` were never removed (a flood night left 641 MB)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from pipelines.cli import main
from pipelines.launch.procs import start_time
from pipelines.storage.night_logs import NIGHT_NAME
from tests.cli.test_run_cli import PASSING
from tests.support.assets import registry_repo

OLD = "2020-01-01T000000Z-0ld0ld00"  # older than every night below: a candidate whatever keep is


def _keep(assets, n: int) -> None:
    cluster = yaml.safe_load((assets / "cluster.yaml").read_text())
    cluster["deployments"]["local"]["keep_log_nights"] = n
    (assets / "cluster.yaml").write_text(yaml.safe_dump(cluster))


def _nights(logs) -> list[str]:
    return sorted(p.name for p in logs.iterdir() if NIGHT_NAME.match(p.name))


@pytest.mark.slow  # three real (tiny) nights
def test_a_night_removes_the_logs_of_nights_older_than_the_last_n_but_never_a_running_one(tmp_path, capsys,
                                                                                        monkeypatch):
    _, assets = registry_repo(tmp_path, {"test_ok.py": PASSING.format(est=2)})
    _keep(assets, 2)
    monkeypatch.setenv("NIGHTLY_ASSETS_DIR", str(assets))
    home = tmp_path / "home"
    logs = home / "logs"
    for _ in range(2):
        assert main(["run", "--home", str(home), "--repo", "fw"]) == 0
    first, second = _nights(logs)
    assert "removed the logs of" not in capsys.readouterr().out  # two nights: none older than the last 2
    (logs / first / "flood.attempt1.log").write_bytes(b"x" * 3_000_000)
    # what is not a night's folder stays: build logs, a file, anything else under logs/
    (logs / "builds").mkdir(exist_ok=True)
    (logs / "builds" / "tiny-lm.log").write_text("built\n")
    (logs / "notes").mkdir()
    (logs / "2019-01-01.txt").write_text("mine\n")
    # an older night still running: its process holds its folder's lock (another process, as a live night)
    holder = subprocess.Popen([sys.executable, "-c", "import sys, pathlib; from pipelines.storage.night_logs import "
                               "hold_running; f = hold_running(pathlib.Path(sys.argv[1]), sys.argv[2]); print(1, "
                               "flush=True); sys.stdin.read()", str(logs), OLD],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        assert holder.stdout.readline().strip() == "1"
        # and one of an earlier version (no lock) with an attempt still running: a live night's running record
        busy = "2020-01-02T000000Z-busy0000"
        (logs / busy).mkdir()
        (home / "running").mkdir(exist_ok=True)
        (home / "running" / "busy.json").write_text(json.dumps({
            "token": "busy", "test_id": "tests/e2e/test_other.py", "night": busy, "run_id": "r",
            "owner_pid": os.getpid(), "owner_start": start_time(os.getpid())}))
        assert main(["run", "--home", str(home), "--repo", "fw"]) == 0
        out = capsys.readouterr().out
        third = [n for n in _nights(logs) if n not in (first, second, OLD, busy)]
        assert _nights(logs) == sorted([OLD, busy, second, *third])  # the first night's logs are gone
        [said] = [line for line in out.splitlines() if "removed the logs of" in line]
        assert (f"removed the logs of 1 night(s) older than the last 2 (3.0 MB) from {logs}; kept 2 older night(s) "
                f"still running ({busy}, {OLD})") in said
        assert (logs / "builds" / "tiny-lm.log").read_text() == "built\n" and (logs / "notes").is_dir()
        assert (logs / "2019-01-01.txt").exists()
    finally:
        holder.communicate("")
    (home / "running" / "busy.json").unlink()
    # the holder's night has ended (its process is gone), the record is gone: both go with the next night
    assert main(["run", "--home", str(home), "--repo", "fw"]) == 0
    assert "removed the logs of 3 night(s) older than the last 2" in capsys.readouterr().out
    assert len(_nights(logs)) == 2 and third[0] in _nights(logs)


@pytest.mark.slow  # a real (tiny) night
def test_keep_log_nights_0_keeps_every_night(tmp_path, capsys, monkeypatch):
    _, assets = registry_repo(tmp_path, {"test_ok.py": PASSING.format(est=2)})
    _keep(assets, 0)
    monkeypatch.setenv("NIGHTLY_ASSETS_DIR", str(assets))
    (tmp_path / "home" / "logs" / OLD).mkdir(parents=True)
    assert main(["run", "--home", str(tmp_path / "home"), "--repo", "fw"]) == 0
    assert "removed the logs of" not in capsys.readouterr().out
    assert OLD in _nights(tmp_path / "home" / "logs")
