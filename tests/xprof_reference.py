"""What XProf (the reference, run headless) says about a profile, for tests to compare with."""

from __future__ import annotations

import json
import shutil
from pathlib import Path


def xprof_pids(path: Path, tmp: Path) -> dict[str, int]:
    """Process name → pid in XProf's trace viewer JSON for one XSpace file (run on a copy in
    ``tmp``: XProf may write beside the file it reads)."""
    from xprof.convert import raw_to_tool_data

    copy = tmp / path.name
    shutil.copy(path, copy)
    data, _ = raw_to_tool_data.xspace_to_tool_data([str(copy)], "trace_viewer", {})
    events = json.loads(data.decode() if isinstance(data, bytes) else data)["traceEvents"]
    return {e["args"]["name"]: e["pid"] for e in events
            if e.get("ph") == "M" and e.get("name") == "process_name"}
