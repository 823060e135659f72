"""What a night gives the tests of a checkout nobody configured."""

from __future__ import annotations

from pipelines.night import Night, NightSettings


def test_an_unconfigured_checkouts_tests_import_it_as_after_pip_install_e(tmp_path, monkeypatch):
    """``python3 FILE`` puts only the test's folder on the path; the framework's CI has installed the
    checkout first, so an unconfigured one runs with its root on PYTHONPATH (a configured repo says
    what it needs in repos.yaml's env:)."""
    monkeypatch.setenv("NIGHTLY_HOME", str(tmp_path / "home"))
    (tmp_path / "fw" / "tests").mkdir(parents=True)
    night = Night(NightSettings(repo=str(tmp_path / "fw")))
    assert night.test_env()["PYTHONPATH"] == str((tmp_path / "fw").resolve())
    assert any("PYTHONPATH=<checkout>" in line for line in night.registered.assumptions)
