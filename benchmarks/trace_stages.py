"""The trace viewer's load path on one profile, stage by stage, in this process (no cache):
the decode, the track plan, the flows, the coarse overview and its window, the per-track
table and its full-width exact window; per stage its wall, user and system time, minor page
faults and resident memory (system time is mostly memory touched for the first time: on a VM
that lends memory lazily, seconds a GB). With ``--serve``: a fresh ``stepscope serve`` (empty
cache) instead, from its spawn to its first (coarse) window and its first window with events,
and its resident peak; with ``--base-src DIR`` the same for that source tree, interleaved.

    .venv/bin/python benchmarks/trace_stages.py PROFILE
    .venv/bin/python benchmarks/trace_stages.py --serve [--repeats N] [--base-src DIR] PROFILE

A profile of 500 MB or more must be measured under the machine's lock (``flock``).
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import checkout  # noqa: F401  (this checkout's src first)
from track_table_windows import _rss_mb


class _Stage:
    """Times one stage (``with``) and prints its line."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __enter__(self) -> None:
        self.r0 = resource.getrusage(resource.RUSAGE_SELF)
        self.t0 = time.perf_counter()
        self.m0 = _rss_mb()

    def __exit__(self, *exc: Any) -> None:
        r1 = resource.getrusage(resource.RUSAGE_SELF)
        print(f"  {self.name:13s} wall {time.perf_counter() - self.t0:6.2f} s  user "
              f"{r1.ru_utime - self.r0.ru_utime:5.2f}  sys {r1.ru_stime - self.r0.ru_stime:5.2f}"
              f"  faults {r1.ru_minflt - self.r0.ru_minflt:8d}  rss {self.m0} -> {_rss_mb()} MB"
              f"  peak {r1.ru_maxrss // 1024} MB", flush=True)


def in_process(path: Path) -> None:
    """Each stage of the load path in this process."""
    from stepscope.analysis.trace.trace_index import plan_tracks
    from stepscope.analysis.trace.trace_overview import TraceOverview
    from stepscope.analysis.trace.track_table import TrackTable, flows_of
    from stepscope.formats.run_reader import reader_of

    read = reader_of(path)
    print(f"{path} ({path.stat().st_size / 2**20:,.0f} MB), in one process:")
    with _Stage("decode"):
        table = read(path)
    with _Stage("plan"):
        plan = plan_tracks(table)
    with _Stage("flows"):
        flows = flows_of(table, plan)
    with _Stage("overview"):
        overview = TraceOverview(table, plan)
    with _Stage("coarse window"):
        overview.query(0, overview.span_ns, 2000)
    with _Stage("track table"):
        events = TrackTable(table, plan, overview.order, flows)
    del overview
    with _Stage("exact window"):
        events.query(0, events.span_ns, 2000)
    print(f"  {len(table):,} events")


def _serve_once(path: Path, src: str | None) -> tuple[float, float, float]:
    """(spawn → first window, → first window with events, resident peak MB) of a fresh
    server on ``path`` (``src``: another source tree's)."""
    sys.path.insert(0, str(Path(__file__).parent))
    import trace_viewer as tv

    with tempfile.TemporaryDirectory(prefix="stepscope-stages-") as tmp:
        old = os.environ.get("PYTHONPATH")
        if src is not None:
            os.environ["PYTHONPATH"] = src
        try:
            server = tv._Server(path, Path(tmp))
        finally:
            if src is not None:
                if old is None:
                    os.environ.pop("PYTHONPATH", None)
                else:
                    os.environ["PYTHONPATH"] = old
        try:
            server.wait_up()
            meta = server.poll("data", tool="trace_viewer")
            window = server.poll("trace/window", start_ns="0", end_ns=str(meta["span_ns"]),
                                 width="2000")
            first = time.perf_counter() - server.spawned
            while window.get("coarse"):
                time.sleep(0.02)
                window = server.poll("trace/window", start_ns="0",
                                     end_ns=str(meta["span_ns"]), width="2000")
            exact = time.perf_counter() - server.spawned
            return first, exact, server.rss_mb("VmHWM")
        finally:
            server.close()


def serve(path: Path, repeats: int, base_src: str | None) -> None:
    """Fresh servers on ``path``, this tree's (and ``base_src``'s), interleaved."""
    print(f"{path} ({path.stat().st_size / 2**20:,.0f} MB), a fresh `stepscope serve`, "
          "empty cache, seconds from its spawn:")
    for _ in range(repeats):
        for label, src in (("ours", None), ("base", base_src)):
            if label == "base" and src is None:
                continue
            first, exact, peak = _serve_once(path, src)
            print(f"  {label}  first window {first:6.2f}  first window with events "
                  f"{exact:6.2f}  resident peak {peak:,.0f} MB", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("profile", type=Path)
    parser.add_argument("--serve", action="store_true")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--base-src")
    args = parser.parse_args()
    if not args.profile.is_file():
        sys.exit(f"trace_stages: no profile file {args.profile}")
    if args.serve:
        serve(args.profile, args.repeats, args.base_src)
    else:
        in_process(args.profile)


if __name__ == "__main__":
    main()
