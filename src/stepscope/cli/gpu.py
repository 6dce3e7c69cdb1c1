"""``stepscope gpu``: the GPU timeline of a run (where device time went, idle causes,
communication overlap, launches, queues, kernel sequences, the critical path across ranks)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

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
    gpu.add_argument("path", help="a logdir (its newest run), a run directory or one file")
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
    gpu.add_argument("--no-cache", action="store_true",
                     help="parse the profile again instead of using the on-disk cache")
    gpu.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the GPU timeline of ``args.path``."""
    from stepscope.analysis.advice import gpu_timeline_advice
    from stepscope.analysis.gpu_timeline import Options, gpu_timeline_of, has_device_activity
    from stepscope.formats.run_reader import load
    from stepscope.views import report
    from stepscope.views.gpu_report import render_gpu_timeline

    if not 0 <= args.kernel_wait_us <= 1e9:
        raise StepscopeError("--kernel-wait-us must be between 0 and 1e9; pass a number of "
                             "microseconds in that range.")
    console = report_console()
    with report.loading_progress(report_console(stderr=True)) as progress:
        profile = load(args.path, use_cache=not args.no_cache, progress=progress)
    for name, why in profile.failed.items():
        print(f"stepscope: warning: host {name} could not be read: {why}", file=sys.stderr)
    if args.host is not None and args.host not in profile.hosts:
        raise StepscopeError(f"No host {args.host!r} in this run; it has "
                             f"{', '.join(profile.hosts)}.")
    if not has_device_activity(profile, args.host):
        print("stepscope: note: no GPU activity in this run (no kernels, copies or sets on "
              "a device); only host-side collectives can be followed.", file=sys.stderr)
    result = gpu_timeline_of(profile, args.host,
                             Options(kernel_wait_ns=round(args.kernel_wait_us * 1000),
                                     hta_scope=args.hta_scope))
    advice = gpu_timeline_advice(result)
    if args.json:
        print(json.dumps({**result.to_dict(), "advice": [r.to_dict() for r in advice]},
                         indent=2, allow_nan=False))
    else:
        render_gpu_timeline(result, console, step=args.step)
        for r in advice:
            console.print(f"• {r.text}", style="yellow")
    return 0


def report_console(stderr: bool = False) -> Any:
    from rich.console import Console

    console = Console(stderr=stderr, highlight=False)
    if not console.is_terminal:  # piped: no terminal width to fit, keep names whole
        console = Console(stderr=stderr, highlight=False, width=160)
    return console
