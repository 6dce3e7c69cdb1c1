"""``demo`` (profile a sample workload) and ``serve`` (the web UI on a logdir)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from stepscope.cli.common import add_engine_arg, add_listen_args
from stepscope.errors import StepscopeError


def _cmd_demo(args: argparse.Namespace) -> int:
    from stepscope import demo

    print(f"stepscope demo: training a small NumPy model for {args.steps} steps "
          f"under the profiler …", flush=True)
    result = demo.run(args.logdir, steps=args.steps, python_tracer=not args.no_python_tracer)
    print(f"final loss {result.final_loss:.4f}")
    print(f"profile written to {result.path}")
    if args.no_serve:
        print(f"open it with: stepscope serve {args.logdir}")
        return 0
    from stepscope.web.http_server import serve

    _warn_if_no_bundle()
    serve(args.logdir, host=args.host, port=args.port, allow_hosts=args.allow_host)
    return 0


# OpenBLAS starts a thread per core when NumPy is imported, and a fresh server's first trace
# window waited for them (~50 ms of CPU on 2 cores); the server multiplies no matrices. A
# value the user set is kept.
_BLAS_THREADS = {"OPENBLAS_NUM_THREADS": "1"}


def _cmd_serve(args: argparse.Namespace) -> int:
    for name, value in _BLAS_THREADS.items():
        os.environ.setdefault(name, value)
    from stepscope.model.locations import as_path
    from stepscope.web.http_server import serve

    if args.path is not None and args.logdir is not None and args.path != args.logdir:
        raise StepscopeError(f"Two logdirs given ({args.path} and --logdir {args.logdir}); "
                             "pass one.")
    args.logdir = args.path or args.logdir or "logs"
    _warn_if_no_bundle()
    if not as_path(args.logdir).is_dir():
        print(f"stepscope: note: {args.logdir} does not exist yet; runs will appear when "
              "profiles are written there.", file=sys.stderr)
    serve(args.logdir, host=args.host, port=args.port, use_cache=not args.no_cache,
          allow_hosts=args.allow_host, engine=args.engine,
          allow_link_local_capture=args.allow_link_local_capture)
    return 0


def _warn_if_no_bundle() -> None:
    """Say so before serving when this install has no built web UI."""
    from stepscope.web.assets import missing_bundle_message

    message = missing_bundle_message()
    if message is not None:
        print(f"stepscope: warning: {message}", file=sys.stderr)


def add_parser(sub: Any) -> None:
    """Register ``demo`` and ``serve`` on ``sub``."""
    demo = sub.add_parser("demo", help="profile a built-in sample workload and serve it",
                          description="Train a small NumPy model for --steps steps under the "
                          "profiler (Python tracer and NumPy memory tracer on), write the "
                          "profile under --logdir, print where, and serve the web UI on it "
                          "(unless --no-serve). Needs no framework.")
    demo.add_argument("--logdir", default="demo-logs", help="where to write the profile")
    demo.add_argument("--steps", type=int, default=30, help="training steps to run")
    demo.add_argument("--no-python-tracer", action="store_true",
                      help="do not record Python function calls")
    demo.add_argument("--no-serve", action="store_true",
                      help="only write the profile; do not start the web UI on it")
    add_listen_args(demo)
    demo.set_defaults(func=_cmd_demo)

    serve = sub.add_parser("serve", help="open the web UI on a logdir",
                           description="Serve the web UI (overview page, framework op stats, "
                           "...) for the runs of a logdir. New runs appear without a restart.")
    serve.add_argument("path", nargs="?", metavar="PATH",
                       help="a TensorBoard logdir, a run directory or a torch trace "
                       "directory (default: logs)")
    serve.add_argument("--logdir", help="the same as PATH (TensorBoard's spelling)")
    add_listen_args(serve)
    serve.add_argument("--no-cache", action="store_true",
                       help="parse profiles again instead of using the on-disk cache")
    add_engine_arg(serve)
    serve.add_argument("--allow-link-local-capture", action="store_true",
                       help="let captures started from the UI reach link-local addresses and "
                       "cloud metadata services (refused by default)")
    serve.set_defaults(func=_cmd_serve)
