"""Calls walked a block at a time in time order, the calls still open carried from block to
block: each call's parent (so its self time and its call path) without a column of every
call. A Python tracer records millions of calls on one thread; the whole-column nesting
(``intervals.parents_and_self_times``) holds several columns of all of them at once, which
was the run model's peak on such a profile.

A walk needs each line's rows to be one run of ``rows``, in start order (as the tracer
writes them); ``walkable`` says whether they are. Within a block the nesting is
``intervals.parents``' (the longer of two calls that start together is the parent). A block
ends only where the start time moves on, so calls that start together are never split.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from stepscope.analysis.run_model import intervals
from stepscope.model.events import EventTable

I64 = NDArray[np.int64]
Rows = NDArray[np.integer[Any]]

# Calls a block (each block's columns some 90 B a call), and rows checked at a time by
# ``walkable``: 1/64 of the calls, at least these (on a small profile the block's columns were
# a large part of the run model's peak; on a big one, fewer blocks cost less time).
WALK_BLOCK = 1 << 14
_CHECK = 1 << 16
_PARTS = 64


@dataclass(frozen=True)
class CallBlock:
    """One block of a line's calls, the calls still open before it first.

    ``rows``, ``start`` and ``end`` (clipped to the walk's window) are the items: the
    ``carried`` calls open since earlier blocks, then the block's own. ``parent`` is each
    item's parent among the items (-1: none), and ``carry`` the items still open after the
    block (carried into the next one, in that order)."""

    rows: Rows
    start: I64
    end: I64
    parent: I64
    carried: int
    carry: I64
    line: int


def walkable(table: EventTable, rows: Rows) -> bool:
    """Whether each line's rows are one run of ``rows``, in start order."""
    seen: set[int] = set()
    last_line, last_start = -1, np.iinfo(np.int64).min
    check = max(_CHECK, len(rows) // _PARTS)
    for i in range(0, len(rows), check):
        part = rows[i:i + check]
        line = table.line[part].astype(np.int64)
        start = table.start_ns[part]
        changes = np.flatnonzero(line[1:] != line[:-1]) + 1
        firsts = np.concatenate([[0], changes]) if len(part) else changes
        for f in firsts.tolist():
            code = int(line[f])
            if f == 0 and code == last_line:
                continue  # the run goes on from the last check
            if code in seen:
                return False  # a line's rows come back after another line's
            seen.add(code)
        same = line[1:] == line[:-1]
        if bool((same & (start[1:] < start[:-1])).any()):
            return False
        if len(part) and int(line[0]) == last_line and int(start[0]) < last_start:
            return False
        if len(part):
            last_line, last_start = int(line[-1]), int(start[-1])
    return True


def walk(table: EventTable, rows: Rows, t0: int, t1: int,
         block: int | None = None) -> Iterator[CallBlock]:
    """The calls of ``rows`` that overlap [t0, t1) (zero-length ones inside it), clipped to
    it, a block at a time (``walkable`` rows only; ``block`` calls, default: 1/64 of them,
    at least WALK_BLOCK)."""
    n = len(rows)
    block = block or max(WALK_BLOCK, n // _PARTS)
    at = 0
    carried_rows = np.zeros(0, rows.dtype)
    carried_start = np.zeros(0, np.int64)
    carried_end = np.zeros(0, np.int64)
    line = -1
    while at < n:
        first_line = int(table.line[rows[at]])
        if first_line != line:  # a new line: nothing open carries over
            line = first_line
            carried_rows = carried_rows[:0]
            carried_start, carried_end = carried_start[:0], carried_end[:0]
        stop = min(at + block, n)
        part = rows[at:stop]
        same_line = table.line[part] == line
        if not same_line.all():
            stop = at + int(np.argmin(same_line))
            part = rows[at:stop]
        elif stop < n and int(table.line[rows[stop]]) == line:
            # Never between two calls that start together: the longer is the other's parent.
            last = int(table.start_ns[rows[stop - 1]])
            while stop < n and int(table.line[rows[stop]]) == line and \
                    int(table.start_ns[rows[stop]]) == last:
                stop += 1
            part = rows[at:stop]
        at = stop
        start = table.start_ns[part]
        end = start + table.duration_ns[part]  # int64 (the durations may be int32)
        keep = ((start < t1) & (end > t0)) | ((end == start) & (start >= t0) & (start < t1))
        if not keep.all():
            part, start, end = part[keep], start[keep], end[keep]
        np.maximum(start, t0, out=start)
        np.minimum(end, t1, out=end)
        items = np.concatenate([carried_rows, part])
        item_start = np.concatenate([carried_start, start])
        item_end = np.concatenate([carried_end, end])
        parent = intervals.parents(np.zeros(len(items), np.int32), item_start, item_end)
        # Open after the block: what ends after its last start (later calls start no
        # earlier, and one that starts where another ends is not inside it).
        last_start = int(item_start[-1]) if len(item_start) else t0
        carry = np.flatnonzero(item_end > last_start)
        yield CallBlock(items, item_start, item_end, parent, len(carried_rows), carry, line)
        carried_rows, carried_start, carried_end = items[carry], item_start[carry], \
            item_end[carry]


def taken_by_parents(block: CallBlock) -> tuple[I64, I64]:
    """The block's own calls that have a parent: each one's parent (an item) and its time
    clipped to the parent's end, which the parent's self time does not count."""
    own = np.flatnonzero(block.parent[block.carried:] >= 0) + block.carried
    up = block.parent[own]
    taken = np.minimum(block.end[own], block.end[up])
    taken -= block.start[own]
    np.maximum(taken, 0, out=taken)
    return up, taken
