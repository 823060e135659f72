"""``nightly readd`` on a local deployment: what a night kept when its state folder refused writes goes back
into the folder, `nights/latest.json` included (the S3 path: tests/cli/test_s3_errors_cli.py and
tests/integration/test_production_outage.py)."""

from __future__ import annotations

import json
import shlex

from pipelines.cli import main
from pipelines.core.history import FileHistoryStore
from pipelines.core.model import Attempt, Sample
from pipelines.night import Night, NightSettings
from tests.support.assets import example_assets

TEST = "tests/e2e/megatron/test_sft_math.py"


def _kept(tmp_path, monkeypatch) -> tuple[Night, dict, str]:
    """A local night that wrote its partial record, then had its results refused: (night, record, README's command)."""
    assets = example_assets(tmp_path / "assets")
    monkeypatch.setenv("NIGHTLY_ASSETS_DIR", str(assets))
    monkeypatch.delenv("NIGHTLY_DEPLOYMENT", raising=False)
    night = Night(NightSettings(home=tmp_path / "home", assets_dir=assets))
    log = night.home / "logs" / night.night / "sft.attempt1.log"
    log.parent.mkdir(parents=True)
    log.write_text("loss went down\n")
    base = {"night": night.night, "run_id": night.run_id, "repo": "minirl", "selected": [TEST]}
    night.write_summary({**base, "status": "running", "attempts": []})  # as the run was planned
    attempt = Attempt(TEST, "passed", 9.0, "2026-12-04T16:56:40+00:00", node="local-h200-0", log_path=str(log))
    record = {**base, "status": "finished", "attempts": [{"test_id": TEST, "outcome": "passed", "elapsed_s": 9.0,
                                                          "started_at": attempt.started_at, "attempt": 1,
                                                          "log_path": str(log)}]}
    sample = Sample(TEST, "h200", "abc", "passed", 9.0, attempt.started_at, run_id=night.run_id, source=str(log))
    kept = night.keep_unsaved(record, [sample], [attempt], "disk full")
    return night, record, str(kept).splitlines()[-1].strip()


def test_the_readd_command_a_refused_local_night_prints_puts_its_results_back_and_its_record_as_latest(
        tmp_path, monkeypatch, capsys):
    night, record, command = _kept(tmp_path, monkeypatch)
    assert command.startswith("nightly readd --deployment local --home ")
    assert main(shlex.split(command)[1:]) == 0
    out = capsys.readouterr().out
    assert f"readd: nights/latest.json is night {night.night}'s record" in out, out
    home = night.home
    assert json.loads((home / "nights" / "latest.json").read_text())["status"] == "finished"
    assert json.loads((home / "runs" / f"{night.run_id}.json").read_text())["status"] == "finished"
    assert [s.test_id for s in FileHistoryStore(home / "history.sqlite").read()] == [TEST]


def test_a_cut_off_kept_sample_line_is_named_and_the_rest_put_back(tmp_path, monkeypatch, capsys):
    night, _, command = _kept(tmp_path, monkeypatch)
    (folder,) = (night.home / "unsaved").iterdir()
    with (folder / "history.jsonl").open("a") as fh:
        fh.write('{"test_id": "tests/e2e/x.py", "hardw')  # the disk filled up mid-line
    assert main(shlex.split(command)[1:]) == 1
    out, err = capsys.readouterr()
    assert "readd: 1 samples (1 new, 0 already stored)" in out
    assert f"{folder / 'history.jsonl'}:2: json: not a JSON object" in err, err


def test_a_folder_no_night_kept_is_refused_with_what_to_give(tmp_path, capsys):
    assert main(["readd", "--deployment", "local", "--home", str(tmp_path / "home"), str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path}: not a folder a night kept its refused results in (no README.txt there)" in err, err
