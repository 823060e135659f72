"""The Makefile's targets: each one is in `make help` and the README, and `make clean` keeps the
nightly state (history, manual quarantines, estimates, the Dagster instance), which only the
target named for it removes. Recipes run with bash on folders of their own, never through make."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from tests.conftest import PROJECT_ROOT

MAKEFILE = (PROJECT_ROOT / "Makefile").read_text()
INTERNAL = {"test-fast-lane-a", "test-fast-lane-b"}  # the two halves test-fast runs side by side


def recipe(target: str) -> list[str]:
    """The recipe lines of ``target`` (the tab-indented lines after ``target:``), as make would hand
    them to the shell ($$ unescaped, a leading @ dropped)."""
    lines = MAKEFILE.splitlines()
    start = next(i for i, ln in enumerate(lines) if re.match(rf"{re.escape(target)}:( |$)", ln))
    out = []
    for ln in lines[start + 1:]:
        if not ln.startswith("\t"):
            break
        out.append(ln[1:].lstrip("@").replace("$$", "$"))
    return out


def run(lines: list[str], cwd: Path, **variables: str) -> subprocess.CompletedProcess:
    script = "\n".join(lines)
    for name, value in variables.items():
        script = script.replace(f"$({name})", value)
    assert not re.search(r"\$\([A-Z_]+\)", script), script
    return subprocess.run([shutil.which("bash"), "-ec", script], cwd=cwd, capture_output=True, text=True, timeout=60)


def test_every_target_is_in_make_help_and_the_readme():
    phony = set(re.search(r"(?m)^\.PHONY: (.*)$", MAKEFILE).group(1).split()) - INTERNAL
    helped = " ".join(recipe("help"))
    readme = (PROJECT_ROOT / "README.md").read_text()
    assert sorted(t for t in phony - {"help"} if f"make {t} " not in helped) == []
    assert sorted(t for t in phony if f"make {t}" not in readme) == []


def _state(folder: Path) -> Path:
    for name in ("history.sqlite", "quarantine/minirl.json", "dagster/dagster.yaml"):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text("kept")
    return folder


def test_make_clean_removes_caches_and_keeps_the_state_and_distclean_the_venv_too(tmp_path):
    """`make clean` once deleted .nightly (history, quarantines with who and why) and left .venv."""
    _state(tmp_path / ".nightly")
    for cache in (".pytest_cache", ".ruff_cache", ".venv/bin"):
        (tmp_path / cache).mkdir(parents=True)
    assert run(recipe("clean"), tmp_path).returncode == 0
    assert (tmp_path / ".nightly" / "history.sqlite").exists() and (tmp_path / ".venv").exists()
    assert not (tmp_path / ".pytest_cache").exists() and not (tmp_path / ".ruff_cache").exists()
    assert run(recipe("clean") + recipe("distclean"), tmp_path, VENV=".venv").returncode == 0
    assert not (tmp_path / ".venv").exists() and (tmp_path / ".nightly" / "quarantine" / "minirl.json").exists()


def test_make_clean_state_removes_the_state_it_names_and_nothing_that_is_not_one(tmp_path):
    assert re.search(r"(?m)^STATE\s+:= \$\(or \$\(NIGHTLY_HOME\),\.nightly\)$", MAKEFILE), "as `nightly` reads it"
    state = _state(tmp_path / "home")
    done = run(recipe("clean-state"), tmp_path, STATE=str(state))
    assert done.returncode == 0 and not state.exists()
    assert f"make: removing the nightly state {state}" in done.stdout
    assert "nothing to remove" in run(recipe("clean-state"), tmp_path, STATE=str(state)).stdout
    other = tmp_path / "mine"  # NIGHTLY_HOME pointed at a folder of something else
    (other / "notes.txt").parent.mkdir()
    (other / "notes.txt").write_text("mine")
    refused = run(recipe("clean-state"), tmp_path, STATE=str(other))
    assert refused.returncode == 1 and (other / "notes.txt").exists()
    assert "does not look like a nightly state folder" in refused.stderr


def test_make_clean_state_removes_a_state_folder_holding_only_what_nightly_writes_but_not_a_common_folder(tmp_path):
    """After `nightly catalog` or `nightly plan` the state holds only cache/, and `.nightly/` may hold only
    scripts/loaded-test.sh's loaded-test/: the recipe refused both ("does not look like a nightly state folder").
    Those names alone are common ones, though: a folder with anything else beside them is still refused."""
    for names in (["cache"], ["loaded-test"], ["cache", "logs", "running", "reports", "unsaved"],
                  ["history.sqlite-wal"]):
        state = tmp_path / "-".join(names)
        for name in names:
            (state / name).mkdir(parents=True)
        done = run(recipe("clean-state"), tmp_path, STATE=str(state))
        assert done.returncode == 0 and not state.exists(), (names, done.stderr)
    mine = tmp_path / "var"  # NIGHTLY_HOME set to a folder that merely has a cache/ and logs/ of its own
    for name in ("cache", "logs", "lib"):
        (mine / name).mkdir(parents=True)
    refused = run(recipe("clean-state"), tmp_path, STATE=str(mine))
    assert refused.returncode == 1 and (mine / "lib").exists(), refused.stdout
    assert "does not look like a nightly state folder" in refused.stderr


def test_make_clean_state_never_removes_a_folder_that_holds_anything_nightly_does_not_write(tmp_path):
    """One nightly name was enough: a working folder with TensorBoard's runs/ beside its src/ and .git was
    removed whole when NIGHTLY_HOME pointed at it. Anything nightly never writes there refuses it."""
    work = tmp_path / "work"
    for name in ("runs", "src", ".git"):
        (work / name).mkdir(parents=True)
    refused = run(recipe("clean-state"), tmp_path, STATE=str(work))
    assert refused.returncode == 1 and (work / "src").exists() and (work / ".git").exists(), refused.stdout
    assert "does not look like a nightly state folder" in refused.stderr and ".git" in refused.stderr
    _state(work / "nested")
    for name in ("src", ".git"):
        (work / name).rmdir()
    (work / "nested").rename(work / "dagster")  # only nightly's names left: its own state, removed
    done = run(recipe("clean-state"), tmp_path, STATE=str(work))
    assert done.returncode == 0 and not work.exists(), done.stderr
