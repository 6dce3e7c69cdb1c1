"""The terminal view of ``stepscope python``: a run's top Python functions."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from stepscope.analysis.run_model.python_views import TRACER, PythonViews


def _ms(ns: int) -> str:
    return f"{ns / 1e6:,.3f}"


def render_python(views: PythonViews, console: Console, *, sort: str = "self",
                  filter_text: str = "", limit: int | None = 25) -> None:
    """Print the window, the threads and the top functions."""
    kind = "calls" if views.source == TRACER else "samples"
    where = f"step {views.step}" if views.step is not None else "the whole recording"
    rate = f", {views.hz:,.0f} samples/s" if views.source != TRACER else ""
    console.print(f"Python {views.source} on host {escape(views.host)}, {where}: "
                  f"{_ms(views.total_ns)} ms of Python over "
                  f"{len(views.threads['name'])} thread(s), {views.samples:,} {kind}{rate}")
    if views.thread is None and len(views.threads["name"]) > 1:
        threads = Table(title="Threads")
        threads.add_column("Thread")
        threads.add_column("Line id", justify="right")
        threads.add_column("Python (ms)", justify="right")
        threads.add_column(kind.capitalize(), justify="right")
        for name, line, total, count in zip(views.threads["name"], views.threads["line_id"],
                                            views.threads["total_ns"], views.threads["count"],
                                            strict=True):
            threads.add_row(escape(name), str(line), _ms(total), f"{count:,}")
        console.print(threads)
    f = views.functions(sort, filter_text, limit)
    table = Table(title=f"Top Python functions (by {sort})")
    table.add_column("Function")
    table.add_column("File:line")
    table.add_column("Self (ms)", justify="right")
    table.add_column("Self %", justify="right")
    table.add_column("Total (ms)", justify="right")
    table.add_column("Total %", justify="right")
    table.add_column(kind.capitalize(), justify="right")
    errors = f.get("self_share_error")
    for i, name in enumerate(f["function"]):
        where_at = f"{f['file'][i]}:{f['line'][i]}" if f["file"][i] else "(C)"
        share = f"{100 * f['self_share'][i]:.1f}"
        if errors is not None:
            share += f" ± {100 * errors[i]:.1f}"
        table.add_row(escape(name), escape(where_at), _ms(f["self_ns"][i]), share,
                      _ms(f["total_ns"][i]), f"{100 * f['total_share'][i]:.1f}",
                      f"{f['count'][i]:,}")
    console.print(table)
    if not f["function"]:
        console.print("No Python function matches." if filter_text else
                      "No Python time in this window.")
