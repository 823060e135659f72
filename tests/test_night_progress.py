"""The night's progress lines (`nightly run`, the Dagster run's log) count tests, and say which line is a retry."""

from __future__ import annotations

from datetime import UTC, datetime

from pipelines.core.model import Attempt
from pipelines.core.runset import RunSelection
from pipelines.execute import Finished, run_tests
from pipelines.night import Night, NightSettings
from tests.support.assets import two_node_example

TEST_FILE = '''from minirl.ci_register import register_cuda_ci

register_cuda_ci(est_time=1, suite="stage-c-8-gpu-h200", labels=["fnode"])
'''


class BrokenNode1:
    """A stand-in launcher for two local nodes: every test placed on node 1 fails (CUDA error 802)."""

    name = "stand-in"

    def launch(self, request, on_log=None) -> Attempt:
        node = f"local-h200-{request.node}"
        if node in request.avoid_nodes:
            node = "local-h200-0"
        failed = node == "local-h200-1"
        return Attempt(request.test.id, "failed" if failed else "passed", 0.1, datetime.now(UTC).isoformat(),
                       request.attempt, node=node, gpu_slots=request.gpu_slots, exit_code=int(failed),
                       timeout_s=request.timeout_s)


def test_retries_on_another_node_are_marked_and_never_count_past_the_total(tmp_path):
    repo, assets = two_node_example(tmp_path, TEST_FILE)
    night = Night(NightSettings(home=tmp_path / "home", assets_dir=assets, repo=str(repo), deployment="two"))
    selection = RunSelection(labels=("fnode",))
    lines: list[str] = []
    events = list(run_tests(night, night.runset(None, selection), selection, launcher=BrokenNode1(),
                            say=lines.append))
    progress = [line for line in lines if line.startswith("[")]
    retries = [line for line in progress if " retry of " in line]
    failed = [line for line in progress if "  FAILED  " in line]
    assert len(failed) >= 2 and len(retries) == len(failed) and len(progress) == 6 + len(retries), progress
    assert all(line.split("]")[0] in {f"[{k}/6" for k in range(1, 7)} for line in progress), progress
    assert progress[-1].startswith("[6/6] ")
    for line in retries:
        assert " from local-h200-1 (attempt 2)  PASSED " in line and line.endswith("node=local-h200-0"), line
    finished = [e for e in events if isinstance(e, Finished)]
    assert [e.done for e in finished][-1] == 6 and all(e.total == 6 for e in finished)


def test_a_run_dagster_interrupts_while_it_builds_inputs_is_recorded_as_interrupted(tmp_path, monkeypatch):
    import json

    import pytest
    from dagster._core.errors import DagsterExecutionInterruptedError

    needs_model = TEST_FILE + "\ndef prepare():\n    exec_command('hf download minirl/tiny-lm --local-dir /root/models/tiny-lm')\n"
    repo, assets = two_node_example(tmp_path, needs_model)
    night = Night(NightSettings(home=tmp_path / "home", assets_dir=assets, repo=str(repo), deployment="two"))
    selection = RunSelection(labels=("fnode",))

    def terminated(req):  # Dagster's terminate (or SIGTERM) reaching the step while a conversion runs
        raise DagsterExecutionInterruptedError()

    monkeypatch.setattr(night, "build", terminated)
    with pytest.raises(DagsterExecutionInterruptedError):
        list(run_tests(night, night.runset(None, selection), selection, launcher=BrokenNode1(), say=lambda _: None))
    record = json.loads(night.state.get(f"runs/{night.run_id}.json"))
    assert record["status"] == "interrupted", record["status"]
