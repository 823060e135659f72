"""`nightly ui`: the flags are checked before the Dagster UI is started."""

from __future__ import annotations

import pytest

from pipelines.cli import main


@pytest.mark.parametrize("port", ["0", "65536", "99999", "-1", "http"])
def test_a_port_outside_1_to_65535_is_a_flag_error(tmp_path, capsys, port):
    """dagster-webserver said 'Serving on :99999' and never listened; argparse now stops it (exit 2)."""
    with pytest.raises(SystemExit) as exit_:
        main(["ui", "--home", str(tmp_path), "--print-command", "--port", port])
    assert exit_.value.code == 2
    assert f"argument --port: {port!r} is not a TCP port; give one from 1 to 65535" in capsys.readouterr().err
    assert not (tmp_path / "dagster").exists()


def test_a_port_in_range_reaches_the_command(tmp_path, capsys):
    assert main(["ui", "--home", str(tmp_path), "--print-command", "--port", "65535"]) == 0
    assert "-p 65535" in capsys.readouterr().out


def test_the_printed_command_names_the_state_folder_as_well_as_the_instance(tmp_path, capsys, monkeypatch):
    """Run as printed, the UI's launches, sensors and calibration must read and write the --home folder's
    history, records and reports, not the project's default one."""
    import shlex

    home = tmp_path / "state folder"
    monkeypatch.setenv("NIGHTLY_HOME", str(tmp_path / "elsewhere"))  # restored after: main() sets both
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "elsewhere" / "dagster"))
    assert main(["ui", "--home", str(home), "--print-command"]) == 0
    words = shlex.split(capsys.readouterr().out)
    env = dict(w.split("=", 1) for w in words[:2])
    assert env == {"DAGSTER_HOME": str(home.resolve() / "dagster"), "NIGHTLY_HOME": str(home.resolve())}
    assert words[3:5] == ["dev", "-w"]


@pytest.mark.parametrize("damage", [b"storage: [\n", b"telemetry:\n  enabled: caf\xe9\n", bytes(range(256))],
                         ids=["not YAML", "Latin-1", "random bytes"])
def test_a_damaged_dagster_yaml_is_written_again_as_any_that_differs(tmp_path, capsys, monkeypatch, damage):
    """The instance's dagster.yaml is generated: one that is not UTF-8 text was a UnicodeDecodeError
    traceback and exit 1 from every command that opens the instance, where garbled YAML is rewritten."""
    monkeypatch.setenv("NIGHTLY_HOME", str(tmp_path / "elsewhere"))  # restored after: main() sets both
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "elsewhere" / "dagster"))
    (tmp_path / "dagster").mkdir()
    (tmp_path / "dagster" / "dagster.yaml").write_bytes(damage)
    assert main(["ui", "--home", str(tmp_path), "--print-command"]) == 0
    assert capsys.readouterr().err == ""
    assert "sqlite" in (tmp_path / "dagster" / "dagster.yaml").read_text(encoding="utf-8")
