"""The Diff page's data: the run compared with a baseline run of the same logdir.

The baseline arrives as the ``base`` parameter, a run name that the API has checked against
the logdir's runs and turned into that run's path (see ``Tool.runs``). Its run model is read
through the on-disk cache (built when it was opened, in the UI or by the CLI)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from stepscope.analysis.run_diff import diff
from stepscope.analysis.run_summary import RunSummary, summarize
from stepscope.errors import StepscopeError
from stepscope.web.loaded_run import LoadedRun
from stepscope.web.tools import Params, run_model

MAX_STEPS_SHOWN = 10_000  # per-step times sent for the chart, per run


def _summary(run: LoadedRun) -> RunSummary:
    result: RunSummary = run.result(("run_summary",), lambda: summarize(run_model(run)))
    return result


def _base_summary(run: LoadedRun, path: Path) -> RunSummary:
    from stepscope.run_loader import open_run_model
    from stepscope.web.api import ApiError  # the API imports the tools
    from stepscope.web.store import signature

    def compute() -> RunSummary:
        try:
            return summarize(open_run_model(path, use_cache=run.use_cache))
        except StepscopeError as err:
            raise ApiError(422, f"The baseline run could not be read: {err}") from err

    result: RunSummary = run.result(("diff_base", str(path), signature(path)), compute)
    return result


def diff_data(run: LoadedRun, host: str | None, params: Params) -> dict[str, Any]:
    """The run compared with the baseline run ``base`` (of all hosts: ``host`` is not used):
    step time change with its interval and verdict, breakdown, ops, kernels, memory, hosts."""
    from stepscope.web.api import ApiError  # the API imports the tools

    base = str(params.get("base", ""))
    if not base:
        raise ApiError(400, "Parameter base is required: choose a baseline run.")
    path = Path(base)
    if path == Path(str(run.profile.path)):
        raise ApiError(400, "Choose a baseline other than the run itself.")
    old, new = _base_summary(run, path), _summary(run)
    return {"run": new.run, "base": old.run, "host": None, **diff(old, new).to_dict(),
            "step_ms": {"base": list(old.step_ms[:MAX_STEPS_SHOWN]),
                        "new": list(new.step_ms[:MAX_STEPS_SHOWN])}}
