"""The web UI in a real headless Chromium against a real `stepscope serve` on 127.0.0.1.

Runs: one profiled by stepscope (with an op named like an HTML tag), one by TensorFlow, one
PyTorch trace, one recorded 8-GPU TensorFlow profile from ../shared/fixtures, and a run with
two hosts. Every test records the page's network requests and fails on any that leaves the
served origin, on any script error and on any dialog. Screenshots go to test-artifacts/ui/.
"""

from __future__ import annotations

import csv
import http.client
import io
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

from conftest import FIXTURES
from workloads import EVIL_OP, TF_CUSTOM_LOOP, TORCH_LOOP, make_stepscope_run, run_script

ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts" / "ui"
GPU_FIXTURE = FIXTURES / "xprof/demo/plugins/profile/GPU-multi-worker/34.83.195.179_6003.xplane.pb"
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update",
                  "--disable-sync", "--disable-default-apps"]
PAGE_ROOT = {"overview_page": "#overview-page", "framework_op_stats": "#ops-page",
             "kernel_stats": "#kernels-page"}
RUNS = ["a_stepscope", "b_tensorflow", "c_pytorch", "d_gpu_v100", "e_two_hosts"]


def _chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    if os.environ.get("STEPSCOPE_REQUIRE_BROWSER"):
        pytest.fail("Chromium is required (STEPSCOPE_REQUIRE_BROWSER) but not installed.")
    pytest.skip("no Chromium on this machine (`make browser` installs Debian's)")


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
    return root


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """A running `stepscope serve` and a little client for its API."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.base = f"http://127.0.0.1:{port}/"

    def get(self, route: str, **params: str) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        conn.request("GET", f"/api/{route}?{urlencode(params)}")
        reply = conn.getresponse()
        return reply.status, reply.read()

    def data(self, **params: str) -> Any:
        for _ in range(1200):
            status, body = self.get("data", **params)
            if status != 202:
                assert status == 200, body
                return json.loads(body)
            time.sleep(0.1)
        raise AssertionError("run never loaded")


@pytest.fixture(scope="module")
def server(logdir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    port = _free_port()
    env = {**os.environ, "STEPSCOPE_CACHE_DIR": str(tmp_path_factory.mktemp("cache"))}
    proc = subprocess.Popen([sys.executable, "-m", "stepscope", "serve", "--logdir",
                             str(logdir), "--port", str(port)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    srv = Server(port)
    try:
        for _ in range(300):
            if proc.poll() is not None:
                raise AssertionError(proc.stderr.read().decode() if proc.stderr else "")
            try:
                if srv.get("runs")[0] == 200:
                    break
            except OSError:
                time.sleep(0.1)
        yield srv
    finally:
        proc.terminate()
        proc.wait(timeout=20)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    executable = _chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=executable, args=CHROMIUM_FLAGS)
        yield b
        b.close()


class Watched:
    """A page and what it did: every request, script error and dialog."""

    def __init__(self, page: Any) -> None:
        self.page = page
        self.requests: list[str] = []
        self.errors: list[str] = []
        self.dialogs: list[str] = []
        page.on("request", lambda r: self.requests.append(r.url))
        page.on("pageerror", lambda e: self.errors.append(str(e)))
        page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))


@pytest.fixture
def watched(browser: Any, server: Server) -> Iterator[Watched]:
    context = browser.new_context(viewport={"width": 1400, "height": 1000},
                                  accept_downloads=True)
    page = context.new_page()
    page.set_default_timeout(120_000)
    w = Watched(page)
    yield w
    context.close()
    outside = [u for u in w.requests if not u.startswith(server.base)]
    assert not outside, f"requests outside {server.base}: {outside}"
    assert not w.errors, w.errors
    assert not w.dialogs, f"a dialog opened (script ran?): {w.dialogs}"


def _open(w: Watched, server: Server, run: str, tool: str, host: str = "") -> None:
    params = {"run": run, **({"host": host} if host else {}), "tool": tool}
    w.page.goto(server.base + "#" + urlencode(params))
    w.page.wait_for_selector(PAGE_ROOT[tool])


def _shot(w: Watched, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    w.page.wait_for_timeout(300)  # let the charts draw
    w.page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def _values(w: Watched, selector: str) -> list[float]:
    return [float(v) for v in w.page.eval_on_selector_all(
        selector, "cells => cells.map(c => c.dataset.value)")]


@pytest.mark.parametrize("run", RUNS)
def test_overview_page_shows_the_api_numbers(watched: Watched, server: Server,
                                             run: str) -> None:
    _open(watched, server, run, "overview_page")
    api = server.data(run=run, tool="overview_page")
    page = watched.page
    _shot(watched, f"overview-{run}")
    if api["steps"]["count"]:
        assert float(page.get_attribute("#avg-step-ms", "data-value")) == pytest.approx(
            api["steps"]["avg_ms"])
        assert page.text_content("#avg-step-ms") == f"{api['steps']['avg_ms']:.3f}"
        assert int(page.get_attribute("#step-count", "data-value")) == api["steps"]["count"]
        shares = {row.get_attribute("data-category"): float(
            row.query_selector("td:nth-child(3)").get_attribute("data-value"))
            for row in page.query_selector_all("#breakdown tbody tr")}
        assert shares == pytest.approx(api["breakdown"])
        assert page.query_selector("#step-graph canvas") is not None
    assert page.text_content("#verdict") == api["input"]["statement"]
    names = [c.text_content() for c in page.query_selector_all("#top-ops td[data-key=name]")]
    assert names == [o["name"] for o in api["top_ops"]]
    assert _values(watched, "#top-ops td[data-key=self_ms]") == pytest.approx(
        [o["self_ms"] for o in api["top_ops"]])
    env = page.text_content("#environment")
    assert api["environment"]["device_type"] in env
    if api["precision"]:
        assert float(page.get_attribute("#precision-16", "data-value")) == pytest.approx(
            api["precision"]["16bit_percent"])


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
    _shot(watched, f"ops-{run}")
    rows = page.query_selector_all("#ops-table tbody tr")
    assert len(rows) == min(len(api["ops"]), 2000) > 0
    names = [c.text_content() for c in page.query_selector_all("#ops-table td[data-key=name]")]
    assert names == [r["name"] for r in api["ops"]][:2000]
    assert _values(watched, "#ops-table td[data-key=self_ms]") == pytest.approx(
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
    values = _values(watched, "#ops-table td[data-key=total_ms]")
    assert values == sorted(values, reverse=True) and len(set(values)) > 1
    page.click("#ops-table th[data-key=total_ms]")
    values = _values(watched, "#ops-table td[data-key=total_ms]")
    assert values == sorted(values)
    page.click("#ops-table th[data-key=name]")
    names = [c.text_content() for c in page.query_selector_all("#ops-table td[data-key=name]")]
    assert names == sorted(names, key=lambda n: n.lower()) or names == sorted(names)
    api = server.data(run="b_tensorflow", tool="framework_op_stats")
    page.fill("#op-filter", "matmul")
    shown = [c.text_content() for c in page.query_selector_all("#ops-table td[data-key=name]")]
    want = [r["name"] for r in api["ops"] if "matmul" in r["name"].lower()]
    assert shown and sorted(shown) == sorted(want)
    _shot(watched, "ops-filtered")


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
    assert int(page.get_attribute("#step-count", "data-value")) == want["steps"]["count"] == 4
    _shot(watched, "overview-one-host")


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
    assert "512.0 KB of 1.0 MB" in page.text_content("#loading")
    _shot(watched, "loading-progress")
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
    dead = _free_port()  # nothing listens there: that worker fails, the other still lands
    page.fill("#capture-addr", f"grpc://127.0.0.1:{live_worker},grpc://127.0.0.1:{dead}")
    page.fill("#capture-duration", "500")
    page.fill("#capture-attempts", "1")
    page.select_option("#capture-python-level", "0")
    _shot(watched, "capture-dialog")
    page.click("#capture-go")
    page.wait_for_selector(f"#capture-status [data-worker='127.0.0.1_{dead}'].worker-failed")
    page.wait_for_selector(f"#capture-status [data-worker='127.0.0.1_{live_worker}'].worker-done")
    _shot(watched, "capture-result")
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
    _shot(watched, "kernels-d_gpu_v100")
    assert api["rows"]
    names = [c.text_content() for c in page.query_selector_all("#kernel-table td[data-key=kernel]")]
    assert names == [r["kernel"] for r in api["rows"]][:2000]
    assert _values(watched, "#kernel-table td[data-key=total_us]") == pytest.approx(
        [r["total_us"] for r in api["rows"]][:2000])
    assert page.query_selector("#pie-kernels canvas") is not None


def test_kernel_stats_page_without_a_gpu(watched: Watched, server: Server) -> None:
    _open(watched, server, "a_stepscope", "kernel_stats")
    assert "No GPU kernels" in watched.page.text_content("#no-kernels")
