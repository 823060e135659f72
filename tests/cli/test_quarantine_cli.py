"""``nightly quarantine`` as a maintainer types it, on a laid-out state folder shared by several repos."""

from __future__ import annotations

import json
import shutil

import pytest

from pipelines.cli import main
from tests.reporting.nights import LORA, SFT, example_night, tid, write_home


@pytest.fixture(scope="module")
def laid_out(tmp_path_factory):
    return write_home(example_night(tmp_path_factory.mktemp("home")))


@pytest.fixture
def home(laid_out, tmp_path):
    shutil.copytree(laid_out, tmp_path / "home")
    return tmp_path / "home"


def nightly(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


MISSPELLED = json.dumps({"version": 1, "actions_": [{"test": tid(SFT), "action": "add", "by": "alice",
                                                     "why": "issue #7", "at": "2026-11-06T09:00:00+00:00"}]})


@pytest.mark.parametrize("argv", [
    ("quarantine", "list"),
    ("quarantine", "add", tid(LORA), "--by", "bob", "--why", "hangs"),
    ("quarantine", "release", tid(SFT), "--by", "bob", "--why", "fixed"),
    ("report", "--json"),
    ("run", "--list-only"),
], ids=lambda argv: " ".join(argv[:2]))
def test_every_command_that_reads_a_broken_quarantine_document_says_where_and_leaves_it_as_it_was(home, capsys, argv):
    doc = home / "quarantine" / "minirl.json"
    doc.parent.mkdir()
    doc.write_text(MISSPELLED)
    code, _, err = nightly(capsys, *argv, "--home", str(home), "--repo", "minirl")
    assert code == 2, err
    assert f"{doc}:1: actions_: unknown key; did you mean 'actions'? " in err
    assert "move the file aside" in err and "Traceback" not in err
    assert doc.read_text() == MISSPELLED, "alice's action must not be lost"

