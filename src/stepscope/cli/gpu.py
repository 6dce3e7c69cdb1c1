"""``stepscope gpu``: the GPU timeline of a run (where device time went, idle causes,
communication overlap, launches, queues, kernel sequences, the critical path across ranks)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from stepscope.cli.common import add_no_cache_arg, add_path_arg
from stepscope.errors import StepscopeError


def add_parser(subparsers: Any) -> None:
    """Register the ``gpu`` subcommand on ``subparsers`` (from ``add_subparsers``)."""
    gpu = subparsers.add_parser(
        "gpu", help="GPU timeline: time breakdown, idle causes, overlap, launches, "
        "critical path across ranks",
        description="Per rank and device: compute, communication, memory and idle time (of "
        "the span and of each step), why each stream sat idle, how much communication ran "
        "under compute, kernel launch delays and outliers, stream queue lengths, frequent "
        "kernel sequences; and per step the critical path across ranks. Kineto (PyTorch) "
        "traces and XSpace GPU profiles alike.")
    add_path_arg(gpu)
    gpu.add_argument("--json", action="store_true",
                     help="print everything as JSON (docs/gpu-timeline.md lists the keys)")
    gpu.add_argument("--host", help="only this host's devices and paths (default: all)")
    gpu.add_argument("--step", type=int, help="show the critical path of this step "
                     "(default: the longest)")
    gpu.add_argument("--kernel-wait-us", type=float, default=30.0,
                     help="gaps shorter than this between a stream's ops are kernel wait "
                     "(default 30, HTA's)")
    gpu.add_argument("--hta-scope", action="store_true",
                     help="count only the device ops HTA counts (those launched in the trace by "
                     "the end of the last step), to compare with HTA's figures")
    add_no_cache_arg(gpu)
    gpu.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the GPU timeline of ``args.path`` (the ``gpu_timeline`` tool)."""
    from stepscope.cli.common import open_run
    from stepscope.views.gpu_report import render_gpu_timeline

    if not 0 <= args.kernel_wait_us <= 1e9:
        raise StepscopeError("--kernel-wait-us must be between 0 and 1e9; pass a number of "
                             "microseconds in that range.")
    opened = open_run(args)
    if not opened.tool_available("gpu_timeline", args.host):
        print("stepscope: note: no GPU activity in this run (no kernels, copies or sets on "
              "a device); only host-side collectives can be followed.", file=sys.stderr)
    result = opened.tool("gpu_timeline", args.host,
                         kernel_wait_ns=round(args.kernel_wait_us * 1000),
                         hta_scope=args.hta_scope)
    if args.json:
        print(result.to_json(indent=2))
    else:
        console = report_console()
        render_gpu_timeline(result.value, console, step=args.step)
        for r in result.data["advice"]:
            console.print(f"• {r['text']}", style="yellow")
    return 0


def report_console(stderr: bool = False) -> Any:
    from rich.console import Console

    console = Console(stderr=stderr, highlight=False)
    if not console.is_terminal:  # piped: no terminal width to fit, keep names whole
        console = Console(stderr=stderr, highlight=False, width=160)
    return console
