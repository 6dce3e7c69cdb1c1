"""The trace viewer's first picture of a profile opened before: the coarse overview's tool
data and a per-track density of its events, small enough to read from the cache at once;
or, before a big file's table is read, from a skim of the file.

The coarse overview (``trace_overview``) needs the host's table and a sort of its events;
for a large profile that is a second or more even when the table is cached. When the overview
is first made, its tool data (sections, tracks, time span) and, per events track, how many
events start in each of ``bins`` equal spans of the trace (and their durations summed) are
kept in the cache beside the index. A later server answers the tool data and the first windows
from that entry while the table and the index are read (``"coarse": true``, as the overview
answers): each pixel column counts the events whose span of the trace starts in it. A window
whose pixel columns are narrower than a span is not answered (the page waits for the index).

A skim (``model.trace_skim``: one pass over the file that keeps nothing per event, seconds
before the table at 1 GB) gives the same counts per span, and also every event at least a span
long: those a window shows as events (at least a pixel wide) are drawn, with their names and
table rows, each track's laid out on rows of their own (as the index lays out events that
nest) and the others counted on the row below them. And it gives where each block of a few
thousand of a line's events lies in the file, with their times: a window whose blocks hold at
most ``FAST_WINDOW_EVENTS`` events (a zoom into a big trace) is answered with its real events,
read from those blocks alone and laid out as the index lays them out, on the rows the track
has so far (deeper ones counted on its last row), before the table is read. A window whose
blocks hold more (up to ``MAX_WINDOW_EVENTS``) is answered at once from the counts, saying
``"events_coming": true``, while its events are read beside; the page's next ask of that
window gets them. A skim's counts answer any window, their spans drawn as they are where they
are wider than its pixel columns (a blocky picture, and an honest one: each cell holds what
started in its span).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import asdict
from typing import Any

import numpy as np
from numpy.typing import NDArray

from stepscope.analysis.trace.trace_index import (
    COUNTERS_SECTION,
    INDEX_VERSION,
    Track,
    _section_of,
    _section_rank,
    _track_rank,
    rows_in_start_order,
    sections_of,
    window_bounds,
    window_counters,
    with_pids,
)
from stepscope.analysis.trace.trace_overview import TraceOverview
from stepscope.analysis.trace.track_table import _blocks, _cells
from stepscope.errors import ProfileFormatError
from stepscope.model.trace_skim import TraceSkim, coded_pairs

I64 = NDArray[np.int64]
log = logging.getLogger(__name__)

BINS = 1 << 14  # spans per track, at most
MAX_WINDOW_EVENTS = 1 << 20  # events a window reads from a skim's blocks, at most
FAST_WINDOW_EVENTS = 1 << 17  # and at once (under 0.1 s on 2 busy cores); more beside
MAX_CELLS = 1 << 21  # tracks × spans, at most (16 MB of counts and sums)
_COUNTERS = ("counter_track", "counter_off", "counter_time", "counter_value", "counter_row")
_WIDE = ("wide_track", "wide_row", "wide_start", "wide_dur", "wide_name", "wide_id")


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
        self.bin_origin = int(header.get("bin_origin", 0))  # where the first span starts
        self.track_ids: I64 = arrays["track"]
        self.count: I64 = arrays["count"]  # tracks × bins
        self.covered: I64 = arrays["covered"]
        self.counters = {k: arrays[k] for k in _COUNTERS}
        #: A skim's long events (``_WIDE``: every event at least ``wide_ns`` long), and per
        #: track the row its other events are counted on.
        self.wide = {k: arrays[k] for k in _WIDE} if "wide_track" in arrays else None
        self.wide_ns = int(header.get("wide_ns", 0))
        self.names: list[str] = list(header.get("names", []))
        self.count_row: I64 = arrays.get("count_row", np.zeros(len(self.track_ids), np.int64))
        #: A skim's blocks of events (``of_skim``), which answer a window with its events.
        self.skim: TraceSkim | None = None
        self._track_of_line: I64 = np.zeros(0, np.int64)
        self._track_rows: I64 = np.zeros(0, np.int64)
        # The window read beside (``_read_window``): the last one read, and the one wanted.
        self._lock = threading.Lock()
        self._read: tuple[Any, dict[str, Any] | None] | None = None
        self._wanted: tuple[Any, tuple[Any, ...]] | None = None
        self._reading = False
        self._read_key: Any = None  # the window being read beside now
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

    @classmethod
    def of_skim(cls, skim: TraceSkim) -> TracePreview:
        """The preview of a skim of the host's file: its drawn lines as tracks, in the
        trace viewer's order, with their events per span and their long events laid out."""
        planes = [p.name for p in skim.planes]
        keyed = []
        counters = set(skim.counter_lines.tolist())
        lines = sorted([*skim.drawn.tolist(), *counters])
        count_row = {li: k for k, li in enumerate(skim.drawn.tolist())}
        for li in lines:
            section = _section_of(planes[int(skim.line_plane[li])])
            if li in counters:
                section = COUNTERS_SECTION
            keyed.append((_section_rank(section), _track_rank(section, skim.line_name[li],
                                                              int(skim.line_id[li])), li,
                          section))
        keyed.sort()
        n = len(keyed)
        track_of_line = np.full(len(skim.line_events) + 1, -1, np.int64)
        track_of_line[[k[2] for k in keyed]] = np.arange(n, dtype=np.int64)
        events_tracks = np.array([i for i, k in enumerate(keyed) if k[2] not in counters],
                                 np.int64)
        order = np.array([count_row[keyed[i][2]] for i in events_tracks.tolist()], np.int64)
        # The long events by (track, start), the longer first of those starting together,
        # laid out per track.
        track = track_of_line[skim.wide_line]
        start, dur = skim.wide_start, skim.wide_dur
        groups = _start_ordered(track, start, dur)  # (as the skim keeps them, usually)
        by: I64 | slice = slice(None)
        if groups is None:
            by = np.lexsort((-dur, start, track))
            track, start, dur = track[by], start[by], dur[by]
            groups = np.searchsorted(track, np.arange(n + 1, dtype=np.int64))
        row = rows_in_start_order(start, start + np.maximum(dur, 1), groups)
        rows = np.zeros(n, np.int64)
        full = groups[:-1][np.diff(groups) > 0]  # (each track's events: one group)
        if len(full):
            rows[track[full]] = np.maximum.reduceat(row, full) + 1
        # A track's rows: as many as its events open at once where the skim knows that (the
        # table's own where they nest: a zoom's events take them), unless its long events
        # need more; else its long events' and the counts' row below them (none where every
        # event is a long one).
        n_long = np.bincount(track[track >= 0], minlength=n)
        tracks = [Track(i, k[3], skim.line_name[k[2]], "counter", 0,
                        int(skim.line_events[k[2]])) if k[2] in counters else
                  Track(i, k[3], skim.line_name[k[2]], "events",
                        _track_rows(int(rows[i]), int(skim.line_depth[k[2]]),
                                    int(n_long[i]) >= int(skim.line_events[k[2]])),
                        int(skim.line_events[k[2]])) for i, k in enumerate(keyed)]
        # The counts on the row below the long events, or the last row where there is none.
        track_rows = np.array([t.rows for t in tracks], np.int64)
        counts_at = np.minimum(rows, np.maximum(track_rows - 1, 0))
        meta = {"origin_ns": skim.origin, "span_ns": skim.span,
                "events": int(skim.line_events[skim.drawn].sum()), "counter_samples": 0,
                "flows": 0, "sections": with_pids(sections_of(tracks), skim.planes),
                "tracks": [asdict(t) for t in tracks], "coarse": True,
                "index_version": INDEX_VERSION}
        empty = np.zeros(0, np.int64)
        arrays = {"track": events_tracks, "count": skim.count[order],
                  "covered": skim.covered[order], "count_row": counts_at[events_tracks],
                  "wide_track": track, "wide_row": row, "wide_start": start, "wide_dur": dur,
                  "wide_name": skim.wide_name[by], "wide_id": skim.wide_row[by],
                  "counter_track": empty, "counter_off": np.zeros(1, np.int64),
                  "counter_time": empty, "counter_value": np.zeros(0, np.float64),
                  "counter_row": empty}
        preview = cls({"meta": meta, "bin_ns": skim.bin_ns, "bin_origin": skim.bin_origin,
                       "wide_ns": skim.wide_ns, "names": skim.names}, arrays)
        preview.skim = skim
        preview._track_of_line = track_of_line
        preview._track_rows = track_rows
        return preview

    def meta(self) -> dict[str, Any]:
        """The coarse overview's tool data."""
        return dict(self._meta)

    def query(self, start_ns: int, end_ns: int, width: int,
              tracks: list[int] | None = None) -> dict[str, Any]:
        """A window in the coarse overview's form; PreviewTooCoarse where its pixel columns
        are narrower than the preview's spans (but for a skim's, whose spans are then drawn
        as they are while the window's events are read)."""
        bnd = window_bounds(start_ns, end_ns, width)
        coming = False
        skim = self.skim  # (once: a read beside lets it go where the file changed)
        if skim is not None:
            answer = self._read_window(skim, start_ns, end_ns, width, bnd, tracks)
            if isinstance(answer, dict):
                return answer
            coming = answer
        blocky = self.skim is not None  # (not where that read found the file changed)
        if not blocky and (end_ns - start_ns) // width < max(self.bin_ns, self.wide_ns):
            raise PreviewTooCoarse(f"{max(self.bin_ns, self.wide_ns)} ns spans")
        w = width
        t0, t1 = max(start_ns, 0), min(end_ns, self.span_ns + 1)
        keep = np.ones(len(self.track_ids), bool) if tracks is None else \
            np.isin(self.track_ids, np.asarray(tracks, np.int64))
        bins = self.count.shape[1]
        first = np.arange(bins, dtype=np.int64) * self.bin_ns + self.bin_origin
        if blocky and (end_ns - start_ns) // width < self.bin_ns:
            # Spans wider than the window's pixels: one cell per span (clipped to the
            # window), each holding its span's events: a blocky picture, at once.
            inside = np.flatnonzero((first < t1) & (first + self.bin_ns > t0))
            col = np.full(bins, -1, np.int64)
            col[inside] = np.arange(len(inside), dtype=np.int64)
            edges = np.clip(np.r_[first[inside], first[inside[-1:]] + self.bin_ns],
                            start_ns, end_ns) if len(inside) else bnd[:1]
        else:
            col = np.searchsorted(bnd, first, side="right") - 1
            inside = np.flatnonzero((col >= 0) & (col < w) & (first >= t0) & (first < t1))
            edges = bnd
        cells = len(edges) - 1
        counted = np.zeros(bins, bool)
        counted[inside] = True
        rows = np.flatnonzero(keep)
        count = np.zeros((len(rows), cells), np.int64)
        covered = np.zeros((len(rows), cells), np.int64)
        if len(inside) and len(rows):
            for k, r in enumerate(rows.tolist()):
                count[k] = np.bincount(col[inside], weights=self.count[r, inside],
                                       minlength=cells)[:cells].astype(np.int64)
                covered[k] = np.bincount(col[inside], weights=self.covered[r, inside],
                                         minlength=cells)[:cells].astype(np.int64)
        events, names = self._wide_events(t0, t1, end_ns - start_ns, w, rows, count, covered,
                                          col, counted)
        li, cell_col = np.nonzero(count)
        return {
            "start_ns": start_ns, "end_ns": end_ns, "width": w, "coarse": True,
            **({"events_coming": True} if coming else {}),
            "events": events, "aggregates": {
                "track": self.track_ids[rows][li].tolist(),
                "row": self.count_row[rows][li].tolist(),
                "start": edges[cell_col].tolist(), "end": edges[cell_col + 1].tolist(),
                "count": count[li, cell_col].tolist(),
                "covered": covered[li, cell_col].tolist()},
            "names": names, "counters": window_counters(self.counters, t0, t1, bnd, tracks),
            "flows": [], "flows_in_window": 0,
        }

    def _wide_events(self, t0: int, t1: int, span: int, w: int, rows: I64, count: I64,
                     covered: I64, col: I64, counted: NDArray[np.bool_]
                     ) -> tuple[dict[str, list[int]], dict[int, str]]:
        """A skim's long events in ``[t0, t1)`` at least a pixel wide (of ``span`` ns over
        ``w`` pixels), as the index lists events, by track, row and start, with their names;
        each is taken off the counts (``count``, ``covered``: per kept track ``rows``, per
        cell) where its span was counted (``counted``, in cell ``col``)."""
        no: dict[str, list[int]] = {k: [] for k in ("track", "row", "start", "dur", "name",
                                                    "id")}
        if self.wide is None or t0 >= t1:
            return no, {}
        wd = self.wide
        start, dur = wd["wide_start"], wd["wide_dur"]
        # At least a pixel wide: dur × w >= span, without the product overflowing.
        show = np.isin(wd["wide_track"], self.track_ids[rows]) & (dur >= -(-span // w))
        show &= start < t1
        show &= start + np.maximum(dur, 1) > t0
        at = np.flatnonzero(show)
        at = at[np.lexsort((start[at], wd["wide_row"][at], wd["wide_track"][at]))]
        # Its span's cell, where that span was counted in this window.
        k = np.searchsorted(self.track_ids[rows], wd["wide_track"][at])
        b = np.clip((start[at] - self.bin_origin) // self.bin_ns, 0, len(col) - 1)
        c = col[b]
        there = counted[b]
        np.subtract.at(count, (k[there], c[there]), 1)
        np.subtract.at(covered, (k[there], c[there]), dur[at][there])
        names = wd["wide_name"][at]
        events = {"track": wd["wide_track"][at].tolist(), "row": wd["wide_row"][at].tolist(),
                  "start": start[at].tolist(), "dur": dur[at].tolist(),
                  "name": names.tolist(), "id": wd["wide_id"][at].tolist()}
        return events, {c: self.names[c] for c in sorted(set(names.tolist()))}

    def _read_window(self, skim: TraceSkim, start_ns: int, end_ns: int, w: int, bnd: I64,
                     tracks: list[int] | None) -> dict[str, Any] | bool:
        """A window with its real events from the skim's blocks (``_block_window``): read
        now where they hold at most ``FAST_WINDOW_EVENTS`` events; read beside, for the page's
        next ask of the same window, where they hold at most ``MAX_WINDOW_EVENTS`` (True
        meanwhile: the counts answer at once, saying its events are coming); False where
        they hold more, or cannot be read."""
        t0, t1 = max(start_ns, 0), min(end_ns, self.span_ns + 1)
        shown = self.track_ids if tracks is None else \
            self.track_ids[np.isin(self.track_ids, np.asarray(tracks, np.int64))]
        which = np.flatnonzero(np.isin(self._track_of_line[skim.block_line], shown)
                               & (skim.block_lo < t1) & (skim.block_hi > t0))
        if t0 >= t1:
            which = which[:0]
        events = int(skim.block_events[which].sum())
        if events <= FAST_WINDOW_EVENTS:
            return self._block_window(skim, start_ns, end_ns, w, bnd, which, tracks) or False
        if events > MAX_WINDOW_EVENTS:
            return False
        key = (start_ns, end_ns, w, None if tracks is None else tuple(tracks))
        with self._lock:
            if self._read is not None and self._read[0] == key:
                return self._read[1] or False
            if self._reading and self._read_key == key:
                self._wanted = None  # (asked again while it is read: not read twice)
                return True
            self._wanted = (key, (skim, start_ns, end_ns, w, bnd, which, tracks))
            if self._reading:
                return True
            self._reading = True
        threading.Thread(target=self._reader, daemon=True,
                         name="stepscope-preview-read").start()
        return True

    def _reader(self) -> None:
        """Read the window last asked for beside (``_read_window``) until none is wanted."""
        while True:
            with self._lock:
                job, self._wanted = self._wanted, None
                if job is None:
                    self._reading = False
                    self._read_key = None
                    return
                self._read_key = job[0]
            key, args = job
            try:
                answer = self._block_window(*args)
            except Exception as err:  # noqa: BLE001 (a thread's failure: the counts answer)
                log.warning("A trace window could not be read from the skim: %s", err)
                answer = None
            with self._lock:
                self._read = (key, answer)

    def _block_window(self, skim: TraceSkim, start_ns: int, end_ns: int, w: int, bnd: I64,
                      which: I64, tracks: list[int] | None) -> dict[str, Any] | None:
        """A window with its real events, read from the skim's blocks ``which`` (those that
        overlap it); None where those hold more than ``MAX_WINDOW_EVENTS`` events, or the
        file changed since.
        Each track's events are laid out as the index lays them out (by start, the longer
        first of those starting together), on the rows the track has: those at least a pixel
        wide on them are drawn, the others counted per pixel column, deeper ones on the
        track's last row."""
        t0, t1 = max(start_ns, 0), min(end_ns, self.span_ns + 1)
        track_of_block = self._track_of_line[skim.block_line]
        try:  # (None past MAX_WINDOW_EVENTS: the read stops there)
            got = skim.read_blocks(which, t0, t1, MAX_WINDOW_EVENTS)
        except ProfileFormatError:
            # The file changed since its skim: its windows wait for the table, whose read
            # reports what the file now holds.
            self.skim = None
            return None
        if got is None:
            return None
        block, start, dur, metadata = got[:, 0], got[:, 2], got[:, 3], got[:, 4]
        track = track_of_block[block]
        groups = _start_ordered(track, start, dur)
        if groups is None:  # not in that order as read: sorted
            by = np.lexsort((-dur, start, track))
            block, track, start, dur, metadata = (block[by], track[by], start[by], dur[by],
                                                  metadata[by])
            index_in_block = got[by, 1]
            groups = np.searchsorted(track, np.arange(len(self._track_rows) + 1,
                                                      dtype=np.int64))
        else:
            index_in_block = got[:, 1]
        row = rows_in_start_order(start, start + np.maximum(dur, 1), groups)
        last = self._track_rows[track] - 1
        drawn = np.flatnonzero((row <= last) & (dur >= -(-(end_ns - start_ns) // w)))
        # Listed by track and start (the longer first), as the index lists them.
        drawn = drawn[np.lexsort((-dur[drawn], start[drawn], track[drawn]))]
        ids = skim.block_row[block[drawn]] + index_in_block[drawn]
        # Names coded per (line, metadata id), looked up once each.
        keys, code = coded_pairs(skim.block_line[block[drawn]], metadata[drawn])
        names = {i: skim.event_name(k[0], k[1]) for i, k in enumerate(keys)}
        # The others counted per (track, row, pixel column), adjacent cells of a row merged
        # into blocks, as the per-track table answers.
        height = int(self._track_rows.max(initial=1))
        col = np.clip(np.searchsorted(bnd, start, side="right") - 1, 0, w - 1)
        cell = (track * height + np.minimum(row, last)) * w + col
        cells, count, covered = _cells(cell, dur, drawn, len(self._track_rows) * height * w)
        tr = cells // w
        aggregates = _blocks([(tr // height, tr % height, cells % w, count, covered)]
                             if len(cells) else [], bnd)
        return {
            "start_ns": start_ns, "end_ns": end_ns, "width": w, "coarse": True,
            "events": {"track": track[drawn].tolist(), "row": row[drawn].tolist(),
                       "start": start[drawn].tolist(), "dur": dur[drawn].tolist(),
                       "name": code.reshape(-1).tolist(), "id": ids.tolist()},
            "aggregates": aggregates,
            "names": names, "counters": window_counters(self.counters, t0, t1, bnd, tracks),
            "flows": [], "flows_in_window": 0,
        }


def _track_rows(long_rows: int, depth: int, all_long: bool) -> int:
    """A skimmed track's rows: ``depth`` (its events open at once, as the skim counted them;
    -1: unknown) where known and its long events (laid out on ``long_rows`` rows) fit in it,
    else the long events' rows, and one below them for the counts unless ``all_long`` (every
    event of the track is a long one, laid out)."""
    if depth > 0 and depth >= long_rows:
        return depth
    return long_rows if all_long and long_rows else long_rows + 1


def _start_ordered(track: I64, start: I64, dur: I64) -> I64 | None:
    """Where the events come grouped by track, each group by start (the longer first of those
    starting together), as a line's blocks are read when the line is in start order: the
    groups' bounds; else None. (A check of the order read is a tenth of a sort's time.)"""
    n = len(track)
    if n < 2:
        return np.array([0, n], np.int64)
    change = track[1:] != track[:-1]
    step = np.diff(start)
    if not np.all(change | (step > 0) | ((step == 0) & (dur[1:] <= dur[:-1]))):
        return None
    bounds = np.r_[0, np.flatnonzero(change) + 1, n].astype(np.int64)
    firsts = track[bounds[:-1]]
    return bounds if len(np.unique(firsts)) == len(firsts) else None
