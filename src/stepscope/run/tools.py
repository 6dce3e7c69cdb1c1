"""Every tool, declared once: its name, title, parameters, when a run offers it, and how it
is answered from a ``Run``.

The command line (``stepscope tool NAME`` and the commands named for tools), the web API
(``/api/tools``, ``/api/data``, ``/api/csv``), the TensorBoard plugin, notebooks and the MCP
server all read this registry; none of them checks a parameter or composes a page on its own.
Names follow XProf's tool names where XProf has the tool.

Each tool's function takes the run, the host (None: the whole run) and its parameters as
parsed from the declaration, and gives a ``ToolResult`` whose JSON is what every interface
gives.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from stepscope.errors import InvalidParameterError, NotFoundError, StepscopeError, not_found
from stepscope.run.params import Param, Value, parse_all
from stepscope.run.result import ToolResult

if TYPE_CHECKING:
    from stepscope.run.run import Run

Params = dict[str, Value]
Compute = Callable[["Run", "str | None", Params], ToolResult]


class ToolNotAvailableError(NotFoundError):
    """The run has nothing for this tool to show (no XLA programs, no memory activity)."""


@dataclass(frozen=True)
class ToolSpec:
    """One tool's declaration."""

    name: str
    title: str
    summary: str  # one sentence: what the tool answers
    compute: Compute
    params: tuple[Param, ...] = ()
    needs: str | None = None  # "xla", "hlo": offered only for runs whose files hold these
    available: Callable[[Run, str | None], bool] | None = None  # further, for loaded runs
    page: bool = True  # whether the web UI has a page for it (listed in its navigation)
    csv: bool = False  # whether it has a CSV export of its own columns
    missing: str = ""  # why ``available`` can say no, as the sentence a user reads
    # Whether its answer is kept in the on-disk cache (costly to compute, needed by no
    # interface as the analysis' typed value).
    keep: bool = False

    def parse(self, given: Mapping[str, object]) -> Params:
        """The tool's parameters from ``given`` (text or values), checked; defaults filled."""
        return parse_all(self.params, given, self.name)

    def offered(self, run: Run) -> bool:
        """Whether the run's files hold what the tool needs (a byte probe, no decoding)."""
        if self.needs == "xla":
            return run.has_xla()
        if self.needs == "hlo":
            return run.has_hlo()
        return True

    def available_for(self, run: Run, host: str | None) -> bool:
        """Whether the tool has anything to show for the run (and host)."""
        if not self.offered(run):
            return False
        try:
            return self.available is None or self.available(run, host)
        except StepscopeError:
            return False

    def unavailable(self, run: Run) -> str:
        """Why the tool has nothing to show for ``run``."""
        if self.needs == "xla" and not run.has_xla():
            return f"Tool {self.name!r} needs XLA programs; run {run.name!r} has none."
        if self.needs == "hlo" and not run.has_hlo():
            return (f"Tool {self.name!r} needs the HLO of XLA programs; run {run.name!r} has "
                    "none.")
        return self.missing or f"Tool {self.name!r} has nothing to show for run {run.name!r}."

    def to_dict(self) -> dict[str, Any]:
        """The declaration as JSON."""
        return {"name": self.name, "title": self.title, "summary": self.summary,
                "params": [p.to_dict() for p in self.params], "needs": self.needs,
                "page": self.page, "csv": self.csv}


def spec(name: str) -> ToolSpec:
    """The declaration of tool ``name``; a NotFoundError naming the tools there are."""
    if name not in TOOLS:
        raise not_found("tool", name, "stepscope", list(TOOLS))
    return TOOLS[name]


def _run_host(run: Run, host: str | None) -> dict[str, Any]:
    return {"run": run.name, "host": host}


# -- the overview page and advice -------------------------------------------------------------

def _advice_rows(run: Run) -> list[dict[str, Any]]:
    from stepscope.analysis.tools.advice import recommendations

    rows: list[dict[str, Any]] = run.result(
        ("advice",), lambda: [r.to_dict() for r in recommendations(
            run.model, _xla_precision(run, None))])
    return rows


def overview_page(run: Run, host: str | None, p: Params) -> ToolResult:
    """The overview page: the run's (or a host's) overview, the XLA programs' FLOPS
    utilisation where there is one, MFU, and the run's advice."""
    summary = run.model.overview_dict()
    python = run.model.python_dict()  # Python time per step, heaviest functions
    mfu = _mfu(run, p)
    extra = {"xla_flops_utilization": _xla_flops_utilization(run, host),
             "xla_flops_note": _xla_flops_note(run, host),
             "mfu": mfu if host is None else {**mfu, "hosts": {
                 k: v for k, v in mfu["hosts"].items() if k == host}},
             "python": python if host is None else {k: v for k, v in python.items()
                                                     if k == host},
             "recommendations": _advice_rows(run)}
    if host is None:
        data = {**summary, "host": None, **extra}
    else:
        data = {"run": summary["run"], "path": summary["path"], "host": host,
                **summary["hosts"][host], "failed_hosts": summary["failed_hosts"],
                "dropped_events": summary.get("dropped_events", {}), **extra}
    precision = _xla_precision(run, host)
    if precision is not None:
        data["precision"] = precision
    return ToolResult("overview_page", data, "top_ops")


def _xla_precision(run: Run, host: str | None) -> dict[str, float] | None:
    """The XLA programs' own device compute precision on a GPU (``XlaModel.gpu_precision``),
    where the run has XLA programs that could be read."""
    if not run.has_xla():
        return None
    try:
        return run.xla(host).gpu_precision()
    except StepscopeError:
        return None


# The peak a user may give: TFLOP/s of one device (read as text: a decimal figure).
PEAK_PARAM = Param("peak_tflops", "text", "the peak TFLOP/s of one device at the run's "
                   "precision, for MFU (default: the profile's, else the device's data sheet)")
_MAX_PEAK_TFLOPS = 1e6


def peak_tflops(p: Params) -> float | None:
    """The ``peak_tflops`` parameter as a number (None: not given); an
    InvalidParameterError for anything but a positive, finite figure."""
    text = p.get("peak_tflops")
    if text is None or text == "":
        return None
    try:
        value = float(str(text))
    except ValueError:
        value = -1.0
    if not 0.0 < value <= _MAX_PEAK_TFLOPS:  # NaN fails too
        raise InvalidParameterError(f"Parameter peak_tflops must be a number of TFLOP/s "
                                    f"above 0 and at most {_MAX_PEAK_TFLOPS:g}, not "
                                    f"{str(text)[:40]!r}.")
    return value


def _mfu(run: Run, p: Params) -> dict[str, Any]:
    """The run's MFU, each host's and per step (``analysis.tools.mfu``)."""
    from stepscope.analysis.tools.mfu import run_mfu

    given = peak_tflops(p)
    xla = {}
    if run.has_xla():
        for name in run.hosts:
            try:
                xla[name] = run.xla(name)
            except StepscopeError:  # MFU stands without the host's XLA programs
                continue
    data: dict[str, Any] = run.result(("mfu", given),
                                      lambda: run_mfu(run.model, xla, given).to_dict())
    return data


def _xla_flops_note(run: Run, host: str | None) -> str:
    """Why the XLA FLOPS utilisation speaks for part of the device's work only ("" if not)."""
    if not run.has_xla():
        return ""
    try:
        note: str = run.tool("op_profile", host).data.get("flops_note", "")
    except StepscopeError:
        return ""
    return note


def _xla_flops_utilization(run: Run, host: str | None) -> float | None:
    """The guide's "FLOPS utilisation" of the run's XLA programs, where it can be computed."""
    if not run.has_xla():
        return None
    try:
        value: float | None = run.tool("op_profile", host).data["flops_utilization"]
    except StepscopeError:  # the overview stands without it
        return None
    return value


def advice(run: Run, host: str | None, p: Params) -> ToolResult:
    """What to change: each rule that fired, with its evidence."""
    return ToolResult("advice", {"run": run.name, "recommendations": _advice_rows(run)},
                      "recommendations")


def steps(run: Run, host: str | None, p: Params) -> ToolResult:
    """Every host's steps (or one host's): number, start, end, duration."""
    rows = []
    for name in run.model.host_names(host):
        s = run.model.hosts[name].steps
        for num, start, end in zip(s.step_num.tolist(), s.start_ns.tolist(),
                                   s.end_ns.tolist(), strict=True):
            rows.append({"host": name, "step": num, "start_ns": start, "end_ns": end,
                         "duration_ms": (end - start) / 1e6})
    found = {n: run.model.hosts[n].steps.method for n in run.model.host_names(host)}
    return ToolResult("steps", {**_run_host(run, host), "found_by": found, "steps": rows},
                      "steps")


# -- op stats, kernels, input, pod, memory ----------------------------------------------------

def framework_op_stats(run: Run, host: str | None, p: Params) -> ToolResult:
    """Framework op stats: every op row (host, then device) and the kernel rows."""
    from stepscope.analysis.run_model.framework_op_stats import ops_csv

    stats = run.model.op_stats(host, include_idle=bool(p["include_idle"]))
    return ToolResult("framework_op_stats", {**_run_host(run, host), **stats.to_dict()}, "ops",
                      stats, ops_csv(stats))


def kernel_stats(run: Run, host: str | None, p: Params) -> ToolResult:
    """GPU kernel stats: rows by total time, and the pie of the top kernels."""
    from stepscope.analysis.run_model.kernel_stats import kernel_stats_csv

    stats = run.model.kernel_stats(host)
    return ToolResult("kernel_stats", {**_run_host(run, host), **stats.to_dict()}, "rows",
                      stats, kernel_stats_csv(stats))


def input_pipeline(run: Run, host: str | None, p: Params) -> ToolResult:
    """The input pipeline analyzer: summary, steps, host-side split, op table, bottleneck."""
    from stepscope.analysis.tools.input_pipeline import input_ops_csv, input_pipeline_of

    result = input_pipeline_of(run.model, host)
    return ToolResult("input_pipeline_analyzer", result.to_dict(), "ops", result,
                      input_ops_csv(result))


def pod_viewer(run: Run, host: str | None, p: Params) -> ToolResult:
    """The pod viewer; with a host, each step's figures of that host only (stragglers are
    still judged over all hosts)."""
    from stepscope.analysis.tools.run_to_pod_viewer import pod_viewer_csv
    from stepscope.run import loader

    data = dict(loader.pod_dict(run.model))
    mfu = _mfu(run, p)
    data["mfu"] = {"mfu": mfu["mfu"], "unknown": mfu["unknown"],
                   "hosts": {name: {k: v for k, v in h.items() if k != "steps"}
                             for name, h in mfu["hosts"].items()}}
    if host is not None:
        data["mfu"]["hosts"] = {k: v for k, v in data["mfu"]["hosts"].items() if k == host}
        data["steps"] = [{**s, "per_host": {u: f for u, f in s["per_host"].items()
                                            if u == host or u.startswith(host + "/")}}
                         for s in data["steps"]]
    return ToolResult("pod_viewer", data, "steps", None, pod_viewer_csv(data))


def _memory(run: Run, host: str | None) -> dict[str, Any]:
    data: dict[str, Any] = run.result(("memory_profile", host),
                                      lambda: run.model.memory_dict(host))
    return data


def _has_memory(run: Run, host: str | None) -> bool:
    return bool(_memory(run, host)["allocators"])


def _memory_events(run: Run, host: str) -> Any:
    """A host's allocations and frees at full detail, for the timeline: kept in the cache
    when the run model was built, else read from the host's events (and kept)."""
    from stepscope.analysis.run_model.memory_events import memory_events
    from stepscope.run.storage import cached_memory_events, save_memory_events

    def compute() -> Any:
        source = run.tables.sources.get(host) if run.use_cache else None
        hit = cached_memory_events(source) if source is not None else None
        if hit is not None:
            return hit
        s = run.model.hosts[host].steps
        ev = memory_events(run.tables.hosts[host], s.step_num, s.start_ns, s.end_ns)
        if source is not None and len(ev):
            save_memory_events(source, ev)
        return ev

    return run.result(("memory_events", host), compute)


def memory_profile(run: Run, host: str | None, p: Params) -> ToolResult:
    """The memory profile: every allocator's summary and breakdown at the peak, the ops, and
    the timeline of allocator ``allocator`` (its index or name) at ``width`` points (0: no
    timeline), between ``from_us`` and ``to_us`` (µs from the host's profile start) when
    given, with the host's step boundaries."""
    from stepscope.analysis.run_model.memory_profile import breakdown_csv, timeline

    data = _memory(run, host)
    allocators = data["allocators"]
    if not allocators:
        raise ToolNotAvailableError(TOOLS["memory_profile"].missing)
    csv_text = breakdown_csv(allocators)
    index = _allocator_index(allocators, p["allocator"])
    chosen = allocators[index]
    if int(p["width"] or 0) == 0:
        return ToolResult("memory_profile", {**data, "allocator": index, "timeline": None},
                          "allocators", None, csv_text)
    ev = _memory_events(run, chosen["host"])
    start = int(data["start_ns"][chosen["host"]])
    lo, hi = p["from_us"], p["to_us"]
    line = timeline(ev, ev.allocators.index(chosen["name"]), start, int(p["width"] or 0),
                    None if lo is None else start + int(lo) * 1000,
                    None if hi is None else start + int(hi) * 1000)
    s = run.model.hosts[chosen["host"]].steps
    line["steps"] = [{"step": int(n), "start_ms": (int(a) - start) / 1e6,
                      "end_ms": (int(b) - start) / 1e6}
                     for n, a, b in zip(s.step_num.tolist(), s.start_ns.tolist(),
                                        s.end_ns.tolist(), strict=True)][:10_000]
    return ToolResult("memory_profile", {**data, "allocator": index, "timeline": line},
                      "allocators", None, csv_text)


def _allocator_index(allocators: list[dict[str, Any]], wanted: Value) -> int:
    """The index of the allocator ``wanted`` names (its index or its name; None: 0)."""
    if wanted is None:
        return 0
    text = str(wanted).strip()
    if re.fullmatch(r"[+-]?\d{1,19}", text):
        if int(text) < 0:
            raise InvalidParameterError(f"Parameter allocator must be an allocator's index "
                                        f"(0 or more) or its name, not {text}.")
        if int(text) < len(allocators):
            return int(text)
        raise NotFoundError(f"No allocator {text}: this profile has {len(allocators)}.")
    names = [str(a["name"]) for a in allocators]
    if text not in names:
        raise not_found("allocator", text, "this run", sorted(set(names)))
    return names.index(text)


# -- XLA programs -----------------------------------------------------------------------------

def op_profile(run: Run, host: str | None, p: Params) -> ToolResult:
    """The op profile of the XLA programs of all hosts, or of one; ``top`` ops kept per
    category (None: all)."""
    from stepscope.analysis.xla.op_profile import op_profile as profile_of

    top = None if p["top"] is None else int(p["top"])
    result = profile_of(run.xla(host), top=top)
    return ToolResult("op_profile", {**_run_host(run, host), **result.to_dict()}, "ops",
                      result)


def hlo_op_stats(run: Run, host: str | None, p: Params) -> ToolResult:
    """HLO op stats: one row per HLO op with its rates and what bounds it."""
    from stepscope.analysis.xla.hlo_op_stats import hlo_op_stats as stats_of
    from stepscope.analysis.xla.hlo_op_stats import hlo_op_stats_csv

    stats = stats_of(run.xla(host)).to_dict()
    return ToolResult("hlo_op_stats", {**_run_host(run, host), **stats}, "ops", None,
                      hlo_op_stats_csv(stats))


def roofline_model(run: Run, host: str | None, p: Params) -> ToolResult:
    """The roofline: each op's intensity and FLOP rate under the device's roofs."""
    from stepscope.analysis.xla.roofline import roofline

    result = roofline(run.xla(host))
    return ToolResult("roofline_model", {**_run_host(run, host), **result.to_dict()},
                      "points", result)


def memory_viewer(run: Run, host: str | None, p: Params) -> ToolResult:
    """The memory viewer of one program (default: the one that took the most time)."""
    from stepscope.analysis.xla.hlo_programs import program_times
    from stepscope.analysis.xla.memory_viewer import memory_viewer_of

    module = str(p["module"] or "") or None
    # Without a program named: the one that took the most time (the training step).
    times = None if module else program_times(run.xla(host).ops)
    result = memory_viewer_of(run.hlo_programs(host), module, int(p["memory_space"] or 0),
                              times)
    return ToolResult("memory_viewer", {**_run_host(run, host), **result.to_dict()},
                      "peak_buffers", result)


_TOP_OPS = 200  # ops offered for choosing in the graph viewer: the program's costliest first


def graph_viewer(run: Run, host: str | None, p: Params) -> ToolResult:
    """The HLO graph around one op of one program (default: the program with the most device
    time, and its costliest op)."""
    from stepscope.analysis.xla.hlo_graph import hlo_graph, op_times
    from stepscope.analysis.xla.hlo_programs import choose_program, program_list

    programs = {k: v for k, v in run.hlo_programs(host).items() if v.module is not None}
    if not programs:
        raise NotFoundError("The run holds no readable HLO of an XLA program.")
    ops = run.xla(host).ops
    wanted = str(p["module"] or "")
    if wanted:
        program = choose_program(programs, wanted)
    else:
        spent: dict[str, int] = {}
        for o in ops:
            spent[o.program_id] = spent.get(o.program_id, 0) + int(o.total_ps)
        program = max(programs.values(), key=lambda g: spent.get(g.program_id, 0))
    module = program.module
    assert module is not None
    times = op_times(ops, program.program_id, program.name)
    entry = module.computation(module.entry_computation_id)
    in_entry = [i.name for i in entry.instructions] if entry is not None else []
    ranked = sorted((n for n in in_entry if n in times), key=lambda n: -times[n].total_ps)
    ranked += [n for n in in_entry if n not in times]
    op = str(p["op"] or "") or (ranked[0] if ranked else "")
    if not op:
        raise NotFoundError(f"Program {program.label} has no instructions.")
    graph = hlo_graph(module, op, int(p["depth"] or 0),
                      expand_fusions=bool(p["expand_fusions"]), times=times,
                      program_id=program.program_id)
    return ToolResult("graph_viewer", {
        **_run_host(run, host), "module_label": program.label,
        "programs": program_list(programs), "ops": ranked[:_TOP_OPS], **graph.to_dict()},
        "nodes", graph)


# -- Python views ------------------------------------------------------------------------------

# The flame graph is sent with the call paths of at least this share of the window's Python
# time (a fraction of a pixel of the widest graph), and at most MAX_NODES of them.
MIN_SHARE = 1 / 20_000
MAX_NODES = 40_000
MAX_STEPS = 10_000  # step numbers listed for the page's step picker


def _has_python(run: Run, host: str | None) -> bool:
    """Whether the run (or host) recorded Python calls or samples."""
    python = run.model.python_dict()
    return bool(python) if host is None else host in python


def python_profile(run: Run, host: str | None, p: Params) -> ToolResult:
    """Top functions and the flame graph of one host's Python tracer or sampler data (its
    call paths pruned to what can be seen), for the whole recording, one step or a window."""
    from stepscope.analysis.run_model.python_views import pruned, run_python_views, sources_of

    python = run.model.python_dict()
    if host is None:
        if not python:
            raise ToolNotAvailableError("This run recorded no Python calls or samples.")
        host = sorted(python)[0]
    elif host not in python:
        raise ToolNotAvailableError(f"Host {host!r} recorded no Python calls or samples.")
    chosen: str = host
    views = run_python_views(
        {chosen: run.tables.hosts[chosen]}, {chosen: run.model.hosts[chosen].steps},
        host=chosen, source=str(p["source"] or "") or None,
        thread=str(p["thread"] or "") or None,
        step=None if p["step"] is None else int(p["step"]),
        start_ns=None if p["start_ns"] is None else int(p["start_ns"]),
        end_ns=None if p["end_ns"] is None else int(p["end_ns"]))
    sort, keep = str(p["sort"] or "self"), str(p["filter"] or "")
    data = views.to_dict(sort, keep, limit=2000)
    tree = views.tree
    min_ns = max(int(views.total_ns * MIN_SHARE), 1)
    if len(tree) > MAX_NODES:
        min_ns = max(min_ns, int(sorted(tree.total_ns.tolist(), reverse=True)[MAX_NODES]) + 1)
    kept = pruned(tree, min_ns)
    steps = run.model.hosts[views.host].steps
    return ToolResult("python_profile", {
        **data, "run": run.name, "tree": kept.to_dict(), "tree_nodes": len(tree),
        "tree_min_ns": min_ns, "hosts": sorted(python),
        "sources": sources_of(run.tables.hosts[views.host]),
        "steps": steps.step_num.tolist()[:MAX_STEPS]}, "functions", views,
        views.csv(sort, keep))


# -- the GPU timeline --------------------------------------------------------------------------

def _has_devices(run: Run, host: str | None) -> bool:
    """Whether the run (or host) ran anything on a device, from the run model (no table is
    read to decide)."""
    hosts = run.model.hosts
    return any(bool(hosts[name].devices) for name in run.model.host_names(host))


def gpu_timeline(run: Run, host: str | None, p: Params) -> ToolResult:
    """Per device: the temporal breakdown (whole and per step), idle causes per stream,
    launch statistics, queue lengths and kernel sequences; per step, the critical path from
    every rank; and the advice these call for. Reads every host's events (the critical path
    crosses them)."""
    from stepscope.analysis.csv_table import csv_text
    from stepscope.analysis.tools.advice import gpu_timeline_advice
    from stepscope.analysis.tools.gpu_timeline import TABLE_COLUMNS, Options, gpu_timeline_of

    result = gpu_timeline_of(run.tables, host, Options(
        kernel_wait_ns=int(p["kernel_wait_ns"] or 0), hta_scope=bool(p["hta_scope"])))
    table = result.table()
    rows = zip(*(table[c] for c in TABLE_COLUMNS), strict=True)
    csv = csv_text(TABLE_COLUMNS, ([("" if v is None else v) for v in row] for row in rows))
    return ToolResult("gpu_timeline", {
        "run": run.name, "host": host, **result.to_dict(),
        "advice": [r.to_dict() for r in gpu_timeline_advice(result)]}, None, result, csv)


# -- comparing runs ---------------------------------------------------------------------------

def summary(run: Run, host: str | None, p: Params) -> ToolResult:
    """The run's small, versioned summary (``summary.json``): what a diff or a regression
    check compares."""
    from stepscope.analysis.tools.run_summary import summarize
    from stepscope.run import loader
    from stepscope.version import __version__

    result = summarize(run.model, stragglers=loader.pod_dict(run.model)["stragglers"],
                       created_by=f"stepscope {__version__}", programs=_program_peaks(run))
    return ToolResult("summary", result.to_dict(), "ops", result)


def _program_peaks(run: Run) -> dict[str, int]:
    """Peak heap per XLA program (by name), where the profile holds HLO with buffers."""
    from stepscope.analysis.xla.memory_viewer import memory_viewer as viewer

    if not run.has_hlo():
        return {}
    peaks: dict[str, int] = {}
    try:
        for prog in run.hlo_programs().values():
            if prog.module is not None and prog.has_memory_data:
                name = prog.name or prog.label
                peak = viewer(prog.module, 0, program_id=prog.program_id).peak_heap_bytes
                peaks[name] = max(peaks.get(name, 0), peak)
    except StepscopeError:  # the summary stands without them
        return {}
    return peaks


def run_summary(run: Run) -> Any:
    """The run's ``RunSummary`` (from its kept answer when there is one)."""
    from stepscope.analysis.tools.run_summary import RunSummary

    result = run.tool("summary")
    return result.value if result.value is not None else RunSummary.from_dict(result.data)


MAX_DIFF_STEPS = 10_000  # per-step times sent for the chart, per run


def diff(run: Run, host: str | None, p: Params) -> ToolResult:
    """The run compared with the baseline run ``base``: step time change with its interval
    and verdict, breakdown, ops, kernels, memory, hosts (of all hosts: ``host`` is not
    used)."""
    from pathlib import Path

    from stepscope.analysis.tools.run_diff import diff as compare

    base = str(p["base"])
    if Path(base) == Path(str(run.path)):
        raise InvalidParameterError("Choose a baseline other than the run itself.")
    try:
        other = run.open_other(base)
        old = run_summary(other)
    except StepscopeError as err:
        raise NotFoundError(f"The baseline run could not be read: {err}") from err
    new = run_summary(run)
    result = compare(old, new)
    return ToolResult("diff", {"run": new.run, "base": old.run, "host": None,
                               **result.to_dict(),
                               "step_ms": {"base": list(old.step_ms[:MAX_DIFF_STEPS]),
                                           "new": list(new.step_ms[:MAX_DIFF_STEPS])}},
                      "ops", result)


# -- the trace viewer -------------------------------------------------------------------------

def trace_host(run: Run, host: str | None) -> str:
    """The host a trace request is about: the one named, else the run's first."""
    if host is not None:
        return host
    if not run.tables.hosts:
        raise NotFoundError(f"Run {run.name!r} has no host that could be read.")
    return next(iter(run.tables.hosts))


def clock_of(run: Run, host: str) -> dict[str, Any]:
    """How the host's clock is lined up with the run's other hosts (the pod viewer's
    alignment): add ``shift_ns`` to its times to compare them with another host's."""
    from stepscope.run import loader

    one = {"shift_ns": 0, "method": "none", "reason": "One host: nothing to line up."}
    if len(run.tables.hosts) <= 1:
        return one  # without the run model, which may still be being built
    alignment = loader.pod_dict(run.model).get("alignment", {}).get(host)
    if not alignment:
        return one
    return {"shift_ns": int(alignment["shift_ns"]), "method": str(alignment["method"]),
            "reason": str(alignment["reason"])}


def trace_viewer(run: Run, host: str | None, p: Params) -> ToolResult:
    """The trace viewer's sections and tracks, its time span and counts."""
    name = trace_host(run, host)
    return ToolResult("trace_viewer", {
        "run": run.name, "host": name, "hosts": list(run.tables.hosts),
        "clock": clock_of(run, name), **run.trace_index(name).meta()}, "tracks")


def _span(run: Run, name: str, p: Params) -> tuple[int, int]:
    meta = run.trace_index(name).meta()
    start = 0 if p["start_ns"] is None else int(p["start_ns"])
    end = int(meta["span_ns"]) + 1 if p["end_ns"] is None else int(p["end_ns"])
    return start, max(end, start + 1)


def trace_window(run: Run, host: str | None, p: Params) -> ToolResult:
    """The events of a time range (ns from the trace's origin) at ``width`` pixels: each
    event at least a pixel wide, narrower ones counted in aggregate blocks."""
    name = trace_host(run, host)
    start, end = _span(run, name, p)
    data = run.trace_index(name).query(start, end, int(p["width"] or 1))
    return ToolResult("trace_window", {"run": run.name, "host": name, **data}, "events")


def trace_search(run: Run, host: str | None, p: Params) -> ToolResult:
    """Events whose name holds ``q`` (any case), in time order."""
    from stepscope.analysis.trace.trace_index import TraceQueryError

    name = trace_host(run, host)
    try:
        data = run.trace_index(name).search(str(p["q"] or ""))
    except TraceQueryError as err:
        raise InvalidTraceQuery(str(err)) from err
    return ToolResult("trace_search", {"run": run.name, "host": name, **data}, "matches")


def trace_summary(run: Run, host: str | None, p: Params) -> ToolResult:
    """Events of every track in a time range (default: the whole trace), summed by name:
    how many, and their time."""
    from stepscope.analysis.trace.trace_index import TraceQueryError

    name = trace_host(run, host)
    index = run.trace_index(name)
    start, end = _span(run, name, p)
    try:
        data = index.selection(start, end, [int(t.id) for t in index.tracks])
    except TraceQueryError as err:
        raise InvalidTraceQuery(str(err)) from err
    return ToolResult("trace_summary", {"run": run.name, "host": name, "start_ns": start,
                                        "end_ns": end, **data}, "rows")


class InvalidTraceQuery(InvalidParameterError):
    """A trace query that cannot be answered as asked (a 400 from the API)."""


# -- the registry -----------------------------------------------------------------------------

_TIME = 1 << 62

# Tools whose answers are kept in the on-disk cache: each costs a host decode or more to
# compute, and no interface needs its typed value (bump kept.RESULTS_VERSION when one of
# their answers changes for the same files). An answer's size is that of what it shows, not
# the run's events: the trace tools' (the viewer's tracks, a window at its pixel width, a
# summary by name, at most MAX_MATCHES matches) and the Python profile's (the flame graph
# pruned to what can be seen) stay small where reading the host's table and trace index again
# costs seconds at 1 GB.
_KEPT = {"overview_page", "advice", "summary", "steps", "input_pipeline_analyzer", "pod_viewer",
         "memory_profile", "op_profile", "hlo_op_stats", "roofline_model", "python_profile",
         "trace_viewer", "trace_window", "trace_search", "trace_summary"}

_DECLARED: list[ToolSpec] = [
    ToolSpec("overview_page", "Overview", "Step time and its breakdown, the input-bound "
             "verdict, top ops, the run environment, MFU and what to change.", overview_page,
             (PEAK_PARAM,)),
    ToolSpec("framework_op_stats", "Framework op stats", "Time and self time per op, on the "
             "host and on devices.", framework_op_stats, (
                 Param("include_idle", "flag", "add IDLE rows: time on op threads/streams "
                       "when no op ran", False),), csv=True),
    ToolSpec("kernel_stats", "GPU kernel stats", "Per GPU kernel: the op that launched it, "
             "its launch shape, Tensor Core use, count and time.", kernel_stats, csv=True),
    ToolSpec("input_pipeline_analyzer", "Input pipeline analyzer", "Whether steps wait for "
             "input, where input time goes on the host, and the slowest stage.",
             input_pipeline, csv=True),
    ToolSpec("trace_viewer", "Trace viewer", "The timeline's sections, tracks and time "
             "span (its events come from trace_window).", trace_viewer),
    ToolSpec("pod_viewer", "Pod viewer", "Every host's (or device's) step time side by side, "
             "split by category, the straggler of each step, and each host's MFU.", pod_viewer,
             (PEAK_PARAM,), csv=True),
    ToolSpec("memory_profile", "Memory profile", "Per allocator: peak memory, when and in "
             "which step it happened, what was live then; memory per op.", memory_profile, (
                 Param("allocator", "text", "the allocator whose timeline is given: its index "
                       "or its name (default the first)"),
                 Param("width", "int", "points of the memory timeline (0: none)", 1000, 0,
                       10_000),
                 Param("from_us", "int", "timeline from this time (µs from the host's "
                       "profile start)", None, 0, 1 << 50),
                 Param("to_us", "int", "timeline to this time (µs from the host's profile "
                       "start)", None, 0, 1 << 50)),
             available=_has_memory, csv=True,
             missing="This profile recorded no memory activity (no MemoryAllocation or "
                     "[memory] events)."),
    ToolSpec("op_profile", "Op profile", "Time, FLOPS utilisation and bound-by of the XLA "
             "programs, per category and HLO op.", op_profile, (
                 Param("top", "int", "ops kept: the top N overall and of each category "
                       "(default all)", None, 1, 1 << 31),), needs="xla"),
    ToolSpec("hlo_op_stats", "HLO op stats", "One row per HLO op: time, rates and what "
             "bounds it.", hlo_op_stats, needs="xla", csv=True),
    ToolSpec("roofline_model", "Roofline model", "Each XLA op's arithmetic intensity and "
             "FLOP rate under the device's roofs.", roofline_model, needs="xla"),
    ToolSpec("memory_viewer", "Memory viewer", "What fills one XLA program's memory at its "
             "peak, from its buffer assignment.", memory_viewer, (
                 Param("module", "text", "the program: name(id), its id, or a name only one "
                       "program has (default: the program that took the most time)"),
                 Param("memory_space", "int", "memory space (XLA memory colour; 0: the "
                       "device's memory)", 0, 0, (1 << 31) - 1)), needs="hlo"),
    ToolSpec("graph_viewer", "Graph viewer", "The HLO graph around one op, with each op's "
             "shape and device time.", graph_viewer, (
                 Param("module", "text", "the program: name(id), its id, or a name only one "
                       "program has (default: the one with the most device time)"),
                 Param("op", "text", "the HLO instruction (default: the costliest)"),
                 Param("depth", "int", "steps out from the op", 2, 0, 20),
                 Param("expand_fusions", "flag", "show the instructions inside each fusion",
                       False)), needs="hlo"),
    ToolSpec("python_profile", "Python profile", "Where the Python time went: top functions "
             "(self and inclusive time, calls or samples) and the flame graph, for the "
             "whole run, a step or a time range.", python_profile, (
                 Param("step", "int", "only this step", None, -(1 << 62), 1 << 62),
                 Param("start_ns", "int", "from (ns, the trace's clock)", None, 0, 1 << 62),
                 Param("end_ns", "int", "to (ns, the trace's clock)", None, 0, 1 << 62),
                 Param("source", "text", "tracer or sampler (default: what the run has)"),
                 Param("thread", "text", "only this thread"),
                 Param("sort", "text", "self, total, calls or name (default self)"),
                 Param("filter", "text", "only functions whose name or file holds this")),
             available=_has_python, csv=True),
    ToolSpec("gpu_timeline", "GPU timeline", "Per rank and device: compute, communication, "
             "memory and idle time, why streams sat idle, communication under compute, "
             "launches, queues, kernel sequences; per step, the critical path across ranks.",
             gpu_timeline, (
                 Param("kernel_wait_ns", "int", "gaps shorter than this between a stream's "
                       "ops are kernel wait (ns; HTA's 30 µs by default)", 30_000, 0,
                       10**15),
                 Param("hta_scope", "flag", "count only the device ops HTA counts (launched "
                       "in the trace by the end of the last step)", False)),
             available=_has_devices, csv=True),
    ToolSpec("diff", "Diff", "This run against a baseline run: the step time change with "
             "its confidence interval and verdict, and what changed (breakdown, ops, "
             "kernels, memory, hosts).", diff, (
                 Param("base", "run", "the baseline run to compare with",
                       required=True),)),
    ToolSpec("summary", "Summary", "The run's small, versioned summary (summary.json) that "
             "diff and check compare.", summary, page=False),
    ToolSpec("advice", "Advice", "What to change, each rule with the figures that made it "
             "fire.", advice, page=False),
    ToolSpec("steps", "Steps", "Every host's steps: number, start, end and duration.", steps,
             page=False),
    ToolSpec("trace_window", "Trace window", "The trace's events of a time range, at a "
             "given level of detail.", trace_window, (
                 Param("start_ns", "int", "from (ns after the trace's origin; default 0)",
                       None, -_TIME, _TIME),
                 Param("end_ns", "int", "to (ns after the trace's origin; default its end)",
                       None, -_TIME, _TIME),
                 Param("width", "int", "pixels of detail", 1000, 1, 100_000)), page=False),
    ToolSpec("trace_search", "Trace search", "Trace events whose name holds a text, in time "
             "order.", trace_search, (
                 Param("q", "text", "the text to look for (1 to 200 characters)"),),
             page=False),
    ToolSpec("trace_summary", "Trace summary", "The events of a time range summed by name: "
             "count and time.", trace_summary, (
                 Param("start_ns", "int", "from (ns after the trace's origin; default 0)",
                       None, -_TIME, _TIME),
                 Param("end_ns", "int", "to (ns after the trace's origin; default its end)",
                       None, -_TIME, _TIME)), page=False),
]
TOOLS: dict[str, ToolSpec] = {t.name: replace(t, keep=t.name in _KEPT) for t in _DECLARED}
