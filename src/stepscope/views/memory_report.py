"""The memory profile in the terminal: a summary per allocator and its breakdown at the peak."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape

from stepscope.views.tables import Column, print_table
from stepscope.views.units import count_text, size_text


def render_memory(data: dict[str, Any], console: Console, *, limit: int | None = 10) -> None:
    """Print the memory profile (``RunModel.memory_dict()``): one summary row per allocator,
    then each allocator's heaviest live allocations at its peak."""
    if not data["allocators"]:
        console.print("No memory activity was recorded in this profile.", highlight=False)
        return
    allocators = data["allocators"]
    hosts = {a["host"] for a in allocators}
    # One host: its name is in the title, not in a column of the same word.
    host_column: list[Column] = [("host", "name")] if len(hosts) > 1 else []
    summary = [[*([a["host"]] if host_column else []), a["name"],
                size_text(a["peak_bytes_in_use"]), f"{a['peak_time_ms']:,.1f}",
                "-" if a["peak_step"] is None else str(a["peak_step"]),
                size_text(a["capacity_bytes"]), size_text(a["peak_reserved_bytes"]),
                size_text(a["stack_bytes_at_peak"]),
                "-" if a["fragmentation_at_peak"] is None
                else f"{a['fragmentation_at_peak']:.1%}",
                count_text(a["num_allocations"]), count_text(a["num_deallocations"])]
               for a in allocators]
    where = "" if host_column else f" on {next(iter(hosts))}"
    print_table(console, f"Memory per allocator{where}",
                [*host_column, ("allocator", "name"), ("peak in use", "num"), ("at ms", "num"),
                 ("step", "num"), ("capacity", "num"), ("reserved", "num"), ("stack", "num"),
                 ("fragm.", "num"), ("allocs", "num"), ("frees", "num")], summary, "")
    for a in allocators:
        rows = a["breakdown_at_peak"] if not limit else a["breakdown_at_peak"][:limit]
        print_table(console, f"{a['name']} on {a['host']}: live at the peak "
                    f"({len(rows)} of {a['breakdown_rows_total']} rows)",
                    [("op", "name"), ("size", "num"), ("requested", "num"),
                     ("occurrences", "num"), ("region", "text"), ("type", "text"),
                     ("shape", "name")],
                    [[r["op"] or "(unknown)", size_text(r["size_bytes"]),
                      size_text(r["requested_bytes"]), count_text(r["occurrences"]),
                      r["region_type"], r["data_type"], r["shape"]] for r in rows],
                    f"Nothing of {a['name']} on {a['host']} was live at its peak.")
    if data["ops"]:
        ops = data["ops"] if not limit else data["ops"][:limit]
        print_table(console, f"Memory by op ({len(ops)} of {len(data['ops'])})",
                    [("op", "name"), ("allocator", "name"), ("allocated", "num"),
                     ("self allocated", "num")],
                    [[o["name"], o["allocator"], size_text(o["allocated_bytes"]),
                      size_text(o["self_allocated_bytes"])] for o in ops], "")
    for host, problems in data["problems"].items():
        text = ", ".join(f"{k.replace('_', ' ')}: {v}" for k, v in sorted(problems.items()))
        console.print(f"Host {escape(host)}: data problems ({text}).", style="yellow",
                      highlight=False)
