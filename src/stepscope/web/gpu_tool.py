"""The GPU timeline page's data: ``analysis.gpu_timeline`` of the loaded run, computed once per
run and host."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from stepscope.analysis.csv_table import csv_text
from stepscope.analysis.gpu_timeline import TABLE_COLUMNS, GpuTimeline, gpu_timeline_of
from stepscope.web.loaded_run import LoadedRun

Params = Mapping[str, "int | bool | str"]


def _timeline(run: LoadedRun, host: str | None) -> GpuTimeline:
    result: GpuTimeline = run.result(("gpu_timeline", host),
                                     lambda: gpu_timeline_of(run.profile, host))
    return result


def gpu_timeline_data(run: LoadedRun, host: str | None, params: Params) -> dict[str, Any]:
    """Per device: the temporal breakdown (whole and per step), idle causes per stream,
    launch statistics, queue lengths and kernel sequences; per step, the critical path from
    every rank; and the advice these call for."""
    from stepscope.analysis.advice import gpu_timeline_advice

    result = _timeline(run, host)
    return {"host": host, **result.to_dict(),
            "advice": [r.to_dict() for r in gpu_timeline_advice(result)]}


def gpu_timeline_csv(run: LoadedRun, host: str | None, params: Params) -> str:
    """One row per device: the columns of ``GpuTimeline.table()``."""
    table = _timeline(run, host).table()
    rows = zip(*(table[c] for c in TABLE_COLUMNS), strict=True)
    return csv_text(TABLE_COLUMNS, ([("" if v is None else v) for v in row] for row in rows))


def has_device_activity(run: LoadedRun, host: str | None) -> bool:
    """Whether the run (or host) ran anything on a device, from the run model (no table is
    read to decide)."""
    from stepscope.web.tools import run_model

    hosts = run_model(run).hosts
    names = [host] if host is not None else list(hosts)
    return any(name in hosts and bool(hosts[name].devices) for name in names)
