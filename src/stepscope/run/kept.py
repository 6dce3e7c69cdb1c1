"""Tools' answers kept in the on-disk cache (the tools declared with ``keep``): their entry
names, reading and keeping them, and a kept answer for a path without opening its run.

Reading needs neither NumPy nor the run model nor the readers (``model.cache_format``): a
second ``stepscope report`` of an unchanged profile prints its answer from here, in a
fraction of the time an opened run takes. An answer belongs to the run's files as they were
(paths, sizes, modification times), the stepscope version, the run model's and the trace
index's versions, the host and the parameters; anything else is a miss.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from stepscope.analysis.versions import INDEX_VERSION, RUN_MODEL_VERSION
from stepscope.errors import StepscopeError
from stepscope.model import cache_format
from stepscope.run.result import ToolResult

# Bump when a kept tool's answer changes for the same files (with the package version, it
# keys every kept answer: an upgrade never reads an older answer back).
RESULTS_VERSION = 6  # 3: MFU on the overview and pod viewer; XLA FLOPs per execution; 4: op
# profile programs apart by id; 5: TPU HBM bytes, TF32 peak, cuDNN attention FLOPs; 6: XLA's
# command buffers' HLO ops, XLA GPU precision from the HLO, PyTorch op stats as key_averages()


def entry_name(tool: str, host: str | None, params: dict[str, Any]) -> str:
    """The cache entry's name of a tool's answer (for a host, with checked parameters)."""
    from stepscope.version import __version__

    # the trace tools' answers come from the trace index: a new index format is a miss
    key = json.dumps([__version__, RUN_MODEL_VERSION, INDEX_VERSION, host,
                      sorted(params.items())], default=str)
    digest = hashlib.sha256(key.encode()).hexdigest()[:20]
    return f"tool.{RESULTS_VERSION}.{tool}.{digest}"


def kept_result(files: list[Path], tool: str, host: str | None,
                params: dict[str, Any]) -> ToolResult | None:
    """A tool's answer kept for the run of ``files`` (sorted by host name), when every file
    is unchanged since it was kept; None on a miss."""
    if not files:
        return None
    hit = cache_format.load_json(files, entry_name(tool, host, params))
    if hit is None or not isinstance(hit.get("data"), dict):
        return None
    return ToolResult(tool, hit["data"], hit.get("table_key"), None, hit.get("csv"))


def keep_result(files: list[Path], result: ToolResult, host: str | None,
                params: dict[str, Any]) -> None:
    """Keep a tool's answer for the run of ``files`` (an unwritable cache only warns)."""
    from stepscope.model import cache

    if files:
        cache.save_result(files, entry_name(result.tool, host, params),
                          {"data": result.data, "csv": result.csv_text,
                           "table_key": result.table_key})


class KeptRun:
    """The run a path names, as far as its kept answers go: its hosts and files, found as
    ``Run.open`` finds them, and no table or model read."""

    def __init__(self, hosts: dict[str, Path]) -> None:
        self.sources = hosts
        self.files = [hosts[n] for n in sorted(hosts)]  # as ``Run`` keys its kept answers

    @classmethod
    def find(cls, path: str | Path) -> KeptRun | None:
        """The run ``path`` names; None where it cannot be found (the run, opened, says why)."""
        from stepscope.model.logdir import host_names, resolve

        try:
            _, _, files, _ = resolve(path)
            return cls(dict(zip(host_names(files), files, strict=True)))
        except (StepscopeError, OSError, ValueError):
            return None

    @property
    def hosts(self) -> list[str]:
        """The hosts, in name order (a run with kept answers has no host that failed: an
        answer is kept only while every host could be read)."""
        return sorted(self.sources)

    def tool(self, name: str, host: str | None = None, **params: object) -> ToolResult | None:
        """Tool ``name``'s kept answer (as ``Run.tool`` would give it), or None: not kept,
        not a tool that keeps its answers, a host or a parameter the run would refuse."""
        from stepscope.run.tools import TOOLS

        chosen = TOOLS.get(name)
        if chosen is None or not chosen.keep or (host is not None and host not in self.sources):
            return None
        try:
            values = chosen.parse(params)
        except StepscopeError:
            return None
        return kept_result(self.files, chosen.name, host, values)
