"""The Diff page in a real headless Chromium against a real `stepscope serve`: a run compared
with a baseline chosen in the page, from real runs recorded here (a baseline, and the same
program with a regression injected into the op ``forward`` and one op named with markup).
Every test fails on a request leaving the served origin, a script error or a dialog."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from urllib.parse import urlencode

import pytest

import stepscope
from test_diff import record

from browser import Server, Watched, shot
from workloads import EVIL_OP

TOOL = "diff"


def _with_evil_op(logdir: Path) -> Path:
    """The baseline program plus one op whose name is markup."""
    with stepscope.Profile(logdir, options=stepscope.ProfilerOptions(counter_interval_ms=0)):
        for i in range(10):
            with stepscope.Trace("train", step_num=i, _r=1):
                with stepscope.Trace("load_batch"):
                    time.sleep(0.003)
                with stepscope.Trace(EVIL_OP):
                    time.sleep(0.001)
    return logdir


def _run_dir(logdir: Path) -> Path:
    return next(logdir.rglob("*.xplane.pb")).parent


@pytest.fixture(scope="module")
def logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("diff_ui")
    runs = root / "plugins" / "profile"
    runs.mkdir(parents=True)
    made = {"a_base": record(tmp_path_factory.mktemp("a")),
            "b_slow": record(tmp_path_factory.mktemp("b"), slow_forward_s=0.003),
            "c_evil": _with_evil_op(tmp_path_factory.mktemp("c"))}
    for name, where in made.items():
        shutil.copytree(_run_dir(where), runs / name)
    return root


def test_the_api_checks_the_baseline_against_the_runs(server: Server) -> None:
    data = server.data(run="b_slow", tool=TOOL, base="a_base")
    assert data["base"] == "a_base" and data["run"] == "b_slow"
    assert data["step_time"]["verdict"] == "slower"
    assert data["ops"][0]["name"] == "forward"
    assert len(data["step_ms"]["base"]) == data["step_time"]["base"]["count"]
    for base, status in (("no_such_run", 404), ("../../etc", 400), ("", 400), ("b_slow", 400),
                         ("x" * 5000, 400)):
        code, body = server.get("data", run="b_slow", tool=TOOL, base=base)
        assert code == status, (base, body)
        assert b'"error"' in body


def _open(w: Watched, server: Server, run: str) -> None:
    w.page.goto(server.base + "#" + urlencode({"run": run, "tool": TOOL}))
    w.page.wait_for_selector("#diff-page #diff-base")


def test_diff_page_shows_the_regression_and_its_op(watched: Watched, server: Server) -> None:
    api = server.data(run="b_slow", tool=TOOL, base="a_base")
    _open(watched, server, "b_slow")
    page = watched.page
    options = page.eval_on_selector_all("#diff-base option", "els => els.map(e => e.value)")
    assert sorted(options) == ["a_base", "c_evil"]  # every other run, not this one
    page.select_option("#diff-base", "a_base")
    page.wait_for_selector("#diff-content[data-base='a_base'] #diff-verdict")
    assert page.get_attribute("#diff-verdict", "data-verdict") == "slower"
    change = page.text_content("#diff-change") or ""
    assert f"{api['step_time']['delta_ms']:+.3f}" in change
    first = page.text_content("#diff-ops-table tbody tr:first-child td[data-key='name']")
    assert first == "forward"
    delta = page.get_attribute("#diff-ops-table tbody tr:first-child td[data-key='delta']",
                               "data-value")
    assert float(delta or "nan") == pytest.approx(api["ops"][0]["delta"])
    assert page.locator("#diff-step-chart #diff-line-base").count() == 1
    assert page.locator("#diff-breakdown-table tbody tr").count() >= 1
    shot(watched, "diff_slower")


def test_changing_the_baseline_updates_the_page_and_shows_names_as_text(
        watched: Watched, server: Server) -> None:
    _open(watched, server, "a_base")
    page = watched.page
    page.select_option("#diff-base", "c_evil")
    page.wait_for_selector("#diff-content[data-base='c_evil'] #diff-ops-table")
    names = page.eval_on_selector_all("#diff-ops-table td[data-key='name']",
                                      "els => els.map(e => e.textContent)")
    assert EVIL_OP in names  # shown as its characters, never as markup
    assert page.locator("#diff-ops-table img").count() == 0
    statuses = page.eval_on_selector_all(
        "#diff-ops-table tbody tr", "rows => rows.map(r => r.lastElementChild.textContent)")
    assert "removed" in statuses  # EVIL_OP: in the baseline c_evil, not in a_base
    page.select_option("#diff-base", "b_slow")
    page.wait_for_selector("#diff-content[data-base='b_slow'] #diff-verdict")
    assert page.get_attribute("#diff-verdict", "data-verdict") == "faster"
    shot(watched, "diff_faster")


def test_the_diff_tool_is_listed(server: Server, watched: Watched) -> None:
    _open(watched, server, "c_evil")
    tools = watched.page.eval_on_selector_all("#tool option", "els => els.map(e => e.value)")
    assert "diff" in tools
    code, body = server.get("tools", run="c_evil")
    (diff,) = [t for t in json.loads(body)["tools"] if t["name"] == TOOL]
    assert code == 200 and diff["runs"] == ["base"]


def test_op_stats_and_overview_show_deltas_against_the_chosen_baseline(
        watched: Watched, server: Server) -> None:
    api = server.data(run="b_slow", tool=TOOL, base="a_base")
    (fwd,) = [c for c in api["ops"] if c["name"] == "forward"]
    page = watched.page
    page.goto(server.base + "#" + urlencode({"run": "b_slow", "tool": "framework_op_stats"}))
    page.wait_for_selector("#ops-page #ops-baseline")
    assert page.locator("#ops-table th[data-key='delta_vs_base']").count() == 0  # none yet
    page.select_option("#ops-baseline", "a_base")
    page.wait_for_selector("#ops-table th[data-key='delta_vs_base']")
    row = page.locator("#ops-table tbody tr", has=page.locator("td[data-key='name']",
                                                                has_text="forward"))
    value = row.locator("td[data-key='delta_vs_base']").get_attribute("data-value")
    assert float(value or "nan") == pytest.approx(fwd["delta"])
    shot(watched, "ops_vs_baseline")
    # The baseline chosen is kept for the tab: the overview compares with it too.
    page.goto(server.base + "#" + urlencode({"run": "b_slow", "tool": "overview_page"}))
    page.wait_for_selector("#overview-step-delta")
    assert page.input_value("#overview-baseline") == "a_base"
    assert page.get_attribute("#overview-step-delta", "data-verdict") == "slower"
    text = page.text_content("#overview-step-delta") or ""
    assert f"{api['step_time']['delta_ms']:+.3f} ms" in text and "a_base" in text
    page.click("#overview-open-diff")
    page.wait_for_selector("#diff-content[data-base='a_base'] #diff-verdict")
    page.select_option("#diff-base", "c_evil")
    page.wait_for_selector("#diff-content[data-base='c_evil']")
    page.goto(server.base + "#" + urlencode({"run": "b_slow", "tool": "overview_page"}))
    page.wait_for_selector("#overview-step-delta")
    assert page.input_value("#overview-baseline") == "c_evil"
    page.select_option("#overview-baseline", "")
    page.wait_for_function("!document.querySelector('#overview-step-delta')")
