"""A >= 100 MB real TensorFlow profile, made once and kept under ``$STEPSCOPE_BENCH_DIR``
(default ``.bench-profiles/``); and one of about 40 MiB with marked steps
(``tf_steps_profile``).

A child process trains a small CNN (Keras, fed by ``tf.data``) on the CPU under
``tf.profiler.experimental.server.start(port)``; this process captures a few seconds of it
remotely with ``tf.profiler.experimental.client.trace`` and host tracer level 3 with the Python
tracer on (TensorFlow 2.21's ``start(options=…)`` ignores the levels; a remote capture passes
them). The capture is made longer until the file holds at least 100 MB.

    .venv/bin/python benchmarks/tf_profile.py      # prints the file's path
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Where benchmark profiles are kept (made once, reused): $STEPSCOPE_BENCH_DIR, else
# <repo>/.bench-profiles (git-ignored).
BENCH_DIR = Path(os.environ.get("STEPSCOPE_BENCH_DIR") or ROOT / ".bench-profiles")
TF_DIR = BENCH_DIR / "trace_viewer_tf"
SMALL_DIR = BENCH_DIR / "trace_viewer_tf_10mb"  # the 10 MB one
MIN_BYTES = 100 * 1024 * 1024

TRAIN = r"""
import os, sys
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np, tensorflow as tf
tf.profiler.experimental.server.start(int(sys.argv[1]))
x = np.random.default_rng(0).random((2048, 28, 28, 1), np.float32)
y = np.random.default_rng(1).integers(0, 10, 2048)
def augment(a, b):
    return tf.image.random_flip_left_right(a), b
ds = (tf.data.Dataset.from_tensor_slices((x, y)).shuffle(512).map(augment)
      .batch(32).prefetch(2).repeat())
model = tf.keras.Sequential([
    tf.keras.Input((28, 28, 1)),
    tf.keras.layers.Conv2D(16, 3, activation="relu"),
    tf.keras.layers.MaxPooling2D(),
    tf.keras.layers.Conv2D(32, 3, activation="relu"),
    tf.keras.layers.Flatten(),
    tf.keras.layers.Dense(64, activation="relu"),
    tf.keras.layers.Dense(10)])
model.compile("adam", tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
print("ready", flush=True)
model.fit(ds, steps_per_epoch=100, epochs=100000, verbose=0)
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def trainer() -> Iterator[int]:
    """A training child under TensorFlow's profiler server, past its first steps (tracing and
    compilation); yields the server's port, kills the child after."""
    port = _free_port()
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": ""}
    child = subprocess.Popen([sys.executable, "-c", TRAIN, str(port)], env=env,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        child.stdout.readline()  # "ready": the model is built, training starts
        time.sleep(5)  # past the first steps' tracing and compilation
        yield port
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()


def capture(port: int, logdir: Path, duration_ms: int) -> Path | None:
    """One remote capture of the trainer on ``port`` into ``logdir``; the file it wrote."""
    import tensorflow as tf

    options = tf.profiler.experimental.ProfilerOptions(host_tracer_level=3,
                                                       python_tracer_level=1,
                                                       device_tracer_level=0)
    tf.profiler.experimental.client.trace(f"grpc://127.0.0.1:{port}", str(logdir),
                                          duration_ms, num_tracing_attempts=3,
                                          options=options)
    files = sorted(logdir.glob("plugins/profile/*/*.xplane.pb"), key=lambda p: p.stat().st_mtime)
    return files[-1] if files else None


def _capture(duration_ms: int, directory: Path = TF_DIR) -> Path | None:
    """One remote capture of a fresh training child; the file it wrote."""
    with trainer() as port:
        return capture(port, directory, duration_ms)


def tf_profile(min_bytes: int = MIN_BYTES, directory: Path = TF_DIR) -> Path:
    """The TensorFlow profile of at least ``min_bytes`` (default 100 MB) kept in
    ``directory`` (captured on first use)."""
    files = sorted(directory.glob("plugins/profile/*/*.xplane.pb"))
    if files and files[-1].stat().st_size >= min_bytes:
        return files[-1]
    duration = 3000 if min_bytes >= MIN_BYTES else 400
    while True:
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(parents=True)
        path = _capture(duration, directory)
        if path is not None and path.stat().st_size >= min_bytes:
            return path
        size = path.stat().st_size if path is not None else 0
        duration = int(duration * min(max(min_bytes * 1.3 / max(size, 1), 1.5), 8))


STEPS_DIR = BENCH_DIR / "report_tf_steps"  # the profile with steps and context links

# A tf.data pipeline with Python in it (py_function: context links between the step and the
# pipeline's threads), each step marked as TensorFlow marks one (Trace with step_num, _r=1):
# the step grouping's and the input analysis' work, which the Keras capture above lacks (Keras
# 3 marks no steps). Its argv: logdir, steps.
STEPS = r"""
import sys, tensorflow as tf
logdir, steps = sys.argv[1], int(sys.argv[2])
def double(v):
    return v * 2
ds = (tf.data.Dataset.from_tensor_slices(tf.random.normal([8192, 32]))
      .map(lambda x: tf.py_function(double, [x], tf.float32)).map(lambda x: x + 1)
      .batch(32).repeat())
w = tf.Variable(tf.random.normal([32, 32]))
@tf.function
def step(x):
    return tf.reduce_sum(tf.nn.relu(x @ w))
it = iter(ds)
for _ in range(3):
    step(next(it))
tf.profiler.experimental.start(logdir)
for i in range(steps):
    with tf.profiler.experimental.Trace("train", step_num=i, _r=1):
        step(next(it))
tf.profiler.experimental.stop()
"""


def tf_steps_profile(min_bytes: int = 40 * 2**20, directory: Path = STEPS_DIR) -> Path:
    """A TensorFlow profile of at least ``min_bytes`` (default 40 MiB) with marked steps and
    context links, kept in ``directory`` (recorded on first use: about 30 KB a step)."""
    files = sorted(directory.glob("plugins/profile/*/*.xplane.pb"))
    if files and files[-1].stat().st_size >= min_bytes:
        return files[-1]
    steps = 1500
    while True:
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(parents=True)
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": ""}
        subprocess.run([sys.executable, "-c", STEPS, str(directory), str(steps)], env=env,
                       check=True, stdout=subprocess.DEVNULL)
        files = sorted(directory.glob("plugins/profile/*/*.xplane.pb"))
        size = files[-1].stat().st_size if files else 0
        if files and size >= min_bytes:
            return files[-1]
        steps = int(steps * min(max(min_bytes * 1.2 / max(size, 1), 1.5), 8))


if __name__ == "__main__":
    print(tf_profile())
