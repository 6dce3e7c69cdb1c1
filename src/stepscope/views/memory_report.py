"""The memory profile in the terminal: a summary per allocator and its breakdown at the peak."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table


def size_text(value: int | None) -> str:
    """Bytes in binary units (``-`` when unknown)."""
    if value is None:
        return "-"
    amount = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(amount) < 1024 or unit == "TiB":
            return f"{amount:.0f} {unit}" if unit == "B" else f"{amount:.2f} {unit}"
        amount /= 1024
    return f"{amount:.2f} TiB"


def render_memory(data: dict[str, Any], console: Console, *, limit: int | None = 10) -> None:
    """Print the memory profile (``RunModel.memory_dict()``): one summary row per allocator,
    then each allocator's heaviest live allocations at its peak."""
    if not data["allocators"]:
        console.print("No memory activity was recorded in this profile.", highlight=False)
        return
    summary = Table(title="Memory per allocator", title_justify="left")
    for col in ("host", "allocator", "peak in use", "at ms", "step", "capacity", "reserved",
                "stack", "fragm.", "allocs", "frees"):
        summary.add_column(col, justify="left" if col in ("host", "allocator") else "right")
    for a in data["allocators"]:
        frag = a["fragmentation_at_peak"]
        summary.add_row(escape(a["host"]), escape(a["name"]),
                        size_text(a["peak_bytes_in_use"]), f"{a['peak_time_ms']:.3f}",
                        "-" if a["peak_step"] is None else str(a["peak_step"]),
                        size_text(a["capacity_bytes"]), size_text(a["peak_reserved_bytes"]),
                        size_text(a["stack_bytes_at_peak"]),
                        "-" if frag is None else f"{frag:.1%}", str(a["num_allocations"]),
                        str(a["num_deallocations"]))
    console.print(summary)
    for a in data["allocators"]:
        rows = a["breakdown_at_peak"] if not limit else a["breakdown_at_peak"][:limit]
        table = Table(title=f"{escape(a['name'])} on {escape(a['host'])}: live at the peak "
                      f"({len(rows)} of {a['breakdown_rows_total']} rows)",
                      title_justify="left")
        for col in ("op", "size", "requested", "occurrences", "region", "type", "shape"):
            table.add_column(col, justify="left" if col in ("op", "region", "type", "shape")
                             else "right", overflow="fold")
        for r in rows:
            table.add_row(escape(r["op"] or "(unknown)"), size_text(r["size_bytes"]),
                          size_text(r["requested_bytes"]), str(r["occurrences"]),
                          escape(r["region_type"]), escape(r["data_type"]),
                          escape(r["shape"]))
        console.print(table)
    if data["ops"]:
        ops = data["ops"] if not limit else data["ops"][:limit]
        table = Table(title=f"Memory by op ({len(ops)} of {len(data['ops'])})",
                      title_justify="left")
        for col in ("op", "allocator", "allocated", "self allocated"):
            table.add_column(col, justify="left" if col in ("op", "allocator") else "right",
                             overflow="fold")
        for o in ops:
            table.add_row(escape(o["name"]), escape(o["allocator"]),
                          size_text(o["allocated_bytes"]), size_text(o["self_allocated_bytes"]))
        console.print(table)
    for host, problems in data["problems"].items():
        text = ", ".join(f"{k.replace('_', ' ')}: {v}" for k, v in sorted(problems.items()))
        console.print(f"Host {escape(host)}: data problems ({text}).", style="yellow",
                      highlight=False)
