"""``stepscope mcp``: the tools as a Model Context Protocol server over stdio."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from stepscope.errors import StepscopeError


def add_parser(subparsers: Any) -> None:
    """Register the ``mcp`` subcommand on ``subparsers`` (from ``add_subparsers``)."""
    cmd = subparsers.add_parser(
        "mcp", help="serve the tools to an AI coding agent (Model Context Protocol, stdio)",
        description="Serve stepscope's tools over stdio to an agent that speaks the Model "
        "Context Protocol (Claude Code, Cursor, VS Code, ...). Read-only: runs are named "
        "among those under LOGDIR, and nothing outside it is read.")
    cmd.add_argument("logdir", nargs="?", default=".", metavar="LOGDIR",
                     help="the logdir whose runs the agent may read (default: .)")
    cmd.add_argument("--allow-capture", action="store_true",
                     help="offer the capture tool: record a running job over gRPC into a "
                     "new run under LOGDIR (off by default)")
    cmd.add_argument("--no-cache", action="store_true",
                     help="neither read nor write the on-disk analysis cache")
    cmd.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Serve until the client closes stdin."""
    try:
        from stepscope.mcp.server import serve_stdio
    except ImportError as err:
        if (err.name or "").split(".")[0] not in ("mcp", "mcp_types"):
            raise
        raise StepscopeError("stepscope mcp needs the MCP SDK: pip install "
                             "'stepscope[mcp]' (or pip install mcp).") from err
    print(f"stepscope mcp: serving {args.logdir} over stdio"
          + (" (capture allowed)" if args.allow_capture else ""), file=sys.stderr)
    serve_stdio(args.logdir, allow_capture=args.allow_capture, use_cache=not args.no_cache)
    return 0
