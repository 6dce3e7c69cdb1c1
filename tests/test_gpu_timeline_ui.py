"""The GPU timeline page in a real headless Chromium against a real `stepscope serve`.

Runs: the eight ranks of a recorded PyTorch DLRM job (Kineto traces from ../shared/fixtures)
and a CPU-only PyTorch trace (no device activity: the tool is not listed). Every test fails on
a request leaving the served origin, a script error or a dialog. Screenshots go to
test-artifacts/ui/.
"""

from __future__ import annotations

import shutil
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

from browser import Server, Watched, shot
from conftest import FIXTURES

DLRM = FIXTURES / "param/et_replay/tests/inputs/dlrm_kineto"
CPU_ONLY = FIXTURES / ("HolisticTraceAnalysis/tests/data/cpu_only/"
                       "rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz")
TOOL = "gpu_timeline"


@pytest.fixture(scope="module")
def logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("gpu_ui")
    runs = root / "plugins" / "profile"
    (runs / "a_dlrm").mkdir(parents=True)
    for trace in sorted(DLRM.glob("*.json.gz")):
        (runs / "a_dlrm" / trace.name).symlink_to(trace)
    (runs / "b_cpu").mkdir()
    shutil.copy(CPU_ONLY, runs / "b_cpu" / CPU_ONLY.name)
    return root


def _open(w: Watched, server: Server, run: str, tool: str = TOOL) -> Any:
    api = server.data(run=run, tool=tool)
    w.page.goto(server.base + "#" + urlencode({"run": run, "tool": tool}))
    return api


def _rows(w: Watched, table: str, key: str) -> list[str]:
    return w.page.eval_on_selector_all(
        f"#{table} tbody td[data-key={key}]", "cells => cells.map(c => c.textContent)")


def test_devices_steps_and_critical_path(watched: Watched, server: Server) -> None:
    api = _open(watched, server, "a_dlrm")
    page = watched.page
    page.wait_for_selector("#gpu-page")
    devices = api["devices"]
    assert len(devices) == 8

    # One row per device, its shares as the API gives them.
    labels = _rows(watched, "gpu-devices", "device")
    assert sorted(labels) == sorted(f"{d['host']} {d['device']}" for d in devices)
    idle = {d["host"]: d["breakdown"]["idle_percent"] for d in devices}
    shown = _rows(watched, "gpu-devices", "idle")
    assert sorted(shown) == sorted(f"{v:.1f}%" for v in idle.values())

    # The advice the timeline calls for, each rule once.
    rules = page.eval_on_selector_all("#gpu-advice li", "ls => ls.map(l => l.dataset.rule)")
    assert rules == [a["rule"] for a in api["advice"]] and "exposed_communication" in rules

    # The first device's sections: the per-step chart, idle streams, launches, queues.
    page.wait_for_selector("#gpu-step-chart canvas")
    streams = _rows(watched, "gpu-idle", "stream")
    assert sorted(streams) == sorted(s["stream"] for s in devices[0]["idle"]["streams"])
    summary = page.text_content("#gpu-launch-summary") or ""
    assert f"{devices[0]['launches']['launches']} launches" in summary
    assert len(page.query_selector_all("#gpu-queues svg.spark")) == len(devices[0]["queues"])

    # Choosing another device shows its figures.
    page.select_option("#gpu-device-select", "3")
    page.wait_for_function(
        "name => document.querySelector('#gpu-device h2').textContent.includes(name)",
        arg=devices[3]["host"])
    assert sorted(_rows(watched, "gpu-idle", "stream")) == \
        sorted(s["stream"] for s in devices[3]["idle"]["streams"])

    # The critical path: who bounded the step, and each rank's path as its segments.
    step = api["critical_path"]["steps"][0]
    assert page.get_attribute("#gpu-bounded-by", "data-host") == step["bounded_by"]
    bars = page.eval_on_selector_all("#gpu-path-bounding span", "s => s.map(x => x.dataset.key)")
    assert bars == [h for h, v in step["by_host"].items() if v > 0]
    for path in step["paths"][:3]:
        page.select_option("#gpu-path-rank", path["host"])
        page.wait_for_function(
            "n => document.querySelectorAll('#gpu-path-table tbody tr').length === n",
            arg=len(path["segments"]))
        hosts = _rows(watched, "gpu-path-table", "host")
        assert set(hosts) == {s["host"] for s in path["segments"]}
    shot(watched, "gpu-timeline-dlrm")

    # The CSV export: a row per device.
    href = page.get_attribute("#export-csv", "href")
    assert href
    with urllib.request.urlopen(server.base + href.lstrip("/")) as reply:
        lines = reply.read().decode().strip().splitlines()
    assert lines[0].startswith("host,device,rank,span_us") and len(lines) == 9


def test_cpu_only_run_has_no_gpu_tool(watched: Watched, server: Server) -> None:
    _open(watched, server, "b_cpu", "overview_page")
    page = watched.page
    page.wait_for_selector("#tool option", state="attached")
    tools = page.eval_on_selector_all("#tool option", "os => os.map(o => o.value)")
    assert "overview_page" in tools and TOOL not in tools
    _open(watched, server, "a_dlrm", "overview_page")
    page.wait_for_function(
        "t => [...document.querySelectorAll('#tool option')].some(o => o.value === t)",
        arg=TOOL)


def test_trace_viewer_draws_the_critical_path(watched: Watched, server: Server) -> None:
    api = server.data(run="a_dlrm", tool=TOOL)
    host = api["critical_path"]["steps"][0]["bounded_by"]
    want = sum(1 for step in api["critical_path"]["steps"] for p in step["paths"]
               if p["host"] == host for s in p["segments"] if s["host"] == host)
    assert want > 0
    server.data(run="a_dlrm", host=host, tool="trace_viewer")
    page = watched.page
    page.goto(server.base + "#" + urlencode({"run": "a_dlrm", "host": host,
                                             "tool": "trace_viewer"}))
    page.wait_for_selector("#trace-page")
    page.wait_for_function("() => window.stepscopeTrace && window.stepscopeTrace.ready()")
    assert page.get_attribute("#trace-canvas", "data-overlay") in (None, "0")
    page.check("#trace-critical-path")
    page.wait_for_function("n => window.stepscopeTrace.overlay() === n", arg=want)
    page.wait_for_function(
        "() => Number(document.querySelector('#trace-canvas').dataset.overlay) > 0")
    shot(watched, "gpu-timeline-trace-overlay")
    page.uncheck("#trace-critical-path")
    page.wait_for_function("() => window.stepscopeTrace.overlay() === 0")
