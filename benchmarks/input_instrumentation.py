"""What stepscope's input-pipeline instrumentation costs per element, next to no instrumentation.

What it measures, all in one process:

1. A fast pipeline, ``source → map → filter → batch`` over ``range(N)`` with trivial functions,
   built three ways: plain Python generators (uninstrumented), ``stepscope.data`` stages with no
   session running, and the same stages while a session records. Printed: ns per element for
   each, and the instrumentation overhead in ns per element per stage (the recording run less
   the plain one, divided by the stages each element passes through).
2. A pipeline whose map does 50 µs of work per element (busy wait), plain and recorded: the
   overhead in percent. The goal is < 5 %.
3. When PyTorch is installed: a DataLoader (0 workers, batch 16, trivial dataset), ns per batch
   without and with a session (its three instrumented stages).

Timings keep the minimum of a few repeats, with the garbage collector off during each.

Run from the repository root::

    .venv/bin/python benchmarks/input_instrumentation.py          # a table
    .venv/bin/python benchmarks/input_instrumentation.py --json   # one JSON object
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from time import perf_counter, perf_counter_ns
from typing import Any

import checkout  # noqa: F401  (this checkout's sources first, for every process started)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import stepscope  # noqa: E402
from stepscope import data  # noqa: E402

STAGES = 4  # source, map, filter, batch: each element passes through all four
FAST_N = 200_000
SLOW_N = 2_000
SLOW_WORK_S = 50e-6
REPEATS = 5


def _inc(x: int) -> int:
    return x + 1


def _keep(x: int) -> bool:
    return True


def _work(x: int) -> int:
    end = perf_counter() + SLOW_WORK_S
    while perf_counter() < end:
        pass
    return x


def plain(n: int, fn: Callable[[int], int]) -> Iterator[Any]:
    """The uninstrumented pipeline: the same four stages as plain generators."""
    def source() -> Iterator[int]:
        yield from range(n)

    def mapped(items: Iterable[int]) -> Iterator[int]:
        for x in items:
            yield fn(x)

    def kept(items: Iterable[int]) -> Iterator[int]:
        for x in items:
            if _keep(x):
                yield x

    def batched(items: Iterable[int]) -> Iterator[list[int]]:
        batch: list[int] = []
        for x in items:
            batch.append(x)
            if len(batch) == 8:
                yield batch
                batch = []
        if batch:
            yield batch

    return batched(kept(mapped(source())))


def staged(n: int, fn: Callable[[int], int]) -> Iterator[Any]:
    """The same pipeline as stepscope.data stages."""
    return iter(data.instrument(range(n)).map(fn).filter(_keep).batch(8))


def _time(make: Callable[[], Iterator[Any]], n: int, session: bool) -> float:
    """Minimum ns per element over REPEATS full passes."""
    best = float("inf")
    options = stepscope.ProfilerOptions(counter_interval_ms=0, max_events=10_000_000)
    for _ in range(REPEATS):
        with tempfile.TemporaryDirectory() as logdir:
            if session:
                stepscope.start(logdir, options=options)
            it = make()
            gc.disable()
            try:
                t0 = perf_counter_ns()
                for _ in it:
                    pass
                elapsed = perf_counter_ns() - t0
            finally:
                gc.enable()
                if session:
                    stepscope.stop(save=False)
        best = min(best, elapsed / n)
    return best


def _dataloader() -> dict[str, float] | None:
    try:
        import torch
        from torch.utils.data import DataLoader, TensorDataset
    except ImportError:
        return None
    loader = DataLoader(TensorDataset(torch.arange(16_000)), batch_size=16)
    batches = len(loader)

    def run() -> Iterator[Any]:
        return iter(loader)

    off = _time(run, batches, session=False)
    on = _time(run, batches, session=True)
    return {"batches": batches, "off_ns_per_batch": off, "on_ns_per_batch": on,
            "overhead_ns_per_batch": on - off}


def measure() -> dict[str, Any]:
    """Every figure, as a dictionary."""
    fast_plain = _time(lambda: plain(FAST_N, _inc), FAST_N, session=False)
    fast_off = _time(lambda: staged(FAST_N, _inc), FAST_N, session=False)
    fast_on = _time(lambda: staged(FAST_N, _inc), FAST_N, session=True)
    slow_plain = _time(lambda: plain(SLOW_N, _work), SLOW_N, session=False)
    slow_on = _time(lambda: staged(SLOW_N, _work), SLOW_N, session=True)
    overhead_pct = 100.0 * (slow_on - slow_plain) / slow_plain
    return {
        "python": platform.python_version(),
        "fast_pipeline": {
            "elements": FAST_N, "stages": STAGES,
            "plain_ns_per_element": fast_plain,
            "stages_no_session_ns_per_element": fast_off,
            "stages_recording_ns_per_element": fast_on,
            "overhead_ns_per_element_per_stage": (fast_on - fast_plain) / STAGES,
            "overhead_no_session_ns_per_element_per_stage": (fast_off - fast_plain) / STAGES,
        },
        "work_50us_pipeline": {
            "elements": SLOW_N, "plain_ns_per_element": slow_plain,
            "recording_ns_per_element": slow_on, "overhead_percent": overhead_pct,
            "goal_percent": 5.0, "goal_met": overhead_pct < 5.0,
        },
        "dataloader_0_workers": _dataloader(),
    }


def main() -> None:
    """Print the figures as a table (or JSON with --json)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    result = measure()
    if args.json:
        print(json.dumps(result, indent=2))
        return
    fast, slow, dl = (result["fast_pipeline"], result["work_50us_pipeline"],
                      result["dataloader_0_workers"])
    print(f"input-pipeline instrumentation (Python {result['python']})")
    print(f"fast pipeline: {fast['elements']:,} elements, {fast['stages']} stages "
          "(source, map, filter, batch)")
    print(f"  plain generators (uninstrumented) {fast['plain_ns_per_element']:9.0f} ns/element")
    print(f"  stepscope.data, no session        {fast['stages_no_session_ns_per_element']:9.0f}"
          " ns/element")
    print(f"  stepscope.data, recording         {fast['stages_recording_ns_per_element']:9.0f}"
          " ns/element")
    print(f"  overhead while recording          {fast['overhead_ns_per_element_per_stage']:9.0f}"
          " ns/element/stage")
    print(f"  overhead with no session          "
          f"{fast['overhead_no_session_ns_per_element_per_stage']:9.0f} ns/element/stage")
    print(f"pipeline with 50 µs of work per element: {slow['elements']:,} elements")
    print(f"  plain {slow['plain_ns_per_element'] / 1e3:.2f} µs/element, recording "
          f"{slow['recording_ns_per_element'] / 1e3:.2f} µs/element: overhead "
          f"{slow['overhead_percent']:.2f} % (goal < 5 %: "
          f"{'met' if slow['goal_met'] else 'MISSED'})")
    if dl is not None:
        print(f"DataLoader, 0 workers, batch 16: {dl['off_ns_per_batch'] / 1e3:.1f} µs/batch "
              f"without a session, {dl['on_ns_per_batch'] / 1e3:.1f} µs/batch recording "
              f"(+{dl['overhead_ns_per_batch'] / 1e3:.1f} µs/batch)")


if __name__ == "__main__":
    main()
