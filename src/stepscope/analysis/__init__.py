"""Analyses of a loaded profile: steps, framework op stats, the overview page.

``overview(profile)`` and ``op_stats(profile)`` take what ``stepscope.load`` returns.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

# The run model's modules are imported on first use, not with this package: importing
# ``stepscope.analysis.trace`` (a server's first trace window) does not wait for them.
if TYPE_CHECKING:
    from stepscope.analysis.run_model.framework_op_stats import OpStats
    from stepscope.analysis.run_model.overview_page import Overview, overview
    from stepscope.analysis.run_model.steps import Steps, find_steps
    from stepscope.model.run_tables import RunTables

_LAZY = {"OpStats": "framework_op_stats", "Overview": "overview_page",
         "overview": "overview_page", "Steps": "steps", "find_steps": "steps"}


def __getattr__(name: str) -> Any:
    """``OpStats``, ``Overview``, ``overview``, ``Steps`` and ``find_steps``, from the run
    model's modules on first use."""
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"stepscope.analysis.run_model.{_LAZY[name]}"), name)


def op_stats(profile: RunTables, *, include_idle: bool = False,
             host: str | None = None) -> OpStats:
    """Framework op stats of one host of ``profile`` (``host``) or summed over all hosts."""
    from stepscope.analysis.run_model.framework_op_stats import merge
    from stepscope.analysis.run_model.framework_op_stats import op_stats as host_op_stats

    names = [host] if host is not None else list(profile.hosts)
    return merge([host_op_stats(profile.hosts[name], include_idle=include_idle)
                  for name in names], include_idle=include_idle)


__all__ = ["OpStats", "Overview", "Steps", "find_steps", "op_stats", "overview"]
