"""Memory profile on a large profile: stepscope against XProf's memory_profile converter.

Writes one XSpace file whose host plane holds ``--events`` memory events (allocations and
frees of a few thousand live tensors on four threads, two allocators, TensorFlow's stats),
then times, side by side:

- XProf: ``xspace_to_tool_data(..., "memory_profile")`` (parse, summary, breakdown at the
  peak, a 1,000-point timeline);
- stepscope: reading the file (no cache), the memory events as columns, the summaries and
  breakdowns, and a 1,000-point timeline of the busiest allocator; then a second timeline
  query (a zoomed window), which is what each chart interaction costs on the server.

Usage: ``python benchmarks/memory_profile.py [--events 400000]``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

import checkout  # noqa: F401  (this checkout's sources first, for every process started)
from stepscope.analysis.run_model.memory_events import memory_events
from stepscope.analysis.run_model.memory_profile import host_memory, timeline
from stepscope.formats import xplane_builder as xb
from stepscope.formats.run_reader import load_file
from stepscope.model import schema


def _write(path: Path, events: int) -> None:
    rng = np.random.default_rng(0)
    space = xb.new_space("bench")
    host = xb.add_plane(space, schema.HOST_PLANE_ID, schema.HOST_PLANE)
    lines = [host.add_line(i + 1, f"thread {i}", 1_700_000_000_000_000_000) for i in range(4)]
    live: dict[str, dict[int, int]] = {"GPU_0_bfc": {}, "GPU_1_bfc": {}}
    in_use = dict.fromkeys(live, 0)
    ops = [f"model/layer_{i}/op_{j}" for i in range(50) for j in range(4)]
    t = lines[0].timestamp_ns
    next_addr = 1 << 20
    for i in range(events):
        t += int(rng.integers(100, 2000))
        name = "GPU_0_bfc" if i % 3 else "GPU_1_bfc"
        mine = live[name]
        free = len(mine) > 3000 or (mine and rng.random() < 0.45)
        if free:
            addr = next(iter(mine))
            size = mine.pop(addr)
            in_use[name] -= size
        else:
            size = int(rng.integers(1, 1 << 14)) * 256
            addr, next_addr = next_addr, next_addr + size
            mine[addr] = size
            in_use[name] += size
        host.add_event(lines[i % 4], schema.MEMORY_DEALLOCATION if free
                       else schema.MEMORY_ALLOCATION, t, 0, {
                           schema.ALLOCATOR_NAME: name, schema.BYTES_ALLOCATED: in_use[name],
                           schema.BYTES_RESERVED: 0, schema.BYTES_AVAILABLE: (16 << 30)
                           - in_use[name], schema.PEAK_BYTES_IN_USE: in_use[name],
                           schema.REQUESTED_BYTES: size, schema.ALLOCATION_BYTES: size,
                           schema.ADDRESS: addr, schema.TF_OP: ops[i % len(ops)],
                           schema.REGION_TYPE: "output", schema.DATA_TYPE: 1,
                           schema.TENSOR_SHAPES: f"[{size // 4}]",
                           schema.GROUP_ID: i * 10 // events})
    xb.write_space(space, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=400_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="stepscope-bench-") as tmp:
        path = Path(tmp) / "bench.xplane.pb"
        t0 = time.perf_counter()
        _write(path, args.events)
        print(f"{args.events:,} memory events, {path.stat().st_size / 2**20:.1f} MiB "
              f"(written in {time.perf_counter() - t0:.1f} s)")

        theirs = None
        try:
            from xprof.convert import raw_to_tool_data

            copy = Path(tmp) / "xprof" / path.name
            copy.parent.mkdir()
            shutil.copy(path, copy)
            t0 = time.perf_counter()
            data, _ = raw_to_tool_data.xspace_to_tool_data([str(copy)], "memory_profile", {})
            theirs = time.perf_counter() - t0
            json.loads(data)
        except ImportError:
            print("  XProf is not installed: stepscope's figures only")

        t0 = time.perf_counter()
        table = load_file(path, use_cache=False)
        t1 = time.perf_counter()
        ev = memory_events(table)
        result = host_memory("bench", table, ev, None)
        t2 = time.perf_counter()
        busiest = int(np.argmax(np.bincount(ev.allocator)))
        line = timeline(ev, busiest, result.start_ns, 1000)
        t3 = time.perf_counter()
        mid = result.start_ns + int((ev.time_ns[-1] - result.start_ns) * 0.4)
        zoom = timeline(ev, busiest, result.start_ns, 1000, mid, mid + 50_000_000)
        t4 = time.perf_counter()
        ours = t3 - t0
        if theirs is not None:
            print(f"  XProf memory_profile (parse + analysis)       {theirs * 1e3:9.1f} ms")
        print(f"  stepscope total (parse + analysis + timeline) {ours * 1e3:9.1f} ms"
              + (f"  ({ours / theirs:.2f}x XProf)" if theirs else ""))
        print(f"    read the file                               {(t1 - t0) * 1e3:9.1f} ms")
        print(f"    memory events, summaries, breakdowns        {(t2 - t1) * 1e3:9.1f} ms")
        print(f"    timeline, {line['points']:,} of {line['events']:,} points"
              f"{'':>12}{(t3 - t2) * 1e3:9.1f} ms")
        print(f"    zoomed timeline, {zoom['points']:,} of {zoom['events']:,} points"
              f"{'':>8}{(t4 - t3) * 1e3:9.1f} ms")


if __name__ == "__main__":
    main()
