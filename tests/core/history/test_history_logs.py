"""Framework M's job logs become samples: every attempt, retries numbered, suites decided or reported."""

from __future__ import annotations

import textwrap

import pytest

from pipelines.core.history import import_logs, parse_ci_log
from pipelines.core.history.joblog import read_ci_log
from pipelines.core.model import Catalog
from tests.conftest import make_test

STAMPED = textwrap.dedent("""\
    2026-11-30T15:02:11.1234567Z Running 3 files
    2026-11-30T15:18:08.0000000Z .
    2026-11-30T15:18:08.0000000Z End (1/3):
    2026-11-30T15:18:08.0000000Z filename='tests/e2e/megatron/test_x.py', elapsed=957, _estimated_time=1300
    2026-11-30T15:18:08.0000000Z .
    2026-11-30T15:18:08.5000000Z [1/3] tests/e2e/megatron/test_x.py  PASS  elapsed=957s
    2026-11-30T15:18:50.0000000Z End (2/3):
    2026-11-30T15:18:50.0000000Z filename='tests/e2e/test_y.py', elapsed=41, _estimated_time=600
    2026-11-30T15:18:50.1000000Z [2/3] tests/e2e/test_y.py  FAIL  elapsed=41s exit=1
    2026-11-30T15:35:20.0000000Z End (2/3):
    2026-11-30T15:35:20.0000000Z filename='tests/e2e/test_y.py', elapsed=990, _estimated_time=600
    2026-11-30T15:35:20.1000000Z [2/3] tests/e2e/test_y.py  PASS  elapsed=990s retry_of=attempt=1
    2026-11-30T16:05:20.0000000Z TIMEOUT: tests/e2e/test_z.py after 1800 seconds
    2026-11-30T16:05:21.0000000Z [3/3] tests/e2e/test_z.py  TIMEOUT  elapsed=1800s timeout_after=1800s
""")


def catalog(*tests) -> Catalog:
    return Catalog(repo="/repo", tests=tuple(tests))


def test_every_attempt_is_parsed_with_its_outcome_retry_number_and_start_time():
    got = parse_ci_log(STAMPED)
    assert [(a.file, a.status, a.elapsed_s, a.attempt, a.retry_of, a.exit_code) for a in got] == [
        ("tests/e2e/megatron/test_x.py", "PASS", 957.0, 1, None, None),
        ("tests/e2e/test_y.py", "FAIL", 41.0, 1, None, 1),
        ("tests/e2e/test_y.py", "PASS", 990.0, 2, 1, None),
        ("tests/e2e/test_z.py", "TIMEOUT", 1800.0, 1, None, None),
    ]
    # Start = the End block's clock minus elapsed (the summary line may be printed later).
    assert got[0].started_at == "2026-11-30T15:02:11+00:00"
    assert got[2].started_at == "2026-11-30T15:18:50+00:00"
    assert got[3].started_at == "2026-11-30T15:35:20+00:00"
    assert got[0].line == 6


def test_a_log_without_timestamps_parses_the_same_but_without_start_times():
    plain = "\n".join(line.split(" ", 1)[1] for line in STAMPED.splitlines())
    got = parse_ci_log(plain)
    assert [(a.file, a.status, a.elapsed_s, a.attempt) for a in got] == [
        (a.file, a.status, a.elapsed_s, a.attempt) for a in parse_ci_log(STAMPED)]
    assert {a.started_at for a in got} == {""}


def test_lines_that_only_look_like_summaries_are_not_attempts():
    text = "[1/2] tests/e2e/test_x.py PASS elapsed=9s\n[1/2] tests/e2e/test_x.py  PASSED  elapsed=9s\n"
    assert parse_ci_log(text) == []


def test_imported_samples_carry_the_checkout_sha_the_suite_and_cap_timeouts():
    x = make_test(id="tests/e2e/megatron/test_x.py", path="tests/e2e/megatron/test_x.py", sha256="1" * 64)
    y = make_test(id="tests/e2e/test_y.py", path="tests/e2e/test_y.py", sha256="2" * 64)
    z = make_test(id="tests/e2e/test_z.py", path="tests/e2e/test_z.py", sha256="3" * 64)
    samples, problems = import_logs({"night1.log": STAMPED}, catalog(x, y, z))
    assert problems == []
    assert [(s.test_id, s.outcome, s.elapsed_s, s.sha256[0], s.attempt, s.capped) for s in samples] == [
        (x.id, "passed", 957.0, "1", 1, False), (y.id, "failed", 41.0, "2", 1, False),
        (y.id, "passed", 990.0, "2", 2, False), (z.id, "timed_out", 1800.0, "3", 1, True)]
    assert samples[0].source == "night1.log:6"
    assert samples[0].hardware == "h200"
    assert samples[0].run_id.startswith("log-") and len({s.run_id for s in samples}) == 1


def test_a_file_with_two_registrations_needs_the_suite_and_says_so():
    log = "[1/1] tests/e2e/test_m.py  PASS  elapsed=100s\n"
    a = make_test(id="tests/e2e/test_m.py::cuda-stage-b-2-gpu-h200", path="tests/e2e/test_m.py",
                  suite="stage-b-2-gpu-h200")
    b = make_test(id="tests/e2e/test_m.py::cuda-stage-c-4-gpu-h200", path="tests/e2e/test_m.py",
                  suite="stage-c-4-gpu-h200")
    samples, problems = import_logs({"job.log": log}, catalog(a, b))
    assert samples == []
    assert [str(p) for p in problems] == [
        "job.log:1: suite: tests/e2e/test_m.py registers several suites (stage-b-2-gpu-h200, stage-c-4-gpu-h200) "
        "and the log does not say which ran (no `--suite` on a command line, no suite common to all its files, "
        "no _estimated_time for it); pass the job's suite with --suite"]
    samples, problems = import_logs({"job.log": log}, catalog(a, b), suite="stage-c-4-gpu-h200")
    assert problems == [] and [s.test_id for s in samples] == [b.id]


def test_a_suite_the_file_does_not_register_and_an_unknown_file_are_reported_once_each():
    log = ("[1/2] tests/e2e/test_a.py  PASS  elapsed=10s\n[2/2] tests/e2e/gone.py  PASS  elapsed=10s\n"
           "[2/2] tests/e2e/gone.py  PASS  elapsed=11s retry_of=attempt=1\n")
    samples, problems = import_logs({"j.log": log}, catalog(make_test()), suite="stage-z-8-gpu-h100")
    assert samples == []
    assert [str(p) for p in problems] == [
        "j.log:1: suite: tests/e2e/test_a.py has no registration for suite 'stage-z-8-gpu-h100' from --suite "
        "(it registers: stage-c-4-gpu-h200); pass the job's --suite",
        "j.log:2: filename: tests/e2e/gone.py is not a registered test in /repo; "
        "check --repo is the checkout the log ran"]


def test_a_file_that_is_not_a_job_log_is_reported():
    samples, problems = import_logs({"notes.txt": "hello\n"}, catalog(make_test()))
    assert samples == []
    assert [p.field for p in problems] == ["log"]
    assert "no `[i/N] <file>  PASS|FAIL|TIMEOUT  elapsed=Ns` summary lines found" in problems[0].message


CUDA_M = make_test(id="tests/e2e/test_m.py::cuda-stage-c-4-gpu-h200", path="tests/e2e/test_m.py", est_time=1300)
ROCM_M = make_test(id="tests/e2e/test_m.py::rocm-stage-c-4-gpu-mi300", path="tests/e2e/test_m.py", backend="rocm",
                   suite="stage-c-4-gpu-mi300", hardware="mi300", est_time=1500)
M_LOG = "[1/1] tests/e2e/test_m.py  PASS  elapsed=957s\n"


def test_without_suite_the_runner_command_line_in_the_log_names_the_job_suite():
    log = "2026-11-30T15:00:00Z + python3 test/run_suite.py --suite stage-c-4-gpu-mi300 --auto-partition-id 0\n" + M_LOG
    samples, problems = import_logs({"job.log": log}, catalog(CUDA_M, ROCM_M))
    assert problems == [] and [s.test_id for s in samples] == [ROCM_M.id]
    assert read_ci_log(log).suite == "stage-c-4-gpu-mi300"


#: how GitHub Actions echoes a multi-line `run:` block: each line with its own timestamp, continued with `\`
ECHOED = ("2026-11-30T15:00:00.1234567Z ##[group]Run cd test && python3 run_suite.py \\\n"
          "2026-11-30T15:00:00.1234567Z   --suite stage-c-4-gpu-mi300 \\\n"
          "2026-11-30T15:00:00.1234567Z   --hw rocm \\\n"
          "2026-11-30T15:00:00.1234567Z   --auto-partition-id 0 --auto-partition-size 2\n"
          "2026-11-30T15:00:00.1234567Z shell: /usr/bin/bash -e {0}\n"
          "2026-11-30T15:00:00.1234567Z ##[endgroup]\n")


def test_a_command_line_continued_with_backslashes_names_the_job_suite_and_keeps_line_numbers():
    log = ECHOED + M_LOG
    parsed = read_ci_log(log)
    assert (parsed.suite, parsed.hw) == ("stage-c-4-gpu-mi300", "rocm")
    samples, problems = import_logs({"job.log": log}, catalog(CUDA_M, ROCM_M))
    assert problems == [] and [(s.test_id, s.source) for s in samples] == [(ROCM_M.id, "job.log:7")]


def test_only_a_few_continued_lines_are_joined_into_one_command():
    """Test output whose lines end in `\\` does not join the whole log into one line."""
    far = "python3 run_suite.py \\\n" + "  x \\\n" * 16 + "  --suite stage-c-4-gpu-mi300\n"
    assert read_ci_log(far + M_LOG).suite is None
    near = "python3 run_suite.py \\\n" + "  x \\\n" * 14 + "  --suite stage-c-4-gpu-mi300\n"
    assert read_ci_log(near + M_LOG).suite == "stage-c-4-gpu-mi300"


def test_the_hw_flag_of_the_command_line_picks_the_backend():
    log = "python3 run_suite.py --hw cuda\n" + M_LOG
    samples, problems = import_logs({"job.log": log}, catalog(CUDA_M, ROCM_M))
    assert problems == [] and [s.test_id for s in samples] == [CUDA_M.id]


def test_else_the_one_suite_every_file_of_the_log_registers_is_the_job_suite():
    other = make_test(id="tests/e2e/test_o.py", path="tests/e2e/test_o.py", suite="stage-c-4-gpu-mi300",
                      backend="rocm", hardware="mi300")
    log = M_LOG + "[2/2] tests/e2e/test_o.py  PASS  elapsed=12s\n"
    samples, problems = import_logs({"job.log": log}, catalog(CUDA_M, ROCM_M, other))
    assert problems == [] and [s.test_id for s in samples] == [ROCM_M.id, other.id]


def test_else_the_registration_whose_est_time_the_log_prints_is_the_one_that_ran():
    log = "End (1/1):\nfilename='tests/e2e/test_m.py', elapsed=957, _estimated_time=1300\n" + M_LOG
    samples, problems = import_logs({"job.log": log}, catalog(CUDA_M, ROCM_M))
    assert problems == [] and [s.test_id for s in samples] == [CUDA_M.id]


REFUSED = [
    ("elapsed=" + "9" * 400 + "s", "elapsed: 999999999999...(400 characters) s is more than a day (86400 s); no test "
                                   "attempt lasts that long"),
    ("elapsed=1000000000s", "elapsed: 1e+09 s is more than a day (86400 s); no test attempt lasts that long"),
    ("elapsed=12345678901.5s", "elapsed: 1.23457e+10 s is more than a day (86400 s); no test attempt lasts that long"),
    ("elapsed=1e9s", "elapsed: '1e9' is not a number of seconds"),
    ("elapsed=999999999s", "elapsed: 1e+09 s is more than a day (86400 s); no test attempt lasts that long"),
    ("elapsed=-5s", "elapsed: -5 s is negative"),
    ("elapsed=nans", "elapsed: 'nan' is not a number of seconds"),
    ("elapsed=fasts", "elapsed: 'fast' is not a number of seconds"),
]


@pytest.mark.parametrize(("field", "why"), REFUSED, ids=[w for _, w in REFUSED])
def test_an_unreadable_or_unbounded_elapsed_is_refused_with_its_line_and_why(field, why):
    log = "[1/2] tests/e2e/test_a.py  PASS  elapsed=10s\n[2/2] tests/e2e/test_a.py  PASS  " + field + "\n"
    samples, problems = import_logs({"j.log": log}, catalog(make_test()))
    assert [s.elapsed_s for s in samples] == [10.0]
    assert [str(p) for p in problems] == [f"j.log:2: {why}; attempt not imported"]


def test_lines_that_mean_to_be_summaries_but_are_not_exactly_are_reported_not_dropped():
    text = "[1/2] tests/e2e/test_x.py PASS elapsed=9s\n"
    assert read_ci_log(text).refused == ((1, "log", "looks like a summary line but is not `[i/N] <file>  "
                                                    "PASS|FAIL|TIMEOUT  elapsed=Ns` (two spaces around the status); "
                                                    "attempt not imported"),)


def test_a_garbled_number_after_the_elapsed_is_reported_and_the_attempt_still_imported():
    text = "[1/1] tests/e2e/test_x.py  TIMEOUT  elapsed=5s timeout_after=xs\n"
    parsed = read_ci_log(text)
    assert [(a.status, a.elapsed_s) for a in parsed.attempts] == [("TIMEOUT", 5.0)]
    assert parsed.refused == ((1, "timeout_after", "'xs' is not a number; read as absent (the attempt is imported)"),)


def test_an_unbounded_estimated_time_is_reported_and_not_used():
    log = "End (1/1):\nfilename='tests/e2e/test_m.py', elapsed=957, _estimated_time=" + "1" * 50 + "\n" + M_LOG
    samples, problems = import_logs({"job.log": log}, catalog(CUDA_M, ROCM_M))
    assert samples == []
    assert str(problems[0]).startswith("job.log:2: _estimated_time: 111111111111...(50 characters) s is more than a "
                                       "day (86400 s)")
    assert str(problems[0]).endswith("; not used to infer the suite")
    assert problems[1].field == "suite"


def test_a_missing_end_block_leaves_its_attempt_without_a_clock_and_never_shifts_the_next_ones():
    lines = STAMPED.splitlines(keepends=True)
    without_first_y_end = "".join(lines[:6] + lines[8:])  # attempt 1 of test_y lost its End block
    got = {(a.file, a.attempt): a for a in parse_ci_log(without_first_y_end)}
    first, retry = got[("tests/e2e/test_y.py", 1)], got[("tests/e2e/test_y.py", 2)]
    assert (first.estimated, first.started_at) == (None, "2026-11-30T15:18:09.100000+00:00")  # its own line's clock
    assert (retry.estimated, retry.started_at) == (600.0, "2026-11-30T15:18:50+00:00")
    assert got[("tests/e2e/test_z.py", 1)].started_at == "2026-11-30T15:35:20+00:00"


def test_the_est_time_of_a_retry_picks_the_retry_s_registration_even_when_an_earlier_end_block_is_missing():
    log = ("[1/1] tests/e2e/test_m.py  FAIL  elapsed=41s exit=1\n"
           "End (1/1):\nfilename='tests/e2e/test_m.py', elapsed=957, _estimated_time=1300\n"
           "[1/1] tests/e2e/test_m.py  PASS  elapsed=957s retry_of=attempt=1\n")
    samples, problems = import_logs({"job.log": log}, catalog(CUDA_M, ROCM_M))
    assert [(s.test_id, s.attempt) for s in samples] == [(CUDA_M.id, 2)]
    assert [p.line for p in problems] == [1] and "no _estimated_time for it" in problems[0].message


CUT = [
    ("[2/3] tests/e2e/test_y.py  PA", "`[2/3] tests/e2e/test_y.py  PA` is cut off or garbled: not `[i/N] <file>  "
                                      "PASS|FAIL|TIMEOUT  elapsed=Ns`"),
    ("[2/3] tests/e2e/te", "`[2/3] tests/e2e/te` is cut off or garbled: not `[i/N] <file>  PASS|FAIL|TIMEOUT  "
                           "elapsed=Ns`"),
    ("[2/3] tests/e2e/test_y.p", "`[2/3] tests/e2e/test_y.p` is cut off or garbled: not `[i/N] <file>  "
                                 "PASS|FAIL|TIMEOUT  elapsed=Ns`"),
    ("[2/3] tests/e2e/my test.py  PA", "`[2/3] tests/e2e/my test.py  PA` is cut off or garbled: not `[i/N] <file>  "
                                       "PASS|FAIL|TIMEOUT  elapsed=Ns`"),
    ("TIMEOUT: tests/e2e/test_y.py aft", "`TIMEOUT: tests/e2e/test_y.py aft` is cut off or garbled: not `TIMEOUT: "
                                         "<file> after N seconds`"),
    ("End (2/3):\nfilename='tests/e2e/te", "`filename='tests/e2e/te` is cut off or garbled: not `End (i/N):` then "
                                           "`filename='<file>', elapsed=N`"),
    ("End (2/3):", "End block without its `filename='<file>', elapsed=N` line"),
]


@pytest.mark.parametrize(("cut", "why"), CUT, ids=[c for c, _ in CUT])
def test_a_cut_off_runner_line_is_reported_with_its_line_and_the_rest_is_imported(cut, why):
    log = "[1/3] tests/e2e/test_a.py  PASS  elapsed=10s\n" + cut + "\n[3/3] tests/e2e/test_a.py  PASS  elapsed=12s\n"
    samples, problems = import_logs({"j.log": log}, catalog(make_test()))
    assert [s.elapsed_s for s in samples] == [10.0, 12.0]
    line = 2 + cut.count("\n")
    assert [str(p) for p in problems] == [
        f"j.log:{line}: log: {why}; that attempt's record is incomplete, check the log was saved whole"]


BUILD_OUTPUT = [
    "[1/3] /usr/local/cuda/bin/nvcc --generate-dependencies-with-compile -c /root/x/multi_tensor_adam.cu -o a.o",
    "[2/3] c++ -MMD -MF b.o.d -c /root/x/fused_adam_frontend.cpp -o b.o",
    "[3/3] /usr/bin/c++ a.o b.o -shared -o fused_adam.so",
    "[1/20] ./checkpoints/iter_0000010 saved",
    "[4/7] build/temp.linux-x86_64/kernels.cu",
    "[1/2] Building CUDA object csrc/CMakeFiles/ops.dir/attention.cu.o",
]


def test_a_test_s_own_i_of_n_output_such_as_ninja_build_steps_is_not_reported_as_a_cut_off_runner_line():
    """Every test that JIT-builds a kernel prints ninja's ``[i/N]`` lines; they are not the runner's."""
    stamp = "2025-05-01T12:00:00.1234567Z "
    log = "".join(f"{stamp}{line}\n" for line in BUILD_OUTPUT) + (
        "2025-05-01T12:15:57.1234567Z End (1/1):\n"
        "2025-05-01T12:15:57.1234567Z filename='tests/e2e/test_a.py', elapsed=957, _estimated_time=600\n"
        "2025-05-01T12:15:57.1234567Z [1/1] tests/e2e/test_a.py  PASS  elapsed=957s\n")
    samples, problems = import_logs({"j.log": log}, catalog(make_test()))
    assert [(s.elapsed_s, s.started_at) for s in samples] == [(957.0, "2025-05-01T12:00:00.123456+00:00")]
    assert problems == []


def test_an_end_block_whose_summary_line_is_missing_is_reported():
    log = "End (1/2):\nfilename='tests/e2e/test_a.py', elapsed=10, _estimated_time=600\n" + \
          "[2/2] tests/e2e/test_a.py  PASS  elapsed=12s\n"
    samples, problems = import_logs({"j.log": log}, catalog(make_test()))
    assert [s.elapsed_s for s in samples] == [12.0]
    assert [str(p) for p in problems] == [
        "j.log:2: log: End block of tests/e2e/test_a.py has no summary line `[i/N] <file>  PASS|FAIL|TIMEOUT  "
        "elapsed=Ns` after it (the log may be cut off); attempt not imported"]


def test_a_file_name_with_spaces_is_read_whole():
    log = "TIMEOUT: tests/e2e/my test.py after 30 seconds\n[1/1] tests/e2e/my test.py  TIMEOUT  elapsed=30s timeout_after=30s\n"
    (got,) = parse_ci_log(log)
    assert (got.file, got.status, got.elapsed_s) == ("tests/e2e/my test.py", "TIMEOUT", 30.0)
    assert read_ci_log(log).refused == ()


def test_a_form_feed_in_test_output_does_not_shift_the_line_numbers():
    log = "training step 1\x0cstep 2\x1cdone\n[1/1] tests/e2e/test_a.py  PASS  elapsed=10s\n"
    assert [a.line for a in parse_ci_log(log)] == [2]


def test_a_runner_line_with_bytes_that_are_not_utf8_is_reported_not_dropped():
    raw = b"[1/2] tests/e2e/caf\xe9.py  PASS  elapsed=10s\n[2/2] tests/e2e/test_a.py  PASS  elapsed=12s\n"
    samples, problems = import_logs({"j.log": raw.decode("utf-8", errors="replace")}, catalog(make_test()))
    assert [s.elapsed_s for s in samples] == [12.0]
    assert [str(p) for p in problems] == [
        "j.log:1: filename: 'tests/e2e/caf\ufffd.py' holds bytes that are not UTF-8 (shown as U+FFFD), so it cannot "
        "match a test file; save the job log as it was downloaded, without re-encoding it; attempt not imported"]


def test_a_log_naming_a_file_the_catalog_could_not_read_says_what_is_wrong_with_the_file():
    from pipelines.core.model import Problem

    broken = Catalog(repo="/repo", tests=(make_test(),), problems=(
        Problem("tests/e2e/test_b.py", 3, "syntax", "invalid syntax; fix the file so Python can parse it"),))
    samples, problems = import_logs({"j.log": "[1/1] tests/e2e/test_b.py  PASS  elapsed=10s\n"}, broken)
    assert samples == []
    assert [str(p) for p in problems] == [
        "j.log:1: filename: tests/e2e/test_b.py has no test in the catalog because of its own problem "
        "(tests/e2e/test_b.py:3: syntax: invalid syntax; fix the file so Python can parse it); fix the file, then "
        "import the log again"]


def test_a_long_line_of_output_costs_linear_time_not_quadratic():
    import time

    hostile = "[1/1] tests/e2e/x" + " " * 100_000 + "y\n"  # quadratic backtracking took minutes on this
    started = time.process_time()  # CPU time: other processes' load does not count
    assert read_ci_log(hostile * 3).attempts == ()
    assert time.process_time() - started < 10  # linear: milliseconds


def test_a_call_listing_several_hardware_needs_the_job_s_hardware_and_says_so():
    log = "[1/1] tests/e2e/test_m.py  PASS  elapsed=100s\n"
    h200, b200 = (make_test(id=f"tests/e2e/test_m.py::cuda-stage-c-4-gpu@{hw}", path="tests/e2e/test_m.py",
                            suite="stage-c-4-gpu", hardware=hw) for hw in ("h200", "b200"))
    for suite in (None, "stage-c-4-gpu"):
        samples, problems = import_logs({"job.log": log}, catalog(h200, b200), suite=suite)
        assert samples == []
        assert [str(p) for p in problems] == [
            "job.log:1: suite: tests/e2e/test_m.py registers suite 'stage-c-4-gpu' on several hardware (b200, h200) "
            "and the log does not say which ran it; pass the job's hardware with --hardware"]
    samples, problems = import_logs({"job.log": log}, catalog(h200, b200), hardware="b200")
    assert problems == [] and [(s.test_id, s.hardware) for s in samples] == [(b200.id, "b200")]


def test_the_whole_job_s_log_and_its_step_log_store_each_attempt_once(tmp_path):
    from pipelines.core.history import FileHistoryStore

    whole = ("2026-11-30T15:01:00.0000000Z ##[group]Set up job\n" + STAMPED
             + "2026-11-30T16:06:00.0000000Z Post job cleanup.\n")
    tests = catalog(*(make_test(id=p, path=p) for p in
                      ("tests/e2e/megatron/test_x.py", "tests/e2e/test_y.py", "tests/e2e/test_z.py")))
    together, problems = import_logs({"job.txt": whole, "job/5_Run tests.txt": STAMPED}, tests)
    assert problems == [] and len(together) == 4
    store = FileHistoryStore(tmp_path / "history.sqlite")
    for text in (whole, STAMPED):  # one import each, as `nightly history import` run twice
        store.add(import_logs({"log.txt": text}, tests)[0])
    assert sorted((s.test_id, s.outcome) for s in store.read()) == sorted((s.test_id, s.outcome) for s in together)


def test_two_unstamped_logs_with_other_lines_stay_two_runs():
    plain = "\n".join(line.split(" ", 1)[1] for line in STAMPED.splitlines()) + "\n"
    x = make_test(id="tests/e2e/megatron/test_x.py", path="tests/e2e/megatron/test_x.py")
    samples, _ = import_logs({"a.txt": plain, "b.txt": "Monday\n" + plain}, catalog(x))
    assert len(samples) == 2 and len({s.run_id for s in samples}) == 2


def test_runner_lines_in_colour_are_read_as_the_plain_ones():
    """GitHub keeps a runner's colour codes in the raw log; a coloured TIMEOUT must not vanish."""
    red, green, off = "\x1b[31m", "\x1b[32m", "\x1b[0m"
    coloured = "\n".join(
        line if " PASS " not in line and "TIMEOUT" not in line else
        (f"{line[:29]}{green if 'PASS' in line else red}{line[29:]}{off}" if line[:4].isdigit() else line)
        for line in STAMPED.splitlines()) + "\n"
    assert "\x1b[31m[3/3]" in coloured and "\x1b[31mTIMEOUT:" in coloured
    plain, got = read_ci_log(STAMPED), read_ci_log(coloured)
    assert got.attempts == plain.attempts and got.refused == ()


def test_a_runner_started_in_a_subfolder_names_files_below_it_and_they_are_still_matched():
    """The SGLang family's `cd test && python run_suite.py` prints `registered/...` for test/registered/..."""
    t = make_test(id="test/registered/basic/test_generate.py", path="test/registered/basic/test_generate.py",
                  suite="stage-b-test-1-gpu-large")
    log = "[1/1] registered/basic/test_generate.py  PASS  elapsed=42s\n"
    samples, problems = import_logs({"j.log": log}, catalog(t), suite="stage-b-test-1-gpu-large")
    assert [(s.test_id, s.elapsed_s) for s in samples] == [(t.id, 42.0)] and problems == []


def test_a_nightly_attempt_log_is_said_to_be_one_and_its_timeout_line_is_not_read_as_a_cut_job_log():
    """The local launcher ends a timed-out attempt's log with the runner's own `TIMEOUT:` line; fed to
    the import, that log is named for what it is, not reported as a job log cut before its summary."""
    log = textwrap.dedent("""\
        # nightly: tests/e2e/test_z.py attempt 1 on local-h200-0 gpus=0,1 timeout=20s (waited 3 s for free GPUs)
        training step 1
        TIMEOUT: tests/e2e/test_z.py after 20 seconds
        # nightly: timed out after 20 s: killed 1 process(es) of the test: PID 12 (python wrapper.py)
    """)
    samples, problems = import_logs({"x.attempt1.log": log}, catalog(make_test(path="tests/e2e/test_z.py")))
    assert samples == []
    assert [(p.line, p.field) for p in problems] == [(1, "log")]
    assert "a nightly attempt log" in problems[0].message and "cut off" not in problems[0].message
    assert read_ci_log("noise\n" + log).refused[0][2].startswith("TIMEOUT line of tests/e2e/test_z.py")  # a job log's
