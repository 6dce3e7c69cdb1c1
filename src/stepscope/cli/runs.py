"""``stepscope runs PATH``: the runs of a logdir, oldest first (the newest, the default, last)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from stepscope.errors import StepscopeError


def add_parser(sub: Any) -> None:
    """Register ``runs`` on ``sub`` (from ``add_subparsers``)."""
    runs = sub.add_parser("runs", help="list the runs of a logdir",
                          description="List the runs under a logdir, oldest first, with their "
                          "hosts and size; the last is the newest, which commands read when "
                          "given the logdir. Pass a name to a command's --run to read another.")
    runs.add_argument("logdir", metavar="PATH", help="a TensorBoard logdir")
    runs.add_argument("--json", action="store_true", help="print the runs as JSON")
    runs.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the runs of ``args.logdir``."""
    from stepscope.model.locations import as_path
    from stepscope.model.logdir import is_profile_file, list_runs

    if not as_path(args.logdir).is_dir():
        raise StepscopeError(f"{args.logdir} is not a directory; pass a logdir.")
    rows: list[dict[str, Any]] = []
    for name, path in list_runs(args.logdir).items():
        files = [p for p in path.iterdir() if p.is_file() and is_profile_file(p)]
        rows.append({"name": name, "path": str(path), "files": len(files),
                     "bytes": sum(p.stat().st_size for p in files)})
    if args.json:
        print(json.dumps({"logdir": str(args.logdir), "runs": rows}, indent=2))
        return 0
    if not rows:
        print(f"{args.logdir} holds no runs.")
        return 0
    width = max(len(r["name"]) for r in rows)
    for i, row in enumerate(rows):
        newest = "  (newest)" if i == len(rows) - 1 else ""
        print(f"{row['name']:<{width}}  {row['files']:>3} file{'s' if row['files'] != 1 else ' '}"
              f"  {_size(row['bytes']):>10}{newest}")
    return 0


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"
