"""Small real workloads that tests run in subprocesses (each framework starts clean)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

TF_CUSTOM_LOOP = """
import sys, tensorflow as tf
logdir, steps = sys.argv[1], int(sys.argv[2])
ds = (tf.data.Dataset.from_tensor_slices(tf.random.normal([4096, 64])).map(lambda x: x * 2)
      .batch(64).repeat())
it = iter(ds)
w = tf.Variable(tf.random.normal([64, 64]))

@tf.function
def step(x):
    with tf.GradientTape() as tape:
        y = tf.reduce_sum(tf.nn.relu(x @ w))
    w.assign_sub(0.01 * tape.gradient(y, w))
    return y

for _ in range(3):
    step(next(it))
tf.profiler.experimental.start(logdir)
for i in range(steps):
    with tf.profiler.experimental.Trace("train", step_num=i, _r=1):
        step(next(it))
tf.profiler.experimental.stop()
"""

TORCH_LOOP = """
import json, sys, torch
from torch.profiler import ProfilerActivity, profile, record_function, schedule
out, active = sys.argv[1], int(sys.argv[2])
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
data = torch.utils.data.TensorDataset(torch.randn(64 * (active + 2), 256),
                                      torch.randint(0, 10, (64 * (active + 2),)))
loader = torch.utils.data.DataLoader(data, batch_size=64)
averages = {}

def ready(prof):
    prof.export_chrome_trace(out)
    averages.update({e.key: {"self_us": e.self_cpu_time_total, "count": e.count}
                     for e in prof.key_averages()})

with profile(activities=[ProfilerActivity.CPU], on_trace_ready=ready,
             schedule=schedule(wait=1, warmup=1, active=active, repeat=1)) as prof:
    for x, y in loader:
        with record_function("forward"):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        prof.step()
print(json.dumps(averages))
"""


def run_script(script: str, *args: str) -> str:
    """Run ``script`` with ``args`` in a fresh interpreter; its stdout (it must succeed)."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(script), *args],
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


# An op name that would run script if a page ever put it into HTML.
EVIL_OP = "<img src=x onerror=alert(1)>"


def make_stepscope_run(logdir: Path, steps: int = 8, host: str | None = None) -> Path:
    """Profile a small loop with stepscope (one op named EVIL_OP); the run directory."""
    import stepscope

    options = stepscope.ProfilerOptions(counter_interval_ms=0)
    with stepscope.Profile(logdir, options=options) as prof:
        for i in range(steps):
            with stepscope.Trace("train", step_num=i, _r=1):
                with stepscope.Trace("load_batch"):
                    time.sleep(0.002)
                with stepscope.Trace(EVIL_OP):
                    time.sleep(0.001)
                with stepscope.Trace("matmul"):
                    sum(j * j for j in range(3000))
    assert prof.path is not None
    run = prof.path if prof.path.is_dir() else prof.path.parent
    if host is not None:
        (file,) = run.glob("*.xplane.pb")
        file.rename(run / f"{host}.xplane.pb")
    return run


def record_numpy_steps(logdir: Path, *, slow_forward_s: float = 0.0, memory: bool = False,
                       big: bool = False, steps: int = 30, start_at: float = 0.0) -> Path:
    """A small NumPy training loop of ``steps`` steps under stepscope (each step mostly sleeps,
    so that a busy machine changes its time little); ``slow_forward_s`` injects a regression
    into the op ``forward``, ``big`` a larger tensor (with ``memory``: the tracer on);
    ``start_at``: a ``time.time()`` to wait for, so that two processes record together."""
    import numpy as np

    import stepscope

    options = stepscope.ProfilerOptions(counter_interval_ms=0,
                                        memory_tracer_level=1 if memory else 0,
                                        memory_threshold_bytes=4096)
    x = np.ones(20_000)
    time.sleep(max(0.0, start_at - time.time()))
    with stepscope.Profile(logdir, options=options):
        for i in range(steps):
            with stepscope.Trace("train", step_num=i, _r=1):
                with stepscope.Trace("load_batch"):
                    time.sleep(0.003)
                with stepscope.Trace("forward"):
                    h = np.sqrt(x * 1.5 + 2.0) if not big else np.sqrt(
                        np.ones(200_000) * 1.5 + 2.0)
                    if slow_forward_s:
                        time.sleep(slow_forward_s)
                with stepscope.Trace("backward"):
                    time.sleep(0.002)
                    g = h * 0.5
                del h, g
    return logdir
