"""Terminal rendering of the input pipeline analyzer (``stepscope input``)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def render_input(result: dict[str, Any], console: Console, limit: int | None = None) -> None:
    """Print the analyzer's dictionary (``InputPipelineAnalysis.to_dict()``)."""
    head = f"Input pipeline · run {result['run']}"
    if result["host"]:
        head += f" · host {result['host']}"
    console.print(Text(head, style="bold"))
    console.print(Text(result["input"]["statement"]))
    steps = result["steps"]
    if steps["count"]:
        console.print(Text(
            f"{steps['count']} steps · step time avg {_ms(steps['avg_ms'])} ms "
            f"(σ {_ms(steps['stddev_ms'])}, min {_ms(steps['min_ms'])}, "
            f"max {_ms(steps['max_ms'])}) · waiting for input avg "
            f"{_ms(steps['input_avg_ms'])} ms (σ {_ms(steps['input_stddev_ms'])}, "
            f"min {_ms(steps['input_min_ms'])}, max {_ms(steps['input_max_ms'])})"))

    split = Table(title="Host-side input time", title_justify="left")
    split.add_column("category")
    split.add_column("ms", justify="right")
    split.add_column("%", justify="right")
    for key, label in result["host_breakdown_labels"].items():
        split.add_row(Text(label), _ms(result["host_breakdown"][key]),
                      f"{result['host_breakdown_percent'][key]:.1f}")
    console.print(split)

    ops = Table(title="Input ops", title_justify="left")
    for col in ("input op", "count", "total ms", "total %", "self ms", "self %", "category"):
        ops.add_column(col, justify="left" if col in ("input op", "category") else "right")
    rows = result["ops"] if limit is None else result["ops"][:limit]
    for r in rows:
        ops.add_row(Text(r["name"] + (" ‡" if r.get("runs_apart") else "")), str(r["count"]),
                    _ms(r["total_ms"]), f"{r['total_percent']:.1f}", _ms(r["self_ms"]),
                    f"{r['self_percent']:.1f}", r["category"])
    if any(r.get("runs_apart") for r in rows):
        ops.caption = ("‡ runs apart from its consumer (threads, DataLoader worker processes): "
                       "its time overlaps the consumer's, so its total may exceed it")
        ops.caption_justify = "left"
    console.print(ops)

    pipes = Table(title="Input pipelines (slowest run first)", title_justify="left")
    for col in ("host", "pipeline", "output stage", "calls", "slowest run ms",
                "bottleneck stage", "its ms"):
        pipes.add_column(col, justify="right" if col in ("calls", "slowest run ms", "its ms")
                         else "left")
    for p in result["pipelines"]:
        pb = p["bottleneck"]
        pipes.add_row(Text(p["host"]), p["name"], Text(p["root"]), str(p["calls"]),
                      _ms(pb["run_ms"]), Text(pb["stage"] or "none"), _ms(pb["stage_ms"]))
    if result["pipelines"]:
        console.print(pipes)

    b = result["bottleneck"]
    console.print(Text("Bottleneck: ", style="bold") + Text(b["stage"] or "none"))
    if b["run_ms"] is not None:
        path = " → ".join(n.rpartition("::")[2] for n in b["critical_path"])
        console.print(Text(f"(slowest run of pipeline {b['pipeline']} on host {b['host']}: "
                           f"{b['run_ms']:.3f} ms; "
                           f"critical path {path})"))
    console.print(Text(b["recommendation"]))
