"""Legacy timelines in the web UI: RunMetadata and TensorFlow's ctf.json served by a real
`stepscope serve` and drawn by the trace viewer in headless Chromium (ops on their device
lanes, producer → consumer flows). Screenshots go to test-artifacts/ui/."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

from browser import Server, Watched, shot

HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Runs of one real FULL_TRACE session on two CPUs: its RunMetadata, and TF's ctf.json."""
    recorded = tmp_path_factory.mktemp("recorded")
    subprocess.run([sys.executable, str(HERE / "tf_step_stats_recorder.py"), str(recorded)],
                   check=True, capture_output=True, timeout=300)
    root = tmp_path_factory.mktemp("legacy_logdir")
    runs = root / "plugins" / "profile"
    (runs / "legacy_pb").mkdir(parents=True)
    (runs / "legacy_pb" / "run_metadata.pb").write_bytes((recorded / "two_cpus.pb").read_bytes())
    (runs / "legacy_ctf").mkdir()
    (runs / "legacy_ctf" / "timeline.json").write_bytes(
        (recorded / "two_cpus.ctf.json").read_bytes())
    return root


def _open(w: Watched, server: Server, run: str) -> None:
    server.data(run=run, tool="trace_viewer")
    w.page.goto(server.base + "#" + urlencode({"run": run, "tool": "trace_viewer"}))
    w.page.wait_for_selector("#trace-page")
    w.page.wait_for_timeout(150)
    w.page.wait_for_function("() => window.stepscopeTrace && window.stepscopeTrace.ready()")


def _js(w: Watched, expr: str) -> Any:
    return w.page.evaluate(expr)


@pytest.mark.parametrize("run", ["legacy_pb", "legacy_ctf"])
def test_trace_viewer_draws_ops_lanes_and_flows(watched: Watched, server: Server,
                                                run: str) -> None:
    overview = server.data(run=run, tool="overview_page")
    assert overview["steps"]["count"] == 1
    _open(watched, server, run)
    page = watched.page
    tracks = [t.text_content() for t in page.query_selector_all(".trace-track")]
    assert any("device:CPU:0 lane" in t for t in tracks)
    assert any("device:CPU:1 lane" in t for t in tracks)
    assert "session.run" in set(_js(watched, "window.stepscopeTrace.names()"))
    page.fill("#trace-search", "both:AddN")
    page.press("#trace-search", "Enter")
    page.wait_for_selector("#trace-flows li")
    page.wait_for_function("() => window.stepscopeTrace.ready()")
    shot(watched, f"timeline-{run}", settle_ms=0)
    assert "both:AddN" in page.text_content("#trace-detail-name")
    flows = [f for f in _js(watched, "window.stepscopeTrace.flows()")
             if f["kind"] == "producer_consumer"]
    ends = set()
    for flow in flows:
        names = []
        for end in ("from", "to"):
            status, body = server.get("trace/event", run=run, id=str(flow[end]))
            assert status == 200
            names.append(json.loads(body)["name"])
        ends.add(tuple(names))
    # AddN reads left (another lane or device) and is read by the mean.
    # (TensorFlow rewrites MatMul to oneDNN's _MklMatMul on some CPUs only.)
    assert ends & {("left:_MklMatMul", "both:AddN"), ("left:MatMul", "both:AddN")}
    assert ("both:AddN", "total:Mean") in ends
