"""The op profile in the terminal: device and utilisation, categories, top ops, notes."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100.0 * value:.1f}%"


def _num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def render_xla(data: dict[str, Any], console: Console, *, top: int = 20) -> None:
    """Print an op profile (``OpProfile.to_dict()``)."""
    dev = data["device"]
    peak = ("unknown peak" if dev["peak_tflops"] is None
            else f"peak {dev['peak_tflops']:,.1f} TFLOP/s")
    bw = ("unknown bandwidth" if dev["peak_gbytes_per_s"] is None
          else f"{dev['peak_gbytes_per_s']:,.0f} GB/s")
    console.print(f"Device: {escape(dev['name'] or 'unknown')} × {dev['count']} ({peak}, {bw}; "
                  f"{escape(dev['peak_source'])})", highlight=False)
    console.print(f"Programs: {escape(', '.join(data['modules']))}", highlight=False)
    console.print(f"XLA device time {data['total_ms']:,.3f} ms, idle {data['idle_ms']:,.3f} ms "
                  f"({data['idle_percent']:.1f}%); FLOPS utilisation "
                  f"{_pct(data['flops_utilization'])}, bandwidth utilisation "
                  f"{_pct(data['bandwidth_utilization'])}", highlight=False)
    cats = Table(title="By category", title_justify="left")
    for col in ("category", "time ms", "time %", "FLOPS util.", "BW util.", "ops"):
        cats.add_column(col, justify="left" if col == "category" else "right")
    for c in data["categories"]:
        cats.add_row(escape(c["name"]), f"{c['time_ms']:,.3f}", f"{c['time_percent']:.1f}",
                     _pct(c["flops_utilization"]), _pct(c["bandwidth_utilization"]),
                     str(len(c["ops"])))
    console.print(cats)
    ops = Table(title=f"Top ops ({min(top, len(data['ops']))} of {len(data['ops'])})",
                title_justify="left")
    for col in ("op", "program", "category", "#", "self ms", "time %", "GFLOP/s", "GB/s",
                "FLOP/B", "bound by", "FLOPS util."):
        ops.add_column(col, justify="left" if col in ("op", "program", "category", "bound by")
                       else "right", overflow="fold")
    for o in data["ops"][:top]:
        est = "~" if o["flops_estimated"] else ""
        ops.add_row(escape(o["name"]), escape(o["module"]), escape(o["category"]),
                    str(o["occurrences"]), f"{o['self_ms']:,.3f}", f"{o['time_percent']:.1f}",
                    est + _num(o["gflops_per_s"]), _num(o["gbytes_per_s"]),
                    _num(o["operational_intensity"], 2), o["bound_by"],
                    _pct(o["flops_utilization"]))
    console.print(ops)
    for note in data["notes"]:
        console.print(f"Note: {escape(note)}", style="yellow", highlight=False)
