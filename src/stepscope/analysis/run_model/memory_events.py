"""A host's memory activity as columns: every allocation and free, per allocator, in time order.

Two sources are read, keyed by event and stat names (never by file format):

* ``MemoryAllocation`` / ``MemoryDeallocation`` events (TensorFlow, JAX, stepscope's own
  capture) with their stats: the allocator (``allocator_name``, else ``device_ordinal`` or
  ``index_on_host``), heap in use (``bytes_allocated``), stack (``bytes_reserved``), free
  (``bytes_available``), fragmentation, the allocator's own peak, requested and allocated size,
  address, op, region type, data type, shape; the step is the event's ``group_id``.
* PyTorch's ``[memory]`` instants: ``Bytes`` (negative for a free), ``Total Allocated``,
  ``Total Reserved``, device type and id, ``Addr`` (and, from stepscope's PyTorch bridge,
  ``Data Type`` and ``shape``). The op is the innermost ``cpu_op`` or
  ``user_annotation`` open on the instant's thread; heap in use is ``Total Allocated`` (or the
  running sum of ``Bytes`` in traces too old to have it), reserved is ``Total Reserved``, free
  is the device's memory less what is reserved, and fragmentation is the share of reserved
  memory not allocated.

Bad data is counted in ``problems``, never raised: missing stats read as 0, and sizes that are
negative or beyond ``MAX_BYTES`` count as 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
from numpy.typing import NDArray

from stepscope.analysis.run_model.intervals import parents
from stepscope.model import schema
from stepscope.model.events import MISSING, EventTable, is_in
from stepscope.model.stat_kinds import KIND_DOUBLE, KIND_INT64, KIND_REF, KIND_STR, KIND_UINT64

I32 = NDArray[np.int32]
I64 = NDArray[np.int64]
F64 = NDArray[np.float64]
Bools = NDArray[np.bool_]

# Bump when MemoryEvents or how it is computed changes: cached entries are then not read.
MEMORY_EVENTS_VERSION = 2

# Larger sizes are taken for corrupt data (8 PiB; sums of them stay exact in a double).
MAX_BYTES = 1 << 53
NO_STEP = -1

# TensorFlow's DataType enum, as XProf names its values.
TF_DATA_TYPES = (
    "INVALID", "float", "double", "int32", "uint8", "int16", "int8", "string", "complex64",
    "int64", "bool", "qint8", "quint8", "qint32", "bfloat16", "qint16", "quint16", "uint16",
    "complex128", "half", "resource", "variant", "uint32", "uint64", "float8_e5m2",
    "float8_e4m3fn", "float8_e4m3fnuz", "float8_e4m3b11fnuz", "float8_e5m2fnuz", "int4",
    "uint4")
# PyTorch's c10::DeviceType values that Kineto writes as "Device Type".
TORCH_DEVICE_TYPES = {0: "cpu", 1: "cuda", 6: "hip", 12: "xpu", 13: "mps"}
# The Kineto categories whose events own the memory recorded while they are open.
TORCH_OP_CATEGORIES = ("cpu_op", "user_annotation")


@dataclass
class MemoryEvents:
    """Allocations and frees of one host, sorted by allocator, then time, then file order.

    Text columns are codes into ``texts``. Unknown values: ``MISSING`` (ints), NaN (floats),
    ``NO_STEP`` (steps).
    """

    allocators: list[str]
    source: list[str]  # per allocator: "xspace" or "kineto"
    capacity: list[int | None]  # per allocator: device memory where the profile tells it
    allocator: I32
    row: I64  # the event's row in the host's table
    time_ns: I64
    is_alloc: Bools
    heap: I64
    stack: I64
    reserved: I64
    free: I64
    fragmentation: F64
    allocator_peak: I64  # the allocator's own peak since it started (MISSING: not told)
    requested: I64
    size: I64
    address: I64
    op: I32
    region: I32
    data_type: I32
    shape: I32
    group: I64  # XSpace group_id (MISSING where absent)
    step: I64  # the host step whose span holds the event (NO_STEP: none)
    texts: list[str]
    owner: I64  # Kineto/stepscope: the innermost op open on the thread (a table row, -1)
    problems: dict[str, int] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.time_ns)

    def of(self, allocator: int) -> slice:
        """The rows of one allocator (they are contiguous)."""
        lo = int(np.searchsorted(self.allocator, allocator, side="left"))
        hi = int(np.searchsorted(self.allocator, allocator, side="right"))
        return slice(lo, hi)


class _Texts:
    def __init__(self) -> None:
        self.values: list[str] = [""]
        self.code: dict[str, int] = {"": 0}

    def encode(self, codes: NDArray[np.integer[Any]], values: list[str]) -> I32:
        """Codes into ``values`` (-1: none, "") as codes into these texts."""
        lut = np.array([self.code.setdefault(v, len(self.code)) for v in values] + [0],
                       dtype=np.int32)
        out: I32 = lut[np.where(codes >= 0, codes, len(values))]
        return out

    def finish(self) -> list[str]:
        return list(self.code)


class _RowStats:
    """The stats of some rows of a table (``rows``, sorted), read stat by stat."""

    def __init__(self, table: EventTable, rows: I64) -> None:
        st = table.stats
        self.table, self.n = table, len(rows)
        sel = np.flatnonzero(np.isin(st.event, rows))  # one pass over the whole stat table
        self.sel, self.name = sel, st.name[sel]
        self.pos = np.searchsorted(rows, st.event[sel])
        self.buffer = np.frombuffer(st.text, dtype=np.uint8) if len(st.text) \
            else np.zeros(1, np.uint8)

    def _of(self, stat: str, kinds: tuple[int, ...]) -> tuple[I64, I64]:
        st = self.table.stats
        try:
            code = st.stat_names.index(stat)
        except ValueError:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        mine = np.flatnonzero(self.name == code)
        keep = np.isin(st.kind[self.sel[mine]], kinds)
        return self.sel[mine[keep]], self.pos[mine[keep]]

    def numbers(self, stat: str) -> tuple[I64, F64, Bools]:
        """A numeric stat: (as int64, as float, present)."""
        ints = np.full(self.n, MISSING, dtype=np.int64)
        floats = np.full(self.n, np.nan)
        present = np.zeros(self.n, dtype=bool)
        sel, pos = self._of(stat, (KIND_INT64, KIND_UINT64, KIND_DOUBLE))
        st = self.table.stats
        kind, raw = st.kind[sel], np.asarray(st.value[sel], dtype=np.int64)
        is_double = kind == KIND_DOUBLE
        as_float = np.where(is_double, raw.view(np.float64), raw.astype(np.float64))
        with np.errstate(invalid="ignore", over="ignore"):
            fits = np.isfinite(as_float) & (np.abs(as_float) < 2.0 ** 62)
            as_int = np.where(is_double, np.where(fits, as_float, MISSING).astype(np.int64),
                              raw)
        # A uint64 beyond int64 reads back negative here: that is an overflow, not a size.
        as_int = np.where((kind == KIND_UINT64) & (raw < 0), MISSING, as_int)
        ints[pos], floats[pos], present[pos] = as_int, as_float, True
        return ints, floats, present

    def texts(self, stat: str) -> tuple[I32, list[str]]:
        """A text stat: codes into its distinct values (-1 where absent)."""
        out = np.full(self.n, -1, dtype=np.int32)
        sel, pos = self._of(stat, (KIND_STR, KIND_REF))
        st = self.table.stats
        kind, value = st.kind[sel], st.value[sel]
        refs = kind == KIND_REF
        ref_values, ref_code = np.unique(value[refs], return_inverse=True)
        values = [st.stat_names[int(v)] for v in ref_values.tolist()]
        out[pos[refs]] = ref_code.reshape(-1)
        # Strings repeat (an op name per allocation): find the distinct ones by their bytes,
        # a length at a time, and decode each once.
        (starts, lengths), where = st.text_spans(sel[~refs]), pos[~refs]
        buf = self.buffer
        for size in np.unique(lengths).tolist():
            these = np.flatnonzero(lengths == size)
            if size == 0:
                out[where[these]] = len(values)
                values.append("")
                continue
            chunk = buf[starts[these, None] + np.arange(size)]
            distinct, inverse = np.unique(chunk.view(np.dtype((np.void, size))).reshape(-1),
                                          return_inverse=True)
            out[where[these]] = len(values) + inverse.reshape(-1)
            values += [bytes(d).decode("utf-8", "replace") for d in distinct.tolist()]
        return out, values


def _sizes(values: I64, present: Bools, problems: dict[str, int], what: str) -> I64:
    """Sizes as they may be summed: absent → 0; negative or absurd → 0, counted."""
    bad = present & ((values < 0) | (values >= MAX_BYTES))
    if bad.any():
        problems["bad_sizes"] = problems.get("bad_sizes", 0) + int(bad.sum())
    missing = ~present
    if missing.any():
        problems[f"missing_{what}"] = problems.get(f"missing_{what}", 0) + int(missing.sum())
    out: I64 = np.where(present & ~bad, values, 0)
    return out


def op_rows(table: EventTable, lines: I64, kineto: bool) -> I64:
    """The events on ``lines`` that own memory recorded while they are open: in a PyTorch
    trace its ops and annotations, otherwise every event with a duration."""
    cand = np.flatnonzero(is_in(table.line, lines) & (table.duration_ns > 0))
    if kineto:
        events, codes, values = table.text_stat(schema.KINETO_CATEGORY)
        wanted = np.array([v in TORCH_OP_CATEGORIES for v in values], dtype=bool)
        ops = events[wanted[codes]] if len(values) else events[:0]
        cand = np.intersect1d(cand, ops)
    return cand


def _owners(table: EventTable, rows: I64, kineto: bool) -> I64:
    """For each memory row, the innermost op open on its thread at its time (a row, or -1)."""
    out = np.full(len(rows), -1, dtype=np.int64)
    if not len(rows):
        return out
    cand = op_rows(table, np.unique(table.line[rows]), kineto)
    if not len(cand):
        return out
    allrows = np.concatenate([cand, rows])
    start = table.start_ns[allrows]
    end = start + np.concatenate([table.duration_ns[cand], np.zeros(len(rows), np.int64)])
    parent = parents(table.line[allrows].astype(np.int64), start, end)[len(cand):]
    has = parent >= 0
    out[has] = allrows[parent[has]]
    return out


def _steps_of(times: I64, step_num: I64, start_ns: I64, end_ns: I64) -> I64:
    """The step whose span holds each time (NO_STEP: none)."""
    out = np.full(len(times), NO_STEP, dtype=np.int64)
    if not len(step_num):
        return out
    order = np.argsort(start_ns, kind="stable")
    s, e, num = start_ns[order], end_ns[order], step_num[order]
    i = np.searchsorted(s, times, side="right") - 1
    ok = (i >= 0) & (times <= e[np.maximum(i, 0)])
    out[ok] = num[i[ok]]
    return out


def memory_events(table: EventTable, step_num: I64 | None = None,
                  step_start_ns: I64 | None = None,
                  step_end_ns: I64 | None = None) -> MemoryEvents:
    """Every allocation and free of one host's events (see the module's docstring)."""
    texts = _Texts()
    problems: dict[str, int] = {}
    parts: list[dict[str, object]] = []
    alloc_names: list[str] = []
    alloc_source: dict[str, str] = {}
    alloc_capacity: dict[str, int | None] = {}

    codes = [c for c in (table.name_code(schema.MEMORY_ALLOCATION),
                         table.name_code(schema.MEMORY_DEALLOCATION)) if c is not None]
    xrows = np.flatnonzero(is_in(table.name, codes)) if codes else np.zeros(0, np.int64)
    if len(xrows):
        parts.append(_xspace_part(table, xrows, texts, problems, alloc_source,
                                  alloc_capacity))
    kcode = table.name_code(schema.KINETO_MEMORY)
    krows = np.flatnonzero(table.name == kcode) if kcode is not None else np.zeros(0, np.int64)
    if len(krows):
        parts.append(_kineto_part(table, krows, texts, problems, alloc_source,
                                  alloc_capacity))

    alloc_names = sorted(alloc_source)
    index = {name: i for i, name in enumerate(alloc_names)}
    cols: dict[str, np.ndarray] = {}
    keys = ("row", "time_ns", "is_alloc", "heap", "stack", "reserved", "free",
            "fragmentation", "allocator_peak", "requested", "size", "address", "op", "region",
            "data_type", "shape", "group", "owner")
    for key in keys:
        arrays = [np.asarray(p[key]) for p in parts]
        cols[key] = np.concatenate(arrays) if arrays else np.zeros(0, np.int64)
    allocator = np.concatenate(
        [np.array([index.get(n, 0) for n in cast(list[str], p["allocator_names"])] + [0],
                  dtype=np.int32)[np.asarray(p["allocator"])] for p in parts]) \
        if parts else np.zeros(0, np.int32)
    order = np.lexsort((cols["row"], cols["time_ns"], allocator))
    times = cols["time_ns"][order].astype(np.int64)
    steps = (_steps_of(times, step_num, step_start_ns, step_end_ns)
             if step_num is not None and step_start_ns is not None and step_end_ns is not None
             else np.full(len(times), NO_STEP, dtype=np.int64))

    def col(key: str, dtype: type) -> np.ndarray:
        return np.asarray(cols[key][order]).astype(dtype)

    return MemoryEvents(
        allocators=alloc_names, source=[alloc_source[n] for n in alloc_names],
        capacity=[alloc_capacity.get(n) for n in alloc_names], allocator=allocator[order],
        row=col("row", np.int64), time_ns=times, is_alloc=col("is_alloc", bool),
        heap=col("heap", np.int64), stack=col("stack", np.int64),
        reserved=col("reserved", np.int64), free=col("free", np.int64),
        fragmentation=col("fragmentation", np.float64),
        allocator_peak=col("allocator_peak", np.int64), requested=col("requested", np.int64),
        size=col("size", np.int64), address=col("address", np.int64), op=col("op", np.int32),
        region=col("region", np.int32), data_type=col("data_type", np.int32),
        shape=col("shape", np.int32), group=col("group", np.int64), step=steps,
        texts=texts.finish(), owner=col("owner", np.int64), problems=problems)


def _xspace_part(table: EventTable, rows: I64, texts: _Texts, problems: dict[str, int],
                 sources: dict[str, str], capacity: dict[str, int | None]) -> dict[str, object]:
    n = len(rows)
    rs = _RowStats(table, rows)
    alloc_code = table.name_code(schema.MEMORY_ALLOCATION)
    is_alloc = table.name[rows] == (alloc_code if alloc_code is not None else -1)
    named, names = rs.texts(schema.ALLOCATOR_NAME)
    ordinal, _, has_ordinal = rs.numbers(schema.DEVICE_ORDINAL)
    index, _, has_index = rs.numbers(schema.INDEX_ON_HOST)
    # Without a name, the allocator is the device's number (TPU), as XProf names it.
    number = np.where(has_index, index, np.where(has_ordinal, ordinal, MISSING))
    unnamed = (named < 0) & (number == MISSING)
    if unnamed.any():
        problems["missing_allocator"] = problems.get("missing_allocator", 0) + int(
            unnamed.sum())
    numbers, number_code = np.unique(number[(named < 0) & ~unnamed], return_inverse=True)
    names = [*names, *(str(int(v)) for v in numbers), "(unnamed allocator)"]
    allocator = named.astype(np.int64)
    allocator[(named < 0) & ~unnamed] = len(names) - 1 - len(numbers) + number_code.reshape(-1)
    allocator[unnamed] = len(names) - 1
    used = np.unique(allocator)
    allocator_names = names
    for name in (names[int(u)] for u in used):
        sources.setdefault(name, "xspace")
        capacity.setdefault(name, None)

    def sized(stat: str, what: str) -> I64:
        v, _, present = rs.numbers(stat)
        return _sizes(v, present, problems, what)

    heap = sized(schema.BYTES_ALLOCATED, "heap")
    stack = sized(schema.BYTES_RESERVED, "stack")
    free_v, _, free_present = rs.numbers(schema.BYTES_AVAILABLE)
    free = np.where(free_present & (free_v >= 0) & (free_v < MAX_BYTES), free_v, MISSING)
    _, frag, frag_present = rs.numbers(schema.FRAGMENTATION)
    peak_v, _, peak_present = rs.numbers(schema.PEAK_BYTES_IN_USE)
    req_v, _, req_present = rs.numbers(schema.REQUESTED_BYTES)
    size_v, _, size_present = rs.numbers(schema.ALLOCATION_BYTES)
    addr, _, addr_present = rs.numbers(schema.ADDRESS)
    dtype, _, _ = rs.numbers(schema.DATA_TYPE)
    # Frees often carry no sizes: they take their allocation's (see memory_profile).
    requested = _sizes(np.where(req_present, req_v, 0), np.ones(n, dtype=bool), problems,
                       "requested")
    size = _sizes(np.where(size_present, size_v, 0), size_present | ~is_alloc, problems,
                  "size")
    if not addr_present.all():
        problems["missing_address"] = problems.get("missing_address", 0) + int(
            (~addr_present).sum())
    type_values, type_code = np.unique(dtype, return_inverse=True)
    # No data_type stat (stepscope's NumPy tracer: NumPy's allocator is not told the dtype):
    # unknown, shown as such, not TensorFlow's INVALID.
    type_names = [TF_DATA_TYPES[int(t)] if 0 <= int(t) < len(TF_DATA_TYPES)
                  else ("" if int(t) == MISSING else f"type {int(t)}")
                  for t in type_values.tolist()]
    ours = any(p.stats.get(schema.ENV_PRODUCER) for p in table.planes)
    # stepscope's own capture: ops own the memory recorded while they are open.
    owners = _owners(table, rows, False) if ours else np.full(n, -1, np.int64)
    op_code, op_values = rs.texts(schema.TF_OP)
    op_codes = texts.encode(op_code, op_values)
    # Without a tf_op stat, the op is the innermost event open around it (our capture).
    take = (op_code < 0) & (owners >= 0)
    if take.any():
        op_codes[take] = texts.encode(table.name[owners[take]], table.names)
    return {
        "allocator": allocator, "allocator_names": allocator_names, "row": rows,
        "time_ns": table.start_ns[rows], "is_alloc": is_alloc, "heap": heap, "stack": stack,
        "reserved": np.full(n, MISSING, dtype=np.int64), "free": free,
        "fragmentation": np.where(frag_present, frag, np.nan),
        "allocator_peak": np.where(peak_present & (peak_v >= 0), peak_v, MISSING),
        "requested": requested, "size": size,
        "address": np.where(addr_present, addr, MISSING),
        "op": op_codes,
        "region": texts.encode(*rs.texts(schema.REGION_TYPE)),
        "data_type": texts.encode(type_code.reshape(-1).astype(np.int32), type_names),
        "shape": texts.encode(*rs.texts(schema.TENSOR_SHAPES)),
        "group": table.typed[schema.GROUP_ID][rows],
        "owner": owners,
    }


def _kineto_part(table: EventTable, rows: I64, texts: _Texts, problems: dict[str, int],
                 sources: dict[str, str], capacity: dict[str, int | None]) -> dict[str, object]:
    signed, _, has_bytes = _RowStats(table, rows).numbers(schema.KINETO_BYTES)
    bad = has_bytes & ((signed == MISSING) | (np.abs(signed) >= MAX_BYTES))
    if bad.any():
        problems["bad_sizes"] = problems.get("bad_sizes", 0) + int(bad.sum())
    if (~has_bytes).any():
        problems["missing_size"] = problems.get("missing_size", 0) + int((~has_bytes).sum())
    # A record without a usable size is neither an allocation nor a free: it is left out.
    keep = has_bytes & ~bad & (signed != 0)
    rows, signed = rows[keep], signed[keep]
    n = len(rows)
    rs = _RowStats(table, rows)
    dev_type, _, has_type = rs.numbers(schema.KINETO_DEVICE_TYPE)
    dev_id, _, has_id = rs.numbers(schema.KINETO_DEVICE_ID)
    # One allocator per (device type, device id); the CPU's id does not matter.
    dev_type = np.where(has_type, dev_type, 0)
    dev_id = np.where(has_id & (dev_id >= 0) & (dev_type != 0), dev_id, 0)
    pairs, pair_code = np.unique(np.stack([dev_type, dev_id], axis=1), axis=0,
                                 return_inverse=True)
    names = []
    for t, i in pairs.tolist():
        kind = TORCH_DEVICE_TYPES.get(t, f"device{t}")
        names.append(kind if kind == "cpu" else f"{kind}:{i}")
    allocator = pair_code.reshape(-1).astype(np.int64)
    for name in names:
        sources.setdefault(name, "kineto")
        capacity.setdefault(name, _device_memory(table, name))
    total, _, has_total = rs.numbers(schema.KINETO_TOTAL_ALLOCATED)
    reserved, _, has_reserved = rs.numbers(schema.KINETO_TOTAL_RESERVED)
    total = np.where(has_total & (total >= 0) & (total < MAX_BYTES), total, MISSING)
    reserved = np.where(has_reserved & (reserved >= 0) & (reserved < MAX_BYTES), reserved,
                        MISSING)
    # Traces from before PyTorch 1.10 have no totals: heap is the running sum per allocator.
    heap = total.copy()
    no_total = heap == MISSING
    if no_total.any():
        problems["no_totals"] = problems.get("no_totals", 0) + int(no_total.sum())
        code = allocator
        order = np.lexsort((rows, table.start_ns[rows], code))
        running = np.zeros(n, dtype=np.int64)
        c = code[order]
        cum = np.cumsum(signed[order])
        first = np.searchsorted(c, c, side="left")
        before = np.where(first > 0, cum[np.maximum(first - 1, 0)], 0)
        running[order] = cum - before
        heap[no_total] = running[no_total]
    cap = np.array([capacity.get(a) or MISSING for a in names] + [MISSING],
                   dtype=np.int64)[allocator]
    free = np.where((cap != MISSING) & (reserved != MISSING), cap - reserved, MISSING)
    with np.errstate(invalid="ignore", divide="ignore"):
        frag = np.where((reserved != MISSING) & (reserved > 0) & (total != MISSING),
                        (reserved - total) / np.maximum(reserved, 1), np.nan)
    addr, _, addr_present = rs.numbers(schema.KINETO_ADDRESS)
    if not addr_present.all():  # PyTorch's own event objects (our bridge) carry none
        problems["missing_address"] = problems.get("missing_address", 0) + int(
            (~addr_present).sum())
    size = np.abs(signed)
    owners = _owners(table, rows, True)
    op_code = np.where(owners >= 0, table.name[np.maximum(owners, 0)], -1).astype(np.int32)
    none = np.full(n, -1, dtype=np.int32)
    return {
        "allocator": allocator, "allocator_names": names, "row": rows,
        "time_ns": table.start_ns[rows],
        "is_alloc": signed > 0, "heap": np.maximum(heap, 0), "stack": np.zeros(n, np.int64),
        "reserved": reserved, "free": free, "fragmentation": frag,
        "allocator_peak": np.full(n, MISSING, dtype=np.int64), "requested": size,
        "size": size, "address": np.where(addr_present, addr, MISSING),
        "op": texts.encode(op_code, table.names), "region": texts.encode(none, []),
        "data_type": texts.encode(*rs.texts(schema.KINETO_DATA_TYPE)),
        "shape": texts.encode(*rs.texts(schema.TENSOR_SHAPES)),
        "group": np.full(n, MISSING, dtype=np.int64), "owner": owners,
    }


def _device_memory(table: EventTable, allocator: str) -> int | None:
    """The memory of the GPU a Kineto allocator belongs to, where the trace tells it."""
    kind, _, number = allocator.partition(":")
    if kind not in ("cuda", "hip") or not number.isdigit():
        return None
    plane = table.plane_index(f"{schema.GPU_PLANE_PREFIX}{number}")
    if plane is None:
        return None
    value = table.planes[plane].stats.get("memory_size")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 \
        else None
