"""The trace viewer's page when a window comes before its flows (the server still sorting them
by time, ``flows_pending``), in a real headless Chromium against a real `stepscope serve`: the
events are drawn at once, the page asks again, and the arrows come with the answer that has
them; until then the page is not ready."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from browser import Server, Watched, open_trace, settle_trace
from conftest import FIXTURES

ALEXNET = (FIXTURES / "HolisticTraceAnalysis/tests/data/critical_path/alexnet/"
           "benchmark_result_2869224_1695835535_trace.json.gz")


@pytest.fixture(scope="module")
def logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("flows_pending")
    run = root / "plugins" / "profile" / "alexnet"
    run.mkdir(parents=True)
    (run / ALEXNET.name).symlink_to(ALEXNET)
    return root


def _state(w: Watched) -> dict[str, Any]:
    return w.page.evaluate("""() => ({
        ready: window.stepscopeTrace.ready(),
        inWindow: window.stepscopeTrace.flowsInWindow(),
        drawn: window.stepscopeTrace.flows().length,
        events: window.stepscopeTrace.names().length })""")


def test_a_window_without_its_flows_yet_is_drawn_and_asked_again(watched: Watched,
                                                                server: Server) -> None:
    open_trace(watched, server, "alexnet")
    page = watched.page
    final = _state(watched)
    assert final["ready"] and 0 < final["drawn"] == final["inWindow"]  # few: drawn at once
    held: list[bool] = [True]
    asked: list[str] = []

    def without_flows(route: Any) -> None:
        answer = route.fetch()
        body = answer.json()
        if held:
            asked.append(route.request.url)
            body = {**body, "flows": [], "flows_in_window": 0, "flows_pending": True}
        route.fulfill(response=answer, body=json.dumps(body))

    page.route("**/api/trace/window?*", without_flows)
    # A zoom to the middle third: asked for, answered without its flows, asked again.
    view = page.evaluate("() => window.stepscopeTrace.view()")
    third = (view["t1"] - view["t0"]) / 3
    page.evaluate("([a, b]) => window.stepscopeTrace.setView(a, b)",
                  [view["t0"] + third, view["t1"] - third])
    deadline = time.monotonic() + 120  # a busy machine answers slowly: asked again, in time
    while len(asked) < 3 and time.monotonic() < deadline:
        page.wait_for_timeout(50)
    assert len(asked) >= 3, asked
    early = _state(watched)
    assert not early["ready"] and early["events"] > 0 and early["drawn"] == 0
    held.clear()
    settle_trace(watched)
    late = _state(watched)
    assert late["ready"] and 0 < late["drawn"] == late["inWindow"]
    page.unroute("**/api/trace/window?*")
