"""Flakiness from history and the quarantine state machine, over generated nights."""

from __future__ import annotations

import hashlib

import pytest

from pipelines.core.flaky import (
    FlakyRules,
    FlakyState,
    ended_notes,
    for_tonight,
    night_verdict,
    not_releasable,
    record,
    replay,
    runnable,
)
from pipelines.core.model import Attempt, CatalogError, Sample, env_digest

T = "tests/e2e/test_grpo.py"
RULES = FlakyRules(window_nights=14, min_flips=2, quarantine_after=3, release_after=3)


def history(*nights: str | tuple[str, ...], test: str = T, sha: str = "a" * 64, image: str = "img@1",
            node: str = "n0", start: int = 1, env: str = "") -> list[Sample]:
    """One run per night; each night is one outcome or the outcomes of its attempts in order."""
    out = []
    for i, night in enumerate(nights, start=start):
        for k, outcome in enumerate((night,) if isinstance(night, str) else night, start=1):
            out.append(Sample(test_id=test, hardware="h200", sha256=sha, outcome=outcome, elapsed_s=60.0,  # type: ignore[arg-type]
                              started_at=f"2026-11-{i:02d}T01:{k:02d}:00+00:00", node=node, image=image,
                              run_id=f"run{i:02d}", attempt=k, capped=outcome == "timed_out", env=env))
    return out


def state_of(samples, rules=RULES, overrides=None) -> FlakyState:
    return replay(samples, rules, overrides)[T]


def test_a_test_that_fails_then_passes_on_retry_is_flaky_with_the_run_as_evidence():
    s = state_of(history("passed", ("failed", "passed"), "passed"))
    assert s.state == "flaky"
    [ev] = s.evidence
    assert (ev.kind, ev.run_id) == ("passed_on_retry", "run02")
    assert ev.text == "failed then passed on attempt 2 in run run02"


def test_a_hang_then_a_pass_on_retry_counts_the_same():
    [ev] = state_of(history(("timed_out", "passed"))).evidence
    assert ev.text == "timed_out then passed on attempt 2 in run run01"


def test_one_breakage_is_not_flaky_but_alternating_nights_on_the_same_code_are():
    assert state_of(history("passed", "failed", "failed")).state == "healthy"
    s = state_of(history("passed", "failed", "passed"))
    assert s.state == "flaky"
    assert [e.kind for e in s.evidence] == ["alternating", "alternating"]
    assert s.evidence[1].text == "failed in run run02, passed in run run03 on the same code and image"


def test_a_fix_in_the_code_or_a_new_image_is_not_a_flip():
    fixed = history("passed", "failed") + history("passed", sha="b" * 64, start=3)
    assert state_of(fixed).state == "healthy"
    new_image = history("passed", "failed") + history("passed", image="img@2", start=3)
    assert state_of(new_image).state == "healthy"


def test_a_failure_injected_with_env_on_alternate_nights_is_not_a_flip():
    inject = env_digest([("MINIRL_FAIL", "test_grpo")])
    nights = [*history("passed"), *history("failed", start=2, env=inject), *history("passed", start=3),
              *history("failed", start=4, env=inject)]
    s = state_of(nights)
    assert (s.state, s.evidence) == ("healthy", ())
    verdict = night_verdict([Attempt(T, "failed", 60.0, "2026-11-04T01:01:00+00:00", node="n0")], {T: s})
    assert verdict.failed == (T,) and not verdict.ok  # the 4th night's deterministic failure fails it


def test_nights_are_compared_with_the_last_night_under_the_same_env():
    inject = env_digest([("MINIRL_FAIL", "test_grpo")])
    # plain nights pass, fail, pass with injected nights between them: the plain nights still alternate
    nights = [*history("passed"), *history("failed", start=2, env=inject), *history("failed", start=3),
              *history("failed", start=4, env=inject), *history("passed", start=5)]
    s = state_of(nights)
    assert s.state == "flaky"
    assert [e.text for e in s.evidence] == ["passed in run run01, failed in run run03 on the same code and image",
                                            "failed in run run03, passed in run run05 on the same code and image"]
    flips = [*history("passed", env=inject), *history("failed", start=2, env=inject)]
    [ev] = state_of(flips).evidence
    assert ev.text.endswith("on the same code and image with the same extra environment (MINIRL_FAIL)")


def test_the_env_digest_keeps_names_and_never_values():
    d = env_digest([("MINIRL_FAIL", "s3cr3t-value"), ("A_TOKEN", "x")])
    assert d.startswith("A_TOKEN,MINIRL_FAIL#") and "s3cr3t" not in d and len(d.partition("#")[2]) == 12
    assert d == env_digest([("A_TOKEN", "x"), ("MINIRL_FAIL", "s3cr3t-value")])
    assert d != env_digest([("A_TOKEN", "x"), ("MINIRL_FAIL", "other")]) and env_digest([]) == ""
    assert env_digest([("MINIRL_FAIL", "a")]) == "MINIRL_FAIL#" + hashlib.sha256(b'[["MINIRL_FAIL", "a"]]').hexdigest()[:12]


def test_a_rotated_credential_changes_no_env_digest_and_so_turns_off_no_flip_detection():
    """docs/reliability.md documents --env WANDB_API_KEY=... for secrets: a token rotated every night
    must not make every night's environment look new (no two nights compared, no flip ever seen)."""
    for name in ("WANDB_API_KEY", "HF_TOKEN", "aws_secret_access_key", "DB_PASSWORD", "X-PASSWD", "GCP_CREDENTIALS",
                 "HF_AUTH", "SESSION_COOKIE"):
        assert env_digest([(name, "old")]) == env_digest([(name, "new")]), name
    assert env_digest([("MONKEY", "a")]) != env_digest([("MONKEY", "b")])  # KEY only as a word of the name
    assert env_digest([("WANDB_API_KEY", "k")]) != env_digest([("HF_TOKEN", "k")])  # the names still count
    nights = [Sample("t.py", "h200", "s", o, 5.0, f"2026-12-0{i + 1}T15:00:00+00:00", "n", "img", f"r{i}", 1,
                     env=env_digest([("WANDB_API_KEY", f"k{i}")])) for i, o in enumerate(["passed", "failed"] * 3)]
    assert replay(nights)["t.py"].state == "quarantined"


def test_enough_evidence_in_the_window_quarantines_and_says_why():
    s = state_of(history(("failed", "passed"), "passed", ("failed", "passed"), "failed", "passed"))
    assert (s.state, s.by) == ("quarantined", "flaky rules")
    assert s.why == "2 pass(es) on retry and 1 flip(s) in the last 14 nights"
    assert s.since == "run04"


def test_evidence_older_than_the_window_is_forgotten():
    rules = FlakyRules(window_nights=3, quarantine_after=3, release_after=3)
    s = state_of(history(("failed", "passed"), "passed", "passed", "passed"), rules)
    assert (s.state, s.evidence) == ("healthy", ())


def test_a_quarantine_stays_while_the_test_still_fails_and_releases_after_n_clean_passes():
    flaky = [("failed", "passed")] * 3
    assert state_of(history(*flaky)).state == "quarantined"
    still = state_of(history(*flaky, "passed", "passed", "failed", "passed", "passed"))
    assert (still.state, still.passes) == ("quarantined", 2)
    retry = state_of(history(*flaky, "passed", "passed", ("failed", "passed")))
    assert (retry.state, retry.passes) == ("quarantined", 0)
    released = state_of(history(*flaky, "passed", "passed", "failed", "passed", "passed", "passed"))
    assert (released.state, released.why, released.since) == ("released", "3 consecutive passing nights", "run09")
    assert released.evidence == ()


def test_a_failure_injected_with_env_neither_resets_nor_extends_a_quarantined_tests_release_streak():
    """Quarantined on plain nights; plain passes alternate with nights that inject its failure with
    --env. The injected failures say nothing of the flakiness: three plain passes release it."""
    inject = env_digest([("MINIRL_FAIL", "test_grpo")])
    flaky = history(*[("failed", "passed")] * 3)
    mixed = [s for i in range(3) for s in (*history("passed", start=4 + 2 * i),
                                              *history("failed", start=5 + 2 * i, env=inject))]
    two = state_of(flaky + mixed[:4])  # pass, injected failure, pass, injected failure
    assert (two.state, two.passes) == ("quarantined", 2)
    released = state_of(flaky + mixed[:-1])  # ... and a third pass
    assert (released.state, released.since) == ("released", "run08")
    plain_failure = state_of(flaky + history("passed", "passed", "failed", start=4))
    assert (plain_failure.state, plain_failure.passes) == ("quarantined", 0)  # under its own environment it still resets


def test_a_released_test_is_healthy_after_a_clean_night_and_flaky_again_on_new_evidence():
    base = [("failed", "passed")] * 3 + ["passed"] * 3
    assert state_of(history(*base, "passed")).state == "healthy"
    assert state_of(history(*base, ("failed", "passed"))).state == "flaky"


def test_infra_errors_are_ignored_neither_evidence_nor_a_pass_nor_a_reset():
    flaky = [("failed", "passed")] * 3
    s = state_of(history(*flaky, "passed", "infra_error", ("infra_error", "passed"), "skipped"))
    assert (s.state, s.passes) == ("quarantined", 2)
    assert state_of(history("passed", ("infra_error", "passed"), "infra_error", "passed")).state == "healthy"


def test_failures_on_a_node_the_night_found_bad_are_the_nodes_not_the_tests():
    samples = []
    for night in range(1, 4):  # the test fails on bad node n9 and passes on retry on n0, three nights running
        samples += history("failed", node="n9", start=night)
        samples += history(("passed", "passed"), node="n0", start=night)[1:]
        for other in range(3):
            samples += history("failed", test=f"tests/other_{other}.py", node="n9", start=night)
            samples += history(("failed", "passed"), test=f"tests/other_{other}.py", node="n0", start=night)[1:]
        samples += history(*["passed"], test="tests/ok.py", node="n0", start=night)
    states = replay(samples, RULES)
    assert states[T].state == "healthy" and states[T].evidence == ()


def test_a_quarantine_by_hand_holds_past_n_passes_until_released_by_hand():
    doc = record(None, T, "add", "alice", "issue #12: races on port 29500", "2026-11-01T00:00:00+00:00")
    s = state_of(history("passed", "passed", "passed", "passed"), overrides=doc)
    assert (s.state, s.by, s.why, s.manual) == ("quarantined", "alice", "issue #12: races on port 29500", True)
    doc = record(doc, T, "release", "bob", "fixed in #13", "2026-11-04T12:00:00+00:00")
    s = state_of(history(*[("failed", "passed")] * 3), overrides=doc)
    assert (s.state, s.by, s.why, s.evidence) == ("released", "bob", "fixed in #13", ())
    assert [a["action"] for a in doc["actions"]] == ["add", "release"]


def test_a_manual_action_needs_who_and_why():
    with pytest.raises(ValueError) as err:
        record(None, T, "add", "alice", "  ", "2026-11-01T00:00:00Z")
    assert str(err.value) == "quarantine add: --why: must not be empty; say why, e.g. an issue link"
    with pytest.raises(ValueError, match="quarantine release: --by: must not be empty; say who decides"):
        record(None, T, "release", "", "fixed", "2026-11-01T00:00:00Z")


def test_a_manual_actions_who_and_why_have_a_length_limit():
    """Whatever records an action (not only the CLI): 500 characters of why, 100 of who, as given."""
    assert record(None, T, "add", "a" * 100, "w" * 500, "2026-11-01T00:00:00Z")["actions"][0]["why"] == "w" * 500
    with pytest.raises(ValueError, match=r"^quarantine add: --why: 501 characters; give at most 500"):
        record(None, T, "add", "alice", "w" * 501, "2026-11-01T00:00:00Z")
    with pytest.raises(ValueError, match=r"^quarantine release: --by: 101 characters; give at most 100"):
        record(None, T, "release", "a" * 101, "fixed", "2026-11-01T00:00:00Z")


def attempt(test: str, outcome: str, node: str = "n0") -> Attempt:
    return Attempt(test_id=test, outcome=outcome, elapsed_s=1.0, started_at="2026-11-01T00:00:00Z", node=node)  # type: ignore[arg-type]


def test_a_quarantined_failure_does_not_fail_the_night_but_infra_and_other_failures_do():
    states = {T: FlakyState(T, "quarantined"), "tests/b.py": FlakyState("tests/b.py", "quarantined")}
    v = night_verdict([attempt(T, "failed"), attempt("tests/ok.py", "passed")], states)
    assert (v.ok, v.excused, v.failed) == (True, (T,), ())
    v = night_verdict([attempt(T, "failed"), attempt("tests/b.py", "infra_error"), attempt("tests/c.py", "timed_out")], states)
    assert (v.ok, v.excused, v.infra, v.failed) == (False, (T,), ("tests/b.py",), ("tests/c.py",))


def test_a_quarantine_never_hides_a_bad_node():
    night = [attempt(f"tests/t{i}.py", "failed", "bad") for i in range(4)] + [attempt(T, "failed", "bad")]
    night += [attempt(f"tests/t{i}.py", "passed", "good") for i in range(4)] + [attempt("tests/z.py", "passed", "good")]
    night += [attempt(f"tests/ok{i}.py", "passed", "good") for i in range(20)]  # 4 of 4 against 0 of 25: named
    v = night_verdict(night, {T: FlakyState(T, "quarantined")})
    assert v.bad_nodes == ("bad",) and T in v.failed and v.excused == () and not v.ok


def test_a_node_the_night_named_while_it_ran_is_in_the_verdict_though_its_finding_faded():
    """Named mid-night (the record's bad_nodes keeps it), then later passes elsewhere lowered its
    rates: judged at the end alone, the verdict listed no bad node and excused the quarantined failure there."""
    night = [attempt("tests/t0.py", "failed", "n1"), attempt(T, "failed", "n1")]
    night += [attempt(f"tests/ok{i}.py", "passed", "n0") for i in range(4)]
    states = {T: FlakyState(T, "quarantined")}
    faded = night_verdict(night, states)
    assert (faded.bad_nodes, faded.excused) == ((), (T,))
    v = night_verdict(night, states, named=["n1"])
    assert (v.bad_nodes, v.excused, v.failed, v.ok) == (("n1",), (), ("tests/t0.py", T), False)
    v = night_verdict(night, states, suspected=["n1"])
    assert (v.bad_nodes, v.excused, v.ok) == ((), (), False)


def test_quarantined_tests_are_left_out_only_when_the_rules_say_so():
    states = {T: FlakyState(T, "quarantined")}
    assert runnable([T, "tests/b.py"], states, FlakyRules()) == [T, "tests/b.py"]
    assert runnable([T, "tests/b.py"], states, FlakyRules(run_quarantined=False)) == ["tests/b.py"]


def test_rules_come_from_yaml_and_bad_rules_say_the_fix():
    assert FlakyRules.from_mapping({"release_after": 7}).release_after == 7
    with pytest.raises(CatalogError) as err:
        FlakyRules.from_mapping({"release_afer": 7}, "assets/repos.yaml", "repos.minirl.flaky", 12)
    assert str(err.value).startswith("assets/repos.yaml:12: repos.minirl.flaky.release_afer: unknown rule; use one of")
    with pytest.raises(CatalogError, match=r"flaky.window_nights: expected a whole number >= 1, got 0"):
        FlakyRules.from_mapping({"window_nights": 0})


def test_states_round_trip_through_json_dicts():
    s = state_of(history(("failed", "passed")))
    assert FlakyState.from_dict(s.to_dict()) == s


def assets_with(tmp_path, project_root, flaky: str):
    """The project's assets/ with a `flaky:` line added to the example repo's entry."""
    import shutil

    shutil.copytree(project_root / "assets", tmp_path / "assets")
    repos = tmp_path / "assets" / "repos.yaml"
    text = repos.read_text()
    assert "\n    hub: examples/minirl/hub\n" in text
    repos.write_text(text.replace("\n    hub: examples/minirl/hub\n", f"\n    hub: examples/minirl/hub\n    flaky: {flaky}\n"))
    return tmp_path / "assets"


def test_a_repos_rules_are_read_from_repos_yaml(tmp_path, project_root):
    from pipelines.core.specs import load_specs

    specs = load_specs(assets_with(tmp_path, project_root, "{release_after: 7, lapse_after: 2, run_quarantined: false}"))
    _, spec = specs.locate_repo("minirl")
    rules = FlakyRules.for_repo(spec)
    assert (rules.release_after, rules.lapse_after, rules.run_quarantined, rules.window_nights) == (7, 2, False, 14)
    assert FlakyRules.for_repo(None) == FlakyRules()  # a checkout nobody configured: the defaults


def test_a_misspelled_rule_in_repos_yaml_is_located_with_the_fix(tmp_path, project_root):
    from pipelines.core.specs import load_specs

    assets = assets_with(tmp_path, project_root, "{release_afer: 7}")
    line = (assets / "repos.yaml").read_text().splitlines().index("    flaky: {release_afer: 7}") + 1
    with pytest.raises(CatalogError) as err:
        load_specs(assets)
    assert f"repos.yaml:{line}: repos.minirl.flaky.release_afer: unknown key; did you mean 'release_after'?" \
        in str(err.value)


def test_states_a_night_recorded_come_back_with_only_the_later_manual_actions_applied():
    from pipelines.core.flaky import recorded_states, states_from_summary

    states = replay(history(*[("failed", "passed")] * 3) + history("passed", test="tests/ok.py"), RULES)
    recorded = recorded_states(states)
    assert list(recorded) == [T], "plainly healthy tests are not recorded"
    doc = record(None, T, "release", "bob", "before the night", "2026-11-01T00:00:00+00:00")
    doc = record(doc, "tests/ok.py", "add", "alice", "after the night", "2026-11-04T09:00:00+00:00")
    back = states_from_summary(recorded, doc, after="2026-11-03T01:02:00+00:00")
    assert back[T] == states[T] and back[T].state == "quarantined"
    assert (back["tests/ok.py"].state, back["tests/ok.py"].by) == ("quarantined", "alice")


def test_only_a_quarantined_test_can_be_released_and_otherwise_it_says_where_the_test_stands():
    doc = record(None, T, "add", "alice", "issue #12", "2026-11-01T00:00:00+00:00")
    quarantined = state_of(history("passed"), overrides=doc)
    released = state_of(history("passed"), overrides=record(doc, T, "release", "bob", "fixed", "2026-11-02T00:00:00+00:00"))
    assert not_releasable(quarantined) is None
    assert not_releasable(None) == not_releasable(FlakyState(T)) == "it is healthy, not quarantined"
    assert not_releasable(FlakyState(T, "flaky")) == "it is flaky, not quarantined"
    assert not_releasable(released) == "it was already released by bob at 2026-11-02T00:00:00+00:00: fixed"


def test_a_manual_quarantine_keeps_the_evidence_gathered_before_it_within_the_window():
    doc = record(None, T, "add", "alice", "issue #9", "2026-11-02T12:00:00+00:00")  # after night 2
    s = state_of(history("timed_out", "passed", "failed"), overrides=doc)
    assert (s.state, s.by, s.manual) == ("quarantined", "alice", True)
    assert [e.text for e in s.evidence] == [
        "timed_out in run run01, passed in run run02 on the same code and image",
        "passed in run run02, failed in run run03 on the same code and image"]
    narrow = FlakyRules(window_nights=2, quarantine_after=3, release_after=3)
    s = state_of(history("timed_out", "passed", "failed", "failed"), narrow, overrides=doc)
    assert [e.run_id for e in s.evidence] == ["run03"], "evidence older than the window is forgotten as before"


def test_keeping_the_evidence_changes_no_state_and_a_release_by_hand_still_clears_it():
    doc = record(None, T, "add", "alice", "issue #9", "2026-11-02T12:00:00+00:00")
    doc = record(doc, T, "release", "bob", "fixed", "2026-11-04T12:00:00+00:00")
    nights = ["timed_out", "passed", "failed", "passed", "passed", ("failed", "passed")]

    def after_night(n: int) -> FlakyState:  # the actions made by the morning after night n
        made = [a for a in doc["actions"] if a["at"] < f"2026-11-{n + 1:02d}"]
        return state_of(history(*nights[:n]), overrides={"version": 1, "actions": made})

    seen = [(s.state, s.passes, s.since, s.by) for s in map(after_night, range(1, len(nights) + 1))]
    assert seen == [("healthy", 0, "", ""), ("quarantined", 0, "2026-11-02T12:00:00+00:00", "alice"),
                    ("quarantined", 0, "2026-11-02T12:00:00+00:00", "alice"),
                    ("released", 0, "2026-11-04T12:00:00+00:00", "bob"), ("healthy", 0, "run05", ""),
                    ("flaky", 0, "run06", "flaky rules")]
    assert [e.run_id for e in state_of(history(*nights), overrides=doc).evidence] == ["run06"]


def test_an_unknown_manual_action_is_never_taken_for_a_release():
    doc = {"version": 1, "actions": [{"test": T, "action": "addd", "by": "a", "why": "w",
                                      "at": "2026-11-01T00:00:00+00:00"}]}
    with pytest.raises(ValueError, match="unknown action 'addd'; use add or release"):
        replay(history("passed"), RULES, doc)


def _node_night(day: int, bad: str) -> list[Sample]:
    """tests/e2e/test_bad_node_night.py's night as the dispatcher runs it: test_f_node1..32, 2-GPU
    tests, the first eight four to a node (odd ones on node0, even ones on node1); the four on the
    ``bad`` node fail with CUDA error 802 at once, which makes it suspect, so every later test starts
    on the other node and the four failures pass there on attempt 2 (4 of 4 against 0 of 28: named)."""
    out, failed = [], 0
    for i in range(1, 33):
        node = ("local-h200-0" if i % 2 else "local-h200-1") if i <= 8 else "local-h200-1"
        other = "local-h200-1" if node == "local-h200-0" else "local-h200-0"
        test = f"tests/e2e/test_f_node{i}.py"
        if node != bad or failed == 4:
            out += history("passed", test=test, node=node if node != bad else other, start=day)
            continue
        failed += 1
        out += history("failed", test=test, node=node, start=day)
        out += history(("failed", "passed"), test=test, node=other, start=day)[1:]
    return out


def test_a_node_broken_on_alternate_nights_quarantines_no_test():
    """Night 1 with node1 broken, then 6 nights flipping node0/node1 (`--env FNODE_BAD=...`): every
    failure was the night's broken node's, so no test flipped and none passed 'on retry' as a flaky one."""
    samples = _node_night(1, "local-h200-1")
    for day in range(2, 8):
        samples += _node_night(day, "local-h200-0" if day % 2 == 0 else "local-h200-1")
    states = replay(samples, RULES)
    assert {t: (s.state, s.evidence) for t, s in states.items()} == {
        f"tests/e2e/test_f_node{i}.py": ("healthy", ()) for i in range(1, 33)}


def test_a_failure_the_retry_repeats_elsewhere_is_still_the_tests():
    """A suspect node whose retries failed too was not bad: the test's nights count as its own."""
    samples = []
    for day in range(1, 5):
        for i in (1, 2, 3):
            test = f"tests/t{i}.py"
            samples += history("failed", test=test, node="n1", start=day)
            samples += history(("failed", "failed" if day % 2 else "passed"), test=test, node="n0", start=day)[1:]
        samples += history("passed", test="tests/ok.py", node="n0", start=day)
    assert replay(samples, RULES)["tests/t1.py"].state != "healthy"


def test_a_bad_node_whose_failures_passed_on_retry_does_not_fail_the_night():
    night = [Attempt(f"tests/t{i}.py", "failed", 1.0, "2026-11-01T00:00:00Z", 1, node="bad") for i in range(3)]
    night += [Attempt(f"tests/t{i}.py", "passed", 1.0, "2026-11-01T00:00:00Z", 2, node="good") for i in range(3)]
    night += [Attempt(f"tests/u{i}.py", "passed", 1.0, "2026-11-01T00:00:00Z", 1, node="good") for i in range(40)]
    v = night_verdict(night, {})
    assert (v.ok, v.bad_nodes, v.failed) == (True, ("bad",), ())


def test_a_one_node_pool_s_own_flips_count_though_other_hardware_passes():
    """Three mi300 tests flipping on the only mi300 node, while twelve h200 runs pass: nodes are
    judged against their own hardware's, so the mi300 node is not "bad" and the flips are the tests'."""
    import dataclasses

    samples = []
    for day in range(1, 7):
        for i in (1, 2, 3):
            samples += [dataclasses.replace(s, hardware="mi300") for s in
                        history("failed" if day % 2 else "passed", test=f"tests/m{i}.py", node="m0", start=day)]
        for i in range(12):
            samples += history("passed", test=f"tests/h{i}.py", node=f"h{i % 2}", start=day)
    assert replay(samples, RULES)["tests/m1.py"].state != "healthy"


def _802_night(day: int) -> list[Sample]:
    """The reviewer's CUDA-802 night as history keeps it: B failed 3 tests, retried on A on attempt
    2, where two passed and one (an OOM, the test's own) failed again; A's t_always fails anyway.
    B failed three more tests that passed on A, and A ran 40 more that passed: 5 of 6 against 1 of
    44 is improbable for a healthy node (2 of 3 against 1 of 4, the night as it was, is not)."""
    runs = [("t_flaky", "B", "passed", 1), ("t_always", "A", "failed", 1), ("t_n1", "B", "failed", 1),
            ("t_n2", "A", "passed", 1), ("t_n3", "B", "failed", 1), ("t_n4", "A", "passed", 1),
            ("t_oom", "B", "failed", 1), ("t_retry", "A", "passed", 1),
            *((f"t_n{i}", "B", "failed", 1) for i in (5, 6, 7)), *((f"t_a{i}", "A", "passed", 1) for i in range(40)),
            ("t_n1", "A", "passed", 2), ("t_n3", "A", "passed", 2), ("t_oom", "A", "failed", 2),
            *((f"t_n{i}", "A", "passed", 2) for i in (5, 6, 7))]
    return [Sample(f"tests/{t}.py", "h200", "a" * 64, outcome, 60.0, f"2026-11-{day:02d}T01:{k:02d}:00+00:00",  # type: ignore[arg-type]
                   node=node, image="img@1", run_id=f"run{day:02d}", attempt=n)
            for k, (t, node, outcome, n) in enumerate(runs)]


def test_failures_on_a_node_the_night_named_after_its_retries_passed_are_never_passed_on_retry():
    samples = [s for day in (1, 2, 3) for s in _802_night(day)]
    states = replay(samples, RULES)
    assert {t: states[f"tests/{t}.py"].state for t in ("t_n1", "t_n3")} == {"t_n1": "healthy", "t_n3": "healthy"}
    assert states["tests/t_n1.py"].evidence == ()


def test_a_failure_on_a_node_the_night_named_bad_for_an_infra_error_is_never_passed_on_retry():
    """Node X's GPU was unusable (one infra error names it, as the night's assess_nodes does) and
    t_b failed there, then passed on Y: the node's failure, not a flaky test's. An older record keeps
    no infra reason: the replay takes its infra error on a node as the node's, as it always did."""
    at = "2026-12-01T00:00:0{}+00:00"
    runs = [("t_a", "infra_error", "X", 1), ("t_b", "failed", "X", 1), ("t_a", "passed", "Y", 2),
            ("t_b", "passed", "Y", 2), ("t_c", "passed", "Y", 1)]
    for reason in ("gpu_unusable", ""):
        samples = [Sample(test, "h200", "s", outcome, 1.0, at.format(k), node=node, run_id="r1", attempt=n,  # type: ignore[arg-type]
                          reason=reason if outcome == "infra_error" else "")
                   for k, (test, outcome, node, n) in enumerate(runs, 1)]
        states = replay(samples, RULES)
        assert (states["t_b"].state, states["t_b"].evidence) == ("healthy", ()), reason


def _shared_node_nights(reason: str, nights: int = 10) -> list[Sample]:
    """t_b fails on h200-a every other night; those nights another test's pod on h200-a ended in an
    infra error of ``reason`` (and passed on h200-b); three more tests pass on the other nodes."""
    out = []
    for i in range(nights):
        run, at = f"run-{i:02d}", f"2026-12-{i + 1:02d}T02:00:00+00:00"
        bad_night = i % 2 == 0
        out.append(Sample("tests/e2e/test_b.py", "h200", "s" * 64, "failed" if bad_night else "passed", 100.0, at,
                          node="h200-a", run_id=run))
        if bad_night:
            out += [Sample("tests/e2e/test_c.py", "h200", "c" * 64, "infra_error", 0.0, at, node="h200-a",
                           run_id=run, reason=reason),
                    Sample("tests/e2e/test_c.py", "h200", "c" * 64, "passed", 50.0, at, node="h200-b", run_id=run,
                           attempt=2)]
        out += [Sample(f"tests/e2e/test_{n}x.py", "h200", "d" * 64, "passed", 50.0, at, node=f"h200-{n}", run_id=run)
                for n in "bcd"]
    return out


@pytest.mark.parametrize("reason", ["deleted", "image_pull", "startup_timeout", "container_config",
                                    "preflight_tool_missing", "result_not_written", "unschedulable", "evicted",
                                    "unknown"])
def test_another_pods_infra_error_that_is_not_the_nodes_fault_keeps_a_tests_failures_on_that_node(reason):
    """A pod deleted, an image not pulled, a pod never scheduled on its pinned node (or one eviction,
    which takes two to name a node) says nothing of the node: t_b's own failures there stay in its
    history, and its nights flipping quarantine it, as with no infra error at all."""
    from pipelines.core.flaky import night_records

    samples = _shared_node_nights(reason)
    finals = [r.final for r in night_records(samples) if r.test_id == "tests/e2e/test_b.py"]
    assert finals == ["failed", "passed"] * 5
    assert replay(samples, RULES)["tests/e2e/test_b.py"].state == "quarantined"


def test_a_node_fault_of_another_pod_still_drops_a_tests_failures_on_that_node():
    """One unusable GPU names the node on its own, as the night's rules do: t_b's failures there are
    the node's."""
    from pipelines.core.flaky import night_records

    samples = _shared_node_nights("gpu_unusable")
    assert [r.final for r in night_records(samples) if r.test_id == "tests/e2e/test_b.py"] == ["passed"] * 5
    assert replay(samples, RULES)["tests/e2e/test_b.py"].state == "healthy"


def test_a_released_test_stays_released_after_a_night_that_failed():
    """Released after 3 clean nights, then a failure (one flip: not flaky yet): it is not healthy
    again until a clean night, as docs/report.md says."""
    base = [("failed", "passed")] * 3 + ["passed"] * 3
    assert state_of(history(*base)).state == "released"
    failed = state_of(history(*base, "failed"))
    assert (failed.state, failed.by) == ("released", "flaky rules")
    assert [e.kind for e in failed.evidence] == ["alternating"]
    assert state_of(history(*base, "failed", "failed", "passed")).state == "flaky"  # the second flip


def test_the_replay_judges_each_runs_nodes_on_the_runs_before_it_as_passed_nodes_would():
    """night_records keeps the evidence of earlier runs incrementally (it once re-read the whole
    history at every run); the bad nodes it drops must be the ones passed_nodes of the earlier runs
    gives, on a history where nodes go bad now and then."""
    import random

    from pipelines.core.flaky import _judged_run, night_records
    from pipelines.core.health import passed_nodes

    rng = random.Random(7)
    samples = []
    for r in range(60):
        bad = f"n{rng.randrange(4)}" if rng.random() < 0.3 else ""
        for k in range(48):  # a bad node's failures among 12 tests were too few to name it
            node = f"n{rng.randrange(4)}"
            outcome = "failed" if (node == bad and rng.random() < 0.8) or rng.random() < 0.05 else "passed"
            when = f"2026-{1 + r // 28:02d}-{1 + r % 28:02d}T01:{k:02d}:00+00:00"
            samples.append(Sample(f"tests/t{k}.py", "h200", "x", outcome, 1.0, when, node=node, run_id=f"r{r:02d}"))
            if outcome == "failed" and r % 2:  # the retry, on another node (odd runs: none, so the
                # node is named only from the earlier runs' passes)
                other = f"n{(int(node[1]) + 1) % 4}"
                samples.append(Sample(f"tests/t{k}.py", "h200", "x", "passed", 1.0, when, node=other,
                                      run_id=f"r{r:02d}", attempt=2))
    bad_of, nodes_own = {}, set()
    for r in range(60):
        mine = [s for s in samples if s.run_id == f"r{r:02d}"]
        earlier = passed_nodes([s for s in samples if s.run_id < f"r{r:02d}"])
        failing_before = {n for run in earlier.runs for _, n in run.failures}
        bad_of[r], own = _judged_run(mine, lambda earlier=earlier: earlier, failing_before)
        nodes_own |= own  # the earlier failures a node named across nights took with it
        assert bad_of[r] == _judged_run(mine, lambda earlier=earlier: earlier, failing_before)[0]
    expected, dropped = [], 0
    for r in range(60):
        mine = [s for s in samples if s.run_id == f"r{r:02d}"]
        bad = bad_of[r]

        def kept(s, r=r, bad=bad):
            return s.outcome == "passed" or (s.node not in bad and (f"r{r:02d}", s.test_id, s.node) not in nodes_own)
        dropped += sum(s.outcome == "failed" and not kept(s) for s in mine)
        tests = sorted({s.test_id for s in mine if kept(s)},
                       key=lambda t: next(i for i, s in enumerate(mine) if s.test_id == t))
        for t in tests:
            xs = sorted((s for s in mine if s.test_id == t and kept(s)), key=lambda s: (s.attempt, s.started_at))
            expected.append((t, f"r{r:02d}", tuple(s.outcome for s in xs)))
    assert dropped > 0  # some runs had a bad node, so the earlier runs' evidence mattered
    assert [(n.test_id, n.run_id, n.outcomes) for n in night_records(samples)] == expected


def test_an_automatic_quarantine_ends_after_lapse_after_failing_nights_and_the_next_failure_counts():
    """A flaky test passes now and then; one that failed every night since its quarantine is broken:
    after ``lapse_after`` failing nights in a row its failure fails the night again, and says why."""
    rules = FlakyRules(window_nights=14, min_flips=2, quarantine_after=3, release_after=3, lapse_after=3)
    flaky = ["passed", "failed", "passed", "failed"]  # three flips: quarantined on night 4
    two = state_of(history(*flaky, "failed", "failed"), rules)
    assert (two.state, two.failing) == ("quarantined", 2)
    v = night_verdict([attempt(T, "failed")], {T: two})
    assert (v.ok, v.excused, v.quarantine_ended) == (True, (T,), ())
    ended = state_of(history(*flaky, "failed", "failed", "failed"), rules)
    assert (ended.state, ended.by, ended.since, ended.lapsed) == ("released", "flaky rules", "run07", True)
    assert ended.why == ("quarantine ended: failed 3 nights in a row since quarantined (the last in run run07); "
                         "its failures count again")
    v = night_verdict([attempt(T, "failed")], {T: ended})
    assert (v.ok, v.failed, v.excused, v.quarantine_ended) == (False, (T,), (), (T,))
    assert ended_notes(v, {T: ended}) == [f"{T} failed and fails the night: {ended.why} (`nightly quarantine list`)"]
    later = state_of(history(*flaky, *["failed"] * 10), rules)
    assert (later.state, later.lapsed) == ("released", True), "it stays ended while it fails"
    assert state_of(history(*flaky, *["failed"] * 3, "passed"), rules).state == "healthy"
    # a pass, even one on retry, starts the count again
    retry = state_of(history(*flaky, "failed", "failed", ("failed", "passed"), "failed", "failed"), rules)
    assert (retry.state, retry.failing) == ("quarantined", 2)
    assert FlakyRules().lapse_after == FlakyRules().release_after == 5


def test_failures_injected_with_env_neither_count_towards_nor_reset_the_end_of_a_quarantine():
    rules = FlakyRules(window_nights=14, min_flips=2, quarantine_after=3, release_after=3, lapse_after=3)
    inject = env_digest([("MINIRL_FAIL", "test_grpo")])
    nights = [*history("passed", "failed", "passed", "failed", "failed", "failed"),
              *history("failed", "failed", start=7, env=inject)]
    s = state_of(nights, rules)
    assert (s.state, s.failing) == ("quarantined", 2)
    assert state_of([*nights, *history("failed", start=9)], rules).lapsed


def test_a_quarantine_by_hand_never_ends_on_its_own():
    rules = FlakyRules(window_nights=14, min_flips=2, quarantine_after=3, release_after=3, lapse_after=3)
    doc = record(None, T, "add", "alice", "issue #12", "2026-11-01T00:00:00+00:00")
    s = state_of(history("passed", *["failed"] * 8) + history("failed", sha="b" * 64, image="img@2", start=10),
                 rules, overrides=doc)
    assert (s.state, s.by, s.manual, s.lapsed, s.failing) == ("quarantined", "alice", True, False, 9)
    assert night_verdict([attempt(T, "failed")], {T: s}).excused == (T,)
    assert for_tonight({T: s}, {T: ("c" * 64, "img@3")}, "run11") == {T: s}


def test_an_automatic_quarantine_excuses_only_the_code_and_image_it_was_judged_on():
    """The reviewer's case: quarantined on sha aaa, then 25 failing nights of a changed file: the
    quarantine ends on the first night of the new file, whose failure counts."""
    flaky = history("passed", "failed", "passed", "failed")
    q = state_of(flaky)
    assert (q.state, q.sha256, q.image) == ("quarantined", "a" * 64, "img@1")
    changed = state_of(flaky + history(*["failed"] * 25, sha="b" * 64, start=5))
    assert (changed.state, changed.since, changed.lapsed) == ("released", "run05", True)
    assert changed.why == (f"quarantine ended: test file changed since quarantined (sha256 {'a' * 12} -> {'b' * 12}); "
                           "its failures count again")
    v = night_verdict([attempt(T, "failed")], {T: changed})
    assert (v.ok, v.failed, v.quarantine_ended) == (False, (T,), (T,))
    image = state_of(flaky + history("failed", image="img@2", start=5))
    assert image.lapsed and "image changed since quarantined (img@1 -> img@2)" in image.why
    assert state_of(flaky + history("failed", image="", start=5)).state == "quarantined", "no image: the sha alone"
    fixed = state_of(flaky + history("passed", sha="b" * 64, start=5))
    assert fixed.state == "healthy", "the new file passed: nothing to excuse"
    # as the night starts: tonight's file and image decide before any test runs
    assert for_tonight({T: q}, {T: ("a" * 64, "img@1")}, "run05") == {T: q}
    assert for_tonight({T: q}, {T: ("a" * 64, "")}, "run05") == {T: q}
    tonight = for_tonight({T: q}, {T: ("b" * 64, "img@1")}, "run05")[T]
    assert (tonight.state, tonight.since, tonight.lapsed, tonight.why) == ("released", "run05", True, changed.why)


def test_an_ended_quarantine_round_trips_and_a_damaged_one_is_named():
    import json

    from pipelines.core.flaky import recorded_state_problem

    s = state_of(history("passed", "failed", "passed", "failed", "failed", sha="a" * 64))
    d = json.loads(json.dumps(s.to_dict()))  # as a night's record keeps it
    assert FlakyState.from_dict(d) == s and s.failing == 1
    assert recorded_state_problem(d) is None
    assert recorded_state_problem({**d, "failing": -1}) == (("failing",), "expected a whole number >= 0, got -1")
    assert recorded_state_problem({**d, "lapsed": "yes"}) == (("lapsed",), "expected true or false, got 'yes'")
    assert recorded_state_problem({**d, "sha256": 5}) == (("sha256",), "expected a string, got 5")


def test_calibrates_own_est_time_rewrite_is_the_same_code_for_a_quarantine():
    """`nightly calibrate --write` (or its merged patch) rewrites only est_time and records the
    succession: the quarantine judged on the file before it holds, as the calibration keeps its samples
    current; a real edit after the rewrite still ends it, in the replay and as the night starts."""
    from pipelines.core.calibrate.lineage import Lineage, Succession

    old, new, edited = "a" * 64, "b" * 64, "c" * 64
    rewrites = Lineage.of([Succession(old, new, T)])
    flaky = history("passed", "failed", "passed", "failed")
    q = state_of(flaky)
    assert q.state == "quarantined" and q.sha256 == old
    assert for_tonight({T: q}, {T: (new, "img@1")}, "run05", rewrites) == {T: q}
    held = replay(flaky + history("failed", sha=new, start=5), RULES, lineage=rewrites)[T]
    assert (held.state, held.lapsed, held.failing) == ("quarantined", False, 1)
    assert night_verdict([attempt(T, "failed")], {T: held}).excused == (T,)
    # without the record of the rewrite it is another file, as before
    assert replay(flaky + history("failed", sha=new, start=5), RULES)[T].lapsed
    # a real edit after the rewrite has no succession: the quarantine ends
    assert for_tonight({T: q}, {T: (edited, "img@1")}, "run05", rewrites)[T].lapsed
    ended = replay(flaky + history("failed", sha=new, start=5) + history("failed", sha=edited, start=6), RULES,
                   lineage=rewrites)[T]
    assert ended.lapsed and f"(sha256 {'a' * 12} -> {'c' * 12})" in ended.why


def test_a_flip_across_calibrates_own_rewrite_is_a_flip_of_the_same_code():
    """Passed, calibrate rewrote est_time, failed, passed...: the same test flipping, as the
    quarantine (above) and calibration count it; a real edit between two nights is no flip."""
    from pipelines.core.calibrate.lineage import Lineage, Succession

    old, new, edited = "a" * 64, "b" * 64, "c" * 64
    rewrites = Lineage.of([Succession(old, new, T)])
    nights = history("passed", "failed", sha=old) + history("passed", "failed", sha=new, start=3)
    flipping = replay(nights, RULES, lineage=rewrites)[T]
    assert flipping.state == "quarantined", flipping
    assert sum(e.kind == "alternating" for e in flipping.evidence) == 3
    # without the rewrite's record, the flip from run02 to run03 is across two files: not counted
    assert sum(e.kind == "alternating" for e in replay(nights, RULES)[T].evidence) == 2
    edits = history("passed", "failed", sha=old) + history("passed", "failed", sha=edited, start=3)
    assert sum(e.kind == "alternating" for e in replay(edits, RULES, lineage=rewrites)[T].evidence) == 2


def test_a_quarantined_tests_failure_on_the_one_node_all_its_recent_failures_were_on_is_not_excused():
    """A node failing one test a night makes its victims flip (node against no node) and get quarantined
    nights before the cross-night rule can suspect it; their failures on it were then excused (a green
    night with the node still failing). A quarantined test whose recent failures were all on tonight's
    node, and which passed on another, fails the night; one whose failures spread over nodes is excused."""
    from pipelines.core.flaky import night_verdict
    from pipelines.core.health import passed_nodes

    def run(i: int, outcomes: dict[str, tuple[str, str]]) -> list[Sample]:
        return [Sample(t, "h200", "sha", o, 1.0, f"2026-12-0{i}T01:00:0{k}Z", node=n, run_id=f"r{i}")
                for k, (t, (o, n)) in enumerate(outcomes.items())]

    samples = (run(1, {"t/v.py": ("failed", "n1"), "t/f.py": ("failed", "n0"), "t/o.py": ("passed", "n0")})
               + run(2, {"t/v.py": ("passed", "n0"), "t/f.py": ("failed", "n1"), "t/o.py": ("passed", "n1")})
               + run(3, {"t/v.py": ("failed", "n1"), "t/f.py": ("passed", "n0"), "t/o.py": ("passed", "n0")}))
    history = passed_nodes(samples)
    states = {t: FlakyState(t, "quarantined") for t in ("t/v.py", "t/f.py")}
    tonight = [attempt("t/v.py", "failed", "n1"), attempt("t/f.py", "failed", "n1"), attempt("t/o.py", "passed", "n0")]

    v = night_verdict(tonight, states, history)

    assert (v.failed, v.excused) == (("t/v.py",), ("t/f.py",))
    assert night_verdict(tonight, states).excused == ("t/v.py", "t/f.py")  # no history: as before
