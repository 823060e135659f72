"""The wrapper runs a plain test script (no prepare()/execute(), e.g. unittest style) as its runner would."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

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
