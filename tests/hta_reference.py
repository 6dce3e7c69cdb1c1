"""HTA (``traceinsight``) figures for Kineto traces, printed as JSON: run with the Python that
has HTA installed (the tests call it in a separate virtual environment when there is one).

    python tests/hta_reference.py OUT.json DIR_OR_FILE...

Each argument is one run: a directory of rank traces, or one trace file. For each run and rank
it records HTA's temporal breakdown, idle time breakdown (every stream), communication and
computation overlap, and the kernel launch statistics summed (count, CPU duration, GPU duration,
launch delay).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
import tempfile
import warnings
from typing import Any


def _run_dir(path: str) -> tuple[str, str | None]:
    """A directory holding the run's traces (a file gets a temporary one of its own)."""
    if os.path.isdir(path):
        return path, None
    tmp = tempfile.mkdtemp(prefix="hta-ref-")
    os.symlink(os.path.abspath(path), os.path.join(tmp, os.path.basename(path)))
    return tmp, tmp


def _figures(path: str) -> dict[str, Any]:
    from hta.trace_analysis import TraceAnalysis

    directory, cleanup = _run_dir(path)
    try:
        analysis = TraceAnalysis(trace_dir=directory, include_last_profiler_step=True)
        ranks = sorted(int(r) for r in analysis.t.traces)
        out: dict[str, Any] = {"ranks": {}}
        temporal = analysis.get_temporal_breakdown(visualize=False)
        overlap = analysis.get_comm_comp_overlap(visualize=False)
        launch = analysis.get_cuda_kernel_launch_stats(ranks=ranks, visualize=False)
        for rank in ranks:
            row = temporal[temporal["rank"] == rank].iloc[0]
            ov = overlap[overlap["rank"] == rank].iloc[0]
            idle, _ = analysis.get_idle_time_breakdown(ranks=[rank], visualize=False)
            streams: dict[str, dict[str, float]] = {}
            for _, r in idle.iterrows():
                streams.setdefault(str(int(r["stream"])), {})[str(r["idle_category"])] = \
                    float(r["idle_time"])
            ev = launch[rank]
            out["ranks"][str(rank)] = {
                "idle_us": float(row["idle_time(us)"]),
                "compute_us": float(row["compute_time(us)"]),
                "non_compute_us": float(row["non_compute_time(us)"]),
                "span_us": float(row["kernel_time(us)"]),
                "overlap_percent": float(ov["comp_comm_overlap_pctg"]),
                "idle_streams": streams,
                "launch": {"count": int(len(ev)),
                           "cpu_duration_us": float(ev["cpu_duration"].sum()),
                           "gpu_duration_us": float(ev["gpu_duration"].sum()),
                           "launch_delay_us": float(ev["launch_delay"].sum())},
            }
        return out
    finally:
        if cleanup:
            shutil.rmtree(cleanup, ignore_errors=True)


def main(argv: list[str]) -> int:
    # HTA rounds fractional-microsecond times inwards (start up, end down) unless told not to;
    # the comparison is of the same events, so it keeps their full precision.
    os.environ["HTA_DISABLE_NS_ROUNDING"] = "1"
    logging.disable(logging.CRITICAL)
    warnings.simplefilter("ignore")
    out_path, runs = argv[0], argv[1:]
    results: dict[str, Any] = {}
    for path in runs:
        try:
            results[path] = _figures(path)
        except Exception as err:  # HTA cannot read this trace: say so, go on
            results[path] = {"error": f"{type(err).__name__}: {err}"}
    with open(out_path, "w") as f:
        json.dump(results, f, indent=1, sort_keys=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
