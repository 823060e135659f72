"""``nightly ui``: the Dagster UI (``dagster dev -w workspace.yaml``) on the project's instance."""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import sys

from pipelines.cli import flags


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("ui", help="open the Dagster UI on the nightly's instance", description=__doc__)
    p.add_argument("--port", type=_port, default=3000, help="the port the UI listens on (default: 3000)")
    p.add_argument("--host", default="127.0.0.1",
                   help="the address the UI listens on (default: 127.0.0.1; 0.0.0.0 for every interface)")
    p.add_argument("--home", type=flags.path, help="state folder (default: $NIGHTLY_HOME or .nightly/)")
    p.add_argument("--print-command", action="store_true", help="print the command instead of running it")
    p.set_defaults(func=run)


def _port(text: str) -> int:
    """A TCP port (1 to 65535): dagster-webserver takes 99999 without a word and never listens."""
    try:
        port = int(text)
    except ValueError:
        port = 0
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a TCP port; give one from 1 to 65535, e.g. --port 3001")
    return port


def command(port: int, host: str) -> list[str]:
    from pipelines.night import PROJECT_ROOT

    dagster = shutil.which("dagster", path=os.path.dirname(sys.executable)) or "dagster"
    return [dagster, "dev", "-w", str(PROJECT_ROOT / "workspace.yaml"), "-h", host, "-p", str(port)]


def run(args: argparse.Namespace) -> int:
    from pipelines.instance import ensure_dagster_home, open_instance
    from pipelines.night import default_home

    home = (args.home or default_home()).resolve()
    ensure_dagster_home(home)
    argv = command(args.port, args.host)
    if args.print_command:
        # both: run as printed, the UI's runs, sensors and calibration use this state folder, not the default one
        env = {"DAGSTER_HOME": os.environ["DAGSTER_HOME"], "NIGHTLY_HOME": str(home)}
        print(" ".join([*(f"{k}={shlex.quote(v)}" for k, v in env.items()), *map(shlex.quote, argv)]))
        return 0
    open_instance(home).dispose()  # create the SQLite tables now: a night starting beside the UI races otherwise
    print(f"nightly ui: http://{args.host}:{args.port} (instance {os.environ['DAGSTER_HOME']}); Ctrl-C stops it", flush=True)
    print(f"  asset graph: http://{args.host}:{args.port}/assets/test_runs?view=lineage&lineageDepth=5", flush=True)
    os.execv(argv[0], argv)
    return 0
