"""Wall time of each way into test_runs against the nightly, on the example (prints a table).

Paths measured, each on the same warm state folder (inputs already built) and a real SQLite
instance:
- nightly: ``nightly run`` (the nightly job, one run over every partition, cadence nightly);
- weekly: ``nightly run --cadence weekly`` (every test, the set a full backfill runs);
- backfill: ``dagster asset materialize --select test_runs --partition-range FIRST...LAST``
  (what a backfill of all partitions runs: one run, single-run backfill policy);
- sensor: the infra-change sensor seeing a new digest under the same tag, and the ONE run it
  requests executed as the daemon would (its run config and tags);
Goal (issue 18): backfill and sensor <= 1.2x the nightly's wall time (before: ~10x and ~7x).

    .venv/bin/python bench/paths.py
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def tool(module: str) -> list[str]:
    """``python -m pipelines`` / ``-m dagster`` with this interpreter: the scripts in its bin/ belong to
    whichever checkout the venv installed (editable), maybe not this one."""
    return [sys.executable, "-m", module]


def environment(extra: dict[str, str]) -> dict[str, str]:
    """This checkout first on the path, as bench/overhead.py runs it (cwd ROOT as well)."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, **extra, "PYTHONPATH": path}


def _assets(tmp: Path, digest_file: Path) -> Path:
    assets = tmp / "assets"
    shutil.copytree(ROOT / "assets", assets)
    repos = assets / "repos.yaml"
    repos.write_text(repos.read_text().replace("path: examples/minirl", f"path: {ROOT}/examples/minirl")
                     .replace("hub: examples/minirl/hub", f"hub: {ROOT}/examples/minirl/hub"))
    data = yaml.safe_load((assets / "cluster.yaml").read_text())
    data["deployments"]["local"]["pools"]["h200"]["image_digest_command"] = ["cat", str(digest_file)]
    (assets / "cluster.yaml").write_text(yaml.safe_dump(data))
    return assets


def _timed(argv: list[str], env: dict) -> float:
    t0 = time.monotonic()
    out = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    if out.returncode not in (0, 1):  # 1: a test failed; still a measured night
        raise SystemExit(f"{' '.join(argv[:4])} failed ({out.returncode}):\n{out.stderr[-2000:]}")
    return time.monotonic() - t0


def parser() -> argparse.ArgumentParser:
    return argparse.ArgumentParser(prog="bench/paths.py", description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)


def main(argv: list[str]) -> int:
    parser().parse_args(argv)  # no flags: --help says what it measures before a multi-night run starts
    tmp = Path(tempfile.mkdtemp(prefix="bench-paths-"))
    digest = tmp / "digest.txt"
    digest.write_text("sha256:" + "a" * 64)
    home = tmp / "home"
    env = environment({"NIGHTLY_HOME": str(home), "DAGSTER_HOME": str(home / "dagster"),
                       "NIGHTLY_ASSETS_DIR": str(_assets(tmp, digest))})
    nightly = [*tool("pipelines"), "run", "--home", str(home), "--accept-problems"]
    print("warming up (first night builds the inputs) ...", flush=True)
    _timed(nightly, env)

    figures = {"nightly (nightly run)": _timed(nightly, env),
               "weekly: every test, as a full backfill runs (nightly run --cadence weekly)":
                   _timed([*nightly, "--cadence", "weekly"], env)}
    keys = json.loads(subprocess.run([*tool("pipelines"), "catalog", "--json"], cwd=ROOT, env=env,
                                     capture_output=True, text=True, check=True).stdout)
    ids = sorted(t["id"] for t in keys)
    figures["full backfill (asset materialize --partition-range)"] = _timed(
        [*tool("dagster"), "asset", "materialize", "-m", "pipelines.definitions", "--select", "test_runs",
         "--partition-range", f"{ids[0]}...{ids[-1]}"], env)
    sensor_script = (
        "import os, dagster as dg\n"
        "from pipelines.definitions import defs\n"
        "from pipelines.defs.resources import NightlyResource\n"
        "r = NightlyResource(home=os.environ['NIGHTLY_HOME'], assets_dir=os.environ['NIGHTLY_ASSETS_DIR'])\n"
        "s = defs.resolve_sensor_def('infra_change_backfill')\n"
        "tick = lambda c: s.evaluate_tick(dg.build_sensor_context(cursor=c, resources={'nightly': r}, definitions=defs))\n"
        "cursor = tick(None).cursor\n"
        f"open({str(digest)!r}, 'w').write('sha256:' + 'b' * 64)\n"
        "(req,) = tick(cursor).run_requests\n"
        "inst = dg.DagsterInstance.get()\n"
        "res = defs.resolve_job_def('tests').execute_in_process(run_config=req.run_config, tags=req.tags, instance=inst)\n"
    )
    figures["infra-change sensor (one run of the pool)"] = _timed([sys.executable, "-c", sensor_script], env)
    base = figures["nightly (nightly run)"]
    print(f"\n{'path':<75} {'wall s':>8} {'x nightly':>10}")
    for name, secs in figures.items():
        print(f"{name:<75} {secs:>8.1f} {secs / base:>10.2f}")
    weekly = figures["weekly: every test, as a full backfill runs (nightly run --cadence weekly)"]
    full = figures["full backfill (asset materialize --partition-range)"]
    print(f"\nfull backfill / weekly (the same tests): {full / weekly:.2f}")
    print("goal: backfill and sensor <= 1.2x the nightly (each is ONE GPU-aware run); a full backfill also "
          "runs the tests the nightly cadence leaves out (label long), so compare it with the weekly too")
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
