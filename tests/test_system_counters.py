"""The process CPU counter: a percentage of one core from the nanosecond process clock, never
more than every core the process may run on (a fake clock drives it)."""

from __future__ import annotations

import os

import pytest

from stepscope.capture import system_counters
from stepscope.capture.recorder import Recorder
from stepscope.capture.system_counters import SystemCounters


class _Clock:
    def __init__(self) -> None:
        self.wall = 1_000_000_000
        self.cpu = 5_000_000

    def advance(self, wall_ns: int, cpu_ns: int) -> None:
        self.wall += wall_ns
        self.cpu += cpu_ns


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> _Clock:
    c = _Clock()
    monkeypatch.setattr(system_counters.time, "monotonic_ns", lambda: c.wall)
    monkeypatch.setattr(system_counters.time, "process_time_ns", lambda: c.cpu)
    return c


def test_cpu_percent_is_cpu_time_over_wall_time(clock: _Clock) -> None:
    counters = SystemCounters(Recorder(1000), interval_ms=5)
    clock.advance(5_000_000, 2_500_000)  # half a core over 5 ms
    assert counters._cpu_percent() == pytest.approx(50.0)
    clock.advance(5_000_000, 5_000_000)  # a whole core
    assert counters._cpu_percent() == pytest.approx(100.0)
    clock.advance(0, 1_000_000)  # no wall time passed: no rate to give
    assert counters._cpu_percent() == 0.0


def test_cpu_percent_never_above_every_core(clock: _Clock) -> None:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    counters = SystemCounters(Recorder(1000), interval_ms=5)
    clock.advance(1_000_000, 1_000_000_000)  # an absurd reading: 1 s of CPU in 1 ms
    assert counters._cpu_percent() == pytest.approx(100.0 * (cores or 1))
