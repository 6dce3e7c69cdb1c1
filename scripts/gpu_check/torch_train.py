"""A bf16 MLP trained on the GPU under a stepscope session (the PyTorch bridge), with the
figures to check stepscope's against: PyTorch's key_averages() of the same recording, the
step's matmul FLOPs counted by hand and the CUDA caching allocator's peak.

Usage: python3 torch_train.py LOGDIR OUT_JSON [--launcher]
(--launcher: no stepscope calls; ``stepscope profile -- python3 torch_train.py ...`` records.)
"""

from __future__ import annotations

import json
import os
import sys
import time

import torch

# GPU_CHECK_SMALL=1: a small run on the CPU, to try the script without a GPU.
SMALL = os.environ.get("GPU_CHECK_SMALL") == "1"
DEVICE = "cpu" if SMALL else "cuda"
WIDTH, BATCH, LAYERS, STEPS = (256, 64, 4, 8) if SMALL else (4096, 8192, 4, 8)


def main() -> None:
    logdir, out, launcher = sys.argv[1], sys.argv[2], "--launcher" in sys.argv
    torch.manual_seed(0)
    layers: list[torch.nn.Module] = []
    for _ in range(LAYERS):
        layers += [torch.nn.Linear(WIDTH, WIDTH, bias=False), torch.nn.GELU()]
    model = torch.nn.Sequential(*layers).to(DEVICE, torch.bfloat16)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    host_x = torch.randn(BATCH, WIDTH, dtype=torch.bfloat16)
    if not SMALL:
        host_x = host_x.pin_memory()

    def step() -> None:
        x = host_x.to(DEVICE, non_blocking=True)  # a copy to the device each step
        with torch.profiler.record_function("forward"):
            loss = model(x).float().pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if not SMALL:
            torch.cuda.synchronize()

    for _ in range(3):  # warm-up: cuBLAS handles, allocator pools
        step()
    if not SMALL:
        torch.cuda.reset_peak_memory_stats()
    walls: list[float] = []
    if launcher:
        for _ in range(STEPS):
            t = time.perf_counter()
            step()
            walls.append(time.perf_counter() - t)
        path = ""
    else:
        import stepscope
        import stepscope.torch

        stepscope.start(logdir, stepscope.ProfilerOptions(device_tracer_level=1))
        for i in range(STEPS):
            t = time.perf_counter()
            with stepscope.Trace("train", step_num=i, _r=1):
                step()
            walls.append(time.perf_counter() - t)
        path = str(stepscope.stop())
    # Matmul FLOPs of one step: forward and weight gradients in every layer, input
    # gradients in all but the first (the batch needs none).
    flops = (LAYERS + LAYERS + LAYERS - 1) * 2 * BATCH * WIDTH * WIDTH
    facts: dict = {"path": path, "flops_per_step": flops, "wall_ms": [w * 1e3 for w in walls],
                   "torch": torch.__version__}
    if not SMALL:
        facts["max_memory_allocated"] = torch.cuda.max_memory_allocated()
        facts["device"] = torch.cuda.get_device_name(0)
    if not launcher:
        prof = stepscope.torch.last_profiler()
        rows = []
        for e in prof.key_averages():
            rows.append({k: getattr(e, k, None) for k in (
                "key", "count", "self_cpu_time_total", "cpu_time_total", "device_time_total",
                "self_device_time_total", "cuda_time_total", "self_cuda_time_total",
                "self_device_memory_usage", "device_memory_usage")} |
                {"device_type": str(getattr(e, "device_type", ""))})
        facts["key_averages"] = rows
        # What Kineto's events say of a few device activities (the bridge reads these).
        samples = []
        for e in prof.profiler.kineto_results.events():
            if not str(e.device_type()).endswith("CPU") and len(samples) < 4:
                samples.append([e.name()[:80], e.metadata_json()])
        facts["device_event_metadata"] = samples
        prof.export_chrome_trace(out.replace(".json", ".pt.trace.json"))
    with open(out, "w") as f:
        json.dump(facts, f)
    print(json.dumps({k: v for k, v in facts.items() if k != "key_averages"}))


if __name__ == "__main__":
    main()
