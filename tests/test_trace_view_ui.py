"""The trace viewer's presentation (issue 30), in a real headless Chromium against a real
`stepscope serve`: flow arrows hidden past a few hundred and toggled, back-to-back steps drawn
with their boundary, the track area as tall as the page, counters' values in units. Every
check waits for the viewer's final answer (from the index, not the coarse overview)."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

import stepscope

from browser import Server, Watched, open_trace, settle_trace, shot
from conftest import FIXTURES

V100 = FIXTURES / "xprof/demo/plugins/profile/GPU-multi-worker/34.83.195.179_6003.xplane.pb"
ALEXNET = (FIXTURES / "HolisticTraceAnalysis/tests/data/critical_path/alexnet/"
           "benchmark_result_2869224_1695835535_trace.json.gz")
AUTO_MAX = 300  # FLOWS_AUTO_MAX in frontend/src/pages/trace/state.ts
ROW_H = 18


def _back_to_back_run(logdir: Path, steps: int = 12) -> Path:
    """A loop whose steps are marked as a framework's step callback marks them (as
    `stepscope.torch`'s `prof.step()` and Keras' batch callbacks do): each step ends at the
    clock reading where the next one begins. Steps of `with stepscope.Trace(...)` leave the
    loop's own time between them, which a busy machine stretches past a pixel (43 µs once)."""
    from stepscope.capture.trace import record

    options = stepscope.ProfilerOptions(counter_interval_ms=0)
    with stepscope.Profile(logdir, options=options) as prof:
        begin = time.time_ns()
        for i in range(steps):
            with stepscope.Trace("load_batch"):
                time.sleep(0.002)
            with stepscope.Trace("matmul"):
                sum(j * j for j in range(3000))
            end = time.time_ns()
            record("train", begin, end, level=1, step_num=i, _r=1)
            begin = end
    assert prof.path is not None
    return prof.path if prof.path.is_dir() else prof.path.parent


def _counters_run(logdir: Path) -> Path:
    """A short loop with stepscope's system counters sampled (process CPU %, RSS bytes)."""
    options = stepscope.ProfilerOptions(counter_interval_ms=10)
    with stepscope.Profile(logdir, options=options) as prof:
        for i in range(6):
            with stepscope.Trace("train", step_num=i, _r=1):
                blob = bytearray(4 << 20)
                time.sleep(0.03)
                del blob
    assert prof.path is not None
    return prof.path if prof.path.is_dir() else prof.path.parent


@pytest.fixture(scope="module")
def logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("trace_view")
    runs = root / "plugins" / "profile"
    _back_to_back_run(root).rename(runs / "a_steps")
    _counters_run(root).rename(runs / "b_counters")
    for name, path in (("c_alexnet", ALEXNET), ("d_gpu_v100", V100)):
        (runs / name).mkdir()
        (runs / name / path.name).symlink_to(path)
    return root


def _js(w: Watched, expr: str, arg: Any = None) -> Any:
    return w.page.evaluate(expr, arg)


def _flows(w: Watched) -> dict[str, Any]:
    return _js(w, """() => ({
        inWindow: window.stepscopeTrace.flowsInWindow(),
        drawn: window.stepscopeTrace.flows().length,
        checked: document.querySelector('#trace-flow-toggle').checked,
        mode: document.querySelector('#trace-flow-toggle').dataset.mode,
        note: document.querySelector('#trace-flow-note').textContent })""")


def test_flow_arrows_hidden_past_a_few_hundred_and_toggled(watched: Watched,
                                                           server: Server) -> None:
    open_trace(watched, server, "d_gpu_v100")
    page = watched.page
    full = _flows(watched)
    # A GPU trace: a flow from every launch to its kernel.
    assert full["inWindow"] > AUTO_MAX
    assert full == {**full, "drawn": 0, "checked": False, "mode": "auto"}
    assert f"hidden past {AUTO_MAX}" in full["note"]
    shot(watched, "trace-flows-hidden", settle_ms=0)
    # Ticked: the window's flows drawn (past the server's 2,000 it sends only their count).
    page.check("#trace-flow-toggle")
    state = _flows(watched)
    assert state["checked"] and state["mode"] == "on"
    if state["inWindow"] > 2000:
        assert state["drawn"] == 0 and "too many to draw; zoom in" in state["note"]
    else:
        assert state["drawn"] == state["inWindow"]
    # Around one kernel: its launch flow, and the few others there.
    status, body = server.get("trace/search", run="d_gpu_v100", q="EigenMetaKernel")
    assert status == 200
    at = json.loads(body)["matches"]["start"][0]
    _js(watched, "([a, b]) => window.stepscopeTrace.setView(a, b)", [at - 50_000, at + 50_000])
    settle_trace(watched)
    state = _flows(watched)
    assert state["checked"] and 0 < state["drawn"] == state["inWindow"]
    assert state["note"] == f"({state['inWindow']:,} in view)"
    shot(watched, "trace-flows-shown", settle_ms=0)
    # Unticked: none drawn, the count still said.
    page.uncheck("#trace-flow-toggle")
    state = _flows(watched)
    assert state["drawn"] == 0 and state["mode"] == "off" and "hidden" in state["note"]


def test_few_flows_are_drawn_by_default(watched: Watched, server: Server) -> None:
    open_trace(watched, server, "c_alexnet")
    state = _flows(watched)
    assert 0 < state["inWindow"] <= AUTO_MAX
    assert state["checked"] and state["mode"] == "auto"
    assert state["drawn"] == state["inWindow"]


def _pixel(w: Watched, x: float, y: float) -> list[int]:
    return _js(w, """([x, y]) => {
        const c = document.querySelector('#trace-canvas');
        const r = window.devicePixelRatio || 1;
        return Array.from(c.getContext('2d').getImageData(Math.floor(x * r),
                                                          Math.floor(y * r), 1, 1).data); }""",
               [x, y])


def test_back_to_back_steps_show_their_boundary(watched: Watched, server: Server) -> None:
    open_trace(watched, server, "a_steps")
    status, body = server.get("trace/search", run="a_steps", q="train")
    assert status == 200
    found = json.loads(body)["matches"]
    order = sorted(range(len(found["id"])), key=lambda i: found["start"][i])
    assert len(order) == 12
    view = _js(watched, "window.stepscopeTrace.view()")
    width = _js(watched, "document.querySelector('#trace-canvas').clientWidth")
    ns_per_px = (view["t1"] - view["t0"]) / width
    checked = 0
    for a, b in zip(order, order[1:], strict=False):
        gap = found["start"][b] - (found["start"][a] + found["dur"][a])
        assert gap == 0 < ns_per_px  # back to back: no gap at all between them
        box = _js(watched, "(id) => window.stepscopeTrace.box(id)", found["id"][b])
        assert box is not None and box["x1"] - box["x0"] > 8
        y = box["y"] + 2  # above the label's text
        colour = _pixel(watched, box["x0"] + 3, y)
        before = _pixel(watched, box["x0"] - 2, y)
        assert colour == before and colour[:3] != [255, 255, 255]  # one colour: one name
        assert _pixel(watched, box["x0"] + 0.5, y)[:3] == [255, 255, 255], box  # the boundary
        checked += 1
    assert checked == 11
    shot(watched, "trace-step-boundaries", settle_ms=0)


def test_track_area_takes_the_page_height(watched: Watched, server: Server) -> None:
    page = watched.page
    open_trace(watched, server, "d_gpu_v100")

    def area() -> dict[str, float]:
        return _js(watched, """() => {
            const e = document.querySelector('.trace-scroll');
            const s = e.getBoundingClientRect();
            const c = document.querySelector('#trace-canvas');
            return { top: s.top + window.scrollY, height: e.clientHeight,
                     canvas: c.clientHeight, inner: window.innerHeight }; }""")

    tall = area()
    assert tall["inner"] == 1000
    # The page below the tool bar, less the strip where the details panel starts.
    assert tall["height"] == pytest.approx(tall["inner"] - tall["top"] - 72, abs=1)
    assert tall["height"] > 700 and tall["canvas"] >= tall["height"] - 4
    page.set_viewport_size({"width": 1400, "height": 1300})
    page.wait_for_function("() => document.querySelector('.trace-scroll')"
                           ".getBoundingClientRect().height > 1000")
    settle_trace(watched)
    taller = area()
    assert taller["height"] == pytest.approx(1300 - taller["top"] - 72, abs=1)
    assert taller["canvas"] >= taller["height"] - 4  # the canvas follows, and is drawn
    assert int(page.get_attribute("#trace-canvas", "data-drawn") or 0) > 0
    page.set_viewport_size({"width": 1400, "height": 500})
    page.wait_for_function("() => document.querySelector('.trace-scroll')"
                           ".getBoundingClientRect().height < 400")
    assert area()["height"] == pytest.approx(320, abs=1)  # never under the minimum


def test_counter_values_in_units(watched: Watched, server: Server) -> None:
    open_trace(watched, server, "b_counters")
    counters = {c["track"]: c["text"] for c in _js(watched, "window.stepscopeTrace.counters()")}
    rss = counters["Process RSS (bytes)"]
    assert re.fullmatch(r"max \d+(\.\d+)? (MiB|GiB)", rss), rss
    for text in counters.values():
        assert "e+" not in text and "e-" not in text, counters
