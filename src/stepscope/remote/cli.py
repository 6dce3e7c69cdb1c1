"""``stepscope capture``: capture running workers from the command line."""

from __future__ import annotations

import argparse
import json
import os
import threading
from typing import Any

from stepscope.errors import CaptureError

TOKEN_ENV = "STEPSCOPE_PROFILER_TOKEN"


def add_parser(subparsers: Any) -> None:
    """Register the ``capture`` subcommand on ``subparsers`` (from ``add_subparsers``)."""
    cap = subparsers.add_parser(
        "capture", help="capture a profile of running workers (profiler servers)",
        description="Capture DURATION of every worker at once into one new run under LOGDIR. "
        "Workers run stepscope.server.start(port) or tf.profiler.experimental.server.start"
        "(port).")
    cap.add_argument("addresses", metavar="ADDRS", nargs="?",
                     help="grpc://host:port of each worker, comma-separated (a host without "
                     "a port means port 6009); with --tpu, a Cloud TPU name")
    cap.add_argument("--snapshot", metavar="HOST:PORT",
                     help="instead of recording DURATION, fetch the window a running flight "
                     "recorder holds (stepscope.flight_recorder) from this worker at once")
    cap.add_argument("--tpu", action="store_true",
                     help="ADDRS is a Cloud TPU name: capture its workers (resolved through "
                     "the Cloud TPU API with TensorFlow's TPU cluster resolver)")
    cap.add_argument("--logdir", required=True, help="where to write the run")
    cap.add_argument("--duration-ms", type=int, default=2000,
                     help="how long to record (default 2000)")
    cap.add_argument("--retries", type=int, default=3,
                     help="attempts per worker before giving up on it (default 3)")
    cap.add_argument("--host-tracer-level", type=int, choices=range(4), default=2,
                     help="0 off, 1 user annotations, 2 default, 3 verbose")
    cap.add_argument("--python-tracer-level", type=int, choices=range(3), default=0,
                     help="1 records every Python and C function call, 2 Python functions "
                     "only (default 0)")
    cap.add_argument("--device-tracer-level", type=int, choices=range(3), default=1,
                     help="0: no framework or device tracing; 1 or 2: the workers' framework "
                     "and device tracers record (2 is passed on to TensorFlow, which treats "
                     "it as 1) (default 1)")
    cap.add_argument("--delay-ms", type=int, default=0,
                     help="start recording this long after the request (default 0)")
    cap.add_argument("--token", default=os.environ.get(TOKEN_ENV),
                     help=f"the workers' shared token (default: ${TOKEN_ENV})")
    cap.add_argument("--json", action="store_true", help="print the result as JSON")
    cap.set_defaults(func=run)


def _console(stderr: bool = False) -> Any:
    from rich.console import Console

    console = Console(stderr=stderr, highlight=False)
    if not console.is_terminal:  # piped: no terminal width to fit, keep names whole
        console = Console(stderr=stderr, highlight=False, width=160)
    return console


def run(args: argparse.Namespace) -> int:
    """Run a capture; 0 when every worker gave a profile, 1 when some did not."""
    from stepscope.capture.options import ProfilerOptions
    from stepscope.capture.session import check_writable
    from stepscope.model.locations import as_path
    from stepscope.remote import addresses, client

    if args.snapshot:
        if args.addresses or args.tpu:
            raise CaptureError("Pass either --snapshot HOST:PORT or ADDRS, not both.")
        return _snapshot(args)
    if not args.addresses:
        raise CaptureError("Pass the workers to capture (ADDRS), or --snapshot HOST:PORT.")
    if args.tpu:
        workers = addresses.resolve_tpu(args.addresses)
        args.addresses = ",".join(w.target for w in workers)
    else:
        workers = addresses.parse(args.addresses)
    options = ProfilerOptions(host_tracer_level=args.host_tracer_level,
                              python_tracer_level=args.python_tracer_level,
                              device_tracer_level=args.device_tracer_level,
                              delay_ms=args.delay_ms or None)
    client.check_arguments(args.duration_ms, options, args.retries, args.token)
    check_writable(as_path(args.logdir))  # before anything is asked of the workers
    err = _console(stderr=True)
    noun = "worker" if len(workers) == 1 else "workers"
    err.print(f"capturing {len(workers)} {noun} for {args.duration_ms / 1000:.1f} s …")
    states = {w.name: "waiting" for w in workers}
    lock = threading.Lock()

    with err.status(_status_line(states)) as status:
        def progress(update: client.WorkerProgress) -> None:
            with lock:
                states[update.worker] = _state_word(update)
                status.update(_status_line(states))

        try:
            result = client.trace(args.addresses, args.logdir, args.duration_ms, options,
                                  num_tracing_attempts=args.retries, token=args.token,
                                  progress=progress)
        except CaptureError as failure:
            if isinstance(failure.result, client.CaptureResult):
                _print_result(failure.result, args.json)
            raise
    _print_result(result, args.json)
    return 0 if result.ok else 1


def _snapshot(args: argparse.Namespace) -> int:
    """Fetch one worker's flight-recorder window into a new run."""
    from rich.markup import escape

    from stepscope.remote import client

    result = client.snapshot(args.snapshot, args.logdir, token=args.token)
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
        return 0
    _console().print(f"  {escape(result.worker)} [green]✓[/] {result.events:,} events: the "
                     f"flight recorder's window, run {escape(result.path.parent.name)} written "
                     f"to {escape(str(result.path.parent))}")
    return 0


def _state_word(update: Any) -> str:
    if update.state == "capturing":
        return "capturing" if update.attempt == 1 else f"capturing (try {update.attempt})"
    if update.state == "retrying":
        return f"retrying: {update.detail}"
    return update.state  # type: ignore[no-any-return]


def _status_line(states: dict[str, str]) -> str:
    return "   ".join(f"{name} {state}" for name, state in states.items())


def _print_result(result: Any, as_json: bool) -> None:
    from rich.markup import escape

    if as_json:
        print(json.dumps(result.to_dict(), indent=2))
        return
    out = _console()
    for w in result.workers:
        if w.ok:
            out.print(f"  {escape(w.worker)} [green]✓[/] {w.events:,} events")
        else:
            out.print(f"  {escape(w.worker)} [red]✗[/] {escape(w.error or 'failed')}")
    if result.succeeded:
        done = len(result.succeeded)
        out.print(f"run {escape(result.run_dir.name)} written to {escape(str(result.run_dir))} "
                  f"({done} of {len(result.workers)} workers)")
