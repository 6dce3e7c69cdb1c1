"""The memory viewer in the terminal: the program's sizes, then the buffers live at its
peak."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape

from stepscope.views.tables import print_table
from stepscope.views.units import size_text


def render_memory_viewer(data: dict[str, Any], console: Console, *, limit: int = 20) -> None:
    """Print a memory viewer (``MemoryViewer.to_dict()``)."""
    console.print(f"Program {escape(data['module_label'] or data['module'])}, memory space "
                  f"{data['memory_space']}", highlight=False)
    console.print(f"Peak heap {size_text(data['peak_heap_bytes'])} (unpadded "
                  f"{size_text(data['peak_unpadded_heap_bytes'])}, padding overhead "
                  f"{size_text(data['padding_overhead_bytes'])}); arguments "
                  f"{size_text(data['argument_bytes'])}, temporaries "
                  f"{size_text(data['temporary_bytes'])}, outputs "
                  f"{size_text(data['output_bytes'])}; "
                  f"reserved {size_text(data['reserved_bytes'])}", highlight=False)
    heap = data["heap_bytes"]
    if heap:
        at = data["peak_index"]
        where = data["instructions"][at - 1] if 0 < at <= len(data["instructions"]) else ""
        console.print(f"Heap over {len(heap)} points of program order; peak at point {at}"
                      + (f" (after {escape(where)})" if where else ""), highlight=False)
    buffers = data["peak_buffers"]
    print_table(console, "Buffers live at the peak, largest first",
                [("buffer", "name"), ("op", "name"), ("shape", "name"), ("size", "num"),
                 ("unpadded", "num"), ("type", "text"), ("source op", "name")],
                [[b["name"], b["op"], b["shape"], size_text(b["size_bytes"]),
                  size_text(b["unpadded_bytes"]), b["allocation_type"], b["source_op"]]
                 for b in (buffers[:limit] if limit else buffers)],
                "No buffer is live at the peak.")
    if limit and len(buffers) > limit:
        console.print(f"… {len(buffers) - limit} more buffers (--limit 0 shows all)")
    if data["small_buffers_count"]:
        console.print(f"{data['small_buffers_count']} buffers under "
                      f"{size_text(data['small_buffer_limit'])}: "
                      f"{size_text(data['small_buffers_bytes'])}", highlight=False)
    others = [p["label"] for p in data["programs"] if p["label"] != data["module_label"]]
    if others:
        console.print(f"Other programs (--module): {escape(', '.join(others[:20]))}"
                      + (" …" if len(others) > 20 else ""), highlight=False)
    for note in data["notes"]:
        console.print(f"Note: {escape(note)}", highlight=False)
