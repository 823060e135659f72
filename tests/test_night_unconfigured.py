"""What a night gives the tests of a checkout nobody configured."""

from __future__ import annotations

from pipelines.night import Night, NightSettings


def test_an_unconfigured_checkout_goes_first_on_the_inherited_pythonpath_locally_and_pods_keep_the_images(
        tmp_path, monkeypatch):
    """``python3 FILE`` puts only the test's folder on the path; the framework's CI has installed the
    checkout first, so an unconfigured one runs with its root ahead of the PYTHONPATH the shell has
    (never instead: a library folder there stays importable). Pods run the framework's image, which
    has it installed: their env sets no PYTHONPATH, so the image's stays whole."""
    monkeypatch.setenv("NIGHTLY_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PYTHONPATH", "/opt/extlib")
    (tmp_path / "fw" / "tests").mkdir(parents=True)
    night = Night(NightSettings(repo=str(tmp_path / "fw")))
    assert night.test_env()["PYTHONPATH"] == f"{(tmp_path / 'fw').resolve()}:/opt/extlib"
    assert any("PYTHONPATH=<checkout> ahead of the shell's" in line for line in night.registered.assumptions)
    assert "PYTHONPATH" not in night.pod_settings()["env"]
    monkeypatch.delenv("PYTHONPATH")
    assert night.test_env()["PYTHONPATH"] == str((tmp_path / "fw").resolve())
