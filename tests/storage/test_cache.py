"""The asset cache: built once, reused after, never half-built."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from pipelines.core.model import Requirement
from pipelines.core.specs import ConversionSpec
from pipelines.storage.cache import AssetCache, BuildError, conversion_command

MODEL = Requirement("model", "m1", "org/m1", "/root/models/m1")
CONV = Requirement("conversion", "m1_torch_dist", "m1", "/root/models/m1_torch_dist",
                   params=(("megatron_model_type", "tiny"), ("num_gpus_per_node", "2")), depends_on=("m1",))


@pytest.fixture
def hub(tmp_path):
    d = tmp_path / "hub" / "models" / "org" / "m1"
    d.mkdir(parents=True)
    (d / "weights.bin").write_bytes(b"w" * 100)
    return tmp_path / "hub"


def test_container_paths_map_under_the_cache_root(tmp_path):
    cache = AssetCache(tmp_path / "c")
    assert cache.host_path("/root/models/x") == tmp_path / "c" / "models" / "x"
    assert cache.host_path("/dev/shm/x") == tmp_path / "c" / "_outside_root" / "dev" / "shm" / "x"
    with pytest.raises(BuildError, match="not a usable path"):
        cache.host_path("/root/../etc")


@pytest.mark.parametrize("path", ["models/x", "/root", "/root/models/../../etc", "/root/models", "/root/datasets/",
                                  "/dev/shm"])
def test_the_cache_refuses_every_folder_the_catalog_refuses(tmp_path, path):
    # one rule (catalog.requirements.cache_relpath): a relative folder used to land under the cache
    # locally while the catalog and Kubernetes refused it
    from pipelines.core.catalog.requirements import cache_path_problem

    assert cache_path_problem(path)
    with pytest.raises(BuildError, match="use an absolute path under /root"):
        AssetCache(tmp_path / "c").host_path(path)


def test_a_model_is_downloaded_once_then_reused(tmp_path, hub):
    cache = AssetCache(tmp_path / "c", hub)
    first = cache.build(MODEL)
    second = cache.build(MODEL)
    assert (first.reused, second.reused) == (False, True)
    assert first.files == 1 and first.bytes == 100
    assert (tmp_path / "c" / "models" / "m1" / "weights.bin").exists()


def test_a_missing_hub_entry_names_the_model_and_the_hub(tmp_path, hub):
    cache = AssetCache(tmp_path / "c", hub)
    with pytest.raises(BuildError, match="org/nope.*local hub"):
        cache.build(Requirement("model", "nope", "org/nope", "/root/models/nope"))


def test_a_conversion_runs_the_framework_command_with_an_argv(tmp_path, hub):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "conv.py").write_text(
        "import sys, os, shutil\n"
        "a = dict(zip(sys.argv[1::2], sys.argv[2::2]))\n"
        "os.makedirs(a['--save'])\n"
        "open(os.path.join(a['--save'], 'shard'), 'w').write(a['--type'])\n"
    )
    spec = ConversionSpec(command=("{python}", "conv.py", "--src", "{model_path}", "--save", "{output}",
                                   "--type", "{megatron_model_type}"))
    cache = AssetCache(tmp_path / "c", hub)
    cache.build(MODEL)
    built = cache.build(CONV, repo=repo, conversion=spec, models={"m1": MODEL})
    assert not built.reused
    assert (tmp_path / "c" / "models" / "m1_torch_dist" / "shard").read_text() == "tiny"
    assert cache.build(CONV, repo=repo, conversion=spec, models={"m1": MODEL}).reused


def test_every_placeholder_the_specs_accept_is_filled_and_the_env_is_passed_as_written():
    """checkpoints.yaml is checked against CONVERSION_PLACEHOLDERS: each must fill here, and the env
    (plain text by the schema) is never formatted: a JSON value with braces reaches the converter."""
    from pipelines.core.specs_schema import CONVERSION_PLACEHOLDERS

    spec = ConversionSpec(command=tuple(f"--{p}={{{p}}}" for p in CONVERSION_PLACEHOLDERS),
                          env={"CFG": '{"a": 1}'})
    argv, env = conversion_command(spec, CONV, "py", "/m", "/out")
    assert argv[:3] == ["--python=py", "--model_path=/m", "--output=/out"]
    assert len(argv) == len(CONVERSION_PLACEHOLDERS)
    assert env == {"CFG": '{"a": 1}'}


def test_a_failed_conversion_leaves_nothing_that_looks_built(tmp_path, hub):
    repo = tmp_path / "repo"
    repo.mkdir()
    spec = ConversionSpec(command=(sys.executable, "-c", "import sys; print('bad shard'); sys.exit(3)"))
    cache = AssetCache(tmp_path / "c", hub)
    cache.build(MODEL)
    with pytest.raises(BuildError, match="(?s)exited 3.*bad shard"):
        cache.build(CONV, repo=repo, conversion=spec, models={"m1": MODEL})
    assert not cache.is_built(CONV)
    assert not (tmp_path / "c" / "models" / "m1_torch_dist").exists()


def test_a_converter_that_is_not_installed_is_named_not_taken_for_a_cache_folder_problem(tmp_path, hub):
    repo = tmp_path / "repo"
    repo.mkdir()
    spec = ConversionSpec(command=("torchrun-not-installed", "conv.py", "--save", "{output}"))
    cache = AssetCache(tmp_path / "c", hub)
    cache.build(MODEL)
    with pytest.raises(BuildError) as exc:
        cache.build(CONV, repo=repo, conversion=spec, models={"m1": MODEL})
    said = str(exc.value)
    assert said.startswith("conversion m1_torch_dist: cannot start 'torchrun-not-installed' (No such file or directory)")
    assert "assets/checkpoints.yaml" in said and "bytes free" not in said
    assert not cache.is_built(CONV)


def test_a_conversion_before_its_model_says_what_to_build_first(tmp_path, hub):
    cache = AssetCache(tmp_path / "c", hub)
    with pytest.raises(BuildError, match="build model_weights first"):
        cache.build(CONV, repo=tmp_path, conversion=ConversionSpec(("x",)), models={"m1": MODEL})


@pytest.mark.parametrize("source", ["--local-dir=/etc/x", "../../../etc", "org/../../x", "just-a-name"])
def test_a_download_that_is_not_an_org_name_hub_id_is_refused(tmp_path, hub, source):
    cache = AssetCache(tmp_path / "c", hub)
    with pytest.raises(BuildError, match="is not a Hub id"):
        cache.build(Requirement("model", "m", source, "/root/models/m"))
    assert not (tmp_path / "c" / "models" / "m").exists()


def test_a_second_builder_waits_for_the_first_and_reuses_its_work(tmp_path, hub):
    import threading

    cache = AssetCache(tmp_path / "c", hub)
    results = []
    threads = [threading.Thread(target=lambda: results.append(cache.build(MODEL))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(r.reused for r in results) == [False, True]


def test_the_completion_marker_lists_every_file_with_size_and_digest(tmp_path, hub):
    import hashlib
    import json

    AssetCache(tmp_path / "c", hub).build(MODEL)
    marker = json.loads((tmp_path / "c" / "models" / "m1" / ".nightly-complete.json").read_text())
    assert marker["manifest"]["files"] == {"weights.bin": {"size": 100, "sha256": hashlib.sha256(b"w" * 100).hexdigest()}}


@pytest.mark.parametrize(("harm", "why"), [
    (lambda p: p.write_bytes(b"w" * 10), "weights.bin: 10 bytes, the manifest says 100"),
    (lambda p: p.write_bytes(b"x" * 100), "weights.bin: content differs from the manifest (sha256)"),
    (lambda p: p.unlink(), "weights.bin: listed in the manifest but missing"),
])
def test_a_damaged_entry_is_rebuilt_and_reported_as_repaired(tmp_path, hub, harm, why):
    cache = AssetCache(tmp_path / "c", hub)
    cache.build(MODEL)
    harm(tmp_path / "c" / "models" / "m1" / "weights.bin")
    assert why in cache.damage(MODEL)
    built = cache.build(MODEL)
    assert (built.reused, built.repaired) == (False, True) and why in built.damage
    assert (tmp_path / "c" / "models" / "m1" / "weights.bin").read_bytes() == b"w" * 100
    assert cache.build(MODEL).reused


def test_a_marker_without_a_manifest_is_not_trusted(tmp_path, hub):
    cache = AssetCache(tmp_path / "c", hub)
    dest = tmp_path / "c" / "models" / "m1"
    dest.mkdir(parents=True)
    (dest / "weights.bin").write_bytes(b"old")
    (dest / ".nightly-complete.json").write_text('{"key": "m1"}')
    built = cache.build(MODEL)
    assert built.repaired and built.damage.endswith("no manifest (built by an older nightly)")


def test_leftover_partial_folders_of_dead_builders_are_removed(tmp_path, hub):
    cache = AssetCache(tmp_path / "c", hub)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    left = tmp_path / "c" / "models" / f".m1.partial-{int(dead.stdout)}"
    alive = tmp_path / "c" / "models" / f".m2.partial-{os.getpid()}"
    for d in (left, alive):
        d.mkdir(parents=True)
    assert cache.clean_partials() == [left]
    assert alive.exists() and not left.exists()
    left.mkdir()
    cache.build(MODEL)  # a builder holding the folder's lock removes the folder's leftovers too
    assert not left.exists()


def test_a_build_past_its_time_limit_is_killed_and_named(tmp_path, hub):
    repo = tmp_path / "repo"
    repo.mkdir()
    spec = ConversionSpec(command=(sys.executable, "-c", "import time; time.sleep(600)"))
    cache = AssetCache(tmp_path / "c", hub, build_timeout_s=1)
    cache.build(MODEL)
    with pytest.raises(BuildError, match=r"conversion m1_torch_dist: command .* did not finish within the 1 s "
                                         r"build timeout; it was killed"):
        cache.build(CONV, repo=repo, conversion=spec, models={"m1": MODEL})
    assert not cache.is_built(CONV)


def test_a_build_started_while_sigint_is_blocked_runs_with_nothing_blocked(tmp_path):
    """`nightly run` blocks SIGINT in its threads while Dagster runs; a build must not inherit it."""
    import signal
    import threading

    from pipelines.storage.cache import _run

    seen = {}

    def build() -> None:  # a thread of its own: the mask is per thread, the test's own stays as it was
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            _run(["grep", "SigBlk", "/proc/self/status"], None, dict(os.environ), "probe", tmp_path / "b.log")
        except Exception as exc:  # noqa: BLE001 - reported by the assert below
            seen["error"] = exc

    worker = threading.Thread(target=build)
    worker.start()
    worker.join(timeout=120)
    assert "error" not in seen, seen
    assert "SigBlk:\t0000000000000000" in (tmp_path / "b.log").read_text()
    # a missing command fails in this process, as it always did, and says it could not start
    with pytest.raises(BuildError, match=r"probe: cannot start 'no-such-converter' \(No such file or directory\)"):
        _run(["no-such-converter"], None, dict(os.environ), "probe", None)


def converter_checkout(tmp_path):
    """A checkout whose converter imports a module of its own (``fw/layout.py``)."""
    repo = tmp_path / "repo"
    (repo / "tools").mkdir(parents=True)
    (repo / "fw").mkdir()
    (repo / "fw" / "__init__.py").write_text("")
    (repo / "fw" / "layout.py").write_text("TAG = 'v1'\n")
    (repo / "tools" / "conv.py").write_text(
        "import os, sys\n"
        "sys.path.insert(0, os.getcwd())\n"
        "from fw.layout import TAG\n"
        "a = dict(zip(sys.argv[1::2], sys.argv[2::2]))\n"
        "os.makedirs(a['--save'])\n"
        "open(os.path.join(a['--save'], 'shard'), 'w').write(a['--type'] + ':' + TAG)\n")
    spec = ConversionSpec(command=("{python}", "tools/conv.py", "--src", "{model_path}", "--save", "{output}",
                                   "--type", "{megatron_model_type}", "{extra_args}"))
    return repo, spec


def test_an_unchanged_converter_reuses_the_conversion_and_records_its_identity(tmp_path, hub):
    import json

    repo, spec = converter_checkout(tmp_path)
    cache = AssetCache(tmp_path / "c", hub)
    cache.build(MODEL)
    first = cache.build(CONV, repo=repo, conversion=spec, models={"m1": MODEL})
    (repo / "README.md").write_text("not run by the converter\n")
    second = cache.build(CONV, repo=repo, conversion=spec, models={"m1": MODEL})
    assert (first.reused, second.reused, second.rebuilt) == (False, True, "")
    assert first.identity and second.identity == first.identity
    marker = json.loads((tmp_path / "c" / "models" / "m1_torch_dist" / ".nightly-complete.json").read_text())
    assert marker["identity"] == first.identity
    assert sorted(marker["recipe"]["files"]) == ["fw/__init__.py", "fw/layout.py", "tools/conv.py"]


@pytest.mark.parametrize(("change", "why"), [
    (lambda repo: (repo / "tools" / "conv.py").write_text((repo / "tools" / "conv.py").read_text() + "# v2\n"),
     "files tools/conv.py"),
    (lambda repo: (repo / "fw" / "layout.py").write_text("TAG = 'v2'\n"), "files fw/layout.py"),
])
def test_a_change_in_the_converter_or_a_module_it_imports_rebuilds_the_conversion(tmp_path, hub, change, why):
    repo, spec = converter_checkout(tmp_path)
    cache = AssetCache(tmp_path / "c", hub)
    cache.build(MODEL)
    first = cache.build(CONV, repo=repo, conversion=spec, models={"m1": MODEL})
    change(repo)
    again = cache.build(CONV, repo=repo, conversion=spec, models={"m1": MODEL})
    assert (again.reused, again.repaired) == (False, False), "a new converter is not damage"
    assert why in again.rebuilt and again.identity != first.identity
    assert cache.build(CONV, repo=repo, conversion=spec, models={"m1": MODEL}).reused


def test_a_converter_that_now_fails_fails_the_build_and_the_old_entry_is_not_passed_off_as_current(tmp_path, hub):
    repo, spec = converter_checkout(tmp_path)
    cache = AssetCache(tmp_path / "c", hub)
    cache.build(MODEL)
    cache.build(CONV, repo=repo, conversion=spec, models={"m1": MODEL})
    (repo / "fw" / "layout.py").write_text("raise RuntimeError('converter regression')\n")
    for _ in range(2):  # and the next night tries again rather than reusing yesterday's output
        with pytest.raises(BuildError, match="converter regression"):
            cache.build(CONV, repo=repo, conversion=spec, models={"m1": MODEL})


def test_other_extra_args_another_model_or_an_old_marker_rebuild_the_conversion(tmp_path, hub):
    import dataclasses
    import json

    repo, spec = converter_checkout(tmp_path)
    cache = AssetCache(tmp_path / "c", hub)
    cache.build(MODEL)
    cache.build(CONV, repo=repo, conversion=spec, models={"m1": MODEL})
    other = dataclasses.replace(CONV, params=(*CONV.params, ("extra_args", "--dtype bf16")))
    assert "its argv" in cache.build(other, repo=repo, conversion=spec, models={"m1": MODEL}).rebuilt
    (hub / "models" / "org" / "m1" / "weights.bin").write_bytes(b"v" * 100)  # a new upstream revision
    shutil.rmtree(tmp_path / "c" / "models" / "m1")
    cache.build(MODEL)
    assert cache.build(other, repo=repo, conversion=spec, models={"m1": MODEL}).rebuilt.endswith("identity changed: its model changed")
    marker = tmp_path / "c" / "models" / "m1_torch_dist" / ".nightly-complete.json"
    old = json.loads(marker.read_text())
    del old["identity"], old["recipe"]
    marker.write_text(json.dumps(old))
    assert "no conversion identity" in cache.build(other, repo=repo, conversion=spec, models={"m1": MODEL}).rebuilt


def test_a_model_downloaded_again_with_the_same_files_keeps_its_conversions(tmp_path, hub):
    """docs/storage.md said conversions of a model downloaded again are rebuilt after it; they are only
    when its files changed (the identity holds the model's file digest, as the test above shows)."""
    repo, spec = converter_checkout(tmp_path)
    cache = AssetCache(tmp_path / "c", hub)
    cache.build(MODEL)
    first = cache.build(CONV, repo=repo, conversion=spec, models={"m1": MODEL})
    shutil.rmtree(tmp_path / "c" / "models" / "m1")  # `rm -rf <home>/cache/models/<name>`, as the docs say
    assert not cache.build(MODEL).reused
    again = cache.build(CONV, repo=repo, conversion=spec, models={"m1": MODEL})
    assert (again.reused, again.identity) == (True, first.identity)


def test_a_conversion_asked_with_another_gpu_count_or_multinode_reuses_the_checkpoint(tmp_path, hub):
    """num_gpus_per_node and multinode only launch the conversion: its identity leaves them out."""
    import dataclasses

    from pipelines.storage.cache import conversion_recipe

    repo, spec = converter_checkout(tmp_path)
    spec = dataclasses.replace(spec, command=(*spec.command, "--gpus", "{num_gpus_per_node}"))
    cache = AssetCache(tmp_path / "c", hub)
    cache.build(MODEL)
    first = cache.build(CONV, repo=repo, conversion=spec, models={"m1": MODEL})
    wider = dataclasses.replace(CONV, params=(("megatron_model_type", "tiny"), ("multinode", "True"),
                                              ("num_gpus_per_node", "8")))
    again = cache.build(wider, repo=repo, conversion=spec, models={"m1": MODEL})
    assert (again.reused, again.rebuilt, again.identity) == (True, "", first.identity)
    assert conversion_recipe(spec, wider, repo, {}).argv[-2:] == ("--gpus", "{num_gpus_per_node}")


def test_a_model_whose_source_changed_is_downloaded_again(tmp_path, hub):
    import dataclasses

    cache = AssetCache(tmp_path / "c", hub)
    cache.build(MODEL)
    (hub / "models" / "org" / "m2").mkdir()
    (hub / "models" / "org" / "m2" / "weights.bin").write_bytes(b"2" * 10)
    moved = dataclasses.replace(MODEL, source="org/m2")
    built = cache.build(moved)
    assert "built from 'org/m1', the catalog now says 'org/m2'" in built.rebuilt and not built.reused
    assert cache.build(moved).reused


def fake_hf(tmp_path, monkeypatch):
    """An ``hf`` on PATH that logs its argv and writes one file into --local-dir."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "hf").write_text(
        "#!/bin/sh\n"
        f"echo \"$*\" >> {tmp_path}/hf.log\n"
        'while [ $# -gt 0 ]; do [ "$1" = --local-dir ] && { shift; mkdir -p "$1"; echo w > "$1/m.safetensors"; }; '
        "shift; done\n")
    (bin_dir / "hf").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return tmp_path / "hf.log"


def test_a_download_gets_its_revision_and_filters_and_a_new_revision_downloads_again(tmp_path, monkeypatch):
    import dataclasses

    log = fake_hf(tmp_path, monkeypatch)
    cache = AssetCache(tmp_path / "c")
    cache.build(MODEL)  # yesterday's entry, built without a revision
    pinned = dataclasses.replace(MODEL, params=(("include", "*.safetensors config.json"), ("revision", "v1.0")))
    built = cache.build(pinned)
    assert not built.reused
    assert "the catalog now says 'org/m1 --include *.safetensors config.json --revision v1.0'" in built.rebuilt
    assert log.read_text().splitlines()[-1].startswith(
        "download org/m1 --include *.safetensors config.json --revision v1.0 --local-dir ")
    assert cache.build(pinned).reused
    assert not cache.build(dataclasses.replace(pinned, params=(("revision", "v2.0"),))).reused


def test_a_download_of_named_files_passes_them_after_the_repo_id_and_records_them(tmp_path, monkeypatch):
    import dataclasses

    from pipelines.launch.kubernetes.builds import ClusterBuilder

    log = fake_hf(tmp_path, monkeypatch)
    cache = AssetCache(tmp_path / "c")
    cache.build(MODEL)  # the whole repository
    files = dataclasses.replace(MODEL, params=(("files", "config.json tokenizer.json"),))
    built = cache.build(files)
    assert "the catalog now says 'org/m1 config.json tokenizer.json'" in built.rebuilt
    assert log.read_text().splitlines()[-1].startswith("download org/m1 config.json tokenizer.json --local-dir ")
    assert cache.build(files).reused
    # a build pod runs the same hf command
    pod_argv, _, _ = ClusterBuilder.command(None, files, "/tmp/x", None, {})  # type: ignore[arg-type]
    assert pod_argv == ["hf", "download", "org/m1", "config.json", "tokenizer.json", "--local-dir", "/tmp/x"]
    with pytest.raises(BuildError, match="model m1: '--force-download' is not a file name"):
        cache.build(dataclasses.replace(MODEL, params=(("files", "--force-download"),)))


def test_a_revision_that_is_an_option_never_reaches_hf(tmp_path, monkeypatch):
    import dataclasses

    fake_hf(tmp_path, monkeypatch)
    with pytest.raises(BuildError, match="model m1: --revision '--force-download' is not a revision"):
        AssetCache(tmp_path / "c").build(dataclasses.replace(MODEL, params=(("revision", "--force-download"),)))


def sleeping_converter(tmp_path):
    """A conversion whose command records its pid, then sleeps past any test (a stuck torchrun)."""
    repo = tmp_path / "repo"
    repo.mkdir()
    pid_file = tmp_path / "converter.pid"
    code = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(120)"
    return repo, ConversionSpec(command=(sys.executable, "-c", code)), pid_file


def wait_for(predicate, timeout_s=20.0):
    import time

    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.05)


def gone(pid: int) -> bool:
    """Dead or a zombie nobody reaped yet (a zombie holds no GPU)."""
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


def test_an_interrupted_build_kills_its_command_before_the_interruption_goes_on(tmp_path, hub):
    import signal

    repo, spec, pid_file = sleeping_converter(tmp_path)
    cache = AssetCache(tmp_path / "c", hub)
    cache.build(MODEL)

    def interrupt(signum, frame):
        if pid_file.exists():
            raise KeyboardInterrupt  # as Ctrl-C, SIGTERM or Dagster's terminate reach the night's thread

    old = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 0.2, 0.2)
    try:
        with pytest.raises(KeyboardInterrupt):
            cache.build(CONV, repo=repo, conversion=spec, models={"m1": MODEL})
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    converter = int(pid_file.read_text())
    alive = not gone(converter)
    if alive:  # the failure below must not leave a sleeper behind
        os.kill(converter, signal.SIGKILL)
    assert not alive
    assert not [p for p in (tmp_path / "c" / "models").iterdir() if ".partial-" in p.name]
    assert not list(cache.running_dir.iterdir())


def test_a_build_whose_night_was_killed_is_ended_by_the_next_night(tmp_path, hub):
    import signal

    repo, spec, pid_file = sleeping_converter(tmp_path)
    AssetCache(tmp_path / "c", hub).build(MODEL)
    night = subprocess.Popen([sys.executable, "-c", (
        "import sys; from pathlib import Path; from pipelines.storage.cache import AssetCache; "
        "from pipelines.core.specs import ConversionSpec; from tests.storage.test_cache import CONV, MODEL; "
        f"AssetCache(Path({str(tmp_path / 'c')!r})).build(CONV, repo=Path({str(repo)!r}), "
        f"conversion=ConversionSpec(command={spec.command!r}), models={{'m1': MODEL}})")],
        cwd=os.getcwd())
    try:
        wait_for(pid_file.exists)
        converter = int(pid_file.read_text())
        night.send_signal(signal.SIGKILL)  # kill -9: no finally runs
        night.wait()
        assert not gone(converter)
        cache = AssetCache(tmp_path / "c", hub)
        (said,) = cache.reap_builds()
        assert said.startswith("conversion m1_torch_dist (pids ") and str(converter) in said
        wait_for(lambda: gone(converter))
        assert cache.reap_builds() == [] and not list(cache.running_dir.iterdir())
    finally:
        night.kill()
        if pid_file.exists() and not gone(int(pid_file.read_text())):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)


def test_a_full_disk_during_a_build_is_a_build_error_naming_the_folder_and_its_free_space(tmp_path, hub, monkeypatch):
    import errno

    import pipelines.storage.cache as cache_module

    def no_space(path):
        raise OSError(errno.ENOSPC, "No space left on device", str(path / "weights.bin"))

    monkeypatch.setattr(cache_module, "make_manifest", no_space)
    cache = AssetCache(tmp_path / "c", hub)
    with pytest.raises(BuildError) as exc:
        cache.build(MODEL)
    assert str(exc.value).startswith(f"model m1: {tmp_path / 'c' / 'models' / 'm1'}: disk full (")
    assert " bytes free under " in str(exc.value) and "NIGHTLY_HOME" in str(exc.value)
    assert not cache.is_built(MODEL) and not [p for p in (tmp_path / "c" / "models").iterdir() if ".partial-" in p.name]


class Passes:
    """A stand-in launcher: every test it is given passes at once (what matters is which it is given)."""

    name = "stand-in"

    def launch(self, request, on_log=None):
        from datetime import UTC, datetime

        from pipelines.core.model import Attempt

        return Attempt(request.test.id, "passed", 0.1, datetime.now(UTC).isoformat(), request.attempt,
                       node="local-h200-0", gpu_slots=request.gpu_slots, timeout_s=request.timeout_s)


def test_a_night_whose_input_build_hits_a_full_disk_still_runs_the_tests_that_do_not_need_it(tmp_path, monkeypatch):
    import errno

    import pipelines.storage.cache as cache_module
    from pipelines.core.runset import RunSelection
    from pipelines.execute import InputFailed, NightDone, run_tests
    from pipelines.night import Night, NightSettings
    from tests.conftest import PROJECT_ROOT

    real = cache_module.make_manifest

    def full_for_wide(path):
        if "tiny-lm-wide" in path.name:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(path)

    monkeypatch.setattr(cache_module, "make_manifest", full_for_wide)
    night = Night(NightSettings(home=tmp_path / "home", assets_dir=PROJECT_ROOT / "assets"))
    selection = RunSelection(labels=("lora",))
    lines: list[str] = []
    events = list(run_tests(night, night.runset(None, selection), selection, launcher=Passes(), say=lines.append))
    failed = [e.requirement.key for e in events if isinstance(e, InputFailed)]
    assert "tiny-lm-wide" in failed, lines
    assert any("model tiny-lm-wide: FAILED" in line and "disk full" in line for line in lines), lines
    (done,) = [e for e in events if isinstance(e, NightDone)]
    outcomes = {a["test_id"]: a["outcome"] for a in done.summary["attempts"]}
    assert "passed" in outcomes.values() and "infra_error" in outcomes.values(), outcomes


def test_a_local_conversion_is_rebuilt_when_the_python_environment_changes_and_reused_when_it_does_not(
        tmp_path, monkeypatch):
    import pipelines.launch.infra as infra
    from pipelines.night import Night, NightSettings
    from tests.conftest import PROJECT_ROOT

    def night() -> Night:
        return Night(NightSettings(home=tmp_path / "home", assets_dir=PROJECT_ROOT / "assets"))

    def build_all(n: Night) -> dict:  # the model, then one of its conversions
        wide = [r for r in n.catalog.requirements if r.key.startswith("tiny-lm-wide")][:2]
        return {r.key: n.build(r) for r in wide}

    first = build_all(night())
    conv = next(k for k in first if "_torch_dist" in k)
    marker = json.loads((first[conv].path / ".nightly-complete.json").read_text())
    assert marker["recipe"]["image"] == infra.environment_digest() != ""
    assert build_all(night())[conv].reused  # the same environment: nothing to do
    monkeypatch.setattr(infra, "environment_digest", lambda: "sha256:" + "e" * 64)  # a package upgraded
    again = build_all(night())[conv]
    assert not again.reused and again.rebuilt.endswith("its image")


ALIAS_TEST = """from minirl.ci_register import register_cuda_ci
from minirl.testing import convert_checkpoint, exec_command

register_cuda_ci(est_time=5, suite="stage-b-2-gpu-h200", labels=["alias"])


def prepare():
    exec_command("hf download minirl/{model} --local-dir /root/models/{model}")
    convert_checkpoint("tiny-lm", "tiny", 2, dir_dst="{dst}", hf_checkpoint="/root/models/{model}")
"""


def test_a_folder_outside_root_and_the_same_folder_under_root_are_two_cache_entries(tmp_path):
    """``/tiny-lm_torch_dist`` and ``/root/tiny-lm_torch_dist`` (``/dev/shm/x`` and ``/root/dev/shm/x``) are
    two folders in a test's container: one cache folder for both made two conversions of different models
    rebuild each other every night, and a test got whichever was built last."""
    from pipelines.night import Night, NightSettings
    from tests.support.assets import copied_example

    repo, assets = copied_example(tmp_path)
    for name, model, dst in (("test_alias_root.py", "tiny-lm", "/root"), ("test_alias_top.py", "tiny-lm-wide", "/"),
                             ("test_alias_shm.py", "tiny-lm", "/dev/shm"),
                             ("test_alias_root_shm.py", "tiny-lm-wide", "/root/dev/shm")):
        (repo / "tests" / "e2e" / name).write_text(ALIAS_TEST.format(model=model, dst=dst))

    def build_all() -> dict:
        night = Night(NightSettings(home=tmp_path / "home", assets_dir=assets))
        tests = [t for t in night.catalog.tests if "alias" in t.labels]
        return {r.path: night.build(r) for r in night.requirements_for(tests)}

    first = build_all()
    convs = {path: b for path, b in first.items() if path.endswith("_torch_dist")}
    assert sorted(convs) == ["/dev/shm/tiny-lm_torch_dist", "/root/dev/shm/tiny-lm_torch_dist",
                             "/root/tiny-lm_torch_dist", "/tiny-lm_torch_dist"]
    assert len({b.path for b in convs.values()}) == 4, {p: b.path for p, b in convs.items()}
    again = build_all()
    assert {p: (again[p].reused, again[p].rebuilt) for p in convs} == {p: (True, "") for p in convs}


EXTRA_TEST = """from minirl.ci_register import register_cuda_ci
from minirl.testing import convert_checkpoint, exec_command

register_cuda_ci(est_time=5, suite="stage-b-2-gpu-h200", labels=["extra"])


def prepare():
    exec_command("hf download minirl/tiny-lm --local-dir /root/models/tiny-lm")
    convert_checkpoint("tiny-lm", "tiny", 2, extra_args={extra!r}, dir_dst="/root/ckpt")
"""


def test_a_conversion_gets_its_extra_args_split_as_a_shell_would_and_a_change_rebuilds_it(tmp_path):
    """assets/checkpoints.yaml had no {extra_args}: extra_args="--fp8" built a checkpoint without them,
    and changing them never rebuilt it."""
    from pipelines.night import Night, NightSettings
    from tests.support.assets import copied_example

    repo, assets = copied_example(tmp_path)
    test = repo / "tests" / "e2e" / "test_extra.py"

    def build(extra: str):
        test.write_text(EXTRA_TEST.format(extra=extra))
        night = Night(NightSettings(home=tmp_path / "home", assets_dir=assets))
        reqs = night.requirements_for([t for t in night.catalog.tests if "extra" in t.labels])
        built = [night.build(r) for r in reqs][-1]
        return built, json.loads((built.path / "metadata.json").read_text())["extra_args"]

    first, recorded = build("--fp8")
    assert recorded == ["--fp8"]
    second, recorded = build("--fp8 --note 'two words'")
    assert recorded == ["--fp8", "--note", "two words"]
    assert not second.reused and "its argv" in second.rebuilt
    assert build("--fp8 --note 'two words'")[0].reused


SHM_TEST = """from minirl.ci_register import register_cuda_ci
from minirl.testing import convert_checkpoint, exec_command

register_cuda_ci(est_time=5, suite="stage-b-2-gpu-h200", labels=["shm"])


def prepare():
    exec_command("hf download minirl/tiny-lm --local-dir /root/models/tiny-lm")
    convert_checkpoint("tiny-lm", "tiny", 2, dir_dst="/dev/shm")
"""


def test_a_conversion_outside_root_is_a_located_problem_of_a_local_night(tmp_path, monkeypatch, capsys):
    """The local deployment maps only /root onto its cache (repos.yaml env {cache}): the checkpoint was
    built at <cache>/.../dev/shm, the test looked at the real /dev/shm and failed as a test failure."""
    from pipelines.cli import main
    from tests.support.assets import copied_example

    repo, assets = copied_example(tmp_path)
    (repo / "tests" / "e2e" / "test_shm.py").write_text(SHM_TEST)
    monkeypatch.setenv("NIGHTLY_ASSETS_DIR", str(assets))
    assert main(["run", "--home", str(tmp_path / "home"), "--labels", "shm", "--list-only"]) == 3
    err = capsys.readouterr().err
    assert ("tests/e2e/test_shm.py:9: convert_checkpoint: output folder /dev/shm/tiny-lm_torch_dist is outside /root: "
            "the local deployment builds it in its cache but gives tests only /root paths") in err, err
    # pods mount the input at /dev/shm/...: no problem there
    from pipelines.night import Night, NightSettings

    production = Night(NightSettings(home=tmp_path / "home", assets_dir=assets, deployment="production"))
    assert not [p for p in production.registered.problems if "outside /root" in p.message]
    (repo / "tests" / "e2e" / "test_shm.py").write_text(SHM_TEST.replace('dir_dst="/dev/shm"', 'dir_dst="/root"'))
    assert main(["run", "--home", str(tmp_path / "home"), "--labels", "shm", "--list-only"]) == 0


#: a converter that records its CUDA_VISIBLE_DEVICES and which GPU locks of node 0 are held while it runs
SEEING_CONVERTER = """import fcntl, glob, json, os, sys
out = sys.argv[1]
os.makedirs(out)
busy = []
for path in sorted(glob.glob(os.path.join(os.environ["NIGHTLY_GPU_LOCK_DIR"], "h200-node0-gpu*.lock"))):
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        busy.append(os.path.basename(path))
    os.close(fd)
open(os.path.join(out, "seen.json"), "w").write(json.dumps([os.environ.get("CUDA_VISIBLE_DEVICES"), busy]))
"""


def _gpu_conversion_night(tmp_path, command):
    """A night of the copied example with a test needing a checkpoint converted by ``command`` on GPUs
    (tools/seeing.py, which reports the GPUs and locks it sees, is in the copy)."""
    import yaml

    from pipelines.night import Night, NightSettings
    from tests.support.assets import copied_example

    repo, assets = copied_example(tmp_path)
    (repo / "tools" / "seeing.py").write_text(SEEING_CONVERTER)
    (assets / "checkpoints.yaml").write_text(yaml.safe_dump({"conversion": {"command": command}}))
    (repo / "tests" / "e2e" / "test_gpu_conv.py").write_text(EXTRA_TEST.replace('"extra"', '"gpuconv"').format(extra=""))
    return Night(NightSettings(home=tmp_path / "home", assets_dir=assets))


def test_a_local_conversion_holds_its_gpus_as_a_test_does_and_sees_only_them(tmp_path):
    """A torchrun conversion ran with no GPU lock and no CUDA_VISIBLE_DEVICES: it landed on GPUs the tests
    of another run held. It now takes num_gpus_per_node free GPUs through the launcher's locks."""

    from pipelines.launch import gpu_slots

    night = _gpu_conversion_night(tmp_path, ["{python}", "tools/seeing.py", "{output}"])
    reqs = night.requirements_for([t for t in night.catalog.tests if "gpuconv" in t.labels])
    others = gpu_slots.try_acquire(gpu_slots.host_lock_dir(), "h200", 6, [0], 8)  # another run's tests: GPUs 0-5
    try:
        built = [night.build(r) for r in reqs][-1]
    finally:
        others.release()
    visible, busy = json.loads((built.path / "seen.json").read_text())
    assert visible == "6,7"
    assert busy == [f"h200-node0-gpu{i}.lock" for i in range(8)], "its own two GPUs are locked while it runs"
    assert gpu_slots.try_acquire(gpu_slots.host_lock_dir(), "h200", 8, [0], 8) is not None, "and let go after"


#: a converter that leaves a process behind (not holding its output, holding what it inherited: the GPU
#: locks) and writes its pid to $LEFTOVER_PID_FILE, then becomes the real converter
LEAVING_CONVERTER = ["sh", "-c", 'sleep 100 </dev/null >/dev/null 2>&1 & echo $! > "$LEFTOVER_PID_FILE"; exec "$0" "$@"',
                     "{python}", "tools/seeing.py", "{output}"]


def test_what_a_conversion_leaves_behind_is_killed_and_lets_its_gpus_go(tmp_path, monkeypatch):
    """A converter's leftover process kept its GPU locks after the conversion ended, and its build record
    was gone: that night's tests and later nights waited on it with no limit. Whatever a conversion
    leaves is now killed when it exits, as what a test attempt leaves is."""

    from pipelines.launch import gpu_slots
    from pipelines.launch.procs import pid_alive

    pid_file = tmp_path / "leftover.pid"
    monkeypatch.setenv("LEFTOVER_PID_FILE", str(pid_file))
    night = _gpu_conversion_night(tmp_path, LEAVING_CONVERTER)
    reqs = night.requirements_for([t for t in night.catalog.tests if "gpuconv" in t.labels])
    leftover = 0
    try:
        built = [night.build(r) for r in reqs][-1]
        leftover = int(pid_file.read_text())
        assert json.loads((built.path / "seen.json").read_text())[0] == "0,1"
        deadline = time.monotonic() + 5
        while pid_alive(leftover) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not pid_alive(leftover), "the converter's leftover process is killed once it exits"
        assert gpu_slots.try_acquire(gpu_slots.host_lock_dir(), "h200", 8, [0], 8) is not None, \
            "its GPUs are free for the night's tests"
    finally:
        if leftover and pid_alive(leftover):
            os.kill(leftover, signal.SIGKILL)


def test_a_conversion_waits_for_gpus_a_stray_holds_no_longer_than_its_timeout_and_names_it(tmp_path):
    """A conversion waited for busy GPUs with no limit, saying neither who held them: a leftover process
    holding them stalled the night. Past its build timeout it now gives up on a stray, naming it."""
    import dataclasses

    from pipelines.launch import gpu_slots

    night = _gpu_conversion_night(tmp_path, ["{python}", "tools/seeing.py", "{output}"])
    night.deployment = dataclasses.replace(night.deployment, build_timeout_s=1)
    reqs = night.requirements_for([t for t in night.catalog.tests if "gpuconv" in t.labels])
    night.build(reqs[0])  # the model
    held = gpu_slots.try_acquire(gpu_slots.host_lock_dir(), "h200", 8, [0], 8)
    stray = subprocess.Popen(["sleep", "60"], pass_fds=held.fds, start_new_session=True)
    held.release()  # only the stray holds them now
    import threading

    caught: list[BaseException] = []

    def build() -> None:
        try:
            night.build(reqs[-1])
        except BaseException as exc:  # noqa: BLE001 - what the build raised, for the asserts
            caught.append(exc)

    builder = threading.Thread(target=build, daemon=True)
    builder.start()
    builder.join(timeout=45)  # gives up 15 s (the stray's confirmation) after its 1 s timeout
    gave_up = not builder.is_alive()
    stray.kill()
    stray.wait()
    builder.join(timeout=30)
    assert gave_up, "the conversion still waited for the stray's GPUs"
    assert caught and isinstance(caught[0], BuildError), caught
    assert f"held by PID {stray.pid} (sleep 60)" in str(caught[0])
    assert "gave up after the conversion's 1 s build timeout" in str(caught[0])


def test_an_input_outside_root_counts_only_for_the_tests_a_local_night_launches(tmp_path, monkeypatch, capsys):
    """A disabled or unselected test with dir_dst="/dev/shm" made every local night exit 3: the check ran
    over every test of the catalog, not the ones the night launches."""
    from pipelines.cli import main
    from tests.support.assets import copied_example

    repo, assets = copied_example(tmp_path)
    multinode = repo / "tests" / "e2e" / "megatron" / "test_multinode_sft.py"
    text = multinode.read_text()
    assert 'dir_dst="/root/models"' in text and "disabled=" in text
    multinode.write_text(text.replace('dir_dst="/root/models"', 'dir_dst="/dev/shm"'))
    (repo / "tests" / "e2e" / "test_shm.py").write_text(SHM_TEST)  # enabled, labelled shm only
    monkeypatch.setenv("NIGHTLY_ASSETS_DIR", str(assets))
    assert main(["run", "--home", str(tmp_path / "home"), "--labels", "lora", "--list-only"]) == 0
    assert "outside /root" not in capsys.readouterr().err
    assert main(["run", "--home", str(tmp_path / "home2"), "--labels", "shm", "--list-only"]) == 3
    err = capsys.readouterr().err
    assert "tests/e2e/test_shm.py:9: convert_checkpoint: output folder /dev/shm/tiny-lm_torch_dist is outside" in err
    assert "test_multinode_sft.py" not in err, "the disabled test is not launched"
