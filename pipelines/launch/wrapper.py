"""Runs inside the test's process: import a test file as a module and call its ``execute()``.

Why not ``python3 tests/test_x.py``? Its ``__main__`` calls ``prepare()`` first, which downloads
and converts again; the orchestrator's assets have already done that work at the paths the test
expects. Importing the file under a non-``__main__`` name runs its registrations (no-ops) and
module constants, then only ``execute()`` is called.

Standard library only (plus optional dagster-pipes): this file must also run inside a framework's
own image. It writes a small JSON result (measured time of ``execute()`` alone, error text) and,
when launched by Dagster Pipes, reports the same fields through Pipes.

The result is the positive evidence of a pass: it is written only after ``execute()`` returned
(``"finished": true`` and the attempt's token), so a test that calls ``os._exit(0)`` halfway is
not taken for a pass by its exit code. With ``--deadline-s`` the wrapper also kills its own
process group past that deadline: a test the night lost track of (night killed with ``kill -9``)
still cannot run for ever.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import signal
import sys
import threading
import time
import traceback


def _load_module(path: str):
    name = "nightly_test_" + "".join(c if c.isalnum() else "_" for c in path)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path}: cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _write_result(path: str | None, result: dict) -> None:
    """Write the record atomically (tmp + rename), or in place where a rename cannot work.

    On Kubernetes the path is the container's termination-message file, ``/dev/termination-log``:
    a file the kubelet bind-mounts, so a rename onto it fails (and ``/dev`` may not be writable).
    It is written in place then, as is any target that is not a regular file, and kept under the
    4096 bytes the kubelet reads (a longer record would be cut into invalid JSON): the error text
    is shortened first.
    """
    if not path:
        return
    in_place = path == "/dev/termination-log" or (os.path.exists(path) and not os.path.isfile(path))
    if not in_place:
        tmp = f"{path}.tmp"
        try:
            with open(tmp, "w", encoding="utf-8") as fh:
                json.dump(result, fh)
            os.replace(tmp, path)
            return
        except OSError:  # e.g. EBUSY: a bind-mounted file under another name
            try:
                os.unlink(tmp)
            except OSError:
                pass
    text, error = json.dumps(result), str(result.get("error") or "")
    while len(text.encode()) > 4096 and error:
        error = error[: len(error) // 2]
        text = json.dumps({**result, "error": error + " [cut]"})
    if len(text.encode()) > 4096:  # a huge path: keep what a pass is judged by
        text = json.dumps({k: result[k] for k in ("ok", "exit_code", "finished", "token") if k in result})
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)


def _report_pipes(result: dict) -> None:
    """Report through Dagster Pipes when the launcher opened a Pipes session (Kubernetes)."""
    if "DAGSTER_PIPES_CONTEXT" not in os.environ:
        return
    try:
        from dagster_pipes import open_dagster_pipes
    except ImportError:
        return
    with open_dagster_pipes() as pipes:
        pipes.report_custom_message(result)


def _deadline(seconds: float) -> None:
    """Kill this process group after ``seconds`` (a backstop: the launcher kills it first)."""

    def fire() -> None:
        try:  # the night that read our output may be gone (a broken pipe must not stop the kill)
            print(f"# nightly wrapper: deadline of {seconds:g} s passed; killing the test's process group",
                  file=sys.stderr, flush=True)
        finally:
            os.killpg(os.getpgrp(), signal.SIGKILL)

    timer = threading.Timer(seconds, fire)
    timer.daemon = True
    timer.start()


def _fresh_signals() -> None:
    """Give the test the signals a shell would: nothing blocked, nothing ignored that stops it.

    Masks and ignored signals survive fork and exec, so a night started in the background
    (SIGINT ignored) or from a thread that blocks signals would hand them on, and the test would
    then ignore the SIGTERM the launcher sends at its timeout, losing its chance to clean up.
    """
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_SETMASK, set())
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        if signal.getsignal(sig) == signal.SIG_IGN:
            signal.signal(sig, signal.SIG_DFL)
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipelines.launch.wrapper")
    parser.add_argument("--file", required=True, help="test file, relative to the working directory")
    parser.add_argument("--func", default="execute", help="function to call (default: execute)")
    parser.add_argument("--result", help="write a JSON result here")
    parser.add_argument("--deadline-s", type=float, default=0,
                        help="kill the own process group after this many seconds (0: never)")
    parser.add_argument("args", nargs="*", help="arguments the test sees in sys.argv[1:]")
    ns = parser.parse_args(argv)

    _fresh_signals()
    # as `python3 tests/x.py` would: the file's own folder first, then the checkout
    if ns.deadline_s > 0 and os.getpgrp() == os.getpid():  # only when it leads its own group
        _deadline(ns.deadline_s)
    sys.path[:0] = [os.path.dirname(os.path.abspath(ns.file)), os.getcwd()]
    sys.argv = [ns.file, *ns.args]
    result: dict = {"file": ns.file, "func": ns.func, "ok": False, "exit_code": 1}
    started = time.monotonic()
    try:
        module = _load_module(ns.file)
        func = getattr(module, ns.func, None)
        if not callable(func) and ns.func == "execute" and not hasattr(module, "prepare"):
            # a plain test script (unittest style, as SGLang-family runners run them): run it as its
            # runner would, `python3 FILE`; it has no prepare() whose downloads we would repeat
            import runpy

            def func() -> None:
                runpy.run_path(ns.file, run_name="__main__")
        if not callable(func):
            raise AttributeError(f"{ns.file}: has no function {ns.func}(); the nightly calls it to run the test")
        call_started = time.monotonic()
        func()
        result.update(ok=True, exit_code=0, execute_s=round(time.monotonic() - call_started, 3))
    except SystemExit as exc:
        code = int(exc.code) if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if exc.code not in (None, 0) and not isinstance(exc.code, int):
            print(exc.code, file=sys.stderr)
        result.update(ok=code == 0, exit_code=code, error="" if code == 0 else f"SystemExit({exc.code!r})")
    except BaseException as exc:  # the test's own failure: report it, never hide it
        traceback.print_exc()
        result.update(error=f"{type(exc).__name__}: {exc}")
    result["elapsed_s"] = round(time.monotonic() - started, 3)
    result["finished"] = True
    result["token"] = os.environ.get("NIGHTLY_ATTEMPT_TOKEN", "")
    sys.stdout.flush()
    sys.stderr.flush()
    _write_result(ns.result, result)
    _report_pipes(result)
    return int(result["exit_code"])


if __name__ == "__main__":
    sys.exit(main())
