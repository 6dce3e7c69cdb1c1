"""The memory viewer in the terminal: the program's sizes, then the buffers live at its
peak."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

_MIB = 1 << 20


def _mib(n: float) -> str:
    return f"{n / _MIB:,.2f} MiB"


def render_memory_viewer(data: dict[str, Any], console: Console, *, limit: int = 20) -> None:
    """Print a memory viewer (``MemoryViewer.to_dict()``)."""
    console.print(f"Program {escape(data['module_label'] or data['module'])}, memory space "
                  f"{data['memory_space']}", highlight=False)
    console.print(f"Peak heap {_mib(data['peak_heap_bytes'])} (unpadded "
                  f"{_mib(data['peak_unpadded_heap_bytes'])}, padding overhead "
                  f"{_mib(data['padding_overhead_bytes'])}); arguments "
                  f"{_mib(data['argument_bytes'])}, temporaries "
                  f"{_mib(data['temporary_bytes'])}, outputs {_mib(data['output_bytes'])}; "
                  f"reserved {_mib(data['reserved_bytes'])}", highlight=False)
    heap = data["heap_bytes"]
    if heap:
        at = data["peak_index"]
        where = data["instructions"][at - 1] if 0 < at <= len(data["instructions"]) else ""
        console.print(f"Heap over {len(heap)} points of program order; peak at point {at}"
                      + (f" (after {escape(where)})" if where else ""), highlight=False)
    table = Table(title="Buffers live at the peak, largest first", title_justify="left")
    for col in ("buffer", "op", "shape", "size", "unpadded", "type", "source op"):
        table.add_column(col, justify="right" if col in ("size", "unpadded") else "left")
    buffers = data["peak_buffers"]
    for b in buffers[:limit] if limit else buffers:
        table.add_row(escape(b["name"]), escape(b["op"]), escape(b["shape"]),
                      _mib(b["size_bytes"]), _mib(b["unpadded_bytes"]),
                      b["allocation_type"], escape(b["source_op"]))
    console.print(table)
    if limit and len(buffers) > limit:
        console.print(f"… {len(buffers) - limit} more buffers (--limit 0 shows all)")
    if data["small_buffers_count"]:
        console.print(f"{data['small_buffers_count']} buffers under "
                      f"{data['small_buffer_limit']:,} bytes: "
                      f"{_mib(data['small_buffers_bytes'])}", highlight=False)
    others = [p["label"] for p in data["programs"] if p["label"] != data["module_label"]]
    if others:
        console.print(f"Other programs (--module): {escape(', '.join(others[:20]))}"
                      + (" …" if len(others) > 20 else ""), highlight=False)
    for note in data["notes"]:
        console.print(f"Note: {escape(note)}", highlight=False)
