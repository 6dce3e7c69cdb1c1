"""The ``stepscope`` command line."""

from __future__ import annotations

import argparse
import difflib
import importlib
import json
import re
import sys
import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from stepscope.errors import StepscopeError, StepscopeWarning
from stepscope.model.locations import redact
from stepscope.version import __version__

if TYPE_CHECKING:
    from stepscope.run import Run, ToolResult


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


def _cmd_serve(args: argparse.Namespace) -> int:
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


def _console(stderr: bool = False) -> Any:
    from rich.console import Console

    console = Console(stderr=stderr, highlight=False)
    if not console.is_terminal:  # piped: no terminal width to fit, keep names whole
        console = Console(stderr=stderr, highlight=False, width=160)
    return console


def _cmd_report(args: argparse.Namespace) -> int:
    from stepscope.views import report

    run = open_run(args)
    result = run.overview()
    if args.json:
        _print_json(result)
        return 0
    console = _console()
    summary = result.data
    report.render_overview(summary, console)
    if summary["xla_flops_utilization"] is not None:
        console.print(f"FLOPS utilisation (XLA programs): "
                      f"{100 * summary['xla_flops_utilization']:.3g}%")
    if len(run.hosts) > 1:
        report.render_pod(run.pod().data, console, per_step=False)
    return 0


def open_run(args: argparse.Namespace) -> Run:
    """The run ``args.path`` names, its model read with a progress bar; checks ``args.host``
    and warns of hosts that could not be read."""
    from stepscope.run import Run
    from stepscope.views import report

    with report.loading_progress(_console(stderr=True)) as progress:
        run = Run.open(args.path, engine=getattr(args, "engine", "auto"),
                       cache=not getattr(args, "no_cache", False), progress=progress)
        run.model  # noqa: B018  (read here, under the progress bar)
    run.check_host(getattr(args, "host", None))
    for name, why in run.failed.items():
        print(f"stepscope: warning: host {name} could not be read: {why}", file=sys.stderr)
    _note_skipped(args.path)
    return run


def _print_json(result: ToolResult) -> None:
    print(result.to_json(indent=2))


def _emit(args: argparse.Namespace, result: ToolResult, what: str,
          render: Callable[[], None]) -> None:
    """Write ``--csv``, print ``--json``, or render the result (the default)."""
    from stepscope.views import report

    if getattr(args, "csv", None):
        report.write_text(args.csv, result.to_csv())
        rows = len(next(iter(result.table().values()), []))
        print(f"wrote {rows} {what} to {args.csv}", file=sys.stderr)
    if args.json:
        _print_json(result)
    elif not getattr(args, "csv", None):
        render()


def _note_skipped(path: str) -> None:
    """Name the files at the top of a logdir that were left out as not profiles."""
    from stepscope.model.logdir import skipped_files

    for skipped in skipped_files(path):
        print(f"stepscope: note: skipped {skipped} (beside the runs, not a profile)",
              file=sys.stderr)


def _cmd_pod(args: argparse.Namespace) -> int:
    from stepscope.views import report

    result = open_run(args).pod(args.host)
    _emit(args, result, "steps", lambda: report.render_pod(
        result.data, _console(), per_step=True, limit=args.limit or None))
    return 0


def _cmd_memory(args: argparse.Namespace) -> int:
    from stepscope.views.memory_report import render_memory

    result = open_run(args).memory_profile(args.host, allocator=args.allocator)
    data = result.data
    if args.allocator is not None:  # the terminal shows that allocator only
        chosen = data["allocators"][data["allocator"]]["name"]
        data = {**data, "allocators": [a for a in data["allocators"] if a["name"] == chosen],
                "ops": [o for o in data["ops"] if o["allocator"] == chosen]}
    _emit(args, result, "allocation groups at the peak",
          lambda: render_memory(data, _console(), limit=args.limit or None))
    return 0


def _cmd_xla(args: argparse.Namespace) -> int:
    from stepscope.views.xla_report import render_xla

    run = open_run(args)
    result = run.op_profile(args.host, top=args.top)
    if args.csv:
        from stepscope.views import report

        stats = run.hlo_op_stats(args.host)
        report.write_text(args.csv, stats.to_csv())
        print(f"wrote {len(stats.data['ops'])} HLO ops to {args.csv}", file=sys.stderr)
    if args.json:
        _print_json(result)
    elif not args.csv:
        render_xla(result.data, _console(), top=args.top or 20)
    return 0


def _cmd_memory_viewer(args: argparse.Namespace) -> int:
    from stepscope.views.memory_viewer_report import render_memory_viewer

    if args.limit < 0:
        raise StepscopeError(f"--limit must be 0 or more, not {args.limit}.")
    result = open_run(args).tool("memory_viewer", args.host, module=args.module,
                              memory_space=args.memory_space)
    _emit(args, result, "buffers",
          lambda: render_memory_viewer(result.data, _console(), limit=args.limit))
    return 0


def _cmd_xla_graph(args: argparse.Namespace) -> int:
    from stepscope.analysis.xla.hlo_graph import graph_dot, graph_text

    result = open_run(args).tool("graph_viewer", args.host, module=args.module, op=args.op,
                              depth=args.depth, expand_fusions=args.expand_fusions)
    if args.json:
        _print_json(result)
    elif args.dot:
        print(graph_dot(result.value))
    else:
        print(graph_text(result.value))
    return 0


def _cmd_ops(args: argparse.Namespace) -> int:
    from stepscope.views import report

    result = open_run(args).op_stats(args.host, include_idle=args.include_idle)
    _emit(args, result, "ops",
          lambda: report.render_ops(result.value, _console(), limit=args.limit or None))
    return 0


def _cmd_kernels(args: argparse.Namespace) -> int:
    from stepscope.views import report

    result = open_run(args).kernel_stats(args.host)
    _emit(args, result, "kernel rows",
          lambda: report.render_kernels(result.value, _console(), limit=args.limit or None))
    return 0


def _cmd_input(args: argparse.Namespace) -> int:
    from stepscope.views.input_report import render_input

    result = open_run(args).input_pipeline(args.host)
    _emit(args, result, "input ops",
          lambda: render_input(result.data, _console(), limit=args.limit or None))
    return 0


def _cmd_tool(args: argparse.Namespace) -> int:
    from stepscope.run.tools import spec

    chosen = spec(args.name)
    params: dict[str, str] = {}
    for item in args.param:
        key, sep, value = item.partition("=")
        if not sep:
            raise StepscopeError(f"--param takes NAME=VALUE, not {item!r}.")
        params[key.strip()] = value
    chosen.parse(params)  # a bad parameter is refused before the run is read
    result = open_run(args).tool(chosen.name, args.host, **params)
    if args.csv:
        from stepscope.views import report

        report.write_text(args.csv, result.to_csv())
        print(f"wrote {args.name}'s table to {args.csv}", file=sys.stderr)
    if args.json or not args.csv:
        _print_json(result)
    return 0


def _cmd_tools(args: argparse.Namespace) -> int:
    from stepscope.run.tools import TOOLS

    if args.json:
        print(json.dumps([t.to_dict() for t in TOOLS.values()], indent=2))
        return 0
    for t in TOOLS.values():
        params = ", ".join(p.name for p in t.params)
        print(f"{t.name:26} {t.summary}" + (f" (parameters: {params})" if params else ""))
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    from stepscope.formats.chrome_trace_writer import write_chrome_trace
    from stepscope.views import report

    run = open_run(args)
    names = [args.host] if args.host is not None else run.hosts
    tables = run.tables
    hosts = ((n, tables.hosts[n], run.trace_index(n)) for n in names)
    total = sum(len(tables.hosts[n]) for n in names)
    with report.count_progress(_console(stderr=True), "writing events", total) as progress:
        count = write_chrome_trace(args.chrome_trace, hosts, progress=progress)
    print(f"wrote {count} events to {args.chrome_trace}", file=sys.stderr)
    return 0


def _cmd_timeline(args: argparse.Namespace) -> int:
    from stepscope.formats.output_file import write_output
    from stepscope.timeline import Timeline

    text = Timeline(args.file).generate_chrome_trace_format(
        show_dataflow=args.show_dataflow, show_memory=args.show_memory)
    write_output(args.output, (text + "\n").encode("utf-8"))
    if args.output != "-":
        print(f"wrote {args.output}", file=sys.stderr)
    return 0


def add_listen_args(parser: argparse.ArgumentParser) -> None:
    """--host, --port and --allow-host of a command that serves the web UI."""
    _add_listen_args(parser)


def _add_listen_args(parser: argparse.ArgumentParser) -> None:
    from stepscope.web.http_server import DEFAULT_HOST, DEFAULT_PORT

    parser.add_argument("--host", default=DEFAULT_HOST,
                        help=f"address to listen on (default {DEFAULT_HOST}, this machine "
                        "only; 0.0.0.0 exposes the profiles to the network)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT,
                        help=f"port to listen on (default {DEFAULT_PORT})")
    parser.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                        help="also answer requests addressed to this host name (repeatable; "
                        "requests naming any other host than 127.0.0.1, localhost, [::1] and "
                        "--host are refused, against DNS rebinding)")


def _add_engine_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--engine", default="auto", type=_engine, metavar="ENGINE",
                        help="where each host's file is read and analysed: local (this "
                        "process), pool (a process per core), ray or ray://ADDRESS (a Ray "
                        "cluster); default auto: pool for several large hosts, else local")


def _engine(value: str) -> str:
    from stepscope.run.engines import check_engine

    try:
        return check_engine(value)
    except StepscopeError as err:
        raise argparse.ArgumentTypeError(str(err)) from err


DESCRIPTION = ("stepscope: a profiler for machine-learning programs in Python. Profile a "
               "program with `stepscope profile -- python train.py`, read a profile in the "
               "terminal (report, ops, kernels, input, memory, pod, xla, ...) or in the web "
               "UI (serve). PATH is a logdir (its newest run; --run picks another), a run "
               "directory or one profile file.")


class _Formatter(argparse.HelpFormatter):
    """Help that shows each option's default where its text does not already say it."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (action.option_strings and "default" not in text.lower()
                and default not in (None, False, [], argparse.SUPPRESS)
                and not isinstance(default, bool)):
            text += " (default %(default)s)"
        return text


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors suggest the choice that was probably meant."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> Any:  # argparse's signature: it never returns
        found = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        if found is not None:
            choices = re.findall(r"'([^']*)'", found.group(2))
            close = difflib.get_close_matches(found.group(1), choices, n=1, cutoff=0.6)
            if close:
                message += f"; did you mean {close[0]!r}?"
        super().error(message)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = _Parser(prog="stepscope", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"stepscope {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

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
    _add_listen_args(demo)
    demo.set_defaults(func=_cmd_demo)

    serve = sub.add_parser("serve", help="open the web UI on a logdir",
                           description="Serve the web UI (overview page, framework op stats, "
                           "...) for the runs of a logdir. New runs appear without a restart.")
    serve.add_argument("path", nargs="?", metavar="PATH",
                       help="a TensorBoard logdir, a run directory or a torch trace "
                       "directory (default: logs)")
    serve.add_argument("--logdir", help="the same as PATH (TensorBoard's spelling)")
    _add_listen_args(serve)
    serve.add_argument("--no-cache", action="store_true",
                       help="parse profiles again instead of using the on-disk cache")
    _add_engine_arg(serve)
    serve.add_argument("--allow-link-local-capture", action="store_true",
                       help="let captures started from the UI reach link-local addresses and "
                       "cloud metadata services (refused by default)")
    serve.set_defaults(func=_cmd_serve)

    rep = sub.add_parser("report", help="overview of a profile: steps, breakdown, top ops",
                         description="Print the overview of a run: step time, its breakdown, "
                         "the input-bound verdict, top ops and the run environment.")
    rep.add_argument("path", help="a logdir (its newest run), a run directory or one file")
    rep.add_argument("--json", action="store_true", help="print the overview as JSON")
    rep.add_argument("--no-cache", action="store_true",
                     help="parse the profile again instead of using the on-disk cache")
    _add_engine_arg(rep)
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
    _add_engine_arg(ops)
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
    _add_engine_arg(kern)
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
    _add_engine_arg(inp)
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
    _add_engine_arg(pod)
    pod.set_defaults(func=_cmd_pod)

    mem = sub.add_parser("memory", help="memory profile: peak memory per allocator and what "
                         "was live at the peak",
                         description="Per memory allocator (each device's, the host's, "
                         "PyTorch's CUDA and CPU allocators, stepscope's NumPy capture): "
                         "allocations and frees, capacity, the peak in use, when and in which "
                         "step it happened, reserved, stack and fragmentation at the peak, and "
                         "the allocations live at the peak, heaviest first; per op, the memory "
                         "allocated while it ran (PyTorch and stepscope's capture).")
    mem.add_argument("path", help="a logdir (its newest run), a run directory or one file")
    mem.add_argument("--json", action="store_true", help="print the memory profile as JSON")
    mem.add_argument("--csv", metavar="FILE",
                     help="write the breakdowns at the peak (one row per allocation group) "
                     "to FILE")
    mem.add_argument("--host", help="only this host (default: all hosts)")
    mem.add_argument("--allocator", help="only this allocator (e.g. GPU_0_bfc, cuda:0, cpu)")
    mem.add_argument("--limit", type=int, default=10,
                     help="rows per table shown in the terminal (0: all; default 10)")
    mem.add_argument("--no-cache", action="store_true",
                     help="parse the profile again instead of using the on-disk cache")
    _add_engine_arg(mem)
    mem.set_defaults(func=_cmd_memory)

    xla = sub.add_parser("xla", help="op profile of XLA programs: time, FLOPS utilisation "
                         "and bound by, per category and HLO op",
                         description="Op profile of the XLA programs of a JAX, TensorFlow "
                         "(jit_compile) or PyTorch/XLA profile, with HLO op stats as CSV.")
    xla.add_argument("path", help="a logdir (its newest run), a run directory or one file")
    xla.add_argument("--json", action="store_true", help="print the op profile as JSON")
    xla.add_argument("--csv", metavar="FILE", help="write the HLO op stats (one row per op) "
                     "to FILE")
    xla.add_argument("--top", type=int, help="ops kept: the top N overall and of each "
                     "category (default: all in --json, 20 shown in the terminal)")
    xla.add_argument("--host", help="only this host's XLA programs (default: every host)")
    xla.add_argument("--no-cache", action="store_true",
                     help="read the profile afresh, bypassing the on-disk cache")
    xla.set_defaults(func=_cmd_xla)

    mv = sub.add_parser("memory-viewer", help="XLA memory viewer: what fills one program's "
                        "memory at its peak",
                        description="Peak heap, argument, temporary and reserved sizes, "
                        "padding, the heap over program order and the buffers live at the "
                        "peak of one XLA program, from the buffer assignment in its HLO.")
    mv.add_argument("path", help="a logdir (its newest run), a run directory or one file")
    mv.add_argument("--module", help="the program: name(id), its id, or a name only one "
                    "program has (default: the program with the largest peak heap)")
    mv.add_argument("--memory-space", default="0",
                    help="memory space (XLA memory colour; default 0, the device's memory)")
    mv.add_argument("--host", help="only this host's programs (default: every host)")
    mv.add_argument("--json", action="store_true", help="print the result as JSON")
    mv.add_argument("--limit", type=int, default=20,
                    help="buffers shown in the terminal (0: all; default 20)")
    mv.set_defaults(func=_cmd_memory_viewer)

    xg = sub.add_parser("xla-graph", help="XLA graph viewer: the HLO graph around one op",
                        description="The operands and users of one HLO op to a depth, with "
                        "each op's shape and its device time from the op profile.")
    xg.add_argument("path", help="a logdir (its newest run), a run directory or one file")
    xg.add_argument("--module", help="the program: name(id), its id, or a name only one "
                    "program has (default: the program with the most device time)")
    xg.add_argument("--op", help="the HLO instruction's name (default: the program's "
                    "costliest op)")
    xg.add_argument("--depth", type=int, default=2, help="steps out from the op (default 2)")
    xg.add_argument("--expand-fusions", action="store_true",
                    help="show the instructions inside each fusion")
    xg.add_argument("--host", help="only this host's programs (default: every host)")
    out = xg.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print the graph as JSON")
    out.add_argument("--dot", action="store_true", help="print the graph as Graphviz DOT")
    xg.add_argument("--no-cache", action="store_true",
                    help="read the profile afresh, bypassing the on-disk cache")
    xg.set_defaults(func=_cmd_xla_graph)

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

    tool = sub.add_parser("tool", help="any tool's answer as JSON (or its table as CSV), "
                          "with its parameters as declared (see `stepscope tools`)",
                          description="Answer one tool of the run, exactly as the web API's "
                          "/api/data and stepscope.open(PATH).tool(NAME, ...) answer it.")
    tool.add_argument("name", metavar="NAME", help="the tool (see `stepscope tools`)")
    tool.add_argument("path", help="a logdir (its newest run), a run directory or one file")
    tool.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                      help="a parameter of the tool (repeatable)")
    tool.add_argument("--host", help="only this host (default: all hosts)")
    tool.add_argument("--json", action="store_true", help="print the answer as JSON (the "
                      "default unless --csv)")
    tool.add_argument("--csv", metavar="FILE", help="write the tool's table as CSV to FILE")
    tool.add_argument("--no-cache", action="store_true",
                      help="parse the profile again instead of using the on-disk cache")
    _add_engine_arg(tool)
    tool.set_defaults(func=_cmd_tool)

    tools = sub.add_parser("tools", help="list the tools and their parameters",
                           description="Every tool stepscope answers, with its parameters.")
    tools.add_argument("--json", action="store_true", help="the declarations as JSON")
    tools.set_defaults(func=_cmd_tools)

    tl = sub.add_parser("timeline", help="TensorFlow RunMetadata/StepStats as a Chrome trace, "
                        "as TensorFlow's timeline module draws it",
                        description="Write the Chrome trace that TensorFlow's "
                        "timeline.Timeline(step_stats).generate_chrome_trace_format() makes, "
                        "without TensorFlow. FILE: RunMetadata or StepStats, binary or text.")
    tl.add_argument("file", metavar="FILE", help="a RunMetadata or StepStats .pb/.pbtxt file")
    tl.add_argument("-o", "--output", metavar="OUT", required=True,
                    help="where to write the trace JSON ('-': standard output)")
    tl.add_argument("--show-memory", action="store_true",
                    help="add tensor objects and a memory counter per allocator")
    tl.add_argument("--show-dataflow", action=argparse.BooleanOptionalAction, default=True,
                    help="flows from each tensor's producer to its consumers (default: on)")
    tl.set_defaults(func=_cmd_timeline)

    for module in _COMMAND_MODULES:
        importlib.import_module(module).add_parser(sub)
    for name, command in sub.choices.items():
        if name != "serve" and any(a.dest == "path" for a in command._actions):
            command.add_argument("--run", metavar="NAME",
                                 help="when PATH is a logdir with several runs, this one "
                                 "(`stepscope runs PATH` lists them; default: the newest)")
    return parser


def _pick_run(args: argparse.Namespace) -> None:
    """Point ``args.path`` at the run ``--run`` names under it."""
    from stepscope.model.logdir import list_runs

    runs = list_runs(args.path)
    if args.run in runs:
        args.path = str(runs[args.run])
        return
    if not runs:
        raise StepscopeError(f"{args.path} holds no runs; pass a logdir with profiles.")
    close = difflib.get_close_matches(args.run, list(runs), n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    raise StepscopeError(f"No run {args.run!r} in {args.path}; {hint}"
                         f"`stepscope runs {args.path}` lists its {len(runs)} runs.")


# Commands that live in a module of their own: each has ``add_parser(sub)``, which adds its
# subparser and sets ``func`` (a function of the parsed arguments returning the exit code).
_COMMAND_MODULES: tuple[str, ...] = (
    "stepscope.remote.cli",
    "stepscope.cli.profile",
    "stepscope.cli.runs",
    "stepscope.cli.doctor",
    "stepscope.cli.summary",
    "stepscope.cli.diff",
    "stepscope.cli.check",
    "stepscope.cli.mcp",
    "stepscope.cli.gpu",
    "stepscope.cli.python",
)


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
        if getattr(args, "run", None) is not None and getattr(args, "path", None) is not None:
            _pick_run(args)
        return int(args.func(args))
    except StepscopeError as err:
        print(f"stepscope: error: {redact(str(err))}", file=sys.stderr)  # no credentials
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # e.g. `stepscope ops logs | head`
        return 0


if __name__ == "__main__":
    sys.exit(main())
