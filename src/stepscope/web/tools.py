"""The tools the web UI offers, one entry each: name, title, JSON data and optional CSV.

A new page is one more ``Tool`` here (with its analysis) and one more page module in
``frontend/src/pages``; the navigation and the HTTP API pick it up from this registry.
Names follow XProf's tool names where XProf has the tool.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from stepscope.analysis.advice import recommendations
from stepscope.analysis.framework_op_stats import OpStats
from stepscope.analysis.kernel_stats import KernelStats, kernel_stats_csv
from stepscope.analysis.run_model import RunModel
from stepscope.analysis.run_to_pod_viewer import pod_viewer_csv
from stepscope.run_loader import run_model_of
from stepscope.views.report import ops_csv
from stepscope.web.hlo_tools import graph_viewer_data, memory_viewer_data
from stepscope.web.loaded_run import LoadedRun
from stepscope.web.python_tool import has_python, python_profile_csv, python_profile_data

Params = Mapping[str, "int | bool | str"]  # flags, integer and text parameters
DataFn = Callable[[LoadedRun, "str | None", Params], dict[str, Any]]
CsvFn = Callable[[LoadedRun, "str | None", Params], str]


@dataclass(frozen=True)
class Tool:
    """One page of the UI."""

    name: str
    title: str
    data: DataFn
    csv: CsvFn | None = None
    flags: tuple[str, ...] = ()  # boolean query parameters the tool accepts
    ints: tuple[IntParam, ...] = ()  # integer query parameters the tool accepts
    # Whether the tool has anything to show for a loaded run (None: always).
    available: Callable[[LoadedRun, str | None], bool] | None = None
    needs_xla: bool = False  # listed only for runs whose profiles hold XLA programs
    needs_hlo: bool = False  # listed only for runs whose profiles hold XLA programs' HLO
    texts: tuple[str, ...] = ()  # text query parameters the tool accepts


@dataclass(frozen=True)
class IntParam:
    """An integer query parameter: absent means ``default`` (None: not given)."""

    name: str
    low: int
    high: int
    default: int | None = None


def run_model(run: LoadedRun) -> RunModel:
    """The run's model: computed once per loaded run (or read from the cache)."""
    return _model(run)


def _model(run: LoadedRun) -> RunModel:
    """The run's model: computed once per loaded run (or read from the cache)."""
    model: RunModel = run.result(("run_model",),
                                 lambda: run_model_of(run.profile, use_cache=run.use_cache))
    return model


def _overview(run: LoadedRun) -> dict[str, Any]:
    return _model(run).overview_dict()


def _advice(run: LoadedRun) -> list[dict[str, Any]]:
    """The run's best-practice advice (``analysis.advice``), computed once per loaded run."""
    advice: list[dict[str, Any]] = run.result(
        ("advice",), lambda: [r.to_dict() for r in recommendations(_model(run))])
    return advice


def overview_data(run: LoadedRun, host: str | None, params: Params) -> dict[str, Any]:
    """The overview page of all hosts, or of one (the advice is the whole run's)."""
    summary = _overview(run)
    python = _model(run).python_dict()  # Python time per step, heaviest functions
    xla = {"xla_flops_utilization": _xla_flops_utilization(run, host),
           "python": python if host is None else {k: v for k, v in python.items() if k == host}}
    if host is None:
        return {**summary, "host": None, **xla, "recommendations": _advice(run)}
    return {"run": summary["run"], "path": summary["path"], "host": host,
            **summary["hosts"][host], "failed_hosts": summary["failed_hosts"], **xla,
            "recommendations": _advice(run)}

def _xla_flops_utilization(run: LoadedRun, host: str | None) -> float | None:
    """The guide's "FLOPS utilisation" of the run's XLA programs, where it can be computed."""
    from stepscope.run_loader import has_xla_data

    sources = run.profile.sources
    if not has_xla_data([sources[host]] if host in sources else list(sources.values())):
        return None
    value: float | None = op_profile_data(run, host, {})["flops_utilization"]
    return value


def _op_stats(run: LoadedRun, host: str | None, params: Params) -> OpStats:
    idle = bool(params.get("include_idle", False))
    stats: OpStats = run.result(("op_stats", host, idle),
                                lambda: _model(run).op_stats(host, include_idle=idle))
    return stats


def op_stats_data(run: LoadedRun, host: str | None, params: Params) -> dict[str, Any]:
    """Framework op stats: every op row (host, then device) and the kernel rows."""
    return {"run": run.profile.run, "host": host, **_op_stats(run, host, params).to_dict()}


def op_stats_csv(run: LoadedRun, host: str | None, params: Params) -> str:
    """Framework op stats as CSV, the columns of ``stepscope ops --csv``."""
    return ops_csv(_op_stats(run, host, params))


def _kernel_stats(run: LoadedRun, host: str | None) -> KernelStats:
    stats: KernelStats = run.result(("kernel_stats", host),
                                    lambda: _model(run).kernel_stats(host))
    return stats


def kernel_stats_data(run: LoadedRun, host: str | None, params: Params) -> dict[str, Any]:
    """GPU kernel stats: rows by total time, and the pie of the top kernels."""
    return {"run": run.profile.run, "host": host, **_kernel_stats(run, host).to_dict()}


def kernel_stats_table_csv(run: LoadedRun, host: str | None, params: Params) -> str:
    """GPU kernel stats as CSV, the columns of ``stepscope kernels --csv``."""
    return kernel_stats_csv(_kernel_stats(run, host))


def pod_viewer_data(run: LoadedRun, host: str | None, params: Params) -> dict[str, Any]:
    """The pod viewer: every host's (or device's) step time side by side, and stragglers."""
    return _model(run).pod_dict()


def pod_viewer_table_csv(run: LoadedRun, host: str | None, params: Params) -> str:
    """The pod viewer's figures per step and host as CSV, those of ``stepscope pod --csv``."""
    return pod_viewer_csv(_model(run).pod_dict())


def trace_viewer_data(run: LoadedRun, host: str | None, params: Params) -> dict[str, Any]:
    """The trace viewer's sections and tracks (its events come from ``/api/trace/…``)."""
    from stepscope.web.trace import trace_viewer_data as data  # it imports this module

    return data(run, host, params)


def _input_pipeline(run: LoadedRun, host: str | None) -> Any:
    from stepscope.analysis.input_pipeline import input_pipeline_of

    return run.result(("input_pipeline", host), lambda: input_pipeline_of(_model(run), host))


def input_pipeline_data(run: LoadedRun, host: str | None, params: Params) -> dict[str, Any]:
    """The input pipeline analyzer: summary, steps, host-side split, op table, bottleneck."""
    data: dict[str, Any] = _input_pipeline(run, host).to_dict()
    return data


def input_pipeline_csv(run: LoadedRun, host: str | None, params: Params) -> str:
    """The input-op table as CSV, the columns of ``stepscope input --csv``."""
    from stepscope.analysis.input_pipeline import input_ops_csv

    return input_ops_csv(_input_pipeline(run, host))


def _memory(run: LoadedRun, host: str | None) -> dict[str, Any]:
    data: dict[str, Any] = run.result(("memory_profile", host),
                                      lambda: _model(run).memory_dict(host))
    return data


def _memory_events(run: LoadedRun, host: str) -> Any:
    """A host's allocations and frees at full detail, for the timeline."""
    from stepscope.analysis.memory_events import (
        cached_memory_events,
        memory_events,
        save_memory_events,
    )

    def compute() -> Any:
        # Kept in the cache when the run model was built: the host's table is not read.
        source = run.profile.sources.get(host) if run.use_cache else None
        hit = cached_memory_events(source) if source is not None else None
        if hit is not None:
            return hit
        steps = _model(run).hosts[host].steps
        ev = memory_events(run.profile.hosts[host], steps.step_num, steps.start_ns,
                           steps.end_ns)
        if source is not None and len(ev):
            save_memory_events(source, ev)
        return ev

    return run.result(("memory_events", host), compute)


def has_memory(run: LoadedRun, host: str | None) -> bool:
    """Whether the run (or host) recorded any memory activity."""
    return bool(_memory(run, host)["allocators"])


def memory_profile_data(run: LoadedRun, host: str | None, params: Params) -> dict[str, Any]:
    """The memory profile: every allocator's summary and breakdown at the peak, the ops, and
    the timeline of allocator ``allocator`` (an index into ``allocators``) downsampled to
    ``width`` points (0: no timeline), between ``from_us`` and ``to_us`` (µs since the host's
    profile start) when given, with the host's step boundaries."""
    from stepscope.analysis.memory_profile import timeline
    from stepscope.errors import NotFoundError

    data = _memory(run, host)
    allocators = data["allocators"]
    if not allocators:
        raise NotFoundError("This profile recorded no memory activity (no MemoryAllocation "
                            "or [memory] events).")
    index = int(params.get("allocator", 0))
    if index >= len(allocators):
        raise NotFoundError(f"No allocator {index}: this profile has {len(allocators)}.")
    chosen = allocators[index]
    if int(params["width"]) == 0:
        return {**data, "allocator": index, "timeline": None}
    ev = _memory_events(run, chosen["host"])
    start = int(data["start_ns"][chosen["host"]])
    lo, hi = params.get("from_us"), params.get("to_us")
    line = timeline(ev, ev.allocators.index(chosen["name"]), start, int(params["width"]),
                    None if lo is None else start + int(lo) * 1000,
                    None if hi is None else start + int(hi) * 1000)
    steps = _model(run).hosts[chosen["host"]].steps
    line["steps"] = [{"step": int(n), "start_ms": (int(s) - start) / 1e6,
                      "end_ms": (int(e) - start) / 1e6}
                     for n, s, e in zip(steps.step_num.tolist(), steps.start_ns.tolist(),
                                        steps.end_ns.tolist(), strict=True)][:10_000]
    return {**data, "allocator": index, "timeline": line}


def memory_profile_csv(run: LoadedRun, host: str | None, params: Params) -> str:
    """The breakdowns at the peak as CSV, those of ``stepscope memory --csv``."""
    from stepscope.analysis.memory_profile import breakdown_csv

    return breakdown_csv(_memory(run, host)["allocators"])


def _xla(run: LoadedRun, host: str | None) -> Any:
    """The XLA model of the run, or of one host: computed once per loaded run (or cached)."""
    from stepscope.run_loader import xla_model_of

    return run.result(("xla_model", host), lambda: xla_model_of(
        run.profile, _model(run), use_cache=run.use_cache, host=host))


def op_profile_data(run: LoadedRun, host: str | None, params: Params) -> dict[str, Any]:
    """The op profile of the XLA programs of all hosts, or of one."""
    from stepscope.analysis.op_profile import op_profile

    data: dict[str, Any] = run.result(("op_profile", host),
                                      lambda: op_profile(_xla(run, host)).to_dict())
    return {"run": run.profile.run, "host": host, **data}


def _hlo_op_stats(run: LoadedRun, host: str | None) -> dict[str, Any]:
    from stepscope.analysis.hlo_op_stats import hlo_op_stats

    data: dict[str, Any] = run.result(("hlo_op_stats", host),
                                      lambda: hlo_op_stats(_xla(run, host)).to_dict())
    return data


def hlo_op_stats_data(run: LoadedRun, host: str | None, params: Params) -> dict[str, Any]:
    """HLO op stats: one row per HLO op with its rates and what bounds it."""
    return {"run": run.profile.run, "host": host, **_hlo_op_stats(run, host)}


def hlo_op_stats_table_csv(run: LoadedRun, host: str | None, params: Params) -> str:
    """HLO op stats as CSV, the columns of ``stepscope xla --csv``."""
    from stepscope.analysis.hlo_op_stats import hlo_op_stats_csv

    return hlo_op_stats_csv(_hlo_op_stats(run, host))


def roofline_data(run: LoadedRun, host: str | None, params: Params) -> dict[str, Any]:
    """The roofline: each op's intensity and FLOP rate under the device's roofs."""
    from stepscope.analysis.roofline import roofline

    data: dict[str, Any] = run.result(("roofline", host),
                                      lambda: roofline(_xla(run, host)).to_dict())
    return {"run": run.profile.run, "host": host, **data}


TOOLS: dict[str, Tool] = {t.name: t for t in [
    Tool("overview_page", "Overview", overview_data),
    Tool("framework_op_stats", "Framework op stats", op_stats_data, op_stats_csv,
         flags=("include_idle",)),
    Tool("kernel_stats", "GPU kernel stats", kernel_stats_data, kernel_stats_table_csv),
    Tool("input_pipeline_analyzer", "Input pipeline analyzer", input_pipeline_data,
         input_pipeline_csv),
    Tool("trace_viewer", "Trace viewer", trace_viewer_data),
    Tool("pod_viewer", "Pod viewer", pod_viewer_data, pod_viewer_table_csv),
    Tool("memory_profile", "Memory profile", memory_profile_data, memory_profile_csv,
         ints=(IntParam("allocator", 0, 10_000, 0), IntParam("width", 0, 10_000, 1000),
               IntParam("from_us", 0, 1 << 50), IntParam("to_us", 0, 1 << 50)),
         available=has_memory),
    Tool("python_profile", "Python profile", python_profile_data, python_profile_csv,
         ints=(IntParam("step", -(1 << 62), 1 << 62), IntParam("start_ns", 0, 1 << 62),
               IntParam("end_ns", 0, 1 << 62)),
         texts=("source", "thread", "sort", "filter"), available=has_python),
    Tool("op_profile", "Op profile", op_profile_data, needs_xla=True),
    Tool("hlo_op_stats", "HLO op stats", hlo_op_stats_data, hlo_op_stats_table_csv,
         needs_xla=True),
    Tool("roofline_model", "Roofline model", roofline_data, needs_xla=True),
    Tool("memory_viewer", "Memory viewer", memory_viewer_data, needs_hlo=True,
         texts=("module", "memory_space")),
    Tool("graph_viewer", "Graph viewer", graph_viewer_data, flags=("expand_fusions",),
         needs_hlo=True, texts=("module", "op", "depth")),
]}
