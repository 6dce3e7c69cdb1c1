"""Analyses of a loaded profile: steps, framework op stats, the overview page.

``overview(profile)`` and ``op_stats(profile)`` take what ``stepscope.load`` returns.
"""

from __future__ import annotations

from stepscope.analysis.run_model.framework_op_stats import OpStats
from stepscope.analysis.run_model.framework_op_stats import op_stats as host_op_stats
from stepscope.analysis.run_model.overview_page import Overview, overview
from stepscope.analysis.run_model.steps import Steps, find_steps
from stepscope.model.run_tables import RunTables


def op_stats(profile: RunTables, *, include_idle: bool = False,
             host: str | None = None) -> OpStats:
    """Framework op stats of one host of ``profile`` (``host``) or summed over all hosts."""
    from stepscope.analysis.run_model.framework_op_stats import merge

    names = [host] if host is not None else list(profile.hosts)
    return merge([host_op_stats(profile.hosts[name], include_idle=include_idle)
                  for name in names], include_idle=include_idle)


__all__ = ["OpStats", "Overview", "Steps", "find_steps", "op_stats", "overview"]
