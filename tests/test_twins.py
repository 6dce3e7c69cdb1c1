"""Both twins of every compiled hot path give the same profile: one session recorded on the
compiled modules and one on their pure-Python twins (through ``twins.use_twins``) are read back
equal, event for event."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import stepscope
from stepscope.capture import trace
from stepscope.formats.run_reader import load

from twins import TWINS

BASE = time.time_ns() + 10**12  # ns: after the session's start, as recorded times are


def _profile(logdir: Path) -> list[tuple[str, int, dict[str, object]]]:
    stepscope.start(logdir, options=stepscope.ProfilerOptions(
        counter_interval_ms=0, device_tracer_level=0, python_tracer_level=1))
    for step in range(5):
        trace.record("step", BASE + step * 100, BASE + step * 100 + 50, level=1,
                     step_num=step, _r=1, label=f"s{step}")
    path = stepscope.stop()
    assert path is not None
    table = load(logdir, use_cache=False).hosts
    (host,) = table.values()
    return sorted((host.names[int(c)], int(s), {}) for c, s in
                  zip(host.name.tolist(), host.start_ns.tolist(), strict=True)
                  if host.names[int(c)] == "step")


@pytest.mark.parametrize("twin", TWINS, indirect=True)
def test_a_session_reads_back_the_same_on_both_twins(twin: bool, tmp_path: Path) -> None:
    assert [e[1] for e in _profile(tmp_path)] == [BASE + i * 100 for i in range(5)]
