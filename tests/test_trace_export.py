"""`stepscope export --chrome-trace`: every event, counters and launch flows, read back."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import numpy as np

from stepscope.cli import main
from stepscope.formats.run_reader import load

from conftest import FIXTURES

GPU_FIXTURE = FIXTURES / "xprof/demo/plugins/profile/GPU-multi-worker/34.83.195.179_6003.xplane.pb"


def test_export_writes_every_event_and_flow(tmp_path: Path) -> None:
    out = tmp_path / "trace.json.gz"
    assert main(["export", str(GPU_FIXTURE), "--chrome-trace", str(out), "--no-cache"]) == 0
    doc = json.loads(gzip.decompress(out.read_bytes()))
    events = doc["traceEvents"]
    phases = Counter(e["ph"] for e in events)
    table = next(iter(load(GPU_FIXTURE, use_cache=False).hosts.values()))
    assert phases["X"] == len(table)
    assert phases["s"] == phases["f"] > 1000
    complete = [e for e in events if e["ph"] == "X"]
    assert Counter(e["name"] for e in complete) == Counter(
        table.names[c] for c in table.name.tolist())
    # Times are exact to the nanosecond.
    starts = sorted(round(float(e["ts"]) * 1000) for e in complete)
    assert starts == sorted(np.asarray(table.start_ns).tolist())
    names = {e["args"]["name"] for e in events if e["ph"] == "M"}
    assert "Stream #134(Compute)" in names
    assert not list(tmp_path.glob(".*tmp"))  # nothing half-written left behind


def test_export_refuses_an_unknown_host(tmp_path: Path, capsys: object) -> None:
    out = tmp_path / "t.json"
    assert main(["export", str(GPU_FIXTURE), "--chrome-trace", str(out), "--host", "x"]) == 2
    assert not out.exists()


def test_export_reports_progress_up_to_every_event(tmp_path: Path) -> None:
    from stepscope.formats.chrome_trace_writer import write_chrome_trace

    table = next(iter(load(GPU_FIXTURE, use_cache=False).hosts.values()))
    steps: list[int] = []
    written = write_chrome_trace(tmp_path / "t.json", [("h", table, None)],
                                 progress=steps.append)
    assert written == len(table) and sum(steps) == len(table) and all(s >= 0 for s in steps)
