"""Shared fixtures: a clean profiler state around every test, and XSpace reading helpers."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import stepscope
from stepscope.capture import session

sys.path.insert(0, str(Path(__file__).parent))

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
FIXTURES = SHARED / "fixtures" / "gpu"


@pytest.fixture(autouse=True)
def _no_session_leaks() -> Iterator[None]:
    """Fail loudly if a test leaves a session running, and clean it up for the next test."""
    yield
    if session.is_running():
        stepscope.stop(save=False)
        pytest.fail("the test left a profiling session running")


@pytest.fixture
def quiet_options() -> stepscope.ProfilerOptions:
    """Options without background counters, for tests that count events exactly."""
    return stepscope.ProfilerOptions(counter_interval_ms=0)
