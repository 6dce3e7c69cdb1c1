"""Run model benchmark: cold and cached open of 8-host runs, and every tool on a cached run.

Two real 8-host runs:

* ``dlrm-8-ranks``: the 8 NCCL ranks of PyTorch DLRM (Kineto JSON) from ../shared/fixtures;
* ``tf-v100-x8``: TensorFlow's multi-worker V100 XSpace fixture laid out as 8 hosts of one run
  (the same file under 8 host names), which XProf reads too.

For each run, in a fresh cache directory, it times:

1. cold: ``open_run_model`` with nothing cached (parse every host, build the model, cache it);
2. tables cached, no model: the model rebuilt from the cached host tables;
3. cached: ``open_run_model`` again (the model's one cache entry, no table loaded);
4. each tool answered from the cached model: overview, op stats (with and without idle),
   kernel stats, input pipeline, pod viewer — the goal is at most 100 ms each;
5. XProf, where it reads the run (XSpace): ``xspace_to_tool_data`` for ``overview_page`` and
   ``pod_viewer`` on the same files, side by side, as a ratio.

Run: ``.venv/bin/python benchmarks/run_model.py`` (about a minute). Figures are the median of
``--repeats`` runs (default 3).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import checkout  # noqa: F401  (this checkout's sources first, for every process started)

FIXTURES = Path(__file__).resolve().parents[1].parent / "shared" / "fixtures" / "gpu"
DLRM = FIXTURES / "param/et_replay/tests/inputs/dlrm_kineto"
TF_V100 = FIXTURES / "xprof/demo/plugins/profile/GPU-multi-worker/34.83.195.179_6003.xplane.pb"
GOAL_TOOL_MS = 100.0


def _timed(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    """Median milliseconds of ``repeats`` calls, and the last result."""
    times, result = [], None
    for _ in range(repeats):
        started = time.perf_counter()
        result = fn()
        times.append((time.perf_counter() - started) * 1e3)
    return statistics.median(times), result


def _make_runs(root: Path) -> dict[str, Path]:
    dlrm = root / "dlrm-8-ranks"
    shutil.copytree(DLRM, dlrm)
    tf = root / "tf-v100-x8"
    tf.mkdir()
    for i in range(8):
        shutil.copy(TF_V100, tf / f"worker{i}.xplane.pb")
    return {"dlrm-8-ranks": dlrm, "tf-v100-x8": tf}


def _clear_models(cache_dir: Path) -> None:
    from stepscope.analysis.run_model import RUN_MODEL_NAME

    for entry in cache_dir.glob(f"*.{RUN_MODEL_NAME}.cache"):
        entry.unlink()


def measure(name: str, run: Path, cache_dir: Path, repeats: int) -> dict[str, Any]:
    """Every figure of one run (see the module docstring)."""
    from stepscope.analysis.tools.input_pipeline import input_pipeline_of
    from stepscope.run.loader import open_run_model, pod_dict

    def cold() -> Any:
        shutil.rmtree(cache_dir, ignore_errors=True)
        return open_run_model(run)

    def from_tables() -> Any:
        _clear_models(cache_dir)
        return open_run_model(run)

    out: dict[str, Any] = {"run": name, "hosts": 0}
    out["cold_ms"], _ = _timed(cold, repeats)
    out["tables_cached_ms"], _ = _timed(from_tables, repeats)
    out["cached_open_ms"], model = _timed(lambda: open_run_model(run), repeats)
    out["hosts"] = len(model.hosts)
    tools: dict[str, Callable[[], Any]] = {
        "overview": lambda: model.overview_dict(),  # what report and the web page ask
        "op stats": lambda: model.op_stats().to_dict(),
        "op stats + idle": lambda: model.op_stats(include_idle=True).to_dict(),
        "kernel stats": lambda: model.kernel_stats().to_dict(),
        "input pipeline": lambda: input_pipeline_of(model).to_dict(),
        "pod viewer": lambda: pod_dict(model),  # what pod and the web page ask
    }
    # A tool as a fresh process would answer it: open the cached model, then compute.
    out["tools_ms"] = {tool: _timed(lambda f=fn: (open_run_model(run), f()), repeats)[0]
                       for tool, fn in tools.items()}
    return out


def measure_xprof(run: Path, repeats: int) -> dict[str, float] | None:
    """XProf's overview page and pod viewer on the run's XSpace files, or None; each repeat
    on a fresh copy of the files, so that XProf's own saved results are not reused."""
    if not any(run.glob("*.xplane.pb")):
        return None
    try:
        from xprof.convert import raw_to_tool_data
    except ImportError:
        return None
    out = {}
    for tool in ("overview_page", "pod_viewer"):
        times = []
        for i in range(repeats):
            copy = run.parent / f"xprof-{tool}-{i}"
            shutil.copytree(run, copy)
            files = sorted(str(p) for p in copy.glob("*.xplane.pb"))
            started = time.perf_counter()
            raw_to_tool_data.xspace_to_tool_data(files, tool, {})
            times.append((time.perf_counter() - started) * 1e3)
            shutil.rmtree(copy)
        out[tool] = statistics.median(times)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="stepscope-bench-runmodel-") as tmp:
        root = Path(tmp)
        cache_dir = root / "cache"
        os.environ["STEPSCOPE_CACHE_DIR"] = str(cache_dir)
        os.environ.pop("STEPSCOPE_NO_CACHE", None)
        for name, run in _make_runs(root).items():
            ours = measure(name, run, cache_dir, args.repeats)
            theirs = measure_xprof(run, args.repeats)
            print(f"\n{name}: {ours['hosts']} hosts")
            print(f"  cold open (parse + model)      {ours['cold_ms']:9.1f} ms")
            print(f"  tables cached, model rebuilt   {ours['tables_cached_ms']:9.1f} ms")
            print(f"  cached open (model only)       {ours['cached_open_ms']:9.1f} ms")
            worst = max(ours["tools_ms"].values())
            for tool, ms in ours["tools_ms"].items():
                print(f"  {tool + ', cached':<30} {ms:9.1f} ms")
            print(f"  every tool ≤ {GOAL_TOOL_MS:.0f} ms cached: {worst <= GOAL_TOOL_MS} "
                  f"(slowest {worst:.1f} ms)")
            if theirs:
                for tool, ms in theirs.items():
                    mine = ours["tools_ms"]["overview" if tool == "overview_page"
                                            else "pod viewer"]
                    print(f"  XProf {tool:<24} {ms:9.1f} ms   ours cached {mine:.1f} ms "
                          f"({mine / ms:.3f}×); ours cold {ours['cold_ms']:.1f} ms "
                          f"({ours['cold_ms'] / ms:.2f}×)")
            else:
                print("  XProf: does not read this run's format (Kineto JSON) or is not "
                      "installed")


if __name__ == "__main__":
    main()
