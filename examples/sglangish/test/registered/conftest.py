"""pytest settings for running the registered files under pytest locally (the CI runner skips this file)."""
