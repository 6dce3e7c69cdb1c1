"""Framework op stats: time per op on the host and on devices, with self time.

Which events are ops depends on who wrote the profile:

* TensorFlow host ops are named ``op_name:OpType``; tf.data's ``Iterator::…`` events are ops
  of type ``Dataset``; events of stepscope's own ``Trace`` are ops named and typed by their
  name (step markers excluded). Memory records (``MemoryAllocation``/``MemoryDeallocation``)
  are not ops, nor are the events of PyTorch DataLoader worker processes (lines named
  ``DataLoader worker N``): they ran in other processes, in parallel with this one. Events
  that stepscope's TensorFlow and JAX bridges merged (``stepscope_bridge`` stat) are ops by
  those frameworks' rules: TensorFlow ops, tf.data stages and XLA ops run on the host (an
  ``hlo_op`` stat), so that an XLA op's self time is the XLA tools' and a runtime wait such
  as ``ThunkExecutor::Execute (wait for completion)`` is not an op.
* PyTorch (Kineto) host ops are ``cpu_op`` and ``user_annotation`` events (step markers
  excluded); device ops are its ``kernel``, ``gpu_memcpy`` and ``gpu_memset`` events. In a
  stepscope profile, events merged from PyTorch's profiler keep that category, which decides
  for them in the same way (CUDA runtime calls and memory records are not ops).
* On XSpace devices, ops come from TensorFlow's derived ``TensorFlow Ops`` line or the XLA
  ``XLA Ops`` line; failing those, from the kernels' ``tf_op``/``hlo_op`` stats (XLA's GPU
  kernels, whose ``tf_op`` is only ``XlaModule:``, from their ``name`` stat); failing
  those, each kernel is its own op.

An op's self time is its time minus that of the ops nested directly inside it on the same
thread or stream; non-op events in between are transparent.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from stepscope.analysis.csv_table import csv_text
from stepscope.analysis.run_model import intervals
from stepscope.analysis.run_model.steps import PROFILER_STEP, device_planes
from stepscope.model import schema
from stepscope.model.events import MISSING, EventTable, typed_equals

I32 = NDArray[np.int32]
I64 = NDArray[np.int64]

HOST, DEVICE = "Host", "Device"
IDLE = "IDLE"

# TensorFlow's "name:Type" full op names (the name part may hold scopes with '/').
_TF_OP = re.compile(r"^(?P<name>[A-Za-z0-9.][\w.\-/>]*):(?P<type>[A-Z_]\w*)$")
# Legacy step stats (RunMetadata) name every node, TensorFlow's own too (_SOURCE, _arg_x_0_0):
# all are ops there, as TensorFlow's timeline draws them.
_TF_NODE = re.compile(r"^(?P<name>[^:]+):(?P<type>[\w.]+)$")
_STEP_STATS_SOURCES = ("step_stats", "tf_timeline")
_DATASET = "Iterator::"
# An HLO instruction as XLA writes it: "%name = shape opcode(operands), attributes".
_HLO = re.compile(r"^%?(?P<name>[^\s=]+) = (?:\([^=]*?\)|\S+) (?P<type>[a-z][\w\-]*)\(")

DERIVED_OP_LINES = ("TensorFlow Ops", "XLA Ops", "Framework Ops")
# Derived device lines that hold no ops of their own.
DERIVED_OTHER_LINES = ("Steps", "XLA Modules", "TensorFlow Name Scope", "Framework Name Scope",
                       "XLA TraceMe", "Overlay", "Source code", "Host Offload Ops",
                       "Async XLA Ops")
KINETO_HOST_OPS = ("cpu_op", "user_annotation")
_XLA_MODULE = "XlaModule"  # tf_op of XLA's GPU kernels: the op is in their name stat
_XLA_OP_NAME = "name"
_HLO_OP = "hlo_op"  # stat of an XLA op's execution event
# Kineto's categories of device kernels, of every backend: CUDA, ROCm, XPU, HPU and
# PrivateUse1 devices write ``kernel``; Meta's MTIA accelerators ``mtia_ccp_events`` (their
# launches, on the host, are ``mtia_runtime``, as XPU's are ``xpu_runtime``).
KINETO_KERNEL_CATEGORIES = ("kernel", "mtia_ccp_events")
KINETO_DEVICE_OPS = {**{c: "Kernel" for c in KINETO_KERNEL_CATEGORIES},
                     "gpu_memcpy": "Memcpy", "gpu_memset": "Memset"}
# Host events that are never ops: zero-length memory records.
_NOT_OP_NAMES = (schema.MEMORY_ALLOCATION, schema.MEMORY_DEALLOCATION)
# Non-host planes that hold no framework ops.
_NOT_OP_PLANES = (schema.PYTHON_TRACER_PLANE, schema.COUNTERS_PLANE, schema.TASK_ENV_PLANE,
                  "/host:metadata")


@dataclass
class OpRow:
    """One op (or op type) aggregated over its occurrences."""

    host_or_device: str
    type: str
    name: str
    occurrences: int
    total_ns: int
    self_ns: int
    self_percent: float = 0.0  # of all self time on its side (host or device)
    cumulative_percent: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        n = max(self.occurrences, 1)
        return {
            "host_or_device": self.host_or_device, "type": self.type, "name": self.name,
            "occurrences": self.occurrences, "total_ms": self.total_ns / 1e6,
            "avg_ms": self.total_ns / 1e6 / n, "self_ms": self.self_ns / 1e6,
            "avg_self_ms": self.self_ns / 1e6 / n, "self_percent": self.self_percent,
            "cumulative_percent": self.cumulative_percent,
        }


@dataclass
class KernelRow:
    """One device kernel (or memcpy/memset) name aggregated over its launches."""

    name: str
    type: str
    op: str  # the framework op that launched it, where the profile says
    occurrences: int
    total_ns: int
    min_ns: int
    max_ns: int

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "type": self.type, "op": self.op,
                "occurrences": self.occurrences, "total_ms": self.total_ns / 1e6,
                "avg_ms": self.total_ns / 1e6 / max(self.occurrences, 1),
                "min_ms": self.min_ns / 1e6, "max_ms": self.max_ns / 1e6}


@dataclass
class OpStats:
    """Op rows (host then device, each by self time, largest first) and kernel rows."""

    rows: list[OpRow]
    kernels: list[KernelRow] = field(default_factory=list)
    include_idle: bool = False

    def side(self, host_or_device: str) -> list[OpRow]:
        return [r for r in self.rows if r.host_or_device == host_or_device]

    def top(self, n: int = 10) -> list[OpRow]:
        """The ``n`` ops with most self time: device ops where there are any, else host ops."""
        rows = [r for r in self.side(DEVICE) if r.type != IDLE] or \
            [r for r in self.side(HOST) if r.type != IDLE]
        return rows[:n]

    def to_dict(self) -> dict[str, Any]:
        return {"include_idle": self.include_idle,
                "ops": [r.to_dict() for r in self.rows],
                "kernels": [k.to_dict() for k in self.kernels]}

    def to_record(self) -> dict[str, Any]:
        """A lossless JSON-ready form (integer nanoseconds), read back by ``from_record``."""
        return {"include_idle": self.include_idle,
                "rows": [[r.host_or_device, r.type, r.name, r.occurrences, r.total_ns,
                          r.self_ns] for r in self.rows],
                "kernels": [[k.name, k.type, k.op, k.occurrences, k.total_ns, k.min_ns,
                             k.max_ns] for k in self.kernels]}

    @classmethod
    def from_record(cls, data: dict[str, Any]) -> OpStats:
        """The inverse of ``to_record``."""
        rows = [OpRow(str(r[0]), str(r[1]), str(r[2]), int(r[3]), int(r[4]), int(r[5]))
                for r in data["rows"]]
        kernels = [KernelRow(str(k[0]), str(k[1]), str(k[2]), int(k[3]), int(k[4]), int(k[5]),
                             int(k[6])) for k in data["kernels"]]
        return cls(ranked(rows), kernels, bool(data["include_idle"]))

    def without_idle(self) -> OpStats:
        """The same stats as computed with ``include_idle=False``."""
        rows = [OpRow(r.host_or_device, r.type, r.name, r.occurrences, r.total_ns, r.self_ns)
                for r in self.rows if not (r.type == IDLE and r.name == IDLE)]
        return OpStats(ranked(rows), list(self.kernels), False)


@dataclass
class OpEvents:
    """Per event of a table: what op it is (-1: none) and the op's name, type and side."""

    op: I32  # index into names/types/sides
    names: list[str]
    types: list[str]
    sides: list[str]
    # Kineto categories, read once here for every analysis of the table (see
    # kineto_categories); empty for XSpace profiles.
    category: I32
    categories: list[str]


def kineto_categories(table: EventTable) -> tuple[I32, list[str]]:
    """Per event: a code into the returned list of Kineto categories (-1: no category)."""
    rows, codes, values = table.text_stat(schema.KINETO_CATEGORY)
    out = np.full(len(table), -1, dtype=np.int32)
    out[rows] = codes
    return out, values


def classify(table: EventTable) -> OpEvents:
    """Decide, for every event, whether it is an op, and which (see the module docstring)."""
    ops: dict[tuple[str, str, str], int] = {}
    op = np.full(len(table), -1, dtype=np.int32)

    def code_of(side: str, op_type: str, name: str) -> int:
        return ops.setdefault((side, op_type, name), len(ops))

    device_plane = device_planes(table)
    no_op_plane = np.array([p.name in _NOT_OP_PLANES for p in table.planes], dtype=bool)
    on_host = ~device_plane[table.plane] & ~no_op_plane[table.plane]
    on_device = device_plane[table.plane]
    category, categories = kineto_categories(table)
    step_marker = typed_equals(table, schema.ROOT_LEVEL, 1)
    marker_names = np.array([bool(PROFILER_STEP.match(n)) for n in table.names], dtype=bool)
    step_marker |= marker_names[table.name] if len(table.names) else step_marker

    stepscope_made = any(schema.ENV_PRODUCER in p.stats for p in table.planes
                         if p.name == schema.TASK_ENV_PLANE)
    tf_op = _TF_NODE if any(p.stats.get(schema.ENV_SOURCE_FORMAT) in _STEP_STATS_SOURCES
                            for p in table.planes if p.name == schema.TASK_ENV_PLANE) else _TF_OP
    if categories and not stepscope_made:  # a PyTorch trace: its categories say what is an op
        for cat_code, cat in enumerate(categories):
            rows = np.flatnonzero(category == cat_code)
            if cat in KINETO_HOST_OPS:
                rows = rows[~step_marker[rows]]
                op_type = "user_annotation" if cat == "user_annotation" else None
                _fill(op, rows, table, lambda n, t=op_type: code_of(HOST, t or n, n))
            elif cat in KINETO_DEVICE_OPS:
                _fill(op, rows, table,
                      lambda n, t=KINETO_DEVICE_OPS[cat]: code_of(DEVICE, t, n))
    else:
        def host_op(name: str, framework_rules: bool = False) -> int:
            if name.startswith(_DATASET):
                return code_of(HOST, "Dataset", name)
            match = tf_op.match(name)
            if match:
                return code_of(HOST, match["type"], match["name"])
            return code_of(HOST, name, name) if stepscope_made and not framework_rules else -1

        # Not ops: memory records (instants), and what DataLoader worker processes did (in
        # other processes, in parallel: the input pipeline analyzer shows it).
        not_op = np.array([n in _NOT_OP_NAMES for n in table.names] + [False], dtype=bool)
        worker = np.array([n.startswith(schema.DATALOADER_WORKER_LINE_PREFIX)
                           for n in table.line_name] + [False], dtype=bool)
        host_rows = np.flatnonzero(on_host & ~step_marker & ~not_op[table.name]
                                   & ~worker[table.line])
        # Events merged from PyTorch's profiler keep their Kineto category: those are ops
        # only when it says so (not the CUDA runtime calls, not the memory records).
        categorised = category[host_rows] >= 0
        # Events merged from TensorFlow's or JAX's profiler are ops by their rules: TensorFlow
        # ops and tf.data stages, and XLA ops run on the host (those with an hlo_op stat,
        # as the XLA tools count them), not the runtime around them (PjRt calls, waits).
        bridged = np.zeros(len(table), dtype=bool)
        bridge_rows, _, _ = table.text_stat(schema.BRIDGE)
        bridged[bridge_rows] = True
        if stepscope_made and bridged.any():
            xla_rows, _, _ = table.text_stat(_HLO_OP)
            is_xla = np.zeros(len(table), dtype=bool)
            is_xla[xla_rows] = True
            theirs = host_rows[~categorised & bridged[host_rows]]
            _fill(op, theirs[is_xla[theirs]], table, lambda n: code_of(HOST, n, n))
            rest = theirs[~is_xla[theirs]]
            _fill(op, rest, table, lambda n: host_op(n, framework_rules=True))
            categorised |= bridged[host_rows]
        _fill(op, host_rows[~categorised], table, host_op)
        for cat_code, cat in enumerate(categories):
            if cat in KINETO_HOST_OPS:
                rows = host_rows[category[host_rows] == cat_code]
                op_type = "user_annotation" if cat == "user_annotation" else None
                _fill(op, rows, table, lambda n, t=op_type: code_of(HOST, t or n, n))
        _classify_xspace_device(table, op, on_device, code_of)

    names = [""] * len(ops)
    types = [""] * len(ops)
    sides = [""] * len(ops)
    for (side, op_type, name), code in ops.items():
        names[code], types[code], sides[code] = name, op_type, side
    return OpEvents(op, names, types, sides, category, categories)


def _fill(op: I32, rows: I64, table: EventTable, code_for: Any) -> None:
    """Set ``op`` for ``rows`` by name code, calling ``code_for(name)`` once per name."""
    if len(rows) == 0:
        return
    # A lookup table by name code, not a sort of the rows (np.unique): names are few, rows
    # millions, and a sort holds several copies of them. Names ascending, as np.unique gave:
    # ``code_for`` numbers new ops in the order it is called.
    name = table.name[rows]
    present = np.zeros(len(table.names), dtype=bool)
    present[name] = True
    lookup = np.full(len(present), -1, dtype=np.int32)
    for c in np.flatnonzero(present).tolist():
        lookup[c] = code_for(table.names[c])
    op[rows] = lookup[name]


def _classify_xspace_device(table: EventTable, op: I32, on_device: NDArray[np.bool_],
                            code_of: Any) -> None:
    """Device ops of an XSpace profile: derived op lines, else kernels by op stat."""
    line_names = np.array(table.line_name, dtype=object)
    derived_ops = np.isin(line_names, DERIVED_OP_LINES)
    derived_other = np.isin(line_names, DERIVED_OTHER_LINES)
    rows_derived = np.flatnonzero(on_device & derived_ops[table.line]) if len(line_names) \
        else np.zeros(0, np.int64)

    def device_op(name: str) -> int:
        tf = _TF_OP.match(name)
        if tf:
            return int(code_of(DEVICE, tf["type"], tf["name"]))
        hlo = _HLO.match(name)
        if hlo:
            return int(code_of(DEVICE, hlo["type"], hlo["name"]))
        return int(code_of(DEVICE, name, name))

    if len(rows_derived):
        _fill(op, rows_derived, table, device_op)
        return
    kernels = np.flatnonzero(on_device & ~derived_other[table.line]) if len(line_names) \
        else np.zeros(0, np.int64)
    if len(kernels) == 0:
        return
    # Kernels name their framework op in a stat (TensorFlow: tf_op; XLA: hlo_op). XLA's GPU
    # kernels say only "XlaModule:" in tf_op, with the op (JAX's op name) in a name stat.
    rows, codes, values = table.text_stat("tf_op")
    module_marker = np.array([v.startswith(_XLA_MODULE) for v in values] + [False], bool)
    xla_kernels = np.intersect1d(kernels, rows[module_marker[codes]])
    if len(xla_kernels):
        rows, codes, values = table.text_stat(_XLA_OP_NAME)
        keep = np.isin(rows, xla_kernels)
        if keep.any():
            mapped = np.array([code_of(DEVICE, v.rsplit("/", 1)[-1], v) for v in values],
                              dtype=np.int32)
            op[rows[keep]] = mapped[codes[keep]]
    for stat in ("tf_op", "hlo_op"):
        rows, codes, values = table.text_stat(stat)
        keep = np.isin(rows, kernels) & (op[rows] < 0)
        if stat == "tf_op":
            keep &= ~np.isin(rows, xla_kernels)
        if keep.any():
            mapped = np.array([device_op(v) for v in values], dtype=np.int32)
            op[rows[keep]] = mapped[codes[keep]]
        kernels = kernels[op[kernels] < 0]
    _fill(op, kernels, table, lambda n: code_of(DEVICE, kernel_type(n), n))


def kernel_type(name: str) -> str:
    """Kernel, Memcpy or Memset, from a device event's name."""
    lowered = name.lower()
    if "memcpy" in lowered or "copybuffer" in lowered:
        return "Memcpy"
    if "memset" in lowered or "fillbuffer" in lowered:
        return "Memset"
    return "Kernel"


def op_stats(table: EventTable, *, include_idle: bool = False,
             events: OpEvents | None = None) -> OpStats:
    """Framework op stats of one host's events."""
    events = events or classify(table)
    rows = np.flatnonzero(events.op >= 0)
    start = table.start_ns[rows]
    end = start + table.duration_ns[rows]
    line = table.line[rows].astype(np.int64)
    self_ns = intervals.self_times(line, start, end)
    n_ops = len(events.names)
    code = events.op[rows]
    count = np.bincount(code, minlength=n_ops)
    total = np.bincount(code, weights=end - start, minlength=n_ops)
    own = np.bincount(code, weights=self_ns, minlength=n_ops)
    out = [OpRow(events.sides[i], events.types[i], events.names[i], int(count[i]),
                 int(total[i]), int(own[i])) for i in range(n_ops) if count[i]]
    if include_idle:
        out.extend(_idle_rows(table, rows, line, start, end, events))
    return OpStats(ranked(out), kernel_rows(table, events), include_idle)


def _idle_rows(table: EventTable, rows: I64, line: I64, start: I64, end: I64,
               events: OpEvents) -> list[OpRow]:
    """Per side: time on lines that run ops when none runs, over the profile's span."""
    if len(table) == 0:
        return []
    span = int((table.start_ns + table.duration_ns).max() - table.start_ns.min())
    busy = intervals.covered(line, start, end, len(table.line_name))
    sides = np.array(events.sides, dtype=object)[events.op[rows]]
    out = []
    for side in (HOST, DEVICE):
        lines = np.unique(line[sides == side])
        if len(lines):
            idle = int(max(span * len(lines) - int(busy[lines].sum()), 0))
            out.append(OpRow(side, IDLE, IDLE, 0, idle, idle))
    return out


def ranked(rows: list[OpRow]) -> list[OpRow]:
    """Host rows then device rows, each by self time, with their percentages filled in."""
    out: list[OpRow] = []
    for side in (HOST, DEVICE):
        mine = sorted((r for r in rows if r.host_or_device == side),
                      key=lambda r: (-r.self_ns, r.type, r.name))
        total = sum(r.self_ns for r in mine) or 1
        running = 0
        for r in mine:
            running += r.self_ns
            r.self_percent = 100.0 * r.self_ns / total
            r.cumulative_percent = 100.0 * running / total
        out.extend(mine)
    return out


def kernel_rows(table: EventTable, events: OpEvents) -> list[KernelRow]:
    """Device kernels, memcpys and memsets by name, with the op that launched them."""
    device = device_planes(table)[table.plane] if len(table.planes) else np.zeros(0, bool)
    line_names = np.array(table.line_name, dtype=object)
    derived = np.isin(line_names, DERIVED_OP_LINES + DERIVED_OTHER_LINES)
    category, categories = events.category, events.categories
    if categories:
        kinds = np.array([c in KINETO_DEVICE_OPS for c in categories] + [False], dtype=bool)
        rows = np.flatnonzero(kinds[category])
    elif len(line_names):
        rows = np.flatnonzero(device & ~derived[table.line])
    else:
        rows = np.zeros(0, np.int64)
    if len(rows) == 0:
        return []
    names, inverse = np.unique(table.name[rows], return_inverse=True)
    inverse = inverse.reshape(-1)
    dur = table.duration_ns[rows]
    count = np.bincount(inverse, minlength=len(names))
    total = np.bincount(inverse, weights=dur, minlength=len(names))
    low = np.full(len(names), np.iinfo(np.int64).max, dtype=np.int64)
    high = np.zeros(len(names), dtype=np.int64)
    np.minimum.at(low, inverse, dur)
    np.maximum.at(high, inverse, dur)
    launched_by = launching_ops(table, events, rows)
    first_op = np.full(len(names), -1, dtype=np.int64)
    has = launched_by >= 0
    first_op[inverse[has]] = launched_by[has]
    out = []
    for i, code in enumerate(names):
        name = table.names[int(code)]
        op = events.names[first_op[i]] if first_op[i] >= 0 else ""
        out.append(KernelRow(name, kernel_type(name), op, int(count[i]), int(total[i]),
                             int(low[i]), int(high[i])))
    out.sort(key=lambda k: (-k.total_ns, k.name))
    return out


def launching_ops(table: EventTable, events: OpEvents, kernels: I64) -> I64:
    """For each kernel row: the framework op it belongs to (op code, -1 when unknown).

    A kernel classified as a framework op names it directly; otherwise the kernel's
    correlation id leads to its launch on the host, and the innermost host op around the
    launch is the one that launched it.
    """
    out = events.op[kernels].astype(np.int64)
    sides = np.array(events.sides + [""], dtype=object)
    out[sides[out] != DEVICE] = -1
    is_kernel_op = np.array([t in ("Kernel", "Memcpy", "Memset") for t in events.types] +
                            [False], dtype=bool)
    out[is_kernel_op[out]] = -1
    corr = table.typed[schema.CORRELATION_ID]
    todo = np.flatnonzero((out < 0) & (corr[kernels] != MISSING))
    if len(todo) == 0:
        return out
    device = device_planes(table)[table.plane]
    launches = np.flatnonzero(~device & (corr != MISSING))
    host_ops = np.flatnonzero((events.op >= 0) & ~device)
    if len(launches) == 0 or len(host_ops) == 0:
        return out
    # The innermost host op holding each launch: among the ops on the launch's line that
    # started before it and end after it, the latest started.
    rows = np.concatenate([host_ops, launches])
    start = table.start_ns[rows]
    end = start + table.duration_ns[rows]
    parent = intervals.parents(table.line[rows].astype(np.int64), start, end)
    launch_parent = parent[len(host_ops):]
    # A launch's parent may be another launch-like non-op; only op parents count.
    op_of_launch = np.where((launch_parent >= 0) & (launch_parent < len(host_ops)),
                            events.op[host_ops[np.clip(launch_parent, 0, len(host_ops) - 1)]],
                            -1)
    order = np.argsort(corr[launches], kind="stable")
    keys, owners = corr[launches][order], op_of_launch[order]
    wanted = corr[kernels[todo]]
    pos = np.clip(np.searchsorted(keys, wanted), 0, len(keys) - 1)
    found = keys[pos] == wanted
    out[todo[found]] = owners[pos[found]]
    return out


def merge(parts: list[OpStats], *, include_idle: bool = False) -> OpStats:
    """Op stats of several hosts summed into one (rows matched by side, type and name)."""
    if len(parts) == 1:
        return parts[0]
    rows: dict[tuple[str, str, str], OpRow] = {}
    kernels: dict[str, KernelRow] = {}
    for part in parts:
        for r in part.rows:
            key = (r.host_or_device, r.type, r.name)
            if key in rows:
                m = rows[key]
                m.occurrences += r.occurrences
                m.total_ns += r.total_ns
                m.self_ns += r.self_ns
            else:
                rows[key] = OpRow(r.host_or_device, r.type, r.name, r.occurrences,
                                  r.total_ns, r.self_ns)
        for k in part.kernels:
            if k.name in kernels:
                m2 = kernels[k.name]
                m2.occurrences += k.occurrences
                m2.total_ns += k.total_ns
                m2.min_ns = min(m2.min_ns, k.min_ns)
                m2.max_ns = max(m2.max_ns, k.max_ns)
            else:
                kernels[k.name] = KernelRow(k.name, k.type, k.op, k.occurrences, k.total_ns,
                                            k.min_ns, k.max_ns)
    merged_kernels = sorted(kernels.values(), key=lambda k: (-k.total_ns, k.name))
    return OpStats(ranked(list(rows.values())), merged_kernels, include_idle)


# The columns of ``stepscope ops --csv`` and of the web page's CSV export.
OP_CSV_COLUMNS = ("host_or_device", "type", "name", "occurrences", "total_ms", "avg_ms",
                  "self_ms", "avg_self_ms", "self_percent", "cumulative_percent")


def ops_csv(stats: OpStats) -> str:
    """Op stats as CSV text with a header row."""
    return csv_text(OP_CSV_COLUMNS, ([d[c] for c in OP_CSV_COLUMNS]
                                     for d in (r.to_dict() for r in stats.rows)))
