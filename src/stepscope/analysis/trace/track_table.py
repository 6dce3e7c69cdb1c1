"""The trace viewer's per-track table of one host: every event's row, answered straight from
the events in (track, start) order, before (and without) the full index (``trace_index``).

The coarse overview (``trace_overview``) puts the events in (track, start) order
(``track_order``); this table keeps that order and adds, per event in it, its row
(``layout_depth``: one compiled pass), and per block of ``BLOCK`` events the latest end among
them and its events' counts and durations per row (``block_sums``). A window query is
then, per track, two binary searches (the events starting inside the window) and the blocks
before the window whose latest end reaches into it (the events still running at its start:
as many blocks as rows at most), then one pass over the events found (compiled: no column
as long as them; ``_window_cells``), in which a whole block inside one pixel column
with no event a pixel wide is added from its sums. Its answers are the
full index's, byte for byte (same events, rows, aggregates, counters, flows); what it lacks is
the full index's per-pixel running sums, so a window holding millions of events costs a pass
over its blocks (the full index, built next, answers those in constant time per pixel
column).
Memory: the rows (4 bytes an event), the block sums (16 bytes a row per ``SUM_BLOCK`` events,
and most blocks hold a few rows: about a byte an event), and the order's (shared with the
overview): nothing
more where the table's runs of rows make it (``track_order``: the usual case), the keys and
table rows where it is sorted (12 to 16 bytes); no Python objects.
"""

from __future__ import annotations

import threading
from dataclasses import asdict
from typing import Any

import numpy as np
from numpy.typing import NDArray

from stepscope.analysis.trace.trace_index import (
    INDEX_VERSION,
    MAX_MATCHES,
    EventNotFoundError,
    Flows,
    Rows,
    TraceIndex,
    TraceQueryError,
    Track,
    TrackPlan,
    _flows,
    _ranges,
    compiled_layout,
    counter_arrays,
    layout_depth,
    names_holding,
    rows_in_start_order,
    sections_of,
    summed_by_name,
    window_bounds,
    window_counters,
)
from stepscope.analysis.trace.track_order import TrackOrder
from stepscope.model.events import EventTable

I64 = NDArray[np.int64]
Bools = NDArray[np.bool_]
BLOCK = 256  # events per block of latest ends
SUM_BLOCK = 64  # events per block of per-row sums (a window's pixel columns hold more)
SUM_BLOCK_ROWS = 16  # the most rows a block's sums hold (the compiled block_sums' BLOCK_ROWS)


def block_sums(native: Any, depth: NDArray[Any], rows: Rows | None, duration: NDArray[Any],
               pieces: tuple[I64, I64] | None, block: int = SUM_BLOCK) -> tuple[Any, ...]:
    """Per block of ``block`` positions, its events' count and summed durations per row and
    its longest duration, as the compiled ``window_cells`` takes them: (block, offsets,
    longest, row << 32 | count, durations). Written in place into columns sized for the most
    a block can hold, of which only what is written becomes resident (no copy)."""
    n_blocks = (len(depth) + block - 1) // block
    off, longest = np.empty(n_blocks + 1, np.int64), np.empty(n_blocks, np.int64)
    rc = np.empty(n_blocks * SUM_BLOCK_ROWS, np.int64)
    cov = np.empty(n_blocks * SUM_BLOCK_ROWS, np.int64)
    m = native.block_sums(depth, rows, np.ascontiguousarray(duration), block, off, longest,
                          rc, cov, pieces)
    return block, off, longest, rc[:m], cov[:m]


class TrackTable(TraceIndex):
    """One host's events by (track, start) with their rows (see the module docstring); it
    answers every view as the full index does."""

    def __init__(self, table: EventTable, plan: TrackPlan, order: TrackOrder | None = None,
                 flows: Flows | None = None) -> None:
        """``order``: the events' order by (track, start) (``TrackOrder.of``), when made;
        ``flows``: ``flows_of(table, plan)``, when made (a server makes it in a thread of its
        own while the order is made)."""
        self.table = table
        self.plan = plan
        self.origin_ns, self.span_ns, self.bits = plan.origin, plan.span, plan.bits
        n_tracks = len(plan.track_line)
        if int(max(n_tracks, 1)).bit_length() + self.bits > 62:
            raise TraceQueryError("This profile has too many tracks or too long a time span "
                                  "for the trace viewer's index.")
        order = order or TrackOrder.of(table, plan)
        n = order.n
        #: The events by (track, start): per event in that order, its start and table row.
        self.order = order
        self._on_track_rows: Bools | None = None
        # Per event in that order, its table row: none kept in pieces (the usual case: found
        # from its piece), the order itself where sorted and every event of the table is on
        # a track, else a column of its own.
        by_start = order.by_start
        self._table_rows: Rows | None = None if by_start is None else by_start \
            if n == len(table) else np.flatnonzero(self._on_track)[by_start]
        self.offsets: I64 = order.offsets
        native = compiled_layout()
        if native is not None and n < 1 << 31:
            # One compiled pass: starts from the keys (or the table's own, through the rows),
            # durations through the rows, no column as long as the events made on the way
            # (each costs its memory's first touch).
            self.depth: NDArray[np.int32] = np.empty(n, np.int32)
            self.block_end: I64 = np.empty((n + BLOCK - 1) // BLOCK, np.int64)
            keys, origin = order.compiled_keys()
            native.table_rows(keys, self.bits, np.ascontiguousarray(table.duration_ns),
                              self._table_rows, self.offsets,
                              self.depth, self.block_end, BLOCK, origin,
                              order.compiled_pieces())
            # Per block, its events' counts and durations per row (``_window_cells``).
            self._block_sums: tuple[Any, ...] | None = block_sums(
                native, self.depth, self._table_rows, table.duration_ns,
                order.compiled_pieces())
        else:
            self.depth, self.block_end = self._rows_of()
            self._block_sums = None
        self._handed = False
        self.counters = counter_arrays(table, plan)
        self.arrays = self.counters
        self.counter_time = self.counters["counter_time"]
        self.flow_src, self.flow_dst, kind = flows or flows_of(table, plan)
        self.flow_kind = np.asarray(kind, np.int8)
        rows = np.zeros(n_tracks, np.int64)
        count = np.diff(self.offsets)
        full = np.flatnonzero(count > 0)
        if len(full):
            rows[full] = np.maximum.reduceat(self.depth, self.offsets[full]) + 1
        count[self.counters["counter_track"]] = np.diff(self.counters["counter_off"])
        self.tracks = [Track(i, plan.track_section[i], table.line_name[li],
                             "counter" if plan.counter_line[li] else "events",
                             int(rows[i]), int(count[i]))
                       for i, li in enumerate(plan.track_line)]
        self.sections = sections_of(self.tracks)
        self.header = {"version": INDEX_VERSION, "origin_ns": self.origin_ns,
                       "span_ns": self.span_ns, "bits": self.bits,
                       "tracks": [asdict(t) for t in self.tracks], "sections": self.sections}
        self._stat_order = None
        self._lower_names = None
        self._flow_times = None
        self.flow_times_coming = False
        #: Set once a window has been answered from this table (a server builds the full
        #: index after that, so that the first window does not share the CPU with it).
        self.answered = threading.Event()

    def _rows_of(self) -> tuple[NDArray[np.int32], I64]:
        """Each event's row and per block of ``BLOCK`` events the latest end (as laid out),
        without the compiled pass: starts and ends in this order made from the keys and the
        table's durations, laid out per track (``rows_in_start_order``)."""
        n = len(self)
        every = np.arange(n, dtype=np.int64)
        start = self._start(every)
        lay_end = np.asarray(np.take(self.table.duration_ns, self._rows(every)), np.int64)
        np.maximum(lay_end, 1, out=lay_end)
        lay_end += start
        if compiled_layout() is not None:
            depth = rows_in_start_order(start, lay_end, self.offsets)
        else:  # the vectorised twin wants the events in table order
            n_tracks = len(self.offsets) - 1
            by_start = self.order.order()
            order = np.empty(n, np.int64)
            order[by_start] = every
            track = np.repeat(np.arange(n_tracks, dtype=np.int64), np.diff(self.offsets))
            in_table_order = layout_depth(track[order], start[order], lay_end[order],
                                          by_start)[0]
            depth = in_table_order[by_start]
        block_end = (np.maximum.reduceat(lay_end, np.arange(0, n, BLOCK))
                     if n else np.zeros(0, np.int64))
        return depth.astype(np.int32), block_end

    @property
    def _on_track(self) -> Bools:
        """Which table rows are events on a track (made when first asked: a column as long
        as the table)."""
        if self._on_track_rows is None:
            plan = self.plan
            self._on_track_rows = plan.included & ~plan.counter_line[self.table.line]
        return self._on_track_rows

    def flows(self) -> Flows:
        """(sources, destinations, kinds) of the flows, as ``flows_of`` gives them: what the
        full index's build takes instead of finding them again."""
        return self.flow_src, self.flow_dst, self.flow_kind

    def layout(self) -> tuple[NDArray[np.int32], Rows | None]:
        """(each event's row, the order by (track, start): None where it is the table's
        own), both in that order: what the full index's build takes instead of laying the
        events out again (the rows are this table's own, shared, not copied). Once."""
        if self._handed:
            raise TraceQueryError("The track table's layout was handed over already.")
        self._handed = True
        return self.depth, None if self.order.in_table else self.order.order()

    # -- facts -----------------------------------------------------------------------------

    def __len__(self) -> int:
        return self.order.n

    def _rows(self, pos: NDArray[np.integer[Any]]) -> I64:
        """The table rows of the events at positions ``pos``."""
        rows = self.order.drawn(pos) if self._table_rows is None else self._table_rows[pos]
        return np.asarray(rows, np.int64)

    def _start(self, pos: I64) -> I64:
        return self.order.starts(pos)

    def _end(self, pos: I64) -> I64:
        """The ends as laid out (at least 1 ns after the start) of events at ``pos``."""
        dur = np.asarray(self.table.duration_ns[self._rows(pos)], np.int64)
        return self._start(pos) + np.maximum(dur, 1)

    def _track_of(self, pos: I64) -> I64:
        return np.asarray(np.searchsorted(self.offsets, pos, side="right") - 1, np.int64)

    def _positions(self, rows: I64) -> I64:
        """Where table rows are in (track, start) order (-1 for a row on no track): a binary
        search for its key, then a step over the events with the same key (a few at most:
        events of one track starting in the same nanosecond) until its own."""
        rows = np.asarray(rows, np.int64)
        out = np.full(len(rows), -1, np.int64)
        ok = np.flatnonzero((rows >= 0) & (rows < len(self.table)))
        ok = ok[self._on_track[rows[ok]]]
        r = rows[ok]
        keys = self.order.keys
        if keys is None:  # in pieces: each row's position found from its piece's
            out[ok] = self.order.positions(r)
            return out
        track = self.plan.track_of_line[self.table.line[r]]
        want = (track << np.int64(self.bits)) | (np.asarray(self.table.start_ns[r], np.int64)
                                                 - self.origin_ns)
        pos = np.searchsorted(keys, want, side="left")
        n = len(keys)
        assert self._table_rows is not None  # kept wherever the keys are
        while len(ok):
            pos = np.minimum(pos, n - 1)
            found = self._table_rows[pos] == r
            out[ok[found]] = pos[found]
            more = ~found & (keys[pos] == want) & (pos + 1 < n)
            ok, r, want, pos = ok[more], r[more], want[more], pos[more] + 1
        return out

    def check_event(self, event_id: int) -> int:
        """``event_id`` if it names an event on a track; EventNotFoundError otherwise."""
        if self._positions(np.array([event_id], np.int64))[0] < 0:
            raise EventNotFoundError(f"No event {event_id} on this host's timeline.")
        return event_id

    def where(self, rows: I64) -> tuple[I64, I64, I64]:
        """(track, row, start relative to the origin) of table rows on the timeline."""
        pos = self._positions(rows)
        return self._track_of(pos), self.depth[pos].astype(np.int64), self._start(pos)

    def _overlapping(self, tracks: I64, t0: int, t1: int) -> I64:
        """Positions of the events of ``tracks`` overlapping ``[t0, t1)``, by track: those
        running at ``t0``, then those starting inside."""
        if t0 >= t1 or not len(tracks):
            return np.zeros(0, np.int64)
        a, b = self.order.search(tracks, np.full((len(tracks), 2), [t0, t1], np.int64)).T
        parts = [np.zeros(0, np.int64)]
        for i, t in enumerate(tracks.tolist()):
            parts.append(self._running(t, int(a[i]), t0))
            parts.append(np.arange(int(a[i]), int(b[i]), dtype=np.int64))
        return np.concatenate(parts)

    def _event_tracks(self, tracks: list[int] | None) -> I64:
        ids = np.flatnonzero(np.diff(self.offsets) > 0).astype(np.int64)
        if tracks is not None:
            ids = ids[np.isin(ids, np.asarray(tracks, np.int64))]
        return ids

    # -- the window query ------------------------------------------------------------------

    def query(self, start_ns: int, end_ns: int, width: int,
              tracks: list[int] | None = None) -> dict[str, Any]:
        """The full index's window query (``TraceIndex.query``), answered from the table: per
        track, the events overlapping the window (running at its start, then starting in it)
        counted per (row, pixel column) in one pass, the few at least a pixel wide listed."""
        bnd = window_bounds(start_ns, end_ns, width)
        span, w = end_ns - start_ns, width
        t0, t1 = max(start_ns, 0), min(end_ns, int(self.mask))
        ids = self._event_tracks(tracks)
        if t0 >= t1:
            ids = ids[:0]
        a, b = self.order.search(ids, np.full((len(ids), 2), [t0, t1], np.int64)).T
        inner = np.clip(bnd[1:-1], t0, t1)
        # Per track, the events still running at t0 (a few blocks' worth at most).
        before = [self._running(t, int(a[i]), t0) for i, t in enumerate(ids.tolist())]
        wide_track, wide_pos, agg = self._window_cells(ids, a, b, before, inner, span, w)
        depth = self.depth[wide_pos].astype(np.int64)
        start = self._start(wide_pos)
        wrows = self._rows(wide_pos)
        dur_w = np.asarray(self.table.duration_ns[wrows], np.int64)
        names = self.table.name[wrows]
        # A set, not np.unique: that imports numpy.ma on its first call (~20 ms of a fresh
        # server's first window).
        out_names = {c: self.table.names[c] for c in sorted(set(names.tolist()))}
        result: dict[str, Any] = {
            "start_ns": start_ns, "end_ns": end_ns, "width": w,
            "events": {"track": wide_track.tolist(), "row": depth.tolist(),
                       "start": start.tolist(), "dur": dur_w.tolist(),
                       "name": names.tolist(), "id": wrows.tolist()},
            "aggregates": _blocks(agg, bnd),
            "names": out_names,
            "counters": window_counters(self.counters, t0, t1, bnd, tracks),
        }
        self._put_flows(result, start_ns, end_ns)
        self.answered.set()
        return result

    def _window_cells(self, ids: I64, a: I64, b: I64, before: list[I64], inner: I64,
                      span: int, w: int) -> tuple[I64, I64, list[tuple[I64, ...]]]:
        """Per track ``ids[i]``, its events in the window (``before[i]``, those running at its
        start, then positions ``a[i]`` to ``b[i]``), each in the pixel column holding its
        start (``inner``: the inner columns' boundaries, clipped to the trace): (the tracks
        and positions of those at least a pixel wide, by track, row and start; the others'
        cells as (track, row, column, count, covered) parts, by track, row and column). The
        compiled pass where built (no column as long as the events in view), else its NumPy
        twin."""
        native = compiled_layout()
        if native is None:
            return self._window_cells_numpy(ids, a, b, before, inner, span, w)
        rows = np.array([self.tracks[t].rows for t in ids.tolist()], np.int64)
        before_off = np.zeros(len(ids) + 1, np.int64)
        np.cumsum([len(p) for p in before], out=before_off[1:])
        before_all = np.concatenate(before) if before else np.zeros(0, np.int64)
        keys, origin = self.order.compiled_keys()
        wide, cells = native.window_cells(
            keys, self.depth, self._table_rows,
            np.ascontiguousarray(self.table.duration_ns), np.ascontiguousarray(ids),
            np.ascontiguousarray(a), np.ascontiguousarray(b), rows,
            np.ascontiguousarray(before_all, np.int64), before_off,
            np.ascontiguousarray(inner, np.int64), self.bits, w,
            span if span < 1 << 63 else -1,  # a span past int64: no product reaches it
            origin, self.order.compiled_pieces(), self._block_sums)
        pairs = np.frombuffer(wide, np.int64).reshape(-1, 2)
        agg = np.frombuffer(cells, np.int64).reshape(-1, 5)
        return pairs[:, 0], pairs[:, 1], [tuple(agg[:, k] for k in range(5))] if len(agg) \
            else []

    def _window_cells_numpy(self, ids: I64, a: I64, b: I64, before: list[I64], inner: I64,
                            span: int, w: int) -> tuple[I64, I64, list[tuple[I64, ...]]]:
        """The NumPy twin of the compiled ``window_cells`` (``_window_cells``): a few
        columns as long as the events in view, per track."""
        columns = np.arange(w, dtype=np.int64)
        durations = self.table.duration_ns
        wide_parts: list[tuple[I64, I64]] = []
        agg_parts: list[tuple[I64, ...]] = []
        for i, t in enumerate(ids.tolist()):
            ai, bi = int(a[i]), int(b[i])
            if not len(before[i]) and bi <= ai:
                continue
            # Positions, rows, pixel columns and durations of the track's events in view:
            # those running at t0 (column 0), then the run of those starting inside.
            edges = self.order.search(np.array([t], np.int64), inner[None, :])[0] - ai
            col = np.concatenate([np.zeros(len(before[i]), np.int64), np.repeat(
                columns, np.diff(np.r_[0, edges, max(bi - ai, 0)]))])
            pos = np.concatenate([before[i], np.arange(ai, bi, dtype=np.int64)])
            dur = np.asarray(durations[self._rows(pos)], np.int64)
            cell = self.depth[pos].astype(np.int64)
            cell *= w
            cell += col
            del col
            wide = np.flatnonzero(dur * w >= span)
            if len(wide):
                wpos = pos[wide]
                order = np.lexsort((self._start(wpos), self.depth[wpos]))
                wide_parts.append((np.full(len(wide), t, np.int64), wpos[order]))
            del pos
            cells, count, covered = _cells(cell, dur, wide, self.tracks[t].rows * w)
            if len(cells):
                agg_parts.append((np.full(len(cells), t, np.int64), cells // w, cells % w,
                                  count, covered))
        track, pos = (np.concatenate([p[k] for p in wide_parts]) if wide_parts
                      else np.zeros(0, np.int64) for k in range(2))
        return track, pos, agg_parts

    def _running(self, t: int, ai: int, t0: int) -> I64:
        """Positions of track ``t``'s events that start before position ``ai`` (the first
        starting at or after ``t0``) and are still running at ``t0``: in the blocks before
        ``ai`` whose latest end is after ``t0`` (as many blocks as rows, at most)."""
        lo = int(self.offsets[t])
        if ai <= lo:
            return np.zeros(0, np.int64)
        k0, k1 = lo // BLOCK, (ai - 1) // BLOCK + 1
        hot = np.flatnonzero(self.block_end[k0:k1] > t0) + k0
        pos = _ranges(np.maximum(hot * BLOCK, lo), np.minimum(hot * BLOCK + BLOCK, ai))
        return np.asarray(pos[self._end(pos) > t0], np.int64)

    # -- a selection, a search -------------------------------------------------------------

    def selection(self, start_ns: int, end_ns: int, tracks: list[int]) -> dict[str, Any]:
        """Events of ``tracks`` overlapping ``[start_ns, end_ns)``, summed by name."""
        if end_ns <= start_ns:
            raise TraceQueryError("The selection's end must be after its start.")
        t0, t1 = max(start_ns, 0), min(end_ns, int(self.mask))
        pos = self._overlapping(self._event_tracks(tracks), t0, t1)
        return summed_by_name(self.table, self._rows(pos), start_ns, end_ns)

    def search(self, text: str) -> dict[str, Any]:
        """Events whose name holds ``text`` (any case), in time order."""
        if self._lower_names is None:
            self._lower_names = [n.lower() for n in self.table.names]
        codes = names_holding(self._lower_names, text)
        if not len(codes):
            return {"query": text, "total": 0, "matches": []}
        if self._table_rows is None:  # in pieces: the rows found, then their positions
            hit = np.sort(self.order.positions(np.flatnonzero(np.isin(self.table.name, codes))))
        else:
            hit = np.flatnonzero(np.isin(self.table.name[self._table_rows], codes))
        starts = self._start(hit)
        track, depth = self._track_of(hit), self.depth[hit].astype(np.int64)
        order = np.lexsort((depth, track, starts))[:MAX_MATCHES]
        pos = hit[order]
        rows = self._rows(pos)
        return {"query": text, "total": int(len(hit)), "matches": {
            "id": rows.tolist(), "track": track[order].tolist(),
            "row": depth[order].tolist(), "start": starts[order].tolist(),
            "dur": self.table.duration_ns[rows].tolist()}}


def flows_of(table: EventTable, plan: TrackPlan) -> Flows:
    """(sources, destinations, kinds) of the flows between a host's events on tracks (rows
    int32 where they fit, kinds int8). No mask of every event made: the counter lines' events
    are left out by line."""
    off = plan.counter_line if plan.counter_line.any() else None
    return _flows(table, plan.included, plan.device_plane, off)


def _cells(cell: I64, dur: I64, wide: I64, space: int) -> tuple[I64, I64, I64]:
    """The (row, column) cells holding narrow events of one track (``cell``: row × width +
    column per event; ``wide``: which events are drawn, not counted), ascending, with their
    counts and durations summed."""
    if space <= max(4 * len(cell), 1 << 22):
        # Few possible cells: every event counted in place, the wide ones then taken off.
        count = np.bincount(cell, minlength=space)
        covered = np.bincount(cell, weights=dur, minlength=space)
        if len(wide):
            np.subtract.at(count, cell[wide], 1)
            np.subtract.at(covered, cell[wide], dur[wide].astype(np.float64))
        cells = np.flatnonzero(count)
        return cells, count[cells], covered[cells].astype(np.int64)
    narrow = np.ones(len(cell), bool)
    narrow[wide] = False
    cells, inverse = np.unique(cell[narrow], return_inverse=True)
    return (cells, np.bincount(inverse, minlength=len(cells)),
            np.bincount(inverse, weights=dur[narrow], minlength=len(cells)).astype(np.int64))


def _blocks(parts: list[tuple[I64, ...]], bnd: I64) -> dict[str, list[int]]:
    """Adjacent cells of one row merged into blocks (``parts``: per track, its cells as
    (track, row, column, count, covered), by row and column)."""
    if not parts:
        return {"track": [], "row": [], "start": [], "end": [], "count": [], "covered": []}
    track, row, col, count, covered = (np.concatenate([p[k] for p in parts]) for k in range(5))
    run = np.flatnonzero(np.r_[True, (track[1:] != track[:-1]) | (row[1:] != row[:-1])
                               | (col[1:] != col[:-1] + 1)])
    last = np.r_[run[1:], len(col)] - 1
    return {"track": track[run].tolist(), "row": row[run].tolist(),
            "start": bnd[col[run]].tolist(), "end": bnd[col[last] + 1].tolist(),
            "count": np.add.reduceat(count, run).tolist(),
            "covered": np.add.reduceat(covered, run).tolist()}
