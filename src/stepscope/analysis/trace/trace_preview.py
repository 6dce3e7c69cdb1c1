"""The trace viewer's first picture of a profile opened before: the coarse overview's tool
data and a per-track density of its events, small enough to read from the cache at once.

The coarse overview (``trace_overview``) needs the host's table and a sort of its events;
for a large profile that is a second or more even when the table is cached. When the overview
is first made, its tool data (sections, tracks, time span) and, per events track, how many
events start in each of ``bins`` equal spans of the trace (and their durations summed) are
kept in the cache beside the index. A later server answers the tool data and the first windows
from that entry while the table and the index are read (``"coarse": true``, as the overview
answers): each pixel column counts the events whose span of the trace starts in it. A window
whose pixel columns are narrower than a span is not answered (the page waits for the index).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from stepscope.analysis.trace.trace_index import window_bounds, window_counters
from stepscope.analysis.trace.trace_overview import TraceOverview

I64 = NDArray[np.int64]

BINS = 1 << 14  # spans per track, at most
MAX_CELLS = 1 << 21  # tracks × spans, at most (16 MB of counts and sums)
_COUNTERS = ("counter_track", "counter_off", "counter_time", "counter_value", "counter_row")


class PreviewTooCoarse(Exception):
    """The window asks for more detail than the preview holds."""


class TracePreview:
    """The cached density of one host's events (see the module docstring)."""

    coarse = True

    def __init__(self, header: dict[str, Any], arrays: dict[str, NDArray[Any]]) -> None:
        self._meta: dict[str, Any] = header["meta"]
        self.span_ns = int(self._meta["span_ns"])
        self.events = int(self._meta["events"])
        self.bin_ns = int(header["bin_ns"])
        self.track_ids: I64 = arrays["track"]
        self.count: I64 = arrays["count"]  # tracks × bins
        self.covered: I64 = arrays["covered"]
        self.counters = {k: arrays[k] for k in _COUNTERS}
        if self.count.shape != self.covered.shape or self.count.ndim != 2 \
                or self.count.shape[0] != len(self.track_ids) or self.bin_ns < 1:
            raise ValueError("a trace preview whose arrays do not fit")

    @classmethod
    def of(cls, overview: TraceOverview) -> TracePreview:
        """The preview of a coarse overview."""
        ids = np.array([t.id for t in overview.tracks if t.kind == "events"], np.int64)
        bins = max(1, min(BINS, MAX_CELLS // max(len(ids), 1)))
        bin_ns = overview.span_ns // bins + 1  # bins × bin_ns > span: every start in a bin
        times = np.arange(bins, dtype=np.int64) * bin_ns
        pos = np.empty((len(ids), bins + 1), np.int64)
        pos[:, :-1] = overview.order.search(ids, np.broadcast_to(times, (len(ids), bins)))
        pos[:, -1] = overview.order.offsets[ids + 1]  # the last bin ends with the track
        header = {"meta": overview.meta(), "bin_ns": bin_ns}
        arrays = {"track": ids, "count": np.diff(pos, axis=1).astype(np.int64),
                  "covered": np.diff(overview.summed_before(pos), axis=1).astype(np.int64),
                  **{k: overview.counters[k] for k in _COUNTERS}}
        return cls(header, arrays)

    def meta(self) -> dict[str, Any]:
        """The coarse overview's tool data."""
        return dict(self._meta)

    def query(self, start_ns: int, end_ns: int, width: int,
              tracks: list[int] | None = None) -> dict[str, Any]:
        """A window in the coarse overview's form; PreviewTooCoarse where its pixel columns
        are narrower than the preview's spans."""
        bnd = window_bounds(start_ns, end_ns, width)
        if (end_ns - start_ns) // width < self.bin_ns:
            raise PreviewTooCoarse(f"{self.bin_ns} ns spans")
        w = width
        t0, t1 = max(start_ns, 0), min(end_ns, self.span_ns + 1)
        keep = np.ones(len(self.track_ids), bool) if tracks is None else \
            np.isin(self.track_ids, np.asarray(tracks, np.int64))
        bins = self.count.shape[1]
        first = np.arange(bins, dtype=np.int64) * self.bin_ns
        col = np.searchsorted(bnd, first, side="right") - 1
        inside = np.flatnonzero((col >= 0) & (col < w) & (first >= t0) & (first < t1))
        rows = np.flatnonzero(keep)
        count = np.zeros((len(rows), w), np.int64)
        covered = np.zeros((len(rows), w), np.int64)
        if len(inside) and len(rows):
            for k, r in enumerate(rows.tolist()):
                count[k] = np.bincount(col[inside], weights=self.count[r, inside],
                                       minlength=w)[:w].astype(np.int64)
                covered[k] = np.bincount(col[inside], weights=self.covered[r, inside],
                                         minlength=w)[:w].astype(np.int64)
        li, cell_col = np.nonzero(count)
        return {
            "start_ns": start_ns, "end_ns": end_ns, "width": w, "coarse": True,
            "events": {"track": [], "row": [], "start": [], "dur": [], "name": [], "id": []},
            "aggregates": {"track": self.track_ids[rows][li].tolist(), "row": [0] * len(li),
                           "start": bnd[cell_col].tolist(), "end": bnd[cell_col + 1].tolist(),
                           "count": count[li, cell_col].tolist(),
                           "covered": covered[li, cell_col].tolist()},
            "names": {}, "counters": window_counters(self.counters, t0, t1, bnd, tracks),
            "flows": [], "flows_in_window": 0,
        }
