"""The trace viewer's coarse overview of one host: every track's events counted per pixel
column, answered straight from the event table while the full index (``trace_index``) builds.

It needs no layout: only the events' order by (track, start) (``track_order``: nothing at all
where the table holds them so, as a decoded file's usually does), which the per-track table
and the index's layout take over, and the durations in that order summed per block of
SUM_BLOCK events; a window query is then a few binary searches per track and
pixel column, and a block's part read through the order, so the first picture of a large trace
comes seconds before the index that can answer everything. Its tracks, sections,
time origin and span are the full index's; each events track has one row, and every event
overlapping the window is counted (with its duration summed) in the block of the column it
starts in, as the full index counts the narrow ones: per track and column, the coarse count is
the number of events the full index shows there, on all of the track's rows together.
Counters are the full index's. Events, flows, search and selection wait for the full index.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import numpy as np
from numpy.typing import NDArray

from stepscope.analysis.trace.trace_index import (
    INDEX_VERSION,
    TraceQueryError,
    Track,
    TrackPlan,
    compiled_layout,
    counter_arrays,
    plan_tracks,
    sections_of,
    window_bounds,
    window_counters,
    with_pids,
)
from stepscope.analysis.trace.track_order import TrackOrder
from stepscope.model.events import EventTable

I64 = NDArray[np.int64]
SUM_BLOCK = 16  # events per block of summed durations (``TraceOverview.summed_before``)
_SUMS_AT_ONCE = 1 << 16  # positions whose block's part is summed at a time
_SUM_EVENTS = 1 << 16  # events whose durations are summed at a time (a multiple of SUM_BLOCK)


class TraceOverview:
    """The coarse per-track density of one host's events (see the module docstring)."""

    coarse = True

    def __init__(self, table: EventTable, plan: TrackPlan | None = None,
                 order: TrackOrder | None = None) -> None:
        """``order``: the events' order by (track, start) (``TrackOrder.of``), when made."""
        self.plan = plan or plan_tracks(table)
        plan = self.plan
        self.origin_ns = plan.origin
        self.span_ns = plan.span
        self.bits = plan.bits
        n_tracks = len(plan.track_line)
        if int(max(n_tracks, 1)).bit_length() + self.bits > 62:
            raise TraceQueryError("This profile has too many tracks or too long a time span "
                                  "for the trace viewer's index.")
        #: The events' order by (track, start): the per-track table answers from it next,
        #: and the full index's layout starts from it.
        self.order = order or TrackOrder.of(table, plan)
        # Per track: its events and the longest of them as laid out (at least 1 ns): how far
        # back an event may start and still reach into a window.
        per_track = np.diff(self.order.offsets)
        self.block_cum, self.longest = _summed_by_block(self.order)
        full = np.flatnonzero(per_track > 0)
        self.longest[full] = np.maximum(self.longest[full], 1)
        self.counters = counter_arrays(table, plan)
        per_track[self.counters["counter_track"]] = np.diff(self.counters["counter_off"])
        self.tracks = [Track(i, plan.track_section[i], table.line_name[li],
                             "counter" if plan.counter_line[li] else "events",
                             0 if plan.counter_line[li] else 1, int(per_track[i]))
                       for i, li in enumerate(plan.track_line)]
        self.events = self.order.n
        self.table = table

    def meta(self) -> dict[str, Any]:
        """Sections, tracks and the time span, as ``TraceIndex.meta`` gives them (``coarse``:
        true; every events track one row)."""
        return {"origin_ns": self.origin_ns, "span_ns": self.span_ns, "events": self.events,
                "counter_samples": len(self.counters["counter_time"]), "flows": 0,
                "sections": with_pids(sections_of(self.tracks), self.table.planes),
                "tracks": [asdict(t) for t in self.tracks], "coarse": True,
                "index_version": INDEX_VERSION}

    def summed_before(self, pos: NDArray[np.integer[Any]]) -> I64:
        """The durations (as drawn: none negative) of the events before each position in
        the order, summed: the sum before its block, plus its block's events before it (at
        most SUM_BLOCK - 1 of them, read where asked: no running sum as long as the events)."""
        pos = np.asarray(pos, np.int64)
        native = compiled_layout()
        order = self.order
        by_start = order.by_start
        if native is not None and order.durations.dtype in (np.int32, np.int64) \
                and (by_start is None or by_start.dtype in (np.int32, np.int64)):
            sums = np.empty(pos.shape, np.int64)
            native.sums_before(np.ascontiguousarray(order.durations),
                               None if by_start is None else np.ascontiguousarray(by_start),
                               self.block_cum, SUM_BLOCK,
                               np.ascontiguousarray(pos).reshape(-1), sums.reshape(-1),
                               order.compiled_pieces())
            return sums
        block = pos // SUM_BLOCK
        out: I64 = self.block_cum[block]
        rest = (pos - block * SUM_BLOCK).reshape(-1)
        some = np.flatnonzero(rest > 0)
        flat, first = out.reshape(-1), block.reshape(-1)
        step = np.arange(SUM_BLOCK, dtype=np.int64)
        for lo in range(0, len(some), _SUMS_AT_ONCE):  # a few MB of gathers at a time
            part = some[lo:lo + _SUMS_AT_ONCE]
            inside = step[None, :] < rest[part, None]
            at = np.where(inside, first[part, None] * SUM_BLOCK + step[None, :], 0)
            dur = np.maximum(order.durations_at(at), 0)
            dur[~inside] = 0
            flat[part] += dur.sum(axis=1)
        return out

    def query(self, start_ns: int, end_ns: int, width: int,
              tracks: list[int] | None = None) -> dict[str, Any]:
        """The window query's answer in the full index's form (``coarse``: true): no single
        events, one block per track and pixel column holding events, on row 0."""
        bnd = window_bounds(start_ns, end_ns, width)
        w = width
        t0, t1 = max(start_ns, 0), min(end_ns, (1 << self.bits) - 1)
        ids = np.array([t.id for t in self.tracks if t.kind == "events"], np.int64)
        if tracks is not None:
            ids = ids[np.isin(ids, np.asarray(tracks, np.int64))]
        if t0 >= t1:
            ids = ids[:0]
        order = self.order
        # Events starting inside the window, counted per column from the sorted starts.
        inner = np.clip(bnd[1:w], t0, t1)
        times = np.empty((len(ids), w + 1), np.int64)
        times[:, 0], times[:, 1:w], times[:, w] = t0, inner[None, :], t1
        edges = order.search(ids, times)
        count = np.diff(edges, axis=1)
        covered = np.diff(self.summed_before(edges), axis=1)
        # Events starting before the window that reach into it: the first column's.
        back = order.search(ids, np.maximum(t0 - self.longest[ids], 0))
        for i in np.flatnonzero(back < edges[:, 0]).tolist():
            pos = np.arange(back[i], edges[i, 0])
            dur = np.maximum(order.durations_at(pos), 0)
            start = order.starts(pos)
            reach = start + np.maximum(dur, 1) > t0
            count[i, 0] += int(reach.sum())
            covered[i, 0] += int(dur[reach].sum())
        li, cell_col = np.nonzero(count)
        cell_track = ids[li]
        return {
            "start_ns": start_ns, "end_ns": end_ns, "width": w, "coarse": True,
            "events": {"track": [], "row": [], "start": [], "dur": [], "name": [], "id": []},
            "aggregates": {"track": cell_track.tolist(), "row": [0] * len(li),
                           "start": bnd[cell_col].tolist(), "end": bnd[cell_col + 1].tolist(),
                           "count": count[li, cell_col].tolist(),
                           "covered": covered[li, cell_col].tolist()},
            "names": {}, "counters": window_counters(self.counters, t0, t1, bnd, tracks),
            "flows": [], "flows_in_window": 0,
        }


def _summed_by_block(order: TrackOrder) -> tuple[I64, I64]:
    """(the durations as drawn (none negative) in ``order``, summed before each block of
    SUM_BLOCK events; per track the longest), a chunk of events at a time: no column as long
    as the events is made."""
    n, offsets = order.n, order.offsets
    block_cum = np.zeros(-(-n // SUM_BLOCK) + 1, np.int64)
    longest = np.zeros(len(offsets) - 1, np.int64)
    for lo in range(0, n, _SUM_EVENTS):
        hi = min(lo + _SUM_EVENTS, n)
        dur = order.durations_between(lo, hi)
        np.maximum(dur, 0, out=dur)
        first = lo // SUM_BLOCK
        sums = np.add.reduceat(dur, np.arange(0, hi - lo, SUM_BLOCK), dtype=np.int64)
        block_cum[1 + first:1 + first + len(sums)] = sums
        # The tracks with events in this chunk, each one's longest among them.
        inside = np.flatnonzero(np.minimum(offsets[1:], hi) > np.maximum(offsets[:-1], lo))
        if len(inside):
            most = np.maximum.reduceat(dur, np.maximum(offsets[inside], lo) - lo)
            longest[inside] = np.maximum(longest[inside], most)
    np.cumsum(block_cum, out=block_cum)
    return block_cum, longest
