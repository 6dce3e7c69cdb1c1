"""The GPU timeline in the terminal (``stepscope gpu``)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from stepscope.analysis.tools.critical_path import Path
from stepscope.analysis.tools.gpu_timeline import GpuTimeline

MAX_PATH_ROWS = 25


def _ms(us: float) -> str:
    return f"{us / 1e3:.3f}"


def render_gpu_timeline(result: GpuTimeline, console: Console, step: int | None = None) -> None:
    """Print the breakdown per device, idle causes, launches, sequences and one step's
    critical path."""
    if not result.devices:
        console.print("No GPU activity in this run.", style="yellow")
    t = Table(title="Temporal breakdown per device (share of its span)", title_justify="left")
    for col in ("host", "device", "rank", "span ms", "compute %", "comm %", "memory %",
                "idle %", "overlap %", "exposed comm ms"):
        t.add_column(col, justify="left" if col in ("host", "device") else "right")
    for d in result.devices:
        b = d.breakdown.to_dict()
        t.add_row(d.host, d.device, "–" if d.rank is None else str(d.rank), _ms(b["span_us"]),
                  f"{b['compute_percent']:.1f}", f"{b['communication_percent']:.1f}",
                  f"{b['memory_percent']:.1f}", f"{b['idle_percent']:.1f}",
                  "–" if b["overlap_percent"] is None else f"{b['overlap_percent']:.1f}",
                  _ms(b["exposed_comm_us"]))
    if result.devices:
        console.print(t)
        i = Table(title="Idle time per device by cause", title_justify="left")
        for col in ("host", "device", "idle ms", "host wait %", "kernel wait %", "other %"):
            i.add_column(col, justify="left" if col in ("host", "device") else "right")
        for d in result.devices:
            x = d.idle_total().to_dict()
            i.add_row(d.host, d.device, _ms(x["idle_us"]), f"{x['host_wait_percent']:.1f}",
                      f"{x['kernel_wait_percent']:.1f}", f"{x['other_percent']:.1f}")
        console.print(i)
        la = Table(title="Kernel launches (µs)", title_justify="left")
        for col in ("host", "device", "launches", "CPU p50", "CPU p99", "delay p50",
                    "delay p99", "short kernels", "outliers"):
            la.add_column(col, justify="left" if col in ("host", "device") else "right")
        for d in result.devices:
            x = d.launches.to_dict()
            la.add_row(d.host, d.device, str(x["launches"]),
                       f"{x['cpu_duration']['p50_us']:.1f}",
                       f"{x['cpu_duration']['p99_us']:.1f}",
                       f"{x['launch_delay']['p50_us']:.1f}",
                       f"{x['launch_delay']['p99_us']:.1f}",
                       f"{x['short_kernels']} ({x['short_kernels_percent']:.0f}%)",
                       str(x["cpu_duration_outliers"] + x["launch_delay_outliers"]))
        console.print(la)
        first = result.devices[0]
        if first.sequences:
            console.print(f"Frequent kernel sequences ({first.host} {first.device}):")
            for s in first.sequences[:5]:
                names = " → ".join(n[:40] for n in s.kernels)
                console.print(f"  {s.count}× {s.total_ns / 1e6:.3f} ms  {names}")
    _render_path(result, console, step)


def _render_path(result: GpuTimeline, console: Console, step: int | None) -> None:
    cp = result.critical_path
    steps = cp.steps()
    if not steps:
        return
    if step is None:
        step = max(steps, key=lambda s: max((p.step_ns for p in cp.paths if p.step == s),
                                            default=0))
    elif step not in steps:
        console.print(f"No step {step}; steps: {', '.join(map(str, steps))}.", style="yellow")
        return
    share = cp.bounding(step)
    console.print(f"Critical path of step {step}: share of every rank's path by rank: " +
                  ", ".join(f"{h} {v:.1f}%" for h, v in list(share.items())[:6]))
    path: Path = max((p for p in cp.paths if p.step == step), key=lambda p: p.step_ns)
    t = Table(title=f"Path ending on {path.host} ({path.length_ns / 1e6:.3f} ms; the "
              f"largest segments)", title_justify="left")
    for col in ("rank", "kind", "name", "ms", "%"):
        t.add_column(col, justify="right" if col in ("ms", "%") else "left",
                     overflow="fold" if col == "name" else "ellipsis")
    total = path.length_ns or 1
    for s in sorted(path.segments, key=lambda s: -s.duration_ns)[:MAX_PATH_ROWS]:
        name = s.name if len(s.name) <= 100 else s.name[:100] + "…"
        t.add_row(s.host, s.kind, name, f"{s.duration_ns / 1e6:.3f}",
                  f"{100 * s.duration_ns / total:.1f}")
    console.print(t)
