"""Software-defined assets: model weights -> converted checkpoints -> test runs -> estimates -> report.

Partitions come from the catalog read when the code location loads (one per model, dataset,
conversion and test id), and static partition mappings carry the per-test lineage, so the UI
shows exactly which checkpoint each test run used. Asset bodies are thin: ``Night`` does the work.
"""


import json
from collections import defaultdict

import dagster as dg

from pipelines.core.model import Catalog
from pipelines.core.report import markdown
from pipelines.defs.metadata import attempt_metadata, built_metadata
from pipelines.defs.resources import NightlyResource

MODEL_WEIGHTS = dg.AssetKey("model_weights")
DATASETS = dg.AssetKey("datasets")
CONVERTED = dg.AssetKey("converted_checkpoints")
TEST_RUNS = dg.AssetKey("test_runs")
CALIBRATED = dg.AssetKey("calibrated_estimates")
NIGHT_REPORT = dg.AssetKey("night_report")


def partitions(catalog: Catalog) -> dict[str, dg.StaticPartitionsDefinition]:
    kinds: dict[str, list[str]] = {"model": [], "dataset": [], "conversion": []}
    for r in catalog.requirements:
        kinds[r.kind].append(r.key)
    return {
        "model": dg.StaticPartitionsDefinition(sorted(kinds["model"])),
        "dataset": dg.StaticPartitionsDefinition(sorted(kinds["dataset"])),
        "conversion": dg.StaticPartitionsDefinition(sorted(kinds["conversion"])),
        "test": dg.StaticPartitionsDefinition(sorted(t.id for t in catalog.tests)),
    }


def _mapping(pairs: list[tuple[str, str]]) -> dg.StaticPartitionMapping:
    m: dict[str, set[str]] = defaultdict(set)
    for up, down in pairs:
        m[up].add(down)
    return dg.StaticPartitionMapping({k: v for k, v in m.items()})


def build_assets(catalog: Catalog) -> list[dg.AssetsDefinition]:
    parts = partitions(catalog)
    kind_of = {r.key: r.kind for r in catalog.requirements}
    conv_from_model = [(dep, r.key) for r in catalog.requirements if r.kind == "conversion" for dep in r.depends_on]
    test_needs = {k: [(req, t.id) for t in catalog.tests for req in t.requirements if kind_of.get(req) == k]
                  for k in ("model", "dataset", "conversion")}

    def _build_one(context: dg.AssetExecutionContext, nightly: NightlyResource) -> dg.MaterializeResult:
        night = nightly.night(run_id=context.run.run_id)
        req = night.catalog.requirement(context.partition_key)
        built = night.build(req)
        return dg.MaterializeResult(metadata=built_metadata(built, req.source))

    @dg.asset(key=MODEL_WEIGHTS, partitions_def=parts["model"], group_name="inputs",
              description="Model weights downloaded once from the Hub (or the local hub) into the shared cache.")
    def model_weights(context: dg.AssetExecutionContext, nightly: NightlyResource) -> dg.MaterializeResult:
        return _build_one(context, nightly)

    @dg.asset(key=DATASETS, partitions_def=parts["dataset"], group_name="inputs",
              description="Datasets downloaded once into the shared cache.")
    def datasets(context: dg.AssetExecutionContext, nightly: NightlyResource) -> dg.MaterializeResult:
        return _build_one(context, nightly)

    @dg.asset(key=CONVERTED, partitions_def=parts["conversion"], group_name="inputs",
              deps=[dg.AssetDep(MODEL_WEIGHTS, partition_mapping=_mapping(conv_from_model))],
              description="Checkpoints converted with the framework's own tool, built once and reused by every test.")
    def converted_checkpoints(context: dg.AssetExecutionContext, nightly: NightlyResource) -> dg.MaterializeResult:
        return _build_one(context, nightly)

    test_deps = []
    for key, kind in ((MODEL_WEIGHTS, "model"), (DATASETS, "dataset"), (CONVERTED, "conversion")):
        if test_needs[kind]:
            test_deps.append(dg.AssetDep(key, partition_mapping=_mapping(test_needs[kind])))

    @dg.asset(key=TEST_RUNS, partitions_def=parts["test"], group_name="tests", deps=test_deps,
              description="One e2e test run per partition: outcome, elapsed, timeout, node and log of each attempt.")
    def test_runs(context: dg.AssetExecutionContext, nightly: NightlyResource) -> dg.MaterializeResult:
        night = nightly.night(run_id=context.run.run_id, cadence="release")
        test = night.catalog.by_id().get(context.partition_key)
        if test is None:
            raise dg.Failure(f"{context.partition_key} is no longer registered in {night.repo_spec.path}; "
                             "reload the code location to refresh the partitions")
        if not test.enabled:
            raise dg.Failure(f"{test.id} is disabled ({test.disabled}); enable it in its registration to run it")
        for req in night.requirements_for([test]):
            night.build(req)
        plan = night.plan([test])
        if plan.unplanned:
            raise dg.Failure(f"{test.id}: no pool of deployment {night.deployment.name} runs hardware "
                             f"{test.hardware or test.suite!r}; add one in assets/cluster.yaml")
        launcher = None
        if night.deployment.launcher == "kubernetes":  # one container per asset partition, through Pipes
            from pipelines.launch.kubernetes.pipes import pipes_launcher_for

            launcher = pipes_launcher_for(context, night.deployment, **night.pod_settings())
        result = night.run(plan, launcher=launcher)
        attempt = result.final()[test.id]
        meta = attempt_metadata(attempt, test, night.night)
        if attempt.outcome != "passed":
            context.log.warning(f"{test.id}: {attempt.outcome}: {attempt.reason}")
        return dg.MaterializeResult(metadata=meta)

    @dg.asset(key=CALIBRATED, group_name="calibration", deps=[TEST_RUNS],
              description="est_time proposed from measured passing durations, with evidence CSV and a source patch.")
    def calibrated_estimates(context: dg.AssetExecutionContext, nightly: NightlyResource) -> dg.MaterializeResult:
        night = nightly.night(run_id=context.run.run_id)
        estimates, paths = night.calibrate()
        drifted, near = night.checks(estimates)
        changed = [e for e in estimates if e.samples_used and e.delta]
        return dg.MaterializeResult(metadata={
            "policy": dg.MetadataValue.text(night.repo_spec.policy),
            "tests": dg.MetadataValue.int(len(estimates)),
            "calibrated": dg.MetadataValue.int(sum(1 for e in estimates if e.samples_used)),
            "changed": dg.MetadataValue.int(len(changed)),
            "drifted": dg.MetadataValue.int(len(drifted)),
            "near_timeout": dg.MetadataValue.int(len(near)),
            "evidence": dg.MetadataValue.path(str(paths["evidence"])),
            "patch": dg.MetadataValue.path(str(paths["patch"])),
            "proposals": dg.MetadataValue.md(
                "| test | current | proposed | samples | reason |\n|---|---|---|---|---|\n"
                + "\n".join(f"| {e.test_id} | {e.current} | {e.proposed} | {e.samples_used} | {e.reason} |" for e in estimates)
            ),
        })

    @dg.asset(key=NIGHT_REPORT, group_name="calibration", deps=[CALIBRATED],
              description="The morning-after report: every selected test's outcome, elapsed, est_time and proposal.")
    def night_report(context: dg.AssetExecutionContext, nightly: NightlyResource) -> dg.MaterializeResult:
        night = nightly.night(run_id=context.run.run_id)
        path = write_night_report(night)
        return dg.MaterializeResult(metadata={"report": dg.MetadataValue.path(str(path)),
                                              "text": dg.MetadataValue.md(path.read_text())})

    return [model_weights, datasets, converted_checkpoints, test_runs, calibrated_estimates, night_report]


def write_night_report(night):
    """Render the latest night's summary (written by the nightly job) with current proposals."""
    latest = night.home / "nights" / "latest.json"
    if not latest.exists():
        raise dg.Failure(f"no night has run yet ({latest} is missing); run `make nightly` first")
    data = json.loads(latest.read_text())
    rows = night.report_rows(data)
    text = markdown(f"Night {data['night']} ({data['cadence']}, run {data['run_id']})", rows, None,
                    data.get("actual_makespan_s"),
                    extra={"Predicted makespan": f"{data.get('predicted_makespan_s', 0):.1f} s",
                           "Actual makespan": f"{data.get('actual_makespan_s', 0):.1f} s",
                           "Lower bound": f"{data.get('lower_bound_s', 0):.1f} s"},
                    notes=data.get("notes", []))
    out = night.home / "reports" / f"{data['night']}.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    return out
