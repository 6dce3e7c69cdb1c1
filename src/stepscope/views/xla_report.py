"""The op profile in the terminal: device and utilisation, categories, top ops, notes."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.text import Text

from stepscope.views.tables import print_table
from stepscope.views.units import count_text


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
          else f"{dev['peak_gbytes_per_s']:,.0f} GiB/s")
    console.print(f"Device: {escape(dev['name'] or 'unknown')} × {dev['count']} ({peak}, {bw}; "
                  f"{escape(dev['peak_source'])}; bandwidth: "
                  f"{escape(dev.get('peak_bandwidth_source', 'unknown'))})", highlight=False)
    console.print(f"Programs: {escape(', '.join(data['modules']))}", highlight=False)
    console.print(f"XLA device time {data['total_ms']:,.3f} ms, idle {data['idle_ms']:,.3f} ms "
                  f"({data['idle_percent']:.1f}%); FLOPS utilisation "
                  f"{_pct(data['flops_utilization'])}, bandwidth utilisation "
                  f"{_pct(data['bandwidth_utilization'])}", highlight=False)
    print_table(console, "By category",
                [("category", "name"), ("time ms", "num"), ("time %", "num"),
                 ("FLOPS util.", "num"), ("BW util.", "num"), ("ops", "num")],
                [[c["name"], f"{c['time_ms']:,.3f}", f"{c['time_percent']:.1f}",
                  _pct(c["flops_utilization"]), _pct(c["bandwidth_utilization"]),
                  str(len(c["ops"]))] for c in data["categories"]],
                "No XLA op ran on this device.")
    shown = data["ops"][:top]
    several = len(data["modules"]) > 1

    def op_cell(o: dict[str, Any]) -> Text:
        where = f"{o['module']} · {o['category']}" if several else o["category"]
        return Text(o["name"]) + Text(f"\n  {where}", style="dim")

    print_table(console, f"Top ops ({len(shown)} of {len(data['ops'])})",
                [("op\n  " + ("program · " if several else "") + "category", "name"),
                 ("#", "num"), ("self ms", "num"), ("time %", "num"), ("GFLOP/s", "num"),
                 ("GiB/s", "num"), ("FLOP/B", "num"), ("bound by", "text"),
                 ("FLOPS util.", "num")],
                [[op_cell(o), count_text(o["occurrences"]), f"{o['self_ms']:,.3f}",
                  f"{o['time_percent']:.1f}",
                  ("~" if o["flops_estimated"] else "") + _num(o["gflops_per_s"]),
                  _num(o["gbytes_per_s"]), _num(o["operational_intensity"], 2), o["bound_by"],
                  _pct(o["flops_utilization"])] for o in shown],
                "No XLA ops in this profile.")
    for note in data["notes"]:
        console.print(f"Note: {escape(note)}", style="yellow", highlight=False)
