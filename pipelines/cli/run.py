"""``nightly run``: one whole night through Dagster on the embedded default (``make nightly``).

Shows the plan before it runs, progress while it runs, and a table plus the report path at the
end. Executes in this process on the project's SQLite instance, so ``nightly ui`` shows it.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from pipelines.core.select import split_csv


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="run one night (catalog, plan, inputs, tests, calibration, report)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cadence", default="nightly", choices=("pr", "nightly", "weekly", "release"))
    p.add_argument("--labels", action="append", help="only tests with one of these labels (a,b)")
    p.add_argument("--suite", action="append", dest="suites", help="only these suites")
    p.add_argument("--repo", help="a repo name in assets/repos.yaml (default: its `default`) or any checkout path")
    p.add_argument("--deployment", help="deployment in assets/cluster.yaml (default: local)")
    p.add_argument("--home", type=Path, help="state folder (default: $NIGHTLY_HOME or .nightly/)")
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                   help="extra environment for every test (e.g. MINIRL_FAIL=test_grpo)")
    p.add_argument("--timeout-floor", type=int, default=0, metavar="S", help="override the timeout floor")
    p.add_argument("--list-only", action="store_true", help="print the plan and stop")
    p.set_defaults(func=run)


def _parse_env(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"nightly run: --env {pair!r}: expected KEY=VALUE")
        out[key] = value
    return out


def run(args: argparse.Namespace) -> int:
    from pipelines.cli.plan_view import print_plan
    from pipelines.core.report import table
    from pipelines.instance import open_instance
    from pipelines.night import Night, NightSettings, default_home

    home = (args.home or default_home()).resolve()
    if args.repo and Path(args.repo).is_dir():
        args.repo = str(Path(args.repo).resolve())  # the Dagster run resolves it again, maybe elsewhere
    env = _parse_env(args.env)
    settings = NightSettings(home=home, repo=args.repo, deployment=args.deployment, cadence=args.cadence,
                             labels=split_csv(args.labels), suites=split_csv(args.suites),
                             extra_env=tuple(sorted(env.items())), timeout_floor_s=args.timeout_floor or None)
    night = Night(settings)
    print(f"nightly: repo {night.repo_spec.name} ({night.repo_spec.path}), deployment {night.deployment.name}, "
          f"cadence {args.cadence}, state {home}", flush=True)
    for p in night.catalog.problems:
        print(f"  catalog problem: {p}", file=sys.stderr)
    tests, skipped = night.selected()
    plan = night.plan(tests)
    print_plan(plan, {t.id: t for t in tests}, skipped)
    night.history.read()  # an unreadable history store fails here, before any test runs
    if args.list_only:
        return 0

    from pipelines.definitions import build_definitions
    from pipelines.defs.resources import NightlyResource

    resource = NightlyResource(home=str(home), repo=args.repo or "", deployment=args.deployment or "")
    defs = build_definitions(catalog=night.catalog, nightly=resource)
    instance = open_instance(home)
    t0 = time.monotonic()
    job = defs.resolve_job_def("weekly" if args.cadence in ("weekly", "release") else "nightly")
    run_config = {
        "ops": {"run_night": {"config": {"cadence": args.cadence, "labels": list(settings.labels),
                                          "suites": list(settings.suites), "env": env,
                                          "timeout_floor_s": args.timeout_floor}}},
        "loggers": {"console": {"config": {"log_level": "WARNING"}}},
    }
    print("\nnightly: running (progress below; each line is one finished step or test)", flush=True)
    result = job.execute_in_process(run_config=run_config, instance=instance, raise_on_error=False)
    summary = result.output_for_node("run_night") if result.success else None
    if summary is None:
        print(f"nightly: the night's run {result.run_id} failed; see `make ui` -> Runs", file=sys.stderr)
        return 1
    calib = defs.resolve_job_def("calibration").execute_in_process(
        instance=instance, raise_on_error=False,
        run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}}},
    )
    if not calib.success:
        print(f"nightly: calibration run {calib.run_id} failed; see `make ui` -> Runs", file=sys.stderr)
        return 1
    report_meta = calib.asset_materializations_for_node("night_report")
    report = report_meta[0].metadata["report"].value if report_meta else "?"

    rows = night.report_rows(summary)  # est_time as the night ran it; proposals from the history it wrote
    paths = night.calibration_paths()
    print()
    print(table(rows))
    print()
    print(f"predicted makespan {summary['predicted_makespan_s']:.1f}s, actual {summary['actual_makespan_s']:.1f}s, "
          f"lower bound {summary['lower_bound_s']:.1f}s; whole night {time.monotonic() - t0:.1f}s")
    for note in summary["notes"]:
        print(f"note: {note}")
    print(f"report: {report}")
    print(f"evidence: {paths['evidence']}\npatch: {paths['patch']}")
    print(f"dagster runs: {result.run_id} (night), {calib.run_id} (calibration); `make ui` to browse")
    bad = [r for r in rows if r.outcome not in ("passed", "skipped", "unplanned")]
    return 1 if bad else 0
