"""The retention of ``<home>/logs/<night>/``: only night folders, never a running night's, never through a link."""

from __future__ import annotations

import os

from pipelines.storage.night_logs import RUNNING_LOCK, hold_running, prune

NIGHTS = [f"2026-12-0{d}T010000Z-abcd000{d}" for d in range(1, 6)]


def test_only_night_folders_older_than_the_last_n_go_and_a_link_is_never_followed(tmp_path):
    logs, elsewhere = tmp_path / "logs", tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "precious").write_text("keep\n")
    for n in NIGHTS[:4]:
        (logs / n).mkdir(parents=True)
        (logs / n / "t.attempt1.log").write_bytes(b"x" * 1000)
    (logs / "2026-11-30T010000Z-linked00").symlink_to(elsewhere, target_is_directory=True)
    (logs / "builds").mkdir()
    held = hold_running(logs, NIGHTS[4])  # tonight
    done = prune(logs, NIGHTS[4], 3, running={NIGHTS[0]})
    assert sorted(os.listdir(logs)) == sorted(["builds", "2026-11-30T010000Z-linked00", NIGHTS[0], *NIGHTS[2:]])
    assert (done.removed, done.freed_bytes, done.running) == ([NIGHTS[1]], 1000, [NIGHTS[0]])
    assert (elsewhere / "precious").read_text() == "keep\n"
    assert done.line(logs) == (f"removed the logs of 1 night(s) older than the last 3 (1 kB) from {logs}; "
                               f"kept 1 older night(s) still running ({NIGHTS[0]})")
    assert (logs / NIGHTS[4] / RUNNING_LOCK).exists() and not [p for p in os.listdir(logs) if "starting" in p]
    # tonight's lock is held: another night (keep 1) keeps it as running
    later = prune(logs, "2026-12-09T010000Z-later000", 1, set())
    assert (later.running, later.removed) == ([NIGHTS[4]], [NIGHTS[3], NIGHTS[2], NIGHTS[0]])
    held.close()  # its night ended
    assert prune(logs, "2026-12-09T010000Z-later000", 1, set()).removed == [NIGHTS[4]]
    assert prune(tmp_path / "nothing", NIGHTS[4], 1, set()).line(logs) == ""
