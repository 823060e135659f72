"""The per-file cache: a warm catalog parses nothing, a changed file is parsed alone, bad caches are rebuilt."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from pipelines.core.catalog import cached as cache_module
from pipelines.core.catalog import incremental, load_catalog
from pipelines.core.catalog import scan as scan_module
from pipelines.core.specs import RepoSpec

REG = 'register_cuda_ci({est}, "stage-c-4-gpu-h200", labels=["megatron"])\n'
FILES = {f"tests/test_{i}.py": REG.format(est=60 + i) for i in range(5)}
HOUR_AGO = time.time() - 3600


@pytest.fixture
def parses(monkeypatch) -> list[str]:
    """Every file the catalog parses (scan_bytes runs), in order."""
    seen: list[str] = []
    real = scan_module.scan_bytes

    def counting(rel, *args, **kwargs):
        seen.append(rel)
        return real(rel, *args, **kwargs)

    monkeypatch.setattr(cache_module, "scan_bytes", counting)
    monkeypatch.setattr(incremental, "scan_bytes", counting)
    return seen


def checkout(tree, files=FILES):
    """A checkout whose files are older than any cache (as a real one is)."""
    repo = tree(files)
    for path in repo.rglob("*.py"):
        os.utime(path, (HOUR_AGO, HOUR_AGO))
    return repo


def load(repo, cache):
    return load_catalog(repo, RepoSpec(name="fw", path=repo), cache_dir=cache)


def test_a_warm_catalog_parses_no_file_and_equals_the_cold_one(tree, tmp_path, parses):
    repo = checkout(tree)
    cold = load(repo, tmp_path / "cache")
    assert sorted(parses) == sorted(FILES)
    parses.clear()
    warm = load(repo, tmp_path / "cache")
    assert parses == []
    assert warm == cold


def test_only_the_changed_file_is_parsed_again(tree, tmp_path, parses):
    repo = checkout(tree)
    load(repo, tmp_path / "cache")
    parses.clear()
    (repo / "tests/test_3.py").write_text(REG.format(est=999))
    cat = load(repo, tmp_path / "cache")
    assert parses == ["tests/test_3.py"]
    assert cat.by_id()["tests/test_3.py"].est_time == 999


def test_a_file_touched_without_a_change_is_read_but_not_parsed(tree, tmp_path, parses):
    repo = checkout(tree)
    load(repo, tmp_path / "cache")
    parses.clear()
    os.utime(repo / "tests/test_1.py")  # newer than the cache: its digest is checked again
    load(repo, tmp_path / "cache")
    assert parses == []


def cache_files(folder):
    """(index, scans, last catalog) of the one checkout cached in ``folder``."""
    (index,) = [p for p in folder.glob("catalog-*.json") if p.name.count(".") == 1]
    return index, index.with_name(index.stem + ".scans.json"), index.with_name(index.stem + ".catalog.json")


def test_a_corrupt_cache_is_ignored_rebuilt_and_said(tree, tmp_path, parses):
    repo = checkout(tree)
    good = load(repo, tmp_path / "cache")
    index, scans, _ = cache_files(tmp_path / "cache")
    index.write_bytes(b'{"version": 1, "files": [')
    parses.clear()
    again = load(repo, tmp_path / "cache")
    assert again.tests == good.tests and parses == [], "scans are still found by content digest"
    assert any(n.startswith(f"cache {index} is corrupt (") and n.endswith("; ignored and rebuilt") for n in again.assumptions)
    scans.write_bytes(b"\x00garbage")
    index.write_bytes(b"[]")
    again = load(repo, tmp_path / "cache")
    assert again.tests == good.tests and sorted(parses) == sorted(FILES)
    assert any(n.startswith(f"cache {scans} is corrupt (") for n in again.assumptions)
    parses.clear()
    assert load(repo, tmp_path / "cache").tests == good.tests
    assert parses == []


def test_a_cache_entry_with_the_wrong_shape_is_a_miss_not_a_crash(tree, tmp_path, parses):
    repo = checkout(tree)
    load(repo, tmp_path / "cache")
    _, scans, _ = cache_files(tmp_path / "cache")
    scans.write_text(scans.read_text().replace('"r:tests/test_2.py":["', '"r:tests/test_2.py":[1,"'))
    (repo / "tests/test_5.py").write_text(REG.format(est=7))  # a new file: the full build reads the scans
    parses.clear()
    cat = load(repo, tmp_path / "cache")
    assert sorted(parses) == ["tests/test_2.py", "tests/test_5.py"] and len(cat.tests) == len(FILES) + 1


def test_a_damaged_whole_catalog_entry_is_rebuilt_from_the_scans(tree, tmp_path, parses):
    repo = checkout(tree)
    good = load(repo, tmp_path / "cache")
    _, _, last = cache_files(tmp_path / "cache")
    assert '"catalog":[[[' in last.read_text()
    last.write_text(last.read_text().replace('"catalog":[[[', '"catalog":[[[0,'))
    parses.clear()
    assert load(repo, tmp_path / "cache") == good
    assert parses == []


def test_results_made_under_other_rules_are_not_reused(tree, tmp_path, parses):
    repo = checkout(tree)
    load(repo, tmp_path / "cache")
    (repo / "fw").mkdir()
    (repo / "fw/ci.py").write_text("def register_cuda_ci(est_time, suite, *, labels=None):\n    pass\n")
    parses.clear()
    load(repo, tmp_path / "cache")
    assert sorted(parses) == sorted(FILES)


def test_a_file_without_register_is_not_parsed_unless_it_is_in_an_implicit_cpu_folder(tree, monkeypatch):
    repo = tree({"tests/test_plain.py": "x = 1\n", "tests/fast/test_unit.py": "x = 1\n"})
    parsed: list[str] = []
    real = scan_module.ast.parse
    monkeypatch.setattr(scan_module.ast, "parse", lambda src, filename="<unknown>", **kw: parsed.append(filename) or real(src, filename, **kw))
    cat = load_catalog(repo, RepoSpec(name="fw", path=repo, implicit_cpu_dirs=("tests/fast",)))
    assert parsed == ["tests/fast/test_unit.py"]
    assert [t.id for t in cat.tests] == ["tests/fast/test_unit.py"]
    assert [p.path for p in cat.problems] == ["tests/test_plain.py"]


EDITS = [
    ("an est_time edit", "tests/test_1.py", REG.format(est=4242)),
    ("a second registration (ids change)", "tests/test_1.py",
     REG.format(est=61) + 'register_cpu_ci(5, "stage-a-cpu")\n'),
    ("new needs", "tests/test_2.py", REG.format(est=62) + (
        'def prepare():\n    exec_command("hf download org/m --local-dir /root/models/m")\n')),
    ("a broken file", "tests/test_3.py", "register_cuda_ci(\n"),
    ("a new file", "tests/test_9.py", REG.format(est=9)),
    ("a file without registration", "tests/test_4.py", "x = 1\n"),
]


def test_after_each_kind_of_edit_the_cached_catalog_equals_a_fresh_read(tree, tmp_path):
    repo = checkout(tree)
    load(repo, tmp_path / "cache")
    for what, rel, text in EDITS:
        (repo / rel).write_text(text)
        cached = load(repo, tmp_path / "cache")
        fresh = load_catalog(repo, RepoSpec(name="fw", path=repo))
        assert (cached.tests, cached.requirements, cached.problems) == (fresh.tests, fresh.requirements, fresh.problems), what
    (repo / "tests/test_9.py").unlink()
    assert load(repo, tmp_path / "cache").tests == load_catalog(repo, RepoSpec(name="fw", path=repo)).tests


def test_an_edit_that_keeps_ids_and_needs_parses_only_that_file_and_not_the_scans_file(tree, tmp_path, parses):
    repo = checkout(tree)
    load(repo, tmp_path / "cache")
    load(repo, tmp_path / "cache")
    parses.clear()
    _, scans, _ = cache_files(tmp_path / "cache")
    scans.write_bytes(b"not read on this path")
    (repo / "tests/test_0.py").write_text(REG.format(est=777))
    cat = load(repo, tmp_path / "cache")
    assert parses == ["tests/test_0.py"] and cat.by_id()["tests/test_0.py"].est_time == 777
    assert not any("corrupt" in n for n in cat.assumptions)


def test_successive_edits_of_different_files_each_parse_one_file_and_stay_equal_to_a_fresh_read(tree, tmp_path, parses):
    repo = checkout(tree)
    load(repo, tmp_path / "cache")
    for i, rel in enumerate(("tests/test_0.py", "tests/test_3.py", "tests/test_0.py")):
        parses.clear()
        (repo / rel).write_text(REG.format(est=1000 + i))
        cached = load(repo, tmp_path / "cache")
        assert parses == [rel]
        assert cached.tests == load_catalog(repo, RepoSpec(name="fw", path=repo)).tests
    parses.clear()
    again = load(repo, tmp_path / "cache")
    assert parses == [] and again.by_id()["tests/test_0.py"].est_time == 1002


def test_a_cache_folder_under_a_file_leaves_the_catalog_read(tree, tmp_path):
    """ENOTDIR on the write and again on removing the temp file: not a crash (NIGHTLY_HOME=/dev/null/x)."""
    (tmp_path / "afile").write_text("")
    repo = checkout(tree)
    got = load(repo, tmp_path / "afile" / "cache")
    assert got.tests == load(repo, None).tests


def test_a_new_file_whose_path_is_refused_is_reported_with_a_warm_cache(tree, tmp_path):
    """Discovery leaves such a file out of the listing, so the kept catalog must not hide its problem."""
    repo = checkout(tree)
    load(repo, tmp_path / "cache")
    (repo / "tests/new dir").mkdir()
    (repo / "tests/new dir/test_x.py").write_text(REG.format(est=60))
    cached = load(repo, tmp_path / "cache")
    assert [p.path for p in cached.problems] == ["tests/new dir/test_x.py"]
    assert cached.problems == load_catalog(repo, RepoSpec(name="fw", path=repo)).problems


@pytest.mark.parametrize("changed", ["asset_rules.py", "model.py", "scan.py", "template.py"])
def test_a_change_to_code_a_scan_depends_on_makes_cached_scans_stale(changed, monkeypatch):
    """The download rules (core/asset_rules.py) decide a scan's requirement problems as much as the
    catalog's own modules do: a rule changed there must not leave old results in use."""
    from pipelines.core.catalog import cache

    read = Path.read_bytes
    monkeypatch.setattr(Path, "read_bytes", lambda self: read(self) + (b"#" if self.name == changed else b""))
    assert cache._code_digest() != cache.CODE


def test_a_gpu_call_added_beside_a_cpu_one_in_the_fast_folder_is_its_problem_in_the_cached_catalog_too(tree, tmp_path):
    """The file keeps its one CPU test (same id), so only the refused register_cuda_ci tells the catalogs apart."""
    repo = checkout(tree, {**FILES, "tests/fast/test_cpu.py": 'register_cpu_ci(1, "stage-a-cpu")\n'})
    spec = RepoSpec(name="fw", path=repo, implicit_cpu_dirs=("tests/fast",))
    load_catalog(repo, spec, cache_dir=tmp_path / "cache")
    (repo / "tests/fast/test_cpu.py").write_text(
        'register_cpu_ci(1, "stage-a-cpu")\nregister_cuda_ci(60, "stage-b-2-gpu-h200", labels=["megatron"])\n')
    cached = load_catalog(repo, spec, cache_dir=tmp_path / "cache")
    assert [(p.path, p.line, p.field) for p in cached.problems] == [("tests/fast/test_cpu.py", 2, "register_cuda_ci")]
    assert cached.problems == load_catalog(repo, spec).problems
