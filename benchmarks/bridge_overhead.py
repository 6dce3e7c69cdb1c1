"""Framework bridges: step time with no profiler, the framework's own profiler, and stepscope.

For each framework installed (TensorFlow, PyTorch, JAX), one fresh process trains a small
model and times its steps in three modes, interleaved over ``--rounds`` rounds so that drift
hits all three alike:

- ``none``: no profiler;
- ``framework``: the framework's own profiler (``tf.profiler.experimental``,
  ``torch.profiler.profile`` with the settings the bridge uses, ``jax.profiler``);
- ``stepscope``: ``stepscope.start()`` with its defaults, which runs that same framework
  profiler through the bridge plus stepscope's own tracers, and merges the two.

Each step is annotated as a step in every mode (the framework's annotation, or stepscope's
``Trace``). It prints the median step time of each mode and stepscope's cost over the
framework's profiler. Goal: at most 2 %.

Usage: ``python benchmarks/bridge_overhead.py [--steps 200] [--rounds 3] [--only torch]``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys

import checkout  # noqa: F401  (this checkout's sources first, for every process started)

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

# One framework's three modes; argv: framework, steps per mode, rounds. Prints JSON
# {mode: [median step seconds per round]}.
WORKER = r"""
import json, os, statistics, sys, tempfile, time
import stepscope
framework, steps, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
tmp = tempfile.mkdtemp(prefix="stepscope-bench-")

if framework == "tensorflow":
    import tensorflow as tf
    w = tf.Variable(tf.random.normal([256, 256]))
    x = tf.random.normal([128, 256])

    @tf.function
    def train():
        with tf.GradientTape() as tape:
            y = tf.reduce_sum(tf.nn.relu(x @ w))
        w.assign_sub(0.001 * tape.gradient(y, w))
        return y

    def step(i):
        with tf.profiler.experimental.Trace("train", step_num=i, _r=1):
            train().numpy()

    def own_start():
        tf.profiler.experimental.start(tmp + "/tf", options=tf.profiler.experimental
                                       .ProfilerOptions(host_tracer_level=2,
                                                        python_tracer_level=0,
                                                        device_tracer_level=1))

    own_stop = tf.profiler.experimental.stop
elif framework == "torch":
    import torch
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(),
                                torch.nn.Linear(512, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))
    prof = None

    def step(i):
        with torch.profiler.record_function("train"):
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()

    def own_start():
        global prof
        prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                      record_shapes=True, profile_memory=True,
                                      with_modules=True)
        prof.start()

    def own_stop():
        prof.stop()
        prof.profiler.kineto_results.events()  # what the bridge reads, to be fair
else:
    import jax, jax.numpy as jnp

    @jax.jit
    def train(w, x):
        return w - 0.001 * jax.grad(lambda w: jnp.sum(jax.nn.relu(x @ w)))(w)

    state = {"w": jnp.ones((256, 256)), "x": jnp.ones((128, 256))}

    def step(i):
        with jax.profiler.StepTraceAnnotation("train", step_num=i):
            state["w"] = train(state["w"], state["x"]).block_until_ready()

    def own_start():
        jax.profiler.start_trace(tmp + "/jax")

    own_stop = jax.profiler.stop_trace

def timed(annotate):
    times = []
    for i in range(steps):
        t = time.perf_counter()
        if annotate:
            with stepscope.Trace("train", step_num=i, _r=1):
                step(i)
        else:
            step(i)
        times.append(time.perf_counter() - t)
    return statistics.median(times)

for i in range(20):
    step(i)  # compile and warm caches
result = {"none": [], "framework": [], "stepscope": []}
modes = ["none", "framework", "stepscope"]
# Round 0 only warms up (profilers' first start pays one-time set-up); it is not reported.
for r in range(rounds + 1):
    for mode in modes[r % 3:] + modes[:r % 3]:
        if mode == "none":
            result[mode].append(timed(False))
        elif mode == "framework":
            own_start()
            result[mode].append(timed(False))
            own_stop()
        else:
            stepscope.start(tmp + "/ss")
            result[mode].append(timed(True))
            stepscope.stop()
print(json.dumps({mode: times[1:] for mode, times in result.items()}))
"""

FRAMEWORKS = ("tensorflow", "torch", "jax")


def run_framework(framework: str, steps: int, rounds: int) -> dict[str, float]:
    """Median step seconds per mode for one framework, from a fresh process."""
    proc = subprocess.run([sys.executable, "-c", WORKER, framework, str(steps), str(rounds)],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{framework} worker failed:\n{proc.stderr[-3000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    return {mode: statistics.median(values) for mode, values in result.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=200, help="steps timed per mode and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", choices=FRAMEWORKS, action="append",
                        help="benchmark only this framework (repeatable)")
    args = parser.parse_args()
    print(f"bridge overhead: median step time over {args.rounds} rounds of {args.steps} steps")
    print(f"{'framework':<11} {'none ms':>9} {'own profiler ms':>16} {'stepscope ms':>13} "
          f"{'stepscope vs own':>17}")
    for framework in args.only or FRAMEWORKS:
        if importlib.util.find_spec(framework) is None:
            print(f"{framework:<11} not installed, skipped")
            continue
        t = run_framework(framework, args.steps, args.rounds)
        extra = (t["stepscope"] / t["framework"] - 1) * 100
        print(f"{framework:<11} {t['none'] * 1e3:9.3f} {t['framework'] * 1e3:16.3f} "
              f"{t['stepscope'] * 1e3:13.3f} {extra:+16.1f}%", flush=True)
    print("goal: stepscope within +2% of the framework's own profiler")


if __name__ == "__main__":
    main()
