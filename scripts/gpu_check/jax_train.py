"""The same bf16 MLP as torch_train.py, jitted with JAX on the GPU under a stepscope session
(the JAX bridge), with XLA's own FLOP count of the step to check stepscope's against.

Usage: python3 jax_train.py LOGDIR OUT_JSON
"""

from __future__ import annotations

import json
import os
import sys
import time

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

# GPU_CHECK_SMALL=1: a small run on the CPU, to try the script without a GPU.
SMALL = os.environ.get("GPU_CHECK_SMALL") == "1"
WIDTH, BATCH, LAYERS, STEPS = (256, 64, 4, 8) if SMALL else (4096, 8192, 4, 8)


def loss(ws: list, x: jax.Array) -> jax.Array:
    h = x
    for w in ws:
        h = jax.nn.gelu(h @ w)
    return jnp.mean(h.astype(jnp.float32) ** 2)


@jax.jit
def train_step(ws: list, x: jax.Array) -> tuple[list, jax.Array]:
    value, grads = jax.value_and_grad(loss)(ws, x)
    return [w - 1e-3 * g for w, g in zip(ws, grads, strict=True)], value


def main() -> None:
    logdir, out = sys.argv[1], sys.argv[2]
    import stepscope

    keys = jax.random.split(jax.random.PRNGKey(0), LAYERS + 1)
    ws = [jax.random.normal(k, (WIDTH, WIDTH), jnp.bfloat16) * 0.01 for k in keys[:-1]]
    x = jax.random.normal(keys[-1], (BATCH, WIDTH), jnp.bfloat16)
    ws, value = train_step(ws, x)
    value.block_until_ready()
    cost = train_step.lower(ws, x).compile().cost_analysis()
    if isinstance(cost, list):
        cost = cost[0]
    walls = []
    stepscope.start(logdir, stepscope.ProfilerOptions(device_tracer_level=1))
    for i in range(STEPS):
        t = time.perf_counter()
        with stepscope.Trace("train", step_num=i, _r=1):
            ws, value = train_step(ws, x)
            value.block_until_ready()
        walls.append(time.perf_counter() - t)
    path = str(stepscope.stop())
    flops = (LAYERS + LAYERS + LAYERS - 1) * 2 * BATCH * WIDTH * WIDTH
    facts = {"path": path, "flops_per_step": flops, "xla_flops": float(cost.get("flops", -1)),
             "xla_bytes": float(cost.get("bytes accessed", -1)),
             "wall_ms": [w * 1e3 for w in walls], "jax": jax.__version__,
             "devices": [str(d) for d in jax.devices()],
             "device_kind": jax.devices()[0].device_kind,
             "memory_stats": jax.devices()[0].memory_stats() or {}}
    with open(out, "w") as f:
        json.dump(facts, f)
    print(json.dumps(facts))


if __name__ == "__main__":
    main()
