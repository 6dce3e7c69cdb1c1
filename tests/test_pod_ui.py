"""The pod viewer page in a real headless Chromium against a real `stepscope serve`.

Runs: three hosts recorded by stepscope's own capture (w1 doing six times the others'
work per step, every host ending each step in a c10d collective), the eight ranks of a
recorded PyTorch DLRM job (Kineto traces from ../shared/fixtures, one step), and one host
whose name is markup. Every test fails on a request leaving the served origin, a script
error or a dialog (the Watched fixture's rules). Screenshots go to test-artifacts/ui/.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

import stepscope
from stepscope import data

from browser import Server, Watched, shot
from conftest import FIXTURES

DLRM = FIXTURES / "param/et_replay/tests/inputs/dlrm_kineto"
EVIL_HOST = "<img src=x onerror=alert(1)>"
TOOL = "pod_viewer"
FIELDS = ("total_ms", "compute_ms", "input_ms", "collectives_ms", "copy_ms", "other_ms",
          "wait_ms")


def _busy(n: int) -> int:
    """Work that takes time without sleeping (a sleep would be idle, not compute)."""
    total = 0
    for i in range(n):
        total += i * i
    return total


def _decode(x: int) -> int:
    _busy(5_000)
    return x


def _capture(logdir: Path, work: int, steps: int = 12) -> Path:
    """One host's profile: per step an input fetch, ``work`` of compute, then a collective."""
    it = iter(data.instrument(range(10_000), "Read").map(_decode).batch(4))
    with stepscope.Profile(logdir, options=stepscope.ProfilerOptions(counter_interval_ms=0)
                           ) as prof:
        for i in range(steps):
            with stepscope.Trace("train", step_num=i, _r=1):
                next(it)
                with stepscope.Trace("forward"):
                    _busy(work)
                with stepscope.Trace("c10d::allreduce_"):
                    _busy(10_000)
    assert prof.path is not None
    return prof.path


@pytest.fixture(scope="module")
def logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("pod_ui")
    runs = root / "plugins" / "profile"
    three = runs / "2024_01_01_00_00_00"
    three.mkdir(parents=True)
    for host, work in (("w0", 60_000), ("w1", 360_000), ("w2", 60_000)):
        shutil.copy(_capture(tmp_path_factory.mktemp(host), work), three / f"{host}.xplane.pb")
    (runs / "b_dlrm").mkdir()
    for trace in sorted(DLRM.glob("*.json.gz")):
        (runs / "b_dlrm" / trace.name).symlink_to(trace)
    (runs / "c_one_host").mkdir()
    shutil.copy(three / "w0.xplane.pb", runs / "c_one_host" / f"{EVIL_HOST}.xplane.pb")
    return root


def _open(w: Watched, server: Server, run: str) -> Any:
    api = server.data(run=run, tool=TOOL)
    w.page.goto(server.base + "#" + urlencode({"run": run, "tool": TOOL}))
    w.page.wait_for_selector("#pod-page")
    return api


def _columns(w: Watched, chart: str) -> list[dict[str, Any]]:
    return w.page.eval_on_selector_all(f"#{chart} g.pod-col", """cols => cols.map(c => ({
        host: c.dataset.host, total: c.dataset.total, straggler: c.classList.contains('straggler'),
        parts: Object.fromEntries([...c.querySelectorAll('rect.pod-seg')].map(
            r => [r.dataset.category, Number(r.dataset.value)]))}))""")


def _card(w: Watched, chart: str, host: str) -> dict[str, Any]:
    """Hover ``host``'s column of ``chart``; the card's figures by key (text where no value)."""
    w.page.hover(f"#{chart} g.pod-col[data-host={_quote(host)}]")
    card = w.page.wait_for_selector(f"#{chart}-card:not([hidden])")
    assert card.get_attribute("data-host") == host
    assert card.is_visible()
    return w.page.eval_on_selector_all(f"#{chart}-card dd", """dds => Object.fromEntries(
        dds.map(d => [d.dataset.key,
                      d.dataset.value === undefined ? d.textContent : Number(d.dataset.value)]))""")


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _top_straggler(api: Any) -> str:
    counts = api["stragglers"]
    return max(api["hosts"], key=lambda h: (counts[h], -api["hosts"].index(h)))


def test_three_hosts_slider_hover_and_straggler(watched: Watched, server: Server) -> None:
    run = "2024_01_01_00_00_00"
    api = _open(watched, server, run)
    page = watched.page
    assert api["hosts"] == ["w0", "w1", "w2"]
    steps = api["steps"]
    assert len(steps) >= 4

    # One column per host, each the step's figures; the straggler's column marked.
    cols = _columns(watched, "pod-step-chart")
    assert [c["host"] for c in cols] == api["hosts"]
    first = steps[0]
    assert page.get_attribute("#pod-step-num", "data-step") == str(first["step_num"])
    assert page.get_attribute("#pod-step-chart", "data-step") == str(first["step_num"])
    for c in cols:
        figures = first["per_host"][c["host"]]
        assert float(c["total"]) == pytest.approx(figures["total_ms"])
        assert c["parts"] == pytest.approx({k: figures[k] for k in api["categories"]})
        assert c["straggler"] == (c["host"] == first["straggler"])
    assert len(page.query_selector_all("#pod-step-legend [data-category]")) == 5

    # The slider (moved with the keyboard, as a user would) changes the step and the chart.
    page.focus("#pod-step-slider")
    for _ in range(3):
        page.keyboard.press("ArrowRight")
    chosen = steps[3]
    assert page.text_content("#pod-step-num") == f"Step {chosen['step_num']}"
    assert page.get_attribute("#pod-step-chart", "data-step") == str(chosen["step_num"])
    moved = _columns(watched, "pod-step-chart")
    assert [float(c["total"]) for c in moved] == pytest.approx(
        [chosen["per_host"][h]["total_ms"] for h in api["hosts"]])
    assert [c["total"] for c in moved] != [c["total"] for c in cols]

    # The hover card shows the column's figures for the chosen step.
    for host in api["hosts"]:
        card = _card(watched, "pod-step-chart", host)
        figures = chosen["per_host"][host]
        assert {k: card[k] for k in FIELDS} == pytest.approx({k: figures[k] for k in FIELDS})
        if host == chosen["straggler"]:
            assert card["straggler_lead_ms"] == pytest.approx(chosen["straggler_lead_ms"])
        else:
            assert f"the straggler is {chosen['straggler']}" in str(card["straggler_lead_ms"])
    watched.page.hover(f"#pod-step-chart g.pod-col[data-host={_quote('w1')}]")
    shot(watched, "pod-three_hosts")
    page.mouse.move(5, 5)
    page.wait_for_selector("#pod-step-chart-card", state="hidden")

    # The straggler: w1, as the API says, in the header and the table.
    top = _top_straggler(api)
    assert top == "w1"
    assert page.text_content("#pod-straggler") == top
    assert page.text_content("#pod-summary-text") == api["summary"]
    table = {r.get_attribute("data-host"): int(r.query_selector("td:nth-child(2)")
                                               .get_attribute("data-value"))
             for r in page.query_selector_all("#pod-stragglers tbody tr")}
    assert table == api["stragglers"]
    assert page.get_attribute("#pod-stragglers tbody tr:first-child", "data-host") == top

    # All steps: each host's average step, with its card.
    every = _columns(watched, "pod-all-chart")
    assert [c["host"] for c in every] == api["hosts"]
    for c in every:
        t = api["totals"][c["host"]]
        assert float(c["total"]) == pytest.approx(t["total_ms"] / t["steps"])
        assert c["straggler"] == (c["host"] == top)
    card = _card(watched, "pod-all-chart", "w0")
    t = api["totals"]["w0"]
    assert card["compute_ms"] == pytest.approx(t["compute_ms"] / t["steps"])
    assert card["sum_ms"] == pytest.approx(t["total_ms"])

    # Keyboard focus shows the card too.
    page.focus(f"#pod-step-chart g.pod-col[data-host={_quote('w2')}]")
    assert page.get_attribute("#pod-step-chart-card", "data-host") == "w2"

    # Clock alignment, and the CSV the tool offers.
    shifts = {r.get_attribute("data-host"): int(r.query_selector("td.num")
                                                .get_attribute("data-value"))
              for r in page.query_selector_all("#pod-alignment-table tbody tr")}
    assert shifts == {h: a["shift_ns"] for h, a in api["alignment"].items()}
    tools = server.get("tools", run=run)
    assert b'"pod_viewer"' in tools[1]
    href = page.get_attribute("#export-csv", "href")
    assert href is not None
    csv_text = page.evaluate("url => fetch(url).then(r => r.text())", href)
    assert csv_text.splitlines()[0].startswith("step_num,host,total_ms")
    assert len(csv_text.splitlines()) == 1 + sum(len(s["per_host"]) for s in steps)


def test_eight_ranks_of_a_recorded_job(watched: Watched, server: Server) -> None:
    api = _open(watched, server, "b_dlrm")
    page = watched.page
    assert len(api["hosts"]) == 8
    cols = _columns(watched, "pod-step-chart")
    assert [c["host"] for c in cols] == api["hosts"]
    step = api["steps"][0]
    assert [c["host"] for c in cols if c["straggler"]] == [step["straggler"]]
    assert page.is_disabled("#pod-step-slider")  # one step
    card = _card(watched, "pod-step-chart", step["straggler"])
    figures = step["per_host"][step["straggler"]]
    assert {k: card[k] for k in FIELDS} == pytest.approx({k: figures[k] for k in FIELDS})
    assert card["collectives_ms"] > 0
    assert page.text_content("#pod-straggler") == _top_straggler(api)
    # Each rank's MFU (its linears' FLOPs over its step and a V100's FP32 peak) is a row.
    mfu = page.eval_on_selector_all("#pod-mfu tbody tr", "rows => rows.map(r => [r.dataset.host, "
                                    "r.lastElementChild.dataset.value])")
    assert {h: float(v) for h, v in mfu} == pytest.approx(
        {h: m["mfu"] for h, m in api["mfu"]["hosts"].items()})
    assert all(m["peak_tflops"] == 15.7 for m in api["mfu"]["hosts"].values())
    shot(watched, "pod-dlrm_8_ranks")


def test_one_host_renders_with_a_note_and_its_name_as_text(
        watched: Watched, server: Server) -> None:
    api = _open(watched, server, "c_one_host")
    page = watched.page
    assert api["hosts"] == [EVIL_HOST]
    assert "this run has one host" in page.text_content("#pod-single")
    assert EVIL_HOST in page.text_content("#pod-single")
    assert page.query_selector("#pod-page img") is None
    cols = _columns(watched, "pod-step-chart")
    assert [c["host"] for c in cols] == [EVIL_HOST]
    assert not cols[0]["straggler"]
    card = _card(watched, "pod-step-chart", EVIL_HOST)
    assert card["total_ms"] == pytest.approx(api["steps"][0]["per_host"][EVIL_HOST]["total_ms"])
    assert page.query_selector("#pod-stragglers") is None
    shot(watched, "pod-one_host")
