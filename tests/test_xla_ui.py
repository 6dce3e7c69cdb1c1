"""The XLA pages (op profile, HLO op stats, roofline) in a real headless Chromium against a
real `stepscope serve`, and their HTTP routes.

Runs: the TPU v6e JAX profile and the MI300 JAX profile (../shared/fixtures), the MI300 one
again with one op renamed to markup and no HLO for its program (an op the metadata lacks),
and a TensorFlow GPU profile without XLA (the XLA tools are not listed for it). Every test
fails on a request leaving the served origin, a script error or a dialog.
"""

from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

from stepscope.formats.xplane_proto import XSpace

from browser import Server, Watched, shot
from conftest import FIXTURES

TPU = FIXTURES / "xprof/xprof/convert/test_xplanes/tpu_inference_2.xplane.pb"
MI300 = FIXTURES / "TraceLens/tests/traces/mi300/jax_conv_minimal_08/tw003.xplane.pb"
TF_GPU = FIXTURES / "xprof/demo/plugins/profile/GPU-multi-worker/34.83.195.179_6003.xplane.pb"
EVIL = "<img src=x onerror=alert(1)>"
XLA_TOOLS = {"op_profile", "hlo_op_stats", "roofline_model"}


def _evil_copy(dst: Path) -> None:
    """MI300 with the op loop_transpose_fusion renamed to markup and the HLO dropped."""
    space = XSpace.FromString(MI300.read_bytes())
    keep = [p for p in space.planes if p.name != "/host:metadata"]
    del space.planes[:]
    space.planes.extend(keep)
    for plane in space.planes:
        for md in plane.stat_metadata.values():
            if md.name == "loop_transpose_fusion":
                md.name = EVIL
    dst.write_bytes(space.SerializeToString())


@pytest.fixture(scope="module")
def logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("xla_ui")
    runs = root / "plugins" / "profile"
    for name, src in (("a_tpu", TPU), ("b_mi300", MI300), ("d_tf_gpu", TF_GPU)):
        (runs / name).mkdir(parents=True)
        shutil.copy(src, runs / name / "host.xplane.pb")
    (runs / "c_evil").mkdir()
    _evil_copy(runs / "c_evil" / "host.xplane.pb")
    return root


def _open(w: Watched, server: Server, run: str, tool: str, selector: str) -> Any:
    api = server.data(run=run, tool=tool)
    w.page.goto(server.base + "#" + urlencode({"run": run, "tool": tool}))
    w.page.wait_for_selector(selector)
    return api


def test_xla_tools_listed_only_for_xla_runs(server: Server) -> None:
    for run, listed in (("a_tpu", True), ("b_mi300", True), ("c_evil", True),
                        ("d_tf_gpu", False)):
        status, body = server.get("tools", run=run)
        assert status == 200
        names = {t["name"] for t in json.loads(body)["tools"]}
        assert (names >= XLA_TOOLS) if listed else not (XLA_TOOLS & names), run
    status, body = server.get("data", run="d_tf_gpu", tool="op_profile")
    assert status == 404 and "XLA" in json.loads(body)["error"]
    status, _ = server.get("csv", run="a_tpu", tool="op_profile")
    assert status == 404  # no CSV for the tree
    status, _ = server.get("data", run="a_tpu", tool="../op_profile")
    assert status == 400
    status, _ = server.get("data", run="a_tpu", tool="op_profile", host="<nope>")
    assert status == 404
    one = server.data(run="a_tpu", tool="hlo_op_stats", host="host")
    every = server.data(run="a_tpu", tool="hlo_op_stats")
    assert one["host"] == "host" and one["ops"] == every["ops"]  # the run's only host


def test_op_profile_page(watched: Watched, server: Server) -> None:
    api = _open(watched, server, "a_tpu", "op_profile", "#op-tree")
    page = watched.page
    assert page.text_content("#xla-device") == "TPU v6 Lite × 4"
    assert f"{100 * api['flops_utilization']:.1f}%" == page.text_content("#xla-flops-util")
    groups = page.eval_on_selector_all("#op-tree tr[data-kind=group]",
                                       "rs => rs.map(r => r.dataset.key)")
    assert groups == [f"c/{c['name']}" for c in api["categories"]]
    assert page.is_visible("#idle-row")
    # Expand the top category, pick its top op: the details card shows its HLO expression.
    top = api["categories"][0]
    page.click(f"#op-tree tr[data-key='c/{top['name']}']")
    op_rows = page.query_selector_all("#op-tree tr[data-kind=op]")
    assert len(op_rows) == min(10, len(top["ops"]))
    op_rows[0].click()
    first = next(o for o in api["ops"] if o["name"] == top["ops"][0])
    page.wait_for_selector("#op-expression")
    assert page.text_content("#op-expression") == first["expression"]
    assert page.text_content("#op-details h2") == first["name"]
    # A fusion expands to its fused ops.
    page.click("#op-tree tr[data-key='c/loop fusion']")
    fusion = page.query_selector("#op-tree tr[data-kind=op][data-key^='c/loop fusion/']")
    assert fusion is not None
    fusion.click()
    assert page.query_selector_all("#op-tree tr[data-kind=fused]")
    assert "add" in page.text_content("#op-fused")
    # Top 5 per group, then by program.
    page.select_option("#op-top", "5")
    assert len(page.query_selector_all("#op-tree tr[data-kind=op]")) <= 10
    page.select_option("#op-view", "program")
    programs = page.eval_on_selector_all("#op-tree tr[data-level='0']",
                                         "rs => rs.map(r => r.dataset.key)")
    assert programs == [f"p/{p['program_id']}/{p['name']}" for p in api["programs"]]
    shot(watched, "xla-op-profile")


def test_hlo_op_stats_page_and_csv(watched: Watched, server: Server) -> None:
    api = _open(watched, server, "b_mi300", "hlo_op_stats", "#hlo-table")
    page = watched.page
    names = page.eval_on_selector_all("#hlo-table tbody td[data-key=name]",
                                      "cs => cs.map(c => c.textContent)")
    assert sorted(names) == sorted(o["name"] for o in api["ops"])
    page.click("#hlo-table th[data-key=gflops_per_s]")
    first = page.text_content("#hlo-table tbody tr:first-child td[data-key=name]")
    assert first == "cudnn-conv.1"
    page.fill("#hlo-filter", "fusion")
    assert len(page.query_selector_all("#hlo-table tbody tr")) == 3
    page.fill("#hlo-filter", "")
    page.select_option("#hlo-bound", "compute")
    assert len(page.query_selector_all("#hlo-table tbody tr")) == 1
    with page.expect_download() as download:
        page.click("#export-csv")
    text = Path(download.value.path()).read_text()
    rows = list(csv.DictReader(io.StringIO(text)))
    assert sorted(r["name"] for r in rows) == sorted(o["name"] for o in api["ops"])
    conv = next(r for r in rows if r["name"] == "cudnn-conv.1")
    assert float(conv["gflops_per_s"]) == pytest.approx(
        next(o for o in api["ops"] if o["name"] == "cudnn-conv.1")["gflops_per_s"])
    shot(watched, "xla-hlo-op-stats")


def test_roofline_page_hover(watched: Watched, server: Server) -> None:
    api = _open(watched, server, "a_tpu", "roofline_model", "#roofline-svg")
    page = watched.page
    whole = [p for p in api["points"] if p["step"] is None]
    assert int(page.get_attribute("#roofline-svg", "data-points") or 0) == len(whole)
    assert page.query_selector("#roof") is not None  # the profile states its peaks
    assert api["unplaced"] == 13  # 12 copy-starts/dones and a broadcast: no FLOPs
    name = max(whole, key=lambda p: p["gflops_per_s"])["name"]
    page.focus(f"#roofline-svg g.roof-point[data-name='{name}']")  # points may overlap
    card = page.wait_for_selector("#roof-card:not([hidden])")
    assert card.get_attribute("data-name") == name
    assert "GFLOP/s" in (page.text_content("#roof-card dd[data-key=gflops]") or "")
    shot(watched, "xla-roofline")


def test_markup_op_names_and_missing_hlo(watched: Watched, server: Server) -> None:
    api = _open(watched, server, "c_evil", "op_profile", "#op-tree")
    page = watched.page
    assert any("No HLO" in n for n in api["notes"])
    assert EVIL in {o["name"] for o in api["ops"]}
    page.click("#op-tree tr[data-kind=group]")  # category "unknown": every op, times only
    cells = page.eval_on_selector_all("#op-tree tr[data-kind=op] td.name-cell",
                                      "cs => cs.map(c => c.textContent)")
    assert any(EVIL in c for c in cells)
    assert page.query_selector("#op-profile-page img") is None
    watched.page.goto(server.base + "#" + urlencode({"run": "c_evil", "tool": "roofline_model"}))
    page.wait_for_selector("#no-points")  # no FLOPs: nothing can be placed


def test_overview_shows_flops_utilisation(watched: Watched, server: Server) -> None:
    api = _open(watched, server, "a_tpu", "overview_page", "#summary")
    assert api["xla_flops_utilization"] == pytest.approx(5.623371077235841e-06)
    value = watched.page.get_attribute("#flops-utilization-value", "data-value")
    assert float(value or "nan") == pytest.approx(api["xla_flops_utilization"])
    other = server.data(run="d_tf_gpu", tool="overview_page")
    assert other["xla_flops_utilization"] is None
