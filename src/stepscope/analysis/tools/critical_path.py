"""The critical path of each step across ranks: the chain of host ops, launches, kernels and
collectives that bounded the step's length, followed from rank to rank through collectives.

The path is found backwards from the step's end on each rank (its last device op, or the end
of the step on the host where the host finished later), asking at each link what the work
waited for:

* a **device op** waited for its launch when the launch call ended after the stream's previous
  op (the host was late: the path goes on at the launch call, then on the host before it);
  else for the previous op of its stream, or for an op of another stream of the device that
  ended in the gap (an event or a stream wait); a gap left unexplained is stream idle time;
* the **host** before an instant worked through the top-level ops of the step's thread (those
  become segments) back to the last call that blocked it: a synchronisation (a runtime sync, a
  blocking copy, JAX's ``block_until_ready``: the path goes on at the device op that ended
  last before it returned) or a host-side collective;
* a **collective** (an NCCL/RCCL kernel, or a host-side ``gloo:`` collective) ends when its
  slowest participant arrives. The participants are the same collective (name and order in
  the step) on every rank and device; the one that arrived last is the one whose collective
  took the least time (everyone else waited for it), a measure that no clock offset between
  hosts can bias. The path keeps the collective's own transfer (its shortest duration) and goes
  on at the slowest participant's arrival, on that rank: the slow rank's work thus appears on
  every rank's path, named with the rank.

Segments are clipped to each rank's step window; their shares are of the path's length (the
sum of its segments). Limits: collectives are matched by name and order within the step, as
if every rank ran the same collectives (sub-communicators are not told apart); launches are
matched by correlation id; a host thread other than the step's is followed only through the
launches it made.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from stepscope.analysis.run_model import intervals
from stepscope.analysis.run_model.steps import device_planes
from stepscope.analysis.tools.gpu_ops import COMMUNICATION, KINDS, GpuOps

I64 = NDArray[np.int64]

# Host calls that wait for the device: the runtimes' syncs and blocking copies, and JAX's
# block_until_ready (its wait is inside, at a level the trace may not record).
_SYNC = re.compile(r"(?i)synchronize|^(cuda|hip)Memcpy$|^cuMemcpy[DH]to[DH](_v2)?$"
                   r"|block_until_ready")
_HOST_COLLECTIVE = re.compile(r"^gloo:")
MAX_SEGMENTS = 2_000  # per path, in the JSON (the shares count them all)
MAX_STEPS = 100  # steps in the JSON: the longest, where a run has more
DEPENDENCY_GAP_NS = 2_000  # an op ready this long before it began waited on something
LOOK_BACK = 256  # ops of a device looked at for a cross-stream dependency
NO_STEP = -1  # the step number of the whole profile, for runs without steps


@dataclass(frozen=True)
class Segment:
    """One link of a path: what ran (or waited), on which rank, when (ns on that rank's
    clock)."""

    host: str
    kind: str  # compute, communication, memcpy, memset, launch, launch_delay, host, sync, idle
    name: str
    start_ns: int
    end_ns: int

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns


@dataclass(frozen=True)
class Path:
    """The critical path of one step as seen from one rank (its end)."""

    host: str
    step: int
    step_ns: int  # the step's length on this rank (host window, or to its last device op)
    segments: list[Segment]  # in time order

    @property
    def length_ns(self) -> int:
        return sum(s.duration_ns for s in self.segments)

    def shares(self, key: str) -> dict[str, float]:
        """Percent of the path per host, kind or name (``key``)."""
        total = self.length_ns or 1
        out: dict[str, float] = {}
        for s in self.segments:
            k = getattr(s, key)
            out[k] = out.get(k, 0.0) + 100.0 * s.duration_ns / total
        return {k: round(v, 3) for k, v in sorted(out.items(), key=lambda kv: -kv[1])}

    def to_dict(self, origin: Mapping[str, int]) -> dict[str, Any]:
        total = self.length_ns or 1
        return {
            "host": self.host, "step": self.step, "step_us": round(self.step_ns / 1e3, 3),
            "length_us": round(self.length_ns / 1e3, 3),
            "by_host": self.shares("host"), "by_kind": self.shares("kind"),
            "segments": [{"host": s.host, "kind": s.kind, "name": s.name,
                          "start_us": round((s.start_ns - origin.get(s.host, 0)) / 1e3, 3),
                          "duration_us": round(s.duration_ns / 1e3, 3),
                          "percent": round(100.0 * s.duration_ns / total, 3)}
                         for s in self.segments[:MAX_SEGMENTS]],
            "segments_left_out": max(len(self.segments) - MAX_SEGMENTS, 0),
        }


@dataclass(frozen=True)
class CriticalPaths:
    """Every step's path from every rank, and who bounded each step."""

    paths: list[Path]
    origin: dict[str, int]  # per host: the instant its times are shown from (ns)

    def steps(self) -> list[int]:
        return sorted({p.step for p in self.paths})

    def bounding(self, step: int) -> dict[str, float]:
        """Per host: the mean share (percent) of its work on the step's paths of every rank."""
        mine = [p for p in self.paths if p.step == step]
        out: dict[str, float] = {}
        for p in mine:
            for host, share in p.shares("host").items():
                out[host] = out.get(host, 0.0) + share / len(mine)
        return {k: round(v, 3) for k, v in sorted(out.items(), key=lambda kv: -kv[1])}

    def to_dict(self) -> dict[str, Any]:
        chosen = self.steps()
        if len(chosen) > MAX_STEPS:  # the longest steps: those worth reading
            length = {s: max(p.step_ns for p in self.paths if p.step == s) for s in chosen}
            chosen = sorted(sorted(chosen, key=lambda s: -length[s])[:MAX_STEPS])
        steps = []
        for step in chosen:
            share = self.bounding(step)
            steps.append({"step": step, "by_host": share,
                          "bounded_by": next(iter(share), None),
                          "paths": [p.to_dict(self.origin) for p in self.paths
                                    if p.step == step]})
        return {"steps": steps, "steps_left_out": len(self.steps()) - len(chosen),
                "origin_ns": dict(self.origin)}

    def table(self) -> dict[str, list[Any]]:
        """One row per segment of every path."""
        cols: dict[str, list[Any]] = {k: [] for k in (
            "step", "path_of", "host", "kind", "name", "start_us", "duration_us", "percent")}
        for p in self.paths:
            total = p.length_ns or 1
            for s in p.segments:
                for k, v in (("step", p.step), ("path_of", p.host), ("host", s.host),
                             ("kind", s.kind), ("name", s.name),
                             ("start_us", round((s.start_ns - self.origin.get(s.host, 0))
                                                / 1e3, 3)),
                             ("duration_us", round(s.duration_ns / 1e3, 3)),
                             ("percent", round(100.0 * s.duration_ns / total, 3))):
                    cols[k].append(v)
        return cols


# --------------------------------------------------------------------------- per host


@dataclass
class _Host:
    """What the walk needs of one host, in plain arrays."""

    name: str
    ops: GpuOps
    windows: dict[int, tuple[int, int]]  # step number → (start, end) on the host
    main_line: int
    top_start: I64  # top-level ops of the main line, by start
    top_end: I64
    top_name: list[str]
    sync_end: I64  # blocking calls on the main line, by end
    sync_row: I64
    coll_rows: I64  # host-side collectives of the host (by end)
    coll_end: I64
    by_end: I64  # device ops by end
    end_sorted: I64
    device_by_end: dict[int, tuple[I64, I64]]  # per device: its ops by end, their ends
    step_index: dict[int, int]  # step number → index into the host's steps
    step_last: dict[int, int]  # step index → its device op that ended last


def _ends(ops: GpuOps) -> tuple[I64, I64, dict[int, tuple[I64, I64]], dict[int, int]]:
    order = np.argsort(ops.end, kind="stable")
    per_device = {}
    for device in ops.devices:
        mine = order[ops.device[order] == device]
        per_device[device] = (mine, ops.end[mine])
    stepped = np.flatnonzero(ops.step >= 0)
    by_step = stepped[np.lexsort((ops.end[stepped], ops.step[stepped]))]
    last = {}
    if len(by_step):
        steps = ops.step[by_step]
        ends = np.flatnonzero(np.append(steps[1:] != steps[:-1], True))
        last = {int(steps[i]): int(by_step[i]) for i in ends}
    return order, ops.end[order], per_device, last


def _host(name: str, ops: GpuOps) -> _Host:
    table, steps = ops.table, ops.steps
    windows = {int(n): (int(s), int(e)) for n, s, e in
               zip(steps.step_num.tolist(), steps.start_ns.tolist(), steps.end_ns.tolist(),
                   strict=True)}
    host_plane = ~device_planes(table)
    on_host = host_plane[table.plane] if len(table) else np.zeros(0, bool)
    if not windows and len(table):  # no steps: the whole profile is one
        lo = int(table.start_ns.min())
        hi = int((table.start_ns + table.duration_ns).max())
        windows = {NO_STEP: (lo, hi)}
    main_line = int(steps.lines[0]) if len(steps.lines) else _busiest_line(table, on_host)
    rows = np.flatnonzero((table.line == main_line) & on_host & (table.duration_ns > 0)) \
        if main_line >= 0 else np.zeros(0, np.int64)
    start = table.start_ns[rows]
    end = start + table.duration_ns[rows]
    parent = intervals.parents(np.zeros(len(rows), np.int64), start, end)
    spans = set(zip(steps.start_ns.tolist(), steps.end_ns.tolist(), strict=True))
    marker = np.array([(s, e) in spans for s, e in zip(start.tolist(), end.tolist(),
                                                         strict=True)], bool)
    top = ~marker & ((parent < 0) | (marker[np.maximum(parent, 0)] & (parent >= 0)))
    order = np.argsort(start[top], kind="stable")
    top_rows = rows[top][order]
    sync_code = np.array([bool(_SYNC.search(n)) for n in table.names] + [False], bool)
    coll_code = np.array([bool(_HOST_COLLECTIVE.match(n)) for n in table.names] + [False],
                         bool)
    sync_rows = rows[sync_code[table.name[rows]]]
    sync_end = table.start_ns[sync_rows] + table.duration_ns[sync_rows]
    o = np.argsort(sync_end, kind="stable")
    coll_rows = np.flatnonzero(on_host & coll_code[table.name]) if len(table) else \
        np.zeros(0, np.int64)
    coll_end = table.start_ns[coll_rows] + table.duration_ns[coll_rows]
    c = np.argsort(coll_end, kind="stable")
    by_end, end_sorted, device_by_end, step_last = _ends(ops)
    return _Host(name, ops, windows, main_line, table.start_ns[top_rows],
                 table.start_ns[top_rows] + table.duration_ns[top_rows],
                 [table.names[int(x)] for x in table.name[top_rows]],
                 sync_end[o], sync_rows[o], coll_rows[c], coll_end[c], by_end, end_sorted,
                 device_by_end, {int(n): i for i, n in enumerate(steps.step_num.tolist())},
                 step_last)


def _busiest_line(table: Any, on_host: Any) -> int:
    lines = table.line[on_host]
    if not len(lines):
        return -1
    return int(np.argmax(np.bincount(lines)))


# --------------------------------------------------------------------------- collectives


def _groups(hosts: list[_Host]) -> dict[tuple[str, int], list[tuple[int, str, int, int]]]:
    """Collectives of every host keyed by (kind, id): their group's participants
    (host index, kind, id, duration), where a group is one collective name's n-th call in
    one step on each participant (host and device, or host and thread)."""
    groups: dict[tuple[Any, ...], list[tuple[int, str, int, int]]] = {}
    for h, host in enumerate(hosts):
        ops = host.ops
        step_num = ops.steps.step_num
        comm = np.flatnonzero(ops.kind == COMMUNICATION)
        comm = comm[np.argsort(ops.start[comm], kind="stable")]
        seen: dict[tuple[Any, ...], int] = {}
        for i in comm.tolist():
            s = int(ops.step[i])
            step = int(step_num[s]) if s >= 0 else NO_STEP
            key = (step, ops.name(i), int(ops.device[i]))
            n = seen.get(key, 0)
            seen[key] = n + 1
            groups.setdefault(("d", step, ops.name(i), n), []).append(
                (h, "d", i, int(ops.end[i] - ops.start[i])))
        table = ops.table
        rows = host.coll_rows[np.argsort(table.start_ns[host.coll_rows], kind="stable")]
        seen = {}
        nums = np.array(list(host.windows), np.int64)
        los = np.array([w[0] for w in host.windows.values()], np.int64)
        his = np.array([w[1] for w in host.windows.values()], np.int64)
        by_start = np.argsort(los, kind="stable")
        for r in rows.tolist():
            t = int(table.start_ns[r])
            k = int(np.searchsorted(los[by_start], t, side="right")) - 1
            step = int(nums[by_start[k]]) if k >= 0 and t < his[by_start[k]] else NO_STEP
            name = table.names[int(table.name[r])]
            key = (step, name, int(table.line[r]))
            n = seen.get(key, 0)
            seen[key] = n + 1
            groups.setdefault(("h", step, name, n), []).append(
                (h, "h", r, int(table.duration_ns[r])))
    out: dict[tuple[str, int], list[tuple[int, str, int, int]]] = {}
    for members in groups.values():
        for h, kind, ident, _ in members:
            out[(f"{h}:{kind}", ident)] = members
    return out


# --------------------------------------------------------------------------- the walk


class _Walk:
    def __init__(self, hosts: list[_Host], step: int,
                 groups: dict[tuple[str, int], list[tuple[int, str, int, int]]]) -> None:
        self.hosts = hosts
        self.step = step
        self.groups = groups
        self.segments: list[Segment] = []

    def lower(self, h: int) -> int | None:
        w = self.hosts[h].windows.get(self.step)
        return None if w is None else w[0]

    def emit(self, h: int, kind: str, name: str, start: int, end: int) -> None:
        lo = self.lower(h)
        if lo is not None:
            start = max(start, lo)
        if end > start:
            self.segments.append(Segment(self.hosts[h].name, kind, name, start, end))

    def run(self, h: int) -> Path | None:
        host = self.hosts[h]
        window = host.windows.get(self.step)
        if window is None:
            return None
        lo, hi = window
        ops = host.ops
        if self.step != NO_STEP:
            last = host.step_last.get(host.step_index.get(self.step, -2), -1)
        else:
            mine = np.flatnonzero((ops.start >= lo) & (ops.start < hi))
            last = int(mine[np.argmax(ops.end[mine])]) if len(mine) else -1
        state: tuple[Any, ...]
        end = hi
        if last >= 0 and int(ops.end[last]) > hi:
            end = int(ops.end[last])
            state = ("dev", h, last)
        else:
            state = ("host", h, hi)
        budget = 8 * (len(ops) + len(host.top_start)) + 1000
        while state and budget > 0:
            budget -= 1
            state = getattr(self, "_" + state[0])(*state[1:])
        self.segments.reverse()
        return Path(host.name, self.step, end - lo, _merged(self.segments))

    # A state handler emits its segments and returns the next state (None: done).

    def _dev(self, h: int, i: int) -> tuple[Any, ...] | None:
        ops = self.hosts[h].ops
        lo = self.lower(h)
        if lo is None or int(ops.end[i]) <= lo:
            return None
        if int(ops.kind[i]) == COMMUNICATION:
            members = self.groups.get((f"{h}:d", i), [])
            slow = min(members, key=lambda m: m[3]) if members else None
            own = int(ops.end[i] - ops.start[i])
            if slow is not None and slow[3] < own and (slow[0], slow[2]) != (h, i):
                self.emit(h, "communication", ops.name(i), int(ops.end[i]) - slow[3],
                          int(ops.end[i]))
                return ("devpre", slow[0], slow[2]) if slow[1] == "d" \
                    else ("collpre", slow[0], slow[2])
        self.emit(h, KINDS[int(ops.kind[i])], ops.name(i), int(ops.start[i]), int(ops.end[i]))
        return ("devpre", h, i)

    def _devpre(self, h: int, i: int) -> tuple[Any, ...] | None:
        host = self.hosts[h]
        ops, table = host.ops, host.ops.table
        lo = self.lower(h)
        start = int(ops.start[i])
        if lo is None or start <= lo:
            return None
        prev = i - 1 if i > 0 and ops.device[i - 1] == ops.device[i] \
            and ops.stream[i - 1] == ops.stream[i] else -1
        prev_end = int(ops.end[prev]) if prev >= 0 else None
        launch = int(ops.launch[i])
        call_start = call_end = None
        if launch >= 0:
            call_start = int(table.start_ns[launch])
            call_end = call_start + int(table.duration_ns[launch])
        known = [t for t in (prev_end, call_end) if t is not None]
        if not known:
            return None
        ready = max(known)
        if start - ready > DEPENDENCY_GAP_NS:
            # Ready well before it started: it waited for an op of another stream (an
            # event or a stream wait), the one that ended last before it started.
            other = self._other_stream(h, i, ready, start)
            if other >= 0:
                self.emit(h, "idle", "wait on another stream", int(ops.end[other]), start)
                return ("dev", h, other)
        if call_end is not None and call_start is not None and (prev_end is None
                                                                or call_end >= prev_end):
            self.emit(h, "launch_delay", ops.name(i), call_end, start)
            op = int(ops.launch_op[i])
            call = table.names[int(table.name[launch])]
            self.emit(h, "launch", f"{call} ({ops.op_names[op]})" if op >= 0 else call,
                      call_start, call_end)
            return ("host", h, call_start)
        if prev < 0 or prev_end is None:
            return None
        if start > prev_end:
            self.emit(h, "idle", "stream idle", prev_end, start)
        return ("dev", h, prev)

    def _other_stream(self, h: int, i: int, after: int, until: int) -> int:
        """The op of another stream of op ``i``'s device that ended last in (after, until],
        or -1. Looks back over at most ``LOOK_BACK`` ops of the device by end."""
        ops = self.hosts[h].ops
        order, ends = self.hosts[h].device_by_end[int(ops.device[i])]
        k = int(np.searchsorted(ends, until, side="right")) - 1
        stop = max(k - LOOK_BACK, -1)
        while k > stop and ends[k] > after:
            j = int(order[k])
            if ops.stream[j] != ops.stream[i]:
                return j
            k -= 1
        return -1

    def _host(self, h: int, t: int) -> tuple[Any, ...] | None:
        host = self.hosts[h]
        lo = self.lower(h)
        if lo is None or t <= lo:
            return None
        blocker: tuple[str, int, int] | None = None
        k = int(np.searchsorted(host.sync_end, t, side="right")) - 1
        if k >= 0 and host.sync_end[k] > lo:
            blocker = ("sync", int(host.sync_row[k]), int(host.sync_end[k]))
        k = int(np.searchsorted(host.coll_end, t, side="right")) - 1
        if k >= 0 and host.coll_end[k] > lo and (blocker is None
                                                 or host.coll_end[k] > blocker[2]):
            blocker = ("coll", int(host.coll_rows[k]), int(host.coll_end[k]))
        floor = blocker[2] if blocker else lo
        self._host_ops(h, floor, t)
        if blocker is None:
            return None
        kind, row, end = blocker
        if kind == "coll":
            return ("coll", h, row)
        ops = host.ops
        k = int(np.searchsorted(host.end_sorted, end, side="right")) - 1
        table = ops.table
        sync_name = table.names[int(table.name[row])]
        if k < 0 or host.end_sorted[k] <= lo:
            self.emit(h, "sync", sync_name, int(table.start_ns[row]), end)
            return ("host", h, int(table.start_ns[row]))
        last = int(host.by_end[k])
        self.emit(h, "sync", sync_name, int(ops.end[last]), end)
        return ("dev", h, last)

    def _host_ops(self, h: int, lo: int, hi: int) -> None:
        """Segments for the main thread's top-level ops in [lo, hi), latest first."""
        host = self.hosts[h]
        a = int(np.searchsorted(host.top_end, lo, side="right"))
        b = int(np.searchsorted(host.top_start, hi, side="left"))
        cursor = hi
        for j in range(b - 1, a - 1, -1):
            s, e = int(host.top_start[j]), int(host.top_end[j])
            e = min(e, cursor)
            if e < cursor:
                self.emit(h, "host", "(between ops)", max(e, lo), cursor)
            s = max(s, lo)
            if e > s:
                self.emit(h, "host", host.top_name[j], s, e)
            cursor = min(cursor, s)
            if cursor <= lo:
                return
        if cursor > lo:
            self.emit(h, "host", "(between ops)", lo, cursor)

    def _coll(self, h: int, row: int) -> tuple[Any, ...] | None:
        table = self.hosts[h].ops.table
        start = int(table.start_ns[row])
        end = start + int(table.duration_ns[row])
        name = table.names[int(table.name[row])]
        members = self.groups.get((f"{h}:h", row), [])
        slow = min(members, key=lambda m: m[3]) if members else None
        if slow is not None and slow[3] < end - start and (slow[0], slow[2]) != (h, row):
            self.emit(h, "communication", name, end - slow[3], end)
            return ("collpre", slow[0], slow[2])
        self.emit(h, "communication", name, start, end)
        return ("collpre", h, row)

    def _collpre(self, h: int, ident: int) -> tuple[Any, ...] | None:
        """Before a collective began on host ``h``: its main thread's work."""
        return ("host", h, int(self.hosts[h].ops.table.start_ns[ident]))


def _merged(segments: list[Segment]) -> list[Segment]:
    """Adjacent segments of one host, kind and name joined."""
    out: list[Segment] = []
    for s in segments:
        if out and (out[-1].host, out[-1].kind, out[-1].name) == (s.host, s.kind, s.name) \
                and s.start_ns - out[-1].end_ns <= 0:
            last = out[-1]
            out[-1] = Segment(last.host, last.kind, last.name, last.start_ns,
                              max(last.end_ns, s.end_ns))
        else:
            out.append(s)
    return out


def critical_paths(hosts: Mapping[str, GpuOps]) -> CriticalPaths:
    """The critical path of every step from every host's end of it (see the module
    docstring)."""
    prepared = [_host(name, ops) for name, ops in hosts.items()]
    steps = sorted({n for h in prepared for n in h.windows})
    groups = _groups(prepared)
    paths = []
    for step in steps:
        for h in range(len(prepared)):
            walk = _Walk(prepared, step, groups)
            path = walk.run(h)
            if path is not None and path.segments:
                paths.append(path)
    origin = {h.name: min((lo for lo, _ in h.windows.values()), default=0) for h in prepared}
    return CriticalPaths(paths, origin)
