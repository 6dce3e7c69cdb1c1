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
from stepscope.web.loaded_run import LoadedRun

Params = Mapping[str, bool]
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
    if host is None:
        return {**summary, "host": None, "recommendations": _advice(run)}
    return {"run": summary["run"], "path": summary["path"], "host": host,
            **summary["hosts"][host], "failed_hosts": summary["failed_hosts"],
            "recommendations": _advice(run)}


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


TOOLS: dict[str, Tool] = {t.name: t for t in [
    Tool("overview_page", "Overview", overview_data),
    Tool("framework_op_stats", "Framework op stats", op_stats_data, op_stats_csv,
         flags=("include_idle",)),
    Tool("kernel_stats", "GPU kernel stats", kernel_stats_data, kernel_stats_table_csv),
    Tool("input_pipeline_analyzer", "Input pipeline analyzer", input_pipeline_data,
         input_pipeline_csv),
    Tool("trace_viewer", "Trace viewer", trace_viewer_data),
    Tool("pod_viewer", "Pod viewer", pod_viewer_data, pod_viewer_table_csv),
]}
