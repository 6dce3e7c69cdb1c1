"""On-demand capture, stepscope against TensorFlow, on the same workload.

For 1 and 4 workers (separate processes on 127.0.0.1) running the same NumPy training loop,
once with stepscope's profiler server and once with TensorFlow's, it prints:

- capture latency: from the client's request to every worker's file on disk, for a
  ``--duration-ms`` window (and that latency less the window: the capture's own cost);
- training-step slowdown: the workers' median step time while the capture records, over their
  median step time just before it.

Usage: ``python benchmarks/capture.py [--duration-ms 1000] [--repeats 3] [--no-tf]``.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import checkout  # noqa: F401  (this checkout's sources first, for every process started)

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TF's "profiling is late" chatter

# One process of the workload; argv: kind ("stepscope" | "tf"), port. Each step is a little
# NumPy work and a short sleep (so 4 workers share 2 cores without starving each other).
# On "dump" (stdin) it prints the steps it timed since the last dump as JSON.
WORKER = r"""
import json, sys, threading, time
import numpy as np
kind, port = sys.argv[1], int(sys.argv[2])
if kind == "tf":
    import tensorflow as tf
    tf.profiler.experimental.server.start(port)
    Trace = tf.profiler.experimental.Trace
else:
    import stepscope
    port = stepscope.server.start(port)
    Trace = stepscope.Trace
print("ready", port, flush=True)
steps, lock = [], threading.Lock()

def commands():
    for line in sys.stdin:
        with lock:
            out = list(steps)
            steps.clear()
        print(json.dumps(out), flush=True)

threading.Thread(target=commands, daemon=True).start()
a = np.random.rand(96, 96)
i = 0
while True:
    t0 = time.perf_counter_ns()
    with Trace("train", step_num=i, _r=1):
        with Trace("matmul"):
            b = a @ a
        with Trace("reduce"):
            float(b.sum())
    t1 = time.perf_counter_ns()
    with lock:
        steps.append((time.time_ns(), t1 - t0))
    i += 1
    time.sleep(0.001)
"""


@dataclass
class Worker:
    """A running workload process."""

    proc: subprocess.Popen[str]
    port: int

    def dump(self) -> list[tuple[int, int]]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("dump\n")
        self.proc.stdin.flush()
        return [tuple(x) for x in json.loads(self.proc.stdout.readline())]  # type: ignore[misc]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_workers(kind: str, n: int) -> list[Worker]:
    workers = []
    for _ in range(n):
        port = _free_port()
        proc = subprocess.Popen([sys.executable, "-c", WORKER, kind, str(port)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        workers.append(Worker(proc, port))
    for w in workers:
        assert w.proc.stdout is not None
        line = w.proc.stdout.readline()
        if not line.startswith("ready"):
            raise RuntimeError(f"{kind} worker did not start: {line!r}")
        w.port = int(line.split()[1])
    time.sleep(1.0)  # let the loops settle
    return workers


def stop_workers(workers: list[Worker]) -> None:
    for w in workers:
        w.proc.kill()
        w.proc.wait(timeout=30)


def capture(kind: str, workers: list[Worker], logdir: Path, duration_ms: int) -> float:
    """One capture of every worker; seconds from the request to all files on disk."""
    addrs = ",".join(f"grpc://127.0.0.1:{w.port}" for w in workers)
    t0 = time.perf_counter()
    if kind == "tf":
        import tensorflow as tf

        tf.profiler.experimental.client.trace(addrs, str(logdir), duration_ms)
    else:
        import stepscope

        result = stepscope.client.trace(addrs, logdir, duration_ms, num_tracing_attempts=1)
        if not result.ok:
            raise RuntimeError(f"capture failed: {result.to_dict()}")
    elapsed = time.perf_counter() - t0
    files = list(logdir.rglob("*.xplane.pb"))
    if len(files) < len(workers):
        raise RuntimeError(f"{kind}: {len(files)} files for {len(workers)} workers")
    return elapsed


def measure(kind: str, n: int, duration_ms: int, repeats: int) -> dict[str, float]:
    """Median latency and step slowdown over ``repeats`` captures of ``n`` workers."""
    workers = start_workers(kind, n)
    latencies, slowdowns = [], []
    try:
        for _ in range(repeats):
            for w in workers:
                w.dump()  # forget older steps
            time.sleep(1.0)
            before = [d for w in workers for _, d in w.dump()]
            with tempfile.TemporaryDirectory() as tmp:
                start_ns = time.time_ns()
                latencies.append(capture(kind, workers, Path(tmp), duration_ms))
                end_ns = time.time_ns()
            during = [d for w in workers for t, d in w.dump() if start_ns <= t <= end_ns]
            slowdowns.append(statistics.median(during) / statistics.median(before))
    finally:
        stop_workers(workers)
    return {"latency_s": statistics.median(latencies),
            "slowdown": statistics.median(slowdowns)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration-ms", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-tf", action="store_true", help="skip TensorFlow's side")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    kinds = ["stepscope"] + ([] if args.no_tf else ["tf"])
    results: dict[str, dict[str, float]] = {}
    for n in (1, 4):
        for kind in kinds:
            print(f"… {kind}, {n} worker(s)", file=sys.stderr, flush=True)
            results[f"{kind}/{n}"] = measure(kind, n, args.duration_ms, args.repeats)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    window = args.duration_ms / 1000
    print(f"capture of a {args.duration_ms} ms window, median of {args.repeats} "
          f"(latency = request → every file on disk)")
    print(f"{'workers':>7}  {'tool':<9}  {'latency':>9}  {'less window':>11}  "
          f"{'step slowdown':>13}")
    for n in (1, 4):
        for kind in kinds:
            r = results[f"{kind}/{n}"]
            print(f"{n:>7}  {kind:<9}  {r['latency_s']:>8.3f}s  "
                  f"{r['latency_s'] - window:>10.3f}s  {r['slowdown']:>12.2f}x")
        if "tf" in kinds:
            ours, theirs = results[f"stepscope/{n}"], results[f"tf/{n}"]
            print(f"{n:>7}  {'ratio':<9}  {ours['latency_s'] / theirs['latency_s']:>8.2f}x  "
                  f"{'':>11}  {ours['slowdown'] / theirs['slowdown']:>12.2f}x")


if __name__ == "__main__":
    main()
