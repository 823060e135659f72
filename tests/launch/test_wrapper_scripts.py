"""The wrapper runs a test as its runner would: a plain script (no prepare()/execute(), e.g. unittest
style) as ``python3 FILE``, and with the signals a shell would give it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from pipelines.launch.local import WRAPPER

SCRIPT = textwrap.dedent("""\
    import unittest

    class T(unittest.TestCase):
        def test_sum(self):
            self.assertEqual(1 + 1, {expected})

    if __name__ == "__main__":
        unittest.main()
""")


def _run(tmp_path, expected: int) -> tuple[int, dict]:
    (tmp_path / "test_plain.py").write_text(SCRIPT.format(expected=expected))
    out = subprocess.run([sys.executable, str(WRAPPER), "--file", "test_plain.py", "--result", "r.json"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    return out.returncode, json.loads((tmp_path / "r.json").read_text())


def test_a_passing_unittest_script_passes_with_the_completion_record(tmp_path):
    code, result = _run(tmp_path, 2)
    assert code == 0 and result["ok"] is True and result["exit_code"] == 0 and result["finished"] is True


def test_a_failing_unittest_script_fails(tmp_path):
    code, result = _run(tmp_path, 3)
    assert code == 1 and result["ok"] is False and result["exit_code"] == 1


SIGNALS = textwrap.dedent("""\
    import pathlib

    def execute():
        status = dict(line.split(":\\t", 1) for line in pathlib.Path("/proc/self/status").read_text().splitlines()
                      if ":\\t" in line)
        pathlib.Path("signals.txt").write_text(status["SigBlk"].strip() + " " + status["SigIgn"].strip())
""")

# the night's process as it might be: SIGTERM and SIGINT ignored and SIGTERM blocked, then exec
HOSTILE_PARENT = ("import os, signal, sys; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                  "signal.signal(signal.SIGINT, signal.SIG_IGN); "
                  "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM}); "
                  "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])")


def test_the_test_gets_sigterm_and_sigint_unblocked_and_not_ignored_whatever_the_night_had(tmp_path):
    (tmp_path / "test_signals.py").write_text(SIGNALS)
    out = subprocess.run([sys.executable, "-c", HOSTILE_PARENT, str(WRAPPER), "--file", "test_signals.py"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    blocked, ignored = (int(field, 16) for field in (tmp_path / "signals.txt").read_text().split())
    for sig in (signal.SIGTERM, signal.SIGINT):
        assert not blocked & (1 << (sig - 1)), f"{sig.name} blocked in the test: {blocked:#x}"
        assert not ignored & (1 << (sig - 1)), f"{sig.name} ignored in the test: {ignored:#x}"


def _wrap(tmp_path, body: str, name: str = "test_x.py", env: dict[str, str] | None = None,
          ) -> tuple[subprocess.CompletedProcess, dict]:
    (tmp_path / name).write_text(textwrap.dedent(body))
    out = subprocess.run([sys.executable, str(WRAPPER), "--file", name, "--result", "r.json"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         env={**os.environ, **env} if env else None)
    return out, json.loads((tmp_path / "r.json").read_text())


PREPARE_MUST_NOT_RUN = """\
    def prepare():
        open("prepared", "w").close()  # the night's assets did this; running it again downloads again

    def execute():
        print("training done")
"""


def test_a_check_in_the_main_block_runs_as_the_runner_would_and_its_failure_fails(tmp_path):
    out, result = _wrap(tmp_path, PREPARE_MUST_NOT_RUN + """
    if __name__ == "__main__":
        prepare()
        execute()
        raise SystemExit("accuracy 0.12 < 0.80")
    """)
    assert out.returncode == 1 and result["ok"] is False, out.stdout + out.stderr
    assert "accuracy 0.12 < 0.80" in out.stderr and "accuracy 0.12 < 0.80" in result["error"]
    assert "training done" in out.stdout
    assert "as __main__" in out.stdout and "1 prepare() call(s) of its __main__ block skipped" in out.stdout
    assert not (tmp_path / "prepared").exists()


def test_a_main_block_that_passes_its_check_passes(tmp_path):
    out, result = _wrap(tmp_path, PREPARE_MUST_NOT_RUN + """
    import sys
    if __name__ == "__main__":
        prepare()
        execute()
        sys.exit(0 if 0.9 > 0.8 else 1)
    """)
    assert out.returncode == 0 and result["ok"] is True and result["finished"] is True, out.stderr
    assert not (tmp_path / "prepared").exists()


def test_an_error_in_the_main_block_points_at_the_files_real_line(tmp_path):
    out, _ = _wrap(tmp_path, PREPARE_MUST_NOT_RUN + """
    if __name__ == "__main__":
        prepare()
        score = execute()
        assert score is not None, "execute() returned no score"
    """)
    lines = (tmp_path / "test_x.py").read_text().splitlines()
    line = next(i for i, text in enumerate(lines, 1) if "assert score" in text)
    assert out.returncode == 1
    assert f'test_x.py", line {line}, in <module>' in out.stderr, out.stderr


def test_the_usual_anatomy_runs_as_main_with_only_execute_called(tmp_path):
    out, result = _wrap(tmp_path, PREPARE_MUST_NOT_RUN + """
    if __name__ == "__main__":
        prepare()
        execute()
    """)
    assert out.returncode == 0 and result["ok"] is True, out.stderr
    assert "as __main__" in out.stdout and "training done" in out.stdout
    assert not (tmp_path / "prepared").exists()


def test_a_unittest_file_that_ran_no_test_fails_saying_so(tmp_path):
    out, result = _wrap(tmp_path, """
    import unittest

    class TestGen(unittest.TestCase):
        pass

    if __name__ == "__main__":
        unittest.main()
    """)
    assert "Ran 0 tests" in out.stderr
    assert out.returncode == 1 and result["ok"] is False, out.stderr
    assert "ran no test" in result["error"] and "test_x.py" in result["error"]


def test_a_unittest_file_whose_tests_were_all_skipped_fails_and_one_that_ran_a_test_passes(tmp_path):
    body = """
    import unittest

    class TestGpu(unittest.TestCase):
        @unittest.skip("needs an H100")
        def test_a(self):
            pass

        def test_b(self):
            if {skip_b}:
                self.skipTest("needs an H100")

    if __name__ == "__main__":
        unittest.main()
    """
    out, result = _wrap(tmp_path, body.format(skip_b=True))
    assert out.returncode == 1 and result["ok"] is False
    assert "all 2 of its unittest tests were skipped" in result["error"]
    out, result = _wrap(tmp_path, body.format(skip_b=False))
    assert out.returncode == 0 and result["ok"] is True, out.stderr


def test_a_file_of_test_functions_without_execute_or_main_block_fails_as_running_nothing(tmp_path):
    out, result = _wrap(tmp_path, """
    def test_x():
        assert False, "never called by `python3 FILE`"
    """)
    assert out.returncode == 1 and result["ok"] is False
    assert 'has no function execute() and no `if __name__ == "__main__":` block' in result["error"]
    assert "would run no test" in result["error"] and "Traceback" not in out.stderr


def test_a_file_run_as_main_keeps_its_own_annotations_not_the_wrappers_future_import(tmp_path):
    out, result = _wrap(tmp_path, """
    import dataclasses

    @dataclasses.dataclass
    class Cfg:
        lr: float = 0.1

    if __name__ == "__main__":
        assert Cfg.__annotations__["lr"] is float, repr(Cfg.__annotations__["lr"])
    """)
    assert out.returncode == 0 and result["ok"] is True, out.stderr


def test_skipped_subtests_of_a_test_that_also_ran_do_not_make_it_a_skipped_test(tmp_path):
    body = """
    import unittest

    CONFIGS = ["fp16", "bf16", "fp8", "fp4"]

    class TestTrain(unittest.TestCase):
        def test_matrix(self):
            for c in CONFIGS:
                with self.subTest(config=c):
                    if c not in {supported}:
                        self.skipTest(f"{{c}} not supported on this GPU")
                    self.assertIn(c, {supported})

    if __name__ == "__main__":
        unittest.main()
    """
    out, result = _wrap(tmp_path, body.format(supported={"bf16"}))
    assert "OK (skipped=3)" in out.stderr
    assert out.returncode == 0 and result["ok"] is True, result
    out, result = _wrap(tmp_path, body.format(supported=set()))  # every configuration skipped: nothing verified
    assert out.returncode == 1 and "all 1 of its unittest tests were skipped" in result["error"]


OPTIONAL_CHECKS = """
    import unittest

    def prepare():
        pass

    class OptionalChecks(unittest.TestCase):
        @unittest.skipUnless(False, "needs 8 GPUs")
        def test_big(self):
            pass

    def execute():
        print("training ... accuracy 0.93 >= 0.80: OK")
        {run_checks}

    if __name__ == "__main__":
        prepare()
        execute()
        {after}
"""


def test_a_skipping_sub_suite_run_inside_execute_does_not_decide_the_outcome(tmp_path):
    runner = "unittest.TextTestRunner().run(unittest.defaultTestLoader.loadTestsFromTestCase(OptionalChecks))"
    program = "unittest.main(module=__name__, argv=['x'], exit=False)"
    for run_checks, after in [(runner, ""), (program, ""), ("pass", runner)]:
        out, result = _wrap(tmp_path, OPTIONAL_CHECKS.format(run_checks=run_checks, after=after))
        assert "OK (skipped=1)" in out.stderr, out.stderr
        assert out.returncode == 0 and result["ok"] is True, (run_checks, after, result)


def test_the_files_own_unittest_program_still_decides_when_it_skips_everything(tmp_path):
    out, result = _wrap(tmp_path, OPTIONAL_CHECKS.format(run_checks="pass", after="unittest.main()"))
    assert out.returncode == 1 and "all 1 of its unittest tests were skipped" in result["error"]


SPAWN = """
    import multiprocessing as mp

    class Box:
        def __init__(self, v):
            self.v = v

    def work(q, b):
        q.put(b.v * 2)

    def prepare():
        open("prepared", "w").close()

    def {func}():
        ctx = mp.get_context("spawn")
        q = ctx.Queue()
        p = ctx.Process(target=work, args=(q, Box(21)))
        p.start()
        r = q.get(timeout=10)
        p.join()
        assert r == 42, r
        print("spawned child answered", r)
"""


def test_a_child_started_with_spawn_finds_the_test_files_functions_whichever_way_it_runs(tmp_path):
    main_block = """
    if __name__ == "__main__":
        prepare()
        execute()
    """
    for body, way in [(SPAWN.format(func="execute") + main_block, "as __main__"),  # the usual anatomy
                      (SPAWN.format(func="execute"), "importing")]:  # execute() and no __main__ block
        out, result = _wrap(tmp_path, body)
        assert out.returncode == 0 and result["ok"] is True, out.stderr
        assert way in out.stdout and "spawned child answered 42" in out.stdout
        assert not (tmp_path / "prepared").exists()


def test_another_func_is_called_without_running_the_main_block_and_can_spawn(tmp_path):
    (tmp_path / "test_x.py").write_text(textwrap.dedent(SPAWN.format(func="smoke") + """
    if __name__ == "__main__":
        raise SystemExit("the __main__ block must not run for --func smoke")
    """))
    out = subprocess.run([sys.executable, str(WRAPPER), "--file", "test_x.py", "--func", "smoke", "--result", "r.json"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "calling its smoke()" in out.stdout and "spawned child answered 42" in out.stdout


@pytest.mark.parametrize("code", ["256", "-256", "2**64", "-2**64", "2**32 + 3", "-1", "True", "10**5000"])
def test_the_exit_status_and_the_record_say_what_python3_file_exits_with(tmp_path, code):
    """The OS keeps the low 8 bits of the code (``sys.exit(256)`` exits 0: green in CI); a code too large
    for a C long exits 255. The wrapper's record judges that status, not the raw number."""
    body = f"""\
    if __name__ == "__main__":
        raise SystemExit({code})
    """
    out, result = _wrap(tmp_path, body)
    plain = subprocess.run([sys.executable, "test_x.py"], cwd=tmp_path, capture_output=True, timeout=60)
    assert out.returncode == plain.returncode, out.stderr
    assert result["exit_code"] == plain.returncode and result["ok"] is (plain.returncode == 0)


PYTEST_FILE = """
    import sys
    import pytest

    @pytest.mark.skip(reason="needs 8 GPUs")
    def test_train():
        assert False

    @pytest.mark.xfail(reason="known NaN at step 3")
    def test_resume():
        assert False

    def test_eval():
        if {skip_eval}:
            pytest.skip("needs an H100")

    if __name__ == "__main__":
        sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
"""

#: the test's pytest without this venv's auto-loaded plugins, which take seconds to start
BARE_PYTEST = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}


def test_a_pytest_file_whose_tests_were_all_skipped_or_xfailed_fails_and_one_that_ran_a_test_passes(tmp_path):
    out, result = _wrap(tmp_path, PYTEST_FILE.format(skip_eval=True), env=BARE_PYTEST)
    assert "2 skipped, 1 xfailed" in out.stdout, out.stdout
    assert out.returncode == 1 and result["ok"] is False, out.stdout + out.stderr
    assert result["error"] == "test_x.py: ran no test: all 3 of its pytest tests were skipped (2) or xfailed (1)"
    out, result = _wrap(tmp_path, PYTEST_FILE.format(skip_eval=False), env=BARE_PYTEST)
    assert "1 passed, 1 skipped, 1 xfailed" in out.stdout, out.stdout
    assert out.returncode == 0 and result["ok"] is True, out.stdout + out.stderr


def test_a_pytest_file_of_expected_failures_only_fails_and_a_failing_one_keeps_its_own_failure(tmp_path):
    out, result = _wrap(tmp_path, """
    import sys, pytest

    @pytest.mark.xfail(reason="known")
    def test_a():
        assert False

    if __name__ == "__main__":
        sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
    """, env=BARE_PYTEST)
    assert out.returncode == 1 and "all 1 of its pytest tests were xfailed (expected to fail)" in result["error"]
    out, result = _wrap(tmp_path, """
    import sys, pytest

    def test_a():
        assert 1 == 2

    if __name__ == "__main__":
        sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
    """, env=BARE_PYTEST)
    assert out.returncode == 1 and result["error"] == "SystemExit(<ExitCode.TESTS_FAILED: 1>)", result


def test_a_skipping_pytest_run_inside_execute_does_not_decide_the_outcome(tmp_path):
    out, result = _wrap(tmp_path, """
    import pytest

    @pytest.mark.skip(reason="needs 8 GPUs")
    def test_big():
        pass

    def execute():
        print("training ... accuracy 0.93 >= 0.80: OK")
        pytest.main([__file__, "-q", "-p", "no:cacheprovider"])

    if __name__ == "__main__":
        execute()
    """, env=BARE_PYTEST)
    assert "1 skipped" in out.stdout and out.returncode == 0 and result["ok"] is True, out.stdout + out.stderr


def test_the_wrapper_never_imports_pytest_for_a_test_that_does_not_and_its_absence_is_the_tests_business(tmp_path):
    out, result = _wrap(tmp_path, """
    import sys

    def execute():
        assert "pytest" not in sys.modules and "_pytest" not in sys.modules, "the wrapper imported pytest"
    """)
    assert out.returncode == 0 and result["ok"] is True, out.stderr
    # a Python without pytest (-S: no site-packages): the test's own import fails as under `python3 FILE`
    (tmp_path / "test_y.py").write_text("def execute():\n    try:\n        import pytest\n"
                                        "    except ModuleNotFoundError as exc:\n        print('no pytest here:', exc)\n")
    out = subprocess.run([sys.executable, "-S", str(WRAPPER), "--file", "test_y.py", "--result", "r.json"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "no pytest here: No module named 'pytest'" in out.stdout, out.stdout + out.stderr


NOT_COLLECTED = """
    import sys
    import pytest

    class Checks:  # no Test prefix: pytest collects nothing here
        def test_loss_falls(self):
            assert False, "never run"

    if __name__ == "__main__":
        {call}
"""


@pytest.mark.parametrize("call", ['pytest.main([__file__, "-q", "-p", "no:cacheprovider"])',
                                  'sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))'])
def test_a_pytest_file_that_collects_no_test_fails_whatever_it_does_with_pytest_mains_status(tmp_path, call):
    out, result = _wrap(tmp_path, NOT_COLLECTED.format(call=call), env=BARE_PYTEST)
    assert "no tests ran" in out.stdout, out.stdout
    assert out.returncode == 1 and result["ok"] is False, out.stdout + out.stderr
    assert result["error"].startswith("test_x.py: ran no test: its pytest run collected no test"), result
    assert "`Test*` classes" in result["error"], result


def test_a_failure_the_files_unittest_program_reported_fails_even_when_the_file_drops_its_status(tmp_path):
    body = """
    import unittest

    class TestTrain(unittest.TestCase):
        def test_loss(self):
            self.assertLess({loss}, 1.0)

        def test_resume(self):
            {resume}

        def test_eval(self):
            pass

    if __name__ == "__main__":
        unittest.main(exit=False)
    """
    out, result = _wrap(tmp_path, body.format(loss=2.5, resume='raise RuntimeError("no checkpoint")'))
    assert "FAILED (failures=1, errors=1)" in out.stderr, out.stderr
    assert out.returncode == 1 and result["ok"] is False and result["exit_code"] == 1, out.stderr
    assert result["error"].startswith("test_x.py: its unittest run reported FAILED (failures=1, errors=1), yet "
                                      "the file exited 0"), result
    out, result = _wrap(tmp_path, body.format(loss=0.5, resume="pass"))
    assert "OK" in out.stderr and out.returncode == 0 and result["ok"] is True, out.stderr


def test_a_failure_the_files_pytest_run_reported_fails_even_when_the_file_drops_its_status(tmp_path):
    body = """
    import pytest

    @pytest.fixture
    def checkpoint():
        {fixture}

    def test_loss():
        assert {loss} < 1.0

    def test_resume(checkpoint):
        pass

    def test_eval():
        pass

    if __name__ == "__main__":
        pytest.main([__file__, "-q", "-p", "no:cacheprovider"])
    """
    out, result = _wrap(tmp_path, body.format(loss=2.5, fixture='raise RuntimeError("no checkpoint")'),
                        env=BARE_PYTEST)
    assert "1 failed, 1 passed, 1 error" in out.stdout, out.stdout
    assert out.returncode == 1 and result["ok"] is False and result["exit_code"] == 1, out.stdout + out.stderr
    assert result["error"].startswith("test_x.py: its pytest run reported 1 failed, 1 error, yet the file "
                                      "exited 0"), result
    out, result = _wrap(tmp_path, body.format(loss=0.5, fixture="return 'ckpt'"), env=BARE_PYTEST)
    assert "3 passed" in out.stdout and out.returncode == 0 and result["ok"] is True, out.stdout + out.stderr
    # a run pytest failed with no failed test (a usage error) names its exit status
    out, result = _wrap(tmp_path, body.format(loss=0.5, fixture="return 'ckpt'").replace('"-q"', '"--no-such-flag"'),
                        env=BARE_PYTEST)
    assert out.returncode == 1 and result["error"].startswith(
        "test_x.py: its pytest run reported exit status 4 (USAGE_ERROR), yet the file exited 0"), result


def test_a_main_block_that_only_calls_prepare_runs_no_test_and_fails(tmp_path):
    """The night skips prepare(): a block with nothing else would run nothing, as a file with no block at all."""
    out, result = _wrap(tmp_path, """
    def prepare():
        open("prepared", "w").close()

    def execute():
        open("executed", "w").close()

    if __name__ == "__main__":
        \"\"\"Download the checkpoint; the CI job runs execute() itself.\"\"\"
        prepare()
    """)
    line = next(i for i, text in enumerate((tmp_path / "test_x.py").read_text().splitlines(), 1) if "__main__" in text)
    assert out.returncode == 1 and result["ok"] is False, out.stdout + out.stderr
    assert result["error"].startswith(f'test_x.py: ran no test: its `if __name__ == "__main__":` block (line {line}) '
                                      "only calls prepare() (1 call), which the nightly skips"), result
    assert "Traceback" not in out.stderr and "running test_x.py as __main__" not in out.stdout, out.stdout
    assert not (tmp_path / "prepared").exists() and not (tmp_path / "executed").exists()


def test_a_runner_a_test_starts_to_check_a_failure_is_that_tests_business_not_the_files(tmp_path):
    """A test may run a runner on purpose to check that it reports a failure; `python3 FILE` exits 0
    ("OK", "1 passed"), and so must the night: only the file's own outermost run judges."""
    out, result = _wrap(tmp_path, """
    import io, unittest

    class Inner(unittest.TestCase):
        def test_bad(self):
            self.fail("expected")

    class T(unittest.TestCase):
        def test_runner_reports_failure(self):
            r = unittest.TextTestRunner(stream=io.StringIO()).run(
                unittest.defaultTestLoader.loadTestsFromTestCase(Inner))
            self.assertFalse(r.wasSuccessful())

    def load_tests(loader, tests, pattern):
        return loader.loadTestsFromTestCase(T)

    if __name__ == "__main__":
        unittest.main()
    """)
    assert out.returncode == 0 and result["ok"] is True, out.stdout + out.stderr
    out, result = _wrap(tmp_path, """
    import sys, pytest

    def test_inner_run_fails(tmp_path):
        p = tmp_path / "test_inner.py"
        p.write_text("def test_inner():\\n    assert False\\n")
        assert pytest.main(["-q", "-p", "no:cacheprovider", str(p)]) == 1

    if __name__ == "__main__":
        sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", __file__]))
    """, env=BARE_PYTEST)
    assert "1 passed" in out.stdout and out.returncode == 0 and result["ok"] is True, out.stdout + out.stderr


def test_a_file_that_runs_its_tests_again_after_a_flaky_failure_is_judged_by_the_last_run(tmp_path):
    """`rc = pytest.main(...); if rc: rc = pytest.main(...); sys.exit(rc)` passes under `python3 FILE` when
    the second run passes; a file that drops the last run's failure still fails."""
    body = """
    import os, sys, pytest

    def test_flaky_nccl():
        if not os.path.exists("first_try_done"):
            open("first_try_done", "w").close()
            raise RuntimeError("NCCL timeout (transient)")
        assert {last_passes}

    if __name__ == "__main__":
        rc = pytest.main(["-q", "-p", "no:cacheprovider", __file__])
        if rc != 0:
            rc = pytest.main(["-q", "-p", "no:cacheprovider", __file__])
        {end}
    """
    out, result = _wrap(tmp_path, body.format(last_passes=True, end="sys.exit(rc)"), env=BARE_PYTEST)
    assert out.returncode == 0 and result["ok"] is True, out.stdout + out.stderr
    (tmp_path / "first_try_done").unlink()
    out, result = _wrap(tmp_path, body.format(last_passes=False, end="pass"), env=BARE_PYTEST)
    assert out.returncode == 1 and result["error"].startswith("test_x.py: its pytest run reported 1 failed"), result


def test_a_script_test_at_module_level_runs_whatever_its_main_block_holds(tmp_path):
    """Checks at module level run under `python3 FILE` even when the __main__ block only passes: such a
    file is run (and its check judged), not refused as running nothing."""
    out, result = _wrap(tmp_path, """
    total = sum(range(10))
    assert total == 45, total
    print("top-level check passed")

    if __name__ == "__main__":
        pass
    """)
    assert out.returncode == 0 and result["ok"] is True and "top-level check passed" in out.stdout, out.stderr
    out, result = _wrap(tmp_path, """
    total = sum(range(10))
    assert total == 46, total

    if __name__ == "__main__":
        pass
    """)
    assert out.returncode == 1 and "AssertionError" in result["error"], result


def test_module_level_set_up_is_no_test_an_empty_or_prepare_only_main_block_still_runs_none(tmp_path):
    """Logging, sys.path and optional imports at module level are set-up, not a test: a file whose
    __main__ block only passes or only calls prepare() still ran no test."""
    out, result = _wrap(tmp_path, """
    import logging, sys
    logging.basicConfig(level=logging.INFO)
    sys.path.insert(0, ".")
    try:
        import torch
    except ImportError:
        torch = None

    def prepare():
        pass

    def test_loss():
        assert False

    if __name__ == "__main__":
        prepare()
    """)
    assert out.returncode == 1 and "ran no test" in result["error"], result
    out, result = _wrap(tmp_path, """
    def run_checks():
        assert sum(range(10)) == 46

    run_checks()

    if __name__ == "__main__":
        pass
    """)
    assert out.returncode == 1 and "AssertionError" in result["error"], result  # the file's own call: it ran


def test_a_rerun_that_runs_no_test_does_not_clear_a_failed_run(tmp_path):
    """`if rc: pytest.main([... "-k", "nosuch"])` (or a unittest rerun matching nothing) after a failing run
    exits 0: the failing run is the last that ran a test, and it judges."""
    out, result = _wrap(tmp_path, """
    import pytest

    def test_loss():
        assert False

    if __name__ == "__main__":
        rc = pytest.main([__file__, "-q", "-p", "no:cacheprovider"])
        if rc:
            pytest.main([__file__, "-q", "-p", "no:cacheprovider", "-k", "nosuch"])
    """, env=BARE_PYTEST)
    assert out.returncode == 1 and result["error"].startswith("test_x.py: its pytest run reported 1 failed"), result
    out, result = _wrap(tmp_path, """
    import sys, unittest

    class T(unittest.TestCase):
        def test_loss(self):
            self.assertEqual(1, 2)

    if __name__ == "__main__":
        prog = unittest.main(exit=False)
        if not prog.result.wasSuccessful():
            unittest.main(argv=[sys.argv[0], "-k", "test_nothing_matches"], exit=False)
    """)
    assert out.returncode == 1 and "its unittest run reported FAILED (failures=1)" in result["error"], result


def test_a_unittest_rerun_that_skips_every_test_does_not_clear_a_failed_run(tmp_path):
    out, result = _wrap(tmp_path, """
    import unittest
    FIRST = [True]

    class T(unittest.TestCase):
        def test_a(self):
            if FIRST[0]:
                FIRST[0] = False
                self.fail("broken")
            self.skipTest("gpu busy")

    if __name__ == "__main__":
        unittest.main(exit=False)
        unittest.main(exit=False)
    """)
    assert out.returncode == 1 and "its unittest run reported FAILED (failures=1)" in result["error"], result


def test_a_runner_of_the_other_framework_a_test_starts_on_purpose_is_that_tests_business(tmp_path):
    """An SGLang-style unittest file whose test checks that pytest reports a failure (and the reverse):
    `python3 FILE` exits 0, so must the night."""
    out, result = _wrap(tmp_path, """
    import unittest, pytest

    class T(unittest.TestCase):
        def test_pytest_reports_failure(self):
            with open("test_inner.py", "w") as fh:
                fh.write("def test_bad():\\n    assert False\\n")
            self.assertEqual(pytest.main(["test_inner.py", "-q", "-p", "no:cacheprovider"]), 1)

    if __name__ == "__main__":
        unittest.main(verbosity=2)
    """, env=BARE_PYTEST)
    assert out.returncode == 0 and result["ok"] is True, out.stdout + out.stderr
    out, result = _wrap(tmp_path, """
    import io, sys, unittest, pytest

    class Inner(unittest.TestCase):
        def test_bad(self):
            self.fail("expected")

    def test_unittest_reports_failure():
        prog = unittest.main(module=__name__, argv=["x", "Inner"], exit=False,
                             testRunner=unittest.TextTestRunner(stream=io.StringIO()))
        assert not prog.result.wasSuccessful()

    if __name__ == "__main__":
        sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider", "-k", "reports_failure"]))
    """, env=BARE_PYTEST)
    assert out.returncode == 0 and result["ok"] is True, out.stdout + out.stderr


def test_a_script_test_without_execute_or_main_block_runs_at_module_level_and_is_judged(tmp_path):
    """`asyncio.run(main())` at module level, no execute() and no __main__ block: `python3 FILE` runs the test."""
    body = """
    import asyncio

    async def main():
        assert 1 + 1 == {two}
        print("checked")

    asyncio.run(main())
    """
    out, result = _wrap(tmp_path, body.format(two=2))
    assert out.returncode == 0 and result["ok"] is True and "checked" in out.stdout, out.stdout + out.stderr
    out, result = _wrap(tmp_path, body.format(two=3))
    assert out.returncode == 1 and "AssertionError" in result["error"], result


#: a registry-based framework's registration (a module-level call that does nothing at run time) and its module
REGISTERED = """\
    from minirl.ci_register import register_cuda_ci
    register_cuda_ci(est_time=5, suite="stage-b-2-gpu-h200", labels=["short"])
"""


def _registered(tmp_path, body: str, **kw) -> tuple[subprocess.CompletedProcess, dict]:
    """Run a registered test file whose framework's ``minirl/ci_register.py`` sits beside it (sys.path[0])."""
    (tmp_path / "minirl").mkdir(exist_ok=True)
    (tmp_path / "minirl" / "__init__.py").write_text("")
    (tmp_path / "minirl" / "ci_register.py").write_text("def register_cuda_ci(est_time, suite, *, labels):\n    pass\n")
    return _wrap(tmp_path, REGISTERED + body, **kw)


def _line(tmp_path, text: str, name: str = "test_x.py") -> int:
    return next(i for i, line in enumerate((tmp_path / name).read_text().splitlines(), 1) if text in line)


def test_module_level_set_up_beside_test_entry_points_that_never_ran_is_no_test(tmp_path):
    """`CONFIGS = _configs()` (a call of the file's own function) or a loop that builds the matrix is set-up: a
    file whose execute() or test_* functions never ran ran no test, whatever its module level did."""
    out, result = _registered(tmp_path, """
    def _configs():
        return [("megatron", 4), ("fsdp", 4)]

    CONFIGS = _configs()

    def test_train():
        assert False, "never runs"
    """)
    assert out.returncode == 1 and result["ok"] is False, out.stdout + out.stderr
    assert result["error"] == (
        'test_x.py: ran no test: it has no function execute() and no `if __name__ == "__main__":` block, and '
        f"test_train() (line {_line(tmp_path, 'def test_train')}) never ran: `python3 test_x.py` would run no test "
        "(test functions alone are never called; module-level set-up is no test); the nightly calls execute(), or "
        "runs the __main__ block"), result
    out, result = _registered(tmp_path, """
    CONFIGS = []
    for backend in ("megatron", "fsdp"):
        CONFIGS.append((backend, 4))

    def prepare():
        print("downloading")

    def execute():
        raise SystemExit("accuracy 0.1 < 0.8")

    if __name__ == "__main__":
        prepare()
    """)
    assert out.returncode == 1 and result["ok"] is False, out.stdout + out.stderr
    assert result["error"].startswith(
        f'test_x.py: ran no test: its `if __name__ == "__main__":` block (line {_line(tmp_path, "__main__")}) only '
        "calls prepare() (1 call), which the nightly skips (the night's assets built its inputs), and execute() "
        f"(line {_line(tmp_path, 'def execute')}) never ran: module-level set-up"), result
    assert "downloading" not in out.stdout


def test_a_script_test_that_runs_its_own_test_functions_at_module_level_passes_and_is_judged(tmp_path):
    """The entry points ran, however the file called them: by name, or in a loop over its globals()."""
    for run in ["test_loss()\ntest_eval()", "for name, f in list(globals().items()):\n    if name.startswith('test_'):\n        f()"]:
        body = textwrap.dedent("""\
            def test_loss():
                \"\"\"The loss falls.\"\"\"
                assert {loss} < 1.0
                print("loss checked")

            def test_eval():
                pass

        """) + run + '\n\nif __name__ == "__main__":\n    pass\n'
        out, result = _wrap(tmp_path, body.format(loss=0.5))
        assert out.returncode == 0 and result["ok"] is True and "loss checked" in out.stdout, out.stdout + out.stderr
        out, result = _wrap(tmp_path, body.format(loss=2.5))
        assert out.returncode == 1 and result["error"].startswith("AssertionError"), result
        lines = (tmp_path / "test_x.py").read_text().splitlines()
        assert f'test_x.py", line {lines.index("    assert 2.5 < 1.0") + 1}, in test_loss' in out.stderr, out.stderr


def test_an_async_execute_without_main_block_runs_to_its_end_and_its_failure_fails(tmp_path):
    """Calling an `async def execute()` only makes a coroutine: the wrapper awaits it, so what it raises counts."""
    body = """
    import asyncio

    async def execute():
        await asyncio.sleep(0)
        print("rollout done")
        {check}
    """
    out, result = _registered(tmp_path, body.format(check='raise SystemExit("accuracy 0.1 < 0.8")'))
    assert out.returncode == 1 and result["ok"] is False, out.stdout + out.stderr
    assert result["error"] == "SystemExit('accuracy 0.1 < 0.8')" and "rollout done" in out.stdout, result
    assert "never awaited" not in out.stderr, out.stderr
    out, result = _registered(tmp_path, body.format(check="pass"))
    assert out.returncode == 0 and result["ok"] is True and "rollout done" in out.stdout, out.stdout + out.stderr
    assert "running it to its end with asyncio.run()" in out.stdout


def test_a_unittest_file_of_expected_failures_only_fails_as_its_pytest_twin_does(tmp_path):
    """`OK (expected failures=1)`: a test that failed as expected verified nothing, as a run of xfails only."""
    body = """
    import unittest

    class TestTrain(unittest.TestCase):
        @unittest.expectedFailure
        def test_reward(self):
            self.assertGreater(0.1, 0.5)  # known broken: reward never reaches 0.5

        {other}

    if __name__ == "__main__":
        unittest.main()
    """
    out, result = _registered(tmp_path, body.format(other=""))
    assert "OK (expected failures=1)" in out.stderr, out.stderr
    assert out.returncode == 1 and result["ok"] is False, out.stderr
    assert result["error"].startswith("test_x.py: ran no test: all 1 of its unittest tests were expected failures "
                                      "(`@unittest.expectedFailure`"), result
    out, result = _registered(tmp_path, body.format(other='@unittest.skip("needs an H100")\n        def test_b(self):\n'
                                                          "            pass"))
    assert out.returncode == 1, out.stderr
    assert result["error"] == ("test_x.py: ran no test: all 2 of its unittest tests were skipped (1) or expected "
                               "failures (1)"), result
    out, result = _registered(tmp_path, body.format(other="def test_loss(self):\n            pass"))
    assert "OK (expected failures=1)" in out.stderr and out.returncode == 0 and result["ok"] is True, out.stderr


EARLY_EXIT = """
    import os, sys

    def prepare():
        print("downloading")

    def execute():
        print("training")
        {check}

    if __name__ == "__main__":
        if not os.path.exists("tiny-lm"):
            print("model missing; skipping")
            {skip}
        prepare()
        execute()
"""


def test_a_main_block_that_exits_0_before_it_runs_execute_ran_no_test(tmp_path):
    """`if not os.path.exists(model): print("skipping"); sys.exit(0)` then `prepare(); execute()`: exit 0 with
    execute() never called is a skip, not a pass."""
    out, result = _registered(tmp_path, EARLY_EXIT.format(check="pass", skip="sys.exit(0)"))
    assert "model missing; skipping" in out.stdout and "training" not in out.stdout, out.stdout
    assert out.returncode == 1 and result["ok"] is False and result["exit_code"] == 1, out.stdout + out.stderr
    assert result["error"] == (
        f"test_x.py: ran no test: it exited 0 at line {_line(tmp_path, 'sys.exit(0)')} (`sys.exit(0)`), before its "
        f'`if __name__ == "__main__":` block (line {_line(tmp_path, "__main__")}) ran execute() (line '
        f"{_line(tmp_path, 'def execute')}): a skip is not a pass, since a nightly that verified nothing is not green; "
        "let the test fail when what it needs is missing, or disable its registration"), result
    (tmp_path / "tiny-lm").mkdir()  # the model is there: execute() runs and judges
    out, result = _registered(tmp_path, EARLY_EXIT.format(check='raise SystemExit("accuracy 0.1 < 0.8")', skip="sys.exit(0)"))
    assert out.returncode == 1 and result["error"] == "SystemExit('accuracy 0.1 < 0.8')", result
    out, result = _registered(tmp_path, EARLY_EXIT.format(check="pass", skip="sys.exit(0)"))
    assert out.returncode == 0 and result["ok"] is True and "training" in out.stdout, out.stdout + out.stderr


@pytest.mark.parametrize("body, said", [
    (EARLY_EXIT.format(check="pass", skip="pass").replace("        prepare()\n        execute()",
                                                          "        else:\n            prepare()\n            execute()"),
     "ended without running it"),  # an if/else skip falls off the block's end
    ("""
    async def execute():
        print("training")

    if __name__ == "__main__":
        execute()  # never awaited: `python3 FILE` exits 0 with "coroutine 'execute' was never awaited"
    """, "ended without running it"),
    ("""
    import sys, unittest

    class TestTrain(unittest.TestCase):
        def test_reward(self):
            self.assertGreater(0.1, 0.5)

    if __name__ == "__main__":
        if "--gpu" not in sys.argv:
            raise SystemExit
        unittest.main()
    """, "exited 0 at line"),
])
def test_a_main_block_that_ends_or_exits_0_before_the_test_it_names_ran_no_test(tmp_path, body, said):
    out, result = _registered(tmp_path, body)
    assert out.returncode == 1 and result["ok"] is False, out.stdout + out.stderr
    assert result["error"].startswith("test_x.py: ran no test: ") and said in result["error"], result
    assert "a skip is not a pass" in result["error"], result
    if "async def" in body:
        assert "execute() is `async def`: calling it only makes a coroutine, run it with `asyncio.run(execute())`" \
            in result["error"], result


def test_a_main_block_that_runs_the_test_in_another_process_is_judged_by_that_process(tmp_path):
    """A block that runs the file itself under another process (torchrun, a worker flag) and exits 0 ran no
    entry point in the wrapper's process, yet ran the test there: its exit status judges, as before."""
    body = """
    import subprocess, sys

    def execute():
        assert {ok}, "loss did not fall"
        print("worker trained")

    if __name__ == "__main__":
        if "--worker" in sys.argv:
            execute()
        else:
            subprocess.run([sys.executable, __file__, "--worker"], check=True)
            sys.exit(0)
    """
    out, result = _wrap(tmp_path, body.format(ok=True))
    assert out.returncode == 0 and result["ok"] is True and "worker trained" in out.stdout, out.stdout + out.stderr
    out, result = _wrap(tmp_path, body.format(ok=False))
    assert out.returncode == 1 and "CalledProcessError" in result["error"], result


TEXT_RUNNER = """
    import unittest

    class TestTrain(unittest.TestCase):
        def test_reward(self):
            self.assertGreater({reward}, 0.5)

    class TestEval(unittest.TestCase):
        def test_eval(self):
            pass

    def suite(case):
        return unittest.defaultTestLoader.loadTestsFromTestCase(case)

    if __name__ == "__main__":
        {runs}
"""


def test_a_failure_a_bare_text_test_runner_reported_fails_even_when_the_file_never_checks_it(tmp_path):
    """`unittest.TextTestRunner().run(suite)` in the __main__ block logs `FAILED (failures=1)` and exits 0: a failure
    the runner saw is never green, though a later run that passed the same test (a flaky rerun) clears it."""
    one = "unittest.TextTestRunner(verbosity=2).run(suite(TestTrain))"
    out, result = _registered(tmp_path, TEXT_RUNNER.format(reward=0.1, runs=one))
    assert "FAILED (failures=1)" in out.stderr, out.stderr
    assert out.returncode == 1 and result["ok"] is False and result["exit_code"] == 1, out.stderr
    assert result["error"] == (
        "test_x.py: its unittest run reported FAILED (failures=1), yet the file exited 0: it never checks the runner's "
        "result (`unittest.TextTestRunner().run(suite)` returns it: end with `sys.exit(not result.wasSuccessful())`); "
        "a failure the runner reported fails the test"), result
    out, result = _registered(tmp_path, TEXT_RUNNER.format(reward=0.9, runs=one))
    assert out.returncode == 0 and result["ok"] is True, out.stderr
    # a later run of other tests that passes does not clear it
    out, result = _registered(tmp_path, TEXT_RUNNER.format(reward=0.1, runs=f"{one}\n        {one.replace('TestTrain', 'TestEval')}"))
    assert out.returncode == 1 and "reported FAILED (failures=1)" in result["error"], result
    # a rerun that passes the failed test does (a flaky first try)
    flaky = """
    import unittest
    TRIES = []

    class TestTrain(unittest.TestCase):
        def test_reward(self):
            TRIES.append(1)
            self.assertGreater(0.1 if len(TRIES) == 1 else 0.9, 0.5)  # a hiccup on the first try

    def run():
        return unittest.TextTestRunner().run(unittest.defaultTestLoader.loadTestsFromTestCase(TestTrain))

    if __name__ == "__main__":
        if not run().wasSuccessful():
            run()
    """
    out, result = _registered(tmp_path, flaky)
    assert "FAILED (failures=1)" in out.stderr and out.returncode == 0 and result["ok"] is True, out.stderr


DIRECT_TESTCASE = """
    import os, sys, unittest

    class TestServer(unittest.TestCase):
        @classmethod
        def setUpClass(cls):
            cls.url = "http://127.0.0.1:1"

        def setUp(self):
            self.tokens = 8

        def test_generate(self):
            print("generated", self.tokens)
            self.assertEqual(self.tokens, {tokens})

    if __name__ == "__main__":
        if not os.path.exists("tiny-lm"):
            sys.exit(0)
        {call}
"""


@pytest.mark.parametrize("call", [
    't = TestServer("test_generate")\n        t.setUp()\n        t.test_generate()',
    'TestServer("test_generate").debug()',
    "TestServer.setUpClass()\n        t = TestServer()\n        t.setUp()\n        t.test_generate()",
])
def test_a_testcase_method_the_main_block_calls_itself_ran_its_test(tmp_path, call):
    """`TestServer("test_generate").debug()` (or `t.setUp(); t.test_generate()`) runs the test without a runner:
    `python3 FILE` exits 0 after it ran, and so does the night; its failure still fails, and a skip before it
    still ran no test."""
    (tmp_path / "tiny-lm").mkdir()
    out, result = _registered(tmp_path, DIRECT_TESTCASE.format(tokens=8, call=call))
    assert out.returncode == 0 and result["ok"] is True and "generated 8" in out.stdout, out.stdout + out.stderr
    out, result = _registered(tmp_path, DIRECT_TESTCASE.format(tokens=9, call=call))
    assert out.returncode == 1 and result["error"].startswith("AssertionError: 8 != 9"), result
    (tmp_path / "tiny-lm").rmdir()
    out, result = _registered(tmp_path, DIRECT_TESTCASE.format(tokens=8, call=call))
    assert out.returncode == 1 and result["error"].startswith("test_x.py: ran no test: it exited 0 at line"), result
    assert "ran TestServer (line" in result["error"], result


FLAKY_FIXTURE = """
    import os, sys, unittest

    def server_up():
        if not os.path.exists("{flag}"):
            open("{flag}", "w").close()
            raise RuntimeError("server did not come up")  # the first try's hiccup
        {again}

    {fixture}

    class TestServer(unittest.TestCase):
        {class_fixture}

        def test_generate(self):
            print("generated")

    class TestOther(unittest.TestCase):
        def test_other(self):
            pass

    if __name__ == "__main__":
        for attempt in range(2):
            prog = unittest.main(exit=False, {argv})
            if prog.result.wasSuccessful():
                break
"""


@pytest.mark.parametrize("fixture, class_fixture", [
    ("", "@classmethod\n        def setUpClass(cls):\n            server_up()"),
    ("def setUpModule():\n        server_up()", "pass"),
])
def test_a_flaky_class_or_module_fixture_that_a_rerun_fixes_passes_and_one_that_stays_broken_fails(
        tmp_path, fixture, class_fixture):
    """`for attempt in range(2): prog = unittest.main(exit=False); if prog.result.wasSuccessful(): ...` after a
    `setUpClass` (or `setUpModule`) that failed once: its error ("setUpClass (__main__.TestServer)") is no test a
    rerun passes, yet the rerun ran the class's tests and they passed, as `python3 FILE` says."""
    def body(again="pass", argv="argv=sys.argv"):
        return FLAKY_FIXTURE.format(flag="first_try_done", again=again, fixture=fixture, class_fixture=class_fixture,
                                    argv=argv)
    out, result = _registered(tmp_path, body())
    assert "errors=1" in out.stderr and "generated" in out.stdout, out.stderr
    assert out.returncode == 0 and result["ok"] is True, out.stdout + out.stderr
    (tmp_path / "first_try_done").unlink()
    out, result = _registered(tmp_path, body(again='raise RuntimeError("still down")'))
    assert out.returncode == 1 and "its unittest run reported FAILED (errors=1)" in result["error"], result
    if fixture:
        return  # a module's fixture runs for every test of the module
    (tmp_path / "first_try_done").unlink()
    # a rerun of another class's tests that passes does not clear TestServer's setUpClass error
    out, result = _registered(tmp_path, body(argv='argv=[sys.argv[0]] + (["TestOther"] if attempt else [])'))
    assert out.returncode == 1 and "its unittest run reported FAILED (errors=1)" in result["error"], result


SCRIPT_CHECKS = """
    import os, sys

    def test_close(a, b, tol=1e-3):  # a helper named like a test, which the script never calls
        assert abs(a - b) < tol

    losses = [3.0, 2.0, {last}]
    {check}
    print("script checked")
"""


@pytest.mark.parametrize("check", [
    "for prev, cur in zip(losses, losses[1:]):\n        assert cur < prev",
    "if losses[-1] >= losses[0]:\n        sys.exit(f'loss rose: {losses}')",
    "with open(os.devnull) as fh:\n        if losses[-1] >= losses[0]:\n            raise RuntimeError(f'loss rose: {losses}')",
])
@pytest.mark.parametrize("block", ["", '\n    if __name__ == "__main__":\n        pass\n'])
def test_a_script_test_whose_module_level_checks_is_judged_by_its_exit_whatever_test_helper_it_defines(
        tmp_path, check, block):
    """A script-style file whose module level checks (an assert in a loop, `sys.exit("loss rose")`, a raise) and
    that also defines an unused `def test_close(...)` helper: `python3 FILE` runs the checks and exits by them,
    and so does the night (it did fail 'test_close() never ran'); a failing check fails it."""
    out, result = _registered(tmp_path, SCRIPT_CHECKS.format(last=1.0, check=check) + block)
    assert out.returncode == 0 and result["ok"] is True and "script checked" in out.stdout, out.stdout + out.stderr
    out, result = _registered(tmp_path, SCRIPT_CHECKS.format(last=4.0, check=check) + block)
    assert out.returncode == 1 and result["ok"] is False, out.stdout + out.stderr
    assert "ran no test" not in result["error"] and "script checked" not in out.stdout, result


def test_a_module_level_exit_0_beside_test_functions_is_a_skip_not_a_check(tmp_path):
    """`if not os.path.exists(MODEL): sys.exit(0)` at module level checks nothing: test functions that never ran
    still ran no test."""
    out, result = _registered(tmp_path, """
    import os, sys

    if not os.path.exists("tiny-lm"):
        sys.exit(0)

    def test_train():
        assert False
    """)
    assert out.returncode == 1 and result["error"].startswith("test_x.py: ran no test: it exited 0 at line"), result


def test_a_test_named_helper_the_main_block_calls_before_its_skip_is_not_the_test(tmp_path):
    """`def test_gpus_available(): return False` and `if not test_gpus_available(): sys.exit(0)` before `prepare();
    execute()`: the helper ran, execute() never did; a skip is not a pass."""
    body = """
    import os, sys

    def test_gpus_available():
        return os.path.exists("gpus")

    def prepare():
        pass

    def execute():
        print("training")

    if __name__ == "__main__":
        if not test_gpus_available():
            print("not enough GPUs, skipping")
            sys.exit(0)
        prepare()
        execute()
    """
    out, result = _registered(tmp_path, body)
    assert "skipping" in out.stdout and out.returncode == 1 and result["ok"] is False, out.stdout + out.stderr
    assert result["error"] == (
        f"test_x.py: ran no test: it exited 0 at line {_line(tmp_path, 'sys.exit(0)')} (`sys.exit(0)`), before its "
        f'`if __name__ == "__main__":` block (line {_line(tmp_path, "__main__")}) ran execute() (line '
        f"{_line(tmp_path, 'def execute')}): {SKIP}"), result
    (tmp_path / "gpus").touch()
    out, result = _registered(tmp_path, body)
    assert out.returncode == 0 and result["ok"] is True and "training" in out.stdout, out.stdout + out.stderr


SKIP = ("a skip is not a pass, since a nightly that verified nothing is not green; let the test fail when what it needs "
        "is missing, or disable its registration")


def test_a_process_the_import_ran_does_not_make_a_skip_of_the_main_block_a_pass(tmp_path):
    """GPU libraries run processes as they are imported (`ctypes.util.find_library("cuda")` runs ldconfig): a
    skip with exit 0 before execute() still ran no test; only a process the block itself ran may have run it."""
    body = """
    import os, subprocess, sys

    subprocess.run([sys.executable, "-c", "sum(range(3 * 10**6))"], check=True)  # as find_library's ldconfig

    def prepare():
        pass

    def execute():
        print("training")

    if __name__ == "__main__":
        if not os.path.exists("tiny-lm"):
            print("model missing, skipping")
            sys.exit(0)
        prepare()
        execute()
    """
    out, result = _registered(tmp_path, body)
    assert "skipping" in out.stdout and out.returncode == 1 and result["ok"] is False, out.stdout + out.stderr
    assert result["error"].startswith(f"test_x.py: ran no test: it exited 0 at line {_line(tmp_path, 'sys.exit(0)')}"), result
    (tmp_path / "tiny-lm").mkdir()
    out, result = _registered(tmp_path, body)
    assert out.returncode == 0 and result["ok"] is True and "training" in out.stdout, out.stdout + out.stderr


@pytest.mark.parametrize("guard", [
    'if __name__ == "__main__" and os.environ.get("SKIP_E2E") != "1":',
    'if __name__ in ("__main__",):',
    'if sys.version_info >= (3, 8):\n    if __name__ == "__main__":',
])
def test_a_main_guard_in_another_form_runs_as_python3_file_runs_it(tmp_path, guard):
    # python3 FILE runs these blocks; the wrapper took the file for one without a block (a false red), and a
    # failing main() under such a guard never ran (a false green)
    block = guard + "\n" + " " * (4 * guard.count(":")) + "{call}\n"
    out, result = _wrap(tmp_path, "import os, sys, unittest\n\nclass TestA(unittest.TestCase):\n"
                        "    def test_a(self):\n        print('RAN a')\n\n" + block.format(call="unittest.main()"))
    assert out.returncode == 0 and result["ok"] is True, out.stdout + out.stderr
    assert "RAN a" in out.stdout and "as __main__" in out.stdout
    out, result = _wrap(tmp_path, "import os, sys\n\ndef main():\n    print('RAN main')\n    sys.exit(1)\n\n"
                        + block.format(call="main()"))
    assert out.returncode == 1 and result["ok"] is False and result["error"] == "SystemExit(1)", out.stdout + out.stderr
    assert "RAN main" in out.stdout


def test_a_main_block_that_picks_a_test_variant_or_execute_passes_whichever_ran(tmp_path):
    """`if E2E_MODE == "smoke": test_smoke() else: execute()`: the block runs a test either way, and python3 FILE
    exits 0; a helper only in an `if` condition (the test above) is still no test."""
    body = """
    import os

    def prepare():
        pass

    def test_smoke():
        print("RAN smoke")

    def execute():
        print("RAN full")

    if __name__ == "__main__":
        prepare()
        if os.environ.get("E2E_MODE", "smoke") == "smoke":
            test_smoke()
        else:
            execute()
    """
    out, result = _registered(tmp_path, body)
    assert out.returncode == 0 and result["ok"] is True and "RAN smoke" in out.stdout, out.stdout + out.stderr
    out, result = _registered(tmp_path, body.replace('"smoke")', '"full")'))
    assert out.returncode == 0 and result["ok"] is True and "RAN full" in out.stdout, out.stdout + out.stderr
    out, result = _registered(tmp_path, body.replace("        prepare()\n", "        prepare()\n        sys.exit(0)\n")
                              .replace("import os", "import os, sys"))
    assert out.returncode == 1 and "ran no test" in result["error"] and "test_smoke() (line" in result["error"], result


@pytest.mark.parametrize("call", ["main()", "if True:\n    main()", "for _ in range(1):\n    main()",
                                  "import asyncio\nasyncio.run(amain())"])
def test_a_script_that_checks_in_its_own_function_it_calls_at_module_level_is_judged_by_its_exit(tmp_path, call):
    """`def main(): ... raise SystemExit("loss did not drop")` called bare at module level, beside an unused
    `def test_close(a, b)` helper: python3 FILE runs main() and exits by it (it did fail 'test_close() never ran')."""
    body = textwrap.dedent("""\
        def test_close(a, b, tol=1e-3):
            return abs(a - b) < tol

        def main():
            losses = [3.0, 2.0, {last}]
            print("RAN main")
            if losses[-1] >= losses[0]:
                raise SystemExit("loss did not drop")

        async def amain():
            main()

    """) + call + "\n"
    out, result = _wrap(tmp_path, body.format(last=1.0))
    assert out.returncode == 0 and result["ok"] is True and "RAN main" in out.stdout, out.stdout + out.stderr
    out, result = _wrap(tmp_path, body.format(last=4.0))
    assert out.returncode == 1 and result["error"] == "SystemExit('loss did not drop')", result


OS_EXIT_AT_THE_END = """
    import multiprocessing, os, sys

    def prepare():
        pass

    def execute():
        print("RAN execute")

    def work():
        sys.exit(5)  # a forked worker ends in os._exit(5): the worker's, never the attempt's result

    if __name__ == "__main__":
        prepare()
        {run}
        sys.stdout.flush()
        os._exit({code})
"""


WORKER = """worker = multiprocessing.get_context("fork").Process(target=work)
        worker.start()
        worker.join()
        assert worker.exitcode == 5 and not os.path.exists("r.json"), "a forked child wrote the result"
        execute()"""


@pytest.mark.parametrize("run, code, rc, error", [
    ("execute()", 0, 0, ""),
    (WORKER, 0, 0, ""),
    ("execute()", 3, 3, "os._exit(3)"),
    ('if os.path.exists("model"):\n            execute()', 0, 1,
     "test_x.py: ran no test: it exited 0 at line 18 (`os._exit(0)`), before its "
                   '`if __name__ == "__main__":` block (line 13) ran execute() (line 7): a skip is not a pass'),
])
def test_os_exit_after_the_test_in_the_main_block_writes_the_result_as_a_normal_end(tmp_path, run, code, rc, error):
    """`execute(); sys.stdout.flush(); os._exit(0)` skips a hanging NCCL/Ray teardown: python3 FILE exits 0, and the
    night failed it 'exit code 0 without the wrapper's completion record'. The record is now written first, judged as
    a normal end with that status (0 passes only if the test ran); forked workers' os._exit is left alone."""
    out, result = _wrap(tmp_path, OS_EXIT_AT_THE_END.format(run=run, code=code))
    assert out.returncode == rc and result["exit_code"] == rc and result["finished"] is True, out.stdout + out.stderr
    assert result["ok"] is (rc == 0) and result["error"].startswith(error), result
    assert "the test called os._exit" in out.stdout


def _chain(terms: int) -> str:
    """``"x" + "x" + ...``: a valid expression whose tree is ``terms`` levels deep (a long generated constant)."""
    return " + ".join(['"x"'] * terms)


LONG_CHAIN = """\
P = {chain}

def prepare():
    open("prepared", "w").close()

def execute():
    print(len(P + {chain}))

if __name__ == "__main__":
    prepare()
    {run}
"""


@pytest.mark.parametrize("run", ["execute()", "assert len({chain}) == 1500, 'chain'\n    execute()"])
def test_a_file_whose_expressions_nest_deeper_than_pythons_recursion_limit_runs_as_python3_runs_it(tmp_path, run):
    """A chain of 1,500 `+` (past about 1,000 terms) is a file `python3 FILE` runs and passes; the wrapper's own walks
    of its tree (`ast.fix_missing_locations`, recursive once per level) died of RecursionError: a false red every
    night. It now runs as __main__ with prepare() skipped, and the no-test checks still hold for such a file."""
    body = LONG_CHAIN.format(chain=_chain(1500), run=run.format(chain=_chain(1500)))
    (tmp_path / "test_long.py").write_text(body)
    plain = subprocess.run([sys.executable, "test_long.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert plain.returncode == 0 and plain.stdout.split() == ["3000"], plain.stderr[-2000:]
    (tmp_path / "prepared").unlink()
    out, result = _wrap(tmp_path, body, name="test_long.py")
    assert out.returncode == 0 and result["ok"] is True and result["finished"] is True, out.stderr[-2000:]
    assert "3000" in out.stdout.split() and "1 prepare() call(s) of its __main__ block skipped" in out.stdout
    assert not (tmp_path / "prepared").exists()
    # the checks that it ran a test hold for it too: a block that exits 0 before execute(), one that only prepares
    out, result = _wrap(tmp_path, body.replace("    prepare()\n", "    prepare()\n    raise SystemExit(0)\n"),
                        name="test_long.py")
    assert out.returncode == 1 and result["error"].startswith(
        "test_long.py: ran no test: it exited 0 at line 11 (`raise SystemExit(0)`), before its "
        '`if __name__ == "__main__":` block (line 9) ran execute() (line 6): a skip is not a pass'), result
    out, result = _wrap(tmp_path, body.split("    prepare()\n")[0] + "    prepare()\n", name="test_long.py")
    assert out.returncode == 1 and "only calls prepare() (1 call)" in result["error"], result


def test_a_file_too_deep_for_pythons_own_parser_fails_clearly_as_python3_refuses_it(tmp_path):
    """3,000 terms: `python3 FILE` itself refuses the file on 3.11 (RecursionError during compilation); the wrapper
    fails it too, saying why and what to do, never a pass."""
    body = LONG_CHAIN.format(chain=_chain(3000), run="execute()")
    (tmp_path / "test_long.py").write_text(body)
    plain = subprocess.run([sys.executable, "test_long.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    if plain.returncode == 0:
        pytest.skip(f"this Python ({sys.version.split()[0]}) compiles a chain of 3,000 terms")
    assert "RecursionError" in plain.stderr, plain.stderr[-2000:]
    out, result = _wrap(tmp_path, body, name="test_long.py")
    assert out.returncode == 1 and result["ok"] is False and result["exit_code"] == 1, out.stderr[-2000:]
    assert result["error"].startswith("RecursionError: test_long.py: Python cannot compile it"), result
    assert "nested too deep" in result["error"] and "split" in result["error"], result
