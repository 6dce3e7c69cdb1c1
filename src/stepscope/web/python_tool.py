"""The Python profile page's data: top functions and the flame graph of one host's Python
tracer or sampler data, for the whole recording, one step or a window (a trace selection)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from stepscope.analysis.python_views import PythonViews, pruned, run_python_views, sources_of
from stepscope.analysis.run_model import RunModel
from stepscope.errors import NotFoundError
from stepscope.run_loader import run_model_of
from stepscope.web.loaded_run import LoadedRun

Params = Mapping[str, "int | bool | str"]
# The flame graph is sent with the call paths of at least this share of the window's Python
# time (a fraction of a pixel of the widest graph), and at most MAX_NODES of them.
MIN_SHARE = 1 / 20_000
MAX_NODES = 40_000
MAX_STEPS = 10_000  # step numbers listed for the page's step picker


def _model(run: LoadedRun) -> RunModel:
    model: RunModel = run.result(("run_model",),
                                 lambda: run_model_of(run.profile, use_cache=run.use_cache))
    return model


def has_python(run: LoadedRun, host: str | None) -> bool:
    """Whether the run (or host) recorded Python calls or samples."""
    python = _model(run).python_dict()
    return bool(python) if host is None else host in python


def _views(run: LoadedRun, host: str | None, params: Params) -> PythonViews:
    model = _model(run)
    python = model.python_dict()
    if host is None:
        if not python:
            raise NotFoundError("This run recorded no Python calls or samples.")
        host = sorted(python)[0]
    elif host not in python:
        raise NotFoundError(f"Host {host!r} recorded no Python calls or samples.")
    source = str(params.get("source") or "") or None
    thread = str(params.get("thread") or "") or None
    step = params.get("step")
    lo, hi = params.get("start_ns"), params.get("end_ns")
    key = ("python_views", host, source, thread, step, lo, hi)
    chosen: str = host

    def compute() -> PythonViews:
        tables = {chosen: run.profile.hosts[chosen]}
        return run_python_views(
            tables, {chosen: model.hosts[chosen].steps}, host=chosen, source=source,
            thread=thread, step=None if step is None else int(step),
            start_ns=None if lo is None else int(lo), end_ns=None if hi is None else int(hi))

    views: PythonViews = run.result(key, compute)
    return views


def python_profile_data(run: LoadedRun, host: str | None, params: Params) -> dict[str, Any]:
    """Top functions and the flame graph (its call paths pruned to what can be seen)."""
    views = _views(run, host, params)
    data = views.to_dict(str(params.get("sort") or "self"), str(params.get("filter") or ""),
                         limit=2000)
    tree = views.tree
    min_ns = max(int(views.total_ns * MIN_SHARE), 1)
    if len(tree) > MAX_NODES:
        min_ns = max(min_ns, int(sorted(tree.total_ns.tolist(), reverse=True)[MAX_NODES]) + 1)
    kept = pruned(tree, min_ns)
    steps = _model(run).hosts[views.host].steps
    table = run.profile.hosts[views.host]
    return {**data, "run": run.profile.run, "tree": kept.to_dict(),
            "tree_nodes": len(tree), "tree_min_ns": min_ns,
            "hosts": sorted(_model(run).python_dict()), "sources": sources_of(table),
            "steps": steps.step_num.tolist()[:MAX_STEPS]}


def python_profile_csv(run: LoadedRun, host: str | None, params: Params) -> str:
    """The top functions as CSV, the columns of ``stepscope python --csv``."""
    views = _views(run, host, params)
    return views.csv(str(params.get("sort") or "self"), str(params.get("filter") or ""))
