"""The input pipeline analyzer page in a real headless Chromium against a real `stepscope serve`.

Runs: a Python pipeline profiled by stepscope whose map stage sleeps (highly input-bound,
bottleneck known), and a tf.data pipeline profiled by real TensorFlow. Every test fails on a
request leaving the served origin, a script error or a dialog (the Watched fixture's rules).
"""

from __future__ import annotations

import csv
import io
import shutil
import time
from pathlib import Path
from urllib.parse import urlencode

import pytest

import stepscope
from stepscope import data
from test_input_pipeline import TF_PIPELINE, TWO_PIPELINES

from browser import Server, Watched, shot, values
from workloads import run_script


def _slow(x: int) -> int:
    time.sleep(0.004)
    return x


@pytest.fixture(scope="module")
def logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("input_ui")
    runs = root / "plugins" / "profile"
    it = iter(data.instrument(range(1000)).map(_slow).filter(lambda x: x % 7 != 3).batch(4)
              .prefetch(2))
    options = stepscope.ProfilerOptions(counter_interval_ms=0)
    with stepscope.Profile(root, options=options) as prof:
        for i in range(10):
            with stepscope.Trace("train", step_num=i, _r=1):
                next(it)
                with stepscope.Trace("compute"):
                    time.sleep(0.002)
    assert prof.path is not None
    prof.path.parent.rename(runs / "a_python")
    tf_dir = tmp_path_factory.mktemp("tf")
    run_script(TF_PIPELINE, str(tf_dir), "tf")
    shutil.move(str(next(tf_dir.glob("plugins/profile/*"))), runs / "b_tf_data")
    # Two hosts: TensorFlow's with two pipelines, and the Python run's as a second host.
    two_dir = tmp_path_factory.mktemp("two")
    run_script(TWO_PIPELINES, str(two_dir))
    shutil.move(str(next(two_dir.glob("plugins/profile/*"))), runs / "c_pipelines")
    shutil.copy(next((runs / "a_python").glob("*.xplane.pb")),
                runs / "c_pipelines" / "worker-2.xplane.pb")
    return root


TOOL = "input_pipeline_analyzer"


def _open(w: Watched, server: Server, run: str) -> None:
    w.page.goto(server.base + "#" + urlencode({"run": run, "tool": TOOL}))
    w.page.wait_for_selector("#input-page")


def test_analyzer_page_shows_the_api_and_agrees_with_the_overview(
        watched: Watched, server: Server) -> None:
    _open(watched, server, "a_python")
    page = watched.page
    api = server.data(run="a_python", tool=TOOL)
    overview = server.data(run="a_python", tool="overview_page")
    shot(watched, "input-a_python")
    assert api["input"] == overview["input"]
    assert api["input"]["verdict"] == "highly"
    assert float(page.get_attribute("#input-percent", "data-value")) == pytest.approx(
        overview["input"]["percent"])
    assert page.get_attribute("#input-verdict", "data-verdict") == "highly"
    assert page.text_content("#input-verdict") == overview["input"]["statement"]
    assert float(page.get_attribute("#step-avg", "data-value")) == pytest.approx(
        api["steps"]["avg_ms"])
    assert page.query_selector("#input-step-graph canvas") is not None
    split = {row.get_attribute("data-category"): float(
        row.query_selector("td:nth-child(2)").get_attribute("data-value"))
        for row in page.query_selector_all("#host-breakdown tbody tr")}
    assert split == pytest.approx(api["host_breakdown"])
    names = [c.text_content() for c in page.query_selector_all(
        "#input-op-table td[data-key=name]")]
    assert names == [r["name"] + (" ‡" if r["runs_apart"] else "") for r in api["ops"]]
    page.click("#input-op-table th[data-key=count]")
    counts = values(watched, "#input-op-table td[data-key=count]")
    assert counts == sorted(counts, reverse=True) and len(set(counts)) > 1


def test_pipeline_graph_marks_the_critical_path_and_the_bottleneck(
        watched: Watched, server: Server) -> None:
    _open(watched, server, "a_python")
    page = watched.page
    api = server.data(run="a_python", tool=TOOL)["bottleneck"]
    assert api["stage"] == "Iterator::Prefetch::Batch::Filter::Map"
    assert page.text_content("#bottleneck-stage") == api["stage"]
    assert page.text_content("#bottleneck-recommendation") == api["recommendation"]
    nodes = page.eval_on_selector_all(
        "#pipeline-graph g.node",
        "gs => gs.map(g => [g.dataset.name, g.getAttribute('class'),"
        " g.querySelector('rect').getAttribute('stroke'),"
        " g.querySelector('rect').getAttribute('stroke-width')])")
    assert sorted(n[0] for n in nodes) == sorted(n["name"] for n in api["graph"])
    by_name = {n[0]: n for n in nodes}
    bottleneck = by_name[api["stage"]]
    assert "bottleneck" in bottleneck[1] and bottleneck[2] == "#d93025"
    for name in api["critical_path"]:
        assert "critical" in by_name[name][1] and by_name[name][3] == "3"
    texts = page.text_content(f"#pipeline-graph g[data-name='{api['stage']}']")
    assert "calls" in texts and "self" in texts and "start" in texts
    shot(watched, "input-graph")


def test_csv_download_equals_the_api(watched: Watched, server: Server) -> None:
    _open(watched, server, "a_python")
    with watched.page.expect_download() as info:
        watched.page.click("#export-csv")
    text = Path(info.value.path()).read_text()
    status, body = server.get("csv", run="a_python", tool=TOOL)
    assert status == 200 and text == body.decode()
    rows = list(csv.reader(io.StringIO(text)))
    assert len(rows) == 1 + len(server.data(run="a_python", tool=TOOL)["ops"])


def test_overview_recommends_the_analyzer(watched: Watched, server: Server) -> None:
    watched.page.goto(server.base + "#" + urlencode({"run": "a_python",
                                                     "tool": "overview_page"}))
    watched.page.wait_for_selector("#overview-page")
    watched.page.click("#next-tool")
    watched.page.wait_for_selector("#input-page")
    assert f"tool={TOOL}" in watched.page.url


def test_tf_data_graph_has_the_long_names(watched: Watched, server: Server) -> None:
    _open(watched, server, "b_tf_data")
    names = watched.page.eval_on_selector_all("#pipeline-graph g.node",
                                              "gs => gs.map(g => g.dataset.name)")
    assert "Iterator::Batch::Repeat::Map::Range" in names
    assert watched.page.text_content("#bottleneck-stage") == "Iterator::Batch::Repeat::Map"
    shot(watched, "input-b_tf_data")


def test_pipeline_summary_and_the_host_and_pipeline_selectors(
        watched: Watched, server: Server) -> None:
    _open(watched, server, "c_pipelines")
    page = watched.page
    api = server.data(run="c_pipelines", tool=TOOL)
    pipes = api["pipelines"]
    assert len({p["host"] for p in pipes}) == 2 and len(pipes) == 3
    rows = page.eval_on_selector_all(
        "#pipeline-table tbody tr",
        "rs => rs.map(r => [r.dataset.host, r.dataset.pipeline,"
        " Number(r.children[4].dataset.value), r.children[5].textContent])")
    assert rows == [[p["host"], p["name"], pytest.approx(p["bottleneck"]["run_ms"]),
                     p["bottleneck"]["stage"] or "none"] for p in pipes]
    runs = [r[2] for r in rows]
    assert runs == sorted(runs, reverse=True)  # slowest run first, as XProf sorts them
    # The page opens on the run's bottleneck: the slowest host pipeline's.
    b = api["bottleneck"]
    assert page.input_value("#pipeline-host") == b["host"]
    assert page.input_value("#pipeline-select") == b["pipeline"]
    assert page.text_content("#bottleneck-stage") == b["stage"]
    # Another pipeline of the same host, by the pipeline selector.
    tf_host = b["host"]
    other = next(p for p in pipes if p["host"] == tf_host and p["name"] != b["pipeline"])
    options = page.eval_on_selector_all("#pipeline-select option", "os => os.map(o => o.value)")
    assert sorted(options) == sorted(p["name"] for p in pipes if p["host"] == tf_host)
    page.select_option("#pipeline-select", other["name"])
    assert page.text_content("#bottleneck-stage") == (other["bottleneck"]["stage"] or "none")
    assert other["name"] in page.text_content("#bottleneck-run")
    names = page.eval_on_selector_all("#pipeline-graph g.node", "gs => gs.map(g => g.dataset.name)")
    assert sorted(names) == sorted(n["name"] for n in other["bottleneck"]["graph"])
    assert "Iterator::MapAndBatch::FlatMap::TFRecord" in names
    shot(watched, "input-pipelines")
    # The other host, by the host selector: its only pipeline is shown.
    python_host = next(p for p in pipes if p["host"] != tf_host)
    page.select_option("#pipeline-host", python_host["host"])
    assert page.input_value("#pipeline-select") == python_host["name"]
    assert page.text_content("#bottleneck-stage") == python_host["bottleneck"]["stage"]
    assert f"on host {python_host['host']}" in page.text_content("#bottleneck-run")
    # A click on a summary row selects that pipeline too.
    page.click(f"#pipeline-table tr[data-host='{tf_host}'][data-pipeline='{other['name']}']")
    assert page.input_value("#pipeline-host") == tf_host
    assert page.input_value("#pipeline-select") == other["name"]
    # The fifth host-side category is on the page.
    assert page.query_selector("#host-breakdown tr[data-category=other]") is not None
