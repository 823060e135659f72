"""``nightly readd``: put back what a night kept when its store refused writes.

  nightly readd [--deployment D] [--home DIR] FOLDER

FOLDER is the one ``nightly run`` named when it exited 4 (``<home>/unsaved/<night>/``, or
``$TMPDIR/nightly-unsaved/<home id>/<night>/`` when the home's disk was full); its README.txt gives
this command with the right flags. It adds the kept samples (``history.jsonl``) to the deployment's
history, each attempt once (running it twice adds nothing), stores the kept logs and the night's
record under the keys the night would have written (``logs/<night>/``, ``nights/<night>.json``,
``runs/<run id>.json``), and makes that record ``nights/latest.json`` unless a night that started later
has written its own there. Exit status: 0 when everything was put back; 1 when a line of
``history.jsonl`` did not read (cut off by a full disk: each is listed as file:line: field, the other
lines are added); 2 when FOLDER is no kept folder or the store refuses (nothing is lost: run it again
when the store takes writes).
"""

from __future__ import annotations

import argparse
import sys

from pipelines.cli import flags


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("readd", help="put back a night's results its store refused (the folder `nightly run` named)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--deployment", help="deployment in assets/cluster.yaml whose stores take them back (default: "
                                        "$NIGHTLY_DEPLOYMENT, else local)")
    p.add_argument("--home", type=flags.path, help="state folder of a local deployment (default: $NIGHTLY_HOME or "
                                                   ".nightly/)")
    p.add_argument("folder", type=flags.path, metavar="FOLDER", help="the folder the night kept them in "
                                                                    "(<home>/unsaved/<night>)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pipelines.core.specs import load_specs
    from pipelines.night import default_home, readd_unsaved
    from pipelines.storage.history import history_store
    from pipelines.storage.state import state_store

    home = (args.home or default_home()).resolve()
    deployment = load_specs().deployment(args.deployment)
    done = readd_unsaved(args.folder, state_store(deployment, home), history_store(deployment, home))
    print(f"readd: {done.samples} samples ({done.new} new, {done.samples - done.new} already stored), "
          f"{len(done.stored)} files of the night's state")
    for night in done.latest:
        print(f"readd: nights/latest.json is night {night}'s record")
    if not done.latest:
        print("readd: nights/latest.json left as it is: it holds a night that started later")
    for problem in done.problems:
        print(f"  {problem}", file=sys.stderr)
    return 1 if done.problems else 0
