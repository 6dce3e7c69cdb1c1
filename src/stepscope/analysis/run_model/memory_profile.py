"""The memory profile tool (XProf's ``memory_profile``): per allocator, where memory went.

From a host's ``MemoryEvents`` (see ``memory_events``), for each allocator:

* the summary: allocations and frees, capacity where known, the peak of heap + stack in use
  and when it happened (the last event to reach it, in file order, as XProf picks it), the
  step of the peak, the peak reserved and the stack and fragmentation at the peak;
* the breakdown at the peak, computed as XProf computes it: the allocations made in the
  peak's step up to the peak and not freed by then, grouped by (size, requested size, op,
  region type, data type, shape); what the heap held beyond them is one row, "unused
  preallocated device memory" (memory allocated before the step or the profile), and the
  stack at the peak is another;
* for PyTorch and stepscope's own capture, ``ops``: memory allocated while each op was open
  (``allocated_bytes``, its children's included, frees counted negative) and in the op
  itself (``self_allocated_bytes``), summed over calls — ``key_averages()``'s CPU Mem and
  Self CPU Mem.

``timeline`` downsamples an allocator's events to a chart's width, keeping the lowest and
highest point of each bucket so that peaks survive.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from stepscope.analysis.csv_table import csv_text
from stepscope.analysis.run_model.intervals import parents
from stepscope.analysis.run_model.memory_events import NO_STEP, MemoryEvents, op_rows
from stepscope.model import schema
from stepscope.model.events import MISSING, EventTable

I64 = NDArray[np.int64]

UNMAPPED_XSPACE = "unused preallocated device memory"  # XProf's name for it
UNMAPPED_OTHER = "(allocated before the step or the profile)"
STACK = "stack"
MAX_BREAKDOWN_ROWS = 2000  # rows kept per allocator, heaviest first
MAX_WIDTH = 10_000
_PLAUSIBLE_LEAD_NS = 3600 * 10**9  # the most a profile's start may precede its first event


@dataclass
class BreakdownRow:
    """Identical live allocations at the peak."""

    op: str
    size_bytes: int  # of one allocation
    requested_bytes: int
    occurrences: int
    region_type: str
    data_type: str
    shape: str

    def to_dict(self) -> dict[str, Any]:
        return {"op": self.op, "size_bytes": self.size_bytes,
                "requested_bytes": self.requested_bytes, "occurrences": self.occurrences,
                "region_type": self.region_type, "data_type": self.data_type,
                "shape": self.shape}


@dataclass
class AllocatorProfile:
    """One allocator's summary and breakdown at the peak."""

    name: str
    host: str
    source: str
    capacity_bytes: int | None
    peak_bytes_in_use: int
    peak_heap_bytes: int
    peak_time_ns: int  # since the Unix epoch, where the profile's clock tells
    peak_time_ms: float  # since the profile started
    peak_step: int | None
    num_allocations: int
    num_deallocations: int
    stack_bytes_at_peak: int | None
    peak_reserved_bytes: int | None
    fragmentation_at_peak: float | None
    allocator_peak_bytes: int | None  # the allocator's own lifetime peak, as it last said
    breakdown_at_peak: list[BreakdownRow]
    breakdown_rows_total: int

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "host": self.host, "source": self.source,
                "capacity_bytes": self.capacity_bytes,
                "peak_bytes_in_use": self.peak_bytes_in_use,
                "peak_heap_bytes": self.peak_heap_bytes, "peak_time_ns": self.peak_time_ns,
                "peak_time_ms": self.peak_time_ms, "peak_step": self.peak_step,
                "num_allocations": self.num_allocations,
                "num_deallocations": self.num_deallocations,
                "stack_bytes_at_peak": self.stack_bytes_at_peak,
                "peak_reserved_bytes": self.peak_reserved_bytes,
                "fragmentation_at_peak": self.fragmentation_at_peak,
                "allocator_peak_bytes": self.allocator_peak_bytes,
                "breakdown_at_peak": [r.to_dict() for r in self.breakdown_at_peak],
                "breakdown_rows_total": self.breakdown_rows_total}


@dataclass
class OpMemory:
    """Memory allocated under one op name, summed over its calls."""

    name: str
    allocator: str
    allocated_bytes: int
    self_allocated_bytes: int

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "allocator": self.allocator,
                "allocated_bytes": self.allocated_bytes,
                "self_allocated_bytes": self.self_allocated_bytes}


@dataclass
class HostMemory:
    """One host's memory profile."""

    host: str
    start_ns: int  # time zero of the host's times in ms
    allocators: list[AllocatorProfile]
    ops: list[OpMemory]
    problems: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"host": self.host, "start_ns": self.start_ns,
                "allocators": [a.to_dict() for a in self.allocators],
                "ops": [o.to_dict() for o in self.ops], "problems": dict(self.problems)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> HostMemory:
        allocators = []
        for a in d["allocators"]:
            rows = [BreakdownRow(**r) for r in a["breakdown_at_peak"]]
            allocators.append(AllocatorProfile(**{**a, "breakdown_at_peak": rows}))
        return cls(str(d["host"]), int(d["start_ns"]), allocators,
                   [OpMemory(**o) for o in d["ops"]],
                   {str(k): int(v) for k, v in d["problems"].items()})


def _opt(value: int) -> int | None:
    return None if value == MISSING else int(value)


def _filled_steps(group: I64) -> I64:
    """XProf's step of each event: its group id; an event without one takes the previous
    known id plus one (0 at the start)."""
    known = group != MISSING
    idx = np.where(known, np.arange(len(group)), -1)
    last = np.maximum.accumulate(idx) if len(idx) else idx
    prev = np.where(last >= 0, group[np.maximum(last, 0)], -1)
    # An unknown event takes (last known) + 1; the known ones keep their own.
    out: I64 = np.where(known, group, prev + 1)
    return out


def _matching_allocations(ev: MemoryEvents, sl: slice) -> I64:
    """Per event of ``sl``: for a free, the allocation it frees (the event just before it at
    the same address, when that is an allocation); else -1."""
    address = ev.address[sl]
    n = len(address)
    order = np.lexsort((np.arange(n), address))
    a, alloc = address[order], ev.is_alloc[sl][order]
    prev_same = np.zeros(n, dtype=bool)
    prev_same[1:] = a[1:] == a[:-1]
    match = np.full(n, -1, dtype=np.int64)
    ok = ~alloc & prev_same
    ok[1:] &= alloc[:-1]
    ok[0] = False
    match_sorted = np.where(ok, np.roll(order, 1), -1)
    match[order] = match_sorted
    return match


def allocator_profile(ev: MemoryEvents, index: int, host: str, start_ns: int,
                      label_unmapped: str | None = None) -> AllocatorProfile:
    """One allocator's summary and breakdown at the peak."""
    sl = ev.of(index)
    heap, stack = ev.heap[sl], ev.stack[sl]
    total = heap + stack
    rows = ev.row[sl]
    n = len(total)
    is_alloc = ev.is_alloc[sl]
    peak = int(total.max()) if n else 0
    at_peak = np.flatnonzero(total == peak)
    # The peak XProf reports: the last event (in file order) to reach it.
    p = int(at_peak[np.argmax(rows[at_peak])]) if n else 0
    t = int(ev.time_ns[sl][p]) if n else start_ns
    group = ev.group[sl]
    steps = _filled_steps(group)
    peak_group = int(steps[at_peak[-1]]) if n else 0  # the last in time order, as XProf
    if (group != MISSING).any():
        peak_step: int | None = peak_group
    else:
        step = int(ev.step[sl][p]) if n else NO_STEP
        peak_step = None if step == NO_STEP else step

    # The breakdown: allocations of the peak's step up to the peak, not freed by then.
    # Events without an address cannot be matched: their memory stays unattributed.
    upto = np.flatnonzero((ev.time_ns[sl] <= t) & (steps == peak_group)
                          & (ev.address[sl] != MISSING))
    size, requested = ev.size[sl], ev.requested[sl]
    addr = ev.address[sl][upto]
    order = upto[np.lexsort((upto, addr))]
    a = ev.address[sl][order]
    alloc = is_alloc[order]
    last_of_addr = np.ones(len(order), dtype=bool)
    last_of_addr[:-1] = a[:-1] != a[1:]
    live = order[last_of_addr & alloc]
    prev_alloc = np.zeros(len(order), dtype=bool)
    prev_alloc[1:] = (a[1:] == a[:-1]) & alloc[:-1]
    unmatched_free = order[~alloc & ~prev_alloc]
    alloc_sum = float(size[upto][is_alloc[upto]].sum())
    free_sum = float(size[upto][~is_alloc[upto]].sum())
    unmapped = int(heap[p]) - alloc_sum + free_sum - float(size[unmatched_free].sum()) \
        if n else 0.0
    if label_unmapped is None:
        label_unmapped = UNMAPPED_XSPACE if ev.source[index] == "xspace" else UNMAPPED_OTHER

    texts = ev.texts
    live_cols = np.stack([size[live], requested[live], ev.op[sl][live], ev.region[sl][live],
                          ev.data_type[sl][live], ev.shape[sl][live]], axis=1).astype(np.int64)
    groups, counts = np.unique(live_cols.reshape(-1, 6), axis=0, return_counts=True)
    # Heaviest first; ties by op, region, type and shape in text order (as XProf sorts).
    rank = np.empty(len(texts), dtype=np.int64)
    rank[np.argsort(np.array(texts, dtype=object), kind="stable")] = np.arange(len(texts))
    order = np.lexsort((rank[groups[:, 5]], rank[groups[:, 4]], rank[groups[:, 3]],
                        rank[groups[:, 2]], -groups[:, 1], -groups[:, 0]))
    top = order[:MAX_BREAKDOWN_ROWS]
    keyed = [((int(g[0]), int(g[1]), texts[g[2]], texts[g[3]], texts[g[4]], texts[g[5]]),
              int(c)) for g, c in zip(groups[top].tolist(), counts[top].tolist(), strict=True)]
    specials = []
    # XProf gives these rows TensorFlow's INVALID type; where we are not matching XProf's
    # own answer (PyTorch, stepscope's NumPy tracer), the type is unknown, said as such.
    xprof_like = ev.source[index] == "xspace" and \
        ev.allocators[index] != schema.STEPSCOPE_ALLOCATOR
    no_type, no_shape = ("INVALID", "unknown") if xprof_like else ("", "")
    if unmapped > 0:
        specials.append((int(unmapped), int(unmapped), label_unmapped, "persist/dynamic",
                         no_type, no_shape))
    if n and int(stack[p]) > 0:
        specials.append((int(stack[p]), int(stack[p]), STACK, STACK, no_type, no_shape))
    keyed += [(k, 1) for k in specials]
    keyed.sort(key=lambda kc: (-kc[0][0], -kc[0][1], *kc[0][2:]))
    breakdown = [BreakdownRow(k[2], k[0], k[1], c, k[3], k[4], k[5])
                 for k, c in keyed[:MAX_BREAKDOWN_ROWS]]
    rows_total = len(groups) + len(specials)

    reserved = ev.reserved[sl]
    known_reserved = reserved[reserved != MISSING]
    frag = float(ev.fragmentation[sl][p]) if n else math.nan
    free = int(ev.free[sl][p]) if n else MISSING
    capacity = ev.capacity[index]
    if capacity is None and free != MISSING:
        capacity = int(stack[p]) + int(heap[p]) + free
    own_peak = ev.allocator_peak[sl]
    last_row = int(np.argmax(rows)) if n else 0
    return AllocatorProfile(
        name=ev.allocators[index], host=host, source=ev.source[index],
        capacity_bytes=capacity, peak_bytes_in_use=peak,
        peak_heap_bytes=int(heap[p]) if n else 0, peak_time_ns=t,
        peak_time_ms=(t - start_ns) / 1e6, peak_step=peak_step,
        num_allocations=int(is_alloc.sum()), num_deallocations=int(n - is_alloc.sum()),
        stack_bytes_at_peak=int(stack[p]) if n and stack.any() else None,
        peak_reserved_bytes=int(known_reserved.max()) if len(known_reserved) else None,
        fragmentation_at_peak=None if math.isnan(frag) else round(frag, 6),
        allocator_peak_bytes=_opt(int(own_peak[last_row])) if n else None,
        breakdown_at_peak=breakdown, breakdown_rows_total=rows_total)


def op_memory(table: EventTable, ev: MemoryEvents) -> list[OpMemory]:
    """Memory allocated under each op name, per allocator (PyTorch and stepscope's capture)."""
    has = ev.owner >= 0
    if not has.any():
        return []
    signed = np.where(ev.is_alloc, ev.size, -ev.size)[has]
    owner = ev.owner[has]
    alloc = ev.allocator[has].astype(np.int64)
    ops = np.unique(owner)
    # Every op that may hold an owner: the owners and their ancestors on the same lines.
    cand = op_rows(table, np.unique(table.line[ops]), "kineto" in ev.source)
    parent = parents(table.line[cand].astype(np.int64), table.start_ns[cand],
                     table.start_ns[cand] + table.duration_ns[cand])
    up = np.where(parent >= 0, parent, -1)
    n_alloc = len(ev.allocators)
    self_b = np.zeros((len(cand), n_alloc), dtype=np.float64)
    incl = np.zeros((len(cand), n_alloc), dtype=np.float64)
    owner_pos = np.searchsorted(cand, owner)  # cand is sorted
    ok = owner_pos < len(cand)
    ok[ok] = cand[owner_pos[ok]] == owner[ok]
    np.add.at(self_b, (owner_pos[ok], alloc[ok]), signed[ok])
    cur, a, b = owner_pos[ok], alloc[ok], signed[ok]
    while len(cur):
        np.add.at(incl, (cur, a), b)
        nxt = up[cur]
        keep = nxt >= 0
        cur, a, b = nxt[keep], a[keep], b[keep]
    # Sum per (name, allocator) over calls: every call of a name counts, as key_averages does.
    name = table.name[cand].astype(np.int64)
    out = []
    for j in range(n_alloc):
        with_children = np.bincount(name, weights=incl[:, j], minlength=len(table.names))
        own = np.bincount(name, weights=self_b[:, j], minlength=len(table.names))
        for code in np.flatnonzero((with_children != 0) | (own != 0)).tolist():
            out.append(OpMemory(table.names[code], ev.allocators[j],
                                int(round(with_children[code])), int(round(own[code]))))
    out.sort(key=lambda o: (-o.allocated_bytes, o.name, o.allocator))
    return out


def host_memory(host: str, table: EventTable, ev: MemoryEvents,
                start_ns: int | None) -> HostMemory:
    """One host's memory profile."""
    first = int(table.start_ns.min()) if len(table) else 0
    # The recorded start is used where it is on the events' clock (some JAX profiles give
    # events times from zero and the start as epoch time).
    if start_ns is None or not 0 <= first - start_ns <= _PLAUSIBLE_LEAD_NS:
        start_ns = first
    allocators = [allocator_profile(ev, i, host, start_ns) for i in range(len(ev.allocators))]
    unmatched = _unmatched_frees(ev)
    problems = dict(ev.problems)
    if unmatched:
        problems["frees_without_allocation"] = unmatched
    return HostMemory(host, start_ns, allocators, op_memory(table, ev), problems)


def _unmatched_frees(ev: MemoryEvents) -> int:
    """Frees with no allocation of the same allocator and address before them."""
    key_alloc = ev.allocator.astype(np.int64)
    order = np.lexsort((np.arange(len(ev)), ev.address, key_alloc))
    a, addr, alloc = key_alloc[order], ev.address[order], ev.is_alloc[order]
    prev = np.zeros(len(order), dtype=bool)
    prev[1:] = (a[1:] == a[:-1]) & (addr[1:] == addr[:-1]) & alloc[:-1]
    return int((~alloc & ~prev & (addr != MISSING)).sum())


# -- the timeline -------------------------------------------------------------------------------


def timeline(ev: MemoryEvents, index: int, start_ns: int, width: int,
             from_ns: int | None = None, to_ns: int | None = None) -> dict[str, Any]:
    """An allocator's events in ``[from_ns, to_ns]``, at most ``width`` of them: where there
    are more, the window is cut into ``width // 2`` equal spans of time and each keeps its
    lowest and highest point (heap + stack)."""
    width = max(2, min(int(width), MAX_WIDTH))
    sl = ev.of(index)
    t = ev.time_ns[sl]
    lo = 0 if from_ns is None else int(np.searchsorted(t, from_ns, side="left"))
    hi = len(t) if to_ns is None else int(np.searchsorted(t, to_ns, side="right"))
    picked = np.arange(lo, hi, dtype=np.int64)
    total = ev.heap[sl] + ev.stack[sl]
    if len(picked) > width:
        buckets = width // 2
        t0, t1 = int(t[lo]), int(t[hi - 1])
        span = max(t1 - t0, 1)
        b = ((t[picked] - t0).astype(np.float64) * buckets / span).astype(np.int64)
        b = np.minimum(b, buckets - 1)
        # Within each bucket: lowest first, highest last (ties: the later event).
        order = np.lexsort((picked, total[picked], b))
        sb = b[order]
        first = np.ones(len(order), dtype=bool)
        first[1:] = sb[1:] != sb[:-1]
        last = np.ones(len(order), dtype=bool)
        last[:-1] = sb[:-1] != sb[1:]
        picked = np.unique(picked[order[first | last]])
    match = _matching_allocations(ev, sl)
    # A free shows what it frees: its allocation's op, sizes, region, type and shape.
    meta = np.where(~ev.is_alloc[sl][picked] & (match[picked] >= 0), match[picked], picked)
    texts = ev.texts

    def ints(col: I64) -> list[int | None]:
        return [None if v == MISSING else int(v) for v in col.tolist()]

    frag = ev.fragmentation[sl][picked]
    step_col = ev.step[sl][picked]
    group = ev.group[sl]
    steps = _filled_steps(group)[picked] if (group != MISSING).any() else step_col
    return {
        "allocator": ev.allocators[index],
        "events": int(hi - lo), "points": len(picked),
        "time_ms": [round((v - start_ns) / 1e6, 6) for v in t[picked].tolist()],
        "heap_bytes": ev.heap[sl][picked].tolist(),
        "stack_bytes": ev.stack[sl][picked].tolist(),
        "reserved_bytes": ints(ev.reserved[sl][picked]),
        "free_bytes": ints(ev.free[sl][picked]),
        "fragmentation": [None if math.isnan(v) else round(v, 6) for v in frag.tolist()],
        "activity": ["alloc" if a else "free" for a in ev.is_alloc[sl][picked].tolist()],
        "op": [texts[c] for c in ev.op[sl][meta].tolist()],
        "requested_bytes": ev.requested[sl][meta].tolist(),
        "size_bytes": ev.size[sl][meta].tolist(),
        "region_type": [texts[c] for c in ev.region[sl][meta].tolist()],
        "data_type": [texts[c] for c in ev.data_type[sl][meta].tolist()],
        "shape": [texts[c] for c in ev.shape[sl][meta].tolist()],
        "step": [None if s == NO_STEP else int(s) for s in steps.tolist()],
    }


def breakdown_csv(allocators: list[dict[str, Any]]) -> str:
    """The breakdowns at the peak as CSV, one row per (allocator, row)."""
    return csv_text(["host", "allocator", "op", "size_bytes", "requested_bytes", "occurrences",
                     "region_type", "data_type", "shape"],
                    ([a["host"], a["name"], r["op"], r["size_bytes"], r["requested_bytes"],
                      r["occurrences"], r["region_type"], r["data_type"], r["shape"]]
                     for a in allocators for r in a["breakdown_at_peak"]))


def run_memory(run: str, host: str | None,
               hosts: dict[str, dict[str, Any] | None]) -> dict[str, Any]:
    """The memory profile's JSON form over ``hosts`` (host name → its ``HostMemory`` form,
    None for a host without memory activity): allocators and ops of every host, host by
    host, and each host's problems with its data."""
    allocators: list[dict[str, Any]] = []
    ops: list[dict[str, Any]] = []
    problems: dict[str, dict[str, int]] = {}
    starts: dict[str, int] = {}
    for name, part in hosts.items():
        if part is None:
            continue
        allocators.extend(part["allocators"])
        ops.extend({**o, "host": name} for o in part["ops"])
        starts[name] = int(part["start_ns"])
        if part["problems"]:
            problems[name] = dict(part["problems"])
    return {"run": run, "host": host, "has_memory": bool(allocators),
            "allocators": allocators, "ops": ops, "problems": problems,
            "start_ns": starts}
