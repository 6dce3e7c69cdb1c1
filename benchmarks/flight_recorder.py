"""What the flight recorder costs a training loop, and how much memory it holds.

What it measures, all in one process:

1. The added cost per step: a loop of steps with ``ANNOTATIONS`` host annotations each and no
   work, with nothing recording (annotations off) and inside ``stepscope.flight_recorder``
   (``fr.step`` marking each step, slow-step judge on). The difference, per step, is what the
   recorder adds; as a share of a 10 ms step (a loop of ~100 steps/s) it is the overhead
   (goal: <= 1 %).
2. The same, measured end to end: a loop of ~100 steps/s (each step ~10 ms of arithmetic,
   calibrated) timed in process CPU time with and without the recorder, alternately, the
   median of each kept. On a shared machine this figure is noisier than (1); both are printed.
3. Memory: the stated bound (``max_bytes``), the most the ring held (``nbytes``, measured after
   every 1000 steps) and the process's RSS growth over ``MEMORY_STEPS`` steps once the ring
   was full (from half-way on).
4. How long one dump of the window takes (built and written), with the loop running.

Run from the repository root::

    .venv/bin/python benchmarks/flight_recorder.py          # a table
    .venv/bin/python benchmarks/flight_recorder.py --json   # one JSON object
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import statistics
import sys
import tempfile
from pathlib import Path
from time import perf_counter_ns, process_time_ns
from typing import Any

import psutil

import checkout  # noqa: F401  (this checkout's sources first, for every process started)
import stepscope
from stepscope.capture import flight

ANNOTATIONS = 20  # host annotations per step (a layer-by-layer model's worth)
STEP_MS = 10.0  # the step of a ~100 steps/s loop
GOAL_PERCENT = 1.0
COST_STEPS = 20_000
COST_REPEATS = 5
WALL_STEPS = 200  # per timed block of the end-to-end measure (~2 s)
WALL_BLOCKS = 5
MEMORY_STEPS = 100_000
MAX_BYTES = 32 << 20
WINDOW_STEPS = 5000
TRIGGERS = stepscope.FlightTriggers(signal=None, sigterm=False)


def _annotated(i: int) -> None:
    for j in range(ANNOTATIONS):
        with stepscope.Trace("layer", layer=j):
            pass


def _cost_bare(n: int) -> int:
    start = perf_counter_ns()
    for i in range(n):
        with stepscope.Trace("train", step_num=i, _r=1):
            _annotated(i)
    return perf_counter_ns() - start


def _cost_flight(fr: flight.FlightRecorder, n: int) -> int:
    start = perf_counter_ns()
    for i in range(n):
        with fr.step(i):
            _annotated(i)
    return perf_counter_ns() - start


def added_cost_per_step(logdir: Path) -> dict[str, float]:
    """ns per step: the loop with annotations off, inside the flight recorder, the difference."""
    gc.disable()
    try:
        bare = min(_cost_bare(COST_STEPS) for _ in range(COST_REPEATS)) / COST_STEPS
        with stepscope.flight_recorder(logdir, steps=WINDOW_STEPS, triggers=TRIGGERS) as fr:
            on = min(_cost_flight(fr, COST_STEPS) for _ in range(COST_REPEATS)) / COST_STEPS
    finally:
        gc.enable()
    added = on - bare
    return {"bare_ns_per_step": bare, "flight_ns_per_step": on, "added_ns_per_step": added,
            "added_ns_per_annotation": added / (ANNOTATIONS + 1),
            "overhead_percent_of_10ms_step": 100.0 * added / (STEP_MS * 1e6)}


def _work(iterations: int) -> int:
    """The step's work: a fixed amount of arithmetic (no sleep, which a busy machine
    stretches unevenly)."""
    x = 0
    for k in range(iterations):
        x += k
    return x


def _calibrate() -> int:
    """Iterations of ``_work`` that take about ``STEP_MS`` of this process's CPU time."""
    n = 10_000
    while True:
        start = process_time_ns()
        _work(n)
        took = process_time_ns() - start
        if took > 20 * 1e6:
            return int(n * STEP_MS * 1e6 / took)
        n *= 2


def _wall_block(fr: flight.FlightRecorder | None, work: int) -> float:
    """CPU ns per step of this process (other processes' load does not count in it)."""
    start = process_time_ns()
    for i in range(WALL_STEPS):
        if fr is None:
            with stepscope.Trace("train", step_num=i, _r=1):
                _annotated(i)
                _work(work)
        else:
            with fr.step(i):
                _annotated(i)
                _work(work)
    return (process_time_ns() - start) / WALL_STEPS


def end_to_end(logdir: Path) -> dict[str, float]:
    """Median CPU ns per step of a ~100 steps/s loop, without and with the recorder,
    alternating."""
    work = _calibrate()
    off: list[float] = []
    on: list[float] = []
    for _ in range(WALL_BLOCKS):
        off.append(_wall_block(None, work))
        with stepscope.flight_recorder(logdir, steps=WINDOW_STEPS, triggers=TRIGGERS) as fr:
            on.append(_wall_block(fr, work))
    off_ms, on_ms = statistics.median(off) / 1e6, statistics.median(on) / 1e6
    return {"step_ms_without": off_ms, "step_ms_with": on_ms,
            "overhead_percent": 100.0 * (on_ms - off_ms) / off_ms}


def memory(logdir: Path) -> dict[str, float]:
    """The bound, the most the ring held, and RSS growth once it was full."""
    process = psutil.Process()
    peak = 0
    rss: dict[int, int] = {}
    with stepscope.flight_recorder(logdir, steps=MEMORY_STEPS, triggers=TRIGGERS,
                                   max_bytes=MAX_BYTES) as fr:
        for i in range(MEMORY_STEPS):
            with fr.step(i):
                _annotated(i)
            if i % 1000 == 0:
                peak = max(peak, fr.nbytes)
            if i in (MEMORY_STEPS // 2, MEMORY_STEPS - 1):
                rss[i] = process.memory_info().rss
        held = fr.nbytes
        segments = len(fr._segments)
        start = perf_counter_ns()
        dump = fr.dump("benchmark")
        dump_ms = (perf_counter_ns() - start) / 1e6
    steps_held = MEMORY_STEPS  # what the bound let the ring keep, read from the dump
    if dump is not None:
        from stepscope.analysis.run_model.overview_page import overview

        steps_held = overview(stepscope.load(str(dump.path.parent))).to_dict()["steps"]["count"]
    return {"max_bytes": MAX_BYTES, "peak_nbytes": peak, "final_nbytes": held,
            "segments": segments, "steps_in_window": steps_held,
            "rss_growth_bytes_after_full": rss[MEMORY_STEPS - 1] - rss[MEMORY_STEPS // 2],
            "dump_ms": dump_ms}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="stepscope-flight-bench-") as tmp:
        cost = added_cost_per_step(Path(tmp) / "cost")
        wall = end_to_end(Path(tmp) / "wall")
        mem = memory(Path(tmp) / "memory")
    out: dict[str, Any] = {"python": sys.version.split()[0], "machine": platform.machine(),
                           "annotations_per_step": ANNOTATIONS, "cost": cost, "wall": wall,
                           "memory": mem,
                           "goal_met": cost["overhead_percent_of_10ms_step"] <= GOAL_PERCENT,
                           "bound_kept": mem["peak_nbytes"] <= mem["max_bytes"]}
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    mib = 1 << 20
    print(f"flight recorder, {ANNOTATIONS} annotations + 1 step mark per step "
          f"(Python {out['python']}, {out['machine']})")
    print(f"  per step, annotations off      {cost['bare_ns_per_step']:>10,.0f} ns")
    print(f"  per step, flight recorder on   {cost['flight_ns_per_step']:>10,.0f} ns")
    print(f"  added per step                 {cost['added_ns_per_step']:>10,.0f} ns "
          f"({cost['added_ns_per_annotation']:,.0f} ns per event)")
    print(f"  overhead on a 10 ms step       {cost['overhead_percent_of_10ms_step']:>10.3f} % "
          f"(goal <= {GOAL_PERCENT:g} %: {'met' if out['goal_met'] else 'MISSED'})")
    print(f"  end to end, ~100 steps/s       {wall['step_ms_without']:.3f} → "
          f"{wall['step_ms_with']:.3f} ms per step ({wall['overhead_percent']:+.2f} %, "
          "CPU time; noisy on a shared machine)")
    print(f"  memory bound (max_bytes)       {mem['max_bytes'] / mib:>10.1f} MiB")
    print(f"  most the ring held             {mem['peak_nbytes'] / mib:>10.1f} MiB "
          f"({mem['segments']} segments; bound {'kept' if out['bound_kept'] else 'EXCEEDED'})")
    print(f"  RSS growth, steps {MEMORY_STEPS // 2:,}..{MEMORY_STEPS:,}  "
          f"{mem['rss_growth_bytes_after_full'] / mib:>8.1f} MiB")
    print(f"  steps the bound kept           {mem['steps_in_window']:>10,} "
          f"(window asked: {MEMORY_STEPS:,})")
    print(f"  one dump of that window        {mem['dump_ms']:>10.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
