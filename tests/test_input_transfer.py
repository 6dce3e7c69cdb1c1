"""The input verdict and the input analyzer agree on copies to the device: the overview counts
host-to-device copies in the steps as input (as XProf does), and the analyzer shows that part
as "Enqueuing / transfer to device", not as "Other data reading or processing"."""

from __future__ import annotations

import gzip
import json

import pytest

from stepscope.analysis.run_model import build_run_model
from stepscope.analysis.tools.input_pipeline import input_pipeline_of
from stepscope.formats import run_reader

from conftest import FIXTURES

# HTA's trace_diff control run (A100, PyTorch): nearly all of its steps' input time is
# copies from host to device (no DataLoader stages recorded).
CONTROL = FIXTURES / "HolisticTraceAnalysis/tests/data/trace_diff/control/control.json.gz"


def _h2d_inside_steps_ns() -> int:
    """The trace's own HtoD copies, clipped to its ProfilerStep# spans (ns, not merged)."""
    with gzip.open(CONTROL) as f:
        events = json.loads(f.read())["traceEvents"]
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in events
             if str(e.get("name", "")).startswith("ProfilerStep#")]
    copies = [(e["ts"], e["ts"] + e["dur"]) for e in events
              if e.get("cat") == "gpu_memcpy" and "HtoD" in e["name"]]
    return int(1000 * sum(max(0.0, min(b, s1) - max(a, s0))
                          for a, b in copies for s0, s1 in steps))


def test_copies_to_the_device_are_transfer_not_other() -> None:
    model = build_run_model(run_reader.load(CONTROL, use_cache=False))
    (host,) = model.hosts.values()
    result = input_pipeline_of(model).to_dict()
    breakdown = result["host_breakdown"]
    waited_ms = sum(s["input_ms"] for s in result["steps"]["per_step"])
    transfer_ms = host.overview.input_transfer_ns / 1e6
    # The copies are most of the input the verdict counts, and all of them are transfer.
    assert 0 < transfer_ms <= _h2d_inside_steps_ns() / 1e6
    assert transfer_ms > 0.9 * waited_ms
    assert breakdown["enqueue"] == pytest.approx(transfer_ms)
    assert breakdown["other"] == pytest.approx(waited_ms - transfer_ms, abs=1e-3)
    assert breakdown["enqueue"] + breakdown["other"] == pytest.approx(waited_ms, abs=1e-3)
    assert result["host_breakdown_percent"]["enqueue"] > 90.0


def test_the_split_keeps_the_overview_breakdown() -> None:
    """The input figure the verdict reads is the copies plus the host's wait, as before."""
    model = build_run_model(run_reader.load(CONTROL, use_cache=False))
    (host,) = model.hosts.values()
    overview = model.overview_dict()
    assert overview["input"]["percent"] == pytest.approx(3.686242458785448, rel=1e-9)
    steps_ns = int(host.overview.steps.duration_ns.sum())
    assert 100.0 * host.overview.input_transfer_ns / steps_ns <= overview["input"]["percent"]
