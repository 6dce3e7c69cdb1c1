"""The events the trace viewer draws as events, in (track, start) order: what the coarse
overview (``trace_overview``) and the per-track table (``track_table``) answer windows from,
and what the full index's layout (``trace_index.build``) starts from.

Most profiles hold that order in pieces already: a decoded file gives each line's events in
time order, line after line, and a track is a line (or a few, one after another in time: a
profile merged from consecutive captures). There the order is those runs of table rows put
in track order (``line_pieces``): each event's table row is its piece's first plus its place
in it, its start the table's own, and nothing is kept but the pieces (a few per line).
Elsewhere it is sorted and kept as two columns: the positions among
the drawn events (``by_start``) and the composite keys ``track << bits | start`` in that
order (``sorted_by_track_and_start``), 12 to 16 bytes an event. Either way events of one
track starting together come longer first, then in table order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from stepscope.analysis.trace.trace_index import (
    CHUNK,
    Rows,
    TrackPlan,
    event_columns,
    shown_rows,
    sorted_by_key,
    sorted_by_track_and_start,
)
from stepscope.model.events import Durations, EventTable

I64 = NDArray[np.int64]
# Events checked at a time (``line_pieces``): a few hundred KB of temporaries, not a column
# as long as a profile of up to a million events.
CHECK_EVENTS = 1 << 16
# At most this many pieces, and one per this many events: beyond, the table's runs are short
# (events of lines interleaved) and a sort serves better.
MAX_PIECES = 4096
PIECE_EVENTS = 64


@dataclass
class Pieces:
    """Runs of table rows (each one line's events, in start order) in (track, start) order:
    piece k holds positions ``pos[k]`` to ``pos[k + 1]``, table rows from ``row[k]``, and
    starts at ``first[k]`` (ns, as the table holds it); track t holds pieces ``track_off[t]``
    to ``track_off[t + 1]``, one after another in time."""

    track_off: I64
    pos: I64
    row: I64
    first: I64
    #: Whether the pieces are in table order (position p is table row p).
    in_table: bool

    def rows_at(self, pos: NDArray[np.integer[Any]]) -> I64:
        """The table rows of positions ``pos``."""
        pos = np.asarray(pos, np.int64)
        k = np.searchsorted(self.pos, pos, side="right") - 1
        return np.asarray(self.row[k] + (pos - self.pos[k]), np.int64)

    def spans(self, lo: int, hi: int) -> list[tuple[int, int]]:
        """The runs of table rows (first, end) holding positions ``lo`` to ``hi``, in order."""
        out = []
        k = int(np.searchsorted(self.pos, lo, side="right")) - 1
        while lo < hi:
            take = min(hi, int(self.pos[k + 1])) - lo
            first = int(self.row[k]) + lo - int(self.pos[k])
            out.append((first, first + take))
            lo += take
            k += 1
        return out

    def rows(self) -> Rows:
        """The table row of every position (int32 where they fit), a block at a time."""
        n = int(self.pos[-1])
        out: Rows = np.empty(n, np.int32 if n < 1 << 31 else np.int64)
        for k, (lo, hi) in enumerate(zip(self.pos[:-1].tolist(), self.pos[1:].tolist(),
                                          strict=True)):
            base = int(self.row[k]) - lo
            for a in range(lo, hi, CHECK_EVENTS):
                b = min(a + CHECK_EVENTS, hi)
                out[a:b] = np.arange(a + base, b + base, dtype=out.dtype)
        return out

    def positions(self, rows: I64) -> I64:
        """The positions of table rows (each one of a piece's)."""
        by_row = np.argsort(self.row, kind="stable")
        k = by_row[np.searchsorted(self.row[by_row], rows, side="right") - 1]
        return np.asarray(self.pos[k] + (rows - self.row[k]), np.int64)


class TrackOrder:
    """One host's drawn events by (track, start) (see the module docstring)."""

    def __init__(self, table: EventTable, plan: TrackPlan, by_start: Rows | None,
                 keys: I64 | None, durations: Durations, offsets: I64,
                 pieces: Pieces | None = None) -> None:
        """Sorted: ``by_start`` and ``keys``; in pieces: ``pieces`` (the others None).
        ``durations``: the drawn events' (the table's own where every event is drawn);
        ``offsets``: per track, where its events begin (and one more: the end)."""
        self.table = table
        self.origin, self.bits = plan.origin, plan.bits
        self.mask = np.int64((1 << plan.bits) - 1)
        #: Sorted: per event in this order, its position among the drawn events.
        self.by_start = by_start
        #: Per event in this order, ``track << bits | start`` (None: in pieces).
        self.keys = keys
        self.pieces = pieces
        #: The drawn events' durations, in table order (negative ones drawn as 0).
        self.durations = durations
        self.offsets = offsets
        self.n = int(offsets[-1]) if len(offsets) else 0

    @classmethod
    def of(cls, table: EventTable, plan: TrackPlan) -> TrackOrder:
        """The order of ``table``'s drawn events: its runs of rows where they make it
        (``line_pieces``), else sorted (``sorted_by_track_and_start``)."""
        pieces = line_pieces(table, plan)
        if pieces is None:
            return cls.sorted(table, plan)
        return cls(table, plan, None, None, table.duration_ns, pieces.pos[pieces.track_off],
                   pieces)

    @classmethod
    def sorted(cls, table: EventTable, plan: TrackPlan) -> TrackOrder:
        """The order of ``table``'s drawn events, sorted and kept as columns (whatever the
        table's own order)."""
        by_start, keys, durations = _sorted(table, plan)
        n_tracks = len(plan.track_line)
        offsets = np.searchsorted(keys, np.arange(n_tracks + 1, dtype=np.int64)
                                  << np.int64(plan.bits)).astype(np.int64)
        return cls(table, plan, by_start, keys, durations, offsets)

    @property
    def in_table(self) -> bool:
        """Whether position p is table row p (the pieces in table order)."""
        return self.pieces is not None and self.pieces.in_table

    def order(self) -> Rows:
        """The order as a column (``by_start``, or the table rows in it: what the full
        index's build takes)."""
        if self.by_start is not None:
            return self.by_start
        if self.pieces is not None and not self.pieces.in_table:
            return self.pieces.rows()
        return np.arange(self.n, dtype=np.int32 if self.n < 1 << 31 else np.int64)

    def drawn(self, pos: NDArray[np.integer[Any]]) -> NDArray[np.integer[Any]]:
        """The positions among the drawn events (in pieces: the table rows) of the events at
        positions ``pos``."""
        if self.by_start is not None:
            return np.take(self.by_start, pos)
        if self.pieces is not None and not self.pieces.in_table:
            return self.pieces.rows_at(pos)
        return pos

    def starts(self, pos: NDArray[np.integer[Any]]) -> I64:
        """The starts (relative to the origin) of the events at positions ``pos``."""
        if self.keys is not None:
            return np.asarray(self.keys[pos] & self.mask, np.int64)
        start = np.asarray(self.table.start_ns[self.drawn(pos)], np.int64)
        start -= np.int64(self.origin)
        return start

    def durations_at(self, pos: NDArray[np.integer[Any]]) -> I64:
        """The durations (as the table holds them) of the events at positions ``pos``."""
        return np.asarray(np.take(self.durations, self.drawn(pos)), np.int64)

    def durations_between(self, lo: int, hi: int) -> NDArray[Any]:
        """The durations of the events at positions ``lo`` to ``hi``, as the table holds them
        (a column of their own)."""
        if self.by_start is not None:
            return np.take(self.durations, self.by_start[lo:hi])
        if self.pieces is not None and not self.pieces.in_table:
            return np.concatenate([self.durations[a:b] for a, b in self.pieces.spans(lo, hi)]
                                  or [self.durations[:0]])
        return np.array(self.durations[lo:hi])

    def positions(self, rows: I64) -> I64:
        """The positions of table rows, in pieces (every row one of a drawn event's)."""
        if self.pieces is None:
            raise ValueError("positions are found by key where the order is sorted")
        return rows.copy() if self.pieces.in_table else self.pieces.positions(rows)

    def compiled_pieces(self) -> tuple[I64, I64] | None:
        """The pieces as the compiled passes take them ((positions, rows)), where they stand
        for a column of table rows (in pieces, not in table order); else None."""
        p = self.pieces
        return None if p is None or p.in_table else (p.pos, p.row)

    def search(self, tracks: I64, times: I64) -> I64:
        """Per track ``tracks[i]``, the first position among its events of one starting at or
        after each of ``times[i]`` (relative to the origin, within the span; one time or a row
        of them per track)."""
        tracks = np.asarray(tracks, np.int64)
        times = np.asarray(times, np.int64)
        if self.keys is not None:
            base = (tracks << np.int64(self.bits)).reshape((-1,) + (1,) * (times.ndim - 1))
            return np.asarray(np.searchsorted(self.keys, base | times, side="left"), np.int64)
        assert self.pieces is not None  # (not sorted: in pieces)
        out = np.empty(times.shape, np.int64)
        for i, t in enumerate(tracks.tolist()):
            want = np.asarray(times[i] + np.int64(self.origin), np.int64)
            out[i] = self._search_track(t, want.reshape(-1)).reshape(want.shape)
        return out

    def _search_track(self, t: int, want: I64) -> I64:
        """The first position of track ``t``'s events starting at or after each of ``want``
        (ns, as the table holds them; one-dimensional): in the last of its pieces starting
        before it."""
        p = self.pieces
        assert p is not None
        k0, k1 = int(p.track_off[t]), int(p.track_off[t + 1])
        starts = self.table.start_ns
        if k1 - k0 <= 1:  # one piece (the usual case), or none: the track's first position
            if k0 == k1:
                return np.full(want.shape, int(self.offsets[t]), np.int64)
            lo, r = int(p.pos[k0]), int(p.row[k0])
            run = starts[r:r + int(p.pos[k0 + 1]) - lo]
            return lo + np.searchsorted(run, want, side="left").astype(np.int64)
        piece = k0 + np.maximum(np.searchsorted(p.first[k0:k1], want, side="left") - 1, 0)
        out = np.empty(want.shape, np.int64)
        for k in sorted(set(piece.tolist())):
            here = piece == k
            lo, r = int(p.pos[k]), int(p.row[k])
            run = starts[r:r + int(p.pos[k + 1]) - lo]
            out[here] = lo + np.searchsorted(run, want[here], side="left")
        return out

    def compiled_keys(self) -> tuple[NDArray[Any], int | None]:
        """The keys and origin the compiled passes take (``table_rows``, ``window_cells``):
        the composite keys and None, or the table's own starts (int64) and the origin."""
        if self.keys is not None:
            return self.keys, None
        return np.ascontiguousarray(self.table.start_ns, np.int64), int(self.origin)


def line_pieces(table: EventTable, plan: TrackPlan) -> Pieces | None:
    """The (track, start) order as runs of table rows (``Pieces``), where every event of the
    table is drawn, each run of rows of one line is in start order (those starting together
    longer first, at least 1 ns) and a track's runs do not overlap in time (each starts after
    the one before's last start); else None. A block of events at a time: no column as long
    as the table is made."""
    n = len(table)
    if not n or shown_rows(table, plan) is not None:
        return None
    starts, durations, lines = table.start_ns, table.duration_ns, table.line
    most = min(MAX_PIECES, n // PIECE_EVENTS + 1)
    cuts = [np.zeros(1, np.int64)]
    found = 1
    for lo in range(0, n, CHECK_EVENTS):
        hi = min(lo + CHECK_EVENTS, n)
        first = max(lo - 1, 0)  # the previous block's last event, to compare with
        line = lines[first:hi]
        start = np.asarray(starts[first:hi], np.int64)
        same = line[1:] == line[:-1]
        back = np.flatnonzero(same & (start[1:] <= start[:-1]))
        if len(back):
            # Same line, not later: in order only if starting together and not longer.
            length = np.maximum(np.asarray(durations[first:hi], np.int64), 1)
            if not (np.all(start[back + 1] == start[back])
                    and np.all(length[back + 1] <= length[back])):
                return None
        cut = np.flatnonzero(~same) + (first + 1)
        found += len(cut)
        if found > most:
            return None
        cuts.append(cut)
    run_row = np.concatenate(cuts)
    run_end = np.r_[run_row[1:], n]
    track = np.take(plan.track_of_line, lines[run_row])
    if int(track.min()) < 0:
        return None
    first_start = np.asarray(starts[run_row], np.int64)
    last_start = np.asarray(starts[run_end - 1], np.int64)
    by = np.lexsort((run_row, first_start, track))
    track, first_start, last_start = track[by], first_start[by], last_start[by]
    if np.any((track[1:] == track[:-1]) & (first_start[1:] <= last_start[:-1])):
        return None  # a track's runs overlap in time: merged by a sort
    pos = np.r_[0, np.cumsum((run_end - run_row)[by])].astype(np.int64)
    track_off = np.searchsorted(track, np.arange(len(plan.track_line) + 1, dtype=np.int64))
    row = run_row[by]
    return Pieces(track_off.astype(np.int64), pos, row, first_start,
                  bool(np.array_equal(row, pos[:-1])))


def _sorted(table: EventTable, plan: TrackPlan) -> tuple[Rows, I64, Durations]:
    """The drawn events' order by (track, start) (``sorted_by_track_and_start``), the
    composite keys in it, and the durations (the drawn events', in table order; negative ones
    drawn as 0). Where every event is drawn the keys are made in place from the table's
    columns: three columns an event at most at once, not ``event_columns``' six."""
    if shown_rows(table, plan) is not None:
        _, track, rel, edur, lay_end = event_columns(table, plan)
        by_start, key = sorted_by_track_and_start(track, rel, lay_end, plan.bits)
        return by_start, key, edur
    duration = table.duration_ns  # int32 or int64, as the table holds it: no copy
    key = np.asarray(table.start_ns, np.int64) - plan.origin
    # The tracks joined in a chunk at a time (no column of every event's track), and the
    # durations order events starting together (no column of ends).
    shift = np.int64(plan.bits)
    for lo in range(0, len(key), CHUNK):
        track = np.take(plan.track_of_line, table.line[lo:lo + CHUNK])
        track <<= shift
        key[lo:lo + CHUNK] |= track
    by_start, key = sorted_by_key(key, duration)
    return by_start, key, duration
