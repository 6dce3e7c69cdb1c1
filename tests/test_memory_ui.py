"""The memory profile page in a real headless Chromium against a real `stepscope serve`.

Runs: the TensorFlow GPU profile (four allocators, hundreds of rows at the peak), a PyTorch
trace with [memory] records, a trace without memory, and a profile whose op name is markup.
Every test fails on a request leaving the served origin, a script error or a dialog (the
Watched fixture's rules). Screenshots go to test-artifacts/ui/.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

from stepscope.formats import xplane_builder as xb
from stepscope.model import schema

from browser import Server, Watched, shot
from conftest import FIXTURES

TOOL = "memory_profile"
EVIL = "<img src=x onerror=alert(1)>"
GPU = FIXTURES / "xprof/demo/plugins/profile/GPU-multi-worker/34.83.195.179_6003.xplane.pb"
TORCH = FIXTURES / "TraceLens/tests/traces/h100/gaunernst_bert-small-uncased__1016001.json.gz"
NO_MEMORY = FIXTURES / "HolisticTraceAnalysis/tests/data/cpu_only/" \
    "rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"


def _evil_space(path: Path) -> None:
    space = xb.new_space("evil")
    host = xb.add_plane(space, schema.HOST_PLANE_ID, schema.HOST_PLANE)
    line = host.add_line(1, "thread", 1_000_000_000)
    for i, (name, heap) in enumerate([(schema.MEMORY_ALLOCATION, 1 << 20),
                                      (schema.MEMORY_ALLOCATION, 3 << 20),
                                      (schema.MEMORY_DEALLOCATION, 1 << 20)]):
        host.add_event(line, name, 1_000_000_000 + i * 1000, 0, {
            schema.ALLOCATOR_NAME: EVIL, schema.BYTES_ALLOCATED: heap,
            schema.ALLOCATION_BYTES: 2 << 20 if i == 1 else 1 << 20,
            schema.ADDRESS: 100 + (i % 2), schema.TF_OP: EVIL})
    xb.write_space(space, path)


@pytest.fixture(scope="module")
def logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("memory_ui")
    runs = root / "plugins" / "profile"
    for run, source in (("a_gpu", GPU), ("b_torch", TORCH), ("c_nomem", NO_MEMORY)):
        (runs / run).mkdir(parents=True)
        (runs / run / source.name).symlink_to(source)
    (runs / "d_evil").mkdir()
    _evil_space(runs / "d_evil" / "evil.xplane.pb")
    return root


def _open(w: Watched, server: Server, run: str, tool: str = TOOL) -> Any:
    api = server.data(run=run, tool=TOOL) if tool == TOOL else None
    w.page.goto(server.base + "#" + urlencode({"run": run, "tool": tool}))
    w.page.wait_for_selector("#memory-page" if tool == TOOL else "#overview-page")
    return api


def _facts(w: Watched) -> dict[str, str]:
    return w.page.eval_on_selector_all("#memory-summary td", """tds => Object.fromEntries(
        tds.map(t => [t.dataset.key, t.textContent]))""")


def test_gpu_summary_breakdown_timeline_and_zoom(watched: Watched, server: Server) -> None:
    api = _open(watched, server, "a_gpu")
    page = watched.page
    names = [a["name"] for a in api["allocators"]]
    assert page.eval_on_selector_all("#memory-allocator option", "os => os.map(o => o.text)") \
        == names
    # Pick GPU_4_bfc, as a user would.
    index = names.index("GPU_4_bfc")
    page.select_option("#memory-allocator", str(index))
    page.wait_for_selector('#memory-summary[data-allocator="GPU_4_bfc"]')
    page.wait_for_selector("#memory-breakdown tbody tr")
    alloc = api["allocators"][index]
    facts = _facts(watched)
    assert facts["Allocations"] == f"{alloc['num_allocations']:,}"
    assert facts["Deallocations"] == f"{alloc['num_deallocations']:,}"
    assert facts["Peak heap + stack in use"] == "5.78 GiB"  # 6,208,853,760 B
    assert facts["Peak at"].startswith(f"{alloc['peak_time_ms']:.3f} ms")

    # The breakdown: every row, heaviest first; sizes as the API says.
    rows = page.query_selector_all("#memory-breakdown tbody tr")
    assert len(rows) == len(alloc["breakdown_at_peak"]) > 500
    first = alloc["breakdown_at_peak"][0]
    assert page.text_content("#memory-breakdown tbody tr td[data-key=op]") == first["op"]
    # The smallest size shown: 100 MiB leaves only the rows that large.
    page.fill("#memory-min-size", "100")
    big = [r for r in alloc["breakdown_at_peak"] if r["size_bytes"] >= 100 * 2**20]
    assert len(page.query_selector_all("#memory-breakdown tbody tr")) == len(big) >= 1
    # The same in the unit the rows are written in: 200 KiB.
    page.select_option("#memory-min-unit", "KiB")
    page.fill("#memory-min-size", "200")
    over = [r for r in alloc["breakdown_at_peak"] if r["size_bytes"] >= 200 * 2**10]
    assert len(page.query_selector_all("#memory-breakdown tbody tr")) == len(over) > len(big)
    page.select_option("#memory-min-unit", "MiB")
    page.fill("#memory-min-size", "0")
    # Sizes named as the terminal names them: B, KiB, MiB, GiB (never KB, MB).
    sizes = page.eval_on_selector_all("#memory-breakdown td[data-key=size_bytes]",
                                      "tds => tds.map(t => t.textContent)")
    assert sizes and all(re.fullmatch(r"\d+(\.\d+)? (B|KiB|MiB|GiB)", s) for s in sizes)
    page.fill("#memory-filter", "layer_0/")
    filtered = [r for r in alloc["breakdown_at_peak"] if "layer_0/" in r["op"].lower()]
    assert len(page.query_selector_all("#memory-breakdown tbody tr")) == len(filtered) > 0
    # Sorting by a column.
    page.click("#memory-breakdown th[data-key=occurrences]")
    occ = [int(v) for v in page.eval_on_selector_all(
        "#memory-breakdown tbody td[data-key=occurrences]", "cs => cs.map(c => c.dataset.value)")]
    assert occ == sorted(occ, reverse=True)
    href = page.get_attribute("#export-csv", "href")
    assert href is not None and "tool=memory_profile" in href and "api/csv" in href

    # The timeline: hovering names the event under the pointer.
    svg = page.query_selector("#memory-timeline svg")
    assert svg is not None
    box = svg.bounding_box()
    assert box is not None
    page.mouse.move(box["x"] + box["width"] * 0.5, box["y"] + box["height"] * 0.5)
    page.wait_for_selector("#memory-hover td[data-key='Heap in use']")
    hovered = page.eval_on_selector("#memory-hover", "c => c.textContent")
    assert "Allocat" in hovered or "Free of" in hovered
    points_before = page.text_content("#memory-points")
    shot(watched, "memory-gpu")
    # Drag across the middle to zoom: the page asks for that window and says so.
    y = box["y"] + box["height"] * 0.5
    page.mouse.move(box["x"] + box["width"] * 0.45, y)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.6, y, steps=5)
    page.mouse.up()
    page.wait_for_function("() => document.querySelector('#memory-points').textContent"
                           ".includes('between')")
    assert page.text_content("#memory-points") != points_before
    assert page.is_enabled("#memory-reset")
    page.click("#memory-reset")
    page.wait_for_function("() => !document.querySelector('#memory-points').textContent"
                           ".includes('between')")


def test_torch_ops_and_overview_link(watched: Watched, server: Server) -> None:
    api = _open(watched, server, "b_torch")
    page = watched.page
    assert [a["name"] for a in api["allocators"]] == ["cpu", "cuda:0"]
    page.wait_for_selector("#memory-ops tbody tr")
    top = api["ops"][0]
    assert page.text_content("#memory-ops tbody tr td[data-key=name]") == top["name"]
    # The GPU's caching allocator: reserved, free and fragmentation are drawn too.
    page.select_option("#memory-allocator", "1")
    page.wait_for_selector('#memory-summary[data-allocator="cuda:0"]')
    for series in ("heap", "reserved", "fragmentation"):
        assert page.query_selector(f"#memory-timeline path.series-{series}"), series
    # Free memory (79 GB) would flatten the rest: it starts hidden, its legend entry shows it.
    assert page.query_selector("#memory-timeline path.series-free") is None
    page.click("#memory-timeline button[data-series=free]")
    page.wait_for_selector("#memory-timeline path.series-free", state="attached")
    page.click("#memory-timeline button[data-series=free]")
    page.wait_for_selector("#memory-timeline path.series-free", state="detached")
    assert _facts(watched)["Peak memory reserved"] == "116 MiB"
    shot(watched, "memory-torch")
    # The overview lists each allocator's peak, and links to the page.
    _open(watched, server, "b_torch", "overview_page")
    page.wait_for_selector("#memory-peaks")
    assert "cuda:0: 96.6 MiB" in (page.text_content("#memory-peaks") or "")
    page.click("#memory-link")
    page.wait_for_selector("#memory-page")
    assert page.eval_on_selector("#tool", "s => s.value") == TOOL


def test_run_without_memory_has_no_memory_tool(watched: Watched, server: Server) -> None:
    _open(watched, server, "c_nomem", "overview_page")
    page = watched.page
    page.wait_for_selector("#environment")
    assert page.query_selector("#memory-peaks") is None
    tools = page.eval_on_selector_all("#tool option", "os => os.map(o => o.value)")
    assert "overview_page" in tools and TOOL not in tools
    status, body = server.get("data", run="c_nomem", tool=TOOL)
    assert status == 404 and b"no memory activity" in body
    status, _ = server.get("data", run="a_gpu", tool=TOOL, width="0.5")
    assert status == 400


def test_markup_names_are_text(watched: Watched, server: Server) -> None:
    _open(watched, server, "d_evil")
    page = watched.page
    page.wait_for_selector("#memory-breakdown tbody tr")
    assert page.eval_on_selector("#memory-allocator option", "o => o.text") == EVIL
    ops = page.eval_on_selector_all("#memory-breakdown td[data-key=op]",
                                    "cs => cs.map(c => c.textContent)")
    assert EVIL in ops
    assert page.query_selector("#memory-page img") is None
