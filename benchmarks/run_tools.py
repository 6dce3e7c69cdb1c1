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

import checkout  # noqa: F401  (this checkout's sources first, for every process started)
from harness import Bench

FIXTURES = Path(__file__).resolve().parents[1].parent / "shared" / "fixtures" / "gpu"
RUNS = {
    "dlrm-8-ranks": FIXTURES / "param/et_replay/tests/inputs/dlrm_kineto",
    "jax-mi300x": FIXTURES / "TraceLens/tests/traces/mi300/jax_conv_minimal_08",
    "tf-v100-x8": FIXTURES / "xprof/demo/plugins/profile/GPU-multi-worker",
}
GOAL_MS = 100.0
PARAMS = {"trace_search": {"q": "a"}}


def tool_times(run_dir: Path, base: Path, repeats: int) -> tuple[float, dict[str, float]]:
    """The run's cold open + overview (ms), then each tool's time (ms, median of ``repeats``)
    on the cached run: a fresh ``stepscope.open`` and the tool's answer, after one first
    answer of every tool filled the cache. ``base``: the diff tool's baseline run."""
    import stepscope

    params = {**PARAMS, "diff": {"base": str(base)}}
    first = stepscope.open(run_dir)
    cold = Bench.time(lambda: first.overview(), 1)
    for name in first.available_tools():  # answered once: kept in the cache
        first.tool(name, **params.get(name, {}))
    times = {}
    for name in first.available_tools():
        times[name] = Bench.time(lambda n=name: stepscope.open(run_dir).tool(
            n, **params.get(n, {})), repeats)
    return cold, times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    os.environ["STEPSCOPE_CACHE_DIR"] = tempfile.mkdtemp(prefix="stepscope-bench-cache-")

    bench = Bench("run_tools", f"Every tool on a cached run: open + answer, median of "
                  f"{args.repeats} (ms; goal <= {GOAL_MS:.0f})")
    root = Path(tempfile.mkdtemp(prefix="stepscope-bench-runs-"))
    try:
        dirs = {label: root / label for label in RUNS}
        for label, source in RUNS.items():
            shutil.copytree(source, dirs[label])
        for label, run_dir in dirs.items():
            # diff needs a baseline: another of the runs
            base = next(d for other, d in dirs.items() if other != label)
            cold, times = tool_times(run_dir, base, args.repeats)
            for name, ms in times.items():
                bench.row(run=label, tool=name, ms=ms, within_goal=ms <= GOAL_MS,
                          cold_open_and_overview_ms=round(cold))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    bench.finish()


if __name__ == "__main__":
    main()
