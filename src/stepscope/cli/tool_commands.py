"""The commands named for the tools (report, ops, kernels, input, pod, memory, xla,
memory-viewer, xla-graph) and ``tool``/``tools``: each asks the run one tool
(``stepscope.run.tools``) and prints the answer, writes its CSV or prints its JSON. Those
whose tools keep their answers ask through ``common.Answers``: a cached run answers them
without being opened."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from stepscope.cli import common
from stepscope.cli.common import (
    Answers,
    add_engine_arg,
    add_limit_arg,
    add_no_cache_arg,
    add_path_arg,
    emit,
    print_json,
)
from stepscope.errors import StepscopeError
from stepscope.run.params import number_text


def _cmd_report(args: argparse.Namespace) -> int:
    run = Answers(args)
    peak = number_text(args.peak_tflops)
    result = run.tool("overview_page", peak_tflops=peak)
    if args.json:
        print_json(result)
        return 0
    from stepscope.views import report  # rich: not for --json

    out = common.console()
    summary = result.data
    report.render_overview(summary, out)
    if summary["xla_flops_utilization"] is not None:
        out.print(f"FLOPS utilisation (XLA programs): "
                  f"{100 * summary['xla_flops_utilization']:.3g}%")
        if summary.get("xla_flops_note"):
            out.print(f"  {summary['xla_flops_note']}")
    report.render_mfu(summary["mfu"], out)
    if len(run.hosts) > 1:
        report.render_pod(run.tool("pod_viewer", peak_tflops=peak).data, out, per_step=False)
    return 0


def _cmd_pod(args: argparse.Namespace) -> int:
    result = Answers(args).tool("pod_viewer", args.host,
                                peak_tflops=number_text(args.peak_tflops))

    def render() -> None:
        from stepscope.views import report

        report.render_pod(result.data, common.console(), per_step=True,
                          limit=args.limit or None)

    emit(args, result, "steps", render)
    return 0


def _cmd_memory(args: argparse.Namespace) -> int:
    result = Answers(args).tool("memory_profile", args.host, allocator=args.allocator,
                                width=None)
    data = result.data
    if args.allocator is not None:  # the terminal shows that allocator only
        chosen = data["allocators"][data["allocator"]]["name"]
        data = {**data, "allocators": [a for a in data["allocators"] if a["name"] == chosen],
                "ops": [o for o in data["ops"] if o["allocator"] == chosen]}
    def render() -> None:
        from stepscope.views.memory_report import render_memory

        render_memory(data, common.console(), limit=args.limit or None)

    emit(args, result, "allocation groups at the peak", render)
    return 0


def _cmd_xla(args: argparse.Namespace) -> int:
    run = Answers(args)
    result = run.tool("op_profile", args.host, top=args.top)
    if args.csv:
        from stepscope.views import report

        stats = run.tool("hlo_op_stats", args.host)
        report.write_text(args.csv, stats.to_csv())
        print(f"wrote {len(stats.data['ops'])} HLO ops to {args.csv}", file=sys.stderr)
    if args.json:
        print_json(result)
    elif not args.csv:
        from stepscope.views.xla_report import render_xla

        render_xla(result.data, common.console(), top=args.top or 20)
    return 0


def _cmd_memory_viewer(args: argparse.Namespace) -> int:
    from stepscope.views.memory_viewer_report import render_memory_viewer

    if args.limit < 0:
        raise StepscopeError(f"--limit must be 0 or more, not {args.limit}.")
    result = Answers(args).tool("memory_viewer", args.host, module=args.module,
                              memory_space=args.memory_space)
    emit(args, result, "buffers",
          lambda: render_memory_viewer(result.data, common.console(), limit=args.limit))
    return 0


def _cmd_xla_graph(args: argparse.Namespace) -> int:
    from stepscope.analysis.xla.hlo_graph import graph_dot, graph_text

    result = Answers(args).tool("graph_viewer", args.host, module=args.module, op=args.op,
                              depth=args.depth, expand_fusions=args.expand_fusions)
    if args.json:
        print_json(result)
    elif args.dot:
        print(graph_dot(result.value))
    else:
        print(graph_text(result.value))
    return 0


def _cmd_ops(args: argparse.Namespace) -> int:
    from stepscope.views import report

    result = Answers(args).tool("framework_op_stats", args.host,
                                include_idle=args.include_idle)
    emit(args, result, "ops",
          lambda: report.render_ops(result.value, common.console(), limit=args.limit or None))
    return 0


def _cmd_kernels(args: argparse.Namespace) -> int:
    from stepscope.views import report

    result = Answers(args).tool("kernel_stats", args.host)
    emit(args, result, "kernel rows",
          lambda: report.render_kernels(result.value, common.console(), limit=args.limit or None))
    return 0


def _cmd_input(args: argparse.Namespace) -> int:
    result = Answers(args).tool("input_pipeline_analyzer", args.host)

    def render() -> None:
        from stepscope.views.input_report import render_input

        render_input(result.data, common.console(), limit=args.limit or None)

    emit(args, result, "input ops", render)
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
    result = Answers(args).tool(chosen.name, args.host, **params)
    if args.csv:
        from stepscope.views import report

        report.write_text(args.csv, result.to_csv())
        print(f"wrote {args.name}'s table to {args.csv}", file=sys.stderr)
    if args.json or not args.csv:
        print_json(result)
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


def add_peak_arg(parser: argparse.ArgumentParser) -> None:
    """``--peak-tflops``: the peak of one device for MFU, over the profile's and the data
    sheet's."""
    parser.add_argument("--peak-tflops", type=float, metavar="TFLOPS",
                        help="peak TFLOP/s of one device at the run's precision, for MFU "
                        "(default: the profile's, else the device's data sheet)")


def add_parser(sub: Any) -> None:
    """Register the tool commands on ``sub`` (from ``add_subparsers``)."""
    rep = sub.add_parser("report", help="overview of a profile: steps, breakdown, top ops",
                         description="Print the overview of a run: step time, its breakdown, "
                         "the input-bound verdict, top ops and the run environment.")
    add_path_arg(rep)
    rep.add_argument("--json", action="store_true", help="print the overview as JSON")
    add_peak_arg(rep)
    add_no_cache_arg(rep)
    add_engine_arg(rep)
    rep.set_defaults(func=_cmd_report)

    ops = sub.add_parser("ops", help="framework op stats (time and self time per op)",
                         description="Time per op on the host and on devices, with self time.")
    add_path_arg(ops)
    ops.add_argument("--csv", metavar="FILE", help="write all rows as CSV to FILE")
    ops.add_argument("--json", action="store_true", help="print all rows as JSON")
    ops.add_argument("--host", help="only this host (default: all hosts summed)")
    ops.add_argument("--include-idle", action="store_true",
                     help="add IDLE rows: time on op threads/streams when no op ran")
    add_limit_arg(ops, 30)
    add_no_cache_arg(ops)
    add_engine_arg(ops)
    ops.set_defaults(func=_cmd_ops)

    kern = sub.add_parser("kernels", help="GPU kernel stats (time per kernel, op and shape)",
                          description="Per kernel, the op that launched it and launch shape: "
                          "registers, shared memory, block and grid, Tensor Core use, and "
                          "count and total/avg/min/max time, by total time.")
    add_path_arg(kern)
    kern.add_argument("--csv", metavar="FILE", help="write all rows as CSV to FILE")
    kern.add_argument("--json", action="store_true", help="print all rows as JSON")
    kern.add_argument("--host", help="only this host (default: all hosts)")
    add_limit_arg(kern, 30)
    add_no_cache_arg(kern)
    add_engine_arg(kern)
    kern.set_defaults(func=_cmd_kernels)

    inp = sub.add_parser("input", help="input pipeline analyzer: input-bound?, slow stage",
                         description="Is the run input-bound, where input time goes on the "
                         "host (reading, preprocessing, transfer), the input-op table, and the "
                         "bottleneck stage of the slowest pipeline run with a recommendation.")
    add_path_arg(inp)
    inp.add_argument("--csv", metavar="FILE", help="write the input-op table as CSV to FILE")
    inp.add_argument("--json", action="store_true", help="print the analysis as JSON")
    inp.add_argument("--host", help="only this host (default: all hosts)")
    add_limit_arg(inp, 30, "input ops")
    add_no_cache_arg(inp)
    add_engine_arg(inp)
    inp.set_defaults(func=_cmd_input)

    pod = sub.add_parser("pod", help="pod viewer: every host's step time side by side, "
                         "stragglers",
                         description="Per step, each host's (or, for one host with several "
                         "devices, each device's) step time split into compute, input, "
                         "collectives, copies and other; the straggler of each step and how "
                         "long the others waited for it; how the hosts' clocks were lined up.")
    add_path_arg(pod)
    pod.add_argument("--json", action="store_true", help="print the pod viewer as JSON")
    pod.add_argument("--csv", metavar="FILE", help="write one row per step and host to FILE")
    pod.add_argument("--host", help="only this host's figures per step (stragglers are still "
                     "judged over all hosts)")
    add_limit_arg(pod, 20, "steps")
    add_no_cache_arg(pod)
    add_engine_arg(pod)
    add_peak_arg(pod)
    pod.set_defaults(func=_cmd_pod)

    mem = sub.add_parser("memory", help="memory profile: peak memory per allocator and what "
                         "was live at the peak",
                         description="Per memory allocator (each device's, the host's, "
                         "PyTorch's CUDA and CPU allocators, stepscope's NumPy capture): "
                         "allocations and frees, capacity, the peak in use, when and in which "
                         "step it happened, reserved, stack and fragmentation at the peak, and "
                         "the allocations live at the peak, heaviest first; per op, the memory "
                         "allocated while it ran (PyTorch and stepscope's capture).")
    add_path_arg(mem)
    mem.add_argument("--json", action="store_true", help="print the memory profile as JSON")
    mem.add_argument("--csv", metavar="FILE",
                     help="write the breakdowns at the peak (one row per allocation group) "
                     "to FILE")
    mem.add_argument("--host", help="only this host (default: all hosts)")
    mem.add_argument("--allocator", help="only this allocator (e.g. GPU_0_bfc, cuda:0, cpu)")
    add_limit_arg(mem, 10, "rows per table")
    add_no_cache_arg(mem)
    add_engine_arg(mem)
    mem.set_defaults(func=_cmd_memory)

    xla = sub.add_parser("xla", help="op profile of XLA programs: time, FLOPS utilisation "
                         "and bound by, per category and HLO op",
                         description="Op profile of the XLA programs of a JAX, TensorFlow "
                         "(jit_compile) or PyTorch/XLA profile, with HLO op stats as CSV.")
    add_path_arg(xla)
    xla.add_argument("--json", action="store_true", help="print the op profile as JSON")
    xla.add_argument("--csv", metavar="FILE", help="write the HLO op stats (one row per op) "
                     "to FILE")
    xla.add_argument("--top", type=int, help="ops kept: the top N overall and of each "
                     "category (default: all in --json, 20 shown in the terminal)")
    xla.add_argument("--host", help="only this host's XLA programs (default: every host)")
    add_no_cache_arg(xla)
    xla.set_defaults(func=_cmd_xla)

    mv = sub.add_parser("memory-viewer", help="XLA memory viewer: what fills one program's "
                        "memory at its peak",
                        description="Peak heap, argument, temporary and reserved sizes, "
                        "padding, the heap over program order and the buffers live at the "
                        "peak of one XLA program, from the buffer assignment in its HLO.")
    add_path_arg(mv)
    mv.add_argument("--module", help="the program: name(id), its id, or a name only one "
                    "program has (default: the program with the largest peak heap)")
    mv.add_argument("--memory-space", default="0",
                    help="memory space (XLA memory colour; default 0, the device's memory)")
    mv.add_argument("--host", help="only this host's programs (default: every host)")
    mv.add_argument("--json", action="store_true", help="print the result as JSON")
    add_limit_arg(mv, 20, "buffers")
    mv.set_defaults(func=_cmd_memory_viewer)

    xg = sub.add_parser("xla-graph", help="XLA graph viewer: the HLO graph around one op",
                        description="The operands and users of one HLO op to a depth, with "
                        "each op's shape and its device time from the op profile.")
    add_path_arg(xg)
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
    add_no_cache_arg(xg)
    xg.set_defaults(func=_cmd_xla_graph)

    tool = sub.add_parser("tool", help="any tool's answer as JSON (or its table as CSV), "
                          "with its parameters as declared (see `stepscope tools`)",
                          description="Answer one tool of the run, exactly as the web API's "
                          "/api/data and stepscope.open(PATH).tool(NAME, ...) answer it.")
    tool.add_argument("name", metavar="NAME", help="the tool (see `stepscope tools`)")
    add_path_arg(tool)
    tool.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                      help="a parameter of the tool (repeatable)")
    tool.add_argument("--host", help="only this host (default: all hosts)")
    tool.add_argument("--json", action="store_true", help="print the answer as JSON (the "
                      "default unless --csv)")
    tool.add_argument("--csv", metavar="FILE", help="write the tool's table as CSV to FILE")
    add_no_cache_arg(tool)
    add_engine_arg(tool)
    tool.set_defaults(func=_cmd_tool)

    tools = sub.add_parser("tools", help="list the tools and their parameters",
                           description="Every tool stepscope answers, with its parameters.")
    tools.add_argument("--json", action="store_true", help="the declarations as JSON")
    tools.set_defaults(func=_cmd_tools)
