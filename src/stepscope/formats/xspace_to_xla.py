"""XSpace → one host's XLA op executions and programs (``model.xla_ops.XlaHostOps``).

Where XLA ops are found:

- a device plane's "XLA Ops" line (TPU, and GPU profiles with derived lines): one event per
  op execution, the op's facts (``program_id``, ``hlo_category``, ``flops``,
  ``bytes_accessed``...) on its event metadata, its name the metadata's display name;
- otherwise any event that carries an ``hlo_op`` stat (GPU kernels, XLA:CPU thunks on host
  threads), with ``hlo_module`` and ``program_id`` stats naming the program.

Programs come from the ``/host:metadata`` plane: one event metadata per program, named
``module(program_id)``, with the serialized ``HloProto`` as a bytes stat. A program whose
HLO cannot be decoded is listed in ``bad_modules`` and its ops keep their times.
"""

from __future__ import annotations

import io
import math
import os
import re
import stat as stat_mode
from pathlib import Path
from typing import Any

import numpy as np

from stepscope.errors import ProfileFormatError, StepscopeError
from stepscope.formats import command_buffers
from stepscope.formats import xspace_columns as xc
from stepscope.formats.hlo_proto import decode_hlo_proto
from stepscope.formats.memory_access import hbm_bytes
from stepscope.formats.xplane_proto import metadata_entry
from stepscope.formats.xspace_to_tables import text
from stepscope.model.hlo import HloModule
from stepscope.model.locations import as_path, is_remote, read_bytes
from stepscope.model.stat_kinds import (
    KIND_BYTES,
    KIND_DOUBLE,
    KIND_INT64,
    KIND_REF,
    KIND_STR,
    KIND_UINT64,
)
from stepscope.model.xla_ops import COMMAND_BUFFER, DeviceInfo, XlaHostOps, XlaOp

METADATA_PLANE = "/host:metadata"
XLA_OPS_LINE = "XLA Ops"
HLO_PROTO_STAT = "Hlo Proto"
HLO_OP_STAT = "hlo_op"
HLO_MODULE_STAT = "hlo_module"
PROGRAM_ID_STAT = "program_id"
# Plane stats where profilers state a device's peaks and model.
PEAK_TFLOPS_STAT = "peak_teraflops_per_second"
PEAK_HBM_STAT = "peak_hbm_bw_gigabytes_per_second"
# TensorFlow's and JAX's GPU planes name the model ``gpu_device_name``; Kineto-derived ones
# ``device_name``; ``device_vendor`` ("Nvidia") is the last resort.
DEVICE_KIND_STATS = ("device_type_string", "gpu_device_name", "gpu_name", "device_name",
                     "device_vendor")
DEVICE_PROP_STATS = ("device_vendor", "compute_cap_major", "compute_cap_minor", "core_count",
                     "clock_rate", "memory_bandwidth", "memory_size")
# Event stats that give an XLA op's time on the device's own clock (TPU), preferred to the
# event's offset and duration as XProf does.
DEVICE_OFFSET_STAT = "device_offset_ps"
# Bytes per memory space (TPU): serialized, replaced on reading by the HBM bytes it gives.
MEMORY_BREAKDOWN_STAT = "memory_access_breakdown"
HBM_BYTES_STAT = "hbm_bytes_accessed"
DEVICE_DURATION_STAT = "device_duration_ps"
# A kernel's launch of its command buffer (one per launch), else the launch's correlation.
LAUNCH_STATS = ("scope_range_id", "correlation_id")
_DEVICE_PLANE = re.compile(r"^/device:[A-Z]+:\d+$")
_PROGRAM_SUFFIX = re.compile(r"^(.*)\((-?\d+)\)$")
# Bytes whose presence in a file means it may hold XLA data (a cheap probe before decoding).
_MARKERS = (HLO_PROTO_STAT.encode(), XLA_OPS_LINE.encode(), HLO_OP_STAT.encode())
_PROBE_WINDOW = 4 << 20  # bytes the probe reads at a time


def load_xla(path: str | Path) -> XlaHostOps:
    """Read one ``.xplane.pb`` file's XLA ops and programs."""
    source = as_path(path)
    data = read_bytes(source)
    return xla_from_columns(xc.decode_columns(data, str(source)), str(source))


def may_hold_xla(path: str | Path) -> bool:
    """Whether the file may hold XLA data (names XLA stats or lines); False if unreadable."""
    return _names_any(path, _MARKERS)


def may_hold_hlo(path: str | Path) -> bool:
    """Whether the file may hold XLA programs' HLO (names the HLO proto stat, which the
    memory and graph viewers read); False if unreadable."""
    return _names_any(path, (HLO_PROTO_STAT.encode(),))


def _names_any(path: str | Path, markers: tuple[bytes, ...]) -> bool:
    """Whether the file's bytes hold any of ``markers`` (a probe, nothing decoded)."""
    try:
        source = as_path(path)
        if is_remote(source):
            data = read_bytes(source)
            return any(marker in data for marker in markers)
        # Never blocks: a FIFO or device named like a profile is no XLA data.
        fd = os.open(source, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb", buffering=0) as f:
            st = os.fstat(fd)
            if not stat_mode.S_ISREG(st.st_mode):
                return False
            return _holds_any(f, markers, max(1, min(_PROBE_WINDOW, st.st_size)))
    except (OSError, ValueError, StepscopeError):  # unreadable
        return False


def _holds_any(f: io.RawIOBase, markers: tuple[bytes, ...], window: int) -> bool:
    """Whether the rest of ``f`` holds any of ``markers``, read a window at a time. Not one
    mapping of the whole file: every page it touches counts in the process's resident memory
    until unmapped, and the probe runs while the run's tables are held (it was the peak of a
    ``report``: the file's size on top of the tables). ``window``: bytes read at a time (a
    file that grows meanwhile is read on, a window at a time)."""
    keep = max(map(len, markers), default=1) - 1  # a marker may straddle two windows
    buffer = bytearray(window + keep)
    view = memoryview(buffer)
    held = 0  # bytes at the start of ``buffer`` carried over from the last window
    while True:
        got = f.readinto(view[held:])
        if not got:
            return False
        end = held + got
        if any(buffer.find(marker, 0, end) >= 0 for marker in markers):
            return True
        held = min(keep, end)
        buffer[:held] = buffer[end - held:end]  # a copy first: never overlapping


def _stat_value(plane: Any, stat: Any) -> Any:
    which = stat.WhichOneof("value")
    if which is None:
        return None
    value = getattr(stat, which)
    if which == "ref_value":
        md = metadata_entry(plane.stat_metadata, value)
        return None if md is None else text(md.name)
    if which == "str_value":
        return text(value)
    return value


def _metadata_stats(plane: Any, md: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for stat in md.stats:
        smd = plane.stat_metadata.get(stat.metadata_id)
        if smd is not None:
            out[text(smd.name)] = _stat_value(plane, stat)
    return out


def _read_breakdown(stats: dict[str, Any]) -> None:
    """Replace the op's ``memory_access_breakdown`` bytes by the HBM bytes they give
    (``hbm_bytes_accessed``); one that cannot be read is ignored (all the op's bytes count)."""
    raw = stats.pop(MEMORY_BREAKDOWN_STAT, None)
    if isinstance(raw, bytes):
        hbm = hbm_bytes(raw)
        if hbm is not None:
            stats[HBM_BYTES_STAT] = hbm


Programs = tuple[dict[str, HloModule], dict[str, str], dict[str, str]]


def _programs(cols: xc.XSpaceColumns, source: str) -> Programs:
    modules: dict[str, HloModule] = {}
    names: dict[str, str] = {}
    bad: dict[str, str] = {}
    for plane in cols.planes:
        if text(plane.name) == METADATA_PLANE:
            found_modules, found_names, found_bad = programs_of_plane(plane, source)
            modules.update(found_modules)
            names.update(found_names)
            bad.update(found_bad)
    return modules, names, bad


def programs_of_plane(plane: Any, source: str) -> Programs:
    """The XLA programs of a metadata plane (an ``XPlane`` message): (program id → decoded
    HLO module, program id → name, program id → why its HLO is unreadable)."""
    modules: dict[str, HloModule] = {}
    names: dict[str, str] = {}
    bad: dict[str, str] = {}
    for mid, md in plane.event_metadata.items():
        stats = _metadata_stats(plane, md)
        proto = stats.get(HLO_PROTO_STAT)
        if not isinstance(proto, bytes):
            continue
        name, pid = text(md.name), str(stats.get(PROGRAM_ID_STAT) or "")
        match = _PROGRAM_SUFFIX.match(name)
        if match:
            name = match.group(1)
            pid = pid or str(int(match.group(2)) % (1 << 64))
        pid = pid or str(mid % (1 << 64))
        names[pid] = name
        try:
            modules[pid] = decode_hlo_proto(proto, f"{source}: program {text(md.name)}")
        except ProfileFormatError as err:
            bad[pid] = str(err)
    return modules, names, bad


def _decoded(stats: xc.StatColumns, rows: Any, plane: Any) -> tuple[Any, list[str]]:
    """Each stat row's value as a code into a list of texts (each distinct value decoded
    once, and distinct values found by 1-D sorts, so that millions of rows stay cheap)."""
    codes = np.zeros(len(rows), np.int64)
    texts: list[str] = []
    kinds = stats.kind[rows]
    for kind in np.unique(kinds).tolist():
        sel = np.flatnonzero(kinds == kind)
        # A value is an int, a ref id or a blob offset: with the kind it names the text.
        distinct, first, inverse = np.unique(stats.value[rows[sel]], return_index=True,
                                             return_inverse=True)
        base = len(texts)
        for value, at in zip(distinct.tolist(), first.tolist(), strict=True):
            if kind in (KIND_STR, KIND_BYTES):
                length = int(stats.length[rows[sel[at]]])
                texts.append(stats.blob[value:value + length].decode("utf-8", "replace"))
            elif kind == KIND_REF:
                md = metadata_entry(plane.stat_metadata, value)
                texts.append("" if md is None else text(md.name))
            elif kind == KIND_UINT64:
                texts.append(str(value % (1 << 64)))
            elif kind == KIND_DOUBLE:
                texts.append(repr(float(np.array(value, np.int64).view(np.float64))))
            else:
                texts.append(str(value))
        codes[sel] = base + inverse.reshape(-1)
    return codes, texts


def _kernel_ops(cols: xc.XSpaceColumns, plane: Any, on_plane: Any, stat_event: Any
                ) -> tuple[Any, list[tuple[str, str, str]], Any] | None:
    """Events of a plane that carry ``hlo_op``: (event rows, distinct (program, module, op),
    each row's index into them); None when the plane has no such stat."""
    ids = {text(md.name): mid for mid, md in plane.stat_metadata.items()}
    if HLO_OP_STAT not in ids:
        return None
    st = cols.stats
    here = on_plane[stat_event] if len(stat_event) else np.zeros(0, bool)
    per_event: list[Any] = []
    texts: list[list[str]] = []
    for stat in (PROGRAM_ID_STAT, HLO_MODULE_STAT, HLO_OP_STAT):
        codes = np.full(len(cols.events), -1, np.int64)
        names: list[str] = []
        if stat in ids:
            srows = np.flatnonzero(here & (st.metadata_id == ids[stat]))
            found, names = _decoded(st, srows, plane)
            codes[stat_event[srows]] = found
        per_event.append(codes)
        texts.append(names + [""])  # code -1 reads as ""
    rows = np.flatnonzero(per_event[2] >= 0)
    # One int64 key per row from the three codes (each below its text count + 1).
    sizes = [len(t) for t in texts]
    key = np.zeros(len(rows), np.int64)
    for codes, size in zip(per_event, sizes, strict=True):
        key = key * size + (codes[rows] + 1)
    distinct, inverse = np.unique(key, return_inverse=True)
    triples = []
    for k in distinct.tolist():
        o, k = k % sizes[2], k // sizes[2]
        m, p = k % sizes[1], k // sizes[1]
        triples.append((texts[0][p - 1], texts[1][m - 1], texts[2][o - 1]))
    return rows, triples, inverse.reshape(-1)


def xla_from_columns(cols: xc.XSpaceColumns, source: str = "<bytes>") -> XlaHostOps:
    """The XLA ops and programs of decoded XSpace columns."""
    modules, module_names, bad = _programs(cols, source)
    program_of_name = {v: k for k, v in module_names.items()}
    ev = cols.events
    plane_of_event = cols.lines.plane[ev.line]
    stat_event = np.repeat(np.arange(len(ev), dtype=np.int64), ev.nstats)
    # Picoseconds from the space's first line: counted from the epoch they pass int64's range
    # (line timestamps are wall-clock nanoseconds in JAX's and stepscope's own files).
    origin_ns = int(cols.lines.timestamp_ns.min()) if len(cols.lines.timestamp_ns) else 0
    start_ps = ((cols.lines.timestamp_ns[ev.line] - origin_ns) * 1000
                + ev.offset_ps).astype(np.int64)
    duration_ps = np.maximum(ev.duration_ps.astype(np.int64), 0)  # no negative durations

    ops: list[XlaOp] = []
    op_index: dict[tuple[str, str], int] = {}
    devices: list[DeviceInfo] = []
    parts: list[tuple[Any, Any, int]] = []  # (event rows, op per row, device index)
    executions: dict[int, int] = {}  # op → times it ran, where it runs several kernels

    def op_of(program: str, module: str, name: str, stats: dict[str, Any]) -> int:
        key = (program or module, name)
        if key not in op_index:
            op_index[key] = len(ops)
            ops.append(XlaOp(program, module or module_names.get(program, ""), name, stats))
        return op_index[key]

    device_first = sorted(range(len(cols.planes)),
                          key=lambda i: not _DEVICE_PLANE.match(text(cols.planes[i].name)))
    for index in device_first:
        plane = cols.planes[index]
        plane_name = text(plane.name)
        if plane_name == METADATA_PLANE or (parts and not _DEVICE_PLANE.match(plane_name)):
            continue  # host threads count only where no device ran XLA ops (XLA:CPU)
        on_plane = plane_of_event == index
        xla_lines = [j for j in np.flatnonzero(cols.lines.plane == index).tolist()
                     if (cols.lines.display_name[j] or cols.lines.name[j]) == XLA_OPS_LINE]
        if xla_lines:
            rows = np.flatnonzero(on_plane & np.isin(ev.line, xla_lines))
            mids, inverse = np.unique(ev.metadata_id[rows], return_inverse=True)
            codes = []
            for mid in mids.tolist():
                md = plane.event_metadata.get(mid)
                stats = {} if md is None else _metadata_stats(plane, md)
                name = "" if md is None else text(md.display_name or md.name)
                if md is not None and md.display_name and text(md.name).startswith("%"):
                    stats.setdefault("expression", text(md.name))
                _read_breakdown(stats)
                program = stats.get(PROGRAM_ID_STAT)
                program = "" if program is None else str(int(program) % (1 << 64)) \
                    if isinstance(program, int) else str(program)
                codes.append(op_of(program, "", name or "<unknown op>", stats))
            op_rows = np.array(codes, np.int32)[inverse.reshape(-1)] if len(rows) else \
                np.zeros(0, np.int32)
            _device_clock(cols, plane, index, rows, start_ps, duration_ps, stat_event,
                          origin_ns)
        else:
            found = _kernel_ops(cols, plane, on_plane, stat_event)
            if found is None:
                continue
            rows, triples, inverse = found
            codes = [op_of(program or program_of_name.get(module, ""), module, name, {})
                     for program, module, name in triples]
            op_rows = np.array(codes, np.int32)[inverse] if len(rows) else \
                np.zeros(0, np.int32)
            launch = _int_stat(cols, plane, on_plane, stat_event, LAUNCH_STATS) \
                if any(COMMAND_BUFFER.match(ops[c].name) for c in codes) else None
            if launch is not None:
                _open_buffers(cols, plane, rows, op_rows, start_ps, launch,
                              [(ops[c], c) for c in codes], modules, op_of)
            runs = _executions(op_rows, ev.metadata_id[rows], duration_ps[rows])
            if launch is not None:  # kernels left on a buffer: it ran once per launch
                runs.update(_buffer_runs(launch, rows, op_rows, {
                    c for c in set(op_rows.tolist()) if COMMAND_BUFFER.match(ops[c].name)}))
            for o, n in runs.items():
                executions[o] = executions.get(o, 0) + n
        if not len(rows):
            continue
        span = rows if xla_lines or not _DEVICE_PLANE.match(text(plane.name)) else \
            np.flatnonzero(on_plane)
        devices.append(_device_info(plane, span, start_ps, duration_ps))
        parts.append((rows, op_rows, len(devices) - 1))
    if parts and _DEVICE_PLANE.match(devices[0].name):
        # Devices that ran no XLA op (copies only) still count in the devices' time, idle.
        seen = {d.name for d in devices}
        for index, plane in enumerate(cols.planes):
            if _DEVICE_PLANE.match(text(plane.name)) and text(plane.name) not in seen:
                span = np.flatnonzero(plane_of_event == index)
                if len(span):
                    devices.append(_device_info(plane, span, start_ps, duration_ps))

    if parts:
        rows = np.concatenate([p[0] for p in parts])
        op = np.concatenate([p[1] for p in parts]).astype(np.int32)
        device = np.concatenate([np.full(len(p[0]), p[2], np.int32) for p in parts])
    else:
        rows, op, device = np.zeros(0, np.int64), np.zeros(0, np.int32), np.zeros(0, np.int32)
    return XlaHostOps(ops, devices, op, device, ev.line[rows].astype(np.int32), start_ps[rows],
                      duration_ps[rows], modules, module_names, bad, executions, origin_ns)


def _buffer_runs(launch: Any, rows: Any, op_rows: Any, buffers: set[int]) -> dict[int, int]:
    """How many times each command buffer op (``buffers``) ran: its kernels' distinct
    launch ids (``launch``, per event; -1 unknown)."""
    out: dict[int, int] = {}
    for o in buffers:
        seen = np.unique(launch[rows[op_rows == o]])
        if (seen >= 0).any():
            out[o] = int((seen >= 0).sum())
    return out


def _open_buffers(cols: xc.XSpaceColumns, plane: Any, rows: Any, op_rows: Any, start_ps: Any,
                  launch: Any, ops: list[tuple[XlaOp, int]], modules: dict[str, HloModule],
                  op_of: Any) -> None:
    """Give each kernel of a command buffer the HLO op it runs, where the program's HLO tells
    it (``command_buffers``), in ``op_rows`` in place; the rest keep the buffer."""
    buffers = [(op, code) for op, code in ops if COMMAND_BUFFER.match(op.name)
               and op.program_id in modules]
    if not buffers:
        return
    mids = cols.events.metadata_id[rows]
    distinct, name_code = np.unique(mids, return_inverse=True)
    names = [text(md.name) if (md := plane.event_metadata.get(int(m))) is not None else ""
             for m in distinct.tolist()]
    name_code = name_code.reshape(-1).astype(np.int64)
    for op, code in buffers:
        module = modules[op.program_id]
        outside = {o.name for o, _ in ops if o.program_id == op.program_id}
        mine = np.flatnonzero(op_rows == code)
        found, insts = command_buffers.attribute(
            module, op.name, outside, names, name_code[mine], launch[rows[mine]],
            start_ps[rows[mine]])
        new = np.array([op_of(op.program_id, op.module, i.name, {}) for i in insts] + [code],
                       np.int32)
        op_rows[mine] = new[found]  # -1 reads the last: the buffer itself


def _int_stat(cols: xc.XSpaceColumns, plane: Any, on_plane: Any, stat_event: Any,
              names: tuple[str, ...]) -> Any:
    """Per event: the first of the integer stats ``names`` that the plane has (-1 where an
    event lacks it); None where the plane has none of them."""
    ids = {text(md.name): mid for mid, md in plane.stat_metadata.items()}
    name = next((n for n in names if n in ids), None)
    if name is None or not len(stat_event):
        return None
    st = cols.stats
    srows = np.flatnonzero(on_plane[stat_event] & (st.metadata_id == ids[name])
                           & np.isin(st.kind, (KIND_INT64, KIND_UINT64)))
    out = np.full(len(cols.events), -1, np.int64)
    out[stat_event[srows]] = np.maximum(st.value[srows], 0)
    return out


def _executions(op_rows: Any, kernel: Any, duration: Any) -> dict[int, int]:
    """Per op that ran several distinct kernels on one device: how many times it ran, as the
    runs of its kernel with the most time (the one doing its work: a helper kernel may run
    twice per execution, and a capture's edge may cut off another's first or last run)."""
    if not len(op_rows):
        return {}
    pairs, inverse, counts = np.unique(
        np.stack([op_rows.astype(np.int64), kernel.astype(np.int64)]), axis=1,
        return_inverse=True, return_counts=True)
    time = np.bincount(inverse.reshape(-1), weights=duration, minlength=pairs.shape[1])
    ops, first = np.unique(pairs[0], return_index=True)
    ends = np.r_[first[1:], len(counts)]
    out = {}
    for o, a, b in zip(ops.tolist(), first.tolist(), ends.tolist(), strict=True):
        if b - a > 1:
            out[int(o)] = int(counts[a + int(np.argmax(time[a:b]))])
    return out


def _device_info(plane: Any, span: Any, start_ps: Any, duration_ps: Any) -> DeviceInfo:
    """A device plane's model, stated peaks and the span of the events ``span``.

    A device's time is the span of its XLA ops where it has an "XLA Ops" line, else of all
    its events (kernels and copies outside XLA too), as XProf counts it."""
    pstats = {}
    for stat in plane.stats:
        smd = plane.stat_metadata.get(stat.metadata_id)
        if smd is not None:
            pstats[text(smd.name)] = _stat_value(plane, stat)
    kind = next((str(pstats[k]) for k in DEVICE_KIND_STATS if pstats.get(k)), "")
    peak = pstats.get(PEAK_TFLOPS_STAT)
    hbm = pstats.get(PEAK_HBM_STAT)
    begin = start_ps[span]
    return DeviceInfo(
        text(plane.name), kind, int(begin.min()), int((begin + duration_ps[span]).max()),
        _positive(peak), _positive(hbm),
        {k: pstats[k] for k in DEVICE_PROP_STATS if isinstance(pstats.get(k), (int, str))})


def _positive(value: Any) -> float | None:
    """A stated peak as a finite positive float, or None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) and value > 0 else None


def _device_clock(cols: xc.XSpaceColumns, plane: Any, index: int, rows: Any, start_ps: Any,
                  duration_ps: Any, stat_event: Any, origin_ns: int) -> None:
    """Where events carry their device-clock offset and duration, use those (in place)."""
    ids = {text(md.name): mid for mid, md in plane.stat_metadata.items()}
    st = cols.stats
    wanted = np.zeros(len(cols.events), bool)
    wanted[rows] = True
    for stat, column in ((DEVICE_DURATION_STAT, duration_ps), (DEVICE_OFFSET_STAT, None)):
        if stat not in ids or not len(stat_event):
            continue
        srows = np.flatnonzero((st.metadata_id == ids[stat]) & wanted[stat_event]
                               & np.isin(st.kind, (KIND_INT64, KIND_UINT64)))
        if column is not None:
            column[stat_event[srows]] = np.maximum(st.value[srows], 0)
        else:
            line_ts = cols.lines.timestamp_ns[cols.events.line[stat_event[srows]]]
            start_ps[stat_event[srows]] = (line_ts - origin_ns) * 1000 + st.value[srows]
