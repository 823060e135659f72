"""The quarantine document as a maintainer may have edited it by hand: read strictly, located, never overwritten."""

from __future__ import annotations

import json
import textwrap

import pytest

from pipelines.core.model import CatalogError
from pipelines.reporting.state import load_doc, save_doc, update_doc
from pipelines.storage.state import LocalStateStore

T = "tests/e2e/megatron/test_sft_math.py"
GOOD = {"test": T, "action": "add", "by": "alice", "why": "issue #7", "at": "2026-11-01T09:00:00+00:00"}
ASIDE = "fix it by hand, or move the file aside to start an empty quarantine"


def stored(tmp_path, text: str) -> LocalStateStore:
    (tmp_path / "quarantine").mkdir(exist_ok=True)
    (tmp_path / "quarantine" / "minirl.json").write_text(text)
    return LocalStateStore(tmp_path)


def error_of(tmp_path, text: str) -> str:
    with pytest.raises(CatalogError) as err:
        load_doc(stored(tmp_path, text), "minirl")
    return str(err.value).replace(f"{tmp_path}/", "")


def test_a_misspelled_actions_key_is_an_error_not_an_empty_quarantine(tmp_path):
    text = json.dumps({"version": 1, "actions_": [GOOD]})
    assert error_of(tmp_path, text) == (
        "quarantine/minirl.json:1: actions_: unknown key; did you mean 'actions'? a quarantine document is "
        '{"version": 1, "actions": [...]}; ' + ASIDE)


def test_a_version_other_than_1_is_refused(tmp_path):
    assert error_of(tmp_path, '{"version": 2, "actions": []}') == (
        "quarantine/minirl.json:1: version: expected 1, got 2 (written by a newer nightly-e2e?); " + ASIDE)
    assert error_of(tmp_path, '{"actions": []}').startswith("quarantine/minirl.json:1: version: missing; ")


@pytest.mark.parametrize(("field", "value", "said"), [
    ("action", "addd", "unknown action 'addd'; use add or release"),
    ("test", "../x", "'../x' is not a test id (contains '..'); use the id as `nightly catalog` prints it"),
    ("by", 5, "expected a string, got 5 (int)"),
    ("why", " ", "must not be empty; say why, e.g. an issue link"),
    ("at", "yesterday", "'yesterday' is not an ISO-8601 time; write it like 2026-11-01T09:00:00+00:00"),
])
def test_each_bad_field_is_located_at_its_line_with_what_to_do(tmp_path, field, value, said):
    text = json.dumps({"version": 1, "actions": [GOOD, {**GOOD, field: value}]}, indent=1)
    line = next(i for i, x in enumerate(text.splitlines(), 1) if x.strip().startswith(f'"{field}"') and i > 9)
    assert error_of(tmp_path, text) == f"quarantine/minirl.json:{line}: actions[1].{field}: {said}; {ASIDE}"


def test_every_problem_is_listed_with_its_own_line(tmp_path):
    text = textwrap.dedent("""\
        {"version": 1,
         "actions": [
          {"test": "tests/e2e/a.py", "action": "add", "by": "alice", "why": "w", "at": "2026-11-01T09:00:00Z"},
          {"test": "tests/e2e/a.py", "action": "hold", "by": "bob", "why": "w", "at": "2026-11-02T09:00:00Z",
           "note": "x"},
          "add tests/e2e/b.py",
          {"test": "tests/e2e/c.py", "action": "release"}
         ]}
        """)
    assert error_of(tmp_path, text).splitlines() == [
        f"quarantine/minirl.json:4: actions[1].action: unknown action 'hold'; use add or release; {ASIDE}",
        f"quarantine/minirl.json:5: actions[1].note: unknown key; an action has test, action, by, why, at; {ASIDE}",
        f"quarantine/minirl.json:6: actions[2]: expected an object {{test, action, by, why, at}}, got str; {ASIDE}",
        f"quarantine/minirl.json:7: actions[3]: missing by, why, at; every action needs test, action, by, why, at; "
        f"{ASIDE}",
    ]


def test_a_document_that_failed_to_load_is_never_overwritten(tmp_path):
    text = json.dumps({"version": 1, "actions_": [GOOD]})
    store = stored(tmp_path, text)
    with pytest.raises(CatalogError):
        update_doc(store, "minirl", lambda doc: {"version": 1, "actions": [*doc.get("actions", []), GOOD]})
    assert (tmp_path / "quarantine" / "minirl.json").read_text() == text


def test_a_document_saved_as_latin_1_is_never_rewritten_by_a_change(tmp_path):
    """The store hands a change a file that is no UTF-8 text with the bad bytes as U+FFFD (a damaged
    nights/latest.json is then replaced); the quarantine's "caf\ufffd" must not replace the maintainer's "café"."""
    from pipelines.storage.state import StateError

    latin1 = json.dumps({"version": 1, "actions": [{**GOOD, "why": "caf\u00e9"}]}, ensure_ascii=False).encode("latin-1")
    (tmp_path / "quarantine").mkdir()
    (tmp_path / "quarantine" / "minirl.json").write_bytes(latin1)
    with pytest.raises(StateError, match=r"minirl.json: not UTF-8 text \(byte 0xe9 at offset \d+\); re-save it as UTF-8"):
        update_doc(LocalStateStore(tmp_path), "minirl", lambda doc: {**doc, "actions": [*doc["actions"], GOOD]})
    assert (tmp_path / "quarantine" / "minirl.json").read_bytes() == latin1


def test_a_good_document_round_trips_and_a_bad_one_is_not_written(tmp_path):
    store = LocalStateStore(tmp_path)
    doc = {"version": 1, "actions": [GOOD]}
    save_doc(store, "minirl", doc)
    assert load_doc(store, "minirl") == doc
    with pytest.raises(ValueError, match=r"actions\[1\]\.action: unknown action 'addd'"):
        save_doc(store, "minirl", {"version": 1, "actions": [GOOD, {**GOOD, "action": "addd"}]})
    assert load_doc(store, "minirl") == doc
