"""How much stepscope's annotations and Python tracer cost, next to TensorFlow's.

What it measures, all in one process:

1. The cost of one ``with stepscope.Trace(...):`` enter+exit, in ns per iteration, for
   ``Trace("train", step_num=i, _r=1)`` and for the plain ``Trace("x")``, with no session
   running and with one running (``stepscope.start`` with counters and the Python tracer off,
   ``max_events`` above the number of events the loop records).
2. The same for ``tf.profiler.experimental.Trace``, off (no TF profiler running) and on
   (inside ``tf.profiler.experimental.start`` / ``stop``), when TensorFlow is installed.
3. The ratios stepscope/TF, and whether the goals are met: stepscope's cost <= TF's, and
   <= 100 ns per annotation when no session runs. A missed goal is reported, never an error.
4. The slowdown of a Python-heavy function (a recursive ``fib``) under the Python tracer
   (``python_tracer_level=1``), and how many events the tracer recorded.

Timings are timeit-style: a loop of N iterations, repeated a few times with the garbage
collector off, keeping the minimum per-iteration time. The figures are raw (loop overhead
included); the cost of one empty loop iteration is printed for context.

Run from the repository root::

    .venv/bin/python benchmarks/trace_overhead.py          # a table
    .venv/bin/python benchmarks/trace_overhead.py --json   # one JSON object
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import platform
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from time import perf_counter_ns
from types import FunctionType
from typing import Any

import checkout  # noqa: F401  (this checkout's sources first, for every process started)

os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"

import stepscope  # noqa: E402
from stepscope import ProfilerOptions  # noqa: E402
from stepscope.formats import xplane_builder  # noqa: E402
from stepscope.model import schema  # noqa: E402

# Iterations per timed loop and how many times each loop is repeated (the minimum is kept).
LOOP_ITERATIONS = 100_000
REPEATS = 5
# The Python-heavy workload: fib(FIB_N) makes 2 * fib(FIB_N + 1) - 1 Python calls.
FIB_N = 28
FIB_RUNS = 3
# The goal for an annotation when no session runs.
GOAL_OFF_NS = 100.0

TraceFactory = Callable[..., Any]
Loop = Callable[[TraceFactory, int], int]


# --- timed loops -------------------------------------------------------------------------------
# The annotation class is passed in and bound to a local, so stepscope and TF pay the same
# lookup cost and run the very same loop code.


def _loop_empty(_cls: TraceFactory, n: int) -> int:
    start = perf_counter_ns()
    for _i in range(n):
        pass
    return perf_counter_ns() - start


def _loop_kwargs(cls: TraceFactory, n: int) -> int:
    start = perf_counter_ns()
    for i in range(n):
        with cls("train", step_num=i, _r=1):
            pass
    return perf_counter_ns() - start


def _loop_plain(cls: TraceFactory, n: int) -> int:
    start = perf_counter_ns()
    for _i in range(n):
        with cls("x"):
            pass
    return perf_counter_ns() - start


LOOPS: dict[str, Loop] = {"kwargs": _loop_kwargs, "plain": _loop_plain}
LOOP_LABELS = {"kwargs": 'Trace("train", step_num=i, _r=1)', "plain": 'Trace("x")'}


@contextlib.contextmanager
def _gc_off() -> Iterator[None]:
    """Keep the garbage collector out of the timed region, as timeit does."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _best_ns(loop: Loop, cls: TraceFactory,
             around: Callable[[], contextlib.AbstractContextManager[Any]] | None = None) -> float:
    """Minimum time per iteration over ``REPEATS`` loops of ``LOOP_ITERATIONS``, in ns.

    ``around`` makes a context manager that each repeat runs inside (e.g. a session).
    """
    n, repeats = LOOP_ITERATIONS, REPEATS
    loop(cls, min(n, 1_000))  # warm up
    best = float("inf")
    for _ in range(repeats):
        with around() if around is not None else contextlib.nullcontext(), _gc_off():
            elapsed = loop(cls, n)
        best = min(best, elapsed / n)
        gc.collect()
    return best


# --- stepscope ---------------------------------------------------------------------------------


@contextlib.contextmanager
def _stepscope_session(logdir: str) -> Iterator[None]:
    """A stepscope session that records annotations only; nothing is written at the end."""
    options = ProfilerOptions(counter_interval_ms=0, python_tracer_level=0,
                              max_events=LOOP_ITERATIONS * 2 + 10_000)
    stepscope.start(logdir, options)
    try:
        yield
    finally:
        stepscope.stop(save=False)


def measure_stepscope(logdir: str) -> dict[str, float]:
    figures: dict[str, float] = {}
    for variant, loop in LOOPS.items():
        figures[f"{variant}_off_ns"] = _best_ns(loop, stepscope.Trace)
        figures[f"{variant}_on_ns"] = _best_ns(
            loop, stepscope.Trace, around=lambda: _stepscope_session(logdir))
    return figures


# --- TensorFlow --------------------------------------------------------------------------------


def _import_tf() -> Any | None:
    try:
        import tensorflow as tf
    except ImportError:
        return None
    return tf


def measure_tf(tf: Any, logdir: str) -> dict[str, float]:
    """TF's annotation off and on; one TF profiler session per variant covers all its repeats."""
    trace_cls = tf.profiler.experimental.Trace
    figures: dict[str, float] = {}
    for variant, loop in LOOPS.items():
        figures[f"{variant}_off_ns"] = _best_ns(loop, trace_cls)
        tf.profiler.experimental.start(os.path.join(logdir, f"tf-{variant}"))
        try:
            figures[f"{variant}_on_ns"] = _best_ns(loop, trace_cls)
        finally:
            tf.profiler.experimental.stop()
    return figures


# --- Python tracer -----------------------------------------------------------------------------


def fib(n: int) -> int:
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def _fib_calls(n: int) -> int:
    """How many calls ``fib(n)`` makes."""
    a, b = 1, 1  # calls of fib(0), fib(1)
    for _ in range(n - 1):
        a, b = b, a + b + 1
    return b if n >= 1 else a


def _count_python_events(path: Path) -> int:
    space = xplane_builder.read_space(path)
    return sum(len(line.events) for plane in space.planes
               if plane.name == schema.PYTHON_TRACER_PLANE for line in plane.lines)


def measure_python_tracer(logdir: str) -> dict[str, Any]:
    """Best-of-``FIB_RUNS`` time of ``fib(FIB_N)`` untraced and traced; events of one traced run."""
    fib(FIB_N - 5)  # warm up
    untraced = float("inf")
    for _ in range(FIB_RUNS):
        with _gc_off():
            start = perf_counter_ns()
            fib(FIB_N)
            untraced = min(untraced, perf_counter_ns() - start)

    options = ProfilerOptions(python_tracer_level=1, counter_interval_ms=0,
                              max_events=2 * _fib_calls(FIB_N) + 10_000)
    traced = float("inf")
    events: int | None = None
    for run in range(FIB_RUNS):
        stepscope.start(logdir, options)
        try:
            with _gc_off():
                start = perf_counter_ns()
                fib(FIB_N)
                elapsed = perf_counter_ns() - start
        finally:
            path = stepscope.stop(save=run == 0)  # write (and count) the first run only
        traced = min(traced, elapsed)
        if path is not None:
            events = _count_python_events(path)
        gc.collect()
    return {
        "workload": f"fib({FIB_N})",
        "python_calls": _fib_calls(FIB_N),
        "untraced_ms": untraced / 1e6,
        "traced_ms": traced / 1e6,
        "slowdown": traced / untraced,
        "python_tracer_events": events,
    }


# --- report ------------------------------------------------------------------------------------


def _trace_impl() -> str:
    """Whether ``stepscope.Trace`` is a pure-Python class or a compiled type."""
    enter = getattr(stepscope.Trace, "__enter__", None)
    return "pure Python" if isinstance(enter, FunctionType) else "compiled"


def run() -> dict[str, Any]:
    result: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "stepscope_version": stepscope.__version__,
        "stepscope_trace_impl": _trace_impl(),
        "loop_iterations": LOOP_ITERATIONS,
        "repeats": REPEATS,
    }
    with tempfile.TemporaryDirectory(prefix="stepscope-bench-") as tmp:
        result["empty_loop_ns"] = _best_ns(_loop_empty, object)
        result["stepscope"] = measure_stepscope(os.path.join(tmp, "stepscope"))

        tf = _import_tf()
        if tf is None:
            result["tensorflow"] = None
        else:
            result["tensorflow"] = {"version": tf.__version__,
                                    **measure_tf(tf, os.path.join(tmp, "tf"))}

        ours: dict[str, float] = result["stepscope"]
        theirs: dict[str, float] | None = result["tensorflow"]
        ratios: dict[str, float] = {}
        goals: dict[str, bool] = {}
        for variant in LOOPS:
            goals[f"{variant}_off_le_{GOAL_OFF_NS:g}ns"] = ours[f"{variant}_off_ns"] <= GOAL_OFF_NS
            if theirs is not None:
                for state in ("off", "on"):
                    key = f"{variant}_{state}"
                    ratios[key] = ours[f"{key}_ns"] / theirs[f"{key}_ns"]
                    goals[f"{key}_le_tf"] = ours[f"{key}_ns"] <= theirs[f"{key}_ns"]
        result["ratios_stepscope_over_tf"] = ratios or None
        result["goals"] = goals

        result["python_tracer"] = measure_python_tracer(os.path.join(tmp, "pytracer"))
    return result


def print_table(result: dict[str, Any]) -> None:
    width = 56

    def row(label: str, value: str) -> None:
        print(f"{label:<{width}}: {value}")

    print(f"stepscope {result['stepscope_version']} trace overhead (Python {result['python']}, "
          f"{result['platform']})")
    print(f"stepscope.Trace implementation: {result['stepscope_trace_impl']}")
    print(f"best of {result['repeats']} loops of {result['loop_iterations']:,} iterations; "
          "raw per-iteration times, loop overhead included")
    print()
    row("empty loop iteration", f"{result['empty_loop_ns']:.0f} ns")
    ours = result["stepscope"]
    theirs = result["tensorflow"]
    for variant, label in LOOP_LABELS.items():
        print()
        print(label)
        row("  stepscope Trace, no session", f"{ours[f'{variant}_off_ns']:.0f} ns")
        row("  stepscope Trace, session running", f"{ours[f'{variant}_on_ns']:.0f} ns")
        if theirs is not None:
            row("  tf.profiler Trace, profiler off", f"{theirs[f'{variant}_off_ns']:.0f} ns")
            row("  tf.profiler Trace, profiler on", f"{theirs[f'{variant}_on_ns']:.0f} ns")
            for state in ("off", "on"):
                ratio = result["ratios_stepscope_over_tf"][f"{variant}_{state}"]
                row(f"  ratio stepscope/TF, {state}", f"{ratio:.2f}")
    print()
    if theirs is None:
        print("TensorFlow not installed: skipped")
    else:
        print(f"TensorFlow {theirs['version']}")
    print()
    print("goals (a benchmark: a missed goal is reported, not an error)")
    goals = result["goals"]
    for variant, label in LOOP_LABELS.items():
        met = goals[f"{variant}_off_le_{GOAL_OFF_NS:g}ns"]
        row(f"  {label} <= {GOAL_OFF_NS:g} ns, no session", "met" if met else "MISSED")
        if theirs is not None:
            for state in ("off", "on"):
                met = goals[f"{variant}_{state}_le_tf"]
                row(f"  {label} <= TF's, {state}", "met" if met else "MISSED")

    py = result["python_tracer"]
    print()
    print(f"Python tracer (python_tracer_level=1) on {py['workload']}, "
          f"{py['python_calls']:,} Python calls, best of {FIB_RUNS}")
    row("  untraced", f"{py['untraced_ms']:.1f} ms")
    row("  traced", f"{py['traced_ms']:.1f} ms")
    row("  slowdown", f"{py['slowdown']:.1f}x")
    events = py["python_tracer_events"]
    row("  events recorded (one traced run)", "n/a" if events is None else f"{events:,}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    result = run()
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print_table(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
