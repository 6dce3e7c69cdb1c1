"""Trace viewer: index build time, peak memory, window-query latency and payload, first paint
in headless Chromium, on a synthetic 10M-event profile and two >= 100 MB real profiles, with
XProf's ``trace_viewer@`` conversion of the same real profiles beside them.

The real profiles are made once and kept under ``.bench-profiles/``: a TensorFlow one (a small
CNN trained with tf.data, captured remotely with host tracer level 3 and the Python tracer; see
``tf_profile.py``) and one recorded with stepscope's Python tracer (a recursive pure-Python
workload). On the TensorFlow profile, through the HTTP API of a fresh ``stepscope serve``:
request → first full-width window (cold: empty cache), → the refined (full index) window, a
warm window; the memory a load adds (peak and kept) ÷ the file's size; and every tool on a
profile opened before (a fresh server on the cache a first one left; no result cache). Each
measurement that needs a clean process (build, XProf, load) runs in a child process, so peak
RSS is that stage's own.

    .venv/bin/python benchmarks/trace_viewer.py [--events 10000000] [--queries 200] [--tf-only]
    .venv/bin/python benchmarks/trace_viewer.py --windows [PROFILE ...]

``--windows``: per profile (the 10 MB and >= 100 MB TensorFlow ones and, where
``$STEPSCOPE_BENCH_DIR`` holds one, a >= 1 GB one), a fresh server's first coarse window, first
window with events, zooms right after and once the full index is built, and the server's peak
memory ÷ the file, with XProf's ``trace_viewer@`` on the same file in the same run. The first
windows are timed from the moment the server answers (it starts reading the newest run as it
starts); ``spawn_first_events_window_s`` is timed from spawning a fresh server, start-up
included.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np

import checkout  # noqa: F401  (this checkout's sources first, for every process started)

ROOT = Path(__file__).resolve().parent.parent
PROFILES = ROOT / ".bench-profiles"
REAL_DIR = PROFILES / "trace_viewer_python"
MIN_REAL_BYTES = 100 * 1024 * 1024
XPROF_CAP_BYTES = 10_000_000_000  # XProf's address space on a profile of 500 MB or more


def synthetic_table(n_events: int) -> Any:
    """A host table of ``n_events`` nested events (1 + 4 + 20 per unit) on 16 threads."""
    from stepscope.model.events import MISSING, TYPED_STATS, EventTable, Plane, no_stats

    units = n_events // 25
    threads = 16
    unit = np.arange(units, dtype=np.int64)
    line0 = unit % threads
    t0 = (unit // threads) * 1_000_000 + line0 * 7_919
    child = np.arange(4, dtype=np.int64)
    grand = np.arange(5, dtype=np.int64)
    c_start = (t0[:, None] + 10_000 + child[None, :] * 240_000).reshape(-1)
    g_start = (c_start[:, None] + 5_000 + grand[None, :] * 40_000).reshape(-1)
    start = np.concatenate([t0, c_start, g_start])
    dur = np.concatenate([np.full(units, 980_000), np.full(units * 4, 220_000),
                          np.full(units * 20, 30_000)]).astype(np.int64)
    dur[len(t0) + len(c_start)::7] = 900  # some narrow ones among the grandchildren
    line = np.concatenate([line0, np.repeat(line0, 4), np.repeat(line0, 20)]).astype(np.int32)
    n = len(start)
    names = [f"op_{i}" for i in range(1000)]
    empty = no_stats()
    return EventTable(
        planes=[Plane(0, "/host:CPU")], line_plane=np.zeros(threads, np.int32),
        line_id=np.arange(threads, dtype=np.int64),
        line_name=[f"thread {i}" for i in range(threads)],
        line=line, name=(np.arange(n) % 1000).astype(np.int32), start_ns=start,
        duration_ns=dur, typed={k: np.full(n, MISSING, np.int64) for k in TYPED_STATS},
        names=names, stats=empty, hostnames=["synthetic"])


RECORD = r"""
import sys, stepscope
def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)
def leaf(x):
    return x * 2
def work(k):
    s = 0
    for i in range(200):
        s += leaf(i)
    return s + fib(12)
opts = stepscope.ProfilerOptions(python_tracer_level=1, counter_interval_ms=10,
                                 max_events=20_000_000)
with stepscope.Profile(sys.argv[1], options=opts):
    for step in range(int(sys.argv[2])):
        with stepscope.Trace("train", step_num=step, _r=1):
            for k in range(40):
                work(k)
"""


def real_profile() -> Path:
    """The >= 100 MB real profile (recorded on first use)."""
    files = sorted(REAL_DIR.glob("plugins/profile/*/*.xplane.pb"))
    if files and files[-1].stat().st_size >= MIN_REAL_BYTES:
        return files[-1]
    shutil.rmtree(REAL_DIR, ignore_errors=True)
    steps = 40
    while True:
        subprocess.run([sys.executable, "-c", RECORD, str(REAL_DIR), str(steps)], check=True)
        files = sorted(REAL_DIR.glob("plugins/profile/*/*.xplane.pb"))
        if files[-1].stat().st_size >= MIN_REAL_BYTES:
            return files[-1]
        shutil.rmtree(REAL_DIR)
        steps *= 2


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _queries(index: Any, n: int, width: int, seed: int) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    times, sizes = [], []
    span = index.span_ns
    for i in range(n):
        if i == 0:
            a, b = 0, span
        else:
            length = int(span * 10 ** rng.uniform(-5, 0))
            a = int(rng.integers(0, max(span - length, 1)))
            b = a + max(length, 1)
        t = time.perf_counter()
        result = index.query(a, b, width)
        body = json.dumps(result, separators=(",", ":"))
        times.append(time.perf_counter() - t)
        sizes.append(len(body))
    ms = sorted(x * 1000 for x in times)
    return {"median_ms": statistics.median(ms), "p99_ms": ms[min(int(len(ms) * 0.99), len(ms) - 1)],
            "full_view_ms": times[0] * 1000, "payload_median_kb": statistics.median(sizes) / 1024,
            "payload_max_kb": max(sizes) / 1024}


def child_synthetic(n_events: int, n_queries: int) -> dict[str, Any]:
    """Build and query the synthetic index in this (child) process."""
    from stepscope.analysis.trace.trace_index import build
    from stepscope.analysis.trace.trace_overview import TraceOverview

    table = synthetic_table(n_events)
    before = _peak_rss_mb()
    # First paint, cold: the coarse overview made and its full-width window answered, as
    # the server does before the index is built.
    t = time.perf_counter()
    overview = TraceOverview(table)
    first = overview.query(-overview.span_ns // 2, overview.span_ns * 3 // 2, 2800)
    json.dumps(first, separators=(",", ":"))
    first_s = time.perf_counter() - t
    del overview, first
    t = time.perf_counter()
    index = build(table)
    build_s = time.perf_counter() - t
    index_mb = sum(a.nbytes for a in index.arrays.values()) / 2**20
    return {"events": len(table), "first_window_cold_s": first_s, "build_s": build_s,
            "table_peak_rss_mb": before,
            "peak_rss_mb": _peak_rss_mb(), "index_mb": index_mb,
            **_queries(index, n_queries, 2000, 1)}


def child_real(path: str, n_queries: int) -> dict[str, Any]:
    """Load, build and query the real profile's index in this (child) process."""
    from stepscope.analysis.trace.trace_index import build
    from stepscope.formats.run_reader import load

    t = time.perf_counter()
    profile = load(path, use_cache=False)
    load_s = time.perf_counter() - t
    table = next(iter(profile.hosts.values()))
    t = time.perf_counter()
    index = build(table)
    build_s = time.perf_counter() - t
    index_mb = sum(a.nbytes for a in index.arrays.values()) / 2**20
    return {"events": len(table), "load_s": load_s, "build_s": build_s,
            "peak_rss_mb": _peak_rss_mb(), "index_mb": index_mb,
            **_queries(index, n_queries, 2000, 2)}


def child_xprof(path: str) -> dict[str, Any]:
    """XProf's trace viewer conversion of the real profile."""
    from xprof.convert import raw_to_tool_data

    base = _rss_mb()
    t = time.perf_counter()
    data, _ = raw_to_tool_data.xspace_to_tool_data([path], "trace_viewer@",
                                                   {"use_saved_result": False})
    seconds = time.perf_counter() - t
    return {"seconds": seconds, "bytes": len(data) if data else 0,
            "peak_rss_mb": _peak_rss_mb(), "added_peak_mb": _peak_rss_mb() - base}


def child_load(path: str) -> dict[str, Any]:
    """The memory one load of the file adds to this (child) process: at its peak, and kept
    once loaded (the host table), with no cache."""
    from stepscope.formats.run_reader import load_file

    base = _rss_mb()
    t = time.perf_counter()
    table = load_file(Path(path), use_cache=False)
    seconds = time.perf_counter() - t
    return {"events": len(table), "load_s": seconds, "added_peak_mb": _peak_rss_mb() - base,
            "kept_mb": _rss_mb() - base}


def child_fill_cache(path: str) -> dict[str, Any]:
    """Open the run once, so that the cache (``STEPSCOPE_CACHE_DIR``) holds its table and run
    model."""
    from stepscope.run.loader import open_run_model

    t = time.perf_counter()
    open_run_model(Path(path).parent)
    return {"seconds": time.perf_counter() - t}


def _in_child(name: str, *args: str, env: dict[str, str] | None = None,
              prefix: list[str] | None = None) -> dict[str, Any]:
    done = subprocess.run([*(prefix or []), sys.executable, __file__, "--child", name, *args],
                          capture_output=True, text=True, check=False, timeout=3600,
                          env={**os.environ, **(env or {})})
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr else "failed"}
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


class _Server:
    """``stepscope serve`` of a logdir holding ``path`` as run ``real``, with its own cache."""

    def __init__(self, path: Path, tmp: Path) -> None:
        logdir = tmp / "logs"
        run = logdir / "plugins" / "profile" / "real"
        if not run.exists():
            run.mkdir(parents=True)
            (run / path.name).symlink_to(path.resolve())
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        env = {**os.environ, "STEPSCOPE_CACHE_DIR": str(tmp / "cache")}
        self.spawned = time.perf_counter()
        self.proc = subprocess.Popen([sys.executable, "-m", "stepscope", "serve", "--logdir",
                                      str(logdir), "--port", str(self.port)], env=env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def get(self, route: str, **params: Any) -> tuple[int, Any]:
        """GET /api/<route>: (status, JSON body)."""
        query = urllib.parse.urlencode({"run": "real", **params})
        url = f"http://127.0.0.1:{self.port}/api/{route}?{query}"
        with urllib.request.urlopen(url, timeout=600) as reply:
            return reply.status, json.loads(reply.read())

    def poll(self, route: str, **params: Any) -> Any:
        """GET until the answer is 200 (not 202: still loading or indexing)."""
        while True:
            status, body = self.get(route, **params)
            if status == 200:
                return body
            time.sleep(0.05)

    def wait_ready(self) -> None:
        """Wait until the run is open (the server may not have listed it yet: 404)."""
        while True:
            try:
                if self.get("status")[1].get("status") == "ready":
                    return
            except urllib.error.HTTPError as err:
                if err.code != 404:
                    raise
            time.sleep(0.01)

    def first_events_window(self) -> float:
        """Seconds from the server's spawn to its first full-width window with events, asked
        as the page asks (the run list as soon as the server answers, then the tool data and
        the window; a coarse answer is asked again)."""
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.port}/api/runs", timeout=60)
                break
            except OSError:
                time.sleep(0.005)
        meta = self.poll("data", tool="trace_viewer")
        window = {"coarse": True}
        while window.get("coarse"):
            window = self.poll("trace/window", start_ns="0", end_ns=str(meta["span_ns"]),
                               width="2000")
        return time.perf_counter() - self.spawned

    def wait_up(self) -> None:
        """Wait until the server answers (its start is not what is measured)."""
        deadline = time.monotonic() + 600  # a loaded machine starts it slowly
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.port}/api/runs", timeout=5)
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("the server never started")

    def rss_mb(self, field: str = "VmRSS") -> float:
        """The server's resident memory (``VmHWM``: its peak so far; ``RssAnon``: its
        anonymous part, ``RssFile``: pages of files it maps, which the kernel can reclaim)."""
        try:
            text = Path(f"/proc/{self.proc.pid}/status").read_text()
        except OSError:
            return 0.0
        for line in text.splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
        return 0.0

    def sample_peaks(self) -> dict[str, float]:
        """Start sampling the server's anonymous and file-backed resident memory every 20 ms
        (the kernel keeps no peak of either): the dict returned holds their maxima so far."""
        peaks = {"RssAnon": 0.0, "RssFile": 0.0}

        def sample() -> None:
            while self.proc.poll() is None:
                for field in peaks:
                    peaks[field] = max(peaks[field], self.rss_mb(field))
                time.sleep(0.02)

        threading.Thread(target=sample, daemon=True).start()
        return peaks

    def url(self, tool: str) -> str:
        return f"http://127.0.0.1:{self.port}/#run=real&tool={tool}"

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


# Something drawn: events, or the coarse overview's blocks while the index builds.
_DRAWN = ("() => document.querySelector('#trace-canvas') "
          "&& Number(document.querySelector('#trace-canvas').dataset.drawn || 0) "
          "+ Number(document.querySelector('#trace-canvas').dataset.blocks || 0) > 0")
# Events drawn from the full index.
_REFINED = ("() => document.querySelector('#trace-canvas') "
            "&& Number(document.querySelector('#trace-canvas').dataset.drawn || 0) > 0 "
            "&& !document.querySelector('#trace-canvas').dataset.coarse")


def _open(browser: Any, url: str, height: int = 1000) -> Any:
    """A 1600 px wide page on ``url``, asking again while the server is still starting."""
    page = browser.new_page(viewport={"width": 1600, "height": height})
    page.set_default_timeout(600_000)
    for _ in range(100):  # the server may still be starting
        try:
            page.goto(url)
            return page
        except Exception:
            time.sleep(0.2)
    raise RuntimeError(f"the server never answered {url}")


def _paint(browser: Any, url: str) -> tuple[float, float]:
    """Seconds from opening ``url`` (the trace viewer) to the first picture on its canvas (the
    overview's, while the index builds), and to events drawn from the index."""
    page = _open(browser, url)
    t = time.perf_counter()
    page.wait_for_function(_DRAWN, polling=50)
    first = time.perf_counter() - t
    page.wait_for_function(_REFINED, polling=50)
    refined = time.perf_counter() - t
    page.close()
    return first, refined


_PAN = """async (frames) => {
  const t = window.stepscopeTrace;
  const next = () => new Promise((r) => requestAnimationFrame(r));
  await next();
  const gaps = [], draws = [];
  let rects = 0, blocks = 0, last = performance.now();
  for (let i = 0; i < frames; i++) {
    t.pan(i % 60 < 30 ? 0.002 : -0.002);  // back and forth, inside the fetched window
    draws.push(t.drawMs());
    rects = Math.max(rects, t.rects() + t.blocks());
    blocks = Math.max(blocks, t.blocks());
    await next();
    const now = performance.now();
    gaps.push(now - last);
    last = now;
  }
  return { gaps, draws, rects, blocks };
}"""


def _ms_stats(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    return statistics.median(ordered), ordered[min(int(len(ordered) * 0.95), len(ordered) - 1)]


def dense_trace(directory: Path, threads: int = 220, per_thread: int = 500) -> Path:
    """A Chrome trace whose whole view draws ~100,000 rectangles of >= 1 px (the page is at
    most 1,400 px wide): ``threads`` threads, each ``per_thread`` 2 µs events 1 µs apart."""
    path = directory / "dense.pt.trace.json"
    with path.open("w") as out:
        out.write('{"traceEvents":[')
        sep = ""
        for tid in range(threads):
            for i in range(per_thread):
                out.write(f'{sep}{{"ph":"X","pid":1,"tid":{tid},"ts":{i * 3},"dur":2,'
                          f'"name":"op{(tid + i) % 50}"}}')
                sep = ","
        out.write("]}")
    return path


def pan_frames(height: int, frames: int = 240) -> dict[str, Any]:
    """Frame times while panning the whole view of ``dense_trace`` (~110,000 events in the
    window) in a 1600 px wide, ``height`` px high browser window."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        return {"error": "no Chromium"}
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory(prefix="stepscope-bench-pan-") as tmp, \
            sync_playwright() as p:
        path = dense_trace(Path(tmp))
        browser = p.chromium.launch(executable_path=chromium,
                                    args=["--no-sandbox", "--disable-gpu"])
        server = _Server(path, Path(tmp) / "serve")
        try:
            page = _open(browser, server.url("trace_viewer"), height)
            page.wait_for_function(_DRAWN, polling=50)
            page.wait_for_function("() => window.stepscopeTrace.ready()", polling=50)
            result = page.evaluate(_PAN, frames)
            page.close()
        finally:
            server.close()
            browser.close()
    gap_med, gap_p95 = _ms_stats(result["gaps"])
    draw_med, draw_p95 = _ms_stats(result["draws"])
    return {"rects_drawn": int(result["rects"]), "of_them_blocks": int(result["blocks"]),
            "frame_median_ms": gap_med, "frame_p95_ms": gap_p95,
            "fps_median": 1000 / gap_med if gap_med else 0.0,
            "draw_median_ms": draw_med, "draw_p95_ms": draw_p95}


def first_paint(path: Path) -> dict[str, Any]:
    """Seconds from opening the trace viewer to events on the canvas, four ways:

    ``cold_s``: a fresh server and cache, the trace viewer opened first (load + index build);
    ``via_overview_s``: a fresh server and cache, the overview opened first (the usual way
    in), then the trace viewer as soon as the overview shows; ``warm_s``: again, same server;
    ``restart_s``: a new server on the cache the first one left (the profile reopened).
    """
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        return {"error": "no Chromium"}
    from playwright.sync_api import sync_playwright

    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="stepscope-bench-trace-") as tmp, \
            sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium,
                                    args=["--no-sandbox", "--disable-gpu"])
        server = _Server(path, Path(tmp) / "a")
        try:
            out["cold_s"], out["cold_events_s"] = _paint(browser, server.url("trace_viewer"))
            out["warm_s"] = _paint(browser, server.url("trace_viewer"))[1]
        finally:
            server.close()
        server = _Server(path, Path(tmp) / "a")
        try:
            out["restart_s"] = _paint(browser, server.url("trace_viewer"))[1]
        finally:
            server.close()
        server = _Server(path, Path(tmp) / "b")
        try:
            page = _open(browser, server.url("overview_page"))
            t = time.perf_counter()
            page.wait_for_selector("#overview-page")
            out["overview_s"] = time.perf_counter() - t
            t = time.perf_counter()
            page.evaluate("() => { location.hash = location.hash.replace("
                          "'overview_page', 'trace_viewer'); }")
            page.wait_for_function(_REFINED, polling=50)
            out["via_overview_s"] = time.perf_counter() - t
            page.close()
        finally:
            server.close()
        browser.close()
    return out


def http_window(path: Path) -> dict[str, Any]:
    """Through the HTTP API of a fresh server with an empty cache: request (the trace viewer's
    tool data, then the full-width window at 2,000 px, as the page asks) → first window
    answered; → the window answered from the full index; a warm full window; and the memory
    the server holds once the index is built, less what it held before the request."""
    size_mb = path.stat().st_size / 2**20
    with tempfile.TemporaryDirectory(prefix="stepscope-bench-http-") as tmp:
        server = _Server(path, Path(tmp))
        try:
            server.wait_up()
            before = server.rss_mb()
            t = time.perf_counter()
            meta = server.poll("data", tool="trace_viewer")
            span = str(meta["span_ns"])
            first = server.poll("trace/window", start_ns="0", end_ns=span, width="2000")
            out: dict[str, Any] = {"first_window_s": time.perf_counter() - t,
                                   "first_window_coarse": bool(first.get("coarse"))}
            window = first
            while window.get("coarse"):
                time.sleep(0.05)
                window = server.poll("trace/window", start_ns="0", end_ns=span, width="2000")
            out["full_index_window_s"] = time.perf_counter() - t
            times = []
            for _ in range(5):
                t = time.perf_counter()
                server.poll("trace/window", start_ns="0", end_ns=span, width="2000")
                times.append(time.perf_counter() - t)
            out["warm_window_ms"] = statistics.median(times) * 1000
            out["server_added_mb"] = server.rss_mb() - before
            out["server_added_per_file_mb"] = out["server_added_mb"] / size_mb
            out["server_peak_added_mb"] = server.rss_mb("VmHWM") - before
        finally:
            server.close()
    return out


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _wait_idle(pid: int, quiet_s: float = 1.5, limit_s: float = 900) -> float:
    """Seconds until the process has used no CPU for ``quiet_s`` (its background work, the
    full index's build, done)."""
    t = time.perf_counter()
    last, since = _cpu_s(pid), time.perf_counter()
    while time.perf_counter() - t < limit_s:
        time.sleep(0.25)
        now = _cpu_s(pid)
        if now - last > 0.02:
            last, since = now, time.perf_counter()
        elif time.perf_counter() - since >= quiet_s:
            return since - t
    return time.perf_counter() - t


def _kept(cache: Path, limit_s: float = 900) -> None:
    """Wait until the server has written its host's table and trace index into ``cache``
    (on a loaded machine a server writing them can look idle: no CPU while it waits on the
    disk)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        names = [p.name for p in cache.glob("*.cache")]
        if any(".trace_index." in n for n in names) and any(n.endswith(".table.cache")
                                                             for n in names):
            return
        time.sleep(0.25)


def _zooms(server: _Server, span: int, seed: int, pending: list[int] | None = None
           ) -> list[float]:
    """Milliseconds of one window request each at 1/10 to 1/100,000 of the trace, at random
    places, 2,000 px wide (each answered with events, never a coarse answer); ``pending``
    gets how many were answered before their flows were sorted (``flows_pending``: the page
    asks again for those)."""
    rng = np.random.default_rng(seed)
    out = []
    for k in range(1, 6):
        length = max(span // 10 ** k, 1)
        a = int(rng.integers(0, max(span - length, 1)))
        t = time.perf_counter()
        body = server.poll("trace/window", start_ns=str(a), end_ns=str(a + length), width="2000")
        out.append((time.perf_counter() - t) * 1000)
        if body.get("coarse"):
            raise RuntimeError("a zoom was answered by the coarse overview")
        if pending is not None and body.get("flows_pending"):
            pending.append(k)
    return out


def viewer_windows(path: Path) -> dict[str, Any]:
    """Through the HTTP API of a fresh ``stepscope serve`` with an empty cache, as the page
    asks (tool data, then the full-width window at 2,000 px): request → first window (the
    coarse overview's), → first window with events (exact: the per-track table's or the full
    index's), zooms right after it, then, once the server is idle (the full index built and
    kept), zooms again; the server's peak and kept memory ÷ the file's size; then a new server
    on the cache the first one left: its first window with events and peak memory."""
    size_mb = path.stat().st_size / 2**20
    with tempfile.TemporaryDirectory(prefix="stepscope-bench-win-") as tmp:
        server = _Server(path, Path(tmp))
        try:
            server.wait_up()
            base = server.rss_mb()
            base_anon = server.rss_mb("RssAnon")
            peaks = server.sample_peaks()
            t = time.perf_counter()
            meta = server.poll("data", tool="trace_viewer")
            span = int(meta["span_ns"])
            window = server.poll("trace/window", start_ns="0", end_ns=str(span), width="2000")
            out: dict[str, Any] = {"first_window_s": time.perf_counter() - t,
                                   "first_window_coarse": bool(window.get("coarse"))}
            while window.get("coarse"):
                time.sleep(0.02)
                window = server.poll("trace/window", start_ns="0", end_ns=str(span),
                                     width="2000")
            out["first_events_window_s"] = time.perf_counter() - t
            out["events_drawn"] = len(window["events"]["id"])
            out["blocks_drawn"] = len(window["aggregates"]["count"])
            pending: list[int] = []
            zooms = _zooms(server, span, 3, pending)
            out["zoom_after_ms"] = ", ".join(f"{z:.0f}" for z in zooms)
            out["zoom_after_max_ms"] = max(zooms)
            out["zoom_after_flows_pending"] = len(pending)
            _kept(Path(tmp) / "cache")
            out["index_built_s"] = _wait_idle(server.proc.pid) + time.perf_counter() - t
            zooms = _zooms(server, span, 4)
            out["zoom_indexed_ms"] = ", ".join(f"{z:.0f}" for z in zooms)
            out["server_base_mb"] = base
            out["server_peak_per_file"] = server.rss_mb("VmHWM") / size_mb
            out["server_peak_added_per_file"] = (server.rss_mb("VmHWM") - base) / size_mb
            out["server_kept_per_file"] = server.rss_mb() / size_mb
            # Anonymous memory apart from pages of mapped files (the cache's entries), which
            # the kernel reclaims under pressure: sampled peaks, and what is kept at the end.
            out["server_peak_anon_per_file"] = peaks["RssAnon"] / size_mb
            out["server_peak_anon_added_per_file"] = (peaks["RssAnon"] - base_anon) / size_mb
            out["server_kept_anon_per_file"] = server.rss_mb("RssAnon") / size_mb
            out["server_peak_file_mb"] = peaks["RssFile"]
            out["server_kept_file_mb"] = server.rss_mb("RssFile")
        finally:
            server.close()
        # A new server on the cache the first one left (the profile opened again).
        server = _Server(path, Path(tmp))
        try:
            server.wait_up()
            peaks = server.sample_peaks()
            t = time.perf_counter()
            meta = server.poll("data", tool="trace_viewer")
            window = {"coarse": True}
            while window.get("coarse"):
                window = server.poll("trace/window", start_ns="0", end_ns=str(meta["span_ns"]),
                                     width="2000")
            out["reopened_first_events_window_s"] = time.perf_counter() - t
            out["reopened_peak_per_file"] = server.rss_mb("VmHWM") / size_mb
            _wait_idle(server.proc.pid)
            out["reopened_peak_anon_per_file"] = peaks["RssAnon"] / size_mb
            out["reopened_kept_anon_per_file"] = server.rss_mb("RssAnon") / size_mb
            out["reopened_kept_file_mb"] = server.rss_mb("RssFile")
        finally:
            server.close()
    with tempfile.TemporaryDirectory(prefix="stepscope-bench-win-") as tmp:
        # Start-up included: from spawning a fresh server (empty cache) to its first window
        # with events.
        server = _Server(path, Path(tmp))
        try:
            out["spawn_first_events_window_s"] = server.first_events_window()
        finally:
            server.close()
    return out


def viewer_report(path: Path) -> dict[str, Any]:
    """First windows, zooms and server memory on ``path``, XProf's trace viewer beside them in
    the same run (a profile of 500 MB or more: one at a time machine-wide, XProf capped)."""
    size_mb = path.stat().st_size / 2**20
    print(f"\nTrace viewer windows: {path} ({size_mb:,.0f} MB)")
    ours = viewer_windows(path)
    _print(ours, indent="    ")
    prefix: list[str] = []
    if size_mb >= 500:
        prefix = ["prlimit", f"--as={XPROF_CAP_BYTES}"]
    xprof = _in_child("xprof", str(path), prefix=prefix)
    if "error" in xprof and size_mb >= 500:
        xprof["error"] = f"ran out of {XPROF_CAP_BYTES / 1e9:.0f} GB ({xprof['error']})"
    xprof["peak_per_file"] = xprof.get("peak_rss_mb", 0.0) / size_mb
    print("  XProf trace_viewer@ (xspace_to_tool_data, cold, the same file):")
    _print(xprof, indent="    ")
    if "seconds" in xprof:
        print("  ratios (stepscope ÷ XProf; goals: first window with events <= 0.1x, <= 2 s at "
              "1 GB; zoom <= 100 ms; server peak <= 2x the file):")
        _print({"first_window": ours["first_window_s"] / xprof["seconds"],
                "first_events_window": ours["first_events_window_s"] / xprof["seconds"],
                "spawn_first_events_window": ours["spawn_first_events_window_s"]
                / xprof["seconds"]},
               indent="    ")
    return {"ours": ours, "xprof": xprof}


def viewer_profiles() -> list[Path]:
    """The profiles the window figures are taken on: the 10 MB and >= 100 MB TensorFlow ones
    (captured on first use) and a >= 1 GB one, where ``$STEPSCOPE_BENCH_DIR`` holds it."""
    from tf_profile import SMALL_DIR, tf_profile

    paths = [tf_profile(10 * 2**20, SMALL_DIR), tf_profile()]
    bench = os.environ.get("STEPSCOPE_BENCH_DIR")
    if bench:
        big = [p for p in Path(bench).rglob("*.xplane.pb") if p.stat().st_size >= 2**30]
        paths += sorted(big)[:1]
    return paths


def tools_cached(path: Path) -> dict[str, Any]:
    """Each tool's data through a fresh server whose cache holds the run's table and run model
    (no result cache): the run's open, then each tool's first answer; the trace viewer's
    answer is its tool data and then its full-width window (from the cached preview, coarse).
    The cache is filled as a person leaves it: a first server opened the run and every tool,
    the trace viewer until its index was built. ``trace_viewer_unopened_ms``: the trace
    viewer on a cache that only the run model filled (never opened before: table read,
    overview made)."""
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="stepscope-bench-tools-") as tmp:
        filled = _in_child("fill_cache", str(path), env={"STEPSCOPE_CACHE_DIR":
                                                         str(Path(tmp) / "cache")})
        if "error" in filled:
            return filled
        server = _Server(path, Path(tmp))
        try:
            server.wait_up()
            server.wait_ready()
            t = time.perf_counter()
            meta = server.poll("data", tool="trace_viewer")
            server.poll("trace/window", start_ns="0", end_ns=str(meta["span_ns"]), width="2000")
            out["trace_viewer_unopened_ms"] = (time.perf_counter() - t) * 1000
            tools = [x["name"] for x in server.get("tools")[1]["tools"]]
            for tool in tools:
                server.poll("data", tool=tool)
            window: dict[str, Any] = {"coarse": True}
            while window.get("coarse"):
                window = server.poll("trace/window", start_ns="0", end_ns=str(meta["span_ns"]),
                                     width="2000")
        finally:
            server.close()
        server = _Server(path, Path(tmp))
        try:
            server.wait_up()
            t = time.perf_counter()
            server.wait_ready()
            out["open_run_ms"] = (time.perf_counter() - t) * 1000
            for tool in tools:
                t = time.perf_counter()
                meta = server.poll("data", tool=tool)
                if tool == "trace_viewer":
                    first = server.poll("trace/window", start_ns="0",
                                        end_ns=str(meta["span_ns"]), width="2000")
                    out["trace_viewer_first_window_coarse"] = bool(first.get("coarse"))
                out[f"{tool}_ms"] = (time.perf_counter() - t) * 1000
        finally:
            server.close()
    slowest = max((v for k, v in out.items() if k.endswith("_ms") and k != "open_run_ms"
                   and k != "trace_viewer_unopened_ms"), default=0.0)
    out["slowest_tool_ms"] = slowest
    return out


def tf_report(path: Path) -> dict[str, Any]:
    """Every figure of the TensorFlow profile, XProf's beside stepscope's."""
    size_mb = path.stat().st_size / 2**20
    print(f"\nReal TensorFlow profile: {path.relative_to(ROOT)} ({size_mb:.0f} MB, a CNN "
          "with tf.data, host tracer level 3 + Python tracer):")
    load = _in_child("load", str(path))
    load["added_peak_per_file"] = load.get("added_peak_mb", 0.0) / size_mb
    load["kept_per_file"] = load.get("kept_mb", 0.0) / size_mb
    print("  one load of the file, no cache (memory added ÷ file size):")
    _print(load, indent="    ")
    print("  through the HTTP API, a fresh server and an empty cache:")
    http = http_window(path)
    _print(http, indent="    ")
    print("  every tool on a profile opened before (table, run model, trace preview and index "
          "cached; no result cache),\n  a fresh server; trace_viewer: tool data + first "
          "window:")
    tools = tools_cached(path)
    _print(tools, indent="    ")
    print("  XProf trace_viewer@ on the same file (xspace_to_tool_data, cold):")
    xprof = _in_child("xprof", str(path))
    xprof["added_peak_per_file"] = xprof.get("added_peak_mb", 0.0) / size_mb
    _print(xprof, indent="    ")
    if "seconds" in xprof and "first_window_s" in http:
        print("  ratios (stepscope ÷ XProf; goal: first window <= 0.1x, load memory <= 2x the "
              "file):")
        _print({"first_window": http["first_window_s"] / xprof["seconds"],
                "full_index_window": http["full_index_window_s"] / xprof["seconds"],
                "load_peak_memory": load.get("added_peak_mb", 0.0)
                / max(xprof["added_peak_mb"], 1e-9)}, indent="    ")
    return {"load": load, "http": http, "tools": tools, "xprof": xprof}


def main() -> None:
    """Run every measurement and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--tf-only", action="store_true",
                        help="only the TensorFlow profile's figures")
    parser.add_argument("--windows", nargs="*", type=Path, metavar="PROFILE",
                        help="only the trace viewer's first windows, zooms and server memory "
                        "beside XProf (on the profiles named, else the 10 MB, >= 100 MB and "
                        ">= 1 GB ones); hold flock /work/big.lock for one of 500 MB or more")
    parser.add_argument("--child", nargs="+")
    args = parser.parse_args()
    if args.windows is not None:
        for path in args.windows or viewer_profiles():
            viewer_report(path)
        return
    if args.child:
        name, *rest = args.child
        fn = {"synthetic": lambda: child_synthetic(int(rest[0]), int(rest[1])),
              "real": lambda: child_real(rest[0], int(rest[1])),
              "xprof": lambda: child_xprof(rest[0]), "load": lambda: child_load(rest[0]),
              "fill_cache": lambda: child_fill_cache(rest[0])}[name]
        print(json.dumps(fn()))
        return
    from tf_profile import tf_profile

    tf_report(tf_profile())
    if args.tf_only:
        return
    print(f"Synthetic profile, {args.events:,} events (16 threads, nested 3 deep):")
    syn = _in_child("synthetic", str(args.events), str(args.queries))
    _print(syn)
    path = real_profile()
    size_mb = path.stat().st_size / 2**20
    print(f"\nReal profile: {path.relative_to(ROOT)} ({size_mb:.0f} MB, stepscope Python "
          "tracer):")
    _print(_in_child("real", str(path), str(args.queries)))
    print("  first paint in headless Chromium (open page → events drawn). cold: fresh server "
          "and cache (load + index build);\n  overview_s, via_overview_s: the overview opened "
          "first, then the trace viewer (index built meanwhile);\n  warm: same server again; "
          "restart: a new server on the cache left behind:")
    _print(first_paint(path), indent="    ")
    print("\nPanning a window of 110,000 events of >= 1 px (220 threads of 2 µs events), one pan "
          "per\nanimation frame, back and forth; 60 fps is 16.7 ms a frame. Rows off screen are "
          "not drawn:\n  a 1600x1000 browser window:")
    _print(pan_frames(1000), indent="    ")
    print("  a 1600x7600 browser window (every track on screen):")
    _print(pan_frames(7600), indent="    ")
    print("\nXProf trace_viewer@ on the same file (xspace_to_tool_data):")
    _print(_in_child("xprof", str(path)))


def _print(figures: dict[str, Any], indent: str = "  ") -> None:
    for key, value in figures.items():
        text = f"{value:,.3f}" if isinstance(value, float) else f"{value:,}" \
            if isinstance(value, int) else str(value)
        print(f"{indent}{key:20s} {text}")


if __name__ == "__main__":
    main()
