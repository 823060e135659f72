"""Software-defined assets: model weights -> converted checkpoints -> test runs -> estimates -> report.

Partitions come from the catalog read when the code location loads (one per model, dataset,
conversion and test id), and static partition mappings carry the per-test lineage, so the UI
shows exactly which checkpoint each test run used. Asset bodies are thin: ``Night`` does the work.
"""


from collections import defaultdict

import dagster as dg

from pipelines.core.calibrate.evidence import seconds
from pipelines.core.model import Catalog
from pipelines.core.runset import unloadable_files
from pipelines.defs.keys import (
    CALIBRATED,
    CONVERTED,
    DATASETS,
    MODEL_WEIGHTS,
    NIGHT_REPORT,
    TAG_SOURCE_RUN,
    TEST_RUNS,
)
from pipelines.defs.metadata import built_metadata
from pipelines.defs.resources import NightlyResource
from pipelines.defs.test_runs import build_test_runs

__all__ = ["CALIBRATED", "CONVERTED", "DATASETS", "MODEL_WEIGHTS", "NIGHT_REPORT", "TEST_RUNS", "build_assets"]


def partitions(catalog: Catalog) -> dict[str, dg.StaticPartitionsDefinition]:
    kinds: dict[str, list[str]] = {"model": [], "dataset": [], "conversion": []}
    for r in catalog.requirements:
        kinds[r.kind].append(r.key)
    return {
        "model": dg.StaticPartitionsDefinition(sorted(kinds["model"])),
        "dataset": dg.StaticPartitionsDefinition(sorted(kinds["dataset"])),
        "conversion": dg.StaticPartitionsDefinition(sorted(kinds["conversion"])),
        # a test file whose registration does not load keeps its partition (its path): its red check stays
        "test": dg.StaticPartitionsDefinition(sorted({t.id for t in catalog.tests} | set(unloadable_files(catalog)))),
    }


def _mapping(pairs: list[tuple[str, str]]) -> dg.StaticPartitionMapping:
    m: dict[str, set[str]] = defaultdict(set)
    for up, down in pairs:
        m[up].add(down)
    return dg.StaticPartitionMapping({k: v for k, v in m.items()})


def build_assets(catalog: Catalog) -> tuple[list[dg.AssetsDefinition], list[dg.AssetChecksDefinition]]:
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

    test_runs, test_passed = build_test_runs(catalog, parts["test"], test_deps)

    @dg.asset(key=CALIBRATED, group_name="calibration", deps=[TEST_RUNS],
              description="est_time proposed from measured passing durations, with evidence CSV and a source patch.")
    def calibrated_estimates(context: dg.AssetExecutionContext, nightly: NightlyResource) -> dg.MaterializeResult:
        night = source_night(context, nightly)
        estimates, paths, left_alone = night.calibrate(context.run.tags.get(TAG_SOURCE_RUN) or None)
        for line in left_alone:
            context.log.warning(f"est_time patch: left alone: {line}")
        for note in night.notes:  # a stale patch that could not be removed
            context.log.warning(note)
        compacted = 0
        compact = getattr(night.history, "compact", None)  # S3: merge the night's small objects
        if compact is not None:
            try:
                compacted = compact()
            except Exception as exc:  # noqa: BLE001 - compaction is housekeeping; calibration stands
                context.log.warning(f"history compaction skipped: {exc}")
        drifted, near = night.checks(estimates, context.run.tags.get(TAG_SOURCE_RUN) or None)
        changed = [e for e in estimates if e.samples_used and e.delta]
        return dg.MaterializeResult(metadata={
            "policy": dg.MetadataValue.text(night.repo_spec.policy),
            "tests": dg.MetadataValue.int(len(estimates)),
            "calibrated": dg.MetadataValue.int(sum(1 for e in estimates if e.samples_used)),
            "changed": dg.MetadataValue.int(len(changed)),
            "drifted": dg.MetadataValue.int(len(drifted)),
            "near_timeout": dg.MetadataValue.int(len(near)),
            "history_objects_compacted": dg.MetadataValue.int(compacted),
            "estimates": dg.MetadataValue.path(str(paths["estimates"])),
            "evidence": dg.MetadataValue.path(str(paths["evidence"])),
            "patch": (dg.MetadataValue.path(paths["patch"]) if paths["patch"] else
                      dg.MetadataValue.text("nothing to change: no est_time differs from its file; no patch written")),
            "left_alone": dg.MetadataValue.md("\n".join(f"- {line}" for line in left_alone) or "none"),
            "proposals": dg.MetadataValue.md(
                "| test | current | proposed | samples | reason |\n|---|---|---|---|---|\n"
                + "\n".join(f"| {e.test_id} | {seconds(e.registered)} | {seconds(e.registered_proposed)} | {e.samples_used} "
                            f"| {e.reason} |" for e in estimates)
            ),
        })

    @dg.asset(key=NIGHT_REPORT, group_name="calibration", deps=[CALIBRATED],
              description="The morning-after report of the run that ran tests: outcomes, failures with log tails, "
                          "infra and bad nodes, flaky tests, durations and trends, Gantt, predictions, changes.")
    def night_report(context: dg.AssetExecutionContext, nightly: NightlyResource) -> dg.MaterializeResult:
        night = source_night(context, nightly)
        source = context.run.tags.get(TAG_SOURCE_RUN) or None
        uri, data = write_night_report(night, source, warn=context.log.warning)
        from pipelines.reporting.metadata import report_markdown, report_metadata

        return dg.MaterializeResult(metadata={
            "report": dg.MetadataValue.path(uri), "source_run": source or "latest",
            "text": dg.MetadataValue.md(report_markdown(data)), **report_metadata(data)})

    return [model_weights, datasets, converted_checkpoints, test_runs, calibrated_estimates, night_report], [test_passed]


def source_night(context, nightly: NightlyResource):
    """The Night a calibration run works with: the repo of the run it follows (tag ``nightly/source_run``), as
    that run's record names it, the way ``nightly calibrate --repo`` takes it. A ``nightly run --repo
    <checkout>`` night is of another repo than this code location's (``NIGHTLY_REPO_NAME``): calibrating
    this one instead would rewrite its estimates and find the night not of it. Without a source run, or
    with a record that names no repo, this code location's repo."""
    from pipelines.core.model import CatalogError

    night = nightly.night(run_id=context.run.run_id)
    source = context.run.tags.get(TAG_SOURCE_RUN) or None
    if source is None:
        return night
    try:
        repo = night.recorded_repo(source)
    except CatalogError as exc:
        raise dg.Failure(str(exc)) from exc
    return night if repo is None else nightly.night(run_id=context.run.run_id, repo=repo)


def write_night_report(night, run_id: str | None = None, warn=print):
    """Build a run's report (the newest night when ``run_id`` is None) and store its HTML page."""
    from pipelines.core.model import CatalogError
    from pipelines.reporting.inputs import inputs_for_night, night_report, write_html

    try:  # coverage is checked against the night's selection; a broken coverage.yaml is a warning
        data = night_report(night.state, run_id, inputs_for_night(night), warn=warn)
    except CatalogError as exc:
        raise dg.Failure(str(exc)) from exc
    return write_html(night.state, data), data
