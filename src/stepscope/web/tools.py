"""The web UI's tools: the declarations of ``stepscope.run.tools``, answered for a loaded run.

A new page is one more declaration there and one more page module in ``frontend/src/pages``;
the navigation and the HTTP API pick it up. The trace viewer's tool data is the one special
case: while a large host's index builds, ``web.trace`` answers it from the coarse overview.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from stepscope.run.tools import TOOLS, ToolSpec, spec
from stepscope.web.loaded_run import LoadedRun

__all__ = ["TOOLS", "ToolSpec", "listing", "parse", "spec", "tool_csv", "tool_data"]


def parse(chosen: ToolSpec, query: Mapping[str, str]) -> dict[str, Any]:
    """The tool's declared parameters from a query string (other keys are the route's)."""
    names = {p.name for p in chosen.params}
    return chosen.parse({k: v for k, v in query.items() if k in names})


def tool_data(run: LoadedRun, chosen: ToolSpec, host: str | None,
              params: Mapping[str, Any]) -> Mapping[str, Any]:
    """The tool's JSON for the run (or host): exactly ``Run.tool(...).to_dict()``."""
    if chosen.name == "trace_viewer":
        from stepscope.web.trace import trace_viewer_data

        return trace_viewer_data(run, host)
    return run.tool(chosen.name, host, **params).data


def tool_csv(run: LoadedRun, chosen: ToolSpec, host: str | None,
             params: Mapping[str, Any]) -> str:
    """The tool's CSV export (``stepscope <command> --csv`` gives the same text)."""
    return run.tool(chosen.name, host, **params).to_csv()


def listing(chosen: ToolSpec) -> dict[str, Any]:
    """How the navigation lists a tool: name, title, CSV or not, its parameters."""
    return {"name": chosen.name, "title": chosen.title, "csv": chosen.csv,
            "flags": [p.name for p in chosen.params if p.kind == "flag"],
            "texts": [p.name for p in chosen.params if p.kind == "text"],
            "runs": [p.name for p in chosen.params if p.kind == "run"],
            "params": [p.to_dict() for p in chosen.params]}
