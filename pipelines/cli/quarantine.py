"""``nightly quarantine``: flaky and quarantined tests, and who put them there or let them out.

  nightly quarantine list [--json] [--all] [--home DIR] [--repo R] [--deployment D]
  nightly quarantine add TEST --by WHO --why TEXT [--home DIR] [--repo R] [--deployment D]
  nightly quarantine release TEST --by WHO --why TEXT [--home DIR] [--repo R] [--deployment D]

States come from history (the repo's ``flaky:`` rules) with the manual actions recorded in
``<home>/quarantine/<repo>.json`` applied at the time they were made. Only the repo's own tests
are listed or accepted (its catalog's; without one, those its quarantine file and nights name). A quarantined test still
runs; its failure does not fail the night, but an infra error or a bad node always does.
A quarantine added by hand holds until released by hand (``list`` says how many nights in a row
it has failed since); one the rules made ends when the test file or image changes, or after
``lapse_after`` failing nights in a row, and keeps the evidence that made it (``list`` shows the
clean and failing nights since on a line of their own). ``list`` shows the states after the last night, and says
of a quarantine whose test file has changed since that it ends when it next runs
(``ends_next_run`` in ``--json``); an image change is only seen when a night probes it.

Exit status: 0 done; 1 ``release`` of a test that is not quarantined now (never was, or already
released), or ``add`` of a test already quarantined by hand (nothing is recorded); 2 bad input (an unknown test,
an empty TEST, an empty --by/--why or one with control characters such as a line break or a terminal escape, a
--by over 100 or a --why over 500 characters, an unreadable state store, or a quarantine file that is not exactly
``{"version": 1, "actions": [{test, action, by, why, at}, ...]}``: each problem is located as
``FILE:LINE: actions[i].field: ...`` and the file is left as it is, never rewritten without it).
"""

from __future__ import annotations

import argparse
import json
import sys
import unicodedata
from datetime import UTC, datetime

from pipelines.cli.report import add_common, default_home, repo_context
from pipelines.core.model import CatalogError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("quarantine", help="list flaky and quarantined tests; add or release a quarantine",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    qs = p.add_subparsers(dest="quarantine_command", metavar="{list,add,release}")
    qs.required = True
    show = qs.add_parser("list", help="tests that are flaky, quarantined or released, with evidence")
    add_common(show)
    show.add_argument("--json", action="store_true", help="print the states as JSON")
    show.add_argument("--all", action="store_true", help="also list healthy tests")
    for action, text in (("add", "quarantine a test by hand"), ("release", "release a quarantined test by hand")):
        q = qs.add_parser(action, help=text)
        add_common(q)
        q.add_argument("test", metavar="TEST", help="the test id, as `nightly catalog` prints it")
        q.add_argument("--by", required=True, metavar="WHO", help="who decides (recorded)")
        q.add_argument("--why", required=True, metavar="TEXT", help="why, e.g. an issue link (recorded)")
    p.set_defaults(func=run)


def repo_tests(name: str, inputs, store) -> tuple[set[str], str]:
    """The ids of the repo's tests, and ``""`` or, when its catalog gave none, which records they come from.

    Every repo's nights write to one history store, so history alone would give other repos' tests.
    Without a catalog: the tests its quarantine document and its night summaries name.
    """
    from pipelines.core.flaky import own_tests

    if inputs.tests:
        return own_tests((t.id for t in inputs.tests), inputs.quarantine), ""
    from pipelines.reporting.inputs import night_keys, night_of, read_summary

    named, nights = [], 0
    for key in night_keys(store):
        try:
            summary = read_summary(store, key)
        except CatalogError:
            continue  # `nightly report` names a damaged summary; here it names no test
        if not night_of(summary, name):  # its own, or recorded under its folder name before it had a digest
            continue
        nights += 1
        named += [a["test_id"] for a in summary["attempts"]] + list(summary.get("selected", ()))
    return own_tests((), inputs.quarantine, named), \
        f"no tests from the catalog of {name}; using the tests its quarantine document and its {nights} night(s) name"


def _list(args: argparse.Namespace) -> int:
    from pipelines.core.flaky import changed_since, replay

    home = (args.home or default_home()).resolve()
    name, inputs, store = repo_context(home, args.repo, args.deployment)
    mine, fallback = repo_tests(name, inputs, store)
    if fallback:
        print(f"nightly quarantine list: warning: {fallback}", file=sys.stderr)
    states = {k: s for k, s in replay(inputs.samples, inputs.rules, inputs.quarantine, inputs.rewrites).items()
              if k in mine}
    shown = [s for _, s in sorted(states.items()) if args.all or s.state != "healthy"]
    # what the next night that runs the test starts from: an automatic quarantine of a changed file ends then
    # (the image is only known once a night probes it); calibrate's own est_time rewrite is no change
    files = {t.id: t.sha256 for t in inputs.tests}
    ending = {s.test_id: why for s in shown
              if (why := changed_since(s, files.get(s.test_id, ""), "", inputs.rewrites))}
    if args.json:
        print(json.dumps([{**s.to_dict(), **({"ends_next_run": ending[s.test_id]} if s.test_id in ending else {})}
                          for s in shown], indent=1))
        return 0
    if not shown:
        print(f"quarantine: no flaky or quarantined tests in {name} ({len(states)} tests in history)")
        return 0
    for s in shown:
        who = f" by {s.by}" if s.by else ""
        # a hold by hand never ends on its own: whoever holds it sees how long the test has not passed
        failing = f"; failed {s.failing} night(s) in a row since quarantined" if s.state == "quarantined" and s.failing else ""
        ends = f"; ends when it next runs: {ending[s.test_id]}" if s.test_id in ending else ""
        print(f"{s.state:<11} {s.test_id}  since {s.since or '-'}{who}: {s.why or '-'}{failing}{ends}")
        for e in s.evidence:
            print(f"            - {e.text}")
        if s.state == "quarantined" and not s.manual:  # what came after, apart from the evidence that quarantined it
            print(f"            since quarantined: {s.passes} clean passing night(s) in a row of the "
                  f"{inputs.rules.release_after} that release it; {s.failing} failing night(s) in a row of the "
                  f"{inputs.rules.lapse_after} that end it")
    return 0


def control_characters(flag: str, value: str) -> str | None:
    """Why a --by/--why value cannot be recorded: it is printed as is by `quarantine list` and the
    report, where a line break forges a line and an escape sequence repaints the terminal."""
    found = sorted({c for c in value if unicodedata.category(c) == "Cc"}, key=value.index)
    if not found:
        return None
    what = "a control character" if len(found) == 1 else "control characters"
    return (f"{flag}: {value!r} contains {what} ({', '.join(repr(c) for c in found)}); give one line of plain "
            "text (line breaks, tabs and terminal escapes would garble `quarantine list` and the report)")


def suggestions(typed: str, known) -> list[str]:
    """Up to five test ids a mistyped TEST may mean: those containing it (a file of several variants,
    a path's tail), then up to three closest spellings, closest first (``test_lora_mat.py`` for
    ``test_lora_math.py``). Typed without a ``::variant``, a variant's id is compared by its file."""
    import difflib

    near = sorted(t for t in known if typed in t)
    by_file: dict[str, list[str]] = {}
    for t in sorted(known):
        by_file.setdefault(t if "::" in typed else t.split("::")[0], []).append(t)
    close = difflib.get_close_matches(typed, by_file, n=3, cutoff=0.8)
    near += [t for key in close for t in by_file[key] if t not in near]
    return near[:5]


class _Unchanged(Exception):
    """The action would change nothing on the document as it is now (another writer may have got there first)."""


def _record(args: argparse.Namespace) -> int:
    from pipelines.core.flaky import record
    from pipelines.reporting.state import update_doc

    if not args.test.strip():  # before any state is read: '' is in every id and would "suggest" them all
        print(f"nightly quarantine {args.quarantine_command}: TEST: must not be empty; say which test (its id as "
              "`nightly catalog` prints it)", file=sys.stderr)
        return 2
    from pipelines.core.flaky import length_problem

    for flag, value in (("--by", args.by), ("--why", args.why)):
        bad = control_characters(flag, value) or length_problem(flag, value)
        if bad:  # before any state is read: nothing is recorded
            print(f"nightly quarantine {args.quarantine_command}: {bad}", file=sys.stderr)
            return 2
    home = (args.home or default_home()).resolve()
    name, inputs, store = repo_context(home, args.repo, args.deployment)
    known, fallback = repo_tests(name, inputs, store)
    if args.test not in known:
        near = suggestions(args.test, known)
        hint = f"; did you mean: {', '.join(near)}" if near else "; `nightly catalog` lists the test ids"
        if fallback:
            hint = f" ({fallback}, and it is not one of them){hint}; fix the catalog first"
        print(f"nightly quarantine {args.quarantine_command}: TEST: {args.test!r} is not a test of {name}{hint}",
              file=sys.stderr)
        return 2
    from pipelines.core.flaky import not_addable, not_releasable, replay

    refuse, said, instead = {
        "release": (not_releasable, "is not quarantined", "`nightly quarantine list` shows the quarantined tests"),
        "add": (not_addable, "is not added again", "`nightly quarantine release` first to change who holds it or why"),
    }[args.quarantine_command]
    at = datetime.now(UTC).isoformat(timespec="seconds")

    def change(doc: dict) -> dict:
        # checked against the document as stored now, under the store's lock or conditional write: another
        # `quarantine add|release` that got there first is seen, never overwritten
        why_not = refuse(replay(inputs.samples, inputs.rules, doc, inputs.rewrites).get(args.test))
        if why_not:
            raise _Unchanged(why_not)
        return record(doc, args.test, args.quarantine_command, args.by, args.why, at)

    try:
        where = update_doc(store, name, change, inputs.legacy_checkout)
    except _Unchanged as exc:  # nothing would change: say where the test stands, record nothing
        print(f"nightly quarantine {args.quarantine_command}: TEST: {args.test} {said} ({exc}); nothing changed; "
              f"{instead}", file=sys.stderr)
        return 1
    except CatalogError:  # the stored document became unusable meanwhile: main() says where, nothing is written
        raise
    except ValueError as exc:
        print(f"nightly {exc}", file=sys.stderr)
        return 2
    verb = "quarantined" if args.quarantine_command == "add" else "released"
    print(f"quarantine: {args.test} {verb} by {args.by.strip()} at {at}: {args.why.strip()} ({where})")
    return 0


def run(args: argparse.Namespace) -> int:
    from pipelines.cli.flags import error_status, unanswered
    from pipelines.storage.state import StateError

    try:
        return _list(args) if args.quarantine_command == "list" else _record(args)
    except StateError as exc:  # the state store (local folder or S3) cannot be read or written
        print(f"nightly quarantine: error: {exc}{unanswered(exc)}", file=sys.stderr)
        return error_status(exc)
