"""``stepscope diff BASE NEW``: how one run differs from another (either may be a summary)."""

from __future__ import annotations

import argparse
import json
from typing import Any


def add_parser(sub: Any) -> None:
    """Register ``diff`` on ``sub`` (from ``add_subparsers``)."""
    p = sub.add_parser("diff", help="compare two runs: step time with a confidence interval, "
                       "breakdown, ops, kernels, memory, hosts",
                       description="Compare NEW with BASE. Each is a run (a logdir, run "
                       "directory or file) or a summary.json from `stepscope summary`.")
    p.add_argument("base", metavar="BASE", help="the baseline: a run or a summary.json")
    p.add_argument("new", metavar="NEW", help="the run to compare: a run or a summary.json")
    p.add_argument("--json", action="store_true", help="print the whole comparison as JSON")
    p.add_argument("--top", type=int, default=10,
                   help="ops and kernels shown in the terminal (default 10)")
    p.add_argument("--no-cache", action="store_true",
                   help="read the profiles afresh, bypassing the on-disk cache")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from stepscope.analysis.tools.run_diff import diff
    from stepscope.cli.summary import load_side
    from stepscope.views.diff_report import diff_lines

    base = load_side(args.base, use_cache=not args.no_cache)
    new = load_side(args.new, use_cache=not args.no_cache)
    result = diff(base, new)
    if args.json:
        print(json.dumps(result.to_dict(), indent=1, allow_nan=False))
    else:
        print("\n".join(diff_lines(result, max(args.top, 0))))
    return 0
