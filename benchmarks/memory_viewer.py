"""Memory viewer benchmark: stepscope against XProf's ``memory_viewer`` on the same files.

Profiles:

* the real XLA fixtures of ../shared/fixtures (TPU v6e JAX, MI300 JAX, MI355 JAX+TE);
* ``jax-cpu-<L>``: a JAX program of ``--layers`` unrolled layers (each a matmul, a tanh and a
  residual add, with the layers' temporaries live at once for the backward pass), recorded
  here on CPU, so that the program has thousands of instructions and a long heap trace.

For each, in fresh directories, it times every program's memory viewer:

1. stepscope: read the file's HLO (``open_hlo_programs``) and ``memory_viewer`` of each
   program with a buffer assignment (the figure beside it: the analysis alone);
2. XProf: ``xspace_to_tool_names`` (which writes each program's HLO beside the file, as
   TensorBoard does when a run is opened), then ``xspace_to_tool_data(memory_viewer)`` of
   each program.

Run: ``.venv/bin/python benchmarks/memory_viewer.py [--layers L] [--repeats N]``. Figures are
the median of ``--repeats`` runs (default 3).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import checkout  # noqa: F401  (this checkout's sources first, for every process started)

FIXTURES = Path(__file__).resolve().parents[1].parent / "shared" / "fixtures" / "gpu"
TPU = FIXTURES / "xprof/xprof/convert/test_xplanes/tpu_inference_2.xplane.pb"
MI300 = FIXTURES / "TraceLens/tests/traces/mi300/jax_conv_minimal_08/tw003.xplane.pb"
MI355 = (FIXTURES / "TraceLens/tests/test_data_jax_te_fused_attn_categorization/"
         "934987a2fc2f.xplane.pb")

JAX_PROGRAM = """
import sys, jax, jax.numpy as jnp
layers = int(sys.argv[2])
def loss(ws, x):
    for w in ws:
        x = x + jnp.tanh(x @ w)
    return (x * x).sum()
step = jax.jit(jax.grad(loss))
ws = [jnp.full((64, 64), 0.01 * (i + 1)) for i in range(layers)]
x = jnp.ones((32, 64))
step(ws, x)
with jax.profiler.trace(sys.argv[1]):
    jax.block_until_ready(step(ws, x))
"""


def _timed(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(repeats):
        started = time.perf_counter()
        result = fn()
        times.append((time.perf_counter() - started) * 1e3)
    return statistics.median(times), result


def _record(layers: int, where: Path) -> Path:
    subprocess.run([sys.executable, "-c", JAX_PROGRAM, str(where), str(layers)], check=True,
                   capture_output=True, timeout=900)
    return next(where.rglob("*.xplane.pb"))


def _stepscope(path: Path) -> tuple[float, int, int]:
    """(ms of the analysis alone, programs, heap events) after reading the file."""
    from stepscope.analysis.xla.memory_viewer import memory_viewer
    from stepscope.run.loader import open_hlo_programs

    spent, count, events = 0.0, 0, 0
    for p in open_hlo_programs(path).values():
        if p.module is None or p.module.buffer_assignment is None:
            continue
        started = time.perf_counter()
        memory_viewer(p.module, program_id=p.program_id)
        spent += (time.perf_counter() - started) * 1e3
        count += 1
        events += sum(len(t.kind) for t in p.module.buffer_assignment.heap_traces)
    return spent, count, events


def _xprof(path: Path, labels: list[str]) -> int:
    from xprof.convert import raw_to_tool_data

    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / path.name
        shutil.copy(path, copy)
        raw_to_tool_data.xspace_to_tool_names([str(copy)])
        done = 0
        for label in labels:
            data, _ = raw_to_tool_data.xspace_to_tool_data([str(copy)], "memory_viewer",
                                                           {"module_name": label})
            done += bool(data)
    return done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    from stepscope.run.loader import open_hlo_programs

    with tempfile.TemporaryDirectory() as tmp:
        profiles = [("tpu-v6e", TPU), ("mi300", MI300), ("mi355", MI355),
                    (f"jax-cpu-{args.layers}", _record(args.layers, Path(tmp) / "jax"))]
        print(f"{'profile':<14}{'programs':>9}{'heap events':>12}{'instructions':>13}"
              f"{'stepscope ms':>14}{'(analysis)':>11}{'XProf ms':>10}{'XProf/ours':>11}")
        for name, path in profiles:
            programs = open_hlo_programs(path)
            labels = [p.label for p in programs.values()
                      if p.module is not None and p.module.buffer_assignment is not None]
            instructions = sum(len(c.instructions) for p in programs.values()
                               if p.module is not None for c in p.module.computations)
            ours_ms, (analysis_ms, count, events) = _timed(lambda p=path: _stepscope(p),
                                                          args.repeats)
            theirs_ms, done = _timed(lambda p=path, lb=labels: _xprof(p, lb), args.repeats)
            assert done == count, (name, done, count)
            print(f"{name:<14}{count:>9}{events:>12,}{instructions:>13,}{ours_ms:>14.1f}"
                  f"{analysis_ms:>11.1f}{theirs_ms:>10.1f}{theirs_ms / ours_ms:>11.2f}")
        _scaling(profiles[-1][1], args.repeats)


def _scaling(path: Path, repeats: int) -> None:
    """The analysis alone on the largest program's heap trace repeated K times (a valid
    trace: every buffer is freed before it is allocated again), to show it stays linear."""
    import copy

    import numpy as np

    from stepscope.analysis.xla.memory_viewer import memory_viewer
    from stepscope.model.hlo import HeapTrace
    from stepscope.run.loader import open_hlo_programs

    module = max((p.module for p in open_hlo_programs(path).values()
                  if p.module is not None and p.module.buffer_assignment is not None),
                 key=lambda m: sum(len(t.kind) for t in m.buffer_assignment.heap_traces))
    base = max(module.buffer_assignment.heap_traces, key=lambda t: len(t.kind))
    print(f"\nanalysis alone, {module.name}'s heap trace repeated K times:")
    print(f"{'K':>6}{'events':>12}{'ms':>10}{'µs/event':>10}")
    for k in (1, 10, 100):
        m = copy.deepcopy(module)
        m.buffer_assignment.heap_traces = [HeapTrace(
            base.allocation_index, base.whole_module, np.tile(base.kind, k),
            np.tile(base.buffer_id, k), np.tile(base.share_with, k), base.instruction * k)]
        ms, _ = _timed(lambda m=m: memory_viewer(m), repeats)
        n = len(base.kind) * k
        print(f"{k:>6}{n:>12,}{ms:>10.1f}{1e3 * ms / n:>10.2f}")


if __name__ == "__main__":
    main()
