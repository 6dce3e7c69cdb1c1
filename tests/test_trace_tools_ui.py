"""The trace viewer's finer tools in a real headless Chromium against a real `stepscope
serve`, driven with real mouse events: section headers with XProf's process ids, the zoom
tool's up/down drag, the timing interval's draggable ends and clearing click, and event names
drawn inside bars (cut short with an ellipsis where they do not fit)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from browser import Server, Watched, open_trace, settle_trace, shot
from conftest import FIXTURES
from workloads import EVIL_OP, make_stepscope_run
from xprof_reference import xprof_pids

GPU_FIXTURE = FIXTURES / "xprof/demo/plugins/profile/GPU-multi-worker/34.83.195.179_6003.xplane.pb"
TRACE = "window.stepscopeTrace"


@pytest.fixture(scope="module")
def logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("trace_tools_logdir")
    runs = root / "plugins" / "profile"
    make_stepscope_run(root).rename(runs / "a_stepscope")
    (runs / "b_gpu").mkdir()
    (runs / "b_gpu" / GPU_FIXTURE.name).symlink_to(GPU_FIXTURE)
    return root


def _js(w: Watched, expr: str, arg: Any = None) -> Any:
    return w.page.evaluate(expr, arg)


def _view(w: Watched) -> dict[str, float]:
    return _js(w, f"{TRACE}.view()")  # type: ignore[no-any-return]


def _canvas_box(w: Watched) -> dict[str, float]:
    box = w.page.query_selector("#trace-canvas").bounding_box()
    assert box is not None
    return box


def _time_at(view: dict[str, float], box: dict[str, float], page_x: float) -> float:
    return view["t0"] + (page_x - box["x"]) / box["width"] * (view["t1"] - view["t0"])


def test_section_headers_name_the_process_with_xprofs_pid(watched: Watched, server: Server,
                                                          tmp_path: Path) -> None:
    open_trace(watched, server, "b_gpu")
    shot(watched, "trace-section-pids", settle_ms=0)
    headers = {h.get_attribute("data-section"): h.text_content()
               for h in watched.page.query_selector_all(".trace-section")}
    theirs = xprof_pids(GPU_FIXTURE, tmp_path)
    expected = {("Host Threads" if name == "/host:CPU" else name): pid
                for name, pid in theirs.items()}
    shown = {name: text for name, text in headers.items() if name in expected}
    assert len(shown) == len(headers) == 4  # GPUs 1, 4, 6 (those with events) and the host
    for name, text in shown.items():
        assert text == f"▾ {name} (pid {expected[name]})"
    assert headers["/device:GPU:1"] == "▾ /device:GPU:1 (pid 2)"
    assert headers["Host Threads"] == "▾ Host Threads (pid 701)"


def test_zoom_tool_drag_up_zooms_in_and_down_zooms_out_at_the_pointer(
        watched: Watched, server: Server) -> None:
    open_trace(watched, server, "a_stepscope")
    page = watched.page
    page.click("#trace-tool-zoom")
    box = _canvas_box(watched)
    x, y = round(box["x"] + box["width"] * 0.3), round(box["y"] + 200)  # whole pixels, as events
    before = _view(watched)
    at = _time_at(before, box, x)
    span = before["t1"] - before["t0"]
    page.mouse.move(x, y)
    page.mouse.down()
    page.mouse.move(x, y - 50, steps=4)
    page.mouse.move(x + 2, y - 100, steps=4)  # a little sideways: still a vertical drag
    zoomed_in = _view(watched)
    in_span = zoomed_in["t1"] - zoomed_in["t0"]
    assert in_span == pytest.approx(span / 2.718281828, rel=0.02)
    # The time under where the drag began stays there.
    assert _time_at(zoomed_in, box, x) == pytest.approx(at, abs=span * 1e-6)
    page.mouse.move(x, y + 100, steps=8)  # down past the start: zooms out
    zoomed_out = _view(watched)
    assert zoomed_out["t1"] - zoomed_out["t0"] == pytest.approx(span * 2.718281828, rel=0.02)
    assert _time_at(zoomed_out, box, x) == pytest.approx(at, abs=span * 1e-6)
    page.mouse.up()  # the drag was the zoom: no click zoom on top
    assert _view(watched) == zoomed_out
    settle_trace(watched)
    shot(watched, "trace-zoom-drag", settle_ms=0)
    # A drag across still zooms to the dragged span, and a click still halves the span.
    page.mouse.move(box["x"] + 100, y)
    page.mouse.down()
    page.mouse.move(box["x"] + 300, y + 10, steps=4)
    page.mouse.up()
    ranged = _view(watched)
    assert ranged["t0"] == pytest.approx(_time_at(zoomed_out, box, box["x"] + 100), rel=1e-6)
    assert ranged["t1"] == pytest.approx(_time_at(zoomed_out, box, box["x"] + 300), rel=1e-6)
    page.mouse.click(x, y)
    clicked = _view(watched)
    assert clicked["t1"] - clicked["t0"] == pytest.approx((ranged["t1"] - ranged["t0"]) / 2)
    settle_trace(watched)


def test_timing_interval_ends_drag_and_a_click_clears_it(watched: Watched,
                                                         server: Server) -> None:
    open_trace(watched, server, "a_stepscope")
    page = watched.page
    page.keyboard.press("4")
    box = _canvas_box(watched)
    view = _view(watched)
    y = box["y"] + 150

    def drag(x0: float, x1: float) -> None:
        page.mouse.move(box["x"] + x0, y)
        page.mouse.down()
        page.mouse.move(box["x"] + (x0 + x1) / 2, y, steps=2)
        page.mouse.move(box["x"] + x1, y, steps=2)
        page.mouse.up()

    def interval() -> list[float] | None:
        return _js(watched, f"{TRACE}.timing()")  # type: ignore[no-any-return]

    def at(x: float) -> float:
        return _time_at(view, box, box["x"] + x)

    drag(200, 400)
    assert interval() == pytest.approx([at(200), at(400)])
    # The axis, where the interval's length is written, lines up with the tracks below it.
    axis = page.query_selector("#trace-axis").bounding_box()
    assert axis is not None
    assert (axis["x"], axis["width"]) == pytest.approx((box["x"], box["width"]), abs=0.5)
    # Near an end the pointer says it can be dragged; elsewhere it does not.
    page.mouse.move(box["x"] + 403, y)
    assert _js(watched, "document.querySelector('#trace-canvas').style.cursor") == "ew-resize"
    page.mouse.move(box["x"] + 300, y)
    assert _js(watched, "document.querySelector('#trace-canvas').style.cursor") == ""
    drag(403, 500)  # grabs the end (3 px off it): the start stays
    assert interval() == pytest.approx([at(200), at(500)])
    drag(198, 100)  # the start
    assert interval() == pytest.approx([at(100), at(500)])
    shot(watched, "trace-timing-ends", settle_ms=0)
    drag(100, 650)  # the start dragged past the end: the end becomes the start
    assert interval() == pytest.approx([at(500), at(650)])
    label = page.text_content("#trace-timing")
    assert label.startswith("Interval: ")
    page.mouse.click(box["x"] + 300, y)  # a click without drag clears it
    assert interval() is None
    assert page.text_content("#trace-timing") == ""
    drag(300, 420)  # and a drag away from the ends makes a new one
    assert interval() == pytest.approx([at(300), at(420)])
    settle_trace(watched)


def test_event_names_are_drawn_inside_wide_bars(watched: Watched, server: Server) -> None:
    open_trace(watched, server, "a_stepscope")
    status, body = server.get("trace/search", run="a_stepscope", q="load_batch")
    assert status == 200
    match = json.loads(body)["matches"]
    start, dur = match["start"][3], match["dur"][3]
    box = _canvas_box(watched)
    labels: list[dict[str, Any]] = []
    # load_batch is 2 ms: at 5 px per 0.1 ms of it its name fits; at 50 px it must be cut.
    font = "11px system-ui, sans-serif"
    measure = ("([t, f]) => { const g = document.createElement('canvas').getContext('2d');"
               " g.font = f; return g.measureText(t).width; }")
    name_px = _js(watched, measure, ["load_batch", font])
    for bar_px in (name_px * 3, 52.0):
        span = dur * box["width"] / bar_px
        t0 = start - span / 3
        _js(watched, f"([a, b]) => {TRACE}.setView(a, b)", [t0, t0 + span])
        settle_trace(watched)
        labels = _js(watched, f"{TRACE}.labels()")
        assert labels
        mine = [lab for lab in labels if lab["id"] == match["id"][3]]
        assert len(mine) == 1, labels
        text = mine[0]["text"]
        if bar_px > 100:
            assert text == "load_batch"
            shot(watched, "trace-labels", settle_ms=0)
        else:
            assert text.endswith("…") and len(text) > 1
            assert "load_batch".startswith(text[:-1]) and text != "load_batch"
        for lab in labels:
            width = _js(watched, measure, [lab["text"], font])
            assert width <= lab["room"] + 0.01, lab
            full = lab["text"] in ("train", "load_batch", "matmul", EVIL_OP)
            assert full or lab["text"].endswith("…"), lab
        # The text is on the canvas: dark pixels inside the bar where its label is drawn.
        dark = _js(watched, """([x, y, w]) => {
            const c = document.querySelector('#trace-canvas');
            const r = window.devicePixelRatio || 1;
            const d = c.getContext('2d').getImageData(Math.round(x * r), Math.round(y * r),
                                                      Math.round(w * r), Math.round(18 * r)).data;
            let n = 0;
            for (let i = 0; i < d.length; i += 4) if (d[i] + d[i + 1] + d[i + 2] < 200) n++;
            return n; }""", [mine[0]["x"], mine[0]["y"], mine[0]["room"]])
        assert dark > 10
