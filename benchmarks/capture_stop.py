"""What recording costs and how long ``stop()`` takes, stepscope beside TensorFlow's profiler.

Two workloads, each run by both profilers in a fresh child process (one process per run, so
that memory and warm caches do not carry over), the two profilers' runs interleaved:

- ``trace``: N ``with Trace("step"):`` blocks on one thread (``stepscope.Trace`` in a
  ``stepscope.start``/``stop`` session; ``tf.profiler.experimental.Trace`` between
  ``tf.profiler.experimental.start``/``stop``), for each N of ``--events`` (1M and 100k).
- ``python``: 300,000 ``with Trace("step"): f(i)`` blocks with the Python tracer on
  (stepscope: ``python_tracer_level=1``; TensorFlow: ``ProfilerOptions(python_tracer_level=1)``
  given to ``start``, which TensorFlow may ignore: its event count says what it recorded).

For each: the record time (the loop) and its cost per event, the ``stop()`` time (until the
profile file is written), the events in the profile, and the memory held while recording per
event: the process's resident memory (``VmRSS`` of ``/proc/self/status``) just after ``start``
(and a warm-up block) subtracted from it at the end of the loop, ÷ the events in the profile,
with the garbage collector off meanwhile. Then the ratios stepscope/TensorFlow and the goals:
issue 32's for ``trace`` at 1M events (``stop()`` ≤ 0.25× TensorFlow's, ≤ 24 B held per
event), issue 19's for ``python`` (≤ 1 s per million events, ≤ 64 B per event).
Each figure is the median of ``--repeats`` runs.

Usage: ``python benchmarks/capture_stop.py [--repeats 3] [--events 1000000,100000]
[--python-events 300000] [--no-tf] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from typing import Any

import checkout  # noqa: F401  (this checkout's sources first, for every process started)

GOAL_STOP_RATIO = 0.25  # issue 32, trace workload at 1M events
GOAL_TRACE_BYTES_PER_EVENT = 24  # issue 32
GOAL_PYTHON_STOP_S_PER_M = 1.0  # issue 19
GOAL_BYTES_PER_EVENT = 64  # issue 19, python workload

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


def measure(tools: list[str], workload: str, n: int, repeats: int) -> dict[str, dict[str, float]]:
    """The median of each figure over ``repeats`` runs per tool, the tools' runs interleaved
    (so that a busy moment of the machine falls on both)."""
    runs: dict[str, list[dict[str, float]]] = {tool: [] for tool in tools}
    for _ in range(repeats):
        for tool in tools:
            runs[tool].append(run_child(tool, workload, n))
    return {tool: {key: statistics.median(r[key] for r in rs) for key in rs[0]}
            for tool, rs in runs.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--events", default="1000000,100000",
                        help="Trace blocks of the trace workload (comma-separated sizes)")
    parser.add_argument("--python-events", type=int, default=300_000,
                        help="Trace blocks (each calling a function) of the python workload")
    parser.add_argument("--no-tf", action="store_true", help="skip TensorFlow's side")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    tools = ["stepscope"] + ([] if args.no_tf else ["tf"])
    sizes = [int(x) for x in str(args.events).split(",") if x.strip()]
    workloads = {f"trace/{n}": ("trace", n) for n in sizes}
    if args.python_events:
        workloads["python"] = ("python", args.python_events)
    results: dict[str, Any] = {}
    for label, (workload, n) in workloads.items():
        print(f"… {' and '.join(tools)}, {workload} ({n:,} Trace blocks)", file=sys.stderr,
              flush=True)
        for tool, figures in measure(tools, workload, n, args.repeats).items():
            results[f"{tool}/{label}"] = figures
    goals: dict[str, bool] = {}
    main_trace = f"trace/{max(sizes)}" if sizes else None
    if main_trace is not None:
        ours_t = results[f"stepscope/{main_trace}"]
        goals[f"{main_trace}_bytes_per_event_le_{GOAL_TRACE_BYTES_PER_EVENT}"] = (
            ours_t["bytes_per_event"] <= GOAL_TRACE_BYTES_PER_EVENT)
        if "tf" in tools:
            goals[f"{main_trace}_stop_le_{GOAL_STOP_RATIO}x_tf"] = (
                ours_t["stop_s"] <= GOAL_STOP_RATIO * results[f"tf/{main_trace}"]["stop_s"])
    if "python" in workloads:
        ours_p = results["stepscope/python"]
        goals["python_stop_le_1s_per_million_events"] = (
            ours_p["stop_s"] / max(ours_p["events"], 1) * 1e6 <= GOAL_PYTHON_STOP_S_PER_M)
        goals["python_bytes_per_event_le_64"] = ours_p["bytes_per_event"] <= GOAL_BYTES_PER_EVENT
    results["goals"] = goals
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"median of {args.repeats} runs, each in a fresh process, the tools interleaved; "
          "B/event = RSS at the loop's end − RSS just after start, ÷ events in the profile")
    print(f"{'workload':<14}  {'tool':<9}  {'events':>9}  {'record':>8}  {'ns/event':>8}  "
          f"{'stop':>8}  {'stop/M ev':>9}  {'B/event':>8}  {'file':>8}")
    for label in workloads:
        for tool in tools:
            r = results[f"{tool}/{label}"]
            events = max(r["events"], 1)
            print(f"{label:<14}  {tool:<9}  {int(r['events']):>9,}  {r['record_s']:>7.3f}s  "
                  f"{r['record_s'] / events * 1e9:>8.0f}  {r['stop_s']:>7.3f}s  "
                  f"{r['stop_s'] / events * 1e6:>8.2f}s  {r['bytes_per_event']:>8.1f}  "
                  f"{r['file_mb']:>6.1f}MB")
        if "tf" in tools:
            ours, theirs = results[f"stepscope/{label}"], results[f"tf/{label}"]
            per_event = ((ours["record_s"] / max(ours["events"], 1))
                         / max(theirs["record_s"] / max(theirs["events"], 1), 1e-12))
            print(f"{label:<14}  {'ratio':<9}  {'':>9}  "
                  f"{ours['record_s'] / theirs['record_s']:>7.2f}x  {per_event:>7.2f}x  "
                  f"{ours['stop_s'] / theirs['stop_s']:>7.2f}x  {'':>9}  "
                  f"{ours['bytes_per_event'] / max(theirs['bytes_per_event'], 1e-9):>7.2f}x")
    for goal, met in goals.items():
        print(f"goal {goal}: {'met' if met else 'MISSED'}")


if __name__ == "__main__":
    main()
