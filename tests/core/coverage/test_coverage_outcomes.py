"""Per-configuration outcomes are read from the lines a test prints, never guessed."""

from __future__ import annotations

from pipelines.core.coverage import config_outcomes

LOG = """\
[minirl] config megatron-shared: backend=megatron shared_outer=True
[minirl] config megatron-shared: passed
2026-12-03T15:00:00Z [minirl] config tilelang-per: failed
[minirl] FAILED: tilelang-per held-out loss did not go down by 0.5
"""


def test_each_reported_configuration_has_its_outcome_and_unreported_ones_are_absent():
    assert config_outcomes(LOG) == {"megatron-shared": "passed", "tilelang-per": "failed"}
    assert "never-ran" not in config_outcomes(LOG)


def test_a_configuration_reported_twice_keeps_a_failure_and_other_words_are_ignored():
    assert config_outcomes("config a: failed\nconfig a: passed\nconfig b: passed\nconfig b: failed\n"
                           "config d: passed\nconfig d: passed\nconfig e: skipped\nmy config c: passed\n") == {
        "a": "failed", "b": "failed", "d": "passed", "c": "passed"}
