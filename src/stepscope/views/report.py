"""Terminal rendering of the overview (``stepscope report``) and op stats (``stepscope ops``),
and their CSV export."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.text import Text

from stepscope.analysis.step_categories import CATEGORIES, CATEGORY_LABELS
from stepscope.views.tables import Cell, Column, print_table, short_name
from stepscope.views.units import count_text, size_text

# Types only: the overview of a kept answer is printed without NumPy and the run model.
if TYPE_CHECKING:
    from stepscope.analysis.run_model.framework_op_stats import OpStats
    from stepscope.analysis.run_model.kernel_stats import KernelStats
    from stepscope.model.run_tables import Progress as ProgressCallback

NEXT_TOOL_TEXT = {
    "input_pipeline": "open the input pipeline analyzer (stepscope input) to see the slow stage",
    "kernel_stats": "look at the top device ops and kernels (stepscope ops)",
    "ops": "look at framework op stats (stepscope ops) and the trace viewer",
}


def _evidence(value: Any) -> str:
    """One evidence value, short: numbers as they are, lists and maps joined."""
    if isinstance(value, dict):
        return "; ".join(f"{k} {v}" for k, v in value.items())
    if isinstance(value, list):
        return "; ".join(str(v) for v in value)
    return str(value)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}" if value < 10 else f"{value:.1f}"


@contextmanager
def loading_progress(console: Console) -> Iterator[ProgressCallback | None]:
    """A progress bar on ``console`` while files load (none when it is not a terminal)."""
    if not console.is_terminal:
        yield None
        return
    # Imported here: a report printed to a pipe or file (or a test) shows no bar.
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

    columns = (TextColumn("loading {task.description}"), BarColumn(), DownloadColumn(),
               TimeRemainingColumn())
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task("", total=None)

        def update(done: int, total: int, name: str) -> None:
            bar.update(task, completed=done, total=total or None, description=name)

        yield update


@contextmanager
def count_progress(console: Console, what: str, total: int
                   ) -> Iterator[Callable[[int], None] | None]:
    """A progress bar on ``console`` counting ``total`` items as ``update(more)`` is called
    (none when it is not a terminal)."""
    if not console.is_terminal:
        yield None
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
    )

    columns = (TextColumn(what), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task("", total=total)

        def update(more: int) -> None:
            bar.advance(task, more)

        yield update


def render_overview(summary: dict[str, Any], console: Console) -> None:
    """Print the overview dictionary (``Overview.to_dict()``) as the terminal report."""
    steps = summary["steps"]
    env = summary["environment"]
    hosts = env["host_names"]
    host_text = f"host {hosts[0]}" if len(hosts) == 1 else f"{len(hosts)} hosts"
    head = f"Run {summary['run']} · {host_text} · {steps['count']} steps"
    if steps["count"]:
        head += (f" · avg {_ms(steps['avg_ms'])} ms (σ {_ms(steps['stddev_ms'])}, "
                 f"min {_ms(steps['min_ms'])}, max {_ms(steps['max_ms'])})")
    console.print(head, style="bold", highlight=False)
    flight = summary.get("flight")
    if flight:
        line = f"Saved by the flight recorder: {str(flight.get('trigger')).replace('_', ' ')}"
        if flight.get("step") is not None:
            line += f" at step {flight['step']}"
        if flight.get("step_ms") is not None:
            line += f" ({_ms(flight['step_ms'])} ms"
            line += (f", median {_ms(flight['median_ms'])} ms)"
                     if flight.get("median_ms") is not None else ")")
        if flight.get("detail"):
            line += f": {flight['detail']}"
        console.print(line, style="yellow", highlight=False, markup=False)
    if steps["count"]:
        parts = [f"{CATEGORY_LABELS[c]} {summary['breakdown'][c]:.1f}%" for c in CATEGORIES]
        console.print("Step-time breakdown  " + "  ".join(parts), highlight=False)
        found = steps["found_by_text"]
        if steps.get("trimmed"):
            found += (f" Steps {', '.join(map(str, steps['trimmed']))} were left out as likely "
                      "cut short by the capture (as XProf does).")
        console.print(found, style="dim", highlight=False)
    else:
        console.print("No steps found in this profile; op stats are shown below.",
                      style="yellow")
    console.print(summary["input"]["statement"], highlight=False)
    rec = summary["recommendation"]
    console.print(f"Next: {NEXT_TOOL_TEXT.get(rec['next_tool'], rec['next_tool'])}.",
                  highlight=False)
    for hint in rec["hints"][1:]:
        console.print(f"  • {hint}", highlight=False)
    for advice in summary.get("recommendations", []):
        because = advice.get("because") or ", ".join(
            f"{k} {_evidence(v)}" for k, v in advice["evidence"].items())
        console.print(f"Advice [{advice['rule']}]: {advice['text']}", highlight=False,
                      markup=False)
        console.print(f"    because {because.rstrip('.')}; see {advice['tool']}", style="dim",
                      highlight=False, markup=False)
    if summary.get("precision"):
        p = summary["precision"]
        console.print(f"Device compute precision: 16-bit {p['16bit_percent']:.1f}%, "
                      f"32-bit {p['32bit_percent']:.1f}%", highlight=False)
    top = summary["top_ops"]
    show_type = _types_differ(top)
    print_table(console, f"Top {len(top)} ops (self time)",
                [("#", "num"), ("where", "text"), ("op", "name"),
                 *(_TYPE_COLUMN if show_type else []), ("count", "num"),
                 ("self ms", "num"), ("self %", "num"), ("cum. %", "num")],
                [[str(i), op["host_or_device"], op["name"],
                  *([_type_cell(op["type"], op["name"])] if show_type else []),
                  count_text(op["occurrences"]), f"{op['self_ms']:.3f}",
                  f"{op['self_percent']:.1f}", f"{op['cumulative_self_percent']:.1f}"]
                 for i, op in enumerate(top, 1)],
                "No ops were recognised in this profile.")
    devices = ("CPU only" if env["device_type"] == "CPU"
               else f"{env['device_count']} × {env['device_type']}")
    if env["device_names"]:
        devices += f" ({', '.join(env['device_names'])})"
    cores = f", {env['cpu_count']} cores" if env["cpu_count"] else ""
    console.print(f"Run environment: {env['hosts']} host{'s' if env['hosts'] != 1 else ''}, "
                  f"{devices}{cores}", highlight=False)
    if len(summary.get("hosts", {})) > 1:
        print_table(console, "Per host",
                    [("host", "name"), ("steps", "num"), ("avg ms", "num"), ("input %", "num"),
                     ("verdict", "text")],
                    [[name, str(h["steps"]["count"]), _ms(h["steps"]["avg_ms"]),
                      f"{h['breakdown'].get('input', 0.0):.1f}", h["input"]["verdict"]]
                     for name, h in summary["hosts"].items()], "No hosts.")
    for name, why in summary.get("failed_hosts", {}).items():
        console.print(f"Host {name} could not be read: {why}", style="red", highlight=False)
    for dropped in summary.get("dropped_events", {}).values():
        console.print(dropped["message"], style="yellow", highlight=False)


def render_pod(data: dict[str, Any], console: Console, *, per_step: bool = True,
               limit: int | None = None) -> None:
    """Print the pod viewer (``PodViewer.to_dict()``): per host totals with straggler counts,
    the summary, and (``per_step``) each step's figures; then the clock alignment."""
    fields = data["categories"]
    labels = [f.removesuffix("_ms") for f in fields]
    noun = "device" if data["kind"] == "devices" else "host"
    totals = []
    for name in data["hosts"]:
        t = data["totals"][name]
        n = max(t["steps"], 1)
        totals.append([name, str(t["steps"]), f"{t['total_ms'] / n:.3f}",
                       *(f"{t[f] / n:.3f}" for f in fields), f"{t['wait_ms'] / n:.3f}",
                       str(data["stragglers"].get(name, 0))])
    print_table(console, f"Per {noun}, average ms per step",
                [(noun, "name"), ("steps", "num"), ("step", "num"),
                 *((label, "num") for label in labels), ("waited", "num"),
                 ("straggler in", "num")], totals, f"No {noun} has steps.")
    console.print(data["summary"], highlight=False)
    if per_step and data["steps"]:
        shown = data["steps"] if not limit else data["steps"][:limit]
        rows = []
        for step in shown:
            for name, f in step["per_host"].items():
                mark = (f"straggler +{step['straggler_lead_ms']:.3f} ms"
                        if name == step["straggler"] else "")
                rows.append([str(step["step_num"]), name, f"{f['total_ms']:.3f}",
                             *(f"{f[k]:.3f}" for k in fields), f"{f['wait_ms']:.3f}", mark])
        print_table(console, f"Steps ({len(shown)} of {len(data['steps'])})",
                    [("step", "num"), (noun, "name"), ("total ms", "num"),
                     *((label, "num") for label in labels), ("waited", "num"), ("", "text")],
                    rows, "No steps.")
    if data["kind"] == "hosts" and len(data["hosts"]) > 1:
        print_table(console, "Clock alignment",
                    [("host", "name"), ("shift µs", "num"), ("method", "text"), ("why", "name")],
                    [[name, f"{a['shift_ns'] / 1e3:.1f}", a["method"], a["reason"]]
                     for name, a in data["alignment"].items()], "No hosts to line up.")
    for name, why in data.get("failed_hosts", {}).items():
        console.print(f"Host {name} could not be read: {why}", style="red", highlight=False)


OP_COLUMNS = ("host_or_device", "type", "name", "occurrences", "total_ms", "avg_ms",
              "self_ms", "avg_self_ms", "self_percent", "cumulative_percent")


def render_ops(stats: OpStats, console: Console, limit: int | None = None) -> None:
    """Print op stats as a table, host ops then device ops."""
    rows = stats.rows[:limit] if limit else stats.rows
    show_type = _types_differ([{"name": r.name, "type": r.type} for r in rows])
    cells = []
    for r in rows:
        d = r.to_dict()
        cells.append([r.host_or_device, r.name,
                      *([_type_cell(r.type, r.name)] if show_type else []),
                      count_text(r.occurrences), f"{d['total_ms']:.3f}", f"{d['avg_ms']:.4f}",
                      f"{d['self_ms']:.3f}", f"{d['self_percent']:.1f}",
                      f"{d['cumulative_percent']:.1f}"])
    print_table(console, "Framework op stats (self time)",
                [("where", "text"), ("op", "name"), *(_TYPE_COLUMN if show_type else []),
                 ("count", "num"), ("total ms", "num"), ("avg ms", "num"), ("self ms", "num"),
                 ("self %", "num"), ("cum %", "num")], cells,
                "No ops were recognised in this profile.")
    if limit and len(stats.rows) > limit:
        console.print(f"… {len(stats.rows) - limit} more (use --limit 0 for all, or --csv)",
                      style="dim")


_TYPE_COLUMN: list[Column] = [("type", "name")]


def _types_differ(ops: list[dict[str, Any]]) -> bool:
    """Whether any op's type says more than its name (else the type column is left out)."""
    return any(op["type"] and op["type"] != op["name"] for op in ops)


def _type_cell(op_type: str, name: str) -> str:
    return "" if op_type == name else op_type


def _dims(d: list[int] | None) -> str:
    return "×".join(str(x) for x in d) if d else "–"


def render_kernels(stats: KernelStats, console: Console, limit: int | None = None) -> None:
    """Print GPU kernel stats, by total time, one row per kernel, op and launch shape."""
    rows = stats.rows[:limit] if limit else stats.rows
    cells: list[list[Cell]] = []
    for r in rows:
        d = r.to_dict()
        launch = [f"grid {_dims(d['grid'])}", f"block {_dims(d['block'])}"]
        if r.registers_per_thread is not None:
            launch.append(f"{r.registers_per_thread} regs")
        if r.shared_memory_bytes is not None:
            launch.append(f"{size_text(r.shared_memory_bytes)} shared")
        kernel = Text(short_name(r.kernel)) + Text(
            f"\n  op {short_name(r.op, 54) if r.op else '–'}\n  " + " · ".join(launch),
            style="dim")
        tc = ("used" if r.kernel_uses_tensor_core
              else "unused" if r.op_tensor_core_eligible else "–")
        cells.append([kernel, tc, count_text(r.occurrences), f"{r.total_us:.1f}",
                      f"{r.avg_us:.1f}", f"{r.percent:.1f}"])
    print_table(console, "GPU kernel stats (by total time)",
                [("kernel, its op, launch shape", "name"), ("TC", "text"), ("count", "num"),
                 ("total µs", "num"), ("avg µs", "num"), ("%", "num")],
                cells, "No GPU kernels in this profile: it was recorded without a GPU, or "
                "without device tracing (device_tracer_level ≥ 1).")
    if any(r.op_tensor_core_eligible and not r.kernel_uses_tensor_core for r in rows):
        console.print("TC (tensor cores) 'unused': the op could run on tensor cores, its "
                      "kernel did not.", style="dim", highlight=False)
    if rows:
        console.print("Full kernel names, min and max times: --csv or --json.", style="dim",
                      highlight=False)
    if stats.implausible_launches:
        console.print(f"{stats.implausible_launches:,} launches gave figures out of any GPU's "
                      "bounds; those figures are shown as –.", style="yellow")
    if limit and len(stats.rows) > limit:
        console.print(f"… {len(stats.rows) - limit} more (use --limit 0 for all, or --csv)",
                      style="dim")


def write_text(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` as ``formats.output_file`` writes outputs (``-`` is
    standard output; nothing half-written is ever left)."""
    from stepscope.formats.output_file import write_output  # a terminal report needs none

    write_output(path, text.encode("utf-8"))


def render_mfu(mfu: dict[str, Any], console: Console) -> None:
    """Print the run's MFU (the overview's ``mfu``): the figure, against which peak, or why
    it is unknown."""
    if mfu["mfu"] is None:
        console.print(f"MFU: unknown. {mfu['unknown']}", style="dim", highlight=False,
                      markup=False)
        return
    known = [h for h in mfu["hosts"].values() if h["mfu"] is not None]
    first = known[0]
    which = f"{first['peak_precision']}; " if first["peak_precision"] else ""
    peak = f"peak {first['peak_tflops']:g} TFLOP/s per device ({which}{first['peak_source']})"
    devices = sum(h["devices"] for h in known)
    console.print(f"MFU {100 * mfu['mfu']:.3g}% · {sum(h['model_tflop'] for h in known):.4g} "
                  f"model TFLOP in {sum(h['step_ms'] for h in known):.4g} ms of steps · "
                  f"{devices} device(s) of {first['device'] or 'unknown model'} · {peak} · "
                  f"FLOPs from {first['flops_source']}", highlight=False, markup=False)
    if mfu["unknown"]:
        console.print(f"  {mfu['unknown']}", style="dim", highlight=False, markup=False)
