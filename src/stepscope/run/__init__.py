"""A run, opened once, and every tool's answer for it: ``stepscope.open(path) -> Run``.

``Run`` finds the run's files and reads what a tool needs through the on-disk cache (all
cache reads and writes of the analysis live here, in ``storage``); ``tools`` declares every
tool once; ``loader`` builds the run model and the XLA model, host by host on an ``engines``
engine.
"""

from stepscope.run.result import ToolResult
from stepscope.run.run import Run, open_run

__all__ = ["Run", "ToolResult", "open_run"]
