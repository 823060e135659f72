from pipelines.cli import entrypoint

entrypoint()
