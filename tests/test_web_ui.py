"""The web UI in a real headless Chromium against a real `stepscope serve` on 127.0.0.1.

Runs: one profiled by stepscope (with an op named like an HTML tag), one by TensorFlow, one
PyTorch trace, one recorded 8-GPU TensorFlow profile from ../shared/fixtures, and a run with
two hosts. Every test records the page's network requests and fails on any that leaves the
served origin, on any script error and on any dialog. Screenshots go to test-artifacts/ui/.
"""

from __future__ import annotations

import csv
import io
import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

from stepscope.views.tables import short_name
from stepscope.views.units import size_text

from browser import Server, Watched, free_port, shot, values
from conftest import FIXTURES
from workloads import EVIL_OP, TF_CUSTOM_LOOP, TORCH_LOOP, make_stepscope_run, run_script

GPU_FIXTURE = FIXTURES / "xprof/demo/plugins/profile/GPU-multi-worker/34.83.195.179_6003.xplane.pb"
PAGE_ROOT = {"overview_page": "#overview-page", "framework_op_stats": "#ops-page",
             "kernel_stats": "#kernels-page"}
A100_TF32 = (FIXTURES / "HolisticTraceAnalysis/tests/data/negative_queue_length_values_check/"
             "rank0.json.gz")
RUNS = ["a_stepscope", "b_tensorflow", "c_pytorch", "d_gpu_v100", "e_two_hosts"]


@pytest.fixture(scope="module")
def logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ui_logdir")
    runs = root / "plugins" / "profile"
    made = make_stepscope_run(root)
    made.rename(runs / "a_stepscope")
    tf_dir = tmp_path_factory.mktemp("tf")
    run_script(TF_CUSTOM_LOOP, str(tf_dir), "10")
    shutil.move(str(next(tf_dir.glob("plugins/profile/*"))), runs / "b_tensorflow")
    (runs / "c_pytorch").mkdir()
    run_script(TORCH_LOOP, str(runs / "c_pytorch" / "trainer.1700000000.pt.trace.json"), "4")
    (runs / "d_gpu_v100").mkdir()
    (runs / "d_gpu_v100" / GPU_FIXTURE.name).symlink_to(GPU_FIXTURE)
    two = runs / "e_two_hosts"
    two.mkdir()
    shutil.copy(runs / "a_stepscope" / "vm.xplane.pb", two / "worker_a.xplane.pb")
    other = make_stepscope_run(tmp_path_factory.mktemp("other"), steps=6, host="worker_b")
    shutil.copy(other / "worker_b.xplane.pb", two / "worker_b.xplane.pb")
    (runs / "f_a100_tf32").mkdir()  # a known MFU (an A100 PyTorch run on TF32 kernels)
    (runs / "f_a100_tf32" / "rank0.pt.trace.json.gz").symlink_to(A100_TF32)
    return root


def _open(w: Watched, server: Server, run: str, tool: str, host: str = "") -> None:
    params = {"run": run, **({"host": host} if host else {}), "tool": tool}
    w.page.goto(server.base + "#" + urlencode(params))
    w.page.wait_for_selector(PAGE_ROOT[tool])


@pytest.mark.parametrize("run", RUNS)
def test_overview_page_shows_the_api_numbers(watched: Watched, server: Server,
                                             run: str) -> None:
    _open(watched, server, run, "overview_page")
    api = server.data(run=run, tool="overview_page")
    page = watched.page
    shot(watched, f"overview-{run}")
    if api["steps"]["count"]:
        assert float(page.get_attribute("#avg-step-ms", "data-value")) == pytest.approx(
            api["steps"]["avg_ms"])
        assert page.text_content("#avg-step-ms") == f"{api['steps']['avg_ms']:.3f}"
        assert int(page.get_attribute("#step-count", "data-value")) == api["steps"]["count"]
        # How steps were found, in words (the machine key stays in the JSON).
        found = page.text_content("#steps-found-by") or ""
        assert found == api["steps"]["found_by_text"] and found.startswith("Steps were found")
        assert api["steps"]["found_by"] not in found.split()
        shares = {row.get_attribute("data-category"): float(
            row.query_selector("td:nth-child(3)").get_attribute("data-value"))
            for row in page.query_selector_all("#breakdown tbody tr")}
        assert shares == pytest.approx(api["breakdown"])
        assert page.query_selector("#step-graph canvas") is not None
    assert page.text_content("#verdict") == api["input"]["statement"]
    names = [c.text_content() for c in page.query_selector_all("#top-ops td[data-key=name]")]
    assert names == [o["name"] for o in api["top_ops"]]
    assert values(watched, "#top-ops td[data-key=self_ms]") == pytest.approx(
        [o["self_ms"] for o in api["top_ops"]])
    env = page.text_content("#environment")
    assert api["environment"]["device_type"] in env
    if api["precision"]:
        assert float(page.get_attribute("#precision-16", "data-value")) == pytest.approx(
            api["precision"]["16bit_percent"])


@pytest.mark.parametrize("run", ["f_a100_tf32", "c_pytorch"])
def test_overview_mfu_line_shows_the_api_figure(watched: Watched, server: Server,
                                                run: str) -> None:
    _open(watched, server, run, "overview_page")
    mfu = server.data(run=run, tool="overview_page")["mfu"]
    page = watched.page
    line = page.text_content("#mfu") or ""
    if mfu["mfu"] is None:
        assert run == "c_pytorch"  # a CPU: no peak to measure against
        assert line == "MFU: unknown. " + mfu["unknown"]
        return
    assert float(page.get_attribute("#mfu-value", "data-value")) == pytest.approx(mfu["mfu"])
    assert page.text_content("#mfu-value") == f"{100 * mfu['mfu']:.1f}%"
    [host] = mfu["hosts"].values()
    assert f"peak {host['peak_tflops']:g} TFLOP/s per device (tf32; " in line
    assert page.text_content("#mfu-notes") == " · " + " ".join(host["notes"])
    assert "TF32 peak is used" in line


def test_gpu_fixture_overview_has_devices(watched: Watched, server: Server) -> None:
    _open(watched, server, "d_gpu_v100", "overview_page")
    env = watched.page.text_content("#environment")
    assert "GPU" in env
    assert watched.page.query_selector("#precision-16") is not None


@pytest.mark.parametrize("run", RUNS)
def test_op_stats_page_shows_the_api_rows(watched: Watched, server: Server, run: str) -> None:
    _open(watched, server, run, "framework_op_stats")
    api = server.data(run=run, tool="framework_op_stats")
    page = watched.page
    shot(watched, f"ops-{run}")
    rows = page.query_selector_all("#ops-table tbody tr")
    assert len(rows) == min(len(api["ops"]), 2000) > 0
    names = [c.text_content() for c in page.query_selector_all("#ops-table td[data-key=name]")]
    assert names == [r["name"] for r in api["ops"]][:2000]
    assert values(watched, "#ops-table td[data-key=self_ms]") == pytest.approx(
        [r["self_ms"] for r in api["ops"]][:2000])
    sides = {r["host_or_device"] for r in api["ops"]}
    assert page.query_selector("#pie-host-op canvas") is not None
    if "Device" in sides:
        assert page.query_selector("#pie-device-type canvas") is not None
    if api["kernels"]:
        assert page.query_selector("#kernels-table tbody tr") is not None


def test_sorting_and_filtering(watched: Watched, server: Server) -> None:
    _open(watched, server, "b_tensorflow", "framework_op_stats")
    page = watched.page
    page.click("#ops-table th[data-key=total_ms]")
    assert page.get_attribute("#ops-table th[data-key=total_ms]", "aria-sort") == "descending"
    totals = values(watched, "#ops-table td[data-key=total_ms]")
    assert totals == sorted(totals, reverse=True) and len(set(totals)) > 1
    page.click("#ops-table th[data-key=total_ms]")
    totals = values(watched, "#ops-table td[data-key=total_ms]")
    assert totals == sorted(totals)
    page.click("#ops-table th[data-key=name]")
    names = [c.text_content() for c in page.query_selector_all("#ops-table td[data-key=name]")]
    assert names == sorted(names, key=lambda n: n.lower()) or names == sorted(names)
    api = server.data(run="b_tensorflow", tool="framework_op_stats")
    page.fill("#op-filter", "matmul")
    shown = [c.text_content() for c in page.query_selector_all("#ops-table td[data-key=name]")]
    want = [r["name"] for r in api["ops"] if "matmul" in r["name"].lower()]
    assert shown and sorted(shown) == sorted(want)
    shot(watched, "ops-filtered")


def test_csv_download_equals_the_api(watched: Watched, server: Server) -> None:
    _open(watched, server, "a_stepscope", "framework_op_stats")
    with watched.page.expect_download() as info:
        watched.page.click("#export-csv")
    text = Path(info.value.path()).read_text()
    status, body = server.get("csv", run="a_stepscope", tool="framework_op_stats")
    assert status == 200 and text == body.decode()
    rows = list(csv.reader(io.StringIO(text)))
    assert len(rows) == 1 + len(server.data(run="a_stepscope", tool="framework_op_stats")["ops"])


def test_idle_toggle_changes_the_table(watched: Watched, server: Server) -> None:
    _open(watched, server, "a_stepscope", "framework_op_stats")
    page = watched.page
    before = len(page.query_selector_all("#ops-table tbody tr"))
    page.check("#include-idle")
    page.wait_for_selector("#ops-table td[data-key=type]:text-is('IDLE')")
    with_idle = server.data(run="a_stepscope", tool="framework_op_stats", include_idle="true")
    assert len(page.query_selector_all("#ops-table tbody tr")) == len(with_idle["ops"]) > before
    href = page.get_attribute("#export-csv", "href")
    assert "include_idle=true" in href
    page.uncheck("#include-idle")
    page.wait_for_function(
        "n => document.querySelectorAll('#ops-table tbody tr').length === n", arg=before)


def test_script_in_op_name_renders_as_text(watched: Watched, server: Server) -> None:
    _open(watched, server, "a_stepscope", "overview_page")
    page = watched.page
    names = [c.text_content() for c in page.query_selector_all("#top-ops td[data-key=name]")]
    assert EVIL_OP in names
    assert page.query_selector("#top-ops img") is None
    _open(watched, server, "a_stepscope", "framework_op_stats")
    page.fill("#op-filter", "onerror")
    cells = page.query_selector_all("#ops-table td[data-key=name]")
    assert [c.text_content() for c in cells] == [EVIL_OP]
    assert page.query_selector("main img") is None
    page.hover("#pie-host-op canvas")  # chart tooltips escape names too
    page.wait_for_timeout(200)
    assert page.query_selector("img[src=x]") is None


def test_host_choice(watched: Watched, server: Server) -> None:
    _open(watched, server, "e_two_hosts", "overview_page")
    page = watched.page
    options = page.eval_on_selector_all("#host option", "os => os.map(o => o.value)")
    assert options == ["", "worker_a", "worker_b"]
    assert int(page.get_attribute("#step-count", "data-value")) == server.data(
        run="e_two_hosts", tool="overview_page")["steps"]["count"]
    page.select_option("#host", "worker_b")
    page.wait_for_selector("h1:has-text('worker_b')")
    assert "host=worker_b" in page.url
    want = server.data(run="e_two_hosts", tool="overview_page", host="worker_b")
    assert int(page.get_attribute("#step-count", "data-value")) == want["steps"]["count"] == 6
    shot(watched, "overview-one-host")


def test_recommendation_links_to_its_tool(watched: Watched, server: Server) -> None:
    api = server.data(run="a_stepscope", tool="overview_page")
    assert api["recommendation"]["next_tool"] == "ops"
    _open(watched, server, "a_stepscope", "overview_page")
    watched.page.click("#next-tool")
    watched.page.wait_for_selector("#ops-page")
    assert "tool=framework_op_stats" in watched.page.url


def test_new_run_appears_on_reload(watched: Watched, server: Server, logdir: Path) -> None:
    _open(watched, server, "a_stepscope", "overview_page")
    late = logdir / "plugins" / "profile" / "z_late"
    late.mkdir()
    try:
        shutil.copy(logdir / "plugins" / "profile" / "a_stepscope" / "vm.xplane.pb", late)
        watched.page.click("#reload")
        watched.page.wait_for_selector("#run option[value=z_late]", state="attached")
        watched.page.select_option("#run", "z_late")
        watched.page.wait_for_selector("h1:has-text('z_late')")
    finally:
        shutil.rmtree(late)


def test_progress_is_shown_while_the_server_loads(watched: Watched, server: Server) -> None:
    """The first answer is the server's 202 'still loading' form; the page shows it."""
    page = watched.page
    progress = {"status": "loading", "done_bytes": 512 * 1024, "total_bytes": 1024 * 1024,
                "file": "vm.xplane.pb"}
    answered: list[str] = []
    loaded: list[bool] = []

    def still_loading_until_released(route: Any) -> None:
        if loaded:
            route.continue_()
        else:
            answered.append(route.request.url)
            route.fulfill(status=202, content_type="application/json", body=json.dumps(progress))

    page.route("**/api/data?*", still_loading_until_released)
    page.goto(server.base + "#run=a_stepscope&tool=overview_page")
    page.wait_for_selector("#loading")
    assert page.get_attribute("#loading [role=progressbar]", "aria-valuenow") == "50"
    assert "512 KiB of 1.00 MiB" in page.text_content("#loading")
    shot(watched, "loading-progress")
    loaded.append(True)
    page.wait_for_selector("#overview-page")
    assert len(answered) >= 1


# A training process with stepscope's profiler server on a port it prints.
LIVE_WORKER = """
import sys, time
import stepscope
print("ready", stepscope.server.start(0), flush=True)
step = 0
while True:
    with stepscope.Trace("train", step_num=step, _r=1):
        with stepscope.Trace("live_worker_op"):
            sum(i * i for i in range(3000))
    step += 1
    time.sleep(0.001)
"""


@pytest.fixture
def live_worker() -> Iterator[int]:
    proc = subprocess.Popen([sys.executable, "-c", LIVE_WORKER], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("ready"), line
        yield int(line.split()[1])
    finally:
        proc.kill()
        proc.wait(timeout=30)


def test_capture_dialog_captures_a_live_worker(watched: Watched, server: Server,
                                               live_worker: int, logdir: Path) -> None:
    _open(watched, server, "a_stepscope", "overview_page")
    page = watched.page
    before = set((logdir / "plugins" / "profile").iterdir())
    page.click("#capture")
    dead = free_port()  # nothing listens there: that worker fails, the other still lands
    page.fill("#capture-addr", f"grpc://127.0.0.1:{live_worker},grpc://127.0.0.1:{dead}")
    page.fill("#capture-duration", "500")
    page.fill("#capture-attempts", "1")
    page.select_option("#capture-python-level", "0")
    shot(watched, "capture-dialog")
    page.click("#capture-go")
    page.wait_for_selector(f"#capture-status [data-worker='127.0.0.1_{dead}'].worker-failed")
    page.wait_for_selector(f"#capture-status [data-worker='127.0.0.1_{live_worker}'].worker-done")
    shot(watched, "capture-result")
    (new,) = set((logdir / "plugins" / "profile").iterdir()) - before
    try:
        assert [p.name for p in new.iterdir()] == [f"127.0.0.1_{live_worker}.xplane.pb"]
        page.wait_for_selector(f"h1:has-text('{new.name}')")  # the new run opened
        assert page.eval_on_selector("#run", "s => s.value") == new.name
        assert "unreachable" in page.text_content(
            f"#capture-status [data-worker='127.0.0.1_{dead}']")
        page.click("#capture-close")
        names = [c.text_content() for c in page.query_selector_all("#top-ops td[data-key=name]")]
        assert "live_worker_op" in names
    finally:
        shutil.rmtree(new)


def test_capture_dialog_reports_errors(watched: Watched, server: Server) -> None:
    watched.expect_console_error(r"status of 400 \(Bad Request\)")  # the refusal it shows
    _open(watched, server, "a_stepscope", "overview_page")
    page = watched.page
    page.click("#capture")
    page.fill("#capture-addr", "http://not-grpc")
    page.click("#capture-go")
    page.wait_for_selector("#capture-status [role=alert]")
    assert "grpc" in page.text_content("#capture-status").lower()


def test_kernel_stats_page_on_the_gpu_fixture(watched: Watched, server: Server) -> None:
    _open(watched, server, "d_gpu_v100", "kernel_stats")
    api = server.data(run="d_gpu_v100", tool="kernel_stats")
    page = watched.page
    shot(watched, "kernels-d_gpu_v100")
    assert api["rows"]
    # Each kernel's name shortened as the terminal shortens it; the whole name on hover.
    shown = page.eval_on_selector_all("#kernel-table td[data-key=kernel] .clip",
                                      "ds => ds.map(d => [d.textContent, d.title])")
    full = [r["kernel"] for r in api["rows"]][:2000]
    assert [title for _, title in shown] == full
    assert [text for text, _ in shown] == [short_name(k) for k in full]
    assert any("<…>" in text for text, _ in shown)  # Eigen's templated kernels
    sizes = page.eval_on_selector_all("#kernel-table td[data-key=shared_memory_bytes]",
                                      "tds => tds.map(t => t.textContent)")
    assert [s for s in sizes if s != "–"] == [
        size_text(r["shared_memory_bytes"]) for r in api["rows"][:2000]
        if r["shared_memory_bytes"] is not None]
    assert values(watched, "#kernel-table td[data-key=total_us]") == pytest.approx(
        [r["total_us"] for r in api["rows"]][:2000])
    assert page.query_selector("#pie-kernels canvas") is not None


def test_kernel_stats_page_without_a_gpu(watched: Watched, server: Server) -> None:
    _open(watched, server, "a_stepscope", "kernel_stats")
    assert "No GPU kernels" in watched.page.text_content("#no-kernels")
