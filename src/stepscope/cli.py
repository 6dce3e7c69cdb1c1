"""The ``stepscope`` command line."""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from stepscope.errors import StepscopeError, StepscopeWarning
from stepscope.version import __version__


def _cmd_demo(args: argparse.Namespace) -> int:
    from stepscope import demo

    print(f"stepscope demo: training a small NumPy model for {args.steps} steps "
          f"under the profiler …", flush=True)
    result = demo.run(args.logdir, steps=args.steps, python_tracer=not args.no_python_tracer)
    print(f"final loss {result.final_loss:.4f}")
    print(f"profile written to {result.path}")
    if args.no_serve:
        print(f"open it with: stepscope serve --logdir {args.logdir}")
        return 0
    from stepscope.web.http_server import serve

    serve(args.logdir, host=args.host, port=args.port)
    return 0


def _cmd_serve(args: argparse.Namespace) -> int:
    from stepscope.web.http_server import serve

    if not Path(args.logdir).is_dir():
        print(f"stepscope: note: {args.logdir} does not exist yet; runs will appear when "
              "profiles are written there.", file=sys.stderr)
    serve(args.logdir, host=args.host, port=args.port, use_cache=not args.no_cache)
    return 0


def _console(stderr: bool = False) -> Any:
    from rich.console import Console

    console = Console(stderr=stderr, highlight=False)
    if not console.is_terminal:  # piped: no terminal width to fit, keep names whole
        console = Console(stderr=stderr, highlight=False, width=160)
    return console


def _cmd_report(args: argparse.Namespace) -> int:
    from stepscope.analysis.advice import recommendations
    from stepscope.views import report

    model = _open_model(args)
    summary = {**model.overview_dict(),
               "recommendations": [r.to_dict() for r in recommendations(model)]}
    if args.json:
        print(json.dumps(summary, indent=2, allow_nan=False))
    else:
        console = _console()
        report.render_overview(summary, console)
        if len(model.hosts) > 1:
            report.render_pod(model.pod_dict(), console, per_step=False)
    return 0


def _open_model(args: argparse.Namespace) -> Any:
    """The run model of ``args.path`` with a progress bar; checks ``args.host`` and warns of
    hosts that could not be read."""
    from stepscope.run_loader import open_run_model
    from stepscope.views import report

    with report.loading_progress(_console(stderr=True)) as progress:
        model = open_run_model(args.path, use_cache=not args.no_cache, progress=progress)
    if getattr(args, "host", None) is not None:
        model.host_names(args.host)
    for name, why in model.failed.items():
        print(f"stepscope: warning: host {name} could not be read: {why}", file=sys.stderr)
    return model


def _cmd_pod(args: argparse.Namespace) -> int:
    from stepscope.analysis.run_to_pod_viewer import pod_viewer_csv
    from stepscope.views import report

    model = _open_model(args)
    data = dict(model.pod_dict())  # a copy: --host narrows it below
    csv_text = pod_viewer_csv(data)
    if args.host is not None:
        data["steps"] = [{**s, "per_host": {u: f for u, f in s["per_host"].items()
                                            if u == args.host or u.startswith(args.host + "/")}}
                         for s in data["steps"]]
    if args.csv:
        report.write_text(Path(args.csv), csv_text)
        print(f"wrote {len(data['steps'])} steps to {args.csv}", file=sys.stderr)
    if args.json:
        print(json.dumps(data, indent=2, allow_nan=False))
    elif not args.csv:
        report.render_pod(data, _console(), per_step=True, limit=args.limit or None)
    return 0


def _load_for_table(args: argparse.Namespace) -> Any:
    """Load ``args.path`` with a progress bar, check ``args.host`` and warn of failed hosts."""
    from stepscope.formats.run_reader import load
    from stepscope.views import report

    with report.loading_progress(_console(stderr=True)) as progress:
        profile = load(args.path, use_cache=not args.no_cache, progress=progress)
    if args.host is not None and args.host not in profile.hosts:
        raise StepscopeError(f"No host {args.host!r} in this run; it has "
                             f"{', '.join(profile.hosts)}.")
    for name, why in profile.failed.items():
        print(f"stepscope: warning: host {name} could not be read: {why}", file=sys.stderr)
    return profile


def _emit_table(args: argparse.Namespace, stats: Any, csv_text: Callable[[], str],
                what: str, render: Callable[[], None]) -> None:
    """Write ``--csv``, print ``--json``, or render the table (the default)."""
    from stepscope.views import report

    if args.csv:
        report.write_text(Path(args.csv), csv_text())
        print(f"wrote {len(stats.rows)} {what} to {args.csv}", file=sys.stderr)
    if args.json:
        print(json.dumps(stats.to_dict(), indent=2, allow_nan=False))
    elif not args.csv:
        render()


def _cmd_ops(args: argparse.Namespace) -> int:
    from stepscope.views import report

    stats = _open_model(args).op_stats(args.host, include_idle=args.include_idle)
    _emit_table(args, stats, lambda: report.ops_csv(stats), "ops",
                lambda: report.render_ops(stats, _console(), limit=args.limit or None))
    return 0


def _cmd_kernels(args: argparse.Namespace) -> int:
    from stepscope.analysis.kernel_stats import kernel_stats_csv
    from stepscope.views import report

    stats = _open_model(args).kernel_stats(args.host)
    _emit_table(args, stats, lambda: kernel_stats_csv(stats), "kernel rows",
                lambda: report.render_kernels(stats, _console(), limit=args.limit or None))
    return 0


def _cmd_input(args: argparse.Namespace) -> int:
    from stepscope.analysis.input_pipeline import input_ops_csv, input_pipeline_of
    from stepscope.views import report
    from stepscope.views.input_report import render_input

    result = input_pipeline_of(_open_model(args), host=args.host)
    if args.csv:
        report.write_text(Path(args.csv), input_ops_csv(result))
        print(f"wrote {len(result.rows)} input ops to {args.csv}", file=sys.stderr)
    if args.json:
        print(json.dumps(result.to_dict(), indent=2, allow_nan=False))
    elif not args.csv:
        render_input(result.to_dict(), _console(), limit=args.limit or None)
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    from stepscope.analysis.trace_index import index_for
    from stepscope.formats.chrome_trace_writer import write_chrome_trace
    from stepscope.views import report

    profile = _load_for_table(args)
    names = [args.host] if args.host is not None else list(profile.hosts)
    hosts = ((n, profile.hosts[n], index_for(profile.hosts[n], profile.sources.get(n),
                                             use_cache=not args.no_cache)) for n in names)
    total = sum(len(profile.hosts[n]) for n in names)
    with report.count_progress(_console(stderr=True), "writing events", total) as progress:
        count = write_chrome_trace(args.chrome_trace, hosts, progress=progress)
    print(f"wrote {count} events to {args.chrome_trace}", file=sys.stderr)
    return 0


def _add_listen_args(parser: argparse.ArgumentParser) -> None:
    from stepscope.web.http_server import DEFAULT_HOST, DEFAULT_PORT

    parser.add_argument("--host", default=DEFAULT_HOST,
                        help=f"address to listen on (default {DEFAULT_HOST}, this machine "
                        "only; 0.0.0.0 exposes the profiles to the network)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT,
                        help=f"port to listen on (default {DEFAULT_PORT})")


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
    demo.add_argument("--no-serve", action="store_true",
                      help="only write the profile; do not start the web UI on it")
    _add_listen_args(demo)
    demo.set_defaults(func=_cmd_demo)

    serve = sub.add_parser("serve", help="open the web UI on a logdir",
                           description="Serve the web UI (overview page, framework op stats, "
                           "...) for the runs of a logdir. New runs appear without a restart.")
    serve.add_argument("--logdir", required=True,
                       help="a TensorBoard logdir, a run directory or a torch trace directory")
    _add_listen_args(serve)
    serve.add_argument("--no-cache", action="store_true",
                       help="parse profiles again instead of using the on-disk cache")
    serve.set_defaults(func=_cmd_serve)

    rep = sub.add_parser("report", help="overview of a profile: steps, breakdown, top ops",
                         description="Print the overview of a run: step time, its breakdown, "
                         "the input-bound verdict, top ops and the run environment.")
    rep.add_argument("path", help="a logdir (its newest run), a run directory or one file")
    rep.add_argument("--json", action="store_true", help="print the overview as JSON")
    rep.add_argument("--no-cache", action="store_true",
                     help="parse the profile again instead of using the on-disk cache")
    rep.set_defaults(func=_cmd_report)

    ops = sub.add_parser("ops", help="framework op stats (time and self time per op)",
                         description="Time per op on the host and on devices, with self time.")
    ops.add_argument("path", help="a logdir (its newest run), a run directory or one file")
    ops.add_argument("--csv", metavar="FILE", help="write all rows as CSV to FILE")
    ops.add_argument("--json", action="store_true", help="print all rows as JSON")
    ops.add_argument("--host", help="only this host (default: all hosts summed)")
    ops.add_argument("--include-idle", action="store_true",
                     help="add IDLE rows: time on op threads/streams when no op ran")
    ops.add_argument("--limit", type=int, default=30,
                     help="rows shown in the terminal (0: all; default 30)")
    ops.add_argument("--no-cache", action="store_true",
                     help="parse the profile again instead of using the on-disk cache")
    ops.set_defaults(func=_cmd_ops)

    kern = sub.add_parser("kernels", help="GPU kernel stats (time per kernel, op and shape)",
                          description="Per kernel, the op that launched it and launch shape: "
                          "registers, shared memory, block and grid, Tensor Core use, and "
                          "count and total/avg/min/max time, by total time.")
    kern.add_argument("path", help="a logdir (its newest run), a run directory or one file")
    kern.add_argument("--csv", metavar="FILE", help="write all rows as CSV to FILE")
    kern.add_argument("--json", action="store_true", help="print all rows as JSON")
    kern.add_argument("--host", help="only this host (default: all hosts)")
    kern.add_argument("--limit", type=int, default=30,
                      help="rows shown in the terminal (0: all; default 30)")
    kern.add_argument("--no-cache", action="store_true",
                      help="parse the profile again instead of using the on-disk cache")
    kern.set_defaults(func=_cmd_kernels)

    inp = sub.add_parser("input", help="input pipeline analyzer: input-bound?, slow stage",
                         description="Is the run input-bound, where input time goes on the "
                         "host (reading, preprocessing, transfer), the input-op table, and the "
                         "bottleneck stage of the slowest pipeline run with a recommendation.")
    inp.add_argument("path", help="a logdir (its newest run), a run directory or one file")
    inp.add_argument("--csv", metavar="FILE", help="write the input-op table as CSV to FILE")
    inp.add_argument("--json", action="store_true", help="print the analysis as JSON")
    inp.add_argument("--host", help="only this host (default: all hosts)")
    inp.add_argument("--limit", type=int, default=30,
                     help="input ops shown in the terminal (0: all; default 30)")
    inp.add_argument("--no-cache", action="store_true",
                     help="parse the profile again instead of using the on-disk cache")
    inp.set_defaults(func=_cmd_input)

    pod = sub.add_parser("pod", help="pod viewer: every host's step time side by side, "
                         "stragglers",
                         description="Per step, each host's (or, for one host with several "
                         "devices, each device's) step time split into compute, input, "
                         "collectives, copies and other; the straggler of each step and how "
                         "long the others waited for it; how the hosts' clocks were lined up.")
    pod.add_argument("path", help="a logdir (its newest run), a run directory or one file")
    pod.add_argument("--json", action="store_true", help="print the pod viewer as JSON")
    pod.add_argument("--csv", metavar="FILE", help="write one row per step and host to FILE")
    pod.add_argument("--host", help="only this host's figures per step (stragglers are still "
                     "judged over all hosts)")
    pod.add_argument("--limit", type=int, default=20,
                     help="steps shown in the terminal (0: all; default 20)")
    pod.add_argument("--no-cache", action="store_true",
                     help="parse the profile again instead of using the on-disk cache")
    pod.set_defaults(func=_cmd_pod)

    exp = sub.add_parser("export", help="write a profile as Chrome-trace JSON (Perfetto, "
                         "chrome://tracing)",
                         description="Every event of the profile's hosts as Chrome-trace "
                         "JSON: a process per plane, a thread per line, counters, and flows "
                         "from each kernel launch to its kernel. Gzipped when FILE ends in .gz.")
    exp.add_argument("path", help="a logdir (its newest run), a run directory or one file")
    exp.add_argument("--chrome-trace", metavar="FILE", required=True,
                     help="where to write the trace (e.g. out.json.gz)")
    exp.add_argument("--host", help="only this host (default: all hosts)")
    exp.add_argument("--no-cache", action="store_true",
                     help="parse the profile again instead of using the on-disk cache")
    exp.set_defaults(func=_cmd_export)

    from stepscope.remote import cli as remote_cli

    remote_cli.add_parser(sub)
    return parser


def _show_warning(message: Warning | str, category: type[Warning], filename: str,
                  lineno: int, file: Any = None, line: str | None = None) -> None:
    """stepscope's own warnings as one line each; others as Python shows them."""
    if issubclass(category, StepscopeWarning):
        print(f"stepscope: warning: {message}", file=sys.stderr)
    else:
        _python_show_warning(message, category, filename, lineno, file, line)


_python_show_warning = warnings.showwarning


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: run one subcommand; user errors exit 2 with one line, no traceback."""
    args = build_parser().parse_args(argv)
    warnings.showwarning = _show_warning
    try:
        return int(args.func(args))
    except StepscopeError as err:
        print(f"stepscope: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # e.g. `stepscope ops logs | head`
        return 0


if __name__ == "__main__":
    sys.exit(main())
