"""The built-in demo workload: a small NumPy MLP trained on batches from an iterator pipeline.

Steps are annotated as TensorFlow users annotate theirs (``Trace("train", step_num=…, _r=1)``),
so every tool that finds steps in TensorFlow profiles finds them here.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from stepscope.capture.options import ProfilerOptions
from stepscope.capture.session import start, stop
from stepscope.capture.trace import Trace


def read_records(rng: np.random.Generator, features: int) -> Iterator[np.ndarray]:
    """Stage 1: produce raw records (stands in for reading from disk)."""
    while True:
        # The span closes before `yield`: the consumer's time must not count as reading.
        with Trace("Iterator::Batch::Map::Read"):
            record = rng.standard_normal(features).astype(np.float32)
        yield record


def preprocess(records: Iterator[np.ndarray]) -> Iterator[np.ndarray]:
    """Stage 2: per-record normalisation and a little augmentation."""
    for record in records:
        with Trace("Iterator::Batch::Map"):
            record = (record - record.mean()) / (record.std() + 1e-6)
            record = np.tanh(record * 1.5)
        yield record


def batch(records: Iterator[np.ndarray], size: int, weights: np.ndarray
          ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Stage 3: stack records into batches with regression targets."""
    while True:
        with Trace("Iterator::Batch", batch_size=size):
            x = np.stack([next(records) for _ in range(size)])
            y = np.sin(x @ weights)
        yield x, y


@dataclass
class DemoResult:
    """Where the demo wrote its profile and what it ran."""

    path: Path
    steps: int
    final_loss: float


def run(logdir: str | Path, steps: int = 30, batch_size: int = 64, hidden: int = 256,
        python_tracer: bool = True) -> DemoResult:
    """Train the demo model for ``steps`` steps under a stepscope session."""
    rng = np.random.default_rng(0)
    features = 128
    pipeline = batch(preprocess(read_records(rng, features)), batch_size,
                     rng.standard_normal((features, 1)).astype(np.float32))
    w1 = rng.standard_normal((features, hidden)).astype(np.float32) * 0.05
    w2 = rng.standard_normal((hidden, 1)).astype(np.float32) * 0.05
    lr = 0.01
    loss = float("nan")
    # NumPy allocations too, so that the memory profile has something to show.
    options = ProfilerOptions(python_tracer_level=1 if python_tracer else 0, memory_tracer_level=1)
    start(str(logdir), options=options)
    try:
        for step in range(steps):
            with Trace("train", step_num=step, _r=1):
                with Trace("input"):
                    x, y = next(pipeline)
                with Trace("forward"):
                    h = np.maximum(x @ w1, 0.0)
                    pred = h @ w2
                    err = pred - y
                    loss = float(np.mean(err**2))
                with Trace("backward"):
                    g_pred = 2.0 * err / len(x)
                    g_w2 = h.T @ g_pred
                    g_h = (g_pred @ w2.T) * (h > 0)
                    g_w1 = x.T @ g_h
                with Trace("update"):
                    w1 -= lr * g_w1
                    w2 -= lr * g_w2
    finally:
        path = stop()
    assert path is not None
    return DemoResult(path=path, steps=steps, final_loss=loss)
