"""Dagster definitions: thin assets, jobs, schedules and sensors over pipelines.execute and pipelines.night.

We use two features Dagster marks beta/preview on purpose (a single-run backfill policy and a
partitioned asset check); their warnings would bury our own progress lines, so they are hidden.
"""

import warnings

import dagster as dg

warnings.filterwarnings("ignore", category=dg.BetaWarning)
warnings.filterwarnings("ignore", category=dg.PreviewWarning)
