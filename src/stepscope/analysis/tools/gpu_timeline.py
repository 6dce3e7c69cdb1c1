"""The GPU timeline: where each device's time went, why it sat idle, how much communication
ran under compute, how kernels were launched, how full the streams' queues were, which kernel
sequences repeat, and the chain of work that bounded each step across ranks.

The questions are those of Holistic Trace Analysis (HTA, ``traceinsight``); the figures are
defined as HTA defines them (checked against it in the tests), with these choices:

* **Temporal breakdown** (per device): the span runs from the device's first op start to its
  last op end (HTA's "kernel time"). *Compute* is the union of the compute kernels;
  *communication* the union of the collectives' kernels outside compute; *memory* the union
  of memcpys and memsets outside both; *idle* the span outside every op. Compute + the other
  two is HTA's non-compute time. The same figures per step use the step's window on the host
  (``ProfilerStep#N`` and the like) as the span.
* **Idle time** (per stream): each gap between consecutive ops of a stream is *host wait*
  when the next op's launch call began after the previous op ended (the host had not asked
  for it yet), else *kernel wait* when the gap is shorter than ``kernel_wait_ns`` (back-to-back
  launch overhead), else *other* (a dependency on another stream, an event, a sync). HTA
  documents its threshold as 30 ns but applies it to its whole-microsecond timestamps, so it
  is 30 µs in effect; ours defaults to 30 µs too.
* **Overlap**: the share of the communication union that runs while compute runs, per device
  and per step; the rest is *exposed communication*.
* **Launches**: every op with a launch call: the call's duration (CPU side), the launch delay
  (op start − call end, 0 when negative) and the op's duration. Outliers are calls over
  ``runtime_cutoff_ns`` or delays over ``launch_delay_cutoff_ns`` (HTA's 50 and 100 µs);
  short kernels are compute kernels under ``short_kernel_ns`` (10 µs).
* **Queue length** (per stream): ops launched and not yet started (+1 at the launch call's
  start, −1 at the op's start, as HTA counts); time at or above ``max_queue_length`` (1,024,
  CUDA's per-stream launch queue) is time the host would block on a full queue.
* **Kernel sequences**: runs of ``min_sequence``..``max_sequence`` consecutive ops on a stream,
  counted where they occur at least twice, ranked by the time they take in all.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from stepscope.analysis.tools.busy import Union, union, union_of
from stepscope.analysis.tools.critical_path import CriticalPaths, critical_paths
from stepscope.analysis.tools.gpu_ops import (
    COMMUNICATION,
    COMPUTE,
    KINDS,
    MEMCPY,
    MEMSET,
    GpuOps,
    gpu_ops,
)
from stepscope.errors import StepscopeError
from stepscope.model.run_tables import RunTables

I64 = NDArray[np.int64]

KERNEL_WAIT_NS = 30_000
RUNTIME_CUTOFF_NS = 50_000
LAUNCH_DELAY_CUTOFF_NS = 100_000
SHORT_KERNEL_NS = 10_000
MAX_QUEUE_LENGTH = 1024
MIN_SEQUENCE, MAX_SEQUENCE = 3, 6
TOP_SEQUENCES = 10
TOP_OUTLIERS = 20
QUEUE_POINTS = 400  # points of each stream's queue series (each the most in its bucket)
HISTOGRAM_EDGES_US = (0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 10_000)
IDLE_CATEGORIES = ("host_wait", "kernel_wait", "other")


@dataclass(frozen=True)
class Options:
    """The thresholds (ns) and sizes the tool uses."""

    kernel_wait_ns: int = KERNEL_WAIT_NS
    runtime_cutoff_ns: int = RUNTIME_CUTOFF_NS
    launch_delay_cutoff_ns: int = LAUNCH_DELAY_CUTOFF_NS
    short_kernel_ns: int = SHORT_KERNEL_NS
    max_queue_length: int = MAX_QUEUE_LENGTH
    min_sequence: int = MIN_SEQUENCE
    max_sequence: int = MAX_SEQUENCE
    # HTA's scope: where a host has two steps or more, only the device ops launched by a
    # host call in the trace that began by the end of the last step (HTA leaves the rest
    # out; by default they count: the device ran them).
    hta_scope: bool = False

    def to_dict(self) -> dict[str, int | bool]:
        return dict(self.__dict__)


def _us(ns: float) -> float:
    return round(float(ns) / 1e3, 3)


def _pct(part: float, whole: float) -> float:
    return round(100.0 * part / whole, 3) if whole > 0 else 0.0


@dataclass(frozen=True)
class Breakdown:
    """Time of one device over one window (ns)."""

    span_ns: int
    compute_ns: int
    communication_ns: int  # outside compute
    memory_ns: int  # memcpy and memset outside compute and communication
    idle_ns: int
    comm_total_ns: int  # the whole communication union
    comm_overlap_ns: int  # of it, under compute

    @property
    def exposed_comm_ns(self) -> int:
        return self.comm_total_ns - self.comm_overlap_ns

    def to_dict(self) -> dict[str, Any]:
        s = self.span_ns
        return {
            "span_us": _us(s), "compute_us": _us(self.compute_ns),
            "communication_us": _us(self.communication_ns), "memory_us": _us(self.memory_ns),
            "idle_us": _us(self.idle_ns),
            "compute_percent": _pct(self.compute_ns, s),
            "communication_percent": _pct(self.communication_ns, s),
            "memory_percent": _pct(self.memory_ns, s), "idle_percent": _pct(self.idle_ns, s),
            "comm_total_us": _us(self.comm_total_ns),
            "comm_overlap_us": _us(self.comm_overlap_ns),
            "exposed_comm_us": _us(self.exposed_comm_ns),
            "overlap_percent": (_pct(self.comm_overlap_ns, self.comm_total_ns)
                                if self.comm_total_ns else None),
        }


@dataclass(frozen=True)
class StepBreakdown:
    step: int
    breakdown: Breakdown

    def to_dict(self) -> dict[str, Any]:
        return {"step": self.step, **self.breakdown.to_dict()}


@dataclass(frozen=True)
class StreamIdle:
    """One stream's idle gaps by cause (ns)."""

    stream: str
    ops: int
    host_wait_ns: int
    kernel_wait_ns: int
    other_ns: int

    @property
    def total_ns(self) -> int:
        return self.host_wait_ns + self.kernel_wait_ns + self.other_ns

    def to_dict(self) -> dict[str, Any]:
        t = self.total_ns
        return {"stream": self.stream, "ops": self.ops, "idle_us": _us(t),
                "host_wait_us": _us(self.host_wait_ns),
                "kernel_wait_us": _us(self.kernel_wait_ns), "other_us": _us(self.other_ns),
                "host_wait_percent": _pct(self.host_wait_ns, t),
                "kernel_wait_percent": _pct(self.kernel_wait_ns, t),
                "other_percent": _pct(self.other_ns, t)}


@dataclass(frozen=True)
class Distribution:
    """A duration distribution (ns)."""

    count: int
    total_ns: int
    mean_ns: float
    p50_ns: float
    p90_ns: float
    p99_ns: float
    max_ns: int
    histogram: list[int]  # counts per HISTOGRAM_EDGES_US bucket (the last: above)

    @classmethod
    def of(cls, values: I64) -> Distribution:
        if not len(values):
            return cls(0, 0, 0.0, 0.0, 0.0, 0.0, 0, [0] * len(HISTOGRAM_EDGES_US))
        p50, p90, p99 = np.percentile(values, [50, 90, 99])
        edges = np.array(HISTOGRAM_EDGES_US, np.int64) * 1000
        bucket = np.searchsorted(edges, values, side="right") - 1
        hist = np.bincount(np.clip(bucket, 0, len(edges) - 1), minlength=len(edges))
        return cls(len(values), int(values.sum()), float(values.mean()), float(p50),
                   float(p90), float(p99), int(values.max()), [int(x) for x in hist])

    def to_dict(self) -> dict[str, Any]:
        return {"count": self.count, "total_us": _us(self.total_ns),
                "mean_us": _us(self.mean_ns), "p50_us": _us(self.p50_ns),
                "p90_us": _us(self.p90_ns), "p99_us": _us(self.p99_ns),
                "max_us": _us(self.max_ns), "histogram": self.histogram}


@dataclass(frozen=True)
class LaunchOutlier:
    kernel: str
    op: str  # the framework op that launched it ("" where unknown)
    launch: str  # the launch call (cudaLaunchKernel, ...)
    step: int | None
    cpu_ns: int
    delay_ns: int
    gpu_ns: int
    why: str  # "cpu_duration" or "launch_delay"

    def to_dict(self) -> dict[str, Any]:
        return {"kernel": self.kernel, "op": self.op, "launch": self.launch, "step": self.step,
                "cpu_duration_us": _us(self.cpu_ns), "launch_delay_us": _us(self.delay_ns),
                "gpu_duration_us": _us(self.gpu_ns), "why": self.why}


@dataclass(frozen=True)
class LaunchStats:
    """Kernel launch figures of one device."""

    cpu_duration: Distribution
    launch_delay: Distribution
    gpu_duration: Distribution
    by_call: dict[str, tuple[int, int, int, int]]  # call → (count, cpu, delay, gpu) ns
    short_kernels: int
    short_kernels_ns: int
    kernels: int
    outliers: list[LaunchOutlier]
    cpu_outliers: int
    delay_outliers: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "launches": self.cpu_duration.count,
            "cpu_duration": self.cpu_duration.to_dict(),
            "launch_delay": self.launch_delay.to_dict(),
            "gpu_duration": self.gpu_duration.to_dict(),
            "by_call": [{"call": c, "count": n, "cpu_duration_us": _us(cpu),
                         "launch_delay_us": _us(d), "gpu_duration_us": _us(g)}
                        for c, (n, cpu, d, g) in sorted(self.by_call.items(),
                                                       key=lambda kv: -kv[1][0])],
            "kernels": self.kernels, "short_kernels": self.short_kernels,
            "short_kernels_us": _us(self.short_kernels_ns),
            "short_kernels_percent": _pct(self.short_kernels, self.kernels),
            "cpu_duration_outliers": self.cpu_outliers,
            "launch_delay_outliers": self.delay_outliers,
            "outliers": [o.to_dict() for o in self.outliers],
        }


@dataclass(frozen=True)
class StreamQueue:
    stream: str
    max_length: int
    mean_length: float  # time-weighted, from the first launch to the last op start
    full_ns: int  # time at or above the maximum queue length
    series_us: list[float]  # bucket start times, µs since the device's first op
    series: list[int]  # the most queued in each bucket

    def to_dict(self) -> dict[str, Any]:
        return {"stream": self.stream, "max_length": self.max_length,
                "mean_length": round(self.mean_length, 3),
                "blocked_on_full_queue_us": _us(self.full_ns),
                "series_us": self.series_us, "series": self.series}


@dataclass(frozen=True)
class KernelSequence:
    kernels: list[str]
    count: int
    total_ns: int

    def to_dict(self) -> dict[str, Any]:
        return {"kernels": self.kernels, "length": len(self.kernels), "count": self.count,
                "total_us": _us(self.total_ns), "mean_us": _us(self.total_ns / self.count)}


@dataclass(frozen=True)
class DeviceTimeline:
    """Everything the tool says about one device of one host (one rank)."""

    host: str
    device: str
    rank: int | None
    ops: int
    breakdown: Breakdown
    steps: list[StepBreakdown]
    idle: list[StreamIdle]
    launches: LaunchStats
    queues: list[StreamQueue]
    sequences: list[KernelSequence]

    def idle_total(self) -> StreamIdle:
        return StreamIdle("all", sum(s.ops for s in self.idle),
                          sum(s.host_wait_ns for s in self.idle),
                          sum(s.kernel_wait_ns for s in self.idle),
                          sum(s.other_ns for s in self.idle))

    def to_dict(self) -> dict[str, Any]:
        return {"host": self.host, "device": self.device, "rank": self.rank, "ops": self.ops,
                "breakdown": self.breakdown.to_dict(),
                "steps": [s.to_dict() for s in self.steps],
                "idle": {"total": self.idle_total().to_dict(),
                         "streams": [s.to_dict() for s in self.idle]},
                "launches": self.launches.to_dict(),
                "queues": [q.to_dict() for q in self.queues],
                "sequences": [s.to_dict() for s in self.sequences]}


TABLE_COLUMNS = ("host", "device", "rank", "span_us", "compute_us", "communication_us",
                 "memory_us", "idle_us", "compute_percent", "communication_percent",
                 "memory_percent", "idle_percent", "overlap_percent", "exposed_comm_us",
                 "host_wait_us", "kernel_wait_us", "other_wait_us", "launches",
                 "launch_delay_p50_us", "cpu_launch_p50_us", "short_kernels")


@dataclass(frozen=True)
class GpuTimeline:
    """The GPU timeline of a run: one entry per device with activity, and the critical
    path of each step across ranks."""

    run: str
    devices: list[DeviceTimeline]
    critical_path: CriticalPaths
    options: Options = field(default_factory=Options)
    source: str = "xspace"  # "kineto" for PyTorch traces (advice speaks PyTorch's API)

    def to_dict(self) -> dict[str, Any]:
        """The JSON every interface gives (docs/gpu-timeline.md lists the keys)."""
        return {"run": self.run, "source": self.source, "options": self.options.to_dict(),
                "devices": [d.to_dict() for d in self.devices],
                "critical_path": self.critical_path.to_dict()}

    def table(self) -> dict[str, list[Any]]:
        """One row per device: its breakdown, idle causes and launch medians."""
        cols: dict[str, list[Any]] = {c: [] for c in TABLE_COLUMNS}
        for d in self.devices:
            b = d.breakdown.to_dict()
            idle = d.idle_total()
            values = {"host": d.host, "device": d.device, "rank": d.rank,
                      **{k: b[k] for k in TABLE_COLUMNS if k in b},
                      "host_wait_us": _us(idle.host_wait_ns),
                      "kernel_wait_us": _us(idle.kernel_wait_ns),
                      "other_wait_us": _us(idle.other_ns),
                      "launches": d.launches.cpu_duration.count,
                      "launch_delay_p50_us": _us(d.launches.launch_delay.p50_ns),
                      "cpu_launch_p50_us": _us(d.launches.cpu_duration.p50_ns),
                      "short_kernels": d.launches.short_kernels}
            for c in TABLE_COLUMNS:
                cols[c].append(values[c])
        return cols


# --------------------------------------------------------------------------- figures


def _breakdowns(ops: GpuOps, sel: I64, lo: I64, hi: I64) -> list[Breakdown]:
    """Breakdowns of the ops ``sel`` over each window [lo, hi)."""
    kind, start, end = ops.kind[sel], ops.start[sel], ops.end[sel]

    def u(mask: Any) -> Union:
        return union(start[mask], end[mask])

    comp = u(kind == COMPUTE)
    comm = u(kind == COMMUNICATION)
    mem = u((kind == MEMCPY) | (kind == MEMSET))
    comp_comm = union_of(comp, comm)
    every = union_of(comp_comm, mem)
    c, m = comp.within(lo, hi), comm.within(lo, hi)
    cm, a = comp_comm.within(lo, hi), every.within(lo, hi)
    span = hi - lo
    return [Breakdown(int(span[i]), int(c[i]), int(cm[i] - c[i]), int(a[i] - cm[i]),
                      int(span[i] - a[i]), int(m[i]), int(c[i] + m[i] - cm[i]))
            for i in range(len(lo))]


def _idle(ops: GpuOps, sel: I64, options: Options) -> list[StreamIdle]:
    table = ops.table
    out = []
    for stream in np.unique(ops.stream[sel]):
        mine = sel[ops.stream[sel] == stream]  # sorted by start already
        start, end = ops.start[mine], ops.end[mine]
        gap = start[1:] - end[:-1]
        launch = ops.launch[mine][1:]
        launch_start = np.where(launch >= 0, table.start_ns[np.maximum(launch, 0)],
                                np.iinfo(np.int64).min)
        host = launch_start > end[:-1]
        kernel = ~host & (gap < options.kernel_wait_ns)
        other = ~host & ~kernel
        g = np.maximum(gap, 0)
        out.append(StreamIdle(table.line_name[int(stream)], len(mine), int(g[host].sum()),
                              int(g[kernel].sum()), int(g[other].sum())))
    return out


def _launch_stats(ops: GpuOps, sel: I64, options: Options) -> LaunchStats:
    table = ops.table
    kernels = sel[ops.kind[sel] == COMPUTE]
    gpu_all = ops.end[kernels] - ops.start[kernels]
    short = gpu_all < options.short_kernel_ns
    with_launch = sel[ops.launch[sel] >= 0]
    launch = ops.launch[with_launch]
    cpu = np.asarray(table.duration_ns[launch], np.int64)  # the launches' only
    call_end = table.start_ns[launch] + cpu
    delay = np.maximum(ops.start[with_launch] - call_end, 0)
    gpu = ops.end[with_launch] - ops.start[with_launch]
    by_call: dict[str, tuple[int, int, int, int]] = {}
    codes = table.name[launch]
    for code in np.unique(codes):
        m = codes == code
        by_call[table.names[int(code)]] = (int(m.sum()), int(cpu[m].sum()),
                                           int(delay[m].sum()), int(gpu[m].sum()))
    cpu_out = cpu > options.runtime_cutoff_ns
    delay_out = delay > options.launch_delay_cutoff_ns
    score = np.maximum(cpu / max(options.runtime_cutoff_ns, 1),
                       delay / max(options.launch_delay_cutoff_ns, 1))
    flagged = np.flatnonzero(cpu_out | delay_out)
    flagged = flagged[np.argsort(-score[flagged], kind="stable")][:TOP_OUTLIERS]
    step_num = ops.steps.step_num
    outliers = []
    for i in flagged.tolist():
        k = int(with_launch[i])
        s = int(ops.step[k])
        op = int(ops.launch_op[k])
        outliers.append(LaunchOutlier(
            ops.name(k), ops.op_names[op] if op >= 0 else "",
            table.names[int(table.name[launch[i]])], int(step_num[s]) if s >= 0 else None,
            int(cpu[i]), int(delay[i]), int(gpu[i]),
            "cpu_duration" if cpu_out[i] and cpu[i] / max(options.runtime_cutoff_ns, 1)
            >= delay[i] / max(options.launch_delay_cutoff_ns, 1) else "launch_delay"))
    return LaunchStats(Distribution.of(cpu), Distribution.of(delay), Distribution.of(gpu),
                       by_call, int(short.sum()), int(gpu_all[short].sum()), len(kernels),
                       outliers, int(cpu_out.sum()), int(delay_out.sum()))


def _queues(ops: GpuOps, sel: I64, origin: int, options: Options) -> list[StreamQueue]:
    table = ops.table
    out = []
    for stream in np.unique(ops.stream[sel]):
        mine = sel[(ops.stream[sel] == stream) & (ops.launch[sel] >= 0)]
        if not len(mine):
            continue
        ups = table.start_ns[ops.launch[mine]]
        downs = ops.start[mine]
        t = np.concatenate([ups, downs])
        delta = np.concatenate([np.ones(len(ups), np.int64), -np.ones(len(downs), np.int64)])
        order = np.lexsort((-delta, t))  # at one instant, launches count first
        t, delta = t[order], delta[order]
        length = np.cumsum(delta)
        dt = np.diff(t)
        held = length[:-1]
        total = int(t[-1] - t[0])
        mean = float((held * dt).sum() / total) if total > 0 else 0.0
        full = int(dt[held >= options.max_queue_length].sum())
        # The series: the most queued in each of QUEUE_POINTS buckets.
        if total > 0:
            bucket = np.minimum(((t - t[0]) * QUEUE_POINTS) // max(total, 1), QUEUE_POINTS - 1)
            top = np.full(QUEUE_POINTS, -1, np.int64)
            np.maximum.at(top, bucket, length)
            have = np.flatnonzero(top >= 0)
            edges = t[0] + (have * total) // QUEUE_POINTS
            series_us = [_us(x - origin) for x in edges.tolist()]
            series = [int(x) for x in top[have]]
        else:
            series_us, series = [_us(t[0] - origin)], [int(length.max())]
        out.append(StreamQueue(table.line_name[int(stream)], int(length.max()), mean, full,
                               series_us, series))
    return out


def _sequences(ops: GpuOps, sel: I64, options: Options) -> list[KernelSequence]:
    table = ops.table
    names = table.name[ops.row[sel]].astype(np.int64)
    dur = ops.end[sel] - ops.start[sel]
    stream = ops.stream[sel]
    csum = np.concatenate([[0], np.cumsum(dur)])
    # Window ids grown one op at a time: the id of the run of length L starting at i is the
    # dense rank of (id of its first L - 1 ops, its last op's name), so every length is one
    # sort of integers.
    codes, dense = np.unique(names, return_inverse=True)
    dense = dense.reshape(-1).astype(np.int64)
    width = len(codes) + 1
    ids = dense.copy()
    found: dict[tuple[int, ...], tuple[int, int]] = {}
    for length in range(2, options.max_sequence + 1):
        n = len(names) - length + 1
        if n < 2:
            break
        ids = ids[:n] * width + dense[length - 1:length - 1 + n]
        keys, ids = np.unique(ids, return_inverse=True)
        ids = ids.reshape(-1).astype(np.int64)
        if length < options.min_sequence:
            continue
        start = np.arange(n)
        ok = stream[start] == stream[start + length - 1]
        counts = np.bincount(ids[ok], minlength=len(keys))
        totals = np.bincount(ids[ok], weights=(csum[start + length] - csum[start])[ok],
                             minlength=len(keys))
        repeated = np.flatnonzero(counts >= 2)
        for k in repeated[np.argsort(-totals[repeated], kind="stable")][:TOP_SEQUENCES]:
            first = int(np.flatnonzero(ok & (ids == k))[0])
            seq = tuple(int(x) for x in names[first:first + length])
            found[seq] = (int(counts[k]), int(totals[k]))
    ranked = sorted(found.items(), key=lambda kv: (-kv[1][1], -len(kv[0])))
    out: list[KernelSequence] = []
    chosen: list[tuple[tuple[int, ...], int]] = []
    for seq, (count, total) in ranked:
        # A run inside a longer one already listed, as often, says nothing more.
        if any(count == c and _inside(seq, codes_) for codes_, c in chosen):
            continue
        chosen.append((seq, count))
        out.append(KernelSequence([table.names[c] for c in seq], count, total))
        if len(out) == TOP_SEQUENCES:
            break
    return out


def _inside(seq: tuple[int, ...], codes: tuple[int, ...]) -> bool:
    n = len(seq)
    return any(codes[i:i + n] == seq for i in range(len(codes) - n + 1))


def _rank(ops: GpuOps) -> int | None:
    from stepscope.model import schema

    for p in ops.table.planes:
        if p.name == schema.TASK_ENV_PLANE and schema.ENV_RANK in p.stats:
            try:
                return int(p.stats[schema.ENV_RANK])
            except (TypeError, ValueError):
                return None
    return None


def device_timelines(ops: GpuOps, options: Options) -> list[DeviceTimeline]:
    """The timeline figures of each device of one host."""
    out = []
    rank = _rank(ops)
    steps = ops.steps
    keep = np.ones(len(ops), bool)
    if options.hta_scope and len(steps) >= 2:
        launch_start = ops.table.start_ns[np.maximum(ops.launch, 0)]
        keep = (ops.launch >= 0) & (launch_start <= int(steps.end_ns.max()))
    for device in ops.devices:
        sel = np.flatnonzero((ops.device == device) & keep)
        if not len(sel):
            continue
        lo, hi = int(ops.start[sel].min()), int(ops.end[sel].max())
        whole = _breakdowns(ops, sel, np.array([lo]), np.array([hi]))[0]
        per_step = _breakdowns(ops, sel, steps.start_ns, steps.end_ns) if len(steps) else []
        out.append(DeviceTimeline(
            ops.host, ops.device_label(device), rank, len(sel), whole,
            [StepBreakdown(int(n), b) for n, b in zip(steps.step_num.tolist(), per_step,
                                                        strict=True)],
            _idle(ops, sel, options), _launch_stats(ops, sel, options),
            _queues(ops, sel, lo, options), _sequences(ops, sel, options)))
    return out


def gpu_timeline(run: str, hosts: Mapping[str, GpuOps], options: Options | None = None,
                 host: str | None = None, source: str = "xspace") -> GpuTimeline:
    """The GPU timeline of a run from each host's device ops (``gpu_ops.gpu_ops``); with
    ``host``, the devices and paths of that host only (the paths still cross every rank)."""
    options = options or Options()
    if options.min_sequence < 1 or options.max_sequence < options.min_sequence:
        raise StepscopeError("Kernel sequences need 1 <= min length <= max length; "
                             "pass lengths in that order.")
    if host is not None and host not in hosts:
        raise StepscopeError(f"No host {host!r} in run {run!r} (hosts: "
                             f"{', '.join(hosts) or 'none'}); pass one of those.")
    names = [host] if host is not None else list(hosts)
    devices = [d for name in names for d in device_timelines(hosts[name], options)]
    paths = critical_paths(hosts)
    if host is not None:
        paths = CriticalPaths([p for p in paths.paths if p.host == host], paths.origin)
    return GpuTimeline(run, devices, paths, options, source)


def gpu_timeline_of(profile: RunTables, host: str | None = None,
                    options: Options | None = None) -> GpuTimeline:
    """The GPU timeline of a loaded run (every host's table is read: the critical path
    follows collectives across all of them)."""
    from stepscope.model import schema

    hosts = {name: gpu_ops(name, profile.hosts[name]) for name in profile.hosts}
    kineto = any(p.stats.get(schema.ENV_SOURCE_FORMAT) == "kineto"
                 for ops in hosts.values() for p in ops.table.planes
                 if p.name == schema.TASK_ENV_PLANE)
    return gpu_timeline(profile.run, hosts, options, host, "kineto" if kineto else "xspace")


def has_device_activity(profile: RunTables, host: str | None = None) -> bool:
    """Whether any (or this) host's table holds device ops."""
    from stepscope.analysis.run_model.steps import device_planes

    names = [host] if host is not None else list(profile.hosts)
    for name in names:
        table = profile.hosts[name]
        if len(table) and bool(device_planes(table)[table.plane].any()):
            return True
    return False


__all__ = ["KINDS", "GpuTimeline", "Options", "device_timelines", "gpu_timeline",
           "gpu_timeline_of", "has_device_activity"]
