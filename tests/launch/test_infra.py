"""What a local test's "image" is: this interpreter's installed distributions, the same from any working folder."""

from __future__ import annotations

from importlib import metadata

from pipelines.launch import infra


def _egg_info(folder, name: str, version: str) -> None:
    """What `pip install -e .` leaves in a checkout: a distribution's metadata that is no installed package."""
    info = folder / f"{name.replace('-', '_')}.egg-info"
    info.mkdir(parents=True)
    (info / "PKG-INFO").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def test_the_environment_digest_is_the_same_from_a_checkout_holding_an_egg_info(tmp_path, monkeypatch):
    elsewhere, checkout = tmp_path / "elsewhere", tmp_path / "checkout"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    baseline = infra.environment_digest()
    try:  # a copy of an installed distribution's egg-info (counted twice before), and one installed nowhere
        dist = metadata.distribution("dagster")
        _egg_info(checkout, dist.metadata["Name"], dist.version)
    except metadata.PackageNotFoundError:
        checkout.mkdir()
    _egg_info(checkout, "not-installed-here", "9.9")
    monkeypatch.chdir(checkout)
    monkeypatch.syspath_prepend("")  # `python -m pipelines ...` from the checkout's root
    monkeypatch.syspath_prepend(str(checkout))  # or the checkout on PYTHONPATH
    assert infra.environment_digest() == baseline
    assert all(d.endswith(("site-packages", "dist-packages")) for d in infra.site_dirs())
