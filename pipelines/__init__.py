"""nightly-e2e: catalog -> plan -> assets -> launch -> measure -> calibrate, for GPU e2e suites."""
