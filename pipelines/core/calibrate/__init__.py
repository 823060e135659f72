"""Calibration: measured durations -> proposed est_time, with evidence, drift and a source patch."""

from pipelines.core.calibrate.evidence import (
    EVIDENCE_COLUMNS,
    NearTimeout,
    drift,
    evidence_csv,
    evidence_rows,
    near_timeout,
    write_evidence_csv,
)
from pipelines.core.calibrate.lineage import Lineage, Succession, rewrite_successions
from pipelines.core.calibrate.output import output_problem, remove_stale_patch, write_atomic, write_problem
from pipelines.core.calibrate.patch import PatchPlan, apply_patch, make_patch, plan_patch, write_plan
from pipelines.core.calibrate.policies import POLICIES, bucket_round, calibrate, estimates_by_id, percentile

__all__ = ["EVIDENCE_COLUMNS", "POLICIES", "Lineage", "NearTimeout", "PatchPlan", "Succession", "apply_patch", "bucket_round", "calibrate",
           "drift", "estimates_by_id", "evidence_rows", "make_patch", "near_timeout", "percentile", "plan_patch",
           "output_problem", "remove_stale_patch", "rewrite_successions", "write_atomic", "write_problem", "write_evidence_csv", "write_plan", "evidence_csv"]
