"""The trace viewer's page on windows that are not final yet, in a real headless Chromium
against a real `stepscope serve`: one that comes before its flows (the server still sorting
them by time, ``flows_pending``) has its events drawn at once, the page asks again, and the
arrows come with the answer that has them; a coarse picture that draws events (a big file's
skim, ``web.trace.publish_skim``) has them drawn and counted in the label, the page asks
again, and the exact answer replaces it; one whose events the server is still reading
(``events_coming``) says so and is asked again. Until then the page is not ready."""

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


def _coarse_state(w: Watched) -> dict[str, Any]:
    return w.page.evaluate("""() => ({
        ready: window.stepscopeTrace.ready(),
        drawn: Number(document.querySelector('canvas[data-drawn]').dataset.drawn),
        coarse: document.querySelector('canvas[data-drawn]').dataset.coarse,
        label: document.getElementById('trace-drawn').textContent })""")


def test_a_coarse_picture_with_events_draws_them_until_the_exact_answer(
        watched: Watched, server: Server) -> None:
    open_trace(watched, server, "alexnet")
    page = watched.page
    final = _coarse_state(watched)
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
    early = _coarse_state(watched)
    assert not early["ready"] and early["coarse"] == "1" and early["drawn"] > 0
    assert early["label"].startswith(f"overview: {early['drawn']:,} events, ")
    held.clear()
    settle_trace(watched)
    late = _coarse_state(watched)
    assert late["ready"] and not late["coarse"] and late["drawn"] > 0
    assert "overview" not in late["label"]
    page.unroute("**/api/trace/window?*")


def test_a_window_whose_events_are_coming_says_so_and_is_asked_again(
        watched: Watched, server: Server) -> None:
    """A coarse answer saying ``events_coming`` (the server reads that window's events from a
    big file's skim) is drawn with a label that says so, and asked again until the answer
    with the events, then the exact one, replace it."""
    open_trace(watched, server, "alexnet")
    page = watched.page
    stage: list[str] = ["coming"]
    asked: list[str] = []

    def reading(route: Any) -> None:
        answer = route.fetch()
        body = answer.json()
        if stage[0] != "exact":
            asked.append(stage[0])
            body = {**body, "coarse": True, "flows": [], "flows_in_window": 0,
                    **({"events_coming": True} if stage[0] == "coming" else {})}
            if stage[0] == "coming":  # the counts only, while the events are read
                body["events"] = {k: [] for k in body["events"]}
        route.fulfill(response=answer, body=json.dumps(body))

    page.route("**/api/trace/window?*", reading)
    view = page.evaluate("() => window.stepscopeTrace.view()")
    page.evaluate("([a, b]) => window.stepscopeTrace.setView(a, b)",
                  [view["t0"], view["t0"] + (view["t1"] - view["t0"]) / 3])
    deadline = time.monotonic() + 120  # a busy machine answers slowly
    while asked.count("coming") < 2 and time.monotonic() < deadline:
        page.wait_for_timeout(50)
    assert asked.count("coming") >= 2, asked  # asked again while its events are read
    coming = _coarse_state(watched)
    assert not coming["ready"] and coming["coarse"] == "1" and coming["drawn"] == 0
    assert coming["label"].endswith("(reading this window's events)")
    stage[0] = "read"  # the events read: drawn, still coarse (the index is being built)
    while "read" not in asked and time.monotonic() < deadline:
        page.wait_for_timeout(50)
    page.wait_for_function(
        "() => document.getElementById('trace-drawn').textContent.includes('index')")
    read = _coarse_state(watched)
    assert not read["ready"] and read["coarse"] == "1" and read["drawn"] > 0
    assert read["label"].endswith("(the index is being built)")
    stage[0] = "exact"
    settle_trace(watched)
    late = _coarse_state(watched)
    assert late["ready"] and not late["coarse"] and late["drawn"] > 0
    page.unroute("**/api/trace/window?*")
