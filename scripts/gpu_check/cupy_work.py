"""CuPy work (a float32 matmul, an elementwise kernel, copies both ways) under a stepscope
session: the CUDA bridge (NVIDIA's cupti-python) records the GPU without a framework.

Usage: python3 cupy_work.py LOGDIR OUT_JSON
"""

from __future__ import annotations

import json
import sys
import time

import cupy as cp
import numpy as np

N, STEPS = 4096, 5


def main() -> None:
    logdir, out = sys.argv[1], sys.argv[2]
    import stepscope

    a = cp.random.random((N, N), dtype=cp.float32)
    b = cp.random.random((N, N), dtype=cp.float32)
    host = np.ones((1024, 1024), np.float32)
    (a @ b).sum()
    cp.cuda.Device().synchronize()
    walls = []
    stepscope.start(logdir, stepscope.ProfilerOptions(device_tracer_level=1))
    for i in range(STEPS):
        t = time.perf_counter()
        with stepscope.Trace("train", step_num=i, _r=1):
            h = cp.asarray(host)  # host to device
            c = cp.tanh(a @ b) + h.sum()
            float(c.sum())  # device to host
            cp.cuda.Device().synchronize()
        walls.append(time.perf_counter() - t)
    path = str(stepscope.stop())
    facts = {"path": path, "wall_ms": [w * 1e3 for w in walls], "cupy": cp.__version__,
             "flops_per_step": 2 * N ** 3}
    with open(out, "w") as f:
        json.dump(facts, f)
    print(json.dumps(facts))


if __name__ == "__main__":
    main()
