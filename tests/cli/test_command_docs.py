"""Every flag of ``nightly plan`` and ``nightly run`` is on its docs/ page (the pages are the manual)."""

from __future__ import annotations

import json

import pytest

from pipelines.cli import build_parser, main


def _flags(command: str) -> list[str]:
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    return [o for a in sub.choices[command]._actions for o in a.option_strings if o not in ("-h", "--help")]


@pytest.mark.parametrize(("command", "page"), [("plan", "plan.md"), ("run", "run.md")])
def test_every_flag_is_documented_on_the_commands_page(command, page, project_root):
    text = (project_root / "docs" / page).read_text()
    missing = [flag for flag in _flags(command) if f"`{flag}" not in text and f"[{flag}" not in text]
    assert missing == [], f"docs/{page} lacks {missing}"


def test_the_plan_page_lists_every_field_of_the_json(project_root, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("NIGHTLY_HOME", str(tmp_path))
    assert main(["plan", "--json", "--shards", "stage-b-2-gpu-h200=2"]) == 0
    out = json.loads(capsys.readouterr().out)
    rows = (out, out["pools"][0], out["assignments"][0], out["skipped"][0], out["static_shards"],
            out["static_shards"]["shards"][0])
    fields = {field for row in rows for field in row}
    text = (project_root / "docs" / "plan.md").read_text()
    assert sorted(f for f in fields if f"`{f}`" not in text) == []
