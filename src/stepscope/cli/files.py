"""``export`` (a profile as Chrome-trace JSON) and ``timeline`` (TensorFlow's StepStats as
TensorFlow's timeline module draws it)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from stepscope.cli import common
from stepscope.cli.common import add_no_cache_arg, add_path_arg, open_run


def _cmd_export(args: argparse.Namespace) -> int:
    from stepscope.formats.chrome_trace_writer import write_chrome_trace
    from stepscope.views import report

    run = open_run(args)
    names = [args.host] if args.host is not None else run.hosts
    tables = run.tables
    hosts = ((n, tables.hosts[n], run.trace_index(n)) for n in names)
    total = sum(len(tables.hosts[n]) for n in names)
    with report.count_progress(common.console(stderr=True), "writing events", total) as progress:
        count = write_chrome_trace(args.chrome_trace, hosts, progress=progress)
    print(f"wrote {count} events to {args.chrome_trace}", file=sys.stderr)
    return 0


def _cmd_timeline(args: argparse.Namespace) -> int:
    from stepscope.formats.output_file import write_output
    from stepscope.timeline import Timeline

    text = Timeline(args.file).generate_chrome_trace_format(
        show_dataflow=args.show_dataflow, show_memory=args.show_memory)
    write_output(args.output, (text + "\n").encode("utf-8"))
    if args.output != "-":
        print(f"wrote {args.output}", file=sys.stderr)
    return 0


def add_parser(sub: Any) -> None:
    """Register ``export`` and ``timeline`` on ``sub``."""
    exp = sub.add_parser("export", help="write a profile as Chrome-trace JSON (Perfetto, "
                         "chrome://tracing)",
                         description="Every event of the profile's hosts as Chrome-trace "
                         "JSON: a process per plane, a thread per line, counters, and flows "
                         "from each kernel launch to its kernel. Gzipped when FILE ends in .gz.")
    add_path_arg(exp)
    exp.add_argument("--chrome-trace", metavar="FILE", required=True,
                     help="where to write the trace (e.g. out.json.gz)")
    exp.add_argument("--host", help="only this host (default: all hosts)")
    add_no_cache_arg(exp)
    exp.set_defaults(func=_cmd_export)

    tl = sub.add_parser("timeline", help="TensorFlow RunMetadata/StepStats as a Chrome trace, "
                        "as TensorFlow's timeline module draws it",
                        description="Write the Chrome trace that TensorFlow's "
                        "timeline.Timeline(step_stats).generate_chrome_trace_format() makes, "
                        "without TensorFlow. FILE: RunMetadata or StepStats, binary or text.")
    tl.add_argument("file", metavar="FILE", help="a RunMetadata or StepStats .pb/.pbtxt file")
    tl.add_argument("-o", "--output", metavar="OUT", required=True,
                    help="where to write the trace JSON ('-': standard output)")
    tl.add_argument("--show-memory", action="store_true",
                    help="add tensor objects and a memory counter per allocator")
    tl.add_argument("--show-dataflow", action=argparse.BooleanOptionalAction, default=True,
                    help="flows from each tensor's producer to its consumers (default: on)")
    tl.set_defaults(func=_cmd_timeline)
