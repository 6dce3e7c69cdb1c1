"""``stepscope profile [options] -- python train.py ARGS``: profile a program without editing it."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from stepscope.capture.options import (
    DEFAULT_COUNTER_INTERVAL_MS,
    DEFAULT_MAX_EVENTS,
    DEFAULT_MEMORY_THRESHOLD,
    ProfilerOptions,
)
from stepscope.errors import StepscopeError

DEFAULT_LOGDIR = "logs"

if TYPE_CHECKING:
    from stepscope.capture.launcher import Program


def add_parser(sub: Any) -> None:
    """Register ``profile`` on ``sub`` (from ``add_subparsers``)."""
    from stepscope.cli.common import add_listen_args

    prof = sub.add_parser(
        "profile", help="run a Python program under the profiler and print its report",
        description="Run PROGRAM (python SCRIPT ARGS, python -m MODULE ARGS or python -c "
        "CODE) in this interpreter under a profiling session, write its profile under "
        "--logdir and print the report when it ends. Steps are found where the framework "
        "marks them: PyTorch optimizer steps or ProfilerStep, Keras batches, JAX "
        "StepTraceAnnotation, Trace(..., _r=1) in the program. The program's output and "
        "exit code are its own; Ctrl-C stops it and still writes the profile.",
        epilog="example: stepscope profile --steps 20 -- python train.py --epochs 1")
    prof.add_argument("--logdir", default=DEFAULT_LOGDIR,
                      help="where to write the profile (default %(default)s)")
    add_options_args(prof)
    add_flight_args(prof)
    prof.add_argument("--delay", type=_seconds, default=0.0, metavar="SECONDS",
                      help="start recording this long after the program starts "
                      "(default 0)")
    prof.add_argument("--duration", type=_seconds, metavar="SECONDS",
                      help="stop recording after this long and write the profile; the "
                      "program runs on (default: until it ends)")
    prof.add_argument("--steps", type=_positive, metavar="N",
                      help="stop recording after N steps that the profiler marks (PyTorch "
                      "optimizer steps, Keras batches) and write the profile; the program "
                      "runs on (default: until it ends)")
    prof.add_argument("--no-report", action="store_true",
                      help="do not print the report when the program ends")
    prof.add_argument("--serve", action="store_true",
                      help="when the program ends, serve the web UI on --logdir (Ctrl-C "
                      "stops it)")
    add_listen_args(prof)
    prof.add_argument("program", nargs=argparse.REMAINDER, metavar="-- PROGRAM",
                      help="the program and its arguments, after --")
    prof.set_defaults(func=run)


def add_options_args(parser: argparse.ArgumentParser) -> None:
    """The ``ProfilerOptions`` arguments (``options_from_args`` reads them back)."""
    parser.add_argument("--python-tracer", action="store_true",
                        help="record every Python and C function call (python_tracer_level=1)")
    parser.add_argument("--python-calls-only", action="store_true",
                        help="record every Python function call but no C function's, through "
                        "a hook several times cheaper (python_tracer_level=2)")
    parser.add_argument("--host-tracer-level", type=int, choices=range(4), default=2,
                        help="0 off, 1 the program's Trace annotations only, 2 also "
                        "stepscope's own instrumentation, 3 verbose (default 2)")
    parser.add_argument("--device-tracer-level", type=int, choices=range(3), default=1,
                        help="0: no framework or device tracing; 1 or 2: the PyTorch, JAX, "
                        "TensorFlow and CUDA profilers of the frameworks the program imports "
                        "record alongside (2 is passed on to TensorFlow, which treats it as "
                        "1) (default 1)")
    parser.add_argument("--sample", nargs="?", type=int, const=100, default=0, metavar="HZ",
                        help="sample every thread's Python stack HZ times a second (100 when "
                        "no HZ is given; python_sampling_hz), a few percent of overhead "
                        "where --python-tracer records every call")
    parser.add_argument("--memory-tracer", action="store_true",
                        help="record NumPy allocations and frees (memory_tracer_level=1)")
    parser.add_argument("--memory-threshold", type=int, default=DEFAULT_MEMORY_THRESHOLD,
                        metavar="BYTES", help="smallest NumPy allocation the memory tracer "
                        "records (default %(default)s)")
    parser.add_argument("--max-events", type=int, default=DEFAULT_MAX_EVENTS, metavar="N",
                        help="events kept; past it events are dropped and counted "
                        "(default %(default)s)")
    parser.add_argument("--counter-interval-ms", type=int,
                        default=DEFAULT_COUNTER_INTERVAL_MS, metavar="MS",
                        help="system counters' sampling period, 0 for none "
                        "(default %(default)s)")


def options_from_args(args: argparse.Namespace) -> ProfilerOptions:
    """The session's ``ProfilerOptions`` from the parsed arguments (one place for them all)."""
    delay_ms = round(args.delay * 1000) if getattr(args, "delay", 0) else None
    return ProfilerOptions(
        host_tracer_level=args.host_tracer_level,
        python_tracer_level=(2 if args.python_calls_only else 1 if args.python_tracer else 0),
        device_tracer_level=args.device_tracer_level,
        delay_ms=delay_ms,
        max_events=args.max_events,
        counter_interval_ms=args.counter_interval_ms,
        memory_tracer_level=1 if args.memory_tracer else 0,
        memory_threshold_bytes=args.memory_threshold,
        python_sampling_hz=getattr(args, "sample", 0),
    )


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 24 * 3600:
        raise argparse.ArgumentTypeError(f"expected seconds between 0 and 86400, not {text!r}")
    return value


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, not {text!r}")
    return value


def add_flight_args(parser: argparse.ArgumentParser) -> None:
    """``--flight-recorder`` and its settings (``capture.flight.start_from_args``)."""
    group = parser.add_argument_group(
        "flight recorder", "Keep a bounded window of the last steps instead of recording "
        "everything, and save it when something goes wrong (docs/flight-recorder.md)")
    group.add_argument("--flight-recorder", action="store_true",
                       help="run under a flight recorder: a run is saved only on a slow step "
                       "(marked with stepscope.flight_recorder.step(i)), an exception, "
                       "SIGUSR1, SIGTERM or a snapshot")
    group.add_argument("--flight-steps", type=_positive, metavar="N",
                       help="keep the last N steps (default 1000 when --flight-seconds is "
                       "not given)")
    group.add_argument("--flight-seconds", type=_seconds, metavar="S",
                       help="keep the last S seconds instead")
    group.add_argument("--slow-factor", type=float, default=3.0, metavar="K",
                       help="a step longer than K x the rolling median is slow (default 3)")
    group.add_argument("--slow-ms", type=float, metavar="MS",
                       help="a step longer than MS milliseconds is slow")
    group.add_argument("--max-dumps", type=_positive, default=5, metavar="N",
                       help="at most N automatic dumps (default 5)")


def _run_flight(args: argparse.Namespace, program: Program) -> int:
    from stepscope.capture import launcher

    print(f"stepscope: flight recorder on {program.describe()} into {args.logdir}",
          file=sys.stderr, flush=True)
    code, dumps, _ = launcher.run_flight(
        program, args.logdir,
        {"steps": args.flight_steps, "seconds": args.flight_seconds,
         "slow_factor": args.slow_factor, "slow_ms": args.slow_ms,
         "max_dumps": args.max_dumps, "python_tracer": args.python_tracer,
         "counters": args.counter_interval_ms > 0})
    for d in dumps:
        print(f"stepscope: saved {d.trigger} window to {d.path}", file=sys.stderr)
    if not dumps:
        print("stepscope: nothing triggered a dump; nothing was written.", file=sys.stderr)
    return code


def run(args: argparse.Namespace) -> int:
    """Run the program under a session; its exit code (130 after Ctrl-C)."""
    from stepscope.capture import launcher

    program = launcher.parse_command(args.program)
    if args.flight_recorder:
        return _run_flight(args, program)
    options = options_from_args(args)
    print(f"stepscope: profiling {program.describe()} into {args.logdir}", file=sys.stderr,
          flush=True)

    def interrupted() -> None:
        print("\nstepscope: interrupted; writing the profile", file=sys.stderr, flush=True)

    result = launcher.run(program, args.logdir, options, max_steps=args.steps,
                          duration_s=args.duration, on_interrupt=interrupted)
    if result.error is not None:
        print(f"stepscope: warning: no profile written: {result.error}", file=sys.stderr)
    elif result.profile is None:
        print("stepscope: warning: nothing was recorded.", file=sys.stderr)
    else:
        print(f"stepscope: profile written to {result.profile}", file=sys.stderr)
        if not args.no_report:
            _print_report(str(result.profile.parent))
    sys.stdout.flush()
    if args.serve and result.profile is not None:
        from stepscope.web.http_server import serve

        serve(args.logdir, host=args.host, port=args.port, allow_hosts=args.allow_host)
    return result.exit_code


def _print_report(run_dir: str) -> None:
    """The run's overview on standard error (standard output is the program's)."""
    from rich.console import Console

    from stepscope.run import Run
    from stepscope.views import report

    try:
        summary = Run.open(run_dir, engine="local").overview().data
    except StepscopeError as err:
        print(f"stepscope: warning: the report could not be made: {err}", file=sys.stderr)
        return
    console = Console(stderr=True, highlight=False)
    if not console.is_terminal:
        console = Console(stderr=True, highlight=False, width=120)
    report.render_overview(summary, console)
