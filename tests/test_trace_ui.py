"""The trace viewer in a real headless Chromium against a real `stepscope serve`, and its HTTP
routes: sections and tracks, zoom, select, search, flows, timing, keyboard, and strict
parameter checking. Screenshots go to test-artifacts/ui/."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from stepscope.web.app import create_app
from waiting import final_reply

from browser import Server, Watched, open_trace, settle_trace, shot
from conftest import FIXTURES
from workloads import EVIL_OP, make_stepscope_run

GPU_FIXTURE = FIXTURES / "xprof/demo/plugins/profile/GPU-multi-worker/34.83.195.179_6003.xplane.pb"
KINETO_FIXTURE = FIXTURES / "HolisticTraceAnalysis/tests/data/ns_resolution_trace/" \
    "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"


@pytest.fixture(scope="module")
def logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("trace_logdir")
    runs = root / "plugins" / "profile"
    make_stepscope_run(root).rename(runs / "a_stepscope")
    (runs / "c_pytorch").mkdir()
    (runs / "c_pytorch" / KINETO_FIXTURE.name).symlink_to(KINETO_FIXTURE)
    (runs / "d_gpu_v100").mkdir()
    (runs / "d_gpu_v100" / GPU_FIXTURE.name).symlink_to(GPU_FIXTURE)
    return root


def _trace(server: Server, view: str, **params: str) -> Any:
    status, body = server.get(f"trace/{view}", **params)
    assert status == 200, body
    return json.loads(body)


def _shot(w: Watched, name: str) -> None:
    shot(w, f"trace-{name}", settle_ms=0)


def _js(w: Watched, expr: str, arg: Any = None) -> Any:
    return w.page.evaluate(expr, arg)


def _canvas_box(w: Watched) -> dict[str, float]:
    box = w.page.query_selector("#trace-canvas").bounding_box()
    assert box is not None
    return box


def test_gpu_profile_sections_and_tracks(watched: Watched, server: Server) -> None:
    open_trace(watched, server, "d_gpu_v100")
    page = watched.page
    _shot(watched, "gpu")
    sections = [s.get_attribute("data-section") for s in page.query_selector_all(".trace-section")]
    assert sections[:3] == ["/device:GPU:1", "/device:GPU:4", "/device:GPU:6"]
    assert "Host Threads" in sections
    tracks = [t.text_content() for t in page.query_selector_all(".trace-track")]
    for name in ("Steps", "TensorFlow Ops", "Stream #134(Compute)", "Stream #135(MemcpyH2D)",
                 "python3"):
        assert name in tracks
    assert int(page.get_attribute("#trace-canvas", "data-drawn")) > 0
    # Sections collapse and expand.
    header = page.query_selector(".trace-section[data-section='/device:GPU:4']")
    header.click()
    header = page.query_selector(".trace-section[data-section='/device:GPU:4']")
    assert header.get_attribute("aria-expanded") == "false"
    assert len(page.query_selector_all(".trace-track")) == len(tracks) - 7
    header.click()
    assert len(page.query_selector_all(".trace-track")) == len(tracks)


def test_flow_arrow_joins_a_launch_to_its_kernel(watched: Watched, server: Server) -> None:
    open_trace(watched, server, "d_gpu_v100")
    page = watched.page
    page.fill("#trace-search", "EigenMetaKernel")
    page.press("#trace-search", "Enter")
    page.wait_for_selector("#trace-flows li")
    settle_trace(watched)
    _shot(watched, "gpu-flow")
    name = page.text_content("#trace-detail-name")
    assert "EigenMetaKernel" in name
    flows = _js(watched, "window.stepscopeTrace.flows()")
    kernel_flows = [f for f in flows if f["kind"] == "launch"]
    assert kernel_flows
    flow = kernel_flows[-1]  # the selected event's flows are drawn last
    src = _trace(server, "event", run="d_gpu_v100", id=str(flow["from"]))
    dst = _trace(server, "event", run="d_gpu_v100", id=str(flow["to"]))
    assert src["section"] == "Host Threads"
    assert dst["section"].startswith("/device:GPU:")
    assert src["stats"]["correlation_id"] == dst["stats"]["correlation_id"]
    assert "launch flow" in page.text_content("#trace-flows")


def test_zoom_into_a_step_shows_its_ops(watched: Watched, server: Server) -> None:
    open_trace(watched, server, "a_stepscope")
    found = _trace(server, "search", run="a_stepscope", q="train")["matches"]
    start, dur = found["start"][3], found["dur"][3]
    view = _js(watched, "window.stepscopeTrace.view()")
    box = _canvas_box(watched)
    scale = box["width"] / (view["t1"] - view["t0"])
    x0 = box["x"] + (start - view["t0"]) * scale
    x1 = box["x"] + (start + dur - view["t0"]) * scale
    page = watched.page
    page.click("#trace-tool-zoom")
    page.mouse.move(x0, box["y"] + 5)
    page.mouse.down()
    page.mouse.move((x0 + x1) / 2, box["y"] + 8, steps=3)
    page.mouse.move(x1, box["y"] + 10, steps=3)
    page.mouse.up()
    settle_trace(watched)
    _shot(watched, "zoomed-step")
    after = _js(watched, "window.stepscopeTrace.view()")
    # The step's own length, not a share of the view: a busy machine may stretch one step of
    # this recorded workload to a quarter of the whole run.
    assert after["t1"] - after["t0"] == pytest.approx(dur, abs=dur * 0.05)
    assert after["t1"] - after["t0"] < (view["t1"] - view["t0"]) * 0.9
    assert after["t0"] == pytest.approx(start, abs=dur * 0.05)
    names = set(_js(watched, "window.stepscopeTrace.names()"))
    assert {"train", "load_batch", "matmul", EVIL_OP} <= names


def test_select_search_and_selection_table(watched: Watched, server: Server) -> None:
    open_trace(watched, server, "a_stepscope")
    page = watched.page
    found = _trace(server, "search", run="a_stepscope", q="load_batch")["matches"]
    spot = _js(watched, "id => window.stepscopeTrace.locate(id)", found["id"][2])
    assert spot is not None
    page.mouse.click(spot["x"], spot["y"])
    page.wait_for_selector("#trace-detail-name")
    assert page.text_content("#trace-detail-name") == "load_batch"
    assert "Duration" in page.text_content("#trace-details")
    # Search with next and previous.
    page.fill("#trace-search", "train")
    page.press("#trace-search", "Enter")
    page.wait_for_function("() => document.querySelector('#trace-matches').textContent === "
                           "'1 of 8'")
    page.click("#trace-next")
    page.wait_for_function("() => document.querySelector('#trace-matches').textContent === "
                           "'2 of 8'")
    # The pane still shows match 1 (also "train") until match 2's details arrive.
    page.wait_for_function(
        "() => (document.querySelector('#trace-details')?.textContent || '')"
        ".replace(/\\s/g, '').includes('step_num1')")
    assert page.text_content("#trace-detail-name") == "train"
    assert "step_num1" in page.text_content("#trace-details").replace(" ", "")
    page.click("#trace-prev")
    page.wait_for_function("() => document.querySelector('#trace-matches').textContent === "
                           "'1 of 8'")
    # An evil name stays text.
    page.fill("#trace-search", EVIL_OP)
    page.press("#trace-search", "Enter")
    page.wait_for_function(
        "t => document.querySelector('#trace-detail-name')?.textContent === t", arg=EVIL_OP)
    # Drag to select many: a table summed by name.
    page.click("#trace-reset")
    settle_trace(watched)
    page.click("#trace-tool-select")
    box = _canvas_box(watched)
    page.mouse.move(box["x"] + 2, box["y"] + 2)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + 60, steps=3)
    page.mouse.move(box["x"] + box["width"] - 2, box["y"] + 120, steps=3)
    page.mouse.up()
    page.wait_for_selector("#trace-selection tbody tr")
    _shot(watched, "selection")
    rows = {r.query_selector("td").text_content(): r.query_selector("td:nth-child(2)")
            .text_content() for r in page.query_selector_all("#trace-selection tbody tr")}
    assert rows["matmul"] == "8" and rows[EVIL_OP] == "8"


def test_timing_tool_keyboard_and_wheel(watched: Watched, server: Server) -> None:
    open_trace(watched, server, "c_pytorch")
    page = watched.page
    sections = [s.get_attribute("data-section") for s in page.query_selector_all(".trace-section")]
    assert sections[0].startswith("/device:GPU:") and "Host Threads" in sections
    box = _canvas_box(watched)
    page.keyboard.press("4")
    view = _js(watched, "window.stepscopeTrace.view()")
    page.mouse.move(box["x"] + 200, box["y"] + 30)
    page.mouse.down()
    page.mouse.move(box["x"] + 400, box["y"] + 30, steps=2)
    page.mouse.move(box["x"] + 600, box["y"] + 30, steps=2)
    page.mouse.up()
    _shot(watched, "timing")
    expected_ns = 400 / box["width"] * (view["t1"] - view["t0"])
    value, unit = page.text_content("#trace-timing").removeprefix("Interval: ").split()
    factor = {"s": 1e9, "ms": 1e6, "µs": 1e3, "ns": 1}[unit]
    assert float(value) * factor == pytest.approx(expected_ns, rel=0.01)
    # W zooms in, D pans right, S zooms out, ctrl+wheel zooms.
    page.keyboard.press("w")
    zoomed = _js(watched, "window.stepscopeTrace.view()")
    assert zoomed["t1"] - zoomed["t0"] == pytest.approx((view["t1"] - view["t0"]) * 0.8)
    page.keyboard.press("d")
    panned = _js(watched, "window.stepscopeTrace.view()")
    assert panned["t0"] > zoomed["t0"]
    page.keyboard.press("s")
    out = _js(watched, "window.stepscopeTrace.view()")
    assert out["t1"] - out["t0"] == pytest.approx((panned["t1"] - panned["t0"]) * 1.25)
    page.mouse.move(box["x"] + 300, box["y"] + 50)
    page.keyboard.down("Control")
    page.mouse.wheel(0, -400)
    page.keyboard.up("Control")
    # The zoom lands when the page handles the wheel: wait for it, however busy the machine.
    page.wait_for_function("w => { const v = window.stepscopeTrace.view(); "
                           "return v.t1 - v.t0 < w; }", arg=out["t1"] - out["t0"])
    wheeled = _js(watched, "window.stepscopeTrace.view()")
    assert wheeled["t1"] - wheeled["t0"] < out["t1"] - out["t0"]
    settle_trace(watched)


# -- HTTP routes ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def client(logdir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    os.environ["STEPSCOPE_CACHE_DIR"] = str(tmp_path_factory.mktemp("api_cache"))
    try:
        with TestClient(create_app(logdir), base_url="http://127.0.0.1") as c:
            # The index built (not the coarse overview's first answer): on a busy machine
            # the first 200 comes long before it.
            final_reply(c, "/api/data", {"run": "d_gpu_v100", "tool": "trace_viewer"})
            yield c
    finally:
        os.environ.pop("STEPSCOPE_CACHE_DIR", None)


def test_trace_routes_answer_and_check_parameters(client: TestClient) -> None:
    meta = final_reply(client, "/api/data", {"run": "d_gpu_v100", "tool": "trace_viewer"}
                       ).json()
    assert meta["events"] == 23128 and meta["flows"] > 1000
    base = {"run": "d_gpu_v100"}
    ok = client.get("/api/trace/window", params={**base, "start_ns": "0",
                                                 "end_ns": str(meta["span_ns"]), "width": "800"})
    assert ok.status_code == 200
    body = ok.json()
    assert len(body["events"]["id"]) + sum(body["aggregates"]["count"]) == meta["events"]
    only = client.get("/api/trace/window", params={**base, "start_ns": "0", "width": "800",
                                                   "end_ns": str(meta["span_ns"]),
                                                   "tracks": "0"}).json()
    assert set(only["events"]["track"]) <= {0} and set(only["aggregates"]["track"]) <= {0}
    for bad in ({"start_ns": "0", "end_ns": "1e9", "width": "800"},
                {"start_ns": "0", "end_ns": "100", "width": "0"},
                {"start_ns": "0", "end_ns": "100", "width": "99999999"},
                {"start_ns": "x", "end_ns": "100", "width": "10"},
                {"start_ns": "100", "end_ns": "100", "width": "10"},
                {"end_ns": "100", "width": "10"},
                {"start_ns": "0", "end_ns": "100", "width": "10", "tracks": "1;2"}):
        reply = client.get("/api/trace/window", params={**base, **bad})
        assert reply.status_code == 400, bad
        assert reply.json()["error"].endswith(".")
    assert client.get("/api/trace/event", params={**base, "id": "99999999"}).status_code == 404
    assert client.get("/api/trace/event", params={**base, "id": "-1"}).status_code == 400
    assert client.get("/api/trace/nothing", params=base).status_code == 404
    assert client.get("/api/trace/window", params={"run": "../x", "start_ns": "0",
                                                   "end_ns": "1", "width": "1"}
                      ).status_code == 400
    assert client.get("/api/trace/search", params={**base, "q": ""}).status_code == 400
    found = client.get("/api/trace/search", params={**base, "q": "memcpyh2d"}).json()
    assert found["total"] > 0
    event = client.get("/api/trace/event", params={**base, "id": str(found["matches"]["id"][0])})
    assert event.json()["name"] == "MemcpyH2D"
    sel = client.get("/api/trace/selection", params={**base, "start_ns": "0",
                                                     "end_ns": str(meta["span_ns"]),
                                                     "tracks": "0,1,2"}).json()
    assert sel["events"] == sum(r["count"] for r in sel["rows"]) > 0
