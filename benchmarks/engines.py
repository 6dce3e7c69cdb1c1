"""Engines benchmark: a 16-host run of about 10 MB per host, analysed in one process, in the
embedded process pool, and on a local Ray, with no cache (every host parsed).

The host files are one real stepscope capture (Trace events and Python-tracer calls), made
once into ``.bench-profiles/engines/`` and copied under 16 host names. Each engine runs in a
fresh process, which prints its wall time (the host tasks only, not starting Ray), its own
peak RSS, and the largest peak RSS of a process that ran a task (for ``local``, the driver
itself). Also printed: the bytes of host models that travelled
back to the driver, against the bytes of the profiles.

Run: ``.venv/bin/python benchmarks/engines.py [--hosts 16] [--repeats 1]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import checkout  # noqa: F401  (this checkout's sources first, for every process started)

ROOT = Path(__file__).resolve().parents[1]
STORE = ROOT / ".bench-profiles" / "engines"

MAKE = """
import sys, stepscope
logdir = sys.argv[1]
stepscope.start(logdir, options=stepscope.ProfilerOptions(counter_interval_ms=0,
                python_tracer_level=1, max_events=5_000_000))
def leaf(i):
    return i * i
for step in range(200):
    with stepscope.Trace("train", step_num=step, _r=1):
        for i in range(600):
            with stepscope.Trace("op"):
                leaf(i)
print(stepscope.stop())
"""

CHILD = """
import json, resource, sys, time
from stepscope.run.engines import run_tasks, tasks_for
from stepscope.formats.run_reader import host_names
from stepscope.model.logdir import resolve
run, engine = sys.argv[1], sys.argv[2]
if engine == "ray":
    import ray
    ray.init(include_dashboard=False, log_to_driver=False)
_, _, files, _ = resolve(run)
tasks = tasks_for(files, host_names(files))
started = time.perf_counter()
results = run_tasks(tasks, engine, use_cache=False)
wall = time.perf_counter() - started
returned = sum(len(r.model_json or "") for r in results)
print(json.dumps({"wall_s": wall, "hosts": len(results), "returned_bytes": returned,
                  "self_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "task_mb": max(r.peak_rss_bytes for r in results) / 2**20}))
"""


COMBINE = """
import json, resource, sys, time
from stepscope.analysis.run_model import LazyHosts, RunModel, combine
from stepscope.run.engines import run_tasks, tasks_for
from stepscope.formats.run_reader import host_names
from stepscope.model.logdir import resolve
run, hosts = sys.argv[1], int(sys.argv[2])
_, _, files, _ = resolve(run)
result = run_tasks(tasks_for(files[:1], ["h"]), "local", use_cache=False)[0]
import psutil
before = psutil.Process().memory_info().rss / 2**20
raw = {f"host{i:04d}": result.model_json for i in range(hosts)}
started = time.perf_counter()
model = RunModel("run", run, LazyHosts(raw), {})
model.combined = combine(model)
wall = time.perf_counter() - started
after = psutil.Process().memory_info().rss / 2**20
size = sum(len(t) for t in raw.values())
print(f"driver combine of {hosts} host models ({size / 1e6:.0f} MB of JSON): "
      f"{wall:.1f} s, +{after - before:.0f} MB resident after")
"""


def host_file() -> Path:
    """The ~10 MB host profile, recorded once."""
    done = list(STORE.glob("**/*.xplane.pb"))
    if done:
        return done[0]
    STORE.mkdir(parents=True, exist_ok=True)
    out = subprocess.run([sys.executable, "-c", MAKE, str(STORE / "logs")], check=True,
                         capture_output=True, text=True)
    return Path(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hosts", type=int, default=16)
    parser.add_argument("--engines", default="local,pool,ray")
    parser.add_argument("--combine", type=int, default=1000,
                        help="host models the driver combines in the last measurement")
    args = parser.parse_args()
    source = host_file()
    size = source.stat().st_size
    with tempfile.TemporaryDirectory(prefix="stepscope-bench-engines-") as tmp:
        run = Path(tmp) / "run"
        run.mkdir()
        for i in range(args.hosts):
            shutil.copyfile(source, run / f"host{i:03d}.xplane.pb")
        print(f"{args.hosts} hosts × {size / 1e6:.1f} MB = {args.hosts * size / 1e6:.0f} MB, "
              f"{os.cpu_count()} cores, no cache")
        print(f"{'engine':<8} {'wall s':>8} {'driver MB':>10} {'task MB':>10} "
              f"{'returned MB':>12}")
        figures = {}
        for engine in args.engines.split(","):
            env = {**os.environ, "STEPSCOPE_NO_CACHE": "1"}
            done = subprocess.run([sys.executable, "-c", CHILD, str(run), engine], env=env,
                                  capture_output=True, text=True)
            if done.returncode:
                print(f"{engine:<8} failed: {done.stderr.strip().splitlines()[-1:]}")
                continue
            f = json.loads(done.stdout.strip().splitlines()[-1])
            figures[engine] = f
            worker = f"{f['task_mb']:.0f}"
            print(f"{engine:<8} {f['wall_s']:8.2f} {f['self_mb']:10.0f} {worker:>10} "
                  f"{f['returned_bytes'] / 1e6:12.2f}")
        if "local" in figures:
            for engine, f in figures.items():
                if engine != "local":
                    print(f"{engine} ÷ local wall time: "
                          f"{f['wall_s'] / figures['local']['wall_s']:.2f}×")
        done = subprocess.run([sys.executable, "-c", COMBINE, str(run), str(args.combine)],
                              capture_output=True, text=True, check=True)
        print(done.stdout.strip())


if __name__ == "__main__":
    main()
