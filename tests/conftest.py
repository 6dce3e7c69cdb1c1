"""Shared fixtures: a clean profiler state around every test, XSpace reading helpers, and
the browser tests' server, Chromium and watched page."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import stepscope
from stepscope.capture import session
from stepscope.model import cache

sys.path.insert(0, str(Path(__file__).parent))

from browser import Server, Watched, launch, serve, watch  # noqa: E402 (after the path)
from twins import twin  # noqa: F401  (the fixture, for every test module)

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
FIXTURES = SHARED / "fixtures" / "gpu"


@pytest.fixture(autouse=True)
def _no_session_leaks() -> Iterator[None]:
    """Fail loudly if a test leaves a session running, and clean it up for the next test."""
    yield
    if session.is_running():
        stepscope.stop(save=False)
        pytest.fail("the test left a profiling session running")


@pytest.fixture(autouse=True)
def _no_background_writes_after_the_test() -> Iterator[None]:
    """Background cache writes (a store's load, a run's index build) that a test started and
    left running are closed at its end: they never write into a later test's cache
    directory. Those of module fixtures (set up before this) are closed with the module."""
    before = cache.open_writes()
    yield
    for owner in cache.open_writes() - before:
        owner.close()


@pytest.fixture(autouse=True, scope="module")
def _no_background_writes_after_the_module() -> Iterator[None]:
    yield
    cache.close_all_writes()


@pytest.fixture
def cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh, enabled cache directory for the test (``usefixtures`` it, or ask for it)."""
    directory = tmp_path / "cache"
    monkeypatch.setenv("STEPSCOPE_CACHE_DIR", str(directory))
    monkeypatch.delenv("STEPSCOPE_NO_CACHE", raising=False)
    return directory


@pytest.fixture
def quiet_options() -> stepscope.ProfilerOptions:
    """Options without background counters, for tests that count events exactly."""
    return stepscope.ProfilerOptions(counter_interval_ms=0)


# -- browser tests: a module defines ``logdir`` and gets a server on it, Chromium and a page --


@pytest.fixture(scope="module")
def server(logdir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """`stepscope serve` on the module's ``logdir`` (see tests/browser.py)."""
    with serve(logdir, tmp_path_factory.mktemp("cache")) as srv:
        yield srv


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """A headless Chromium per module (Playwright's sync API holds an event loop of its own
    while it runs, which other modules' asyncio code must not meet)."""
    with launch() as b:
        yield b


@pytest.fixture
def watched(browser: Any, server: Server) -> Iterator[Watched]:
    """A fresh page that fails the test on a request off the server, a script error or a
    dialog."""
    with watch(browser, server) as w:
        yield w


@pytest.fixture
def table_gate(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A gate every read of a host's table (``LazyTables``) waits at until it is set (at the
    end of the test, whatever happened): what a server answers before its table is read."""
    import threading

    from stepscope.model.run_tables import LazyTables

    gate = threading.Event()
    real_getitem = LazyTables.__getitem__

    def gated(self: LazyTables, name: str) -> Any:
        assert gate.wait(60)
        return real_getitem(self, name)

    monkeypatch.setattr(LazyTables, "__getitem__", gated)
    try:
        yield gate
    finally:
        gate.set()
