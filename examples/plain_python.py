"""A plain Python program (NumPy only) that marks its steps with stepscope's Trace, which
records nothing and costs about a function call when no session runs.

    stepscope profile --python-tracer -- python examples/plain_python.py --steps 20
"""

import argparse
import sys

import numpy as np

from stepscope import Trace


def step(rng: np.random.Generator, w: np.ndarray) -> float:
    with Trace("load_batch"):
        x = rng.standard_normal((256, w.shape[0]))
    with Trace("compute"):
        return float(np.tanh(x @ w).sum())


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--exit-code", type=int, default=0, help="exit with this code")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    w = rng.standard_normal((128, 128))
    total = 0.0
    for i in range(args.steps):
        with Trace("train", step_num=i, _r=1):
            total += step(rng, w)
    print(f"total {total:.3f}")
    return args.exit_code


if __name__ == "__main__":
    sys.exit(main())
