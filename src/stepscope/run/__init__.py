"""A run, opened once, and every tool's answer for it: ``stepscope.open(path) -> Run``.

``Run`` finds the run's files and reads what a tool needs through the on-disk cache (all
cache reads and writes of the analysis live here, in ``storage`` and ``kept``); ``tools``
declares every tool once; ``loader`` builds the run model and the XLA model, host by host on
an ``engines`` engine.

``Run`` and ``open_run`` are imported on first use: ``kept`` and ``tools`` (a cached
``stepscope report``) do not pay for NumPy and the run model.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from stepscope.run.result import ToolResult

if TYPE_CHECKING:
    from stepscope.run.run import Run, open_run


def __getattr__(name: str) -> Any:
    """``Run`` and ``open_run``, from ``stepscope.run.run`` on first use."""
    if name in ("Run", "open_run"):
        from stepscope.run import run

        return getattr(run, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["Run", "ToolResult", "open_run"]
