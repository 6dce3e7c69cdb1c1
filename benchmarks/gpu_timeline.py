"""GPU timeline on the largest shared Kineto trace: stepscope against HTA (``traceinsight``).

Times, on ``--path`` (default: HTA's own 216,000-event V100 trace of the shared fixtures):

- stepscope, the trace read once (not timed; the run's tables come from the cache in the UI):
  the device ops as columns (``gpu_ops``), then every figure of the tool (breakdowns whole
  and per step, idle causes, overlap, launch statistics, queues, kernel sequences, critical
  paths), then the JSON of the result (what a cached result costs to serve again);
- HTA, where ``STEPSCOPE_HTA_PYTHON`` (or /tmp/hta-venv) has it: its trace parse, and then its
  temporal breakdown, idle time breakdown, overlap and launch statistics (the four questions
  both answer), timed separately in a process of its own.

Prints a table and writes ``--json`` (default test-artifacts/bench/gpu_timeline.json).
Usage: ``python benchmarks/gpu_timeline.py [--path TRACE] [--repeat 5]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import checkout  # noqa: F401  (this checkout's sources first, for every process started)
from stepscope.analysis.tools.gpu_ops import gpu_ops
from stepscope.analysis.tools.gpu_timeline import gpu_timeline
from stepscope.formats.run_reader import load

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = (ROOT.parent / "shared/fixtures/gpu/HolisticTraceAnalysis/tests/data/"
           "df_index_resolver/df_index_resolver.json.gz")

HTA_WORKER = r"""
import json, logging, os, shutil, sys, tempfile, time, warnings
os.environ["HTA_DISABLE_NS_ROUNDING"] = "1"
logging.disable(logging.CRITICAL); warnings.simplefilter("ignore")
from hta.trace_analysis import TraceAnalysis
path, repeat = sys.argv[1], int(sys.argv[2])
tmp = tempfile.mkdtemp(); os.symlink(path, os.path.join(tmp, os.path.basename(path)))
t0 = time.perf_counter()
a = TraceAnalysis(trace_dir=tmp, include_last_profiler_step=True)
parse = time.perf_counter() - t0
rank = sorted(a.t.traces)[0]
times = []
for _ in range(repeat):
    t0 = time.perf_counter()
    a.get_temporal_breakdown(visualize=False)
    a.get_idle_time_breakdown(ranks=[rank], visualize=False)
    a.get_comm_comp_overlap(visualize=False)
    a.get_cuda_kernel_launch_stats(ranks=[rank], visualize=False)
    times.append(time.perf_counter() - t0)
shutil.rmtree(tmp)
print(json.dumps({"parse_s": parse, "analyses_s": sorted(times)[len(times) // 2]}))
"""


def _hta(path: Path, repeat: int) -> dict[str, float] | None:
    python = os.environ.get("STEPSCOPE_HTA_PYTHON") or "/tmp/hta-venv/bin/python"
    if not Path(python).exists():
        return None
    done = subprocess.run([python, "-c", HTA_WORKER, str(path), str(repeat)],
                          capture_output=True, text=True, timeout=1800)
    if done.returncode:
        print(f"HTA failed: {done.stderr[-500:]}", file=sys.stderr)
        return None
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--path", type=Path, default=DEFAULT)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", type=Path,
                        default=ROOT / "test-artifacts/bench/gpu_timeline.json")
    args = parser.parse_args()
    profile = load(args.path, use_cache=False)
    events = sum(len(t) for t in profile.hosts.values())
    ops_s, tool_s, json_s = [], [], []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        hosts = {n: gpu_ops(n, profile.hosts[n]) for n in profile.hosts}
        t1 = time.perf_counter()
        result = gpu_timeline(profile.run, hosts)
        t2 = time.perf_counter()
        text = json.dumps(result.to_dict(), allow_nan=False)
        t3 = time.perf_counter()
        ops_s.append(t1 - t0)
        tool_s.append(t2 - t1)
        json_s.append(t3 - t2)
    med = statistics.median
    ours = {"device_ops_s": med(ops_s), "figures_s": med(tool_s), "json_s": med(json_s)}
    ours["whole_tool_s"] = ours["device_ops_s"] + ours["figures_s"] + ours["json_s"]
    hta = _hta(args.path.resolve(), args.repeat)
    print(f"{args.path.name}: {events:,} events, "
          f"{sum(d.ops for d in result.devices):,} device ops, JSON {len(text) / 1024:.0f} KiB")
    print(f"{'what':44} {'seconds':>9}")
    for key, value in ours.items():
        print(f"{'stepscope ' + key:44} {value:9.3f}")
    if hta:
        print(f"{'HTA parse (its own trace reading)':44} {hta['parse_s']:9.3f}")
        print(f"{'HTA temporal+idle+overlap+launch stats':44} {hta['analyses_s']:9.3f}")
        print(f"ratio HTA's four analyses / stepscope's whole tool: "
              f"{hta['analyses_s'] / ours['whole_tool_s']:.1f}x")
    else:
        print("HTA: not installed (set STEPSCOPE_HTA_PYTHON to a Python that has traceinsight)")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"path": str(args.path), "events": events,
                                     "stepscope": ours, "hta": hta}, indent=2))


if __name__ == "__main__":
    main()
