"""Parsing on every CPU with fork: same answer, same order, never lost work."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading

from pipelines.core.catalog import forked
from pipelines.core.catalog.forked import can_fork, default_workers, fork_map
from tests.conftest import PROJECT_ROOT


def in_fresh_python(body: str) -> None:
    """Run ``body`` in a new single-threaded interpreter: whatever threads earlier tests left in
    this process (fork is then refused, rightly), the forking path itself is always exercised."""
    code = "import os\nfrom pipelines.core.catalog.forked import can_fork, fork_map\n" \
           "assert can_fork(), 'a fresh interpreter must be allowed to fork'\n" + textwrap.dedent(body)
    done = subprocess.run([sys.executable, "-c", code], cwd=PROJECT_ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def _whose(item: int) -> tuple[int, int]:
    return item * item, os.getpid()


def test_results_come_back_in_input_order_whatever_process_computed_them():
    in_fresh_python("""
        def whose(item):
            return item * item, os.getpid()

        out = fork_map(whose, list(range(101)), workers=3)
        assert [square for square, _ in out] == [i * i for i in range(101)], out
        assert {pid for _, pid in out} - {os.getpid()}, "no item was computed by a forked child"
    """)


def test_a_child_that_dies_has_its_share_recomputed_here():
    in_fresh_python("""
        parent = os.getpid()

        def dies_in_children(item):
            if os.getpid() != parent:
                os._exit(3)
            return item + 1

        assert fork_map(dies_in_children, list(range(10)), workers=2) == list(range(1, 11))
    """)


def test_a_child_that_raises_has_its_share_recomputed_here():
    in_fresh_python("""
        parent = os.getpid()

        def raises_in_children(item):
            if os.getpid() != parent:
                raise RuntimeError("boom")
            return str(item)

        assert fork_map(raises_in_children, list(range(7)), workers=3) == [str(i) for i in range(7)]
    """)


def test_small_batches_stay_in_this_process():
    assert default_workers(forked.FORK_MIN_ITEMS - 1) == 1
    assert fork_map(_whose, [1, 2], workers=None) == [(1, os.getpid()), (4, os.getpid())]


def test_no_fork_while_other_threads_run():
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        assert not can_fork()
        assert default_workers(10 * forked.FORK_MIN_ITEMS) == 1
        assert {pid for _, pid in fork_map(_whose, list(range(20)), workers=4)} == {os.getpid()}
    finally:
        stop.set()
        thread.join()


_WRITER_TREE = """
    import tempfile
    from pathlib import Path
    import pipelines.core.catalog.cache as cache_mod
    import pipelines.core.catalog.cached as cached_mod
    from pipelines.core.catalog import load_catalog
    from pipelines.core.specs import RepoSpec

    tmp = Path(tempfile.mkdtemp())
    repo = tmp / "repo"
    for i in range(30):
        folder = repo / "tests" / f"g{i % 3}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"test_{i}.py").write_text(
            f'register_cuda_ci({60 + i}, "stage-a-{1 + i % 2}-gpu-h200", labels=["x"])\\n'
            f'def prepare():\\n    hf_download_dataset("org/data-{i % 4}")\\n')
    spec = RepoSpec(name="fw", path=repo, format="registry")
    real_fork, forks = os.fork, []

    def counting_fork():
        forks.append(1)
        return real_fork()

    os.fork = counting_fork

    def scans_file(where):
        (path,) = where.glob("*.scans.json")
        return path.read_bytes()
"""


def test_a_scans_file_written_by_a_forked_writer_is_the_one_this_process_writes_and_reads_back():
    in_fresh_python(_WRITER_TREE + """
    cache_mod.WRITER_MIN_SCANS = 1
    cold = load_catalog(repo, spec, cache_dir=tmp / "a")
    assert len(forks) == 1, "the scans file was not written by a forked process"
    cache_mod.WRITER_MIN_SCANS = 10**9
    assert load_catalog(repo, spec, cache_dir=tmp / "b") == cold and len(forks) == 1
    assert scans_file(tmp / "a") == scans_file(tmp / "b")

    # a new file: a full build, every other file's scan read back from the written scans file
    (repo / "tests" / "test_new.py").write_text('register_cuda_ci(5, "stage-a-1-gpu-h200", labels=["x"])\\n')
    parsed = []
    real_scan = cached_mod.scan_bytes
    cached_mod.scan_bytes = lambda rel, *args: (parsed.append(rel), real_scan(rel, *args))[1]
    again = load_catalog(repo, spec, cache_dir=tmp / "a")
    assert parsed == ["tests/test_new.py"], parsed
    cached_mod.scan_bytes = real_scan
    assert again == load_catalog(repo, spec)
    """)


def test_a_scans_writer_that_dies_has_its_file_written_here():
    in_fresh_python(_WRITER_TREE + """
    cache_mod.WRITER_MIN_SCANS = 1
    parent, real_write = os.getpid(), cache_mod.ScanCache._write_scans

    def dies_in_children(self):
        if os.getpid() != parent:
            os._exit(3)
        return real_write(self)

    cache_mod.ScanCache._write_scans = dies_in_children
    cold = load_catalog(repo, spec, cache_dir=tmp / "a")
    assert len(forks) == 1
    cache_mod.ScanCache._write_scans = real_write
    cache_mod.WRITER_MIN_SCANS = 10**9
    assert load_catalog(repo, spec, cache_dir=tmp / "b") == cold
    assert scans_file(tmp / "a") == scans_file(tmp / "b")
    """)


def test_after_a_writer_wrote_one_rules_scans_the_file_ends_with_the_rules_the_catalog_used():
    """Format auto: the registry read (written by a forked writer) finds no registration, the template
    is read next; the scans file must end with the template's scans, or each read re-parses them."""
    in_fresh_python("""
    import json
    import tempfile
    from pathlib import Path
    import pipelines.core.catalog.cache as cache_mod
    from pipelines.core.catalog import load_catalog
    from pipelines.core.specs import RepoSpec

    repo = Path(tempfile.mkdtemp()) / "repo"
    (repo / ".github/workflows").mkdir(parents=True)
    (repo / ".github/workflows/pr.yml.j2").write_text(
        "<% set jobs = {'j': {'label': 'run-ci-j', 'tests': [{'test_file': 'test_0.py', 'num_gpus': 2}]}} %>\\n")
    (repo / "tests").mkdir()
    for i in range(20):
        (repo / "tests" / f"test_{i}.py").write_text(f"NUM_GPUS = {i}\\n")
    spec = RepoSpec(name="fw", path=repo)
    cache_mod.WRITER_MIN_SCANS = 1
    for _ in range(2):
        cat = load_catalog(repo, spec, cache_dir=repo.parent / "cache")
        (scans,) = (repo.parent / "cache").glob("*.scans.json")
        assert list(json.loads(scans.read_text())["scans"]) == ["template"]
    assert cat == load_catalog(repo, spec) and len(cat.tests) == 1
    """)


def test_a_load_that_raises_after_the_writer_forked_leaves_no_child_behind():
    in_fresh_python(_WRITER_TREE + """
    import pipelines.core.catalog as catalog_mod
    cache_mod.WRITER_MIN_SCANS = 1

    def broken(*args, **kwargs):
        raise RuntimeError("requirements failed")

    catalog_mod.build_requirements = broken
    try:
        load_catalog(repo, spec, cache_dir=tmp / "a")
    except RuntimeError:
        pass
    else:
        raise AssertionError("the load did not raise")
    assert len(forks) == 1, "no scans writer was forked before the failure"
    try:
        left = os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        left = None
    assert left is None, f"a child of the load is still unreaped: {left}"
    """)
