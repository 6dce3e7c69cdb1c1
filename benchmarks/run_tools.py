"""Every declared tool on a run opened before (its model and results in the on-disk cache),
through ``stepscope.open``: the time a fresh process takes to open the run and answer the
tool. Goal: at most 100 ms each.

Runs: the 8 ranks of PyTorch DLRM (Kineto JSON), JAX on 8 MI300X (XSpace with XLA programs
and their HLO) and TensorFlow on 8 V100s (XSpace), from ../shared/fixtures.

Run: ``.venv/bin/python benchmarks/run_tools.py [--repeats N]`` (about a minute); figures go
to benchmarks/results/run_tools.json (see harness.py).
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from pathlib import Path

from harness import Bench

FIXTURES = Path(__file__).resolve().parents[1].parent / "shared" / "fixtures" / "gpu"
RUNS = {
    "dlrm-8-ranks": FIXTURES / "param/et_replay/tests/inputs/dlrm_kineto",
    "jax-mi300x": FIXTURES / "TraceLens/tests/traces/mi300/jax_conv_minimal_08",
    "tf-v100-x8": FIXTURES / "xprof/demo/plugins/profile/GPU-multi-worker",
}
GOAL_MS = 100.0
PARAMS = {"trace_search": {"q": "a"}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    os.environ["STEPSCOPE_CACHE_DIR"] = tempfile.mkdtemp(prefix="stepscope-bench-cache-")
    import stepscope

    bench = Bench("run_tools", f"Every tool on a cached run: open + answer, median of "
                  f"{args.repeats} (ms; goal <= {GOAL_MS:.0f})")
    root = Path(tempfile.mkdtemp(prefix="stepscope-bench-runs-"))
    try:
        dirs = {label: root / label for label in RUNS}
        for label, source in RUNS.items():
            shutil.copytree(source, dirs[label])
        for label, run_dir in dirs.items():
            # diff needs a baseline: another of the runs
            base = next(str(d) for other, d in dirs.items() if other != label)
            params = {**PARAMS, "diff": {"base": base}}
            first = stepscope.open(run_dir)
            cold = Bench.time(lambda r=first: r.overview(), 1)
            for name in first.available_tools():  # answered once: kept in the cache
                first.tool(name, **params.get(name, {}))
            for name in first.available_tools():
                ms = Bench.time(lambda n=name, d=run_dir, p=params: stepscope.open(d).tool(
                    n, **p.get(n, {})), args.repeats)
                bench.row(run=label, tool=name, ms=ms, within_goal=ms <= GOAL_MS,
                          cold_open_and_overview_ms=round(cold))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    bench.finish()


if __name__ == "__main__":
    main()
