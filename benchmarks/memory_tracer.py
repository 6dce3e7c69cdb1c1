"""Memory tracer: the cost of recording NumPy allocations on a NumPy training loop.

A small two-layer network is trained with NumPy (forward, backward, SGD update, each step
annotated with ``stepscope.Trace``) in two modes, interleaved over ``--rounds`` rounds so
that drift hits both alike:

- ``stepscope``: a stepscope session with its defaults;
- ``memory``: the same session with ``memory_tracer_level=1`` (allocations of at least
  ``--threshold`` bytes and their frees recorded).

It prints the median step time of each mode, the allocations recorded per step, and the
memory tracer's cost over the session without it. Goal: at most 10 %.

Usage: ``python benchmarks/memory_tracer.py [--steps 300] [--rounds 5] [--batch 256]``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from typing import Any

import numpy as np

import checkout  # noqa: F401  (this checkout's sources first, for every process started)
import stepscope


def _model(batch: int, seed: int = 0) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    return {"w1": rng.standard_normal((256, 512)) * 0.05,
            "w2": rng.standard_normal((512, 10)) * 0.05,
            "x": rng.standard_normal((batch, 256)),
            "y": rng.integers(0, 10, batch)}


def _step(m: dict[str, Any], i: int) -> float:
    with stepscope.Trace("train", step_num=i, _r=1):
        with stepscope.Trace("forward"):
            h = np.maximum(m["x"] @ m["w1"], 0.0)
            logits = h @ m["w2"]
            logits -= logits.max(axis=1, keepdims=True)
            p = np.exp(logits)
            p /= p.sum(axis=1, keepdims=True)
            loss = float(-np.log(p[np.arange(len(p)), m["y"]] + 1e-9).mean())
        with stepscope.Trace("backward"):
            p[np.arange(len(p)), m["y"]] -= 1.0
            p /= len(p)
            g2 = h.T @ p
            dh = (p @ m["w2"].T) * (h > 0)
            g1 = m["x"].T @ dh
        with stepscope.Trace("update"):
            m["w1"] -= 0.1 * g1
            m["w2"] -= 0.1 * g2
    return loss


def _run(mode: str, steps: int, batch: int, threshold: int) -> tuple[float, int]:
    """Median step seconds of one session, and the allocation events it recorded."""
    m = _model(batch)
    options = stepscope.ProfilerOptions(
        counter_interval_ms=0, memory_tracer_level=1 if mode == "memory" else 0,
        memory_threshold_bytes=threshold)
    times = []
    with tempfile.TemporaryDirectory(prefix="stepscope-bench-") as tmp:
        stepscope.start(tmp, options)
        for i in range(steps):
            t0 = time.perf_counter()
            _step(m, i)
            times.append(time.perf_counter() - t0)
        from stepscope.capture import session

        current = session._session
        recorded = 0
        if current is not None:
            recorded = sum(1 for buf in current.recorder.host_buffers for e in buf.events
                           if e[0] == "MemoryAllocation")
        stepscope.stop(save=False)
    return statistics.median(times), recorded


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--threshold", type=int, default=1024)
    args = parser.parse_args()
    for mode in ("stepscope", "memory"):  # warm-up: imports, caches, the handler's setup
        _run(mode, 20, args.batch, args.threshold)
    medians: dict[str, list[float]] = {"stepscope": [], "memory": []}
    allocations = 0
    for _ in range(args.rounds):
        for mode in medians:
            median, recorded = _run(mode, args.steps, args.batch, args.threshold)
            medians[mode].append(median)
            if mode == "memory":
                allocations = recorded
    base = statistics.median(medians["stepscope"])
    mem = statistics.median(medians["memory"])
    print(f"NumPy training loop, batch {args.batch}, {args.steps} steps x {args.rounds} rounds")
    print(f"  stepscope (defaults)            {base * 1e3:8.3f} ms/step")
    print(f"  stepscope + memory tracer       {mem * 1e3:8.3f} ms/step  "
          f"({allocations / args.steps:.1f} allocations recorded per step, "
          f"threshold {args.threshold} B)")
    print(f"  memory tracer cost: {100 * (mem / base - 1):+.1f} %  (goal: at most 10 %)")


if __name__ == "__main__":
    main()
