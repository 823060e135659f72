"""The shared browser helper, against a stand-in Chromium (a script): one page at a time, errors
that name the page, and no browser process left behind."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from tests.support import browser

FAKE = """\
#!{python}
import os, sys
args = sys.argv[1:]
url = args[-1]
if "fail" in url:
    sys.stderr.write("cannot open " + url + "\\n")
    sys.exit(21)
for a in args:
    if a.startswith("--screenshot=") and "blank" not in url:
        open(a.split("=", 1)[1], "wb").write(b"\\x89PNG fake")
if "--dump-dom" in args:
    print("<html><head><style>p {{}}</style></head><body><p>tests &amp; runs</p>"
          "<script>var hidden = 1;</script><p>" + url + "</p></body></html>")
"""


def wait_until(done, limit_s: float = 60) -> bool:
    deadline = time.monotonic() + limit_s
    while not done():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


@pytest.fixture
def fake(tmp_path, monkeypatch) -> Path:
    script = tmp_path / "chromium"
    script.write_text(FAKE.format(python=sys.executable))
    script.chmod(0o755)
    monkeypatch.setattr(browser, "chromium", lambda: str(script))
    monkeypatch.setattr(browser, "LOCK", tmp_path / "chromium.lock")
    return script


def test_dump_dom_gives_the_pages_dom_and_visible_text_keeps_only_what_a_reader_sees(fake):
    dom = browser.dump_dom("http://ui/runs/1")
    assert "<script>" in dom
    assert browser.visible_text(dom).strip() == "tests & runs http://ui/runs/1"


def test_a_session_renders_several_pages_and_remembers_each(fake, tmp_path):
    with browser.session(total_s=600) as pages:
        first = pages.dump_dom("http://ui/a")
        png = pages.screenshot("http://ui/b", tmp_path / "b.png", size=(800, 600))
    assert "http://ui/a" in first
    assert png.read_bytes().startswith(b"\x89PNG")
    assert [url for url, _ in pages.pages] == ["http://ui/a", "http://ui/b"]


def test_a_failing_page_is_an_error_naming_the_page_and_chromiums_message(fake):
    with pytest.raises(browser.BrowserError, match=r"chromium exited with 21 on http://ui/fail:\ncannot open"):
        browser.dump_dom("http://ui/fail")


def test_a_screenshot_chromium_did_not_write_is_an_error(fake, tmp_path):
    with pytest.raises(browser.BrowserError, match=r"chromium wrote no screenshot of http://ui/blank to "):
        browser.screenshot("http://ui/blank", tmp_path / "x.png")


def test_a_session_out_of_time_starts_no_page_and_says_where_the_time_went(fake):
    with browser.session(total_s=600) as pages:
        pages.dump_dom("http://ui/a")
        pages.deadline = time.monotonic() - 1  # as if the first page had used it all
        with pytest.raises(browser.BrowserError, match=r"no time left for http://ui/b: the session's 600 s went "
                                                       r"to http://ui/a \d+ s"):
            pages.dump_dom("http://ui/b")


def test_a_second_session_waits_until_the_first_one_ends(fake):
    order: list[str] = []
    trying = threading.Event()

    def second():
        trying.set()
        with browser.session(total_s=600):
            order.append("second in")

    with browser.session(total_s=600):
        t = threading.Thread(target=second)
        t.start()
        assert trying.wait(60)
        time.sleep(0.2)  # give it the chance to get in (it must not)
        order.append("first out")
    t.join(60)
    assert order == ["first out", "second in"]


def test_killing_a_browser_takes_its_helper_processes_with_it(tmp_path):
    pid_file = tmp_path / "helper.pid"
    code = textwrap.dedent(f"""
        import subprocess, sys, time
        helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        open({str(pid_file)!r}, "w").write(str(helper.pid))
        time.sleep(600)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    assert wait_until(lambda: pid_file.exists() and pid_file.read_text()), "the stand-in never started its helper"
    browser._kill_group(proc)
    helper = int(pid_file.read_text())
    assert proc.returncode is not None
    assert wait_until(lambda: gone(helper)), "the helper outlived its browser"


def gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


def test_without_chromium_the_message_says_how_to_install_it(monkeypatch):
    monkeypatch.setenv("PATH", os.devnull)
    with pytest.raises(browser.BrowserError, match=r"Chromium is missing: `make system-deps` installs it"):
        browser.chromium()
