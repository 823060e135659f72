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


def test_a_report_after_a_logger_or_launcher_prefix_counts_and_a_longer_word_does_not():
    """Python logging's default format and torchrun's ``--tee`` put the report right after a colon or a
    bracket; a colour code may sit just before it. ``myconfig``/``reconfig`` are other words."""
    log = "\n".join([
        "INFO:__main__:config fsdp-tp2: failed",  # logging.basicConfig()
        "[default0]:config megatron-tp2: failed",  # torchrun --tee 3
        "[rank1]:config moe-ep2: passed",
        "\x1b[32mconfig lora-r8: passed\x1b[0m",  # a coloured line
        "\x1b[1;31m[minirl] config dense-tp1: \x1b[31mfailed\x1b[0m  ",
        "myconfig a: failed",
        "reconfig x: failed",
        "my_config y: failed",
        "config2 z: failed",
        "config sft: failed afterwards",
        "[INFO] apply auto-config fp8: failed",  # a hyphenated word, not a report
        "nccl: /etc/nccl.config NCCL_IB_HCA: failed",  # a file name
        "setting=config.yaml q: failed",
    ])
    assert config_outcomes(log) == {"fsdp-tp2": "failed", "megatron-tp2": "failed", "moe-ep2": "passed",
                                    "lora-r8": "passed", "dense-tp1": "failed"}
