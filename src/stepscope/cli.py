"""The ``stepscope`` command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from stepscope import __version__
from stepscope.errors import StepscopeError


def _cmd_demo(args: argparse.Namespace) -> int:
    from stepscope import demo

    print(f"stepscope demo: training a small NumPy model for {args.steps} steps "
          f"under the profiler …", flush=True)
    result = demo.run(args.logdir, steps=args.steps, python_tracer=not args.no_python_tracer)
    print(f"final loss {result.final_loss:.4f}")
    print(f"profile written to {result.path}")
    print(f"open it with TensorBoard/XProf: tensorboard --logdir {args.logdir}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = argparse.ArgumentParser(prog="stepscope", description=__doc__)
    parser.add_argument("--version", action="version", version=f"stepscope {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="profile a built-in sample workload")
    demo.add_argument("--logdir", default="demo-logs", help="where to write the profile")
    demo.add_argument("--steps", type=int, default=30, help="training steps to run")
    demo.add_argument("--no-python-tracer", action="store_true",
                      help="do not record Python function calls")
    demo.set_defaults(func=_cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: run one subcommand; user errors exit 2 with one line, no traceback."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except StepscopeError as err:
        print(f"stepscope: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
