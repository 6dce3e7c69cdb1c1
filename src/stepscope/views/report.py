"""Terminal rendering of the overview (``stepscope report``) and op stats (``stepscope ops``),
and their CSV export."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from stepscope.analysis.csv_table import csv_text
from stepscope.analysis.framework_op_stats import OpStats
from stepscope.analysis.kernel_stats import KernelStats
from stepscope.analysis.overview_page import CATEGORIES, CATEGORY_LABELS
from stepscope.formats.output_file import write_output
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
    if steps["count"]:
        parts = [f"{CATEGORY_LABELS[c]} {summary['breakdown'][c]:.1f}%" for c in CATEGORIES]
        console.print("Step-time breakdown  " + "  ".join(parts), highlight=False)
        found = f"Steps found by: {steps['found_by']} ({steps['marker']})"
        if steps.get("trimmed"):
            found += (f"; steps {', '.join(map(str, steps['trimmed']))} left out as likely "
                      "cut short by the capture (as XProf does)")
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
        evidence = ", ".join(f"{k} {_evidence(v)}" for k, v in advice["evidence"].items())
        console.print(f"Advice [{advice['rule']}]: {advice['text']}", highlight=False,
                      markup=False)
        console.print(f"    because {evidence}; see {advice['tool']}", style="dim",
                      highlight=False, markup=False)
    if summary.get("precision"):
        p = summary["precision"]
        console.print(f"Device compute precision: 16-bit {p['16bit_percent']:.1f}%, "
                      f"32-bit {p['32bit_percent']:.1f}%", highlight=False)
    table = Table(title=f"Top {len(summary['top_ops'])} ops (self time)", title_justify="left")
    for col, justify in (("#", "right"), ("where", "left"), ("type", "left"), ("op", "left"),
                         ("count", "right"), ("self ms", "right"), ("self %", "right"),
                         ("cum. %", "right")):
        table.add_column(col, justify=justify,  # type: ignore[arg-type]
                         overflow="fold" if col == "op" else "ellipsis")
    for i, op in enumerate(summary["top_ops"], 1):
        table.add_row(str(i), op["host_or_device"], op["type"], op["name"],
                      str(op["occurrences"]), f"{op['self_ms']:.3f}",
                      f"{op['self_percent']:.1f}", f"{op['cumulative_self_percent']:.1f}")
    console.print(table)
    devices = ("CPU only" if env["device_type"] == "CPU"
               else f"{env['device_count']} × {env['device_type']}")
    if env["device_names"]:
        devices += f" ({', '.join(env['device_names'])})"
    cores = f", {env['cpu_count']} cores" if env["cpu_count"] else ""
    console.print(f"Run environment: {env['hosts']} host{'s' if env['hosts'] != 1 else ''}, "
                  f"{devices}{cores}", highlight=False)
    if len(summary.get("hosts", {})) > 1:
        per_host = Table(title="Per host", title_justify="left")
        for col in ("host", "steps", "avg ms", "input %", "verdict"):
            per_host.add_column(col)
        for name, h in summary["hosts"].items():
            per_host.add_row(name, str(h["steps"]["count"]), _ms(h["steps"]["avg_ms"]),
                             f"{h['breakdown'].get('input', 0.0):.1f}", h["input"]["verdict"])
        console.print(per_host)
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
    totals = Table(title=f"Per {noun}, average ms per step", title_justify="left")
    for col in (noun, "steps", "step", *labels, "waited", "straggler in"):
        totals.add_column(col, justify="left" if col == noun else "right")
    for name in data["hosts"]:
        t = data["totals"][name]
        n = max(t["steps"], 1)
        totals.add_row(name, str(t["steps"]), f"{t['total_ms'] / n:.3f}",
                       *(f"{t[f] / n:.3f}" for f in fields), f"{t['wait_ms'] / n:.3f}",
                       str(data["stragglers"].get(name, 0)))
    console.print(totals)
    console.print(data["summary"], highlight=False)
    if per_step and data["steps"]:
        shown = data["steps"] if not limit else data["steps"][:limit]
        steps = Table(title=f"Steps ({len(shown)} of {len(data['steps'])})",
                      title_justify="left")
        for col in ("step", noun, "total ms", *labels, "waited", ""):
            steps.add_column(col, justify="left" if col in (noun, "") else "right")
        for step in shown:
            for name, f in step["per_host"].items():
                mark = (f"straggler +{step['straggler_lead_ms']:.3f} ms"
                        if name == step["straggler"] else "")
                steps.add_row(str(step["step_num"]), name, f"{f['total_ms']:.3f}",
                              *(f"{f[k]:.3f}" for k in fields), f"{f['wait_ms']:.3f}", mark)
        console.print(steps)
    if data["kind"] == "hosts" and len(data["hosts"]) > 1:
        align = Table(title="Clock alignment", title_justify="left")
        for col in ("host", "shift µs", "method", "why"):
            align.add_column(col, justify="right" if col == "shift µs" else "left",
                             overflow="fold")
        for name, a in data["alignment"].items():
            align.add_row(name, f"{a['shift_ns'] / 1e3:.1f}", a["method"], a["reason"])
        console.print(align)
    for name, why in data.get("failed_hosts", {}).items():
        console.print(f"Host {name} could not be read: {why}", style="red", highlight=False)


OP_COLUMNS = ("host_or_device", "type", "name", "occurrences", "total_ms", "avg_ms",
              "self_ms", "avg_self_ms", "self_percent", "cumulative_percent")


def render_ops(stats: OpStats, console: Console, limit: int | None = None) -> None:
    """Print op stats as a table, host ops then device ops."""
    rows = stats.rows[:limit] if limit else stats.rows
    table = Table(title="Framework op stats (self time)", title_justify="left")
    for col in ("where", "type", "op", "count", "total ms", "avg ms", "self ms", "self %",
                "cum %"):
        table.add_column(col, justify="left" if col in ("where", "type", "op") else "right",
                         overflow="fold" if col in ("type", "op") else "ellipsis")
    for r in rows:
        d = r.to_dict()
        table.add_row(r.host_or_device, r.type, r.name, str(r.occurrences),
                      f"{d['total_ms']:.3f}", f"{d['avg_ms']:.4f}", f"{d['self_ms']:.3f}",
                      f"{d['self_percent']:.1f}", f"{d['cumulative_percent']:.1f}")
    console.print(table)
    if not stats.rows:
        console.print("No ops were recognised in this profile.", style="yellow")
    if limit and len(stats.rows) > limit:
        console.print(f"… {len(stats.rows) - limit} more (use --limit 0 for all, or --csv)",
                      style="dim")


def _dims(d: list[int] | None) -> str:
    return "×".join(str(x) for x in d) if d else "–"


def _maybe(value: int | None) -> str:
    return "–" if value is None else str(value)


def render_kernels(stats: KernelStats, console: Console, limit: int | None = None) -> None:
    """Print GPU kernel stats, by total time, one row per kernel, op and launch shape."""
    rows = stats.rows[:limit] if limit else stats.rows
    table = Table(title="GPU kernel stats (by total time)", title_justify="left")
    for col in ("kernel", "op", "regs", "shmem B", "block", "grid", "TC elig.", "TC used",
                "count", "total µs", "avg µs", "min µs", "max µs", "%"):
        table.add_column(col, justify="left" if col in ("kernel", "op") else "right",
                         overflow="fold" if col in ("kernel", "op") else "ellipsis",
                         min_width={"kernel": 48, "op": 16}.get(col),
                         no_wrap=col not in ("kernel", "op"))
    for r in rows:
        d = r.to_dict()
        table.add_row(r.kernel, r.op or "–", _maybe(r.registers_per_thread),
                      _maybe(r.shared_memory_bytes), _dims(d["block"]), _dims(d["grid"]),
                      "yes" if r.op_tensor_core_eligible else "no",
                      "yes" if r.kernel_uses_tensor_core else "no", str(r.occurrences),
                      f"{r.total_us:.3f}", f"{r.avg_us:.3f}", f"{r.min_us:.3f}",
                      f"{r.max_us:.3f}", f"{r.percent:.1f}")
    console.print(table)
    if not stats.rows:
        console.print("No GPU kernels in this profile.", style="yellow")
    if stats.implausible_launches:
        console.print(f"{stats.implausible_launches:,} launches gave figures out of any GPU's "
                      "bounds; those figures are shown as –.", style="yellow")
    if limit and len(stats.rows) > limit:
        console.print(f"… {len(stats.rows) - limit} more (use --limit 0 for all, or --csv)",
                      style="dim")


def ops_csv(stats: OpStats) -> str:
    """Op stats as CSV text with a header row."""
    return csv_text(OP_COLUMNS, ([d[c] for c in OP_COLUMNS]
                                 for d in (r.to_dict() for r in stats.rows)))


def write_text(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` as ``formats.output_file`` writes outputs (``-`` is
    standard output; nothing half-written is ever left)."""
    write_output(path, text.encode("utf-8"))
