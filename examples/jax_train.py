"""A small JAX training loop whose steps are marked with JAX's own StepTraceAnnotation.

    stepscope profile -- python examples/jax_train.py --steps 10
"""

import argparse

import jax
import jax.numpy as jnp


def loss_fn(w, x, y):
    return jnp.mean((jnp.tanh(x @ w["a"]) @ w["b"] - y) ** 2)


@jax.jit
def update(w, x, y):
    grads = jax.grad(loss_fn)(w, x, y)
    return jax.tree_util.tree_map(lambda p, g: p - 0.05 * g, w, grads), loss_fn(w, x, y)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    key_a, key_b, key_x = jax.random.split(jax.random.PRNGKey(0), 3)
    w = {"a": jax.random.normal(key_a, (64, 128)) * 0.1,
         "b": jax.random.normal(key_b, (128, 1)) * 0.1}
    x = jax.random.normal(key_x, (256, 64))
    y = jnp.sum(x, axis=1, keepdims=True)
    loss = None
    for step in range(args.steps):
        with jax.profiler.StepTraceAnnotation("train", step_num=step):
            w, loss = update(w, x, y)
            loss.block_until_ready()
    print(f"final loss {float(loss):.4f}")


if __name__ == "__main__":
    main()
