"""The trace viewer's page on a coarse first picture that draws events (a big file's skim,
``web.trace.publish_skim``), in a real headless Chromium against a real `stepscope serve`:
the events are drawn at once and counted in the label, the page is not ready and asks again,
and the exact answer replaces the picture."""

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
    root = tmp_path_factory.mktemp("skim_ui")
    run = root / "plugins" / "profile" / "alexnet"
    run.mkdir(parents=True)
    (run / ALEXNET.name).symlink_to(ALEXNET)
    return root


def _state(w: Watched) -> dict[str, Any]:
    return w.page.evaluate("""() => ({
        ready: window.stepscopeTrace.ready(),
        drawn: Number(document.querySelector('canvas[data-drawn]').dataset.drawn),
        coarse: document.querySelector('canvas[data-drawn]').dataset.coarse,
        label: document.getElementById('trace-drawn').textContent })""")


def test_a_coarse_picture_with_events_draws_them_until_the_exact_answer(
        watched: Watched, server: Server) -> None:
    open_trace(watched, server, "alexnet")
    page = watched.page
    final = _state(watched)
    assert final["ready"] and final["drawn"] > 0 and not final["coarse"]
    held: list[bool] = [True]
    asked: list[str] = []

    def as_skim(route: Any) -> None:
        answer = route.fetch()
        body = answer.json()
        if held:  # the skim's form: coarse, its long events drawn, the rest counted
            asked.append(route.request.url)
            body = {**body, "coarse": True, "flows": [], "flows_in_window": 0}
        route.fulfill(response=answer, body=json.dumps(body))

    page.route("**/api/trace/window?*", as_skim)
    view = page.evaluate("() => window.stepscopeTrace.view()")
    half = (view["t1"] - view["t0"]) / 2
    page.evaluate("([a, b]) => window.stepscopeTrace.setView(a, b)",
                  [view["t0"], view["t0"] + half])
    deadline = time.monotonic() + 120  # a busy machine answers slowly: asked again, in time
    while len(asked) < 3 and time.monotonic() < deadline:
        page.wait_for_timeout(50)
    assert len(asked) >= 3, asked  # a coarse picture is asked for again
    early = _state(watched)
    assert not early["ready"] and early["coarse"] == "1" and early["drawn"] > 0
    assert early["label"].startswith(f"overview: {early['drawn']:,} events, ")
    held.clear()
    settle_trace(watched)
    late = _state(watched)
    assert late["ready"] and not late["coarse"] and late["drawn"] > 0
    assert "overview" not in late["label"]
    page.unroute("**/api/trace/window?*")
