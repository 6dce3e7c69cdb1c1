"""Terminal rendering of the input pipeline analyzer (``stepscope input``)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.text import Text

from stepscope.views.tables import print_table
from stepscope.views.units import count_text


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

    print_table(console, "Host-side input time",
                [("category", "name"), ("ms", "num"), ("%", "num")],
                [[label, _ms(result["host_breakdown"][key]),
                  f"{result['host_breakdown_percent'][key]:.1f}"]
                 for key, label in result["host_breakdown_labels"].items()], "")
    rows = result["ops"] if limit is None else result["ops"][:limit]
    print_table(console, "Input ops",
                [("input op", "name"), ("count", "num"), ("total ms", "num"),
                 ("total %", "num"), ("self ms", "num"), ("self %", "num"),
                 ("category", "text")],
                [[r["name"] + (" ‡" if r.get("runs_apart") else ""), count_text(r["count"]),
                  _ms(r["total_ms"]), f"{r['total_percent']:.1f}", _ms(r["self_ms"]),
                  f"{r['self_percent']:.1f}", r["category"]] for r in rows],
                "No input-pipeline iterator events in this profile.")
    if any(r.get("runs_apart") for r in rows):
        console.print(Text("‡ runs apart from its consumer (threads, DataLoader worker "
                           "processes): its time overlaps the consumer's, so its total may "
                           "exceed it", style="dim"))
    if result["pipelines"]:
        print_table(console, "Input pipelines (slowest run first)",
                    [("host", "name"), ("pipeline", "name"), ("output stage", "name"),
                     ("calls", "num"), ("slowest run ms", "num"), ("bottleneck stage", "name"),
                     ("its ms", "num")],
                    [[p["host"], p["name"], p["root"], count_text(p["calls"]),
                      _ms(p["bottleneck"]["run_ms"]), p["bottleneck"]["stage"] or "none",
                      _ms(p["bottleneck"]["stage_ms"])] for p in result["pipelines"]], "")

    b = result["bottleneck"]
    console.print(Text("Bottleneck: ", style="bold") + Text(b["stage"] or "none"))
    if b["run_ms"] is not None:
        path = " → ".join(n.rpartition("::")[2] for n in b["critical_path"])
        console.print(Text(f"(slowest run of pipeline {b['pipeline']} on host {b['host']}: "
                           f"{b['run_ms']:.3f} ms; "
                           f"critical path {path})"))
    console.print(Text(b["recommendation"]))
