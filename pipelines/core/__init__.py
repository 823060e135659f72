"""The pure core: plain functions over dataclasses; no Dagster, Kubernetes or boto3 imports."""
