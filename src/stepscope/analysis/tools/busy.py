"""Busy time of sets of intervals: unions, and how much of each window they cover.

The figures of the GPU timeline are lengths of unions (compute, communication, all work) and
of their intersections, over the whole span and over each step's window. A union is kept as
disjoint sorted segments with the running covered length, so that the length covered before
any instant is one binary search, and a window's share is the difference of two of them.
|A ∩ B| is |A| + |B| − |A ∪ B|: no intersection is ever built.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

I64 = NDArray[np.int64]


@dataclass(frozen=True)
class Union:
    """Disjoint segments [start, end), sorted, and the covered length before each start."""

    start: I64
    end: I64
    before: I64

    @property
    def length(self) -> int:
        return int(self.before[-1] + self.end[-1] - self.start[-1]) if len(self.start) else 0

    def covered_before(self, t: I64) -> I64:
        """Per instant: the length of the union before it."""
        t = np.asarray(t, np.int64)
        if not len(self.start):
            return np.zeros(len(t), np.int64)
        i = np.searchsorted(self.start, t, side="right") - 1
        j = np.maximum(i, 0)
        inside = np.clip(t - self.start[j], 0, self.end[j] - self.start[j])
        out: I64 = np.where(i >= 0, self.before[j] + inside, 0)
        return out

    def within(self, lo: I64, hi: I64) -> I64:
        """Per window [lo, hi): the length of the union inside it."""
        out: I64 = self.covered_before(hi) - self.covered_before(lo)
        return np.maximum(out, 0)


def union(start: I64, end: I64) -> Union:
    """The union of intervals [start, end) (empty ones ignored)."""
    keep = end > start
    s, e = np.asarray(start[keep], np.int64), np.asarray(end[keep], np.int64)
    if not len(s):
        empty = np.zeros(0, np.int64)
        return Union(empty, empty, empty)
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    reach = np.maximum.accumulate(e)
    begins = np.ones(len(s), bool)
    begins[1:] = s[1:] > reach[:-1]
    first = np.flatnonzero(begins)
    last = np.append(first[1:], len(s)) - 1
    seg_s, seg_e = s[first], reach[last]
    lengths = seg_e - seg_s
    before = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    return Union(seg_s, seg_e, before)


def union_of(*parts: Union) -> Union:
    """The union of several unions."""
    return union(np.concatenate([p.start for p in parts]),
                 np.concatenate([p.end for p in parts]))
