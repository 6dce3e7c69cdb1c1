"""The trace viewer's load path on one profile, stage by stage, in this process (no cache):
the skim of an XSpace file (the first picture of a big one), the decode, the track plan, the
flows, the coarse overview and its window, the per-track table and its full-width exact
window; per stage its wall, user and system time, minor page
faults and resident memory (system time is mostly memory touched for the first time: on a VM
that lends memory lazily, seconds a GB). With ``--serve``: a fresh ``stepscope serve`` (empty
cache) instead, from its spawn to its first (coarse) window (and how many single events it
draws), its first window with events zoomed into the densest pixel column of that one (and
how long the next zoom, half a column on, takes), a sweep of zooms before the exact answers
and one once they come, its first exact window (the per-track table's or the index's), and
its resident peak;
with ``--base-src DIR`` the same for that source tree, interleaved; with ``--skim`` this tree's
three times, its big-file skim (``web.trace.publish_skim``) before the decode, beside it, and
off (``STEPSCOPE_TRACE_SKIM``), interleaved.

    .venv/bin/python benchmarks/trace_stages.py PROFILE
    .venv/bin/python benchmarks/trace_stages.py --serve [--repeats N] [--base-src DIR]
                                                [--skim] PROFILE

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
    if path.name.endswith(".xplane.pb"):
        from stepscope.formats.xspace_skim import skim_xspace

        with _Stage("skim"):  # the server's first picture of a big file (web.trace)
            skim_xspace(path)
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


def _serve_once(path: Path, src: str | None, env: dict[str, str]
                ) -> tuple[float, int, float, float, float, int, float, str, str]:
    """(spawn → first window, its single events, → first exact window, resident peak MB,
    spawn → first zoomed window with events, its events, the next zoom's ms, the zoom
    sweep's line before the exact answers and the one once they come: ``_zoom_sweep``) of a
    fresh
    server on ``path`` (``src``: another source tree's; ``env``: set for it). The zoom: the
    densest of the first window's 2,000 pixel columns, asked (at 2,000 pixels) as soon as the
    first window is up until it shows events or is exact; the next zoom: half a column on."""
    sys.path.insert(0, str(Path(__file__).parent))
    import trace_viewer as tv

    with tempfile.TemporaryDirectory(prefix="stepscope-stages-") as tmp:
        old = {k: os.environ.get(k) for k in ("PYTHONPATH", *env)}
        os.environ.update(env)
        if src is not None:
            os.environ["PYTHONPATH"] = src
        try:
            server = tv._Server(path, Path(tmp))
        finally:
            for k, v in old.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        try:
            server.wait_up()
            meta = server.poll("data", tool="trace_viewer")
            window = server.poll("trace/window", start_ns="0", end_ns=str(meta["span_ns"]),
                                 width="2000")
            first = time.perf_counter() - server.spawned
            drawn = len(window["events"]["id"])
            agg = window["aggregates"]
            k = max(range(len(agg["count"])), key=agg["count"].__getitem__, default=None)
            z0, z1 = (agg["start"][k], agg["end"][k]) if k is not None else \
                (0, max(meta["span_ns"] // 2000, 1))
            zw = window
            while True:
                zw = server.poll("trace/window", start_ns=str(z0), end_ns=str(z1), width="2000")
                if zw["events"]["id"] or not zw.get("coarse"):
                    break
                time.sleep(0.02)
            zoomed, zoom_events = time.perf_counter() - server.spawned, len(zw["events"]["id"])
            t = time.perf_counter()
            half = (z1 - z0) // 2
            server.poll("trace/window", start_ns=str(z0 + half), end_ns=str(z1 + half),
                        width="2000")
            zoom_ms = (time.perf_counter() - t) * 1e3
            sweep = _zoom_sweep(server, z0, z1 - z0)
            while window.get("coarse"):
                time.sleep(0.02)
                window = server.poll("trace/window", start_ns="0",
                                     end_ns=str(meta["span_ns"]), width="2000")
            exact = time.perf_counter() - server.spawned
            # The same zooms answered exactly: by the per-track table until the full index
            # is built (minutes at 1 GB), by the index after.
            exact_sweep = _zoom_sweep(server, z0, z1 - z0)
            return first, drawn, exact, server.rss_mb("VmHWM"), zoomed, zoom_events, zoom_ms, \
                sweep, exact_sweep
        finally:
            server.close()


def _zoom_sweep(server: Any, at: int, column: int) -> str:
    """Zooms of 1 to 1,024 of the first window's pixel columns from ``at`` (each asked as the
    page asks: twice the view's width, at 2,000 pixels), one after the other, before the
    exact answers where they are that early: per zoom, the ms to its first answer, and where
    that said its events were coming (``events_coming``) the ms until they came."""
    parts = []
    for columns in (1, 4, 16, 64, 256, 1024):
        span = column * columns
        t = time.perf_counter()
        ask = {"start_ns": str(at - span // 2), "end_ns": str(at + span + span // 2),
               "width": "2000"}
        answer = server.poll("trace/window", **ask)
        first_ms = (time.perf_counter() - t) * 1e3
        while answer.get("events_coming") and time.perf_counter() - t < 10:
            time.sleep(0.02)
            answer = server.poll("trace/window", **ask)
        events_ms = (time.perf_counter() - t) * 1e3
        kind = f"{len(answer['events']['id'])} drawn" + \
            ("" if answer.get("coarse") else ", exact")
        parts.append(f"{columns}: {first_ms:,.0f}" + (f"/{events_ms:,.0f}" if events_ms
                                                        > first_ms + 1 else "") + f" ({kind})")
    return "zooms (columns: ms to answer/to events): " + ", ".join(parts)


def serve(path: Path, repeats: int, base_src: str | None, skim: bool) -> None:
    """Fresh servers on ``path``, this tree's (and ``base_src``'s; with ``skim``, this
    tree's with its skim first, beside and off), interleaved."""
    print(f"{path} ({path.stat().st_size / 2**20:,.0f} MB), a fresh `stepscope serve`, "
          "empty cache, seconds from its spawn:")
    runs: list[tuple[str, str | None, dict[str, str]]] = \
        [("ours, skim first ", None, {"STEPSCOPE_TRACE_SKIM": "first"}),
         ("ours, skim beside", None, {"STEPSCOPE_TRACE_SKIM": "beside"}),
         ("ours, skim off   ", None, {"STEPSCOPE_TRACE_SKIM": "off"})] if skim else \
        [("ours", None, {})]
    if base_src is not None:
        runs.append(("base", base_src, {}))
    for _ in range(repeats):
        for label, src, env in runs:
            first, drawn, exact, peak, zoomed, zoom_events, zoom_ms, sweep, exact_sweep = \
                _serve_once(path, src, env)
            print(f"  {label}  first window {first:6.2f} ({drawn} events drawn)  first zoomed "
                  f"window with events {zoomed:6.2f} ({zoom_events} events; next zoom "
                  f"{zoom_ms:,.0f} ms)  first exact window {exact:6.2f}  resident peak "
                  f"{peak:,.0f} MB\n    {sweep}\n    exact {exact_sweep}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("profile", type=Path)
    parser.add_argument("--serve", action="store_true")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--base-src")
    parser.add_argument("--skim", action="store_true",
                        help="this tree's server with its big-file skim forced on and off")
    args = parser.parse_args()
    if not args.profile.is_file():
        sys.exit(f"trace_stages: no profile file {args.profile}")
    if args.serve:
        serve(args.profile, args.repeats, args.base_src, args.skim)
    else:
        in_process(args.profile)


if __name__ == "__main__":
    main()
