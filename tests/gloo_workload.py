"""A three-rank torch.distributed job on CPU (gloo), profiled with PyTorch's profiler, where
the last rank does forty times the others' compute before each step's all-reduce.

    python tests/gloo_workload.py OUTDIR PORT

Writes OUTDIR/rank<N>.pt.trace.json (Kineto JSON), one file per rank.
"""

from __future__ import annotations

import os
import sys

WORLD = 3
STEPS = 4  # the first is the profiler's warm-up: three are recorded
SLOW_MATMULS = 40


def _work(rank: int, world: int, out: str, port: int) -> None:
    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile, record_function, schedule

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    x = torch.randn(256, 256)
    grads = torch.randn(64, 1024)

    def ready(p: profile) -> None:
        p.export_chrome_trace(os.path.join(out, f"rank{rank}.pt.trace.json"))

    with profile(activities=[ProfilerActivity.CPU],
                 schedule=schedule(wait=0, warmup=1, active=STEPS - 1),
                 on_trace_ready=ready) as prof:
        for _ in range(STEPS):
            with record_function("compute"):
                y = x @ x
            if rank == world - 1:
                with record_function("slow_compute"):
                    for _ in range(SLOW_MATMULS):
                        y = y @ x
            dist.all_reduce(grads)
            prof.step()
    dist.destroy_process_group()


def main(argv: list[str]) -> int:
    import torch.multiprocessing as mp

    out, port = argv[0], int(argv[1])
    mp.spawn(_work, args=(WORLD, out, port), nprocs=WORLD)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
