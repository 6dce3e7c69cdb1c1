"""``stepscope check NEW --baseline B``: a regression gate for CI (exit 0 within bounds, 1 on
a regression beyond noise and bound, 2 on a usage error)."""

from __future__ import annotations

import argparse
import json
from typing import Any


def add_parser(sub: Any) -> None:
    """Register ``check`` on ``sub`` (from ``add_subparsers``)."""
    p = sub.add_parser("check", help="fail (exit 1) when NEW regressed against a baseline "
                       "beyond noise and beyond the bounds",
                       description="Hold NEW to bounds against BASELINE (each a run or a "
                       "summary.json). A bound fails only when the regression is beyond noise "
                       "(the 95%% interval of the change leaves out zero) and its estimate "
                       "beyond the bound. Exit 0: within bounds; 1: a regression; 2: usage "
                       "error. Without --max: step_time=+5%% and peak_memory=+10%%.")
    p.add_argument("new", metavar="NEW", help="the run to check: a run or a summary.json")
    p.add_argument("--baseline", metavar="B", required=True,
                   help="the baseline: a run or a summary.json")
    p.add_argument("--max", metavar="BOUND", action="append", default=[], dest="bounds",
                   help="step_time=+5%%, peak_memory=+10%%, op:NAME=+20%% or "
                   "kernel:NAME=+20%%; repeat for several")
    p.add_argument("--junit", metavar="FILE", help="also write the result as JUnit XML")
    p.add_argument("--markdown", metavar="FILE", help="also write the result as Markdown "
                   "(e.g. $GITHUB_STEP_SUMMARY)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--no-cache", action="store_true",
                   help="read the profiles afresh, bypassing the on-disk cache")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from stepscope.analysis.tools.run_diff import DEFAULT_BOUNDS, check, parse_bound
    from stepscope.cli.summary import load_side
    from stepscope.views.diff_report import check_junit, check_lines, check_markdown
    from stepscope.views.report import write_text

    bounds = [parse_bound(b) for b in (args.bounds or DEFAULT_BOUNDS)]  # before any loading
    base = load_side(args.baseline, use_cache=not args.no_cache)
    new = load_side(args.new, use_cache=not args.no_cache)
    result = check(new, base, bounds)
    if args.junit:
        write_text(args.junit, check_junit(result))
    if args.markdown:
        write_text(args.markdown, check_markdown(result))
    if args.json:
        print(json.dumps(result.to_dict(), indent=1, allow_nan=False))
    else:
        print("\n".join(check_lines(result)))
    return result.exit_code
