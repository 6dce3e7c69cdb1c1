"""The events the trace viewer draws as events, in (track, start) order: what the coarse
overview (``trace_overview``) and the per-track table (``track_table``) answer windows from,
and what the full index's layout (``trace_index.build``) starts from.

Most profiles hold their events in that order already: a decoded file gives a line's events
in time order, line after line, and the tracks are the lines in that order. There the order
is the table itself (``in_table_order``): nothing is kept but where each track's events begin
(``offsets``); position p is table row p and the starts are the table's own. Elsewhere the
order is kept as two columns: the positions among the drawn events (``by_start``) and the
composite keys ``track << bits | start`` in that order (``sorted_by_track_and_start``), 12
to 16 bytes an event. Either way events of one track starting together come longer first.
"""

from __future__ import annotations

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
# Events checked at a time (``in_table_order``): a few hundred KB of temporaries, not a column
# as long as a profile of up to a million events.
CHECK_EVENTS = 1 << 16


class TrackOrder:
    """One host's drawn events by (track, start) (see the module docstring)."""

    def __init__(self, table: EventTable, plan: TrackPlan, by_start: Rows | None,
                 keys: I64 | None, durations: Durations, offsets: I64) -> None:
        """``by_start`` and ``keys`` None: the table's own order (``in_table_order``);
        ``durations``: the drawn events' (the table's own where every event is drawn);
        ``offsets``: per track, where its events begin (and one more: the end)."""
        self.table = table
        self.origin, self.bits = plan.origin, plan.bits
        self.mask = np.int64((1 << plan.bits) - 1)
        #: Per event in this order, its position among the drawn events (None: its own).
        self.by_start = by_start
        #: Per event in this order, ``track << bits | start`` (None: in table order).
        self.keys = keys
        #: The drawn events' durations, in table order (negative ones drawn as 0).
        self.durations = durations
        self.offsets = offsets
        self.n = int(offsets[-1]) if len(offsets) else 0

    @classmethod
    def of(cls, table: EventTable, plan: TrackPlan) -> TrackOrder:
        """The order of ``table``'s drawn events: the table's own where it holds them so
        (``in_table_order``), else sorted (``sorted_by_track_and_start``)."""
        offsets = in_table_order(table, plan)
        if offsets is not None:
            return cls(table, plan, None, None, table.duration_ns, offsets)
        return cls.sorted(table, plan)

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
        """Whether position p is table row p (no columns kept)."""
        return self.by_start is None

    def order(self) -> Rows:
        """The order as a column (``by_start``; made where the table's own: what the full
        index's build takes)."""
        if self.by_start is not None:
            return self.by_start
        return np.arange(self.n, dtype=np.int32 if self.n < 1 << 31 else np.int64)

    def starts(self, pos: NDArray[np.integer[Any]]) -> I64:
        """The starts (relative to the origin) of the events at positions ``pos``."""
        if self.keys is not None:
            return np.asarray(self.keys[pos] & self.mask, np.int64)
        start = np.asarray(self.table.start_ns[pos], np.int64)
        start -= np.int64(self.origin)
        return start

    def durations_at(self, pos: NDArray[np.integer[Any]]) -> I64:
        """The durations (as the table holds them) of the events at positions ``pos``."""
        at = pos if self.by_start is None else np.take(self.by_start, pos)
        return np.asarray(np.take(self.durations, at), np.int64)

    def durations_between(self, lo: int, hi: int) -> NDArray[Any]:
        """The durations of the events at positions ``lo`` to ``hi``, as the table holds them
        (a column of their own)."""
        if self.by_start is None:
            return np.array(self.durations[lo:hi])
        return np.take(self.durations, self.by_start[lo:hi])

    def search(self, tracks: I64, times: I64) -> I64:
        """Per track ``tracks[i]``, the first position among its events of one starting at or
        after each of ``times[i]`` (relative to the origin, within the span; one time or a row
        of them per track)."""
        tracks = np.asarray(tracks, np.int64)
        times = np.asarray(times, np.int64)
        if self.keys is not None:
            base = (tracks << np.int64(self.bits)).reshape((-1,) + (1,) * (times.ndim - 1))
            return np.asarray(np.searchsorted(self.keys, base | times, side="left"), np.int64)
        out = np.empty(times.shape, np.int64)
        starts = self.table.start_ns
        for i, t in enumerate(tracks.tolist()):
            lo, hi = int(self.offsets[t]), int(self.offsets[t + 1])
            out[i] = lo + np.searchsorted(starts[lo:hi], times[i] + np.int64(self.origin),
                                          side="left")
        return out

    def compiled_keys(self) -> tuple[NDArray[Any], int | None]:
        """The keys and origin the compiled passes take (``table_rows``, ``window_cells``):
        the composite keys and None, or the table's own starts (int64) and the origin."""
        if self.keys is not None:
            return self.keys, None
        return np.ascontiguousarray(self.table.start_ns, np.int64), int(self.origin)


def in_table_order(table: EventTable, plan: TrackPlan) -> I64 | None:
    """Per track, where its events begin (and one more: the end), where every event of the
    table is drawn and the table holds them by (track, start), those of one track starting
    together longer first (at least 1 ns); else None. A chunk of events at a time: no column
    as long as the table is made."""
    n = len(table)
    if not n or shown_rows(table, plan) is not None:
        return None
    counts = np.zeros(len(plan.track_line), np.int64)
    starts, durations = table.start_ns, table.duration_ns
    track_of_line = plan.track_of_line.astype(np.int32)  # (fewer tracks than 2**31)
    for lo in range(0, n, CHECK_EVENTS):
        hi = min(lo + CHECK_EVENTS, n)
        first = max(lo - 1, 0)  # the previous chunk's last event, to compare with
        track = np.take(track_of_line, table.line[first:hi])
        if not len(track) or int(track.min()) < 0:
            return None
        start = np.asarray(starts[first:hi], np.int64)
        later = (track[1:] > track[:-1]) | ((track[1:] == track[:-1])
                                            & (start[1:] > start[:-1]))
        tied = np.flatnonzero(~later)
        if len(tied):
            # Same track and start: in order only if not longer than the one before.
            length = np.maximum(np.asarray(durations[first:hi], np.int64), 1)
            if not (np.all(track[tied + 1] == track[tied])
                    and np.all(start[tied + 1] == start[tied])
                    and np.all(length[tied + 1] <= length[tied])):
                return None
        counts += np.bincount(track[lo - first:], minlength=len(counts))
    return np.concatenate([np.zeros(1, np.int64), np.cumsum(counts)])


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
