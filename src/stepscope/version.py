"""The version of stepscope (the package root re-exports it as ``stepscope.__version__``)."""

from __future__ import annotations

__version__ = "0.1.0"
