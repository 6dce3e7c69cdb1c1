"""The Python profile page (flame graph, icicle, search, zoom, table, jump to the trace viewer)
in a real headless Chromium against a real `stepscope serve`, on a run of the known-costs
program of test_python_views (heavy 60 %, medium 20 %, recursion, a generator) recorded by the
Python tracer and sampler at once. Every test fails on a request leaving the served origin, a
script error or a dialog (the Watched fixture's rules). Screenshots go to test-artifacts/ui/.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

from test_python_views import KNOWN_COSTS, _run

from browser import Server, Watched, settle_trace, shot

TOOL = "python_profile"
RUN = "2024_01_01_00_00_00"


@pytest.fixture(scope="module")
def logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("python_ui")
    path = _run(tmp_path_factory.mktemp("program"), KNOWN_COSTS, 1, 500, 20_000, 24)
    run = root / "plugins" / "profile" / RUN
    run.mkdir(parents=True)
    shutil.copy(path, run / "host0.xplane.pb")
    # A run without Python data: the page is not offered there.
    import stepscope

    opts = stepscope.ProfilerOptions(counter_interval_ms=0)
    with stepscope.Profile(tmp_path_factory.mktemp("plain"), opts) as p, stepscope.Trace("work"):
        pass
    assert p.path is not None
    plain = root / "plugins" / "profile" / "2024_01_02_00_00_00"
    plain.mkdir()
    shutil.copy(p.path, plain / "host0.xplane.pb")
    return root


def _open(w: Watched, server: Server, **params: str) -> Any:
    api = server.data(run=RUN, tool=TOOL, **params)
    w.page.goto(server.base + "#" + urlencode({"run": RUN, "tool": TOOL}))
    w.page.wait_for_selector("#python-page #flame .flame-bar")
    return api


def _bars(w: Watched) -> list[dict[str, Any]]:
    return w.page.eval_on_selector_all("#flame .flame-bar", """bars => bars.map(b => ({
        node: Number(b.dataset.node), name: b.dataset.name, width: b.getBoundingClientRect().width,
        top: parseFloat(b.style.top), match: b.classList.contains('match'),
        focus: b.classList.contains('focus')}))""")


def _bar(w: Watched, function: str) -> dict[str, Any]:
    """The widest bar of a function (by its bare name)."""
    found = [b for b in _bars(w) if b["name"].endswith(" " + function)]
    assert found, function
    return max(found, key=lambda b: b["width"])


def _flame_width(w: Watched) -> float:
    return float(w.page.eval_on_selector("#flame", "f => f.clientWidth"))


def test_flame_graph_zoom_and_search(watched: Watched, server: Server) -> None:
    api = _open(watched, server)
    page = watched.page
    assert api["source"] == "tracer" and api["sources"] == ["tracer", "sampler"]
    assert page.get_attribute("#py-source", "aria-label") == "Source"
    # The step function holds nearly all the time; heavy 60 % of it.
    step, heavy = _bar(watched, "step"), _bar(watched, "heavy")
    assert heavy["width"] / step["width"] == pytest.approx(0.6, abs=0.06)
    assert heavy["top"] > step["top"]  # a callee below its caller (flame graph order)
    shot(watched, "python_flame")

    # Search marks every bar of the function and says its share of the time.
    page.fill("#py-search", "medium")
    page.wait_for_function("() => document.querySelector('#py-search-share').textContent")
    share = float(page.get_attribute("#py-search-share", "data-value") or 0)
    assert share == pytest.approx(0.2, abs=0.05)
    marked = [b for b in _bars(watched) if b["match"]]
    assert marked and all(b["name"].endswith(" medium") for b in marked)
    page.fill("#py-search", "")

    # Zoom: a click on recurse's outer bar makes it the full width, its nested levels below.
    outer = min((b for b in _bars(watched) if b["name"].endswith(" recurse")),
                key=lambda b: b["top"])
    page.click(f"#flame .flame-bar[data-node='{outer['node']}']")
    page.wait_for_selector("#flame .flame-bar.focus")
    zoomed = _bar(watched, "recurse")
    assert zoomed["focus"] and zoomed["width"] == pytest.approx(_flame_width(watched), abs=2)
    levels = sorted({b["top"] for b in _bars(watched) if b["name"].endswith(" recurse")})
    assert len(levels) == 5  # recurse(4) → recurse(0)
    assert not any(b["name"].endswith(" heavy") for b in _bars(watched))  # outside the zoom
    assert page.text_content("#py-detail-name") == "recurse"
    shot(watched, "python_flame_zoomed")
    page.click("#py-reset")
    page.wait_for_function("() => !document.querySelector('#flame .flame-bar.focus')")
    assert any(b["name"].endswith(" heavy") for b in _bars(watched))


def test_icicle_by_self_time(watched: Watched, server: Server) -> None:
    _open(watched, server)
    page = watched.page
    page.click("#py-view-icicle")
    page.wait_for_selector("#flame[data-mode='icicle']")
    roots = [b for b in _bars(watched) if b["top"] == 0]
    widest = max(roots, key=lambda b: b["width"])
    assert widest["name"].endswith(" heavy")  # the most self time
    total = sum(b["width"] for b in roots)
    assert widest["width"] / total == pytest.approx(0.6, abs=0.06)
    # Below a function: its callers (heavy is called by step).
    page.click(f"#flame .flame-bar[data-node='{widest['node']}']")
    page.wait_for_selector("#flame .flame-bar.focus")
    callers = [b for b in _bars(watched) if b["top"] > 0 and not b["focus"]]
    assert callers[0]["name"].endswith(" step")
    page.click("#py-view-flame")
    page.wait_for_selector("#flame[data-mode='flame']")


def test_function_to_trace_viewer(watched: Watched, server: Server) -> None:
    _open(watched, server)
    page = watched.page
    heavy = _bar(watched, "heavy")
    page.click(f"#flame .flame-bar[data-node='{heavy['node']}']")
    page.wait_for_selector("#py-to-trace")
    page.click("#py-to-trace")
    page.wait_for_selector("#trace-page")
    settle_trace(watched)
    # The trace viewer searched for the function and selected its first call.
    page.wait_for_function("() => /^1 of \\d+$/.test("
                           "document.querySelector('#trace-matches')?.textContent || '')")
    assert page.input_value("#trace-search") == heavy["name"]
    calls = int(page.text_content("#trace-matches").split(" of ")[1])
    assert calls >= 20  # one call a step
    page.wait_for_function("t => document.querySelector('#trace-detail-name')?.textContent === t",
                           arg=heavy["name"])
    assert "tool=trace_viewer" in page.url
    shot(watched, "python_to_trace")

    # And back: a range dragged in the trace viewer opens the Python profile of that range.
    page.click("#trace-reset")
    settle_trace(watched)
    page.click("#trace-tool-select")
    box = page.query_selector("#trace-canvas").bounding_box()
    assert box is not None
    page.mouse.move(box["x"] + box["width"] * 0.3, box["y"] + 2)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.45, box["y"] + 150, steps=3)
    page.mouse.move(box["x"] + box["width"] * 0.6, box["y"] + 300, steps=3)
    page.mouse.up()
    page.wait_for_selector("#trace-range-python")
    page.click("#trace-range-python")
    page.wait_for_selector("#python-page #py-clear-range")
    text = page.text_content("#py-summary") or ""
    assert "range selected in the trace viewer" in text
    whole = server.data(run=RUN, tool=TOOL)["total_ns"]
    part = float(page.get_attribute("#py-total", "data-value") or 0)
    assert 0.1 * whole < part < 0.5 * whole  # about 30 % of the recording
    page.click("#py-clear-range")
    page.wait_for_function("t => Number(document.querySelector('#py-total')?.dataset.value) === t",
                           arg=whole)


def test_step_source_table_and_csv(watched: Watched, server: Server) -> None:
    api = _open(watched, server)
    page = watched.page
    step = api["steps"][3]
    page.select_option("#py-step", str(step))
    page.wait_for_function("s => (document.querySelector('#py-summary')?.textContent || '')"
                           ".includes('step ' + s)", arg=step)
    one = server.data(run=RUN, tool=TOOL, step=str(step))
    assert float(page.get_attribute("#py-total", "data-value") or 0) == one["total_ns"]
    assert one["functions"]["count"][one["functions"]["function"].index("heavy")] == 1
    # The sampler's view of the same step: samples, and the table counts them.
    page.select_option("#py-source", "sampler")
    page.wait_for_function("() => [...document.querySelectorAll('#py-table th')]"
                           ".some(th => th.textContent === 'Samples')")
    # The table: filtered, and sorted by a column.
    page.select_option("#py-step", "")
    page.wait_for_function("() => (document.querySelector('#py-summary')?.textContent || '')"
                           ".includes('whole recording')")
    page.fill("#py-filter", "medium")
    page.wait_for_function("() => document.querySelectorAll('#py-table tbody tr').length === 1")
    assert "medium" in (page.text_content("#py-table tbody tr") or "")
    page.fill("#py-filter", "")
    first = page.text_content("#py-table tbody tr td") or ""
    assert first in ("heavy", "step", "<module>")  # by self time: heavy; C leaves may vary
    href = page.get_attribute("#py-csv", "href") or ""
    assert "tool=python_profile" in href and "source=sampler" in href
    status, body = server.get("csv", run=RUN, tool=TOOL, source="sampler")
    assert status == 200 and body.decode().splitlines()[0].endswith(",samples")
    shot(watched, "python_table")


def test_overview_card_and_offered_only_with_python(watched: Watched, server: Server) -> None:
    page = watched.page
    server.data(run=RUN, tool="overview_page")
    page.goto(server.base + "#" + urlencode({"run": RUN, "tool": "overview_page"}))
    page.wait_for_selector("#python-summary")
    share = float(page.get_attribute("#python-summary .py-step-share", "data-value") or 0)
    assert share > 80  # the program is all Python code
    assert "heavy" in (page.text_content("#python-summary .py-heaviest") or "")
    page.click("#open-python")
    page.wait_for_selector("#python-page #flame .flame-bar")
    status, body = server.get("tools", run="2024_01_02_00_00_00")
    assert status == 200 and b"python_profile" not in body
    status, _ = server.get("data", run="2024_01_02_00_00_00", tool=TOOL)
    assert status in (202, 404)
    watched.expect_console_error("404")
