"""Trace viewer: the row layout of events that overlap without nesting, against its size.

One track of n events, each starting 1–200 ns after the one before and lasting 50 ns to
``--longest`` (20 µs: about 100 events running at once, more than the old layout's 64 passes):
most overlap several later events without containing them (and some do contain, so nesting
is exercised too). The layout of ``trace_index._layout`` is timed at sizes up to ``--max``
events, beside the same n events made disjoint (each ends before the next starts: the
layout's linear-time case), and beside the layout before issue 32 (a copy kept here only:
clashing events pushed one row down per pass, a full sort each pass) at the sizes up to
``--old-max``. The fitted slope of log(time) against log(n) is printed per column: ~1 is
O(n log n) at these sizes, 2 quadratic. Every layout is checked (no two events of a row
overlap) before its time is kept. Last, a mixed trace (``--mixed`` events: nine in ten properly
nested on 100 threads, one in ten overlapping on one thread), new and old: the old layout
sorted every event of every track on each of its passes.

    .venv/bin/python benchmarks/trace_layout.py [--max 10000000] [--old-max 1000000]
        [--longest 20000] [--mixed 3000000]
"""

from __future__ import annotations

import argparse
import heapq
import statistics
import time
from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray

import checkout  # noqa: F401  (this checkout's sources first, for every process started)
from stepscope.analysis.trace.trace_index import _by_row, _layout, by_track_and_start

I64 = NDArray[np.int64]
Layout = Callable[[I64, I64, I64], tuple[I64, I64]]


# --- the layout before issue 32, for comparison only --------------------------------------

def _old_clashes(order: I64, track: I64, depth: I64, start: I64, lay_end: I64,
                 bits: int) -> I64:
    t, d, s, e = track[order], depth[order], start[order], lay_end[order]
    new_group = np.ones(len(order), bool)
    new_group[1:] = (t[1:] != t[:-1]) | (d[1:] != d[:-1])
    group = np.cumsum(new_group) - 1
    running = np.maximum.accumulate((group << np.int64(bits)) | e)
    prev_end = np.zeros(len(order), np.int64)
    prev_end[1:] = running[:-1] & ((np.int64(1) << np.int64(bits)) - 1)
    bad = ~new_group & (s < prev_end)
    return np.asarray(order[bad], np.int64)


def _old_greedy(by_start: I64, track: I64, depth: I64, start: I64, lay_end: I64,
                bits: int) -> None:
    order = _by_row(track, depth, by_start)
    bad_tracks = np.unique(track[_old_clashes(order, track, depth, start, lay_end, bits)])
    for t in bad_tracks.tolist():
        rows = np.flatnonzero(track == t)
        rows = rows[np.lexsort((-lay_end[rows], start[rows]))]
        free: list[int] = []
        busy: list[tuple[int, int]] = []
        used = 0
        for row, s, e in zip(rows.tolist(), start[rows].tolist(), lay_end[rows].tolist(),
                             strict=True):
            while busy and busy[0][0] <= s:
                heapq.heappush(free, heapq.heappop(busy)[1])
            if free:
                r = heapq.heappop(free)
            else:
                r, used = used, used + 1
            depth[row] = r
            heapq.heappush(busy, (e, r))


def old_layout(track: I64, start: I64, lay_end: I64) -> tuple[I64, I64]:
    n = len(track)
    depth = np.zeros(n, np.int64)
    bits = int(max(int(lay_end.max()), 1)).bit_length()
    tshift = np.int64(bits)
    by_start = by_track_and_start(track, start, lay_end, bits)
    skeys = ((track << tshift) | start)[by_start]
    ekeys = np.sort((track << tshift) | lay_end, kind="stable")
    depth[by_start] = np.arange(n) - np.searchsorted(ekeys, skeys, side="right")
    for _ in range(64):
        order = _by_row(track, depth, by_start)
        clash = _old_clashes(order, track, depth, start, lay_end, bits)
        if not len(clash):
            return depth, order
        depth[clash] += 1
    _old_greedy(by_start, track, depth, start, lay_end, bits)
    return depth, _by_row(track, depth, by_start)


# --- workload and timing ---------------------------------------------------------------------

def events(n: int, overlap: bool, longest: int, seed: int = 0) -> tuple[I64, I64, I64]:
    """(track, start, end) of n events on one track, in a shuffled table order."""
    rng = np.random.default_rng(seed)
    gap = rng.integers(1, 201, n)
    start = np.cumsum(gap) - gap[0]
    if overlap:
        end = start + rng.integers(50, longest + 1, n)
    else:
        end = start + np.maximum(gap[1:].tolist() + [1], 1)  # each ends as the next starts
    perm = rng.permutation(n)
    return (np.zeros(n, np.int64), np.asarray(start[perm], np.int64),
            np.asarray(end[perm], np.int64))


def mixed_events(n: int, longest: int) -> tuple[I64, I64, I64]:
    """n/10 overlapping events on track 0 and 9n/10 on tracks 1..100, each a parent and
    four children one after another (properly nested), in a shuffled table order."""
    rng = np.random.default_rng(1)
    _, s0, e0 = events(n // 10, True, longest)
    m = (n - n // 10) // 5
    pstart = np.arange(m, dtype=np.int64) * 1000
    cstart = (pstart[:, None] + 100 + np.arange(4) * 200).ravel()
    start = np.concatenate([s0, pstart, cstart])
    end = np.concatenate([e0, pstart + 900, cstart + 150])
    track = np.concatenate([np.zeros(len(s0), np.int64),
                            1 + np.arange(m, dtype=np.int64) % 100,
                            np.repeat(1 + np.arange(m, dtype=np.int64) % 100, 4)])
    perm = rng.permutation(len(start))
    return track[perm], start[perm], end[perm]


def check(track: I64, start: I64, end: I64, depth: I64, order: I64) -> int:
    """Rows the layout used; raises if two events of a row overlap or ``order`` is not by
    (track, row, start)."""
    t, d, s, e = track[order], depth[order], start[order], end[order]
    key = (t << np.int64(40)) | (d << np.int64(20))
    if not (np.all(np.diff(key) >= 0) and np.array_equal(np.sort(order), np.arange(len(t)))):
        raise AssertionError("order is not by (track, row, start)")
    same = (t[1:] == t[:-1]) & (d[1:] == d[:-1])
    if np.any(same & (s[1:] < e[:-1])) or np.any(same & (s[1:] < s[:-1])):
        raise AssertionError("two events of one row overlap")
    return int(depth.max()) + 1


def timed(fn: Layout, n: int, overlap: bool, repeat: int, longest: int
          ) -> tuple[float, int]:
    track, start, end = events(n, overlap, longest)
    times = []
    rows = 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        depth, order = fn(track, start, end)
        times.append(time.perf_counter() - t0)
        rows = check(track, start, end, depth, order)
    return statistics.median(times), rows


def slope(ns: list[int], ts: list[float]) -> float:
    """The fitted slope of log(time) against log(n)."""
    if len(ns) < 2:
        return float("nan")
    return float(np.polyfit(np.log(ns), np.log(ts), 1)[0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max", type=int, default=10_000_000, help="largest n (new layout)")
    ap.add_argument("--old-max", type=int, default=1_000_000, help="largest n (old layout)")
    ap.add_argument("--min", type=int, default=10_000, help="smallest n")
    ap.add_argument("--mixed", type=int, default=3_000_000,
                    help="events of the mixed trace (0: none)")
    ap.add_argument("--longest", type=int, default=20_000,
                    help="longest event, ns (events start 1-200 ns apart: ~100 rows)")
    args = ap.parse_args()
    sizes = [m * 10 ** p for p in range(3, 9) for m in (1, 3)
             if args.min <= m * 10 ** p <= args.max]
    cols: dict[str, tuple[list[int], list[float]]] = {"new": ([], []), "new_disjoint": ([], []),
                                                      "old": ([], [])}
    print(f"{'n':>10} {'rows':>6} {'new s':>9} {'disjoint s':>11} {'old s':>9} "
          f"{'old/new':>8} {'ns/event':>9}")
    for n in sizes:
        repeat = 3 if n <= 1_000_000 else 1
        t_new, rows = timed(_layout, n, True, repeat, args.longest)
        t_dis, _ = timed(_layout, n, False, repeat, args.longest)
        cols["new"][0].append(n)
        cols["new"][1].append(t_new)
        cols["new_disjoint"][0].append(n)
        cols["new_disjoint"][1].append(t_dis)
        old = "-"
        ratio = "-"
        if n <= args.old_max:
            t_old, _ = timed(old_layout, n, True, 1, args.longest)
            cols["old"][0].append(n)
            cols["old"][1].append(t_old)
            old, ratio = f"{t_old:9.3f}", f"{t_old / t_new:8.1f}"
        print(f"{n:>10} {rows:>6} {t_new:9.3f} {t_dis:11.3f} {old:>9} {ratio:>8} "
              f"{t_new / n * 1e9:9.0f}", flush=True)
    if args.mixed:
        track, start, end = mixed_events(args.mixed, args.longest)
        line = f"mixed trace, {len(track)} events:"
        for name, fn in (("new", _layout), ("old", old_layout)):
            t0 = time.perf_counter()
            depth, order = fn(track, start, end)
            line += f" {name} {time.perf_counter() - t0:.3f} s"
            check(track, start, end, depth, order)
        print(line, flush=True)
    for name, (ns, ts) in cols.items():
        print(f"slope of log(time) against log(n), {name}: {slope(ns, ts):.2f} "
              f"(n = {ns[0] if ns else '-'} .. {ns[-1] if ns else '-'})")


if __name__ == "__main__":
    main()
