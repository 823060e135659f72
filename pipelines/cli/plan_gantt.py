"""``nightly plan --gantt FILE``: the plan drawn one row per GPU (and CPU rows), and which file that is.

The chart is written where the user can find it: the path printed is the path written (a name
without a suffix gets ``.png``), a folder, a missing tree of folders or a folder this user cannot
write is refused up front, and a write that fails anyway (``/proc``, a full disk) is the flag's error.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from pipelines.cli.flags import FlagError
from pipelines.core.model import Plan

GANTT_FORMATS = (".png", ".svg", ".pdf")


def gantt_arg(text: str) -> Path:
    """``type=`` of ``--gantt``: an empty value is a usage error (exit 2) that asks for a file, since a
    folder is refused too (:func:`gantt_path`)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"empty path; give a file name ({', '.join(GANTT_FORMATS)}), e.g. "
                                         "--gantt plan.png, or leave the flag out")
    return Path(text)


def gantt_path(path: Path) -> Path:
    """The file ``--gantt`` writes: a name without a suffix gets ``.png`` (and is printed with it).

    A folder, an unknown suffix, a parent folder that is missing one level up, or a folder this user
    cannot write (as ``report --out``) is refused up front: before planning, not after it; only the
    file's own folder is created, so a typo cannot build a tree of folders.
    """
    if path.is_dir():
        raise FlagError(f"--gantt: {path} is a folder; give a file name in it, e.g. --gantt {path / 'plan.png'}")
    if not path.suffix:
        path = path.with_name(path.name + ".png")
    if path.suffix.lower() not in GANTT_FORMATS:
        raise FlagError(f"--gantt: {path}: cannot draw a {path.suffix} file; end the name in "
                        f"{', '.join(GANTT_FORMATS)}")
    parent = path.parent
    if not parent.is_dir() and (parent.exists() or not parent.parent.is_dir()):
        raise FlagError(f"--gantt: {path}: folder {parent} cannot be created (only the file's own folder is); "
                        "create the folders above it first or pick another path")
    folder = parent if parent.is_dir() else parent.parent  # where the file, or its folder, is made
    if not os.access(folder, os.W_OK | os.X_OK):
        raise FlagError(f"--gantt: cannot write {path} ({folder} is not writable); give a writable path")
    return path


def cpu_lanes(trace) -> dict[tuple[str, int], list[int]]:
    """(pool, node) -> the lane of each of its 0-GPU tests in ``trace`` order (-1 for a GPU test): a CPU
    test holds no GPU row, so CPU tests get rows of their own, as few as never overlap on one."""
    lanes: dict[tuple[str, int], list[float]] = {}
    out: dict[tuple[str, int], list[int]] = {}
    for a, node, slots, start, end in trace:
        ends = lanes.setdefault((a.pool, node), [])
        row = out.setdefault((a.pool, node), [])
        if slots:
            row.append(-1)
            continue
        lane = next((i for i, free in enumerate(ends) if free <= start), len(ends))
        ends[lane:lane + 1] = [end]
        row.append(lane)
    return out


def write_gantt(plan: Plan, pools, path: Path) -> None:
    """One row per GPU, one bar per test over the GPUs it holds (dispatch replayed on estimates); a CPU
    test (0 GPUs) on its node's ``cpu`` row(s) below the GPUs, so a CPU test that ends the night shows."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from pipelines.core.plan import simulate_trace

    used = {a.pool for a in plan.assignments}
    shapes = [p for p in pools if p.name in used]
    _, trace = simulate_trace(plan, shapes, {a.test_id: a.end_s - a.start_s for a in plan.assignments})
    lanes = cpu_lanes(trace)
    gpus_per_node = {p.name: p.gpus_per_node for p in shapes}
    base, labels, y = {}, [], 0
    for p in shapes:
        for node in range(p.nodes):
            base[(p.name, node)] = y
            cpu = max(lanes.get((p.name, node), [-1]), default=-1) + 1
            labels += [f"{p.name}/{node}:{g}" for g in range(p.gpus_per_node)]
            labels += [f"{p.name}/{node}:cpu" + (str(k + 1) if cpu > 1 else "") for k in range(cpu)]
            y += p.gpus_per_node + cpu
    fig, ax = plt.subplots(figsize=(13, 1.5 + 0.18 * max(1, y)))
    cmap = plt.get_cmap("tab20")
    seen: dict[tuple[str, int], int] = {}
    for a, node, slots, start, end in trace:
        key = (a.pool, node)
        lane = lanes[key][seen.get(key, 0)]
        seen[key] = seen.get(key, 0) + 1
        y0 = base[key]
        rows = list(slots) if slots else [gpus_per_node[a.pool] + lane]  # a CPU test: its lane below the GPUs
        for g in rows:
            ax.barh(y0 + g, end - start, left=start, height=0.9, color=cmap(a.priority % 20),
                    edgecolor="black", linewidth=0.3, hatch="" if slots else "//")
        if end - start > plan.makespan_s / 30:
            ax.text((start + end) / 2, y0 + (rows[0] + rows[-1]) / 2, a.test_id, ha="center", va="center",
                    fontsize=6)
    ax.axvline(plan.lower_bound_s, color="red", linestyle="--", label=f"lower bound {plan.lower_bound_s:.0f}s")
    ax.set_yticks(range(len(labels)), labels, fontsize=5)
    ax.invert_yaxis()
    ax.set_xlabel("seconds from the start of the night")
    ax.set_title(f"predicted makespan {plan.makespan_s:.0f}s, lower bound {plan.lower_bound_s:.0f}s, "
                 f"ratio {plan.ratio:.3f}")
    ax.legend(loc="lower right")
    fig.tight_layout()
    try:
        path.parent.mkdir(exist_ok=True)  # gantt_path checked that only this folder is missing
        with matplotlib.rc_context({"svg.fonttype": "none"}):  # an SVG keeps its labels as text: searchable
            fig.savefig(path, dpi=120, format=path.suffix.lstrip(".").lower())
    except OSError as exc:  # what access() cannot foresee: /proc, a read-only mount, a full disk
        raise FlagError(f"--gantt: cannot write {path} ({exc.strerror or exc}); give a writable path") from exc
    finally:
        plt.close(fig)
