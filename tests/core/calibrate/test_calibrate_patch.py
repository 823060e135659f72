"""The source patch changes only the literal est_time, applies with git, and leaves ambiguous files alone."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

from pipelines.core.calibrate import apply_patch, make_patch, plan_patch
from pipelines.core.calibrate.output import WHOLE_FILES
from pipelines.core.model import Estimate
from tests.conftest import make_test

ONE = textwrap.dedent("""\
    # -*- coding: utf-8 -*-  \u00e9t\u00e9
    from ci_register import register_cuda_ci, register_rocm_ci

    register_cuda_ci(est_time=3600,  suite='stage-c-4-gpu-h200', labels=["megatron"])  # keep me
    register_rocm_ci(2400, "stage-c-4-gpu-mi300", labels=["megatron"])
    x = {"est_time": 3600}
""")
TWO = textwrap.dedent("""\
    register_cuda_ci(est_time=600, suite="stage-b-2-gpu-h200", labels=[])
    register_cuda_ci(est_time=600, suite="stage-c-4-gpu-h200", labels=[])
""")
NONLITERAL = "EST = 600\nregister_cuda_ci(est_time=EST, suite='stage-c-4-gpu-h200', labels=[])\n"


def write(repo: Path, rel: str, text: str, newline: bool = True) -> str:
    path = repo / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode() if newline else text.rstrip("\n").encode())
    return hashlib.sha256(path.read_bytes()).hexdigest()


def est(t, proposed: int) -> Estimate:
    return Estimate(t.id, t.hardware, t.est_time, proposed, 3, "bucket125")


def git(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True)


@pytest.fixture
def repo(tmp_path) -> Path:
    if not shutil.which("git"):
        pytest.skip("git is not installed")
    git(tmp_path, "init", "-q")
    return tmp_path


def registered(repo, rel="tests/e2e/test_x.py", text=ONE, **kw):
    sha = write(repo, rel, text, kw.pop("newline", True))
    cuda = make_test(id=f"{rel}::cuda-stage-c-4-gpu-h200", path=rel, sha256=sha, est_time=3600, line=4, **kw)
    rocm = make_test(id=f"{rel}::rocm-stage-c-4-gpu-mi300", path=rel, backend="rocm", hardware="mi300",
                     suite="stage-c-4-gpu-mi300", sha256=sha, est_time=2400, line=5)
    return cuda, rocm


def test_the_patch_applies_with_git_and_changes_only_the_literals(repo):
    cuda, rocm = registered(repo)
    patch = make_patch(repo, [cuda, rocm], [est(cuda, 1300), est(rocm, 1200)])
    assert "--- a/tests/e2e/test_x.py\n+++ b/tests/e2e/test_x.py\n" in patch
    (repo / "p.diff").write_text(patch)
    check = git(repo, "apply", "--check", "p.diff")
    assert check.returncode == 0, check.stderr
    git(repo, "apply", "p.diff")
    assert (repo / "tests/e2e/test_x.py").read_text() == ONE.replace("est_time=3600,", "est_time=1300,").replace(
        "(2400,", "(1200,")


def test_write_mode_produces_the_same_bytes_as_the_patch_and_keeps_a_missing_final_newline(repo):
    cuda, rocm = registered(repo, newline=False)
    patch = make_patch(repo, [cuda, rocm], [est(rocm, 1200)])
    assert patch.endswith("\\ No newline at end of file\n")
    (repo / "p.diff").write_text(patch)
    assert git(repo, "apply", "--check", "p.diff").returncode == 0
    plan = apply_patch(repo, [cuda, rocm], [est(rocm, 1200)])
    assert list(plan.edits) == ["tests/e2e/test_x.py"]
    assert (repo / "tests/e2e/test_x.py").read_bytes() == ONE.replace("(2400,", "(1200,").rstrip("\n").encode()


def test_a_file_with_two_registrations_for_the_hardware_is_left_alone_and_listed(repo):
    sha = write(repo, "tests/e2e/test_two.py", TWO)
    a = make_test(id="tests/e2e/test_two.py::cuda-stage-b-2-gpu-h200", path="tests/e2e/test_two.py",
                  suite="stage-b-2-gpu-h200", sha256=sha, est_time=600, line=1)
    plan = plan_patch(repo, [a], [est(a, 300)])  # only one passed in: the file itself shows two
    assert plan.edits == {}
    assert plan.skipped == (("tests/e2e/test_two.py", "2 registrations for cuda/h200; edit by hand"),)
    assert make_patch(repo, [a], [est(a, 300)]) == \
        "# left alone: tests/e2e/test_two.py: 2 registrations for cuda/h200; edit by hand\n"
    assert (repo / "tests/e2e/test_two.py").read_text() == TWO


def test_non_literal_values_changed_files_and_unchanged_proposals_are_not_edited(repo):
    sha = write(repo, "tests/e2e/test_n.py", NONLITERAL)
    n = make_test(id="tests/e2e/test_n.py", path="tests/e2e/test_n.py", sha256=sha, est_time=600, line=2)
    cuda, rocm = registered(repo)
    (repo / cuda.path).write_text(ONE + "# edited after the catalog\n")
    plan = plan_patch(repo, [n, cuda, rocm], [est(n, 300), est(cuda, 1300), est(rocm, 2400)])
    assert plan.edits == {}
    assert plan.skipped == (
        ("tests/e2e/test_n.py", "line 2: est_time is not a number literal; edit by hand"),
        ("tests/e2e/test_x.py", "the file changed since the catalog read it; recalibrate against this revision"),
    )


def test_estimates_without_enough_samples_never_touch_a_file(repo):
    cuda, rocm = registered(repo)
    e = Estimate(cuda.id, "h200", 3600, 3600, 0, "too few samples")
    assert make_patch(repo, [cuda, rocm], [e]) == ""


def test_write_mode_writes_a_symlinked_test_file_through_its_link_and_the_link_stays(repo, tmp_path_factory):
    shared = tmp_path_factory.mktemp("shared") / "test_x.py"
    shared.write_text(ONE)
    link = repo / "tests/e2e/test_x.py"
    link.parent.mkdir(parents=True)
    link.symlink_to(shared)
    cuda, rocm = registered(repo, text=ONE)  # writes through the new link: same text
    assert link.is_symlink()
    apply_patch(repo, [cuda, rocm], [est(cuda, 1300)])
    assert link.is_symlink() and link.resolve() == shared.resolve()
    assert shared.read_text() == ONE.replace("est_time=3600,", "est_time=1300,")
    assert [p.name for p in shared.parent.iterdir()] == ["test_x.py"]  # no temporary file left beside it


LISTED = "register_cuda_ci(est_time=1200, suite='nightly-big', labels=[], hardware=['8-gpu-h100', '4-gpu-h200'])\n"


def test_one_call_for_several_hardware_gets_the_largest_proposal_of_its_tests(repo):
    sha = write(repo, "tests/e2e/test_l.py", LISTED)
    h100, h200 = (make_test(id=f"tests/e2e/test_l.py::cuda-nightly-big@{hw}", path="tests/e2e/test_l.py", hardware=hw,
                            suite="nightly-big", sha256=sha, est_time=1200, line=1) for hw in ("h100", "h200"))
    for order in ([est(h100, 900), est(h200, 600)], [est(h200, 600), est(h100, 900)]):
        plan = plan_patch(repo, [h100, h200], order)
        assert plan.skipped == ()
        assert plan.edits["tests/e2e/test_l.py"][1] == LISTED.replace("est_time=1200", "est_time=900")
    no_evidence = Estimate(h100.id, "h100", 1200, 1200, 0, "too few samples")
    assert plan_patch(repo, [h100, h200], [no_evidence, est(h200, 600)]).edits == {}, \
        "a hardware without evidence keeps the shared literal from being lowered for it"


def test_a_shared_literal_held_by_a_hardware_without_evidence_says_why_it_is_left_alone(repo):
    sha = write(repo, "tests/e2e/test_l.py", LISTED)
    h100, h200 = (make_test(id=f"tests/e2e/test_l.py::cuda-nightly-big@{hw}", path="tests/e2e/test_l.py", hardware=hw,
                            suite="nightly-big", sha256=sha, est_time=1200, line=1) for hw in ("h100", "h200"))
    no_evidence = Estimate(h100.id, "h100", 1200, 1200, 0, "too few samples")
    why = ("line 1: est_time 1200 is shared with h100 (one literal for hardware h100, h200), which has no evidence for "
           "a change, so the proposal (h200 600 s) is not written; import or run h100 first, or register each "
           "hardware with its own call")
    for given in ([no_evidence, est(h200, 600)], [est(h200, 600)]):  # h100 with no estimate at all alike
        plan = plan_patch(repo, [h100, h200], given)
        assert plan.edits == {} and plan.skipped == (("tests/e2e/test_l.py", why),)
        assert plan.diff() == f"# left alone: tests/e2e/test_l.py: {why}\n"


def test_a_call_listing_several_hardware_is_edited_whatever_the_order_beside_another_call_for_one_of_them(repo):
    text = LISTED.replace("['8-gpu-h100', '4-gpu-h200']", "['4-gpu-h100', '4-gpu-h200']").replace(
        "nightly-big", "stage-c-4-gpu") + "register_cuda_ci(est_time=900, suite='stage-d-8-gpu-h200', labels=[])\n"
    sha = write(repo, "tests/e2e/test_l.py", text)
    h100, h200 = (make_test(id=f"tests/e2e/test_l.py::cuda-stage-c-4-gpu@{hw}", path="tests/e2e/test_l.py", hardware=hw,
                            suite="stage-c-4-gpu", sha256=sha, est_time=1200, line=1) for hw in ("h100", "h200"))
    other = make_test(id="tests/e2e/test_l.py::cuda-stage-d-8-gpu-h200", path="tests/e2e/test_l.py", hardware="h200",
                      suite="stage-d-8-gpu-h200", sha256=sha, est_time=900, line=2)
    for order in ([est(h100, 600), est(h200, 700)], [est(h200, 700), est(h100, 600)]):
        plan = plan_patch(repo, [h100, h200, other], order)
        assert plan.skipped == ()
        assert plan.edits["tests/e2e/test_l.py"][1] == text.replace("est_time=1200", "est_time=700")


def test_a_file_python_reads_in_another_encoding_is_left_alone_with_the_value_to_set(repo):
    """The catalog reads PEP 263 files as Python does; the patch keeps every byte, so it says what to
    set by hand instead of calling the file invalid Python."""
    rel = "tests/e2e/test_enc.py"
    path = repo / rel
    path.parent.mkdir(parents=True)
    path.write_bytes(b"# -*- coding: latin-1 -*-\n" + "# caf\u00e9\nregister_cuda_ci(600, 'stage-c-4-gpu-h200', "
                     "labels=[])\n".encode("latin-1"))
    t = make_test(id=rel, path=rel, sha256=hashlib.sha256(path.read_bytes()).hexdigest(), est_time=600, line=3)
    plan = plan_patch(repo, [t], [est(t, 900)])
    assert plan.edits == {}
    assert plan.skipped == ((rel, "the file is iso-8859-1 (a coding line); the patch edits UTF-8 files "
                                  "only: set est_time to 900 by hand"),)


def test_a_file_starting_with_a_utf8_bom_is_patched_and_keeps_its_bom(repo):
    """A BOM file is UTF-8: the diff applies with git, --write gives the same bytes, the BOM and the CRLF
    line endings stay, and the recorded rewrite leads to the written file's digest."""
    rel = "tests/e2e/fsdp/test_bom.py"
    path = repo / rel
    path.parent.mkdir(parents=True)
    before = (b"\xef\xbb\xbffrom fwm.ci.registry import register_cuda_ci\r\n"
              b'register_cuda_ci(900, "stage-c-2-gpu-h200", labels=["fsdp"])\r\n')
    path.write_bytes(before)
    t = make_test(id=rel, path=rel, sha256=hashlib.sha256(before).hexdigest(), est_time=900, line=2,
                  suite="stage-c-2-gpu-h200")
    patch = make_patch(repo, [t], [est(t, 1900)])
    assert "# left alone" not in patch, patch
    (repo / "p.diff").write_bytes(patch.encode("utf-8"))
    check = git(repo, "apply", "--check", "p.diff")
    assert check.returncode == 0, check.stderr
    plan = apply_patch(repo, [t], [est(t, 1900)])
    after = before.replace(b"(900,", b"(1900,")
    assert path.read_bytes() == after
    path.write_bytes(before)
    git(repo, "apply", "p.diff")
    assert path.read_bytes() == after
    assert [(x.before, x.after) for x in plan.successions()] == [
        (hashlib.sha256(before).hexdigest(), hashlib.sha256(after).hexdigest())]


ONE_LINE = ('register_rocm_ci(1800, "stage-c-4-gpu-mi300", labels=["a"]); '
            'register_cuda_ci(1800, "stage-c-4-gpu-h200", labels=["a"])\n')


def one_line_tests(repo, text=ONE_LINE):
    sha = write(repo, "tests/e2e/test_o.py", text)
    rocm = make_test(id="tests/e2e/test_o.py::rocm-stage-c-4-gpu-mi300", path="tests/e2e/test_o.py", backend="rocm",
                     hardware="mi300", suite="stage-c-4-gpu-mi300", sha256=sha, est_time=1800, line=1)
    cuda = make_test(id="tests/e2e/test_o.py::cuda-stage-c-4-gpu-h200", path="tests/e2e/test_o.py",
                     suite="stage-c-4-gpu-h200", sha256=sha, est_time=1800, line=1)
    return rocm, cuda


def test_two_calls_on_one_line_each_get_their_own_proposal(repo):
    rocm, cuda = one_line_tests(repo)
    for given in ([est(cuda, 600)], [est(cuda, 600), est(rocm, 2400)], [est(rocm, 2400), est(cuda, 600)]):
        plan = plan_patch(repo, [rocm, cuda], given)
        want = ONE_LINE.replace("cuda_ci(1800", "cuda_ci(600")
        if len(given) == 2:
            want = want.replace("rocm_ci(1800", "rocm_ci(2400")
        assert plan.skipped == () and plan.edits["tests/e2e/test_o.py"][1] == want


def test_two_calls_of_one_backend_on_one_line_are_told_apart_by_suite_and_each_edited(repo):
    """`register_cuda_ci(.., "stage-c-4-gpu-b200"); register_cuda_ci(.., "stage-c-4-gpu-h200")`: one literal
    each, found by suite; the rocm call on the next line is edited too, and the patch applies."""
    text = ONE_LINE.replace("register_rocm_ci(1800, \"stage-c-4-gpu-mi300\"", "register_cuda_ci(1800, \"stage-c-4-gpu-b200\"")
    text += "register_rocm_ci(900, 'stage-c-4-gpu-mi300', labels=[])\n"
    sha = write(repo, "tests/e2e/test_o.py", text)
    b200, h200 = (make_test(id=f"tests/e2e/test_o.py::cuda-stage-c-4-gpu-{hw}", path="tests/e2e/test_o.py",
                            hardware=hw, suite=f"stage-c-4-gpu-{hw}", sha256=sha, est_time=1800, line=1)
                  for hw in ("b200", "h200"))
    rocm = make_test(id="tests/e2e/test_o.py::rocm", path="tests/e2e/test_o.py", backend="rocm", hardware="mi300",
                     suite="stage-c-4-gpu-mi300", sha256=sha, est_time=900, line=2)
    want = ('register_cuda_ci(700, "stage-c-4-gpu-b200", labels=["a"]); '
            'register_cuda_ci(600, "stage-c-4-gpu-h200", labels=["a"])\n'
            "register_rocm_ci(500, 'stage-c-4-gpu-mi300', labels=[])\n")
    for given in ([est(rocm, 500), est(h200, 600), est(b200, 700)], [est(b200, 700), est(rocm, 500), est(h200, 600)]):
        plan = plan_patch(repo, [b200, h200, rocm], given)
        assert plan.skipped == () and plan.edits["tests/e2e/test_o.py"][1] == want
    (repo / "p.diff").write_text(plan.diff())
    applied = git(repo, "apply", "p.diff")
    assert applied.returncode == 0, applied.stderr
    assert (repo / "tests/e2e/test_o.py").read_text() == want
    write(repo, "tests/e2e/test_o.py", text)
    only_h200 = plan_patch(repo, [b200, h200, rocm], [est(h200, 600)])  # b200's literal is its own: untouched
    assert only_h200.edits["tests/e2e/test_o.py"][1] == want.replace("(700,", "(1800,").replace("(500,", "(900,")


def test_a_call_listing_several_hardware_beside_another_call_of_its_backend_on_its_line_keeps_its_own_literal(repo):
    """The h100/h200 call shares one literal (the larger proposal, 900); the b200 call beside it on the
    line is another literal (400), not a third hardware of that call."""
    text = ("register_cuda_ci(1200, 'stage-c-4-gpu', labels=[], hardware=['4-gpu-h100', '4-gpu-h200']); "
            "register_cuda_ci(1200, 'stage-d-8-gpu-b200', labels=[])\n")
    sha = write(repo, "tests/e2e/test_l.py", text)
    h100, h200 = (make_test(id=f"tests/e2e/test_l.py::cuda-stage-c-4-gpu@{hw}", path="tests/e2e/test_l.py", hardware=hw,
                            suite="stage-c-4-gpu", sha256=sha, est_time=1200, line=1) for hw in ("h100", "h200"))
    b200 = make_test(id="tests/e2e/test_l.py::cuda-stage-d-8-gpu-b200", path="tests/e2e/test_l.py", hardware="b200",
                     suite="stage-d-8-gpu-b200", sha256=sha, est_time=1200, line=1)
    plan = plan_patch(repo, [h100, h200, b200], [est(h100, 900), est(b200, 400), est(h200, 600)])
    assert plan.skipped == ()
    assert plan.edits["tests/e2e/test_l.py"][1] == text.replace("(1200, 'stage-c", "(900, 'stage-c").replace(
        "(1200, 'stage-d", "(400, 'stage-d")


def test_a_call_that_cannot_be_told_apart_on_its_line_is_left_alone_and_the_file_s_other_edits_are_made(repo):
    """Two h200 calls of one suite on one line (the catalog reports the duplicate and keeps one): which
    literal is the test's is not known, so that one is left alone with its line, never the rocm edit."""
    text = ('register_cuda_ci(30, "stage-c-4-gpu", labels=["a"], hardware=["4-gpu-h200"]); '
            'register_cuda_ci(40, "stage-c-4-gpu", labels=["b"], hardware=["h200"])\n'
            "register_rocm_ci(30, 'stage-c-4-gpu-mi300', labels=['a'])\n")
    sha = write(repo, "tests/e2e/test_d.py", text)
    cuda = make_test(id="tests/e2e/test_d.py::cuda-stage-c-4-gpu", path="tests/e2e/test_d.py", suite="stage-c-4-gpu",
                     sha256=sha, est_time=30, line=1)
    rocm = make_test(id="tests/e2e/test_d.py::rocm-stage-c-4-gpu-mi300", path="tests/e2e/test_d.py", backend="rocm",
                     hardware="mi300", suite="stage-c-4-gpu-mi300", sha256=sha, est_time=30, line=2)
    plan = plan_patch(repo, [cuda, rocm], [est(cuda, 70), est(rocm, 90)])
    assert plan.edits["tests/e2e/test_d.py"][1] == text.replace("register_rocm_ci(30,", "register_rocm_ci(90,")
    assert plan.skipped == (("tests/e2e/test_d.py",
                             "line 1: 2 registration calls on one line and 2 register_cuda_ci calls for suite "
                             "stage-c-4-gpu and h200 among them, so tests/e2e/test_d.py::cuda-stage-c-4-gpu's est_time "
                             "is left alone (the file's other edits are made): put each call on its own line, or "
                             "edit it by hand"),)


@pytest.mark.parametrize("eol", ["\r", "\r\n", "mixed"])
def test_old_mac_and_mixed_line_endings_are_edited_on_the_line_ast_names_and_every_byte_is_kept(repo, eol):
    lines = ["from ci_register import register_cuda_ci", "# note", "",
             "register_cuda_ci(1800, 'stage-c-4-gpu-h200', labels=[])  # keep", "x = 1", ""]
    text = ("\r".join(lines[:3]) + "\n" + "\r\n".join(lines[3:])) if eol == "mixed" else eol.join(lines)
    sha = write(repo, "tests/e2e/test_cr.py", text)
    t = make_test(id="tests/e2e/test_cr.py", path="tests/e2e/test_cr.py", sha256=sha, est_time=1800, line=4)
    want = text.replace("(1800,", "(700,").encode()
    patch = make_patch(repo, [t], [est(t, 700)])
    (repo / "p.diff").write_bytes(patch.encode())
    assert git(repo, "apply", "p.diff").returncode == 0
    assert (repo / t.path).read_bytes() == want
    write(repo, t.path, text)
    apply_patch(repo, [t], [est(t, 700)])
    assert (repo / t.path).read_bytes() == want


def test_a_symlinked_test_file_is_patched_at_the_file_it_names_inside_the_repo(repo):
    target = repo / "shared/real_test.py"
    target.parent.mkdir(parents=True)
    target.write_text(ONE)
    link = repo / "tests/e2e/test_x.py"
    link.parent.mkdir(parents=True)
    link.symlink_to("../../shared/real_test.py")
    git(repo, "add", ".")
    cuda, rocm = registered(repo, text=ONE)
    patch = make_patch(repo, [cuda, rocm], [est(cuda, 1300)])
    assert patch.startswith(f"# {WHOLE_FILES}\n--- a/shared/real_test.py\n+++ b/shared/real_test.py\n")
    (repo / "p.diff").write_text(patch)
    applied = git(repo, "apply", "p.diff")
    assert applied.returncode == 0, applied.stderr
    assert link.is_symlink() and target.read_text() == ONE.replace("est_time=3600,", "est_time=1300,")


def test_a_symlink_to_a_file_outside_the_repo_is_left_out_of_the_patch_with_the_reason_but_written(repo,
                                                                                                   tmp_path_factory):
    shared = tmp_path_factory.mktemp("outside") / "test_x.py"
    shared.write_text(ONE)
    link = repo / "tests/e2e/test_x.py"
    link.parent.mkdir(parents=True)
    link.symlink_to(shared)
    cuda, rocm = registered(repo, text=ONE)
    plan = plan_patch(repo, [cuda, rocm], [est(cuda, 1300)])
    assert plan.patched == {} and list(plan.edits) == ["tests/e2e/test_x.py"]
    assert plan.diff() == (f"# left alone: tests/e2e/test_x.py: a symlink to {shared.resolve()}, outside the "
                           "repository; git stores the link, not that file, so no patch can change it: `--write` "
                           "writes through the link, or edit the file by hand\n")
    apply_patch(repo, [cuda, rocm], [est(cuda, 1300)])
    assert link.is_symlink() and shared.read_text() == ONE.replace("est_time=3600,", "est_time=1300,")


def test_a_float_est_time_literal_is_rewritten_as_a_whole_number_of_seconds(repo):
    text = "register_cuda_ci(est_time=120.5, suite='stage-b-test-1-gpu-large')  # SGLang writes floats\n"
    sha = write(repo, "test/registered/test_f.py", text)
    f = make_test(id="test/registered/test_f.py", path="test/registered/test_f.py", sha256=sha, est_time=121,
                  line=1, hardware="1-gpu-large")  # the catalog rounds 120.5 up
    plan = plan_patch(repo, [f], [est(f, 300)])
    assert plan.skipped == ()
    assert plan.edits["test/registered/test_f.py"] == (text, text.replace("120.5", "300"))


SG_TWO = textwrap.dedent("""\
    register_cuda_ci(est_time=5, stage="stage-b", runner_config="1-gpu-large")
    register_cuda_ci(est_time=8, suite="nightly-1-gpu", nightly=True)
""")


def test_a_test_without_hardware_is_found_by_its_suite_beside_other_calls_of_the_backend(repo):
    sha = write(repo, "test/registered/test_g.py", SG_TWO)
    stage = make_test(id="test/registered/test_g.py::cuda-stage-b-test-1-gpu-large", path="test/registered/test_g.py",
                      suite="stage-b-test-1-gpu-large", hardware="1-gpu-large", sha256=sha, est_time=5, line=1)
    nightly = make_test(id="test/registered/test_g.py::cuda-nightly-1-gpu", path="test/registered/test_g.py",
                        suite="nightly-1-gpu", hardware="", sha256=sha, est_time=8, line=2)
    plan = plan_patch(repo, [stage, nightly], [est(stage, 30), est(nightly, 23)])
    assert plan.skipped == ()
    assert plan.edits["test/registered/test_g.py"][1] == SG_TWO.replace("=5,", "=30,").replace("=8,", "=23,")


def test_two_calls_naming_the_same_suite_without_hardware_still_leave_the_file_alone(repo):
    text = SG_TWO.replace('stage="stage-b", runner_config="1-gpu-large"', 'suite="nightly-1-gpu"')
    sha = write(repo, "test/registered/test_g.py", text)
    nightly = make_test(id="test/registered/test_g.py::cuda-nightly-1-gpu", path="test/registered/test_g.py",
                        suite="nightly-1-gpu", hardware="", sha256=sha, est_time=8, line=2)
    plan = plan_patch(repo, [nightly], [est(nightly, 23)])
    assert plan.edits == {}
    assert plan.skipped == (("test/registered/test_g.py", "2 registrations for cuda/any hardware; edit by hand"),)


def test_two_sglang_calls_of_one_backend_and_suite_on_their_own_lines_still_leave_the_test_alone(repo):
    """The SGLang family's calls are told apart by suite, not by hardware alone; two calls naming the same suite
    (a duplicate the catalog reports) still register one test twice, and which literal is its est_time is unknown."""
    text = 'register_cpu_ci(1, "stage-a-test-cpu")\nregister_cpu_ci(est_time=2, suite="stage-a-test-cpu")\n'
    sha = write(repo, "test/registered/test_t.py", text)
    t = make_test(id="test/registered/test_t.py::cpu-stage-a-test-cpu", path="test/registered/test_t.py", backend="cpu",
                  suite="stage-a-test-cpu", hardware="cpu", gpus=0, sha256=sha, est_time=1, line=1,
                  nightly_rule="exclusive")
    plan = plan_patch(repo, [t], [est(t, 3)])
    assert plan.edits == {}
    assert plan.skipped == (("test/registered/test_t.py",
                             "2 registrations for cpu/cpu in suite stage-a-test-cpu; edit by hand"),)


def test_an_est_time_of_0_in_force_is_never_written_into_a_file(repo):
    """A calibration that proposed 0 s for a sub-second test (before every policy had a least value)
    left it in force; carrying it into the file would make the catalog refuse the file (`est_time: must
    be positive`) and the test vanish."""
    text = "register_cpu_ci(1, 'stage-a-cpu')\n"
    sha = write(repo, "tests/fast/test_c.py", text)
    t = make_test(id="tests/fast/test_c.py", path="tests/fast/test_c.py", backend="cpu", suite="stage-a-cpu", gpus=0,
                  hardware="cpu", sha256=sha, est_time=1, line=1)
    plan = plan_patch(repo, [t], [est(t, 0)])
    assert plan.edits == {}
    assert plan.skipped == (("tests/fast/test_c.py", "line 1: est_time: 0 s is not a positive est_time (framework "
                             "M's catalog refuses the file); keep 1 or set it by hand"),)
