"""When headless Chromium fails, the report says what happened and what to do, never a traceback.

A stand-in ``chromium`` script on PATH plays each failure (it exits non-zero, never finishes,
or writes no picture); the real browser is exercised in test_report_browser.py.
"""

from __future__ import annotations

import stat

import pytest

from pipelines.reporting.browser import BrowserError, browse, screenshot


@pytest.fixture
def fake_chromium(tmp_path, monkeypatch):
    """Install a ``chromium`` whose body is the given shell lines."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))

    def install(body: str) -> None:
        script = bin_dir / "chromium"
        script.write_text(f"#!/bin/sh\n{body}\n")
        script.chmod(script.stat().st_mode | stat.S_IEXEC)

    return install


def test_a_chromium_that_fails_is_named_with_its_last_words_and_how_to_check_it(fake_chromium, tmp_path):
    fake_chromium("echo 'noise' >&2; echo 'Failed to open display' >&2; exit 3")
    page = tmp_path / "night.html"
    page.write_text("<p>ok</p>")
    with pytest.raises(BrowserError) as err:
        browse(page, "--dump-dom")
    assert str(err.value) == (f"chromium exited 3 on {page}: Failed to open display; check that "
                              f"`chromium --headless --dump-dom {page}` works here (`make system-deps` installs it)")


def test_a_chromium_that_never_finishes_is_stopped_and_said_so(fake_chromium, tmp_path):
    fake_chromium("exec /bin/sleep 60")
    page = tmp_path / "night.html"
    page.write_text("<p>ok</p>")
    with pytest.raises(BrowserError) as err:
        browse(page, "--dump-dom", timeout_s=0.5)
    assert str(err.value) == (f"chromium did not finish {page} within 0.5 s and was stopped; on a loaded machine run "
                              "the command again, or open the page in a browser")


def test_a_chromium_that_writes_no_picture_says_where_it_should_be(fake_chromium, tmp_path):
    fake_chromium("exit 0")
    page = tmp_path / "night.html"
    page.write_text("<p>ok</p>")
    with pytest.raises(BrowserError) as err:
        screenshot(page, tmp_path / "shots" / "night.png")
    assert str(err.value) == (f"chromium wrote no screenshot to {tmp_path / 'shots' / 'night.png'}; check that "
                              f"`chromium --headless --screenshot=PNG {page}` works here")


def test_a_screenshot_under_a_file_is_an_error_before_the_browser_starts(tmp_path, fake_chromium):
    fake_chromium(f"touch {tmp_path / 'started'}")
    (tmp_path / "file").write_text("")
    with pytest.raises(BrowserError, match=r"cannot write the screenshot .*/file/x\.png \(.*\); give a writable path"):
        screenshot(tmp_path / "page.html", tmp_path / "file" / "x.png")
    assert not (tmp_path / "started").exists()
