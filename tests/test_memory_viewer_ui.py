"""The memory viewer and graph viewer pages in a real headless Chromium against a real
`stepscope serve`, and their HTTP routes.

Runs: the MI300 and TPU v6e JAX profiles (../shared/fixtures), the MI300 one again with an
HLO instruction renamed to markup, and a TensorFlow GPU profile without HLO (the two tools are
not listed for it). Every test fails on a request leaving the served origin, a script error
or a dialog.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

from stepscope.formats.hlo_proto import HloProto
from stepscope.formats.xplane_proto import XSpace

from browser import Server, Watched, shot
from conftest import FIXTURES

TPU = FIXTURES / "xprof/xprof/convert/test_xplanes/tpu_inference_2.xplane.pb"
MI300 = FIXTURES / "TraceLens/tests/traces/mi300/jax_conv_minimal_08/tw003.xplane.pb"
TF_GPU = FIXTURES / "xprof/demo/plugins/profile/GPU-multi-worker/34.83.195.179_6003.xplane.pb"
EVIL = "<img src=x onerror=alert(1)>"
TOOLS = {"memory_viewer", "graph_viewer"}
MIB = 1 << 20


def _evil_copy(dst: Path) -> None:
    """MI300 with the HLO instruction input_transpose_fusion renamed to markup."""
    space = XSpace.FromString(MI300.read_bytes())
    plane = next(p for p in space.planes if p.name == "/host:metadata")
    for md in plane.event_metadata.values():
        for stat in md.stats:
            if plane.stat_metadata[stat.metadata_id].name != "Hlo Proto":
                continue
            proto = HloProto.FromString(stat.bytes_value)
            for c in proto.hlo_module.computations:
                for i in c.instructions:
                    if i.name == "input_transpose_fusion":
                        i.name = EVIL
            for b in proto.buffer_assignment.logical_buffers:
                if b.defined_at.instruction_name == "input_transpose_fusion":
                    b.defined_at.instruction_name = EVIL
            stat.bytes_value = proto.SerializeToString()
    dst.write_bytes(space.SerializeToString())


@pytest.fixture(scope="module")
def logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("hlo_ui")
    runs = root / "plugins" / "profile"
    for name, src in (("a_tpu", TPU), ("b_mi300", MI300), ("d_tf_gpu", TF_GPU)):
        (runs / name).mkdir(parents=True)
        shutil.copy(src, runs / name / "host.xplane.pb")
    (runs / "c_evil").mkdir()
    _evil_copy(runs / "c_evil" / "host.xplane.pb")
    return root


def _open(w: Watched, server: Server, run: str, tool: str, selector: str) -> None:
    w.page.goto(server.base + "#" + urlencode({"run": run, "tool": tool}))
    w.page.wait_for_selector(selector)


def test_tools_listed_only_for_runs_with_hlo_and_params_checked(server: Server) -> None:
    for run, listed in (("a_tpu", True), ("b_mi300", True), ("d_tf_gpu", False)):
        status, body = server.get("tools", run=run)
        assert status == 200
        names = {t["name"] for t in json.loads(body)["tools"]}
        assert (names >= TOOLS) if listed else not (TOOLS & names), run
    status, body = server.get("data", run="d_tf_gpu", tool="memory_viewer")
    assert status == 404 and "HLO" in json.loads(body)["error"]
    server.data(run="b_mi300", tool="memory_viewer")  # the run loaded: parameters are checked
    for params, code in (({"memory_space": "x"}, 400), ({"memory_space": "-1"}, 400),
                         ({"memory_space": "9" * 40}, 400), ({"module": "nope"}, 404),
                         ({"module": "a\x01b"}, 400), ({"module": "x" * 5000}, 400),
                         ({"memory_space": "5"}, 404)):
        status, body = server.get("data", run="b_mi300", tool="memory_viewer", **params)
        assert status == code, (params, body)
        assert json.loads(body)["error"]
    one = server.data(run="b_mi300", tool="memory_viewer", host="host")
    assert one["host"] == "host" and one["peak_buffers"] == server.data(
        run="b_mi300", tool="memory_viewer")["peak_buffers"]  # the run's only host
    status, _ = server.get("data", run="b_mi300", tool="memory_viewer", host="<nope>")
    assert status == 404
    for params, code in (({"depth": "99"}, 400), ({"depth": "two"}, 400),
                         ({"op": "nope", "module": "15"}, 404), ({"module": "nope"}, 404),
                         ({"expand_fusions": "maybe"}, 400)):
        status, body = server.get("data", run="b_mi300", tool="graph_viewer", **params)
        assert status == code, (params, body)


def test_memory_viewer_page(watched: Watched, server: Server) -> None:
    api = server.data(run="b_mi300", tool="memory_viewer")
    _open(watched, server, "b_mi300", "memory_viewer", "#mv-bars")
    page = watched.page
    assert api["module_label"] == "jit_forward_3d_conv(15)"
    assert page.get_attribute("#mv-peak", "data-bytes") == str(api["peak_heap_bytes"])
    assert page.text_content("#mv-peak") == "1.08 GiB"
    assert page.get_attribute("#mv-arguments", "data-bytes") == str(api["argument_bytes"])
    assert page.get_attribute("#mv-temporary", "data-bytes") == str(api["temporary_bytes"])
    assert page.get_attribute("#mv-heap-svg", "data-points") == str(len(api["heap_bytes"]))
    assert page.get_attribute("#mv-peak-dot", "data-index") == str(api["peak_index"])
    names = page.eval_on_selector_all("#mv-bars .mv-bar", "gs => gs.map(g => g.dataset.name)")
    assert names == [b["name"] for b in api["peak_buffers"]]
    # Hover the largest buffer: its card shows op, shape, sizes, type and source op.
    page.hover("#mv-bars .mv-bar >> nth=0")
    page.wait_for_selector("#mv-card:not([hidden])")
    top = api["peak_buffers"][0]
    assert page.text_content("#mv-card h3") == top["name"]
    assert page.text_content("#mv-card [data-key=shape]") == top["shape"]
    assert page.text_content("#mv-card [data-key=type]") == top["allocation_type"]
    assert page.text_content("#mv-card [data-key=source-op]") == top["source_op"]
    shot(watched, "memory-viewer")
    # Another program, chosen in the page.
    page.select_option("#mv-module", "jit__multi_slice(13)")
    page.wait_for_selector("#memory-viewer-page h2:text-is('jit__multi_slice(13)')")
    assert page.is_visible("#mv-no-heap")


def test_memory_viewer_tpu_padding(watched: Watched, server: Server) -> None:
    api = server.data(run="a_tpu", tool="memory_viewer", module="jit_f")
    assert api["padding_overhead_bytes"] == api["peak_heap_bytes"] - \
        api["peak_unpadded_heap_bytes"]
    _open(watched, server, "a_tpu", "memory_viewer", "#mv-bars")
    assert watched.page.get_attribute("#mv-padding", "data-bytes") is not None


def test_graph_viewer_page(watched: Watched, server: Server) -> None:
    api = server.data(run="b_mi300", tool="graph_viewer", module="15", op="cudnn-conv.1",
                      depth="1")
    assert {n["name"] for n in api["nodes"]} == {"cudnn-conv.1", "bitcast.12.0",
                                                 "bitcast.14.0", "get-tuple-element.2.0"}
    default = server.data(run="b_mi300", tool="graph_viewer")
    assert default["ops"] and default["op"] == default["ops"][0]  # the costliest op
    _open(watched, server, "b_mi300", "graph_viewer", "#gv-svg")
    page = watched.page
    assert page.get_attribute("#gv-svg", "data-nodes") == str(len(default["nodes"]))
    # Choose the convolution at depth 1: four nodes, three edges, the root marked.
    # One change at a time, each waited for (two at once race: the default op is another).
    page.fill("#gv-op", "cudnn-conv.1")
    page.press("#gv-op", "Enter")
    page.wait_for_selector(".gv-node[data-root=true][data-name='cudnn-conv.1']")
    page.select_option("#gv-depth", "1")
    page.wait_for_selector("#gv-svg[data-nodes='4']")
    assert page.get_attribute("#gv-svg", "data-edges") == "3"
    assert page.get_attribute(".gv-node[data-root=true]", "data-name") == "cudnn-conv.1"
    page.hover(".gv-node[data-name='cudnn-conv.1']")
    page.wait_for_selector("#gv-card:not([hidden])")
    assert "ms ×" in (page.text_content("#gv-card [data-key=time]") or "")
    # Operands are drawn above the op, users below.
    layer = {n["name"]: n["layer"] for n in api["nodes"]}
    assert layer["bitcast.12.0"] < layer["cudnn-conv.1"] < layer["get-tuple-element.2.0"]
    # Click a user: the graph centres on it.
    page.click(".gv-node[data-name='get-tuple-element.2.0']")
    page.wait_for_selector(".gv-node[data-root=true][data-name='get-tuple-element.2.0']")
    # Expanding fusions adds their instructions.
    assert page.query_selector(".gv-node[data-group]") is None
    page.check("#gv-expand")
    page.wait_for_selector(".gv-node[data-group]")
    shot(watched, "graph-viewer")
    # An unknown op is one message on the page, not a broken page (the API's 404 for it is
    # expected, and Chromium logs it).
    watched.expect_console_error(r"status of 404")
    page.fill("#gv-op", "no-such-op")
    page.dispatch_event("#gv-op", "change")
    page.wait_for_selector("#gv-error:not([hidden])")
    assert "No op" in (page.text_content("#gv-error") or "")


def test_markup_names_stay_text(watched: Watched, server: Server) -> None:
    api: Any = server.data(run="c_evil", tool="memory_viewer", module="15")
    assert EVIL in {b["name"] for b in api["peak_buffers"]}
    _open(watched, server, "c_evil", "memory_viewer", "#mv-bars")
    page = watched.page
    assert page.query_selector("#memory-viewer-page img") is None
    page.hover(f".mv-bar[data-name='{EVIL}']")
    assert page.text_content("#mv-card h3") == EVIL
    watched.page.goto(server.base + "#" + urlencode({"run": "c_evil", "tool": "graph_viewer"}))
    page.wait_for_selector("#gv-svg")
    page.fill("#gv-op", "get-tuple-element.2.0")
    page.dispatch_event("#gv-op", "change")
    page.wait_for_selector(f".gv-node[data-name='{EVIL}']")
    assert page.query_selector("#graph-viewer-page img") is None
