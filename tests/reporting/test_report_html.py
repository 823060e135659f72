"""The HTML page: every section present, self-contained, test data escaped, logs linked."""

from __future__ import annotations

import html
import re

import pytest

from pipelines.core.report import build_report
from pipelines.reporting.html import render_html
from tests.reporting.nights import ESTIMATES, FLOOR, GRPO, LORA, SFT, example_night, tid

SECTIONS = ("verdict", "outcomes", "failures", "infra", "flaky", "changes", "timing", "gantt", "durations", "drift",
            "trends", "coverage", "tests", "notes")


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> str:
    night = example_night(tmp_path_factory.mktemp("home"))
    data = build_report(night.summary, night.previous, night.samples, night.tests, ESTIMATES,
                        log_tails=night.log_tails, uncovered=["test_backend_matrix.py: megatron x lora"],
                        timeout_floor_s=FLOOR)
    return render_html(data)


def section(page: str, name: str) -> str:
    m = re.search(rf'<section id="{name}">(.*?)</section>', page, re.S)
    assert m, f"section {name} missing"
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", m.group(1))).split())


def test_every_section_is_on_the_page(page):
    for name in SECTIONS[1:]:
        assert section(page, name).strip()
    assert '<p id="verdict" class="verdict bad">FAILED: 2 test(s) failed</p>' in page


def test_the_page_is_self_contained(page):
    assert "<script" not in page and "<link" not in page and "<img" not in page
    assert not re.search(r'(src|href)="https?://', page)
    assert page.count("<svg") >= 3


def test_failures_show_classification_log_tail_and_a_file_link_to_the_full_log(page):
    text = section(page, "failures")
    assert f"{tid(SFT)} — test failure (exit 1) (new since last night)" in text
    assert f"{tid(LORA)} — hang: killed at its {FLOOR} s timeout" in text
    assert f"{tid(GRPO)} — flaky: failed on attempt 1, passed on attempt 2" in text
    assert "test_sft_math: failing on purpose because MINIRL_FAIL names it" in text
    links = re.findall(r'<a href="(file://[^"]+)">full log</a>', page)
    assert len(links) == 3 and all(link.endswith(".attempt1.log") for link in links)


def test_changes_and_timing_show_the_numbers(page):
    changes = section(page, "changes")
    assert "image_digest (h200) changed: sha256:1111aaaa → sha256:2222bbbb" in changes
    assert "passed 8 → 7; median duration tonight / last night x1.25" in changes
    timing = section(page, "timing")
    assert "actual makespan 128.0 s" in timing and "GPU-hours used 0.23" in timing and "GPU-hours not used by this night 0.05" in timing
    assert "its tests waited for GPUs other runs held not recorded" in timing
    # the plan's bound is from predicted durations, and said so: a night faster than predicted ends below it
    assert "plan's lower bound (from predicted durations) 104.0 s" in timing
    assert "lower bound from the night's actual durations 105.5 s" in timing


def test_a_failure_from_an_earlier_night_not_run_tonight_is_listed_as_such():
    def night(n, outcomes):
        return {"night": f"n{n}", "run_id": f"r{n}", "cadence": "nightly", "selected": list(outcomes),
                "attempts": [{"test_id": t, "outcome": o, "elapsed_s": 5.0, "started_at": f"2026-12-0{n}T15:00:00Z"}
                             for t, o in outcomes.items()]}

    a, b = "tests/e2e/test_a.py", "tests/e2e/test_b.py"
    page = render_html(build_report(night(2, {b: "passed"}), [night(1, {a: "failed", b: "passed"})]))
    assert f"still failing (not run tonight) {a}" in section(page, "changes")
    assert "Each test compared with the last night that ran it; the environment with night n1." in page


def test_the_gantt_legend_maps_every_key_to_a_short_name(page):
    legend = re.findall(r'<td class="key">(#\d+)</td><td title="([^"]+)">([^<]+)</td>', page)
    assert [k for k, _, _ in legend] == [f"#{i}" for i in range(1, 10)]
    assert ("#1", tid(GRPO), "grpo_math") == legend[0]


def test_test_names_are_escaped_not_interpreted():
    summary = {"night": "n", "selected": ["tests/<b>x</b>.py"],
               "attempts": [{"test_id": "tests/<b>x</b>.py", "outcome": "failed", "elapsed_s": 1.0,
                             "started_at": "2026-11-01T00:00:00+00:00", "node": "n0", "log_path": "/tmp/a b.log"}]}
    page = render_html(build_report(summary))
    assert "<b>x</b>" not in page and "tests/&lt;b&gt;x&lt;/b&gt;.py" in page
    assert 'href="file:///tmp/a%20b.log"' in page


def test_an_empty_night_says_what_was_checked():
    page = render_html(build_report({"night": "n", "attempts": []}))
    for phrase in ("no test failed, hung or passed only on retry", "no bad nodes", "no earlier night to compare with",
                   "every declared matrix cell ran", "no attempts with start times"):
        assert phrase in page


def test_the_asset_metadata_counts_and_explains_the_night(tmp_path):
    from pipelines.reporting.metadata import report_markdown, report_metadata

    night = example_night(tmp_path)
    data = build_report(night.summary, night.previous, night.samples, night.tests, ESTIMATES, timeout_floor_s=FLOOR)
    meta = report_metadata(data)
    assert {k: meta[k] for k in ("verdict", "outcome failed", "outcome timed_out", "flaky", "quarantined")} == \
        {"verdict": "FAILED: 2 test(s) failed", "outcome failed": 1, "outcome timed_out": 1, "flaky": 1, "quarantined": 0}
    assert meta["actual makespan s"] == 128.0
    # the capacity the night left is not called idle (another run may have used it); no wait was recorded
    assert "GPU-hours idle" not in meta and meta["GPU-hours not used by this night"] == 0.05
    assert "seconds waited for GPUs other runs held" not in meta
    text = report_markdown(data)
    assert f"- `{tid(LORA)}`: hang: killed at its {FLOOR} s timeout" in text
    assert f"| `{tid(GRPO)}` | flaky | flaky rules |" in text
    assert r"- image\_digest (h200): `sha256:1111aaaa` -> `sha256:2222bbbb`" in text  # Markdown for image_digest


def test_a_log_in_s3_is_the_command_that_prints_it_not_a_link_no_browser_opens():
    uri = "s3://b/team-a/nightly/state/logs/n/tests%2Fe2e%2Fx.py.attempt1.log"
    summary = {"night": "n", "selected": ["tests/e2e/x.py", "tests/e2e/y.py"],
               "attempts": [{"test_id": "tests/e2e/x.py", "outcome": "failed", "elapsed_s": 1.0, "node": "n0",
                             "started_at": "2026-11-01T00:00:00+00:00", "log_path": "/pod/x.log", "log_uri": uri},
                            {"test_id": "tests/e2e/y.py", "outcome": "infra_error", "elapsed_s": 1.0, "node": "n0",
                             "started_at": "2026-11-01T00:00:00+00:00", "log_path": "/pod/y.log",
                             "log_uri": uri.replace("x.py", "y.py")}]}
    page = render_html(build_report(summary))
    assert 'href="s3://' not in page
    assert f'full log: <code class="fetch" title="copy and run to print the log">aws s3 cp {uri} -</code>' in page
    assert f"· log: aws s3 cp {uri.replace('x.py', 'y.py')} -" in section(page, "infra")


@pytest.mark.parametrize("where", ["javascript:alert(document.cookie)//://", " JavaScript:alert(1)",
                                   "data:text/html,<script>alert(1)</script>", "vbscript:msgbox(1)", "http://[::1"])
def test_a_log_location_of_another_scheme_is_plain_text_never_a_link(where):
    summary = {"night": "n1", "run_id": "r1", "cadence": "nightly", "selected": ["tests/e2e/test_a.py"],
               "attempts": [{"test_id": "tests/e2e/test_a.py", "outcome": "failed", "elapsed_s": 3.0, "attempt": 1,
                             "started_at": "2026-12-01T15:00:00+00:00", "node": "n0", "gpu_slots": [0],
                             "exit_code": 1, "log_path": where}]}
    page = render_html(build_report(summary))
    failures = re.search(r'<section id="failures">(.*?)</section>', page, re.S).group(1)
    assert "<a " not in failures and not re.search(r'href="\s*(javascript|data|vbscript)', page, re.I)
    assert f"full log: {where.strip()}" in section(page, "failures")


def test_file_and_http_logs_are_links():
    def page(where):
        return render_html(build_report({"night": "n", "selected": ["t"], "attempts": [
            {"test_id": "t", "outcome": "failed", "elapsed_s": 1.0, "started_at": "", "log_path": where}]}))

    assert '<a href="file:///var/log/x.log">full log</a>' in page("/var/log/x.log")
    assert '<a href="https://ci.example/x.log">full log</a>' in page("https://ci.example/x.log")


def test_a_float_est_time_and_a_near_timeout_past_the_files_timeout_read_as_the_cli_says_them():
    """12.5 s in the file is 12.5 here as in `nightly calibrate` (not the 13 plans round it to); a run past the
    timeout the file gives the framework's runner says so, as `nightly run` prints it."""
    from pipelines.core.model import Estimate, Sample, Test

    f = Test("tests/f.py", "tests/f.py", "cuda", "stage-c-4-gpu-h200", 4, 41, hardware="h200")
    g = Test("tests/g.py", "tests/g.py", "cuda", "stage-c-4-gpu-h200", 4, 1440, hardware="h200")
    runs = [{"test_id": t, "outcome": "passed", "elapsed_s": e, "started_at": "2026-12-01T15:00:00Z", "timeout_s": s}
            for t, e, s in (("tests/f.py", 100.0, 1800), ("tests/g.py", 1700.0, 2500))]
    summary = {"night": "n", "run_id": "r1", "selected": [f.id, g.id], "est_time": {g.id: 2000}, "attempts": runs}
    samples = [Sample(g.id, "h200", "", "passed", 1700.0, "2026-12-01T15:00:00Z", run_id="r1")]
    estimates = [Estimate(f.id, "h200", 41, 130, 3, "bucket125", current_literal=40.5),
                 Estimate(g.id, "h200", 1440, 2200, 1, "bucket125", in_force=2000)]
    page = render_html(build_report(summary, (), samples, [f, g], estimates, timeout_floor_s=1800))
    drift = section(page, "drift")
    assert "tests/f.py: est_time 40.5 s → proposed 130 s" in drift
    assert ("tests/g.py: last run passed after 1700 s of its 1800 s timeout (94%), the one its file's est_time=1440 "
            "gives the framework's own runner until the est_time patch is merged (the nights run with the "
            "calibrated 2000)") in drift


def test_a_near_timeout_line_on_the_page_is_the_one_the_cli_prints():
    """The page and `nightly run` / `nightly calibrate` (``str(NearTimeout)``) give a run's seconds alike."""
    runs = [{"test_id": t, "outcome": "passed", "elapsed_s": e, "started_at": "2026-12-01T15:00:00Z", "timeout_s": 11}
            for t, e in (("tests/a.py", 10.022), ("tests/b.py", 10.0), ("tests/c.py", 10.46))]
    data = build_report({"night": "n", "run_id": "r1", "selected": ["tests/a.py", "tests/b.py", "tests/c.py"],
                         "attempts": runs})
    assert len(data.near_timeout) == 3
    drift = section(render_html(data), "drift")
    for near in data.near_timeout:
        assert str(near) in drift
    assert [str(n).split(" after ", 1)[1].split(" timeout", 1)[0] for n in data.near_timeout] == [
        "10 s of its 11 s", "10 s of its 11 s", "10.5 s of its 11 s"]


def _cells(row: str) -> list[str]:
    """A GFM table row's cells: split on the ``|`` no backslash escapes."""
    return [c.strip() for c in re.split(r"(?<!\\)\|", row.strip())[1:-1]]


def test_the_dagster_markdown_keeps_a_quarantines_who_why_and_evidence_as_typed_text(tmp_path, capsys):
    from pipelines.cli import main
    from pipelines.night import Night, NightSettings
    from pipelines.reporting.inputs import inputs_for_night, night_report
    from pipelines.reporting.metadata import report_markdown
    from tests.reporting.nights import write_home

    home = write_home(example_night(tmp_path / "home"))
    why = "fails | passes | see #7 <script>alert(1)</script> and <img src=x onerror=alert(2)> *now*"
    assert main(["quarantine", "add", tid(LORA), "--home", str(home), "--repo", "minirl",
                 "--by", "<b>bob</b> | ops", "--why", why]) == 0, capsys.readouterr().err
    night = Night(NightSettings(home=home, repo="minirl"))
    text = report_markdown(night_report(night.state, None, inputs_for_night(night, uncovered=[])))
    assert "<script" not in text and "<img" not in text and "<b>" not in text
    header, rule, *rows = [line for line in text.splitlines() if line.startswith("|")]
    assert len(_cells(header)) == len(_cells(rule)) == 5
    assert all(len(_cells(r)) == 5 for r in rows), rows
    [lora] = [_cells(r) for r in rows if tid(LORA) in r]
    assert lora[:4] == [f"`{tid(LORA)}`", "quarantined", r"&lt;b&gt;bob&lt;/b&gt; \| ops",
                        r"fails \| passes \| see \#7 &lt;script&gt;alert(1)&lt;/script&gt; and "
                        r"&lt;img src=x onerror=alert(2)&gt; \*now\*"]
    # the failures' lines too: a classification is the test's own reason text
    assert f"- `{tid(SFT)}`: test failure (exit 1)" in text
