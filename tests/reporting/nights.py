"""A real-shaped night of the example (examples/minirl) for the report tests.

The tests are the example's real catalog; the summaries have the fields ``night_summary``
(pipelines/execute.py) writes (``est_time`` added: what the report's est_time changes read), the attempts the fields the local launcher sets, and history is made from them with the
real ``sample_from_attempt``. Tonight (on one virtual 8-GPU node, timeout floor 60 s):
test_sft_math fails (MINIRL_FAIL), test_lora_math hangs until its timeout (MINIRL_HANG), and
test_grpo_math fails once then passes on retry. Five earlier nights ran the same tests 25 %
faster on the previous image, and last night test_backend_matrix failed.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from pipelines.core.catalog import load_catalog
from pipelines.core.history import sample_from_attempt
from pipelines.core.model import Attempt, Estimate, Sample, Test
from pipelines.core.specs import load_specs

NODE = "local-h200-0"
PREFIX = "tests/e2e/"
SFT, LORA, GRPO = "megatron/test_sft_math.py", "lora/test_lora_math.py", "megatron/test_grpo_math.py"
BACKEND, SGLANG = "test_backend_matrix.py", "sglang/test_sglang_rollout.py"
ROCM = "ckpt/test_ckpt_resume.py::rocm-stage-c-4-gpu-mi300"
SKIPPED = "megatron/test_multinode_sft.py"
#: (test, outcome, start s, elapsed s, GPU slots), in finishing order
TONIGHT = [
    (GRPO, "failed", 0, 5, (0, 1, 2, 3)),
    (BACKEND, "passed", 0, 24, (4, 5, 6, 7)),
    ("fsdp/test_fsdp_sft_chat.py", "passed", 24, 7, (6, 7)),
    (GRPO, "passed", 5, 28, (0, 1, 2, 3)),
    (SFT, "failed", 33, 2, (0, 1, 2, 3)),
    ("ckpt/test_ckpt_resume.py::cuda-stage-c-4-gpu-h200", "passed", 35, 14, (0, 1, 2, 3)),
    ("fsdp/test_fsdp_6gpu_chat.py", "passed", 49, 11, (0, 1, 2, 3, 6, 7)),
    (LORA, "timed_out", 24, 60, (4, 5)),
    ("megatron/test_dp8_chat.py", "passed", 84, 3, tuple(range(8))),
    (SGLANG, "passed", 87, 41, tuple(range(8))),
]
FLOOR = 60
GPU_SECONDS = sum(e * len(s) for _, _, _, e, s in TONIGHT)  # 844
MAKESPAN = 128.0
IMAGE_BEFORE, IMAGE_NOW = "sha256:1111aaaa", "sha256:2222bbbb"
#: what calibration proposes from this history (the report shows proposals; it does not make them)
ESTIMATES = [
    Estimate(PREFIX + SGLANG, "h200", 12, 60, 6, "bucket125: max 41 s x 1.25 = 52 s, rounded up to 60 s from 6 passed"),
    Estimate(PREFIX + BACKEND, "h200", 25, 30, 5, "bucket125: max 24 s x 1.25 = 30 s, rounded up to 30 s from 5 passed"),
]


@dataclass(frozen=True)
class ExampleNight:
    summary: dict
    previous: list[dict]
    samples: list[Sample]
    tests: list[Test]
    log_tails: dict[str, str]
    home: Path


def example_tests() -> list[Test]:
    specs = load_specs()
    path, spec = specs.locate_repo("minirl")
    return list(load_catalog(path, spec=spec, specs=specs).tests)


def tid(short: str) -> str:
    return PREFIX + short


def _attempt(night: str, start: datetime, test: str, outcome: str, at: float, elapsed: float,
             slots: tuple[int, ...], number: int, est: int, home: Path) -> Attempt:
    log = home / "logs" / night / f"{test.replace('/', '_')}.attempt{number}.log"
    reason = {"failed": "exit code 1", "timed_out": f"killed after the {FLOOR}s timeout"}.get(outcome, "")
    return Attempt(test_id=tid(test), outcome=outcome, elapsed_s=float(elapsed),  # type: ignore[arg-type]
                   started_at=(start + timedelta(seconds=at)).isoformat(timespec="seconds"), attempt=number,
                   node=NODE, gpu_slots=slots, exit_code={"passed": 0, "failed": 1, "timed_out": -15}[outcome],
                   reason=reason, log_path=str(log), timeout_s=max(FLOOR, int(est * 1.25)))


def _summary(night: str, attempts: list[Attempt], tests: dict[str, Test], image: str, est: dict[str, int],
             selected: list[str]) -> dict:
    return {
        "night": night, "run_id": f"run-{night}", "repo": "minirl", "deployment": "local", "cadence": "nightly",
        "selected": selected, "skipped": [tid(SKIPPED)], "skip_reasons": {tid(SKIPPED): "disabled"},
        "unplanned": [tid(ROCM)], "attempts": [dataclasses.asdict(a) for a in attempts],
        "predicted_makespan_s": 120.0, "lower_bound_s": 104.0, "actual_makespan_s": MAKESPAN,
        "predicted_median_s": 118.0, "predicted_p90_s": 131.0,
        "notes": ["1 test skipped (disabled)"], "interrupted": False, "tags": {},
        "infra": {"h200": {"image": "local python environment", "image_digest": image, "driver": "550.54.15",
                           "spec": "sha256:d52e60f2e650", "notes": ""}},
        "est_time": est,
    }


def example_night(home: Path, last_night_backend: str = "failed") -> ExampleNight:
    tests = example_tests()
    by_id = {t.id: t for t in tests}
    # the nightly selection of the example as it was when this night was recorded (new tests may be added since)
    selected = [tid(t) for t in dict.fromkeys(t for t, *_ in TONIGHT)] + [tid(ROCM)]
    est = {i: by_id[i].est_time for i in selected}
    summaries, samples = [], []
    for n in range(6):  # five earlier nights, then tonight
        night = f"2026-11-{n + 1:02d}T150000Z"
        start = datetime(2026, 11, n + 1, 15, 0, tzinfo=UTC)
        tonight = n == 5
        attempts, seen = [], {}
        for test, outcome, at, elapsed, slots in TONIGHT:
            if not tonight:
                if test == GRPO and outcome == "failed":
                    continue
                if test in (SFT, LORA):
                    outcome, elapsed = "passed", {SFT: 8, LORA: 9}[test]
                if test == BACKEND and n == 4:
                    outcome = last_night_backend
                elapsed = elapsed / 1.25
            seen[test] = seen.get(test, 0) + 1
            attempts.append(_attempt(night, start, test, outcome, at, elapsed, slots, seen[test], est[tid(test)], home))
        night_est = est if tonight else {**est, tid(GRPO): 40}
        image = IMAGE_NOW if tonight else IMAGE_BEFORE
        summaries.append(_summary(night, attempts, by_id, image, night_est, selected))
        samples += [sample_from_attempt(a, by_id[a.test_id], f"run-{night}", image)
                    for a in attempts]
    tails = {}
    for a in summaries[-1]["attempts"]:
        if a["outcome"] != "passed":
            text = f"# nightly: {a['test_id']} attempt {a['attempt']} on {NODE}\nstep 1 loss 2.31\n"
            stem = Path(a["test_id"]).stem
            text += {"failed": f"[minirl] {stem}: failing on purpose because MINIRL_FAIL names it\n",
                     "timed_out": f"[minirl] {stem}: hanging on purpose because MINIRL_HANG names it (pid 4242)\n"}[a["outcome"]]
            Path(a["log_path"]).parent.mkdir(parents=True, exist_ok=True)
            Path(a["log_path"]).write_text(text)
            tails[a["log_path"]] = text
    return ExampleNight(summaries[-1], summaries[:-1], samples, tests, tails, home)


def write_home(night: ExampleNight) -> Path:
    """Lay the nights out as `nightly run` leaves them: summaries in nights/, samples in history.sqlite."""
    import json

    from pipelines.core.history import FileHistoryStore

    for s in [*night.previous, night.summary]:
        path = night.home / "nights" / f"{s['night']}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(s, indent=1))
    (night.home / "nights" / "latest.json").write_text(json.dumps(night.summary, indent=1))
    FileHistoryStore(night.home / "history.sqlite").append(night.samples)
    return night.home


def as_unconfigured_before_digest(home: Path, checkout: Path, quarantined: str | None = None) -> Path:
    """The nights under ``home`` rewritten as the version before ``specs.unconfigured_name`` left them for a
    checkout nobody configured: recorded under its folder name alone, with its path; ``quarantined``: a
    test alice quarantined by hand then, in ``quarantine/<folder>.json``. Returns that document's path."""
    import json

    for path in (home / "nights").glob("*.json"):
        record = json.loads(path.read_text())
        path.write_text(json.dumps({**record, "repo": checkout.name, "repo_path": str(checkout)}, indent=1))
    doc = home / "quarantine" / f"{checkout.name}.json"
    if quarantined:
        doc.parent.mkdir(parents=True, exist_ok=True)
        doc.write_text(json.dumps({"version": 1, "actions": [{"test": quarantined, "action": "add", "by": "alice",
                                                              "why": "issue 9", "at": "2026-11-06T09:00:00+00:00"}]}))
    return doc
