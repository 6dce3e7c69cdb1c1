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
* In XSpace files that stepscope did not write, a host event that is no op by its name but
  carries a ``tf_op`` stat is that op, read as XProf reads it (``tf_op_names``): XLA's kernel
  launches (``XlaModule:``), and memory records, which name the op that allocated (one more
  occurrence of it: host ops are keyed by name, as XProf keys them).
* On XSpace devices, ops come from TensorFlow's derived ``TensorFlow Ops`` line or the XLA
  ``XLA Ops`` line (TPU: keyed by program and symbol, timed on the device's clock, as
  XProf); failing those, XLA's GPU kernels are the ops their HLO instruction's metadata
  names, as XProf counts them (``_xla_device_ops``), where the file holds its HLO; else from
  the kernels' ``tf_op``/``hlo_op`` stats (XLA's GPU kernels, whose ``tf_op`` is only
  ``XlaModule:``, from their ``name`` stat); failing those, each kernel is its own op.

An op's self time is its time minus that of the ops nested directly inside it on the same
thread or stream; non-op events in between are transparent. (An XLA kernel's self time is its
time, and an XLA op occurs as often as its most frequent instruction, as in XProf.)

PyTorch's host ops are counted as ``key_averages()`` counts them, its figure being the one
PyTorch users know (``_torch_tree``): the CUDA runtime and driver calls inside an op are its
children (not its self time), and an op nested alone in an op of the same name (``aten::div``
redispatching to ``aten::div`` on CUDA) is one occurrence of it, its self time the outer's.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from stepscope.analysis.csv_table import csv_text
from stepscope.analysis.run_model import intervals
from stepscope.analysis.run_model.steps import PROFILER_STEP, device_planes
from stepscope.analysis.run_model.tf_op_names import hlo_provenance, parse_op_fullname
from stepscope.model import schema
from stepscope.model.events import (
    MISSING,
    Codes,
    EventTable,
    narrow_codes,
    rows_where,
    typed_equals,
)

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
# Kineto's host calls into a device's runtime or driver (and its own buffer work): no ops,
# but children of the op around them in PyTorch's own tree and rows of their own, as
# key_averages() has them.
KINETO_HOST_CALLS = ("cuda_runtime", "cuda_driver", "privateuse1_runtime", "privateuse1_driver",
                     "xpu_runtime", "mtia_runtime", "overhead")
_XLA_MODULE = "XlaModule"  # tf_op of XLA's GPU kernels: the op is in their name stat
_XLA_OP_NAME = "name"
_HLO_OP = "hlo_op"  # stat of an XLA op's execution event
XLA_PROGRAM_ID = "program_id"  # stat of an XLA kernel: the id of its program (HLO module)
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

    op: Codes  # index into names/types/sides (int16 where every op's fits: narrow_codes)
    names: list[str]
    types: list[str]
    sides: list[str]
    # Kineto categories, read once here for every analysis of the table (see
    # kineto_categories); empty for XSpace profiles.
    category: I32
    categories: list[str]
    # XLA device ops counted as XProf counts them (see _xla_device_ops): per event, its HLO
    # instruction (-1: not an XLA op counted so), and whether it starts an occurrence (an
    # instruction's kernels in a row, in one step group, are one occurrence). None: no event is.
    hlo_group: I32 | None = None
    starts: NDArray[np.bool_] | None = None
    # Where XProf times XLA ops on the device's clock (TPU: device_offset_ps and
    # device_duration_ps stats), (start, duration) in picoseconds per event (others: the
    # event's, from the table's first start); None: none is.
    # A TPU op's self time is its time less its children's; a GPU kernel's is its time.
    device_clock: tuple[I64, I64] | None = None
    # IDLE rows as XProf computes them (XSpace files stepscope did not write): per host
    # thread, its ops' span less their self time; per device, its events' span less its ops'.
    xprof_idle: bool = False


def kineto_categories(table: EventTable) -> tuple[I32, list[str]]:
    """Per event: a code into the returned list of Kineto categories (-1: no category)."""
    rows, codes, values = table.text_stat(schema.KINETO_CATEGORY)
    if not len(rows):
        # None has one (XSpace files): -1 for every event as a read-only view of one value,
        # not a column of millions of them held with the classification.
        none: I32 = np.broadcast_to(np.int32(-1), (len(table),))
        return none, values
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

    xla: _XlaCounting = (None, None, None)
    stepscope_made = any(schema.ENV_PRODUCER in p.stats for p in table.planes
                         if p.name == schema.TASK_ENV_PLANE)
    step_stats = any(p.stats.get(schema.ENV_SOURCE_FORMAT) in _STEP_STATS_SOURCES
                     for p in table.planes if p.name == schema.TASK_ENV_PLANE)
    tf_op = _TF_NODE if step_stats else _TF_OP
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
        # A flag an event (1 byte), not a row an event (4): held through what follows.
        host = on_host
        del on_host
        host &= ~step_marker
        host &= ~not_op[table.name]
        host &= ~worker[table.line]
        # Events merged from PyTorch's profiler keep their Kineto category: those are ops
        # only when it says so (not the CUDA runtime calls, not the memory records).
        # (No categories, as in XSpace files: none is, and no flag an event says so.)
        categorised = host & (category >= 0) if categories else None
        # Events merged from TensorFlow's or JAX's profiler are ops by their rules: TensorFlow
        # ops and tf.data stages, and XLA ops run on the host (those with an hlo_op stat,
        # as the XLA tools count them), not the runtime around them (PjRt calls, waits).
        bridge_rows, _, _ = table.text_stat(schema.BRIDGE)
        if stepscope_made and len(bridge_rows):
            bridged = np.zeros(len(table), dtype=bool)
            bridged[bridge_rows] = True
            bridged &= host
            xla_rows, _, _ = table.text_stat(_HLO_OP)
            is_xla = np.zeros(len(table), dtype=bool)
            is_xla[xla_rows] = True
            theirs = bridged & ~categorised if categorised is not None else bridged.copy()
            _fill(op, theirs & is_xla, table, lambda n: code_of(HOST, n, n))
            _fill(op, theirs & ~is_xla, table, lambda n: host_op(n, framework_rules=True))
            del theirs, is_xla
            categorised = bridged if categorised is None else categorised | bridged
            del bridged
        # Usually nothing is (TensorFlow, JAX): then no second flag an event.
        _fill(op, host & ~categorised if categorised is not None and categorised.any()
              else host, table, host_op)
        del categorised
        for cat_code, cat in enumerate(categories):
            if cat in KINETO_HOST_OPS:
                op_type = "user_annotation" if cat == "user_annotation" else None
                _fill(op, host & (category == cat_code), table,
                      lambda n, t=op_type: code_of(HOST, t or n, n))
        if not stepscope_made and not step_stats:
            # XProf's rule for its XSpace files; a legacy timeline's reference is TensorFlow's
            # own timeline, one op per node (its memory records are no more occurrences).
            _tf_op_stat_host_ops(table, op, host, code_of, ops)
        del host
        if categories:
            # Device events that a bridge merged keep Kineto's category (the PyTorch and CUDA
            # bridges): ops where it says so, as in PyTorch's own trace file (not its GPU
            # user annotations); the rest of the devices by XSpace's rules.
            for cat_code, cat in enumerate(categories):
                if cat in KINETO_DEVICE_OPS:
                    _fill(op, on_device & (category == cat_code), table,
                          lambda n, t=KINETO_DEVICE_OPS[cat]: code_of(DEVICE, t, n))
            on_device = on_device & (category < 0)
        xla = _classify_xspace_device(table, op, on_device, code_of)

    names = [""] * len(ops)
    types = [""] * len(ops)
    sides = [""] * len(ops)
    for (side, op_type, name), code in ops.items():
        names[code], types[code], sides[code] = name, op_type, side
    # Int16 where every op's code fits: the column is held through the run model's passes.
    return OpEvents(narrow_codes(op, len(ops)), names, types, sides, category, categories,
                    *xla, xprof_idle=not categories and not stepscope_made)


def _tf_op_stat_host_ops(table: EventTable, op: I32, host: NDArray[np.bool_], code_of: Any,
                         ops: dict[tuple[str, str, str], int]) -> None:
    """Host events that are no op by name but carry a ``tf_op`` stat are that op, as XProf
    counts them (XLA's kernel launches, ``XlaModule:``; memory records, whatever they say).
    ``host`` flags the host events that may be ops; it is changed (the caller's last use)."""
    rows, codes, values = table.text_stat("tf_op")
    if len(rows) == 0:
        return
    on_host = host
    # Memory records are no op by our name rule, but XProf reads their tf_op stat too.
    not_op = np.array([n in _NOT_OP_NAMES for n in table.names], dtype=bool)
    on_host |= not_op[table.name] & ~device_planes(table)[table.plane] if len(table.names) \
        else on_host
    keep = on_host[rows] & (op[rows] < 0) & ~_derived_line(table)[table.line[rows]]
    if not keep.any():
        return
    by_name = {name: code for (side, _, name), code in ops.items() if side == HOST}
    mapped = np.array([_host_stat_op(v, code_of, by_name) for v in values] + [-1],
                      dtype=np.int32)
    op[rows[keep]] = mapped[codes[keep]]


def _host_stat_op(value: str, code_of: Any, by_name: dict[str, int]) -> int:
    """The host op a tf_op stat names: XProf keys host ops by name alone, so a name already
    an op (a TensorFlow op whose memory records name it) is that op, whatever the type."""
    if not value:
        return -1
    parsed = parse_op_fullname(value)
    if parsed.name in by_name:
        return by_name[parsed.name]
    code = int(code_of(HOST, parsed.type, parsed.name))
    by_name[parsed.name] = code
    return code


def _derived_line(table: EventTable) -> NDArray[np.bool_]:
    """Per line: whether XProf derived it (a line of ops, steps or scopes made from others)."""
    lines = np.array(table.line_name, dtype=object)
    return np.isin(lines, DERIVED_OP_LINES + DERIVED_OTHER_LINES) if len(lines) \
        else np.zeros(0, dtype=bool)


_FILL_CHUNK = 1 << 20


def _fill(op: I32, rows: NDArray[np.integer[Any]] | NDArray[np.bool_], table: EventTable,
          code_for: Any) -> None:
    """Set ``op`` for ``rows`` (rows, or a flag an event) by name code, calling
    ``code_for(name)`` once per name."""
    if len(rows) == 0:
        return
    flags = rows.dtype == np.bool_

    def names(i: int) -> Any:
        """The name codes of the chunk of rows from ``i``."""
        if flags:
            return table.name[i:i + _FILL_CHUNK][rows[i:i + _FILL_CHUNK]]
        return table.name[rows[i:i + _FILL_CHUNK]]

    # A lookup table by name code, not a sort of the rows (np.unique): names are few, rows
    # millions, and a sort holds several copies of them. Names ascending, as np.unique gave:
    # ``code_for`` numbers new ops in the order it is called.
    # A chunk of rows at a time: no name and code column of every row at once.
    present = np.zeros(len(table.names), dtype=bool)
    for i in range(0, len(rows), _FILL_CHUNK):
        present[names(i)] = True
    lookup = np.full(len(present), -1, dtype=np.int32)
    for c in np.flatnonzero(present).tolist():
        lookup[c] = code_for(table.names[c])
    for i in range(0, len(rows), _FILL_CHUNK):
        if flags:
            op[i:i + _FILL_CHUNK][rows[i:i + _FILL_CHUNK]] = lookup[names(i)]
        else:
            op[rows[i:i + _FILL_CHUNK]] = lookup[names(i)]


def _classify_xspace_device(table: EventTable, op: I32, on_device: NDArray[np.bool_],
                            code_of: Any) -> _XlaCounting:
    """Device ops of an XSpace profile: derived op lines, else kernels by op stat; the XLA
    device ops' instruction groups where XProf's rule counts them (see _xla_device_ops)."""
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
        return _tpu_xla_ops(table, op, rows_derived, code_of)
    kernels = np.flatnonzero(on_device & ~derived_other[table.line]) if len(line_names) \
        else np.zeros(0, np.int64)
    if len(kernels) == 0:
        return None, None, None
    xla = _xla_device_ops(table, op, kernels, code_of)
    if xla is not None:
        return (*xla, None)
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
    return None, None, None


def _tpu_xla_ops(table: EventTable, op: I32, rows: I64, code_of: Any) -> _XlaCounting:
    """The ops of "XLA Ops" lines whose event metadata name their program and symbol (TPU)
    as XProf counts them: each execution of a (program, symbol) one occurrence, symbol 0 or
    none no op; the op its metadata's ``tf_op`` (parsed), else the op itself under its
    display name, of type ``Unknown``; times on the device's clock."""
    facts = {}
    for index, plane in enumerate(table.planes):
        text = plane.stats.get(schema.XLA_OP_METADATA)
        if isinstance(text, str):
            try:
                data = json.loads(text)
            except ValueError:
                continue
            if isinstance(data, dict):
                facts[index] = data
    if not facts:
        return None, None, None
    lines = np.array([n == _XLA_OPS_LINE for n in table.line_name], dtype=bool)
    with_facts = np.zeros(len(table.planes), dtype=bool)
    with_facts[list(facts)] = True
    rows = rows[lines[table.line[rows]] & with_facts[table.plane[rows]]]
    if len(rows) == 0:
        return None, None, None
    op[rows] = -1
    group = np.full(len(table), -1, np.int32)
    groups: dict[tuple[str, str], int] = {}
    key = table.plane[rows].astype(np.int64) * (len(table.names) + 1) + table.name[rows]
    distinct, inverse = np.unique(key, return_inverse=True)
    op_of = np.full(len(distinct), -1, np.int32)
    group_of = np.full(len(distinct), -1, np.int32)
    for i, k in enumerate(distinct.tolist()):
        plane, name = divmod(k, len(table.names) + 1)
        fact = facts[plane].get(table.names[name])
        if not isinstance(fact, list) or len(fact) != 4 or str(fact[3]) in ("", "0"):
            continue
        display, tf_op, program, symbol = (str(f) for f in fact)
        parsed = parse_op_fullname(tf_op) if tf_op else None
        if parsed is not None:
            op_of[i] = code_of(DEVICE, parsed.type or "Unknown", parsed.name)
        else:
            op_of[i] = code_of(DEVICE, "Unknown", display or table.names[name])
        group_of[i] = groups.setdefault((program, symbol), len(groups))
    inverse = inverse.reshape(-1)
    op[rows] = op_of[inverse]
    group[rows] = group_of[inverse]
    starts = group >= 0
    # Picoseconds, as XProf sums them (a TPU op may last a few), from the table's first start.
    start = (table.start_ns.astype(np.int64) - int(table.start_ns.min())) * 1000
    duration = table.duration_ns.astype(np.int64) * 1000
    offset_rows, offsets = table.int_stat(DEVICE_OFFSET_PS)
    dur_rows, durations = table.int_stat(DEVICE_DURATION_PS)
    on_clock = np.zeros(len(table), dtype=bool)
    on_clock[rows] = True
    keep = on_clock[offset_rows]
    start[offset_rows[keep]] = offsets[keep]
    keep = on_clock[dur_rows]
    duration[dur_rows[keep]] = durations[keep]
    return group, starts, (start, duration)


# Per event: (instruction group, starts an occurrence, device clock); see OpEvents.
_XlaCounting = tuple[I32 | None, NDArray[np.bool_] | None, tuple[I64, I64] | None]
_XLA_OPS_LINE = "XLA Ops"
_HOST_THREADS_PLANE = "/host:CPU"
DEVICE_OFFSET_PS = "device_offset_ps"
DEVICE_DURATION_PS = "device_duration_ps"


def _xla_device_ops(table: EventTable, op: I32, kernels: I64,
                    code_of: Any) -> tuple[I32, NDArray[np.bool_]] | None:
    """XLA's GPU kernels as XProf makes them framework ops, where the file holds its HLO
    (None where it does not: the caller then reads the kernels' own stats).

    A kernel is an XLA op when its ``hlo_op`` (the last ``::`` part) names an instruction of
    its program's HLO; kernels that name none, and kernels with neither ``hlo_op`` nor
    ``tf_op`` (ROCm's copy blits), are no op, as in XProf. The op is the instruction's
    metadata (``op_name:op_type``, read by ``parse_op_fullname``); an instruction without
    any is an op of its own, named as the instruction, of type ``Unknown``. An instruction's
    kernels launched one after another on one stream in one step group count as one
    occurrence (each kernel one where there are no groups); a framework op occurs as often as
    its most frequent instruction.
    """
    names = _hlo_metadata(table, schema.HLO_OP_NAMES)
    if not names:
        return None
    types = _hlo_metadata(table, schema.HLO_OP_TYPES)
    hlo_rows, hlo_codes, hlo_values = table.text_stat(_HLO_OP)
    at = np.full(len(table), -1, np.int64)
    at[kernels] = np.arange(len(kernels))
    keep = at[hlo_rows] >= 0
    hlo_rows, hlo_codes = hlo_rows[keep], hlo_codes[keep]
    # Kernels with a tf_op and no hlo_op are TensorFlow's: the caller names them.
    tf_rows, _, _ = table.text_stat("tf_op")
    has_hlo = np.zeros(len(table), dtype=bool)
    has_hlo[hlo_rows] = True
    tf_only = tf_rows[(at[tf_rows] >= 0) & ~has_hlo[tf_rows]]
    if len(tf_only):
        return None
    program = np.full(len(table), -1, np.int64)
    pid_rows, pid_values = table.int_stat(XLA_PROGRAM_ID)
    program[pid_rows] = pid_values
    instruction = [v.split("::")[-1] for v in hlo_values]
    pairs, inverse = np.unique(np.stack([program[hlo_rows], hlo_codes.astype(np.int64)],
                                        axis=1), axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    pair_op = np.full(len(pairs), -1, np.int32)
    pair_group = np.full(len(pairs), -1, np.int32)
    groups: dict[tuple[int, str], int] = {}
    for i, (pid, code) in enumerate(pairs.tolist()):
        inst = instruction[code]
        known = names.get(str(pid), {})
        if pid < 0 or inst not in known:
            continue  # XProf drops a kernel whose instruction it cannot find
        provenance = hlo_provenance(known[inst], types.get(str(pid), {}).get(inst, ""))
        if provenance:
            parsed = parse_op_fullname(provenance)
            name, op_type = parsed.name, parsed.type or "Unknown"
        else:
            name, op_type = inst, "Unknown"
        pair_op[i] = code_of(DEVICE, op_type, name)
        pair_group[i] = groups.setdefault((pid, inst), len(groups))
    op[kernels] = -1
    op[hlo_rows] = pair_op[inverse]
    group = np.full(len(table), -1, np.int32)
    group[hlo_rows] = pair_group[inverse]
    return group, _occurrence_starts(table, group)


def _occurrence_starts(table: EventTable, group: I32) -> NDArray[np.bool_]:
    """Per event of an instruction group: whether it starts an occurrence, i.e. the event
    before it on its line (in time order, XLA ops only) is of another instruction or another
    step group, or either has no step group."""
    rows = np.flatnonzero(group >= 0)
    starts = np.zeros(len(table), dtype=bool)
    if len(rows) == 0:
        return starts
    order = np.lexsort((table.start_ns[rows], table.line[rows]))
    rows = rows[order]
    line = table.line[rows]
    step_group = table.typed[schema.GROUP_ID][rows]
    same = np.zeros(len(rows), dtype=bool)
    same[1:] = ((line[1:] == line[:-1]) & (group[rows][1:] == group[rows][:-1])
                & (step_group[1:] == step_group[:-1]) & (step_group[1:] != MISSING))
    starts[rows] = ~same
    return starts


def _hlo_metadata(table: EventTable, stat: str) -> dict[str, dict[str, str]]:
    """A JSON {program id: {instruction: text}} stat the reader attached; {} if none."""
    for plane in table.planes:
        text = plane.stats.get(stat)
        if isinstance(text, str):
            try:
                data = json.loads(text)
            except ValueError:
                return {}
            if not isinstance(data, dict):
                return {}
            # A file may carry a stat of this name itself: only text maps of text are read.
            return {str(pid): {str(k): v for k, v in ops.items() if isinstance(v, str)}
                    for pid, ops in data.items() if isinstance(ops, dict)}
    return {}


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
    rows = rows_where(events.op >= 0)  # int32 where they fit: held through what follows
    unit = 1  # the times' unit in ns
    if events.device_clock is not None:
        start = events.device_clock[0][rows]
        end = start + events.device_clock[1][rows]
        unit = 1000
    else:
        start = table.start_ns[rows]
        end = start + table.duration_ns[rows]  # int64 (the durations may be int32)
    line = table.line[rows]  # int32: the interval functions take any integers
    n_ops = len(events.names)
    calls: list[OpRow] = []
    if events.categories and events.device_clock is None:
        self_ns, kept, calls = _torch_tree(table, events, rows, line, start, end)
        if kept is not None:
            rows, line, start, end, self_ns = (rows[kept], line[kept], start[kept], end[kept],
                                               self_ns[kept])
    else:
        self_ns = intervals.self_times(line, start, end)
    # As narrow as the classification's column (held through what follows): the bincounts
    # below cast a chunk of it at a time, or once (the counts) before the later peaks.
    code = events.op[rows]
    count = np.bincount(code, minlength=n_ops)
    if events.hlo_group is not None and events.starts is not None:
        # XLA device ops as XProf counts them: a kernel's self time is its time, and an op
        # occurs as often as its most frequent instruction.
        group = events.hlo_group[rows]
        grouped = group >= 0
        if events.device_clock is None:
            self_ns = np.where(grouped, end - start, self_ns)
        per_group = np.bincount(group[grouped], weights=events.starts[rows][grouped])
        group_op = np.full(len(per_group), -1, np.int64)
        group_op[group[grouped]] = code[grouped]
        most = np.zeros(n_ops, dtype=np.int64)
        np.maximum.at(most, group_op[group_op >= 0], per_group[group_op >= 0].astype(np.int64))
        has_group = np.zeros(n_ops, dtype=bool)
        has_group[group_op[group_op >= 0]] = True
        count = np.where(has_group, most, count)
    # (The columns bound as defaults, not closed over: they are let go below.)
    total = _summed(code, n_ops, lambda a, b, s=start, e=end: e[a:b] - s[a:b])
    own = _summed(code, n_ops, lambda a, b, w=self_ns: w[a:b])
    idle: list[OpRow] = []
    if include_idle and events.xprof_idle:
        idle = _xprof_idle_rows(table, rows, start, end, self_ns, events, unit)
    if unit != 1:
        total, own = np.rint(total / unit), np.rint(own / unit)
        start, end = start // unit, end // unit  # for the idle rows
    out = [OpRow(events.sides[i], events.types[i], events.names[i], int(count[i]),
                 int(total[i]), int(own[i])) for i in range(n_ops) if count[i]]
    out.extend(calls)
    if include_idle:
        out.extend(idle or _idle_rows(table, rows, line, start, end, events))
    # The ops' columns let go before the kernels' rows are made: their peaks do not add up.
    del rows, start, end, line, self_ns, code
    ops = ranked(out)
    return OpStats(ops, kernel_rows(table, events), include_idle)


def _torch_tree(table: EventTable, events: OpEvents, rows: NDArray[np.integer[Any]],
                line: NDArray[np.integer[Any]], start: I64, end: I64
                ) -> tuple[I64, NDArray[np.bool_] | None, list[OpRow]]:
    """Self times of a Kineto table's ops (``rows``) in PyTorch's own tree, which of them
    count as occurrences (None: all), and the host's runtime calls as rows of their own.

    The tree is the ops' and the runtime calls' (``KINETO_HOST_CALLS``) nesting by thread, as
    ``key_averages()`` builds it: a call's time is not its op's self time, but a row of its
    own, by name, of its Kineto category as type (``cudaMemcpyAsync``, ``cuda_runtime``), as
    key_averages() lists it. An op that is the only child of an op of the same name is folded
    into it, as PyTorch folds them: no occurrence of its own, its self time added to the
    outermost of the chain."""
    call_codes = [i for i, c in enumerate(events.categories) if c in KINETO_HOST_CALLS]
    extra = np.zeros(0, np.int64)
    if call_codes:
        extra = np.flatnonzero(np.isin(events.category, call_codes) & (events.op < 0)
                               & ~device_planes(table)[table.plane])
    n = len(rows)
    extra_start = table.start_ns[extra]
    parent, own = intervals.parents_and_self_times(
        np.concatenate([line, table.line[extra]]), np.concatenate([start, extra_start]),
        np.concatenate([end, extra_start + table.duration_ns[extra]]))
    children = np.bincount(parent[parent >= 0], minlength=n + len(extra))[:n]
    up = np.asarray(parent[:n], np.int64)
    calls = _call_rows(table, events, extra, own[n:])
    own = own[:n]
    names = table.name[rows]
    inside = (up >= 0) & (up < n)  # a call never holds an op: its parent is an op or none
    safe = np.where(inside, up, 0)
    fold = inside & (names[safe] == names) & (children[safe] == 1)
    if not fold.any():
        return own, None, calls
    # Each folded op's self time goes to the outermost op of its chain of folds.
    target = np.where(fold, up, np.arange(n))
    while True:
        further = target[target]
        if np.array_equal(further, target):
            break
        target = further
    return np.bincount(target, weights=own, minlength=n).astype(np.int64), ~fold, calls


def _call_rows(table: EventTable, events: OpEvents, rows: I64, own: I64) -> list[OpRow]:
    """Host rows of the runtime calls ``rows`` (their self times ``own``), by category and
    name."""
    if len(rows) == 0:
        return []
    key = events.category[rows].astype(np.int64) * len(table.names) + table.name[rows]
    keys, inverse = np.unique(key, return_inverse=True)
    inverse = inverse.reshape(-1)
    count = np.bincount(inverse, minlength=len(keys))
    total = np.bincount(inverse, weights=table.duration_ns[rows], minlength=len(keys))
    self_ns = np.bincount(inverse, weights=own, minlength=len(keys))
    return [OpRow(HOST, events.categories[int(k) // len(table.names)],
                  table.names[int(k) % len(table.names)], int(count[i]), int(total[i]),
                  int(self_ns[i])) for i, k in enumerate(keys.tolist())]


def _idle_rows(table: EventTable, rows: NDArray[np.integer[Any]],
               line: NDArray[np.integer[Any]], start: I64, end: I64,
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


def _xprof_idle_rows(table: EventTable, rows: NDArray[np.integer[Any]], start: I64, end: I64,
                     self_ns: Any,
                     events: OpEvents, unit: int) -> list[OpRow]:
    """IDLE rows as XProf makes them (times in ``unit`` ns): on the host, per thread, the
    span of its ops less their self time; on a device, per device, the span of its events
    (TPU: of its "XLA Ops" lines) less its ops' self time; each summed over threads or
    devices."""
    # Each row's side as a small code (0 host, 1 device), not an object per row; the self
    # times go to bincount as they are (it makes the same float64 values of them).
    side_code = np.array([0 if s == HOST else 1 if s == DEVICE else 2 for s in events.sides]
                         + [2], dtype=np.int8)
    sides = side_code[events.op[rows]]
    out = []
    host = sides == 0
    if host.any() or any(p.name == _HOST_THREADS_PLANE for p in table.planes):
        if host.all():  # every op on the host (a CPU capture): no copies of the columns
            idle = _span_less_work(table.line[rows], start, end, self_ns)
        else:
            idle = _span_less_work(table.line[rows][host], start[host], end[host],
                                   self_ns[host])
        out.append(OpRow(HOST, IDLE, IDLE, 0, round(idle / unit), round(idle / unit)))
    device = sides == 1
    del sides, host
    own = self_ns
    if device.any() or device_planes(table).any():
        plane = table.plane[rows][device].astype(np.int64)
        if events.device_clock is not None:
            # TPU: the span of each device's op lines, on the device's clock.
            span_rows = np.flatnonzero(np.isin(np.array(table.line_name, dtype=object),
                                               [_XLA_OPS_LINE])[table.line])
            s_start = events.device_clock[0][span_rows]
            s_end = s_start + events.device_clock[1][span_rows]
        else:
            # GPU: the span of every event of the device (kernels that are no op included).
            span_rows = np.flatnonzero(device_planes(table)[table.plane]
                                       & ~_derived_line(table)[table.line])
            s_start = table.start_ns[span_rows].astype(np.int64) * unit
            s_end = s_start + table.duration_ns[span_rows].astype(np.int64) * unit
            if unit != 1:  # the device clock's base: the table's first start
                s_start, s_end = (s_start - int(table.start_ns.min()) * unit,
                                  s_end - int(table.start_ns.min()) * unit)
        s_plane = table.plane[span_rows].astype(np.int64)
        n = len(table.planes)
        lo = np.full(n, np.iinfo(np.int64).max, np.int64)
        hi = np.full(n, np.iinfo(np.int64).min, np.int64)
        np.minimum.at(lo, s_plane, s_start)
        np.maximum.at(hi, s_plane, s_end)
        work = np.bincount(plane, weights=own[device], minlength=n)
        has = hi >= lo
        idle = float(np.maximum(hi[has] - lo[has] - work[has], 0).sum())
        out.append(OpRow(DEVICE, IDLE, IDLE, 0, round(idle / unit), round(idle / unit)))
    return out


_SUM_CHUNK = 1 << 18  # rows a time in _summed and _span_less_work: temporaries of ~2 MB (their
# int64 index and float64 weights: 16 B a row of the chunk)


def _summed(code: NDArray[np.integer[Any]], size: int, weights: Any) -> I64:
    """Per code in 0..size-1, the sum of its rows' ``weights(a, b)`` (the weights of rows a
    to b): ``np.bincount(code, weights=...)``, a chunk of rows at a time, so that no weight
    column (nor its float copy) of every row is made. Sums in int64: exact, as the float
    sums were below 2**53 ns."""
    out = np.zeros(size, np.int64)
    for a in range(0, len(code), _SUM_CHUNK):
        b = a + _SUM_CHUNK
        out += np.bincount(code[a:b], weights=weights(a, b), minlength=size).astype(np.int64)
    return out


def _span_less_work(line: NDArray[np.integer[Any]], start: I64, end: I64, work: Any) -> float:
    """Summed over lines: the span of a line's intervals less their work (never below 0)."""
    # Lines are few and small non-negative codes: each row's index among those used, by a
    # lookup table (what np.unique's inverse is, without sorting every row), a chunk of rows
    # at a time.
    size = int(line.max()) + 1 if len(line) else 0
    used = np.zeros(size, dtype=bool)
    used[line] = True
    lines = np.flatnonzero(used)
    index = np.zeros(size, dtype=np.intp)
    index[lines] = np.arange(len(lines))
    lo = np.full(len(lines), np.iinfo(np.int64).max, np.int64)
    hi = np.full(len(lines), np.iinfo(np.int64).min, np.int64)
    busy = np.zeros(len(lines), np.float64)
    for a in range(0, len(line), _SUM_CHUNK):
        b = a + _SUM_CHUNK
        inverse = index[line[a:b]]
        np.minimum.at(lo, inverse, start[a:b])
        np.maximum.at(hi, inverse, end[a:b])
        busy += np.bincount(inverse, weights=work[a:b], minlength=len(lines))
    return float(np.maximum(hi - lo - busy, 0).sum())


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
    todo = np.flatnonzero(out < 0)
    if len(todo) == 0:
        return out
    rows = launching_op_rows(table, events, kernels[todo])
    out[todo] = np.where(rows >= 0, events.op[np.maximum(rows, 0)], -1)
    return out


def launching_op_rows(table: EventTable, events: OpEvents, kernels: I64) -> I64:
    """For each kernel row: the row of the innermost host op around its launch (joined by
    correlation id), or -1."""
    out = np.full(len(kernels), -1, np.int64)
    corr = table.typed[schema.CORRELATION_ID]
    todo = np.flatnonzero(corr[kernels] != MISSING)
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
    owner = np.where((launch_parent >= 0) & (launch_parent < len(host_ops)),
                     host_ops[np.clip(launch_parent, 0, len(host_ops) - 1)], -1)
    order = np.argsort(corr[launches], kind="stable")
    keys, owners = corr[launches][order], owner[order]
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
