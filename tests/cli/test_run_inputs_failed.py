"""A night one of whose tests cannot get its input (a model the hub does not have) beside a test that runs:
what `nightly run` says as it goes and at its end, what its record keeps and what `nightly report` shows."""

from __future__ import annotations

import contextlib
import io
import json
import re

import pytest

from pipelines.cli import main
from tests.support.assets import copied_example

pytestmark = pytest.mark.slow  # a real (tiny) night

BLOCKED, PLAIN = "tests/e2e/replan/test_needs_model.py", "tests/e2e/replan/test_plain.py"
NEEDS_MODEL = '''from minirl.ci_register import register_cuda_ci
from minirl.testing import exec_command

register_cuda_ci(est_time=2, suite="stage-b-2-gpu-h200", labels=["replan"])


def prepare():
    exec_command("hf download minirl/nosuch-model --local-dir /root/models/nosuch-model")


def execute():
    print("ran")


if __name__ == "__main__":
    prepare()
    execute()
'''
RUNS = '''from minirl.ci_register import register_cuda_ci

register_cuda_ci(est_time=2, suite="stage-b-2-gpu-h200", labels=["replan"])

if __name__ == "__main__":
    print("ran")
'''
FIGURE = r"predicted median makespan [\d.]+s \(p90 [\d.]+s\)"


@pytest.fixture(scope="module")
def night(tmp_path_factory):
    """(home, assets, what `nightly run --labels replan` printed, its exit status, the night's record)."""
    tmp = tmp_path_factory.mktemp("inputs-failed")
    repo, assets = copied_example(tmp)
    (repo / "tests" / "e2e" / "replan").mkdir()
    (repo / "tests" / "e2e" / "replan" / "test_needs_model.py").write_text(NEEDS_MODEL)
    (repo / "tests" / "e2e" / "replan" / "test_plain.py").write_text(RUNS)
    home, out = tmp / "home", io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(out):
        mp.setenv("NIGHTLY_ASSETS_DIR", str(assets))
        code = main(["run", "--home", str(home), "--labels", "replan"])
    [record] = [json.loads(p.read_text()) for p in (home / "runs").glob("*.json")]
    return home, assets, out.getvalue(), code, record


def _report(night, capsys, monkeypatch) -> dict:
    home, assets, *_ = night
    monkeypatch.setenv("NIGHTLY_ASSETS_DIR", str(assets))
    capsys.readouterr()
    assert main(["report", "--home", str(home), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_a_test_blocked_by_its_input_is_counted_and_the_changed_prediction_is_said_where_it_changes(
        night, capsys, monkeypatch):
    """The start line said 2.1s, the done line, the record and the report 1.4s with no word why (the night
    re-planned without the blocked test), and the progress said [1/1] of the 2 tests selected."""
    _, _, out, code, record = night
    assert code == 1, out[-3000:]
    lines = out.split("\nnightly: running")[1].splitlines()
    progress = [line for line in lines if re.match(r"nightly: \[\d+/\d+\] tests/", line)]
    assert progress[0].startswith(f"nightly: [1/2] {BLOCKED}  INFRA_ERROR  not launched: input not available: "
                                  "model nosuch-model"), progress
    assert progress[1].startswith(f"nightly: [2/2] {PLAIN}  PASSED"), progress
    start = re.search(FIGURE, next(line for line in lines if "test(s) of cadence" in line)).group()
    new = f"predicted median makespan {record['predicted_median_s']:.1f}s (p90 {record['predicted_p90_s']:.1f}s)"
    was = record["replanned"]
    assert was["without"] == [BLOCKED]
    assert start == f"predicted median makespan {was['predicted_median_s']:.1f}s (p90 {was['predicted_p90_s']:.1f}s)"
    because = f" (re-planned without the 1 test(s) whose inputs failed; {start} at the start)"
    said = next(line for line in lines if line.startswith("nightly: re-planned"))
    assert said.startswith(f"nightly: re-planned without the 1 test(s) whose inputs failed: {new} (lower bound ")
    assert said.endswith(f", was {start} at the start; the night's record and report judge the new figure")
    assert next(line for line in lines if line.startswith("nightly: done: ")).startswith(
        f"nightly: done: {new}{because}, actual ")
    assert any(line.startswith(f"{new}{because}, actual ") for line in lines), lines  # the closing line
    data = _report(night, capsys, monkeypatch)
    assert dict(data["makespan"])["predicted median"] == record["predicted_median_s"]
    assert any(n.startswith(f"re-planned without the 1 test(s) whose inputs failed ({BLOCKED}): the predicted "
                            "makespan here is the new plan's") for n in data["notes"]), data["notes"]


def test_the_gantt_starts_at_the_first_launch_not_at_an_input_failure_stamped_before_it(night, capsys, monkeypatch):
    """The blocked test's attempt was stamped to the second, before the test that ran: the Gantt took it as time
    zero, so the test that ran started at 0.603 s and the bars spanned 0.84 s of a 0.324 s night."""
    *_, record = night
    blocked = next(a for a in record["attempts"] if a["test_id"] == BLOCKED)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", blocked["started_at"]), blocked["started_at"]
    ran = next(a for a in record["attempts"] if a["test_id"] == PLAIN)
    bars = {b["test_id"]: b for b in _report(night, capsys, monkeypatch)["gantt"]}
    assert bars[PLAIN]["start_s"] == 0.0 and bars[BLOCKED]["start_s"] == 0.0, bars
    assert max(b["start_s"] + b["elapsed_s"] for b in bars.values()) == ran["elapsed_s"]


CONVERTS = '''from minirl.ci_register import register_cuda_ci
from minirl.testing import convert_checkpoint, exec_command

register_cuda_ci(est_time=2, suite="stage-b-2-gpu-h200", labels=["hostile"])


def prepare():
    exec_command("hf download minirl/tiny-lm --local-dir /root/models/tiny-lm")
    convert_checkpoint(model_name="tiny-lm", megatron_model_type="tiny", num_gpus_per_node=2, dir_dst="/root/models")


if __name__ == "__main__":
    prepare()
    print("ran")
'''


def test_a_converters_control_characters_are_shown_not_sent_to_the_terminal_as_the_night_goes(tmp_path, capsys):
    """A failing converter's output (a retitle, a colour, a NUL) reached the terminal raw through the
    night's progress lines: the input's FAILED line and the blocked test's INFRA_ERROR line."""
    repo, assets = copied_example(tmp_path)
    (repo / "tests" / "e2e" / "hostile").mkdir()
    (repo / "tests" / "e2e" / "hostile" / "test_converts.py").write_text(CONVERTS)
    (repo / "tools" / "convert_hf_to_torch_dist.py").write_text(
        'import sys\nprint("\\x1b]0;PWNED\\x07\\x1b[31mconverter exploded\\x1b[0m\\x00")\nsys.exit(1)\n')
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NIGHTLY_ASSETS_DIR", str(assets))
        assert main(["run", "--home", str(tmp_path / "home"), "--labels", "hostile"]) != 0
    out, err = capsys.readouterr()
    said = out + err
    assert "converter exploded" in said
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f]", said), [line for line in said.splitlines()
                                                              if re.search(r"[\x00-\x08\x0b-\x1f\x7f]", line)]
    assert "\\x1b[31mconverter exploded" in said
