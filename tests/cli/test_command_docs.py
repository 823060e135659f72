"""Every flag of ``nightly plan`` and ``nightly run`` is on its docs/ page (the pages are the manual)."""

from __future__ import annotations

import argparse
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


def _options(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _options(sub, (*path, name))
        elif action.option_strings and action.option_strings != ["-h"] and "--help" not in action.option_strings:
            yield " ".join(path), action


def test_every_flag_of_every_command_says_what_it_takes():
    bare = [f"{command} {'/'.join(a.option_strings)}" for command, a in _options(build_parser()) if not a.help]
    assert bare == []


@pytest.mark.parametrize(("argv", "said"), [
    (("ui",), "--port PORT the port the UI listens on (default: 3000)"),
    (("ui",), "--host HOST the address the UI listens on (default: 127.0.0.1; 0.0.0.0 for every interface)"),
    (("run",), "(default: $NIGHTLY_DEPLOYMENT, else local)"),
    (("plan",), "(default: $NIGHTLY_DEPLOYMENT, else its `default`)"),
])
def test_help_gives_the_defaults_the_command_really_uses(capsys, argv, said):
    with pytest.raises(SystemExit):
        main([*argv, "--help"])
    assert said in " ".join(capsys.readouterr().out.split())


def test_run_help_lists_every_exit_status_docs_run_md_lists(capsys, project_root):
    """`nightly run --help` and docs/run.md's table are the same manual: a status one of them lacks misleads
    a CI script (2 and 141 were missing from the help)."""
    import re

    page = (project_root / "docs" / "run.md").read_text().split("## Exit status", 1)[1].split("\n## ", 1)[0]
    documented = re.findall(r"(?m)^\| (\d+) \|", page)
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    said = " ".join(capsys.readouterr().out.split()).split("Exit status:", 1)[1]
    assert documented and [c for c in documented if not re.search(rf"\b{c} when\b", said)] == []


def test_run_dry_run_help_says_what_it_reads_from_the_cluster_and_s3(capsys):
    """It reads the nodes' GPU driver through the kubeconfig and the estimates on S3: "no cluster is touched"
    was wrong, and a dry run without S3 credentials fails on them."""
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    said = " ".join(capsys.readouterr().out.split())
    assert "no cluster is touched" not in said
    assert "the nodes' GPU driver when a kubeconfig reaches the cluster" in said and "S3 read access" in said
