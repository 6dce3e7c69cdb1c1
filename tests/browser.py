"""What every browser test shares: a real `stepscope serve` on 127.0.0.1, a real headless
Chromium, and a watched page that fails the test on any request leaving the served origin,
any script error (thrown, or logged as a console error) and any dialog. Screenshots go to
test-artifacts/ui/."""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

from waiting import attempts, until

ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts" / "ui"
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update",
                  "--disable-sync", "--disable-default-apps"]


def chromium() -> str:
    """Chromium's path; skips the test without one (fails under STEPSCOPE_REQUIRE_BROWSER)."""
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    if os.environ.get("STEPSCOPE_REQUIRE_BROWSER"):
        pytest.fail("Chromium is required (STEPSCOPE_REQUIRE_BROWSER) but not installed.")
    pytest.skip("no Chromium on this machine (`make browser` installs Debian's)")


def free_port() -> int:
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
        """A tool's final data, asked for again while the server answers 202 (loading,
        indexing) or the trace viewer answers from its coarse overview."""
        def ask() -> Any:
            status, body = self.get("data", **params)
            if status == 202:
                return None
            assert status == 200, body
            data = json.loads(body)
            return None if isinstance(data, dict) and data.get("coarse") else data

        return until(ask, f"tool data {params}", 0.1)


@contextmanager
def serve(logdir: Path, cache_dir: Path) -> Iterator[Server]:
    """`stepscope serve --logdir logdir` on a free port, with its own cache, until closed."""
    port = free_port()
    env = {**os.environ, "STEPSCOPE_CACHE_DIR": str(cache_dir)}
    proc = subprocess.Popen([sys.executable, "-m", "stepscope", "serve", "--logdir",
                             str(logdir), "--port", str(port)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    srv = Server(port)
    try:
        for _ in attempts():
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


@contextmanager
def launch() -> Iterator[Any]:
    """A headless Chromium (skips the test where there is none)."""
    executable = chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=executable, args=CHROMIUM_FLAGS)
        yield b
        b.close()


class Watched:
    """A page and what it did: every request, script error (uncaught, or logged to the
    console as an error) and dialog."""

    def __init__(self, page: Any) -> None:
        self.page = page
        self.requests: list[str] = []
        self.errors: list[str] = []
        self.dialogs: list[str] = []
        self.expected: list[re.Pattern[str]] = []
        page.on("request", lambda r: self.requests.append(r.url))
        page.on("pageerror", lambda e: self.errors.append(f"{e.name}: {e.message}"))
        page.on("console", self._console)
        page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))

    def expect_console_error(self, pattern: str) -> None:
        """Let console errors matching ``pattern`` (a regular expression) pass: Chromium logs
        every 4xx answer as one, even those the page was meant to get and shows."""
        self.expected.append(re.compile(pattern))

    def _console(self, message: Any) -> None:
        if message.type != "error":
            return
        text = f"console error: {message.text}"
        if not any(p.search(text) for p in self.expected):
            self.errors.append(text)


@contextmanager
def watch(browser: Any, server: Server) -> Iterator[Watched]:
    """A fresh 1400x1000 page; on leaving, fails on anything it did that it must not."""
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


def shot(w: Watched, name: str, settle_ms: int = 300) -> None:
    """A full-page screenshot into test-artifacts/ui/, once the charts have drawn."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    if settle_ms:
        w.page.wait_for_timeout(settle_ms)
    w.page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def values(w: Watched, selector: str) -> list[float]:
    """The ``data-value`` numbers of the cells ``selector`` matches."""
    return [float(v) for v in w.page.eval_on_selector_all(
        selector, "cells => cells.map(c => c.dataset.value)")]


def open_trace(w: Watched, server: Server, run: str) -> None:
    """The trace viewer of ``run``, once the run is loaded and indexed and the page drawn."""
    server.data(run=run, tool="trace_viewer")
    w.page.goto(server.base + "#" + urlencode({"run": run, "tool": "trace_viewer"}))
    w.page.wait_for_selector("#trace-page")
    settle_trace(w)


def settle_trace(w: Watched) -> None:
    """Wait until the trace page has answered and drawn what it last asked for."""
    w.page.wait_for_timeout(150)
    w.page.wait_for_function("() => window.stepscopeTrace && window.stepscopeTrace.ready()")
