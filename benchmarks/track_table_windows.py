"""The per-track table's window queries on one profile: their CPU time and page faults, and
their answers' fingerprints, to compare two checkouts (or the two twins) answer for answer.

    PYTHONPATH=src python benchmarks/track_table_windows.py PROFILE --dump mine.json
    PYTHONPATH=/work/main/src python benchmarks/track_table_windows.py PROFILE --dump main.json
    python benchmarks/track_table_windows.py --compare main.json mine.json

The windows: the whole trace at several widths (1 to MAX_WIDTH), with every track and with
subsets of them, zooms to 1/10 .. 1/100000 of the trace at seeded places and widths, and
windows reaching past the trace's ends. Each answer is fingerprinted by the SHA-256 of its
JSON (keys sorted), so two runs agree exactly when every answer is byte for byte the same.
``STEPSCOPE_PURE_PYTHON=1`` runs the NumPy twin. The table is made as a server makes it (the
overview's order and keys handed over), and, where it has them, its flows are put in time
order after the first window, as a server does. Then a sweep of zooms around the densest
pixel column, each answered with the table's block sums and event by event (the same answers,
and how much faster). Load a profile of 200 MB or more under ``flock /work/big.lock``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import resource
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np


def _rss_mb() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) // 1024
    return 0


def windows(span: int, tracks: list[int], seed: int = 7) -> list[tuple[str, int, int, int,
                                                                        list[int] | None]]:
    """(label, start, end, width, tracks) of every window asked, the same for both runs."""
    from stepscope.analysis.trace.trace_index import MAX_WIDTH

    rng = np.random.default_rng(seed)
    span = max(span, 1)
    out: list[tuple[str, int, int, int, list[int] | None]] = []
    for w in (2000, 1, 7, 640, 1999, MAX_WIDTH):
        out.append((f"full w={w}", 0, span, w, None))
    out.append(("full, past both ends", -span // 2, span * 3 // 2, 1400, None))
    out.append(("full, every 2nd track", 0, span, 2000, tracks[::2]))
    out.append(("full, first 3 tracks", 0, span, 2000, tracks[:3]))
    if tracks:
        out.append(("full, last track", 0, span, 2000, tracks[-1:]))
    for k in range(1, 6):
        length = max(span // 10 ** k, 1)
        for j in range(4):
            a = int(rng.integers(0, max(span - length, 1)))
            w = 2000 if j == 0 else int(rng.integers(1, MAX_WIDTH + 1))
            sub = None if j < 3 else [t for t in tracks if rng.random() < 0.3]
            out.append((f"zoom 1/{10 ** k} w={w}{' subset' if sub is not None else ''}",
                        a, a + length, w, sub))
    out.append(("after the end", span + 10, span + 1000, 50, None))
    out.append(("before the start", -1000, -1, 10, None))
    out.append(("one ns", span // 3, span // 3 + 1, 5, None))
    return out


def _fingerprint(answer: dict[str, Any]) -> str:
    text = json.dumps(answer, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def run(profile: Path, dump: Path | None, repeat: int) -> None:
    from stepscope.analysis.trace.trace_index import plan_tracks
    from stepscope.analysis.trace.trace_overview import TraceOverview
    from stepscope.analysis.trace.track_table import TrackTable, flows_of
    from stepscope.formats.run_reader import reader_of

    t = time.perf_counter()
    table = reader_of(profile)(profile)
    plan = plan_tracks(table)
    flows = flows_of(table, plan)
    overview = TraceOverview(table, plan)
    tt = TrackTable(table, plan, overview.order, flows)
    del overview
    print(f"{profile.name}: {len(tt):,} events, {len(tt.tracks)} tracks, "
          f"{len(tt.flow_src):,} flows, loaded in {time.perf_counter() - t:.1f} s",
          file=sys.stderr)
    tracks = [x.id for x in tt.tracks]
    prints: list[dict[str, Any]] = []
    for label, a, b, w, sub in windows(tt.span_ns, tracks):
        best = None
        for _ in range(repeat):
            r0 = resource.getrusage(resource.RUSAGE_SELF)
            m0 = _rss_mb()
            t0 = time.perf_counter()
            answer = tt.query(a, b, w, sub)
            wall = time.perf_counter() - t0
            r1 = resource.getrusage(resource.RUSAGE_SELF)
            cost = (wall, r1.ru_utime - r0.ru_utime, r1.ru_stime - r0.ru_stime,
                    r1.ru_minflt - r0.ru_minflt, _rss_mb() - m0)
            if best is None:
                first = cost
            best = cost if best is None or cost[0] < best[0] else best
        assert best is not None
        n_ev, n_agg = len(answer["events"]["id"]), len(answer["aggregates"]["count"])
        print(f"{label:32s} first wall {first[0]*1e3:8.1f} ms user {first[1]*1e3:7.1f} "
              f"sys {first[2]*1e3:6.1f} minflt {first[3]:7d} rss +{first[4]:4d} MB | "
              f"best wall {best[0]*1e3:8.1f} ms | {n_ev} events {n_agg} blocks", flush=True)
        prints.append({"label": label, "window": [a, b, w, sub], "sha256": _fingerprint(answer)})
        if label == "full w=2000" and hasattr(tt, "flow_times"):
            # As a server does after its first window (in its builder thread).
            r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
            tt.flow_times()
            r1 = resource.getrusage(resource.RUSAGE_SELF)
            print(f"{'(flows by time, after it)':32s} wall {(time.perf_counter() - t0)*1e3:8.1f} "
                  f"ms user {(r1.ru_utime - r0.ru_utime)*1e3:7.1f} sys "
                  f"{(r1.ru_stime - r0.ru_stime)*1e3:6.1f} minflt {r1.ru_minflt - r0.ru_minflt:7d}",
                  flush=True)
    _zoom_sweep(tt, repeat)
    if dump is not None:
        dump.write_text(json.dumps(prints, indent=0))


def _zoom_sweep(tt: Any, repeat: int) -> None:
    """Zooms of 1 to 1,000 of the whole trace's 2,000 pixel columns around its densest one
    (each asked as the page asks: twice the view, at 2,000 pixels), answered with the table's
    block sums and event by event (none kept): best wall of ``repeat`` each, and whether the
    two answers are the same."""
    agg = tt.query(0, tt.span_ns, 2000)["aggregates"]
    if not agg["count"]:
        return
    at = agg["start"][int(np.argmax(agg["count"]))]
    column = max(tt.span_ns // 2000, 1)
    sums = tt._block_sums
    print("zooms (columns: best ms with block sums / event by event):", flush=True)
    for columns in (1, 4, 16, 32, 64, 128, 256, 512, 1000):
        span = column * columns
        a, b = at - span // 2, at + span + span // 2
        walls, answers = [], []
        for kept in (sums, None):
            tt._block_sums = kept
            best = float("inf")
            for _ in range(repeat):
                t0 = time.perf_counter()
                answer = tt.query(a, b, 2000)
                best = min(best, time.perf_counter() - t0)
            walls.append(best)
            answers.append(_fingerprint(answer))
        tt._block_sums = sums
        print(f"  {columns:5d}: {walls[0] * 1e3:7.1f} / {walls[1] * 1e3:7.1f} ms"
              f"{'' if answers[0] == answers[1] else '  DIFFERENT ANSWERS'}", flush=True)


def compare(a: Path, b: Path) -> int:
    left, right = json.loads(a.read_text()), json.loads(b.read_text())
    bad = 0
    if len(left) != len(right):
        print(f"different window counts: {len(left)} and {len(right)}")
        return 1
    for x, y in zip(left, right, strict=True):
        if x["window"] != y["window"]:
            print(f"different windows: {x['window']} and {y['window']}")
            return 1
        if x["sha256"] != y["sha256"]:
            bad += 1
            print(f"DIFFERENT: {x['label']} {x['window'][:3]}")
    print(f"{len(left) - bad} of {len(left)} answers the same")
    return 1 if bad else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile", nargs="?", type=Path)
    parser.add_argument("--dump", type=Path, help="write the answers' fingerprints here")
    parser.add_argument("--repeat", type=int, default=2, help="times each window is asked")
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("A", "B"))
    args = parser.parse_args()
    if args.compare:
        return compare(*args.compare)
    if args.profile is None:
        parser.error("a profile (or --compare A B) is needed")
    run(args.profile, args.dump, max(args.repeat, 1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
