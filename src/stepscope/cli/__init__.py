"""The ``stepscope`` command line."""

from __future__ import annotations

import argparse
import importlib
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

    serve(args.logdir, host=args.host, port=args.port, allow_hosts=args.allow_host)
    return 0


def _cmd_serve(args: argparse.Namespace) -> int:
    from stepscope.model.locations import as_path
    from stepscope.web.http_server import serve

    if not as_path(args.logdir).is_dir():
        print(f"stepscope: note: {args.logdir} does not exist yet; runs will appear when "
              "profiles are written there.", file=sys.stderr)
    serve(args.logdir, host=args.host, port=args.port, use_cache=not args.no_cache,
          allow_hosts=args.allow_host, engine=args.engine)
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
    fu = _xla_flops_utilization(args)
    if args.json:
        print(json.dumps({**summary, "xla_flops_utilization": fu}, indent=2, allow_nan=False))
    else:
        console = _console()
        report.render_overview(summary, console)
        if fu is not None:
            console.print(f"FLOPS utilisation (XLA programs): {100 * fu:.3g}%")
        if len(model.hosts) > 1:
            report.render_pod(model.pod_dict(), console, per_step=False)
    return 0


def _xla_flops_utilization(args: argparse.Namespace) -> float | None:
    """The FLOPS utilisation of the run's XLA programs, where it has any and a known peak."""
    from stepscope.analysis.op_profile import op_profile
    from stepscope.model.logdir import resolve
    from stepscope.run_loader import has_xla_data, open_xla_model

    try:
        if not has_xla_data(resolve(args.path)[2]):
            return None
        value: float | None = op_profile(open_xla_model(
            args.path, use_cache=not args.no_cache)).flops_utilization
    except StepscopeError:  # the report stands without it
        return None
    return value


def _open_model(args: argparse.Namespace) -> Any:
    """The run model of ``args.path`` with a progress bar; checks ``args.host`` and warns of
    hosts that could not be read."""
    from stepscope.run_loader import open_run_model
    from stepscope.views import report

    with report.loading_progress(_console(stderr=True)) as progress:
        model = open_run_model(args.path, use_cache=not args.no_cache, progress=progress,
                               engine=args.engine)
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


def _cmd_memory(args: argparse.Namespace) -> int:
    from stepscope.analysis.memory_profile import breakdown_csv
    from stepscope.views import report
    from stepscope.views.memory_report import render_memory

    model = _open_model(args)
    data = dict(model.memory_dict(args.host))  # a copy: --allocator narrows it below
    if args.allocator is not None:
        names = sorted({a["name"] for a in data["allocators"]})
        if args.allocator not in names:
            raise StepscopeError(f"No allocator {args.allocator!r} in this run (allocators: "
                                 f"{', '.join(names) or 'none'}); pass one of those.")
        data["allocators"] = [a for a in data["allocators"] if a["name"] == args.allocator]
        data["ops"] = [o for o in data["ops"] if o["allocator"] == args.allocator]
    if args.csv:
        report.write_text(Path(args.csv), breakdown_csv(data["allocators"]))
        print(f"wrote the breakdown of {len(data['allocators'])} allocators to {args.csv}",
              file=sys.stderr)
    if args.json:
        print(json.dumps(data, indent=2, allow_nan=False))
    elif not args.csv:
        render_memory(data, _console(), limit=args.limit or None)
    return 0


def _cmd_xla(args: argparse.Namespace) -> int:
    from stepscope.analysis.hlo_op_stats import hlo_op_stats, hlo_op_stats_csv
    from stepscope.analysis.op_profile import op_profile
    from stepscope.run_loader import open_xla_model
    from stepscope.views import report
    from stepscope.views.xla_report import render_xla

    if args.top is not None and args.top < 1:
        raise StepscopeError(f"--top must be at least 1, not {args.top}.")
    with report.loading_progress(_console(stderr=True)) as progress:
        model = open_xla_model(args.path, use_cache=not args.no_cache, progress=progress,
                               host=args.host)
    if not model.has_data:
        raise StepscopeError(f"{args.path} holds no XLA ops (no hlo_op events and no "
                             "\"XLA Ops\" lines); op profile needs a JAX, TensorFlow XLA or "
                             "PyTorch/XLA profile.")
    if args.csv:
        stats = hlo_op_stats(model).to_dict()
        report.write_text(Path(args.csv), hlo_op_stats_csv(stats))
        print(f"wrote {len(stats['ops'])} HLO ops to {args.csv}", file=sys.stderr)
    data = op_profile(model, top=args.top).to_dict()
    if args.json:
        print(json.dumps(data, indent=2, allow_nan=False))
    elif not args.csv:
        render_xla(data, _console(), top=args.top or 20)
    return 0


def _cmd_memory_viewer(args: argparse.Namespace) -> int:
    from stepscope.analysis.memory_viewer import memory_viewer_of
    from stepscope.run_loader import open_hlo_programs
    from stepscope.views.memory_viewer_report import render_memory_viewer

    if args.limit < 0:
        raise StepscopeError(f"--limit must be 0 or more, not {args.limit}.")
    space = _memory_space(args.memory_space)
    data = memory_viewer_of(open_hlo_programs(args.path, args.host), args.module,
                            space).to_dict()
    if args.json:
        print(json.dumps(data, indent=2, allow_nan=False))
    else:
        render_memory_viewer(data, _console(), limit=args.limit)
    return 0


def _memory_space(text: str) -> int:
    """A memory space number (XLA's memory colour: 0 the device's main memory)."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value < 1 << 31:
        raise StepscopeError(f"--memory-space must be a memory space number (0: the "
                             f"device's main memory), not {text!r}.")
    return value


def _cmd_xla_graph(args: argparse.Namespace) -> int:
    from stepscope.analysis.hlo_graph import MAX_DEPTH, graph_dot, graph_text, hlo_graph, op_times
    from stepscope.analysis.hlo_programs import choose_program
    from stepscope.run_loader import open_hlo_programs, open_xla_model

    if not 0 <= args.depth <= MAX_DEPTH:
        raise StepscopeError(f"--depth must be between 0 and {MAX_DEPTH}, not {args.depth}.")
    programs = open_hlo_programs(args.path, args.host)
    if not any(p.module is not None for p in programs.values()):
        raise StepscopeError(f"{args.path} holds no XLA program's HLO; the graph viewer "
                             "needs a JAX, TensorFlow jit_compile or PyTorch/XLA profile.")
    program = choose_program(programs, args.module)
    if program.module is None:
        raise StepscopeError(f"Program {program.label}'s HLO is unreadable: {program.error}")
    model = open_xla_model(args.path, use_cache=not args.no_cache, host=args.host)
    graph = hlo_graph(program.module, args.op, args.depth, expand_fusions=args.expand_fusions,
                      times=op_times(model.ops, program.program_id, program.name),
                      program_id=program.program_id)
    if args.json:
        print(json.dumps(graph.to_dict(), indent=2, allow_nan=False))
    elif args.dot:
        print(graph_dot(graph))
    else:
        print(graph_text(graph))
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


def _cmd_timeline(args: argparse.Namespace) -> int:
    from stepscope.formats.output_file import write_output
    from stepscope.timeline import Timeline

    text = Timeline(args.file).generate_chrome_trace_format(
        show_dataflow=args.show_dataflow, show_memory=args.show_memory)
    write_output(args.output, (text + "\n").encode("utf-8"))
    if args.output != "-":
        print(f"wrote {args.output}", file=sys.stderr)
    return 0


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
    from stepscope.engines import check_engine

    try:
        return check_engine(value)
    except StepscopeError as err:
        raise argparse.ArgumentTypeError(str(err)) from err


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
    _add_engine_arg(serve)
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
    xg.add_argument("--module", required=True,
                    help="the program: name(id), its id, or a name only one program has")
    xg.add_argument("--op", required=True, help="the HLO instruction's name")
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
    return parser


# Commands that live in a module of their own: each has ``add_parser(sub)``, which adds its
# subparser and sets ``func`` (a function of the parsed arguments returning the exit code).
_COMMAND_MODULES: tuple[str, ...] = (
    "stepscope.remote.cli",
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
