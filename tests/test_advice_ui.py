"""The overview page's advice in a real headless Chromium against `stepscope serve`: a real
TensorFlow run with a bad input pipeline and a recorded PyTorch GPU trace."""

from __future__ import annotations

import shutil
from pathlib import Path
from urllib.parse import urlencode

import pytest

from advice_workloads import TF_PIPELINE

from browser import Server, Watched, shot
from conftest import FIXTURES
from workloads import run_script

RESNET = (FIXTURES / "kineto/tb_plugin/samples/resnet50_num_workers_0/"
          "worker0.1623143089861.pt.trace.json.gz")


@pytest.fixture(scope="module")
def logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("advice_logdir")
    runs = root / "plugins" / "profile"
    runs.mkdir(parents=True)
    tf_dir = tmp_path_factory.mktemp("tf_bad")
    run_script(TF_PIPELINE, str(tf_dir), "8", "bad")
    shutil.move(str(next(tf_dir.glob("plugins/profile/*"))), runs / "a_bad_pipeline")
    (runs / "b_resnet").mkdir()
    (runs / "b_resnet" / RESNET.name).symlink_to(RESNET)
    return root


def _open(w: Watched, server: Server, run: str) -> None:
    w.page.goto(server.base + "#" + urlencode({"run": run, "tool": "overview_page"}))
    w.page.wait_for_selector("#overview-page #advice")


@pytest.mark.parametrize("run", ["a_bad_pipeline", "b_resnet"])
def test_overview_shows_the_api_advice(watched: Watched, server: Server, run: str) -> None:
    _open(watched, server, run)
    api = server.data(run=run, tool="overview_page")["recommendations"]
    assert api, "the run shows problems that the rules know"
    page = watched.page
    shot(watched, f"advice-{run}")
    items = page.query_selector_all("#advice li[data-rule]")
    assert [i.get_attribute("data-rule") for i in items] == [a["rule"] for a in api]
    for item, advice in zip(items, api, strict=True):
        assert item.query_selector(".advice-text").text_content() == advice["text"]
        # The figures that made the rule fire, as a sentence with units (issue 30).
        evidence = item.query_selector(".evidence").text_content()
        assert advice["because"] and evidence == "Because " + advice["because"]
        assert " ms" in evidence or " %" in evidence or " µs" in evidence


def test_advice_links_to_its_tool(watched: Watched, server: Server) -> None:
    _open(watched, server, "a_bad_pipeline")
    api = server.data(run="a_bad_pipeline", tool="overview_page")["recommendations"]
    rule = next(a["rule"] for a in api if a["tool"] == "input_pipeline_analyzer")
    link = watched.page.query_selector(f"#advice li[data-rule={rule}] .advice-tool")
    assert link is not None
    assert link.get_attribute("data-tool") == "input_pipeline_analyzer"
    link.click()
    watched.page.wait_for_selector("#input-summary")
    assert "tool=input_pipeline_analyzer" in watched.page.url


def test_top_ops_have_the_cumulative_self_time(watched: Watched, server: Server) -> None:
    _open(watched, server, "b_resnet")
    api = server.data(run="b_resnet", tool="overview_page")["top_ops"]
    running = 0.0
    for op in api:  # XProf's column: each op's share and those above it
        running += op["self_percent"]
        assert op["cumulative_self_percent"] == pytest.approx(min(running, 100.0))
    cells = watched.page.query_selector_all("#top-ops td[data-key=cumulative_self_percent]")
    assert [float(c.get_attribute("data-value")) for c in cells] == pytest.approx(
        [op["cumulative_self_percent"] for op in api])
    assert api[-1]["cumulative_self_percent"] <= 100.0


def test_include_idle_changes_the_pies_too(watched: Watched, server: Server) -> None:
    idle_ops = server.data(run="a_bad_pipeline", tool="framework_op_stats",
                           include_idle="true")["ops"]
    assert any(r["type"] == "IDLE" and r["host_or_device"] == "Host" for r in idle_ops)
    page = watched.page
    page.goto(server.base + "#" + urlencode({"run": "a_bad_pipeline",
                                             "tool": "framework_op_stats"}))
    page.wait_for_selector("#pie-host-type canvas")
    assert "IDLE" not in page.get_attribute("#pie-host-type", "data-slices").split("\n")
    page.check("#include-idle")
    page.wait_for_function(
        "() => (document.querySelector('#pie-host-type')?.dataset.slices ?? '')"
        ".split('\\n').includes('IDLE')")
    shot(watched, "ops-idle-pies")
    assert page.is_enabled("#include-idle")
