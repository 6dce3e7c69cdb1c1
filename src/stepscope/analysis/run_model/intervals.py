"""Interval arithmetic over event columns: nesting and covered time.

Everything here works on whole columns at once, never on one event at a time in Python, so
that it keeps up with profiles of millions of events: by a compiled walk over the columns
where ``_intervals`` is built (it holds the answer and little else), else by NumPy passes
(sorts, cumulative maxima, searchsorted), its twins, which give the same answers.
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np
from numpy.typing import NDArray

from stepscope.native import compiled

I64 = NDArray[np.int64]
Positions = NDArray[np.int32] | I64  # row positions: int32 where asked for and they fit

_CHUNK = 1 << 20  # intervals a search handles at a time (its int64 answers: 8 MB)


def _on_one_axis(group: NDArray[np.integer[Any]], start: I64, end: I64
                 ) -> tuple[I64, I64, I64 | None]:
    """Lay each group's intervals in its own stretch of one common axis.

    Each group is shifted past the previous one, so that one sort handles every group. The
    shift is in time where it fits in int64 (the usual case: cheap, no copy of the times
    beyond the shift); otherwise times are replaced by their rank among all times, which
    keeps their order, and the times by rank are returned to turn ranks back (else None).
    """
    if len(start) == 0:
        return start, end, None
    base = int(start.min())
    width = int(end.max()) - base + 1
    if width * (int(group.max()) + 1) < (1 << 62):
        # One column of offsets, made in place and then turned into the ends: over millions
        # of events each temporary is tens of MB.
        offset = group.astype(np.int64)
        offset *= np.int64(width)
        offset -= np.int64(base)
        shifted_start = start + offset
        offset += end
        return shifted_start, offset, None
    times, rank = np.unique(np.concatenate([start, end]), return_inverse=True)
    rank = rank.astype(np.int64).reshape(-1)
    offset = group.astype(np.int64) * np.int64(len(times) + 1)
    n = len(start)
    return rank[:n] + offset, rank[n:] + offset, times


def _nest(group: NDArray[np.integer[Any]], start: I64, end: I64, want_parents: bool,
          want_self: bool, narrow: bool = False) -> tuple[Positions | None, I64 | None] | None:
    """Parents and self times by the compiled walk (``_intervals``), or None where it is not
    built. It holds the answers and the deepest nesting only: the NumPy passes hold several
    columns as long as the intervals (over millions of events, the analysis's peak)."""
    module = compiled("stepscope.analysis.run_model._intervals")
    if module is None:
        return None
    group = np.ascontiguousarray(group)
    if group.dtype.kind != "i":
        group = group.astype(np.int64)
    start = np.ascontiguousarray(start, dtype=np.int64)
    end = np.ascontiguousarray(end, dtype=np.int64)
    n = len(start)
    # (int32 parents where asked for and every position fits: written so by the walk)
    parent: Positions | None = None
    if want_parents:
        parent = np.empty(n, np.int32) if narrow and n < 1 << 31 else np.empty(n, np.int64)
    own = np.empty(n, np.int64) if want_self else None
    if not module.nest(group, start, end, None, parent, own):
        # Not in nesting order (by group, start, the longer first): sorted so, ties as given.
        later_first = np.maximum(end, start)
        np.negative(later_first, out=later_first)
        order = np.lexsort((later_first, start, group))
        del later_first
        if n < 1 << 31:
            order = order.astype(np.int32)
        module.nest(group, start, end, order, parent, own)
    return parent, own


def parents(group: NDArray[np.integer[Any]], start: I64, end: I64) -> I64:
    """For each interval, the index of its direct parent in the same group (any integer
    column: a table's int32 lines need no int64 copy), or -1.

    Intervals are expected to nest properly within a group (as events on one thread do); an
    interval that only partly overlaps an earlier one is treated as its child, and any part
    of it past the parent's end is ignored by callers that clip.
    """
    found = _nest(group, start, end, True, False) if len(start) else None
    if found is not None and found[0] is not None:
        return cast(I64, found[0])  # int64: not asked for narrow parents
    return _parents_numpy(group, start, end)


def _parents_numpy(group: NDArray[np.integer[Any]], start: I64, end: I64) -> I64:
    """``parents`` by NumPy passes over whole columns (the twin of the compiled walk)."""
    n = len(start)
    if n == 0:
        return np.full(0, -1, dtype=np.int64)
    s, e, _ = _on_one_axis(group, start, np.maximum(end, start))
    # Order: by start, the longer first, so that a parent precedes its children.
    # (-e made in place and undone after: -(-x) is x for every int64, INT64_MIN included.)
    np.negative(e, out=e)
    order = np.lexsort((e, s))
    np.negative(e, out=e)
    s.sort()  # what s[order] is (order sorts by s first), in place: no second column
    e = e[order]
    if n < 1 << 31:  # int32 positions: held through the levels below
        order = order.astype(np.int32)
    # Depth of each interval = intervals opened before it and not yet closed at its start.
    # Closed = end <= start; the running maximum of ends makes partial overlaps behave
    # as nesting rather than producing negative depths. (Computed in place, each
    # temporary dropped once used: over millions of events every column is tens of MB.)
    # Depths and positions in this order fit int32 (a table has < 2**31 events): half the
    # memory of int64 columns of every interval.
    small = np.int32 if n < 1 << 31 else np.int64
    depth: NDArray[np.signedinteger[Any]] = np.arange(n, dtype=small)
    # The searches a chunk of intervals at a time: their int64 answers for every interval
    # were the largest temporaries here.
    ends = np.sort(e)
    for i in range(0, n, _CHUNK):
        depth[i:i + _CHUNK] -= np.searchsorted(ends, s[i:i + _CHUNK], side="right").astype(small)
    del ends
    # Zero-length intervals sharing this start sort after it and count as "closed" above
    # although they come later: take them back out.
    is_zero = e == s
    if is_zero.any():
        zeros_before = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(is_zero, out=zeros_before[1:])
        for i in range(0, n, _CHUNK):
            later_zero = np.searchsorted(s, s[i:i + _CHUNK], side="right")
            # In place (every index is in range: "clip" changes none, and is not buffered).
            np.take(zeros_before, later_zero, out=later_zero, mode="clip")
            later_zero -= zeros_before[i:i + len(later_zero)]
            depth[i:i + len(later_zero)] += later_zero.astype(small)
        del zeros_before, later_zero
    del is_zero
    np.maximum(depth, 0, out=depth)
    # An interval's parent is the last interval before it, in this order, one level up.
    sorted_parent: NDArray[np.signedinteger[Any]] = np.full(n, -1, dtype=small)
    for level in range(1, int(depth.max(initial=0)) + 1):
        children = np.flatnonzero(depth == level)
        candidates = np.flatnonzero(depth == level - 1)
        if len(candidates) == 0 or len(children) == 0:
            continue
        pick = np.searchsorted(candidates, children, side="right") - 1
        valid = pick >= 0
        sorted_parent[children[valid]] = candidates[pick[valid]]
    # Candidates found this way may belong to an earlier group; keep same-group parents only.
    has = np.flatnonzero(sorted_parent >= 0)
    sorted_parent[has[e[sorted_parent[has]] <= s[has]]] = -1
    del has, s, e, depth
    out = np.full(n, -1, dtype=np.int64)
    kept = np.flatnonzero(sorted_parent >= 0)
    out[order[kept]] = order[sorted_parent[kept]]
    return out


def parents_and_self_times(group: NDArray[np.integer[Any]], start: I64, end: I64, *,
                           narrow: bool = False) -> tuple[Positions, I64]:
    """``parents`` and ``self_times`` of the same intervals, by one walk where it is built;
    with ``narrow`` the parents as int32 where every position fits (held beside the other
    columns of millions of calls: not made int64 first)."""
    found = _nest(group, start, end, True, True, narrow) if len(start) else None
    if found is not None and found[0] is not None and found[1] is not None:
        return found[0], found[1]
    parent: Positions = parents(group, start, end)
    if narrow and len(parent) < 1 << 31:
        parent = parent.astype(np.int32)
    return parent, self_times(group, start, end)


def self_times(group: NDArray[np.integer[Any]], start: I64, end: I64) -> I64:
    """Each interval's length minus the (clipped) lengths of its direct children."""
    found = _nest(group, start, end, False, True) if len(start) else None
    if found is not None and found[1] is not None:
        return found[1]
    parent = _parents_numpy(group, start, end)
    duration = end - start  # after the parents: not held through their peak
    np.maximum(duration, 0, out=duration)
    child = np.flatnonzero(parent >= 0)
    if len(child):
        # In place where it can be, each column dropped after its last use.
        up = parent[child]
        del parent
        clipped = np.minimum(end[child], end[up])
        clipped -= start[child]
        del child
        np.maximum(clipped, 0, out=clipped)
        taken = np.bincount(up, weights=clipped, minlength=len(start))
        del up, clipped
        duration -= taken.astype(np.int64)
    np.maximum(duration, 0, out=duration)
    return duration


def merged(group: NDArray[np.integer[Any]], start: I64, end: I64
           ) -> tuple[NDArray[np.integer[Any]], I64, I64]:
    """The union of each group's intervals as disjoint segments: (group, start, end)."""
    module = compiled("stepscope.analysis.run_model._intervals")
    if module is None or not len(start):
        return _merged_numpy(group, start, end)
    dtype = group.dtype
    group = np.ascontiguousarray(group)
    if group.dtype.kind != "i":
        group = group.astype(np.int64)
    start = np.ascontiguousarray(start, dtype=np.int64)
    end = np.ascontiguousarray(end, dtype=np.int64)
    # The non-empty intervals by (group, start), ties as given: one int64 position each, and
    # a walk that holds nothing else (the NumPy passes hold several columns as long).
    keep = end > start
    if keep.all():
        del keep
        order = np.lexsort((start, group))
    else:
        rows = np.flatnonzero(keep)
        del keep
        order = rows[np.lexsort((start[rows], group[rows]))]
        del rows
    count = module.merge(group, start, end, order, None, None, None)
    seg_group, seg_start, seg_end = (np.empty(count, np.int64) for _ in range(3))
    module.merge(group, start, end, order, seg_group, seg_start, seg_end)
    return seg_group.astype(dtype, copy=False), seg_start, seg_end


def _merged_numpy(group: NDArray[np.integer[Any]], start: I64, end: I64
                  ) -> tuple[NDArray[np.integer[Any]], I64, I64]:
    """``merged`` by NumPy passes over whole columns (the twin of the compiled walk)."""
    keep = end > start
    if not keep.all():
        group, start, end = group[keep], start[keep], end[keep]
    del keep
    if len(start) == 0:
        return group, start, end
    s, e, times = _on_one_axis(group, start, end)
    order = np.argsort(s, kind="stable")
    s.sort(kind="stable")  # what s[order] is, in place: no second column
    # The running maximum of the ends, in place: over millions of events each column is
    # tens of MB, and only the segments' bounds are kept.
    e = e[order]
    reach = np.maximum.accumulate(e, out=e)
    del e
    # A new segment begins where an interval starts after everything before it ended.
    begins = np.ones(len(s), dtype=bool)
    np.greater(s[1:], reach[:-1], out=begins[1:])
    first = np.flatnonzero(begins)
    del begins
    last = np.append(first[1:], len(s)) - 1
    at = order[first]
    del order
    seg_group = group[at]
    seg_start, seg_end = start[at], reach[last]
    if times is None:
        shift = s[first] - seg_start  # the offset each group was moved by
        seg_end = seg_end - shift
    else:
        seg_end = times[seg_end - seg_group * np.int64(len(times) + 1)]
    return seg_group, seg_start, seg_end


def covered(group: NDArray[np.integer[Any]], start: I64, end: I64, n_groups: int) -> I64:
    """Per group, the length of the union of its intervals (ns)."""
    seg_group, seg_start, seg_end = merged(group, start, end)
    out = np.zeros(n_groups, dtype=np.int64)
    np.add.at(out, seg_group, seg_end - seg_start)
    return out
