"""``stepscope python``: where a run's Python time goes (top functions; exports)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from stepscope.errors import StepscopeError


def add_parser(sub: Any) -> None:
    """Register the ``python`` subcommand on ``sub`` (from ``add_subparsers``)."""
    p = sub.add_parser(
        "python", help="top Python functions of a run (tracer or sampler), flame-graph exports",
        description="Top Python functions by self and inclusive time, from the Python tracer "
        "(calls) or the Python sampler (samples), for the whole run, one step or a window; "
        "exports to CSV, speedscope JSON and collapsed stacks.")
    p.add_argument("path", help="a logdir, a run directory or an .xplane.pb file")
    p.add_argument("--host", help="the host (default: the first with Python data)")
    p.add_argument("--source", choices=("tracer", "sampler"),
                   help="which recording (default: the tracer where there is one)")
    p.add_argument("--step", type=int, help="only this step (by step number)")
    p.add_argument("--from-ms", type=float, dest="from_ms",
                   help="window start, in ms since the host's first Python event")
    p.add_argument("--to-ms", type=float, dest="to_ms",
                   help="window end, in ms since the host's first Python event")
    p.add_argument("--thread", help="one thread, by name or line id (default: all)")
    p.add_argument("--sort", choices=("self", "total", "count", "name"), default="self",
                   help="order of the table (default: self time)")
    p.add_argument("--filter", default="", help="only functions whose name contains this")
    p.add_argument("--limit", type=int, default=25,
                   help="rows shown in the terminal (default 25; 0: all)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--csv", help="write the top-functions table to this CSV file")
    p.add_argument("--speedscope", help="write the call tree to this speedscope JSON file")
    p.add_argument("--collapsed", help="write the call tree as collapsed stacks to this file")
    p.add_argument("--no-cache", action="store_true", help="do not read or write the cache")
    p.set_defaults(func=run)


def _window(args: argparse.Namespace, tables: Any, host: str | None) -> tuple[int | None,
                                                                             int | None]:
    """--from-ms/--to-ms as absolute ns (relative to the host's first Python event)."""
    if args.from_ms is None and args.to_ms is None:
        return None, None
    from stepscope.analysis.run_model.python_views import hosts_with_python, python_views

    have = hosts_with_python(tables)
    name = host or (have[0] if have else None)
    if name is None or name not in tables:
        return None, None
    whole = python_views(tables[name], name, source=args.source)
    lo = whole.start_ns
    start = None if args.from_ms is None else lo + int(args.from_ms * 1e6)
    end = None if args.to_ms is None else lo + int(args.to_ms * 1e6)
    return start, end


def run(args: argparse.Namespace) -> int:
    """Print (or export) the Python views of a run."""
    from stepscope.analysis.run_model.python_views import run_python_views
    from stepscope.cli.common import open_run
    from stepscope.views import report
    from stepscope.views.python_report import render_python

    if args.limit < 0:
        raise StepscopeError(f"--limit must be 0 or more, not {args.limit}.")
    opened = open_run(args)
    profile = opened.tables
    steps: dict[str, Any] = {}
    if args.step is not None:
        steps = {name: opened.model.hosts[name].steps for name in opened.hosts}
    start, end = _window(args, profile.hosts, args.host)
    views = run_python_views(profile.hosts, steps, host=args.host, source=args.source,
                             thread=args.thread, step=args.step, start_ns=start, end_ns=end)
    wrote = []
    if args.csv:
        report.write_text(args.csv, views.csv(args.sort, args.filter))
        wrote.append(args.csv)
    if args.speedscope:
        report.write_text(args.speedscope, views.speedscope_json(profile.run))
        wrote.append(args.speedscope)
    if args.collapsed:
        report.write_text(args.collapsed, views.collapsed())
        wrote.append(args.collapsed)
    for path in wrote:
        print(f"wrote {path}", file=sys.stderr)
    if args.json:
        print(json.dumps(views.to_dict(args.sort, args.filter), indent=2, allow_nan=False))
    elif not wrote:
        from stepscope.cli.common import console as _console

        render_python(views, _console(), sort=args.sort, filter_text=args.filter,
                      limit=args.limit or None)
    return 0
