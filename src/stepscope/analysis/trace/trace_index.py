"""The trace viewer's index of one host: tracks, rows, and level-of-detail window queries.

Every event of a host (but the Task Environment's and Kineto's zero-length flow markers)
is placed on a *track* (one per line of a plane) and, within its track, on a *row*: events
that nest go one row below their parent (or, where that row is taken, the lowest free row
below it), and events that overlap without nesting go to the lowest free row; nothing on a
row overlaps anything else, and the layout costs O(n log n). Lines whose events are all zero-length
samples with a ``value`` stat become *counter tracks* instead.

Tracks are grouped in *sections*: one per device plane (``/device:GPU:0``: Steps, op lines,
then its streams), ``Host Threads`` (a track per CPU thread), the Python tracer's threads,
other planes under their own names, and ``Counters``; each with the process id XProf's
trace viewer gives it (``section_pids``).

The index holds, in one order (track, row, start), composite int64 keys
``segment << TB | time`` (a *segment* is one row of one track, TB the bits of the trace's
length in ns), so that one ``searchsorted`` finds any segment's events in any window; the
same events again ordered by (segment, duration level, start), where the level is
``floor(log2(duration))``, so that the events at least one pixel wide are found without
touching the narrow ones; and a running sum of durations, so that the narrow events of any
pixel column are counted and summed in constant time. A query's work and payload depend on
the pixels and segments in view, not on how many events the window holds.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass
from types import ModuleType
from typing import Any

import numpy as np
from numpy.typing import NDArray

from stepscope.analysis.versions import INDEX_VERSION as INDEX_VERSION  # bumped there
from stepscope.errors import NotFoundError, StepscopeError
from stepscope.model import schema
from stepscope.model import stat_kinds as sk
from stepscope.model.events import MISSING, Durations, EventTable, Plane, TypedStats
from stepscope.native import compiled

I32 = NDArray[np.int32]
I64 = NDArray[np.int64]
# Table rows and positions in the index: int32 where every one fits (``_positions``), else int64.
Rows = NDArray[np.signedinteger[Any]]
F64 = NDArray[np.float64]
Bools = NDArray[np.bool_]
#: (source rows, destination rows, kinds) of flows: rows int32 where they fit, kinds int8.
Flows = tuple[Rows, Rows, NDArray[np.int8]]

MAX_WIDTH = 20_000  # pixels a query may ask for
MAX_FLOWS = 2_000  # flows a window query returns (more: only their count)
FLOW_BLOCK = 64  # flows (by their earlier end) per block of latest later ends
# Up to this many flows, a window waits for the flows by time, however made (a few ms).
FLOW_TIMES_AT_ONCE = 100_000
_FLOW_TIMES = threading.Lock()  # the flows by time made once, by one thread
MAX_MATCHES = 10_000  # search matches returned
LEVELS = 64  # duration levels (floor(log2(ns)) of an int64 fits in 6 bits)
_LEVEL_BITS = 6
_LEVEL_BLOCK = 1 << 18  # events whose levels are made at a time
# Events whose index keys are made at a time: each block's temporaries are a few hundred KB,
# not a column as long as a profile of up to a million events.
_KEY_BLOCK = 1 << 16
# Events a chunked pass over the table takes at a time: its temporaries are a few MB, reused,
# not columns as long as the table (each such column costs its memory's first touch).
CHUNK = 1 << 20
# The (track, start) order merges the keys' ascending runs where they average this many
# events or more (``sorted_by_track_and_start``), else sorts them.
RUN_EVENTS = 64

HOST_THREADS = "Host Threads"
PYTHON_SECTION = "Python Tracer"
COUNTERS_SECTION = "Counters"
# Order of a device plane's derived lines; streams and anything else follow by line id.
DEVICE_LINE_ORDER = ("Steps", "Framework Ops", "TensorFlow Ops", "XLA Modules", "XLA Ops",
                     "Framework Name Scope", "TensorFlow Name Scope", "Source code")
FLOW_LAUNCH = 0  # a kernel launch (or memcpy) to the kernel it launched: correlation id
FLOW_PRODUCER = 1  # a producer event to its consumer (``_p``/``_pt`` → ``_c``/``_ct``)
FLOW_KINDS = ("launch", "producer_consumer")
_KINETO_FLOW_NAME = re.compile(r"^flow:")
_DEVICE_NUMBER = re.compile(r"^/device:[A-Za-z]+:(\d+)")
# Process ids as XProf's trace viewer numbers its processes: a device plane is 1 + its plane
# id, the host's threads are 701. The sections XProf does not show (the Python tracer's,
# the counters, other planes) follow from 702 in display order.
FIRST_DEVICE_PID = 1
HOST_PID = 701


class TraceQueryError(StepscopeError, ValueError):
    """A trace viewer query asks for something outside what the index can answer."""


class EventNotFoundError(TraceQueryError, NotFoundError):
    """A trace viewer query names an event that is not on the host's timeline."""


@dataclass
class Track:
    """One timeline track: a line of a plane."""

    id: int
    section: str
    name: str
    kind: str  # "events" or "counter"
    rows: int  # rows its events need (0 for counters)
    events: int  # events (or samples) on it


def _level(dur: I64) -> NDArray[np.int8]:
    """floor(log2(duration)) per event, 0 for durations under 2 ns."""
    out = np.empty(len(dur), np.int8)
    for lo in range(0, len(dur), _LEVEL_BLOCK):  # a block at a time: small temporaries
        _, exp = np.frexp(np.maximum(dur[lo:lo + _LEVEL_BLOCK], 1).astype(np.float64))
        exp -= 1
        out[lo:lo + _LEVEL_BLOCK] = exp
    return out


def _ranges(lo: I64, hi: I64) -> I64:
    """The concatenation of ``arange(lo[i], hi[i])`` for every i (vectorised)."""
    counts = np.maximum(hi - lo, 0)
    total = int(counts.sum())
    if not total:
        return np.zeros(0, np.int64)
    ends = np.cumsum(counts)
    return (np.repeat(lo - (ends - counts), counts) + np.arange(total, dtype=np.int64))


def _float_stat(table: EventTable, stat: str) -> tuple[I64, F64]:
    """A numeric side stat as (event rows, float values)."""
    st = table.stats
    try:
        code = st.stat_names.index(stat)
    except ValueError:
        return np.zeros(0, np.int64), np.zeros(0, np.float64)
    rows = np.flatnonzero(st.name == code)
    kind = st.kind[rows]
    raw = np.asarray(st.value[rows], np.int64)
    values = raw.astype(np.float64)
    doubles = kind == sk.KIND_DOUBLE
    values[doubles] = raw[doubles].view(np.float64)
    numeric = doubles | np.isin(kind, (sk.KIND_INT64, sk.KIND_UINT64))
    return np.asarray(st.event[rows][numeric], np.int64), values[numeric]


def _section_of(plane: str) -> str:
    if plane == schema.HOST_PLANE:
        return HOST_THREADS
    if plane == schema.PYTHON_TRACER_PLANE:
        return PYTHON_SECTION
    if plane == schema.COUNTERS_PLANE:
        return COUNTERS_SECTION
    return plane


def _section_rank(section: str) -> tuple[int, int, str]:
    match = _DEVICE_NUMBER.match(section)
    if match:
        return (0, int(match.group(1)), section)
    order = {HOST_THREADS: 1, PYTHON_SECTION: 2, COUNTERS_SECTION: 4}
    return (order.get(section, 3), 0, section)


def with_pids(sections: list[dict[str, Any]], planes: list[Plane]) -> list[dict[str, Any]]:
    """The sections of ``meta``, each with its process id (``section_pids``)."""
    pids = section_pids([s["name"] for s in sections], planes)
    return [{**s, "pid": pid} for s, pid in zip(sections, pids, strict=True)]


def section_pids(sections: list[str], planes: list[Plane]) -> list[int]:
    """Each section's process id, as XProf's trace viewer numbers its processes."""
    plane_ids = {p.name: p.id for p in planes}
    after_host = HOST_PID + 1
    pids = []
    for name in sections:
        if name == HOST_THREADS:
            pids.append(HOST_PID)
        elif name.startswith("/device:") and name in plane_ids:
            pids.append(FIRST_DEVICE_PID + plane_ids[name])
        else:
            pids.append(after_host)
            after_host += 1
    return pids


def _track_rank(section: str, name: str, line_id: int) -> tuple[int, int, str]:
    if section.startswith("/device:") and name in DEVICE_LINE_ORDER:
        return (0, DEVICE_LINE_ORDER.index(name), name)
    if section in (HOST_THREADS, PYTHON_SECTION):
        return (1, 0, name.lower())
    return (1, line_id, name)


def _too_wide() -> TraceQueryError:
    return TraceQueryError("This profile has too many rows or too long a time span for the "
                           "trace viewer's index.")


def by_track_and_start(track: I64, start: I64, lay_end: I64, bits: int) -> Rows:
    """Event order by (track, start), the longer first of events starting together."""
    return sorted_by_track_and_start(track, start, lay_end, bits)[0]


def sorted_by_track_and_start(track: I64, start: I64, lay_end: I64, bits: int
                              ) -> tuple[Rows, I64]:
    """``by_track_and_start``, and the composite keys ``track << bits | start`` in that
    order."""
    return sorted_by_key((track << np.int64(bits)) | start, lay_end)


def sorted_by_key(key: I64, lay_end: Durations) -> tuple[Rows, I64]:
    """``sorted_by_track_and_start`` from the composite keys ``track << bits | start`` (in
    table order) and the ends as laid out, or the durations (either orders the events of one
    key alike: the longer first, at least 1 ns long): (the order, the keys in it). The order's
    rows are int32 where the keys were in order already (and the rows fit), else int64."""
    native = compiled_layout()
    if native is not None and len(key):
        # The keys in table order are a few ascending runs (an XLine's events come in time
        # order, a track is a line or a few): merged, not sorted. Where they are not (runs
        # shorter than RUN_EVENTS on average), the general sort below.
        # int32 rows where they fit: the order is kept (the per-track table's rows).
        order: Rows = np.empty(len(key), np.int32 if len(key) < 1 << 31 else np.int64)
        # int32 durations as they are (the compiled pass reads 4- or 8-byte items).
        end = np.ascontiguousarray(lay_end, None if lay_end.dtype == np.int32 else np.int64)
        runs = native.order_by_key(key, end, order, None, len(key) // RUN_EVENTS + 1)
        if runs >= 0:  # in order already (a profile's lines in track order): no copy
            return order, key
        if runs == -2:  # merged into int64 rows
            order = np.empty(len(key), np.int64)
            sorted_key = np.empty(len(key), np.int64)
            if native.order_by_key(key, end, order, sorted_key,
                                   len(key) // RUN_EVENTS + 1) >= 0:
                return order, sorted_key
            del sorted_key
        del order
    # One int64 key sorts far faster than a multi-key lexsort, and an unstable sort (SIMD
    # quicksort) faster than a stable one where events do not arrive sorted; the few events
    # with equal keys are then put in a fixed order: the longer first, then by table row, as
    # a stable sort would leave them.
    order = np.argsort(key)
    sorted_key = key[order]
    same = sorted_key[1:] == sorted_key[:-1]
    if same.any():
        tied = np.zeros(len(order), bool)
        tied[1:] |= same
        tied[:-1] |= same
        sub = order[tied]
        order[tied] = sub[np.lexsort((sub, -np.maximum(lay_end[sub], 1), key[sub]))]
    return np.asarray(order, np.int64), sorted_key


def _by_row(track: I64, depth: I64, by_start: I64) -> I64:
    """Event order by (track, row, start), given the order by (track, start)."""
    rows = int(depth.max()) + 1
    group = track[by_start] * rows + depth[by_start]
    if int(group.max()) < 1 << 16:
        group = group.astype(np.uint16)  # a stable sort of 16-bit keys is a radix sort
    return np.asarray(by_start[np.argsort(group, kind="stable")], np.int64)


def _layout(track: I64, start: I64, lay_end: I64, by_start: I64 | None = None,
            depth: I64 | None = None) -> tuple[I64, I64]:
    """A row per event such that no two events of one track and row overlap (``layout_depth``,
    unless given as ``depth``), and the event order by (track, row, start). ``by_start``: the
    events' order by (track, start), when already made (``by_track_and_start``)."""
    n = len(track)
    if not n:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    if by_start is None:
        bits = int(max(int(lay_end.max()), 1)).bit_length()
        if int(track.max()).bit_length() + bits > 62:
            raise _too_wide()
        by_start = by_track_and_start(track, start, lay_end, bits)
    if depth is None:
        depth, order = layout_depth(track, start, lay_end, by_start)
        if order is not None:
            return depth, order
    return depth, _by_row(track, depth, by_start)


def layout_depth(track: I64, start: I64, lay_end: I64, by_start: I64
                 ) -> tuple[I64, I64 | None]:
    """A row per event (in table order) such that no two events of one track and row overlap,
    given the events' order by (track, start) (``by_track_and_start``); and the order by
    (track, row, start) where it was made on the way (None where not).

    Each event goes to the lowest row free when it starts that lies below every running
    event containing it: nested events get their nesting depth. The compiled twin
    (``_trace_layout``) lays every track out so in one pass. Without it, every event first
    gets its nesting depth (counted, not walked: the events of its track still running when
    it starts), which is the layout wherever events nest properly; the tracks where they do
    not (``_unnested``) are laid out again one event at a time (``_overlapping_rows``).
    """
    n = len(track)
    depth = np.zeros(n, np.int64)
    if not n:
        return depth, None
    bits = int(max(int(lay_end.max()), 1)).bit_length()
    if int(track.max()).bit_length() + bits > 62:
        raise _too_wide()
    sorted_track = track[by_start]
    if compiled_layout() is not None:
        offsets = np.searchsorted(sorted_track, np.arange(int(track.max()) + 2,
                                                          dtype=np.int64)).astype(np.int64)
        del sorted_track
        depth[by_start] = rows_in_start_order(start[by_start], lay_end[by_start], offsets)
        return depth, None
    tshift = np.int64(bits)
    skeys = ((track << tshift) | start)[by_start]
    ekeys = np.sort((track << tshift) | lay_end, kind="stable")
    # Events of the same track still running when this one starts (and started before it).
    depth[by_start] = np.arange(n) - np.searchsorted(ekeys, skeys, side="right")
    del skeys, ekeys
    order = _by_row(track, depth, by_start)
    odd = _unnested(order, track, depth, start, lay_end, bits)
    if not len(odd):
        return depth, order
    del order
    # A track's events are a contiguous run of ``by_start``.
    for t in np.unique(track[odd]).tolist():
        lo, hi = np.searchsorted(sorted_track, [t, t + 1])
        rows = by_start[lo:hi]
        depth[rows] = _overlapping_rows(start[rows], lay_end[rows])
    return depth, None


def compiled_layout() -> ModuleType | None:
    """The compiled row layout (``_trace_layout``), or None (not built, or the pure-Python
    twins asked for)."""
    return compiled("stepscope.analysis.trace._trace_layout")


def rows_in_start_order(start: I64, lay_end: I64, offsets: I64) -> I64:
    """Each event's row, for events given by (track, start) (the longer first of events
    starting together), track ``t`` being events ``offsets[t]`` to ``offsets[t + 1]``: the
    compiled layout where built, else ``_overlapping_rows`` per track (the same rows)."""
    out = np.zeros(len(start), np.int64)
    native = compiled_layout()
    if native is not None:
        native.rows(np.ascontiguousarray(start, np.int64), np.ascontiguousarray(lay_end, np.int64),
                    np.ascontiguousarray(offsets, np.int64), out)
        return out
    for t in np.flatnonzero(np.diff(offsets) > 0).tolist():
        lo, hi = int(offsets[t]), int(offsets[t + 1])
        out[lo:hi] = _overlapping_rows(start[lo:hi], lay_end[lo:hi])
    return out


def _unnested(order: I64, track: I64, depth: I64, start: I64, lay_end: I64,
              bits: int) -> I64:
    """Events at a depth d > 0 not inside the event before them (by start) on row d - 1 of
    their track (``order``: the events by track, row and start). Where there are none, every
    event's row holds its containers above it and nothing else running: the tracks nest
    properly and the depths are the layout."""
    d = depth[order]
    new_group = np.ones(len(order), bool)
    new_group[1:] = (track[order][1:] != track[order][:-1]) | (d[1:] != d[:-1])
    seg = np.cumsum(new_group) - 1
    if int(seg[-1]).bit_length() + bits > 62:
        raise _too_wide()
    shift = np.int64(bits)
    s = start[order]
    key = (seg << shift) | s
    # The rows of a track are consecutive segments (a depth d > 0 has events at d - 1).
    inner = np.flatnonzero(d > 0)
    above = np.searchsorted(key, ((seg[inner] - 1) << shift) | s[inner], side="right") - 1
    ok = (above >= 0) & (seg[np.maximum(above, 0)] == seg[inner] - 1)
    ok &= lay_end[order[np.maximum(above, 0)]] >= lay_end[order[inner]]
    return np.asarray(order[inner[~ok]], np.int64)


def _overlapping_rows(start: I64, end: I64) -> I64:
    """Rows for one track's events, given in start order (the longer first of events
    starting together), where some overlap without nesting: each event goes to the lowest
    row that is free when it starts and lies below every running event that contains it
    (nested events thus keep their nesting depth, the others take the lowest free row).
    O(n log rows).

    Per row, the end of its last event (the latest, as a row's events do not overlap) is
    kept in two segment trees over the rows, one of minima and one of maxima: "the lowest
    row from ``k`` on free at time ``s``" is a walk in the first, "the highest row whose
    last event ends at or after ``e``" (the lowest container of an event ending at ``e``,
    as any event started before that ends that late contains it) one in the second.
    """
    n = len(start)
    cap = 64
    lo = [-1] * (2 * cap)  # minimum over a node's rows of when they free up (-1: unused)
    hi = [-1] * (2 * cap)  # maximum of the same
    out = [0] * n
    for i, (s, e) in enumerate(zip(start.tolist(), end.tolist(), strict=True)):
        if hi[1] < e:
            k = 0  # nothing running contains this event
        else:
            j = 1
            while j < cap:
                j = 2 * j + 1 if hi[2 * j + 1] >= e else 2 * j
            k = j - cap + 1  # just below its lowest container
        while True:
            r = k if k < cap and lo[k + cap] <= s else _first_free(lo, cap, k, s)
            if r >= 0:
                break
            # Every row from k on is busy: double the rows the trees cover.
            lo = _grown(lo, cap, min)
            hi = _grown(hi, cap, max)
            cap *= 2
        out[i] = r
        j = r + cap
        lo[j] = hi[j] = e
        j >>= 1
        while j:
            a, b = lo[2 * j], lo[2 * j + 1]
            lo[j] = a if a < b else b
            a, b = hi[2 * j], hi[2 * j + 1]
            hi[j] = a if a > b else b
            j >>= 1
    return np.asarray(out, np.int64)


def _grown(tree: list[int], cap: int, pick: Callable[[int, int], int]) -> list[int]:
    """A segment tree over ``cap`` rows grown to cover twice as many (the new ones unused)."""
    leaves = tree[cap:] + [-1] * cap
    out = [0] * (2 * cap) + leaves
    for j in range(2 * cap - 1, 0, -1):
        out[j] = pick(out[2 * j], out[2 * j + 1])
    return out


def _first_free(tree: list[int], cap: int, k: int, s: int) -> int:
    """The lowest row ``>= k`` that is free at time ``s`` (its last event ended by then),
    or -1 if none of the ``cap`` rows the tree covers is."""
    if k >= cap:
        return -1
    i = k + cap
    if tree[i] <= s:
        return k
    # Up: to the first right sibling (a span of rows after i's) holding a free row.
    while i > 1:
        if not i & 1 and tree[i + 1] <= s:
            i += 1
            break
        i >>= 1
    else:
        return -1
    # Down: the lowest free row of that span.
    while i < cap:
        i = 2 * i if tree[2 * i] <= s else 2 * i + 1
    return i - cap


def window_counters(arrays: dict[str, NDArray[Any]], t0: int, t1: int, bnd: I64,
                    tracks: list[int] | None) -> list[dict[str, Any]]:
    """Per counter track (``arrays``: ``counter_arrays``): its samples in the window (and the
    one before), at most two per pixel column (the column's minimum and maximum) where there
    are more."""
    out = []
    w = len(bnd) - 1
    counter_off, counter_time = arrays["counter_off"], arrays["counter_time"]
    counter_value = arrays["counter_value"]
    for i, track in enumerate(arrays["counter_track"].tolist()):
        if tracks is not None and track not in tracks:
            continue
        lo, hi = int(counter_off[i]), int(counter_off[i + 1])
        # Both slices stop at the track's end: past it lie the next track's samples.
        times, values = counter_time[lo:hi], counter_value[lo:hi]
        first = max(int(np.searchsorted(times, t0, side="right")) - 1, 0)
        last = int(np.searchsorted(times, t1, side="left"))
        t = times[first:last + 1]
        v = values[first:last + 1]
        if len(t) > 2 * w:
            col = np.clip(np.searchsorted(bnd, t, side="right") - 1, 0, w - 1)
            cut = np.flatnonzero(np.r_[True, col[1:] != col[:-1]])
            lows, highs = np.minimum.reduceat(v, cut), np.maximum.reduceat(v, cut)
            starts = t[cut]
            t = np.repeat(starts, 2)
            v = np.stack([lows, highs], axis=1).reshape(-1)
        out.append({"track": track, "time": t.tolist(),
                    "value": [float(x) for x in v.tolist()]})
    return out


def window_bounds(start_ns: int, end_ns: int, width: int) -> I64:
    """The pixel columns' boundaries of a window query (checked: TraceQueryError)."""
    if not (isinstance(width, int) and 1 <= width <= MAX_WIDTH):
        raise TraceQueryError(f"The width must be 1 to {MAX_WIDTH} pixels, not {width}.")
    if end_ns <= start_ns:
        raise TraceQueryError("The window's end must be after its start.")
    span = end_ns - start_ns
    if start_ns < -(1 << 62) or end_ns > 1 << 62:
        raise TraceQueryError("The window must lie within ±2^62 ns of the trace's start.")
    # (i * span + width - 1) // width, without i * span overflowing 64 bits.
    q, r = divmod(span, width)
    i = np.arange(width + 1, dtype=np.int64)
    return np.int64(start_ns) + i * np.int64(q) + (i * np.int64(r) + width - 1) // width


class TraceIndex:
    """The level-of-detail index of one host's events (see the module docstring)."""

    def __init__(self, table: EventTable, header: dict[str, Any],
                 arrays: dict[str, NDArray[Any]]) -> None:
        self.table = table
        self.origin_ns = int(header["origin_ns"])
        self.span_ns = int(header["span_ns"])
        self.bits = int(header["bits"])
        self.max_level = int(header["max_level"])
        self.tracks = [Track(**t) for t in header["tracks"]]
        self.sections: list[dict[str, Any]] = header["sections"]
        a = arrays
        self.seg_track: I64 = a["seg_track"]
        self.seg_depth: I64 = a["seg_depth"]
        self.seg_off: I64 = a["seg_off"]
        self.ev_row: Rows = a["ev_row"]
        self.skey: I64 = a["skey"]
        self.ekey: I64 = a["ekey"]
        self.cumdur: I64 = a["cumdur"]
        self.lkey: I64 = a["lkey"]
        self.lpos: Rows = a["lpos"]
        self.pos_of_row: Rows = a["pos_of_row"]
        self.counter_track: I64 = a["counter_track"]
        self.counter_off: I64 = a["counter_off"]
        self.counter_time: I64 = a["counter_time"]
        self.counter_value: F64 = a["counter_value"]
        self.counter_row: I64 = a["counter_row"]
        self.flow_src: I64 = a["flow_src"]
        self.flow_dst: I64 = a["flow_dst"]
        self.flow_kind: NDArray[np.int8] = a["flow_kind"]
        self.header = header
        self.arrays = arrays
        self._stat_order: I64 | None = None
        self._lower_names: list[str] | None = None
        self._flow_times: tuple[I64, Rows, I64, I64] | None = None
        #: Set where another thread makes the flows by time (a server, once its first window
        #: is out): until they are there, a window with many flows is answered without them,
        #: marked ``flows_pending``, rather than waiting (a second at 1 GB).
        self.flow_times_coming = False

    # -- facts -----------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.ev_row)

    @property
    def mask(self) -> np.int64:
        """The time bits of a composite key."""
        return (np.int64(1) << np.int64(self.bits)) - np.int64(1)

    def meta(self) -> dict[str, Any]:
        """Sections (each with its process id), tracks and the trace's time span, for the
        viewer's first request."""
        return {"origin_ns": self.origin_ns, "span_ns": self.span_ns, "events": len(self),
                "counter_samples": len(self.counter_time), "flows": len(self.flow_src),
                "sections": with_pids(self.sections, self.table.planes),
                "tracks": [asdict(t) for t in self.tracks]}

    def _start(self, pos: I64) -> I64:
        return np.asarray(self.skey[pos] & self.mask, np.int64)

    def _seg_of(self, pos: I64) -> I64:
        return np.asarray(np.searchsorted(self.seg_off, pos, side="right") - 1, np.int64)

    def where(self, rows: I64) -> tuple[I64, I64, I64]:
        """(track, row, start relative to the origin) of table rows in the index."""
        pos = self.pos_of_row[rows]
        seg = self._seg_of(pos)
        return self.seg_track[seg], self.seg_depth[seg], self._start(pos)

    # -- the window query ------------------------------------------------------------------

    def query(self, start_ns: int, end_ns: int, width: int,
              tracks: list[int] | None = None) -> dict[str, Any]:
        """Per track, the events of ``[start_ns, end_ns)`` (relative to the origin) at
        ``width`` pixels: each event at least one pixel wide exactly, every narrower one
        counted in an aggregate block of the pixel columns it starts in."""
        bnd = window_bounds(start_ns, end_ns, width)
        span, w = end_ns - start_ns, width
        limit = int(self.mask)
        t0, t1 = max(start_ns, 0), min(end_ns, limit)
        segs = np.arange(len(self.seg_track), dtype=np.int64)
        if tracks is not None:
            segs = segs[np.isin(self.seg_track, np.asarray(tracks, np.int64))]
        if t0 >= t1 or not len(segs):
            segs = segs[:0]
        shift = np.int64(self.bits)
        a = np.searchsorted(self.ekey, (segs << shift) | t0, side="right")
        b = np.searchsorted(self.skey, (segs << shift) | t1, side="left")
        live = b > a
        segs, a, b = segs[live], a[live], b[live]
        wide = self._wide(segs, t0, t1, span, w)
        agg = self._aggregates(segs, a, b, wide, bnd, span, w, t0, t1)
        wide_seg = self._seg_of(wide)
        rows = self.ev_row[wide]
        names = self.table.name[rows]
        out_names = {int(c): self.table.names[c] for c in np.unique(names).tolist()}
        result: dict[str, Any] = {
            "start_ns": start_ns, "end_ns": end_ns, "width": w,
            "events": {"track": self.seg_track[wide_seg].tolist(),
                       "row": self.seg_depth[wide_seg].tolist(),
                       "start": self._start(wide).tolist(),
                       "dur": self.table.duration_ns[rows].tolist(),
                       "name": names.tolist(), "id": rows.tolist()},
            "aggregates": agg, "names": out_names,
            "counters": self._counters(t0, t1, bnd, tracks),
        }
        self._put_flows(result, start_ns, end_ns)
        return result

    def _wide(self, segs: I64, t0: int, t1: int, span: int, w: int) -> I64:
        """Positions of the events at least one pixel wide in the window."""
        px = span // w
        kmin = max(px.bit_length() - 1, 0) if px >= 1 else 0
        levels = np.arange(kmin, self.max_level + 1, dtype=np.int64)
        if not len(segs) or not len(levels):
            return np.zeros(0, np.int64)
        shift = np.int64(self.bits)
        group = ((segs[:, None] << np.int64(_LEVEL_BITS)) | levels[None, :]).reshape(-1)
        first = np.searchsorted(self.lkey, group << shift, side="left")
        lo = np.searchsorted(self.lkey, (group << shift) | t0, side="left")
        hi = np.searchsorted(self.lkey, (group << shift) | t1, side="left")
        # The event before the window's start on the same row may reach into it.
        back = lo > first
        prev = self.lpos[np.maximum(lo - 1, 0)]
        back &= (self.ekey[prev] & self.mask) > t0
        lo = lo - back
        pos = self.lpos[_ranges(lo, hi)]
        dur = np.asarray(self.table.duration_ns[self.ev_row[pos]], np.int64)  # no int32 product
        return np.sort(np.asarray(pos[dur * w >= span], np.int64))

    def _aggregates(self, segs: I64, a: I64, b: I64, wide: I64, bnd: I64, span: int,
                    w: int, t0: int, t1: int) -> dict[str, list[int]]:
        """Blocks of adjacent pixel columns holding narrow events, per segment (the window's
        times clipped to ``[t0, t1]``, the part of it a key can hold)."""
        shift = np.int64(self.bits)
        small = (b - a) <= 2 * w
        parts_seg, parts_col, parts_n, parts_cov = [], [], [], []
        # Few events: look at each of them.
        s_idx = np.flatnonzero(small)
        if len(s_idx):
            pos = _ranges(a[s_idx], b[s_idx])
            seg = np.repeat(segs[s_idx], (b - a)[s_idx])
            dur = np.asarray(self.table.duration_ns[self.ev_row[pos]], np.int64)
            narrow = dur * w < span
            pos, seg, dur = pos[narrow], seg[narrow], dur[narrow]
            col = np.clip(np.searchsorted(bnd, self._start(pos), side="right") - 1, 0, w - 1)
            if len(pos):
                key = seg * (w + 1) + col
                cut = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
                parts_seg.append(seg[cut])
                parts_col.append(col[cut])
                parts_n.append(np.diff(np.r_[cut, len(key)]))
                parts_cov.append(np.add.reduceat(dur, cut))
        # Many events: count them per column from the sorted starts and running sums.
        l_idx = np.flatnonzero(~small)
        if len(l_idx):
            lsegs = segs[l_idx]
            # Column boundaries outside the trace (a window reaching before its start or
            # past its end) would spill into a key's segment bits: clipped.
            needles = (lsegs[:, None] << shift) | np.clip(bnd[1:w], t0, t1)[None, :]
            inner = np.searchsorted(self.skey, needles, side="left")
            edges = np.concatenate([a[l_idx, None], inner, b[l_idx, None]], axis=1)
            edges = np.clip(edges, a[l_idx, None], b[l_idx, None])
            counts = np.diff(edges, axis=1)
            covered = np.diff(self.cumdur[edges], axis=1)
            slot = np.full(len(self.seg_track), -1, np.int64)
            slot[lsegs] = np.arange(len(lsegs))
            wseg = slot[self._seg_of(wide)]
            mine = wseg >= 0
            wpos = wide[mine]
            wcol = np.clip(np.searchsorted(bnd, self._start(wpos), side="right") - 1, 0, w - 1)
            np.subtract.at(counts, (wseg[mine], wcol), 1)
            np.subtract.at(covered, (wseg[mine], wcol),
                           self.table.duration_ns[self.ev_row[wpos]])
            li, col = np.nonzero(counts)
            parts_seg.append(lsegs[li])
            parts_col.append(col.astype(np.int64))
            parts_n.append(counts[li, col])
            parts_cov.append(covered[li, col])
        if not parts_seg:
            return {"track": [], "row": [], "start": [], "end": [], "count": [],
                    "covered": []}
        seg = np.concatenate(parts_seg)
        col = np.concatenate(parts_col)
        n = np.concatenate(parts_n)
        cov = np.concatenate(parts_cov)
        order = np.lexsort((col, seg))
        seg, col, n, cov = seg[order], col[order], n[order], cov[order]
        run = np.flatnonzero(np.r_[True, (seg[1:] != seg[:-1]) | (col[1:] != col[:-1] + 1)])
        last = np.r_[run[1:], len(seg)] - 1
        rseg = seg[run]
        return {"track": self.seg_track[rseg].tolist(), "row": self.seg_depth[rseg].tolist(),
                "start": bnd[col[run]].tolist(), "end": bnd[col[last] + 1].tolist(),
                "count": np.add.reduceat(n, run).tolist(),
                "covered": np.add.reduceat(cov, run).tolist()}

    def _counters(self, t0: int, t1: int, bnd: I64, tracks: list[int] | None
                  ) -> list[dict[str, Any]]:
        return window_counters(self.arrays, t0, t1, bnd, tracks)

    def _put_flows(self, result: dict[str, Any], start_ns: int, end_ns: int) -> None:
        """A window answer's ``flows`` and ``flows_in_window`` (``_window_flows``); while
        they wait for the flows by time, none, and ``flows_pending`` (asked again soon)."""
        found = self._window_flows(start_ns, end_ns)
        result["flows"], result["flows_in_window"] = found or ([], 0)
        if found is None:
            result["flows_pending"] = True

    def _window_flows(self, start_ns: int,
                      end_ns: int) -> tuple[list[dict[str, Any]], int] | None:
        """Flows with an end in the window (none, only their count, when too many); None
        while another thread makes the flows by time (``flow_times_coming``) that this
        window needs."""
        if not len(self.flow_src):
            return [], 0
        if start_ns <= 0 and end_ns >= self.span_ns and len(self.flow_src) > MAX_FLOWS:
            # A window over the whole trace (the page's first) holds every flow's ends (each
            # starts at 0 or after, and before the span, which is past every event's start):
            # too many to draw, counted without sorting the flows by time.
            return [], len(self.flow_src)
        if (self._flow_times is None and self.flow_times_coming
                and len(self.flow_src) > FLOW_TIMES_AT_ONCE):
            return None
        lo, by_lo, block_hi, hi_sorted = self.flow_times()
        k = int(np.searchsorted(lo, end_ns, side="left"))  # flows with lo < end_ns
        j = int(np.searchsorted(lo, start_ns, side="left"))  # ... and lo < start_ns
        # Those begun before the window and reaching into it: every flow begun before it
        # less those ended before it too (a flow's later end before the window's start puts
        # its earlier end there as well). Counted, not found, unless few enough to draw.
        total = j - int(np.searchsorted(hi_sorted, start_ns, side="left")) + k - j
        if total > MAX_FLOWS:
            return [], total
        # Found in the blocks (before j) whose latest later end reaches into the window: each
        # but the last holds one of them at least, so they are at most MAX_FLOWS + 1.
        hot = np.flatnonzero(block_hi[:-(-j // FLOW_BLOCK)] >= start_ns) * FLOW_BLOCK
        maybe = _ranges(hot, np.minimum(hot + FLOW_BLOCK, j))
        flows = by_lo[maybe]
        hi = np.maximum(self.table.start_ns[self.flow_src[flows]],
                        self.table.start_ns[self.flow_dst[flows]]) - self.origin_ns
        early = maybe[hi >= start_ns]
        inside = np.sort(by_lo[np.concatenate([early, np.arange(j, k)])])
        return self.flows_of(inside), total

    def flow_times(self) -> tuple[I64, Rows, I64, I64]:
        """The flows by time (``_flows_by_time``), made once: a server makes them after the
        first window (a second or so at 12M flows), beside the zooms that need them."""
        times = self._flow_times
        if times is None:
            with _FLOW_TIMES:
                times = self._flow_times
                if times is None:
                    times = self._flow_times = self._flows_by_time()
        return times

    def share_flow_times(self, other: TraceIndex) -> None:
        """Take ``other``'s flows by time, where made and its flows are these (the full
        index built from a per-track table's flows does not sort them again)."""
        times = other._flow_times
        if (times is not None and self._flow_times is None
                and self.origin_ns == other.origin_ns
                and all(mine is theirs or np.array_equal(mine, theirs) for mine, theirs in
                        ((self.flow_src, other.flow_src), (self.flow_dst, other.flow_dst)))):
            self._flow_times = times

    def _flows_by_time(self) -> tuple[I64, Rows, I64, I64]:
        """Once: the flows' earlier ends ascending, that order, per block of FLOW_BLOCK flows
        in it the latest later end, and the later ends ascending (20 bytes a flow kept: the
        order is int32 where the flows allow). Each column as long as the flows is made in a
        buffer freed just before where it can be (fresh memory is what costs here)."""
        src_t = np.take(np.asarray(self.table.start_ns, np.int64), self.flow_src)
        src_t -= self.origin_ns
        dst_t = np.take(np.asarray(self.table.start_ns, np.int64), self.flow_dst)
        dst_t -= self.origin_ns
        lo = np.minimum(src_t, dst_t)
        hi = np.maximum(src_t, dst_t, out=src_t)
        by_lo = np.argsort(lo, kind="stable")
        if len(by_lo) < 1 << 31:
            by_lo = by_lo.astype(np.int32)
        lo_sorted = np.take(lo, by_lo, out=dst_t)
        hi_by_lo = np.take(hi, by_lo, out=lo)
        block_hi = (np.maximum.reduceat(hi_by_lo, np.arange(0, len(hi_by_lo), FLOW_BLOCK))
                    if len(hi_by_lo) else np.zeros(0, np.int64))
        del hi_by_lo, lo
        hi.sort(kind="stable")  # ascending runs (a line's events): merged, not sorted afresh
        return lo_sorted, by_lo, block_hi, hi

    def flows_of(self, flows: I64) -> list[dict[str, Any]]:
        """The drawable form of some flows: both ends' event, track, row and time."""
        src, dst = self.flow_src[flows], self.flow_dst[flows]
        st, sr, ss = self.where(src)
        dt, dr, ds = self.where(dst)
        return [{"kind": FLOW_KINDS[k], "from": {"id": a, "track": b, "row": c, "time": d},
                 "to": {"id": e, "track": f, "row": g, "time": h}}
                for k, a, b, c, d, e, f, g, h in zip(
                    self.flow_kind[flows].tolist(), src.tolist(), st.tolist(), sr.tolist(),
                    ss.tolist(), dst.tolist(), dt.tolist(), dr.tolist(), ds.tolist(),
                    strict=True)]

    # -- one event, a selection, a search -------------------------------------------------

    def check_event(self, event_id: int) -> int:
        """``event_id`` if it names an event on a track; EventNotFoundError otherwise."""
        if not (0 <= event_id < len(self.table)) or self.pos_of_row[event_id] < 0:
            raise EventNotFoundError(f"No event {event_id} on this host's timeline.")
        return event_id

    def event(self, event_id: int) -> dict[str, Any]:
        """One event: name, start, duration, place, every stat and its flows."""
        row = self.check_event(event_id)
        t = self.table
        track, depth, start = (int(x[0]) for x in self.where(np.array([row], np.int64)))
        stats: dict[str, Any] = dict(t.typed_at(row))
        st = t.stats
        if self._stat_order is None:
            # The stats by event: their own order where they come so (a decoded file's do;
            # none made then), else sorted once.
            ev = np.asarray(st.event)
            self._stat_order = (_STATS_IN_ORDER if _ascending(ev)
                                else np.argsort(ev, kind="stable"))
        order = None if self._stat_order is _STATS_IN_ORDER else self._stat_order
        lo = int(np.searchsorted(st.event, row, side="left", sorter=order))
        hi = int(np.searchsorted(st.event, row, side="right", sorter=order))
        for i in (range(lo, hi) if order is None else order[lo:hi].tolist()):
            value = st.value_of(i)
            if isinstance(value, bytes):
                value = value.hex()
            stats[st.stat_names[int(st.name[i])]] = value
        flows = np.flatnonzero((self.flow_src == row) | (self.flow_dst == row))
        tr = self.tracks[track]
        return {"id": row, "name": t.names[int(t.name[row])], "start_ns": start,
                "duration_ns": int(t.duration_ns[row]), "track": track, "row": depth,
                "section": tr.section, "track_name": tr.name, "stats": stats,
                "flows": self.flows_of(flows[:MAX_FLOWS])}

    def selection(self, start_ns: int, end_ns: int, tracks: list[int]) -> dict[str, Any]:
        """Events of ``tracks`` overlapping ``[start_ns, end_ns)``, summed by name."""
        if end_ns <= start_ns:
            raise TraceQueryError("The selection's end must be after its start.")
        t0, t1 = max(start_ns, 0), min(end_ns, int(self.mask))
        segs = np.flatnonzero(np.isin(self.seg_track, np.asarray(tracks, np.int64)))
        shift = np.int64(self.bits)
        if t0 >= t1:
            segs = segs[:0]
        a = np.searchsorted(self.ekey, (segs.astype(np.int64) << shift) | t0, side="right")
        b = np.searchsorted(self.skey, (segs.astype(np.int64) << shift) | t1, side="left")
        return summed_by_name(self.table, self.ev_row[_ranges(a, b)], start_ns, end_ns)

    def search(self, text: str) -> dict[str, Any]:
        """Events whose name holds ``text`` (any case), in time order."""
        if self._lower_names is None:
            self._lower_names = [n.lower() for n in self.table.names]
        codes = names_holding(self._lower_names, text)
        if not len(codes):
            return {"query": text, "total": 0, "matches": []}
        hit = np.flatnonzero(np.isin(self.table.name[self.ev_row], codes))
        starts = self._start(hit)
        order = np.argsort(starts, kind="stable")[:MAX_MATCHES]
        pos = hit[order]
        seg = self._seg_of(pos)
        rows = self.ev_row[pos]
        return {"query": text, "total": int(len(hit)), "matches": {
            "id": rows.tolist(), "track": self.seg_track[seg].tolist(),
            "row": self.seg_depth[seg].tolist(), "start": starts[order].tolist(),
            "dur": self.table.duration_ns[rows].tolist()}}


def summed_by_name(table: EventTable, rows: NDArray[np.int64], start_ns: int,
                   end_ns: int) -> dict[str, Any]:
    """A selection's answer: the events ``rows`` summed by name, the longest total first."""
    names = table.name[rows]
    count = np.bincount(names, minlength=len(table.names))
    total = np.bincount(names, weights=table.duration_ns[rows], minlength=len(table.names))
    codes = np.flatnonzero(count)
    codes = codes[np.argsort(-total[codes], kind="stable")]
    return {"start_ns": start_ns, "end_ns": end_ns, "events": int(len(rows)),
            "rows": [{"name": table.names[c], "count": int(count[c]),
                      "total_ns": int(total[c]), "average_ns": float(total[c] / count[c])}
                     for c in codes.tolist()]}


def names_holding(lower_names: list[str], text: str) -> NDArray[np.int64]:
    """The codes of the names (given lower-cased) that hold ``text`` in any case."""
    if not text or len(text) > 200:
        raise TraceQueryError("Search for 1 to 200 characters.")
    needle = text.lower()
    return np.array([i for i, n in enumerate(lower_names) if needle in n], np.int64)


# -- building ---------------------------------------------------------------------------------


def _flows(table: EventTable, included: Bools, device_plane: Bools,
           off_line: Bools | None = None) -> Flows:
    """(source rows, destination rows, kinds) of the flows between included events (and, where
    ``off_line`` is given, not on a line it marks): rows as ``_positions`` keeps them (int32
    where they fit), kinds as int8."""
    srcs: list[Rows] = []
    dsts: list[Rows] = []
    kinds: list[int] = []
    dtype = _positions(np.zeros(0, np.int64), len(table.line)).dtype

    # Only the rows carrying a correlation id are looked at (the sparse form where the table
    # keeps one): no column as long as the table is made for them.
    typed = table.typed
    if isinstance(typed, TypedStats) and schema.CORRELATION_ID in typed.sparse:
        c_at, c_val = typed.sparse[schema.CORRELATION_ID]
        c_at, c_val = np.asarray(c_at, np.int64), np.asarray(c_val, np.int64)
    else:
        dense = typed.get(schema.CORRELATION_ID)
        if dense is None:
            dense = np.zeros(0, np.int64)
        c_at = np.flatnonzero(dense != MISSING)
        c_val = np.asarray(dense[c_at], np.int64)
    keep = (c_val != MISSING) & _kept(table, included, off_line, c_at)
    c_at, c_val = c_at[keep], c_val[keep]
    on_device = device_plane[table.line_plane[table.line[c_at]]]
    host_rows, host_corr = c_at[~on_device], c_val[~on_device]
    dev_rows, dev_corr = c_at[on_device], c_val[on_device]
    if len(host_rows) and len(dev_rows):
        order = np.argsort(host_corr, kind="stable")
        keys = host_corr[order]
        at = np.clip(np.searchsorted(keys, dev_corr), 0, len(keys) - 1)
        ok = keys[at] == dev_corr
        srcs.append(host_rows[order][at[ok]].astype(dtype))
        dsts.append(dev_rows[ok].astype(dtype))
        kinds.append(FLOW_LAUNCH)
    found = _stat_flows(table, included, off_line, dtype)
    if found is not None:
        srcs.append(found[0])
        dsts.append(found[1])
        kinds.append(FLOW_PRODUCER)
    if not srcs:
        return np.zeros(0, dtype), np.zeros(0, dtype), np.zeros(0, np.int8)
    kind = np.repeat(np.array(kinds, np.int8), [len(x) for x in srcs])
    if len(srcs) == 1:  # one kind of flow (the usual case): no copies
        return srcs[0], dsts[0], kind
    return np.concatenate(srcs), np.concatenate(dsts), kind


_FLOW_STATS = ("_p", "_c", "_pt", "_ct")


def _kept(table: EventTable, included: Bools, off_line: Bools | None, rows: I64) -> Bools:
    """Which of ``rows`` are included and not on a line ``off_line`` marks."""
    keep = included[rows]
    if off_line is not None:
        keep &= ~off_line[table.line[rows]]
    return keep


def _stat_flows(table: EventTable, included: Bools, off_line: Bools | None,
                dtype: np.dtype[Any]) -> tuple[Rows, Rows] | None:
    """(producer rows, consumer rows) of the producer → consumer flows between the events
    ``_kept`` keeps, or None where there are no producers or no consumers. The compiled twin
    (``_trace_layout.stat_flows``) in passes over the stat table that keep nothing as long as
    it (a hash table of the producers' stat rows, the pairs written at their final type); this
    one finds the stats (``_int_stats``), their types (``_lookup``), then the pairs
    (``_producer_flows``)."""
    native = compiled_layout()
    # (Its notes of stat rows are kept in the int32 pairs: fewer than 2**31 stat rows.)
    if native is not None and len(table.stats.name) < (1 << 31) - 1:
        st = table.stats
        slot = np.full(len(st.stat_names) + 1, -1, np.int8)
        for i, stat in enumerate(_FLOW_STATS):
            if stat in st.stat_names:
                slot[st.stat_names.index(stat)] = i
        names = st.name if st.name.dtype in (np.int16, np.int32) else st.name.astype(np.int32)
        # Lines read as narrowed too (only where some are left out).
        lines = table.line if table.line.dtype in (np.int16, np.int32) or off_line is None \
            else table.line.astype(np.int32)
        keep = np.ascontiguousarray(included, np.bool_)
        cols = (np.ascontiguousarray(names), np.ascontiguousarray(st.kind, np.int8),
                np.ascontiguousarray(st.event, np.int32),
                np.ascontiguousarray(st.value, np.int64), slot)
        line_cols = ((None, None) if off_line is None else
                     (np.ascontiguousarray(lines), np.ascontiguousarray(off_line, np.bool_)))
        counted = native.stat_flows(*cols, keep, *line_cols, 0, None, None,
                                    sk.KIND_INT64, sk.KIND_UINT64)
        if counted is not None:  # else not by event: the twin below
            producers, consumers = counted
            if not producers or not consumers:
                return None
            src, dst = np.empty(consumers, dtype), np.empty(consumers, dtype)
            found = native.stat_flows(*cols, keep, *line_cols, producers, src, dst,
                                      sk.KIND_INT64, sk.KIND_UINT64)
            # Views: the consumers left without a producer are few (a copy costs more).
            return src[:found], dst[:found]
    (p_rows, p_ids), (c_rows, c_ids), pt_stat, ct_stat = _int_stats(table, _FLOW_STATS)
    if not len(p_rows) or not len(c_rows):
        return None
    pt = _lookup(*pt_stat, p_rows)
    ct = _lookup(*ct_stat, c_rows)
    keep = _kept(table, included, off_line, p_rows)
    p_rows, p_ids, pt = p_rows[keep], p_ids[keep], pt[keep]
    keep = _kept(table, included, off_line, c_rows)
    c_rows, c_ids, ct = c_rows[keep], c_ids[keep], ct[keep]
    if not len(p_rows) or not len(c_rows):
        return None
    src, dst = _producer_flows(p_rows, p_ids, pt, c_rows, c_ids, ct)
    return src.astype(dtype), dst.astype(dtype)


def _producer_flows(p_rows: I64, p_ids: I64, pt: I64, c_rows: I64, c_ids: I64, ct: I64
                    ) -> tuple[I64, I64]:
    """(producer rows, consumer rows) of the producer → consumer flows, in the consumers'
    order: a consumer's producer is the first (in the producers' order: table order) with its
    type and id, unless that is the consumer itself: per type (a few), by id, a sort of the
    producers' ids and a search of the consumers'. (The compiled twin of ``_stat_flows``
    joins by hash, straight from the stat table.)"""
    found_src, found_dst = [], []
    for flow_type in np.unique(pt).tolist():
        mine = pt == flow_type
        rows, ids = p_rows[mine], p_ids[mine]
        order = np.argsort(ids, kind="stable")
        pk, pr = ids[order], rows[order]
        theirs = np.flatnonzero(ct == flow_type)
        if not len(theirs):
            continue
        at = np.clip(np.searchsorted(pk, c_ids[theirs]), 0, len(pk) - 1)
        ok = (pk[at] == c_ids[theirs]) & (pr[at] != c_rows[theirs])
        found_src.append(pr[at[ok]])
        found_dst.append(theirs[ok])
    if not found_dst:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    # In the consumers' (table) order, as one search over every type would give them.
    dst_at = np.concatenate(found_dst)
    order = np.argsort(dst_at, kind="stable")
    return (np.asarray(np.concatenate(found_src)[order], np.int64),
            np.asarray(c_rows[dst_at[order]], np.int64))


def _int_stats(table: EventTable, stats: tuple[str, ...]) -> list[tuple[I64, I64]]:
    """Integer side stats as (event rows, values) each, as ``EventTable.int_stat`` gives them,
    found in one pass over the stat table (it holds several stats per event)."""
    st = table.stats
    slot = np.full(len(st.stat_names) + 1, -1, np.int8)
    for i, stat in enumerate(stats):
        if stat in st.stat_names:
            slot[st.stat_names.index(stat)] = i
    which = slot[st.name]
    sel = np.flatnonzero(which >= 0)
    which = which[sel]
    kind = st.kind[sel]
    sel = sel[(kind == sk.KIND_INT64) | (kind == sk.KIND_UINT64)]
    which = which[(kind == sk.KIND_INT64) | (kind == sk.KIND_UINT64)]
    events = np.asarray(st.event[sel], np.int64)
    values = np.asarray(st.value[sel], np.int64)
    return [(events[which == i], values[which == i]) for i in range(len(stats))]


def _lookup(s_rows: I64, values: I64, rows: I64) -> I64:
    """An integer side stat's value (``s_rows``, ``values``: as ``_int_stats`` gives it) for
    each of ``rows`` (-1 where absent)."""
    if len(s_rows) == len(rows) and np.array_equal(s_rows, rows) \
            and bool(np.all(s_rows[1:] > s_rows[:-1])):
        # The same events carry both, each once (the usual case): no search.
        return np.asarray(values, np.int64)
    out = np.full(len(rows), -1, np.int64)
    if len(s_rows):
        # The stats come by event: usually in order already (no sort then).
        order = (np.arange(len(s_rows)) if bool(np.all(s_rows[1:] >= s_rows[:-1]))
                 else np.argsort(s_rows, kind="stable"))
        keys = s_rows[order]
        at = np.clip(np.searchsorted(keys, rows), 0, len(keys) - 1)
        ok = keys[at] == rows
        out[ok] = values[order][at[ok]]
    return out


@dataclass
class TrackPlan:
    """Which events a host's timeline shows and on which track, before any layout: what the
    full index and the coarse overview (``trace_overview``) share."""

    included: Bools  # per event: on the timeline (not a skipped plane, not a flow marker)
    counter_line: Bools  # per line: a counter track
    track_of_line: I64  # per line (and one more, -1): its track, -1 for none
    track_line: list[int]  # per track: its line
    track_section: list[str]  # per track: its section
    device_plane: Bools  # per plane (and one more): a device plane
    origin: int  # the earliest included event's start (ns): time 0 of the index
    span: int  # the time bits' span: every event's end (at least 1 ns long) and sample
    value_rows: I64  # events with a numeric ``value`` stat, and the values
    values: F64

    @property
    def bits(self) -> int:
        """Bits of a composite key's time part."""
        return max(self.span, 1).bit_length()


def plan_tracks(table: EventTable) -> TrackPlan:
    """The tracks of a host's timeline, in display order, and the time span they cover."""
    n = len(table)
    planes = [p.name for p in table.planes]
    skip_plane = np.array([p in schema.UNDRAWN_PLANES for p in planes] + [False], bool)
    device_plane = np.array([p.startswith("/device:") for p in planes] + [False], bool)
    flow_name = np.array([bool(_KINETO_FLOW_NAME.match(x)) for x in table.names] + [False],
                         bool)
    # Usually nothing is left out: then no gathers over every event.
    included = ~skip_plane[table.plane] if skip_plane.any() else np.ones(n, bool)
    if flow_name.any():
        included &= ~flow_name[table.name]
    everything = bool(included.all())
    start = np.asarray(table.start_ns, np.int64)
    origin = (int(start.min()) if everything and n else
              int(start[included].min()) if included.any() else 0)

    # Counter lines: every event a zero-length sample with a numeric value.
    value_rows, values = _float_stat(table, schema.VALUE)
    n_lines = len(table.line_name)
    has_value = None
    if len(value_rows):
        has_value = np.zeros(n, bool)
        has_value[value_rows] = True
    per_line = np.zeros(n_lines, np.int64)
    samples = np.zeros(n_lines, np.int64)
    duration = table.duration_ns  # int32 or int64, as the table holds it: no copy
    native = compiled_layout()
    latest = None  # every event's latest end, where found on the way
    if native is not None and everything and has_value is None and n \
            and table.line.dtype in (np.int16, np.int32):
        # The usual case (every event drawn, no counters): one compiled pass.
        latest = native.line_counts(np.ascontiguousarray(table.line),
                                    np.ascontiguousarray(start), np.ascontiguousarray(duration),
                                    per_line)
    # Else a chunk at a time: no column of every event's line.
    for lo in range(0, n if latest is None else 0, CHUNK):
        line = table.line[lo:lo + CHUNK]
        shown = line if everything else line[included[lo:lo + CHUNK]]
        per_line += np.bincount(shown, minlength=n_lines)
        if has_value is not None:
            sample = has_value[lo:lo + CHUNK] & (table.duration_ns[lo:lo + CHUNK] <= 0)
            sample &= included[lo:lo + CHUNK]
            samples += np.bincount(line[sample], minlength=n_lines)
    counter_line = (per_line > 0) & (samples == per_line)

    # Tracks, in display order.
    keyed = []
    for li in (li for li in range(n_lines) if per_line[li] > 0):
        section = _section_of(planes[int(table.line_plane[li])])
        if counter_line[li] and section != COUNTERS_SECTION:
            section = COUNTERS_SECTION
        keyed.append((_section_rank(section), _track_rank(section, table.line_name[li],
                                                          int(table.line_id[li])), li,
                      section))
    keyed.sort()
    track_of_line = np.full(n_lines + 1, -1, np.int64)
    for i, (_, _, li, _) in enumerate(keyed):
        track_of_line[li] = i

    # The span: every shown event's end (at least 1 ns long) and every counter sample.
    span = 1 if latest is None else int(latest) - origin
    counted = bool(counter_line.any())
    for lo in range(0, n if latest is None else 0, CHUNK):
        at = slice(lo, lo + CHUNK)
        ends = np.maximum(duration[at], 1, dtype=np.int64)
        ends += start[at]
        if everything and not counted:  # the usual case: every event drawn
            span = max(span, int(ends.max()) - origin)
            continue
        on_line = counter_line[table.line[at]]
        events = ~on_line
        events &= included[at]
        if events.any():
            span = max(span, int(ends[events].max()) - origin)
        counters = included[at] & on_line
        if counters.any():
            span = max(span, int(start[at][counters].max()) - origin + 1)
    return TrackPlan(included, counter_line, track_of_line, [k[2] for k in keyed],
                     [k[3] for k in keyed], device_plane, origin, span, value_rows, values)


def counter_arrays(table: EventTable, plan: TrackPlan) -> dict[str, NDArray[Any]]:
    """The counter tracks' samples, by track and time (the index's ``counter_*`` arrays).
    The samples are found a chunk of events at a time and their values looked up (no column
    as long as the table: a host without counters, the usual case, costs nothing)."""
    crow = np.zeros(0, np.int64)
    if plan.counter_line.any():
        parts = [crow]
        for lo in range(0, len(table), CHUNK):
            on = plan.counter_line[table.line[lo:lo + CHUNK]]
            on &= plan.included[lo:lo + CHUNK]
            found = np.flatnonzero(on)
            found += lo
            parts.append(found)
        crow = np.concatenate(parts)
    value = np.zeros(len(crow), np.float64)
    if len(crow) and len(plan.value_rows):
        # The last value given for a row, as an assignment by row would leave it.
        order = np.argsort(plan.value_rows, kind="stable")
        keys = plan.value_rows[order]
        at = np.searchsorted(keys, crow, side="right") - 1
        ok = (at >= 0) & (keys[np.maximum(at, 0)] == crow)
        value[ok] = plan.values[order[at[ok]]]
    start = np.asarray(table.start_ns[crow], np.int64)
    ctrack = plan.track_of_line[table.line[crow]]
    corder = np.lexsort((start, ctrack))
    crow, ctrack, start, value = crow[corder], ctrack[corder], start[corder], value[corder]
    counter_tracks, coff = np.unique(ctrack, return_index=True)
    return {"counter_track": counter_tracks.astype(np.int64),
            "counter_off": np.r_[coff, len(crow)].astype(np.int64),
            "counter_time": (start - plan.origin).astype(np.int64),
            "counter_value": value, "counter_row": crow.astype(np.int64)}


def sections_of(tracks: list[Track]) -> list[dict[str, Any]]:
    """The sections of some tracks (in track order), each with its tracks' ids."""
    sections: list[dict[str, Any]] = []
    for t in tracks:
        if not sections or sections[-1]["name"] != t.section:
            sections.append({"name": t.section, "tracks": []})
        sections[-1]["tracks"].append(t.id)
    return sections


def event_columns(table: EventTable, plan: TrackPlan) -> tuple[I64, I64, I64, I64, I64]:
    """The events drawn as events (not counter samples), in table order: (table rows, track,
    start relative to the origin, duration, end as laid out: at least 1 ns after the start)."""
    shown = shown_rows(table, plan)
    if shown is None:
        ev_rows = np.arange(len(table), dtype=np.int64)  # every event: no gathers
        track = plan.track_of_line[table.line]
        rel = np.asarray(table.start_ns, np.int64) - plan.origin
        edur = np.maximum(table.duration_ns, 0, dtype=np.int64)
    else:
        ev_rows = shown
        track = plan.track_of_line[table.line[ev_rows]]
        rel = np.asarray(table.start_ns[ev_rows], np.int64) - plan.origin
        edur = np.maximum(np.asarray(table.duration_ns[ev_rows], np.int64), 0)
    return ev_rows, track, rel, edur, rel + np.maximum(edur, 1)


def shown_rows(table: EventTable, plan: TrackPlan) -> I64 | None:
    """The table rows of the events drawn as events (``event_columns``' first column), or
    None where that is every row of the table (the usual case: no array made)."""
    if not plan.counter_line.any() and bool(plan.included.all()):
        return None
    return np.flatnonzero(plan.included & ~plan.counter_line[table.line])


def _group_dtype(top: int) -> type[np.integer[Any]]:
    """The narrowest unsigned type holding 0..``top`` (16, 32 or 64 bits): a stable sort of
    16-bit keys is a radix sort, and each byte less is a byte less an event."""
    if top < 1 << 16:
        return np.uint16
    return np.uint32 if top < 1 << 32 else np.uint64


def _by_row_given(table: EventTable, plan: TrackPlan, ev_rows: I64 | None,
                  by_start: I64 | None, depth: NDArray[np.integer[Any]]
                  ) -> tuple[I64, NDArray[Any], int]:
    """The order by (track, row, start) as a permutation of ``by_start`` (the order by (track,
    start), None: the table's own; ``depth``: each event's row in that order; ``ev_rows``:
    ``shown_rows``), with the
    (track × rows + row) groups in the new order and the rows per track. Each event's track is
    looked up in that order only; the groups are made in the narrowest type that holds them
    (no column of every event as int64 beside the per-track table's)."""
    rows = int(depth.max()) + 1
    dtype = _group_dtype(max(len(plan.track_line), 1) * rows)
    in_order = by_start if ev_rows is None or by_start is None else ev_rows[by_start]
    # A chunk at a time: NumPy gathers through int32 rows by an int64 copy of them.
    track_of_line = plan.track_of_line.astype(dtype)
    group = np.empty(len(depth), dtype)
    for lo in range(0, len(depth), CHUNK):
        lines = table.line[lo:lo + CHUNK] if in_order is None \
            else table.line[in_order[lo:lo + CHUNK]]
        np.take(track_of_line, lines, out=group[lo:lo + CHUNK], mode="clip")
    del in_order
    group *= dtype(rows)
    np.add(group, depth, out=group, casting="unsafe")
    perm = np.asarray(np.argsort(group, kind="stable"), np.int64)
    return perm, group[perm], rows


_STATS_IN_ORDER = np.zeros(0, np.int64)  # ``TraceIndex._stat_order`` where no order is needed


def _ascending(values: NDArray[Any]) -> bool:
    """Whether ``values`` never fall, a block at a time (no column as long as them made)."""
    for lo in range(0, max(len(values) - 1, 0), CHUNK):
        part = values[lo:lo + CHUNK + 1]
        if not bool(np.all(part[1:] >= part[:-1])):
            return False
    return True


def _kept_as_is(array: NDArray[Any]) -> NDArray[Any]:
    return array


def _positions(array: NDArray[np.integer[Any]], top: int) -> Rows:
    """Table rows or index positions (each below ``top``, or -1) as kept: int32 where every
    one fits (the usual case: 12 bytes an event less in the index's three such columns),
    else int64."""
    return np.asarray(array, np.int32 if top < 1 << 31 else np.int64)


def _by_level(seg: I64, level: NDArray[np.int8], skey: I64, bits: int, n_segs: int, m: int,
              in_place: bool = True) -> tuple[I64, Rows]:
    """The index's events by (segment, duration level, start): their keys ``lkey`` (made in
    ``seg``'s place: each event's segment shifted by ``bits``) and their positions ``lpos``.

    Within a segment the positions are in start order (one row holds no two events starting
    together), so the keys with each event's position in place of its time are unique and
    sort in place into that order; they then give the positions and, with the times put
    back, the keys themselves: no permutation of int64s beside the keys, nor a sort's copy
    (at 10 MB, 8 MB of the server's peak). Where a segment, level and position do not fit in
    63 bits (an absurd file), or without ``in_place``, a stable argsort of the keys instead."""
    shift = np.int64(bits)
    time_bits = (np.int64(1) << shift) - np.int64(1)
    pw = max(m - 1, 1).bit_length()
    fits = in_place and max(n_segs, 1).bit_length() + _LEVEL_BITS + pw <= 63
    pmask = (np.int64(1) << np.int64(pw)) - np.int64(1)
    for a in range(0, m, _KEY_BLOCK):
        b = min(a + _KEY_BLOCK, m)
        block = seg[a:b]
        block >>= shift
        block <<= np.int64(_LEVEL_BITS)
        block |= level[a:b].astype(np.int64)
        if fits:
            block <<= np.int64(pw)
            block |= np.arange(a, b, dtype=np.int64)
        else:
            block <<= shift
            block |= skey[a:b] & time_bits
    lpos = np.empty(m, _positions(np.zeros(0, np.int64), m).dtype)
    if not fits:
        lpos[:] = np.argsort(seg, kind="stable")
        lkey = np.empty(m, np.int64)
        for a in range(0, m, _KEY_BLOCK):
            b = min(a + _KEY_BLOCK, m)
            np.take(seg, lpos[a:b], out=lkey[a:b])
        return lkey, lpos
    seg.sort()
    for a in range(0, m, _KEY_BLOCK):
        b = min(a + _KEY_BLOCK, m)
        block = seg[a:b]
        pos = block & pmask
        lpos[a:b] = pos
        block >>= np.int64(pw)
        block <<= shift
        block |= np.take(skey, pos) & time_bits
        del pos
    return seg, lpos


def build(table: EventTable, progress: Callable[[float], None] | None = None,
          plan: TrackPlan | None = None, by_start: I64 | None = None,
          depth: NDArray[np.integer[Any]] | None = None,
          flows: Flows | None = None,
          keep: Callable[[NDArray[Any]], NDArray[Any]] | None = None) -> TraceIndex:
    """Build the trace viewer's index of one host's events; ``progress(share)`` is told how
    far the build has got (``plan``: the table's ``plan_tracks``, ``by_start``: its
    events' ``by_track_and_start`` order, ``depth``: each one's row in that order
    (``TrackTable.layout``, any integer type; with ``by_start`` None, in the table's own
    order, where every event is drawn and the table is in that order), and ``flows``: (sources,
    destinations, kinds) of its flows, when already made). Each array the index keeps is
    handed to ``keep`` as soon as it is made, and what that returns is used from then on
    (``cache.ColumnFile.put``: a mapped copy, so the kept columns are not anonymous memory
    beside the build's temporaries)."""
    report = progress or (lambda share: None)
    put = keep or _kept_as_is
    n = len(table)
    plan = plan or plan_tracks(table)
    counter_line, device_plane, origin = plan.counter_line, plan.device_plane, plan.origin
    n_tracks = len(plan.track_line)

    own_order = by_start is None and depth is not None and len(depth) == n
    laid_out = depth is not None and len(depth) > 0 and (by_start is not None or own_order)
    ev_rows = shown_rows(table, plan) if laid_out else None
    if own_order and ev_rows is not None:
        raise ValueError("a layout in the table's own order needs every event drawn")
    if laid_out and depth is not None:
        # The layout given (the per-track table's: ``depth`` in ``by_start`` order, shared
        # with it, not copied): the order by (track, row, start) made from it as one sort of
        # narrow (track, row) groups, which then give each event's track and row in the new
        # order; every other column is taken from the table straight in that order, one at a
        # time (no column of every event in table order is made).
        report(0.15)
        perm, group, rows = _by_row_given(table, plan, ev_rows, by_start, depth)
        order = perm if by_start is None else by_start[perm]
        del by_start, perm
        report(0.6)
        ev_row = put(_positions(order if ev_rows is None else ev_rows[order], n))
        del ev_rows, order
    else:
        ev_rows, track, rel, edur, lay_end = event_columns(table, plan)
        del edur  # taken again below in the new order
        report(0.15)
        depth, order = _layout(track, rel, lay_end, by_start)
        del by_start, rel, lay_end
        report(0.6)
        ev_row = put(_positions(ev_rows[order], n))
        del ev_rows
        rows = int(depth.max()) + 1 if len(depth) else 1
        group = track[order] * rows + depth[order]
        del track, depth, order
    # Segments: runs of one (track, row) in this order.
    new_seg = np.ones(len(ev_row), bool)
    new_seg[1:] = group[1:] != group[:-1]
    first = np.flatnonzero(new_seg)
    seg_group = group[first].astype(np.int64)
    del group
    seg_track, seg_depth = seg_group // rows, seg_group % rows
    rows_per_track = np.zeros(n_tracks, np.int64)
    np.maximum.at(rows_per_track, seg_track, seg_depth + 1)
    count_per_track = np.bincount(seg_track, weights=np.diff(np.r_[first, len(ev_row)]),
                                  minlength=n_tracks).astype(np.int64)
    seg = np.cumsum(new_seg, dtype=np.int64)
    seg -= 1
    del new_seg
    n_segs = len(first)
    span = plan.span
    bits = plan.bits
    if max(n_segs, 1).bit_length() + _LEVEL_BITS + bits > 62:
        raise _too_wide()
    shift = np.int64(bits)
    seg <<= shift  # the segment part of every key
    # Each kept column made a block of events at a time into its own array (the durations,
    # starts and ends taken from the table per block, never a whole column of them): beside
    # the segments, one column an event at a time. The durations' running sum (kept) and
    # levels first, then the start keys (kept), the end keys (kept) and the level keys, made
    # in the segments' place, both from the start keys' times.
    m = len(ev_row)
    level = np.empty(m, np.int8)
    cumdur = np.empty(m + 1, np.int64)
    cumdur[0] = 0
    for a in range(0, m, _KEY_BLOCK):
        b = min(a + _KEY_BLOCK, m)
        dur = np.asarray(table.duration_ns[ev_row[a:b]], np.int64)
        np.maximum(dur, 0, out=dur)
        level[a:b] = _level(dur)
        np.cumsum(dur, out=cumdur[a + 1:b + 1])
        cumdur[a + 1:b + 1] += cumdur[a]
        del dur
    cumdur = put(cumdur)
    max_level = int(level.max()) if len(level) else 0
    skey = np.empty(m, np.int64)
    for a in range(0, m, _KEY_BLOCK):
        b = min(a + _KEY_BLOCK, m)
        rel = np.asarray(table.start_ns[ev_row[a:b]], np.int64)
        rel -= origin
        np.bitwise_or(seg[a:b], rel, out=skey[a:b])
        del rel
    skey = put(skey)
    time_bits = (np.int64(1) << shift) - np.int64(1)
    ekey = np.empty(m, np.int64)
    for a in range(0, m, _KEY_BLOCK):
        b = min(a + _KEY_BLOCK, m)
        end = np.asarray(table.duration_ns[ev_row[a:b]], np.int64)
        np.maximum(end, 1, out=end)
        end += skey[a:b] & time_bits
        end |= seg[a:b]
        ekey[a:b] = end
        del end
    ekey = put(ekey)
    lkey, lpos = _by_level(seg, level, skey, bits, n_segs, m)
    del seg, level
    lpos = put(lpos)
    lkey = put(lkey)
    pos_of_row = np.full(n, -1, _positions(np.zeros(0, np.int64), m).dtype)
    for a in range(0, m, _KEY_BLOCK):
        b = min(a + _KEY_BLOCK, m)
        pos_of_row[ev_row[a:b]] = np.arange(a, b)
    pos_of_row = put(pos_of_row)
    counters = counter_arrays(table, plan)

    report(0.85)
    src, dst, kind = flows or _flows(table, pos_of_row >= 0, device_plane)

    count_per_track[counters["counter_track"]] = np.diff(counters["counter_off"])
    tracks = [Track(i, plan.track_section[i], table.line_name[li],
                    "counter" if counter_line[li] else "events", int(rows_per_track[i]),
                    int(count_per_track[i])) for i, li in enumerate(plan.track_line)]
    header = {"version": INDEX_VERSION, "origin_ns": origin, "span_ns": span, "bits": bits,
              "max_level": max_level,
              "tracks": [asdict(t) for t in tracks], "sections": sections_of(tracks)}
    arrays: dict[str, NDArray[Any]] = {
        "seg_track": seg_track, "seg_depth": seg_depth,
        "seg_off": np.r_[first, len(ev_row)].astype(np.int64), "ev_row": ev_row,
        "skey": skey, "ekey": ekey, "cumdur": cumdur,
        "lkey": lkey, "lpos": lpos, "pos_of_row": pos_of_row,
        **{name: put(array) for name, array in counters.items()},
        "flow_src": put(np.asarray(src, np.int64)), "flow_dst": put(np.asarray(dst, np.int64)),
        "flow_kind": put(np.asarray(kind, np.int8)),
    }
    return TraceIndex(table, header, arrays)
