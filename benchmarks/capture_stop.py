"""What recording costs and how long ``stop()`` takes, stepscope beside TensorFlow's profiler.

Two workloads, each run by both profilers in a fresh child process (one process per run, so
that memory and warm caches do not carry over):

- ``trace``: 1,000,000 ``with Trace("step"):`` blocks on one thread (``stepscope.Trace`` in a
  ``stepscope.start``/``stop`` session; ``tf.profiler.experimental.Trace`` between
  ``tf.profiler.experimental.start``/``stop``).
- ``python``: 300,000 ``with Trace("step"): f(i)`` blocks with the Python tracer on
  (stepscope: ``python_tracer_level=1``; TensorFlow: ``ProfilerOptions(python_tracer_level=1)``
  given to ``start``, which TensorFlow may ignore: its event count says what it recorded).

For each: the record time (the loop), the ``stop()`` time (until the profile file is
written), the events in the profile, and the memory held while recording per event (the
process's RSS growth from just after ``start`` to the end of the loop, ÷ events). Then the
ratios stepscope/TensorFlow and the goals of issue 19: ``stop()`` ≤ 0.5× TensorFlow's for
``trace``; ≤ 1 s per million events for ``python``; ≤ 64 B per event held while recording.
Each figure is the median of ``--repeats`` runs.

Usage: ``python benchmarks/capture_stop.py [--repeats 3] [--events 1000000]
[--python-events 300000] [--no-tf] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from typing import Any

GOAL_STOP_RATIO = 0.5
GOAL_PYTHON_STOP_S_PER_M = 1.0
GOAL_BYTES_PER_EVENT = 64

# One run, in a child process; argv: tool, workload, iterations, logdir. Prints JSON.
CHILD = r"""
import gc, json, os, sys, time
tool, workload, n, logdir = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import numpy  # every ML program has it; neither profiler should pay for its import

def rss():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024

def f(i):
    return i

python = workload == "python"
if tool == "tf":
    import tensorflow as tf
    from stepscope.formats.xplane_builder import read_space
    Trace = tf.profiler.experimental.Trace
    options = tf.profiler.experimental.ProfilerOptions(
        host_tracer_level=2, python_tracer_level=1 if python else 0)
    start = lambda: tf.profiler.experimental.start(logdir, options=options)
    stop = tf.profiler.experimental.stop
else:
    import stepscope
    Trace = stepscope.Trace
    options = stepscope.ProfilerOptions(counter_interval_ms=0, max_events=4 * n + 100_000,
                                        python_tracer_level=1 if python else 0)
    start = lambda: stepscope.start(logdir, options)
    stop = stepscope.stop
with Trace("warm-up"):
    f(0)
gc.collect()
gc.disable()  # as timeit: no collection inside the timed regions
start()
before = rss()
t0 = time.perf_counter()
if python:
    for i in range(n):
        with Trace("step"):
            f(i)
else:
    for i in range(n):
        with Trace("step"):
            pass
t1 = time.perf_counter()
held = rss() - before
stop()
t2 = time.perf_counter()
files = [os.path.join(d, name) for d, _, names in os.walk(logdir) for name in names
         if name.endswith(".xplane.pb")]
events = 0
if tool == "tf":
    space = read_space(files[0])
    events = sum(len(line.events) for plane in space.planes if plane.name.startswith("/host")
                 for line in plane.lines)
else:
    from stepscope.formats.xplane_builder import read_space
    from stepscope.model import schema
    space = read_space(files[0])
    events = sum(len(line.events) for plane in space.planes
                 if plane.name in (schema.HOST_PLANE, schema.PYTHON_TRACER_PLANE)
                 for line in plane.lines)
print(json.dumps({"record_s": t1 - t0, "stop_s": t2 - t1, "events": events,
                  "bytes_per_event": held / max(events, 1),
                  "file_mb": os.path.getsize(files[0]) / 1e6}))
"""


def run_child(tool: str, workload: str, n: int) -> dict[str, float]:
    """One run in a fresh process."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="stepscope-bench-") as logdir:
        done = subprocess.run([sys.executable, "-c", CHILD, tool, workload, str(n), logdir],
                              capture_output=True, text=True, timeout=1200)
    if done.returncode != 0:
        raise RuntimeError(f"{tool}/{workload} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def measure(tool: str, workload: str, n: int, repeats: int) -> dict[str, float]:
    """The median of each figure over ``repeats`` runs."""
    runs = [run_child(tool, workload, n) for _ in range(repeats)]
    return {key: statistics.median(r[key] for r in runs) for key in runs[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--events", type=int, default=1_000_000,
                        help="Trace blocks of the trace workload")
    parser.add_argument("--python-events", type=int, default=300_000,
                        help="Trace blocks (each calling a function) of the python workload")
    parser.add_argument("--no-tf", action="store_true", help="skip TensorFlow's side")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    tools = ["stepscope"] + ([] if args.no_tf else ["tf"])
    workloads = {"trace": args.events, "python": args.python_events}
    results: dict[str, Any] = {}
    for workload, n in workloads.items():
        for tool in tools:
            print(f"… {tool}, {workload} ({n:,} Trace blocks)", file=sys.stderr, flush=True)
            results[f"{tool}/{workload}"] = measure(tool, workload, n, args.repeats)
    ours_t, ours_p = results["stepscope/trace"], results["stepscope/python"]
    goals = {
        "python_stop_le_1s_per_million_events":
            ours_p["stop_s"] / ours_p["events"] * 1e6 <= GOAL_PYTHON_STOP_S_PER_M,
        "trace_bytes_per_event_le_64": ours_t["bytes_per_event"] <= GOAL_BYTES_PER_EVENT,
        "python_bytes_per_event_le_64": ours_p["bytes_per_event"] <= GOAL_BYTES_PER_EVENT,
    }
    if "tf" in tools:
        goals["trace_stop_le_half_tf"] = (
            ours_t["stop_s"] <= GOAL_STOP_RATIO * results["tf/trace"]["stop_s"])
    results["goals"] = goals
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"median of {args.repeats} runs, each in a fresh process")
    print(f"{'workload':<8}  {'tool':<9}  {'events':>9}  {'record':>8}  {'stop':>8}  "
          f"{'stop/M ev':>9}  {'B/event':>8}  {'file':>8}")
    for workload in workloads:
        for tool in tools:
            r = results[f"{tool}/{workload}"]
            print(f"{workload:<8}  {tool:<9}  {int(r['events']):>9,}  {r['record_s']:>7.2f}s  "
                  f"{r['stop_s']:>7.2f}s  {r['stop_s'] / max(r['events'], 1) * 1e6:>8.2f}s  "
                  f"{r['bytes_per_event']:>8.0f}  {r['file_mb']:>6.1f}MB")
        if "tf" in tools:
            ours, theirs = results[f"stepscope/{workload}"], results[f"tf/{workload}"]
            print(f"{workload:<8}  {'ratio':<9}  {'':>9}  "
                  f"{ours['record_s'] / theirs['record_s']:>7.2f}x  "
                  f"{ours['stop_s'] / theirs['stop_s']:>7.2f}x  {'':>9}  "
                  f"{ours['bytes_per_event'] / max(theirs['bytes_per_event'], 1e-9):>7.2f}x")
    for goal, met in goals.items():
        print(f"goal {goal}: {'met' if met else 'MISSED'}")


if __name__ == "__main__":
    main()
