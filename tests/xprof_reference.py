"""What XProf (the reference, run headless) says about a profile, for tests to compare with.

``xprof_tool`` is the one way the tests run an XProf converter: on copies of the files in a
directory of the test's own (XProf writes caches and HLO files beside what it reads), its
answer decoded from JSON. ``gviz_rows`` turns one of XProf's Google-charts tables into rows.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any


def xprof_tool(paths: Path | list[Path], tool: str, tmp: Path | None = None,
               params: dict[str, Any] | None = None, *, hlo: bool = False) -> Any:
    """XProf's answer for ``tool`` on copies (in ``tmp``; None: a temporary directory
    removed after) of ``paths``, decoded from JSON (None when XProf answers nothing);
    ``hlo``: first let XProf write each program's HLO beside the copies, as its memory and
    graph viewers need."""
    if tmp is None:
        with tempfile.TemporaryDirectory(prefix="stepscope-xprof-") as scratch:
            return xprof_tool(paths, tool, Path(scratch), params, hlo=hlo)
    from xprof.convert import raw_to_tool_data

    tmp.mkdir(parents=True, exist_ok=True)
    copies = []
    for path in [paths] if isinstance(paths, Path) else paths:
        copy = tmp / path.name
        if not copy.exists():
            shutil.copy(path, copy)
        copies.append(str(copy))
    if hlo:
        raw_to_tool_data.xspace_to_tool_names(copies)
    data, _ = raw_to_tool_data.xspace_to_tool_data(copies, tool, params or {})
    if not data:
        return None
    return json.loads(data.decode() if isinstance(data, bytes) else data)


def gviz_rows(table: dict[str, Any]) -> list[dict[str, Any]]:
    """One XProf data table (``cols`` with ids, ``rows`` of ``c`` cells) as rows by column id."""
    names = [c["id"] for c in table["cols"]]
    return [dict(zip(names, [c.get("v") if c else None for c in r["c"]], strict=True))
            for r in table["rows"]]


def xprof_pids(path: Path, tmp: Path) -> dict[str, int]:
    """Process name → pid in XProf's trace viewer JSON for one XSpace file."""
    events = xprof_tool(path, "trace_viewer", tmp)["traceEvents"]
    return {e["args"]["name"]: e["pid"] for e in events
            if e.get("ph") == "M" and e.get("name") == "process_name"}
