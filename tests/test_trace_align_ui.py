"""The trace viewer across the hosts of one run (real Chromium): switching hosts keeps the
same moment in view on the run's lined-up clock (the pod viewer's clock alignment), and the
page says how the host's clock was shifted and why."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

from browser import Server, Watched, settle_trace
from conftest import FIXTURES

DLRM = FIXTURES / "param/et_replay/tests/inputs/dlrm_kineto"


@pytest.fixture(scope="module")
def logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("align_logdir")
    run = root / "plugins" / "profile" / "dlrm"
    run.mkdir(parents=True)
    for f in sorted(DLRM.iterdir())[:3]:
        (run / f.name).symlink_to(f)
    return root


def _view(w: Watched) -> dict[str, float]:
    view: dict[str, float] = w.page.evaluate("() => window.stepscopeTrace.view()")
    return view


def test_switching_hosts_keeps_the_aligned_moment(watched: Watched, server: Server) -> None:
    hosts = server.data(run="dlrm", tool="trace_viewer")["hosts"]
    assert len(hosts) == 3
    meta: dict[str, Any] = {h: server.data(run="dlrm", tool="trace_viewer", host=h)
                            for h in hosts}
    clocks = {h: m["clock"] for h, m in meta.items()}
    assert clocks[hosts[0]]["method"] == "reference"
    assert {c["method"] for h, c in clocks.items() if h != hosts[0]} <= {
        "collective_end", "capture_start", "recorded"}
    page = watched.page
    page.goto(server.base + "#" + urlencode({"run": "dlrm", "tool": "trace_viewer",
                                             "host": hosts[0]}))
    page.wait_for_selector("#trace-page")
    settle_trace(watched)
    page.click("#trace-canvas")
    for key in ("w", "w", "w", "d"):  # zoom in, then pan: a moment inside the trace
        page.keyboard.press(key)
    settle_trace(watched)
    before = _view(watched)

    other = hosts[1]
    page.select_option("#host", other)
    page.wait_for_function(f"() => document.querySelector('#trace-clock') && "
                           f"document.querySelector('#trace-clock').textContent.includes("
                           f"'{clocks[other]['method']}')")
    settle_trace(watched)
    after = _view(watched)

    def at(host: str) -> int:
        return int(meta[host]["origin_ns"]) + int(clocks[host]["shift_ns"])

    # The same moment of the run: times on each host differ by their origins and shifts.
    assert after["t0"] == pytest.approx(before["t0"] + at(hosts[0]) - at(other), abs=2)
    assert after["t1"] - after["t0"] == pytest.approx(before["t1"] - before["t0"], abs=2)
    title = page.get_attribute("#trace-clock", "title") or ""
    assert title == clocks[other]["reason"]
