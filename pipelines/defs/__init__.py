"""Dagster definitions: thin assets, jobs, schedules and sensors over pipelines.night."""
