"""Columns → XPlane bytes, encoded by NumPy a column at a time (no Python object per event).

The reverse of ``xspace_columns`` for the planes a profiler writes: every event's
``XEvent`` (and its ``XStat``s) is laid out by the compiled ``_xplane_encode`` where it was
built, else in one byte array by vectorised varint writes (the same bytes, slower); the few
per-line and per-plane parts (line headers, metadata maps) go through the protobuf runtime.
The bytes parse to the message ``xplane_builder`` would have built from the same events,
with fields in the same order (protobuf's own: by field number).

Wire facts used (``xplane_proto``): XPlane.lines = 3; XLine.events = 4; XEvent metadata_id = 1,
offset_ps = 2 (in a oneof: written even when 0), duration_ps = 3 (left out when 0), stats = 4;
XStat metadata_id = 1, double_value = 2 (fixed64), uint64_value = 3, int64_value = 4,
str_value = 5, bytes_value = 6 (a oneof: written even when 0); XSpace.planes = 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from stepscope.formats.xplane_proto import XLine, XPlane
from stepscope.native import compiled

_xplane_encode: Any = compiled("stepscope.formats._xplane_encode")

# XStat value fields, for PlaneColumns.stat_field.
DOUBLE_VALUE, UINT64_VALUE, INT64_VALUE, STR_VALUE, BYTES_VALUE = 2, 3, 4, 5, 6

_LEN = 2  # wire type of length-delimited fields
_U8 = NDArray[np.uint8]
_U64 = NDArray[np.uint64]
_I64 = NDArray[np.int64]
# 2**(7k): a uint64 needs more than k varint bytes from this value on. (No module-level
# arrays: one made while a session's NumPy allocator hook is installed would be freed
# through it at interpreter exit.)
_VARINT_STEPS = [1 << (7 * k) for k in range(1, 10)]


@dataclass
class PlaneColumns:
    """One XPlane's lines and events as columns.

    Events are grouped by line (``line_begin[i]:line_begin[i + 1]`` are line i's rows, in the
    order they are written); an event's stats are the next ``nstats`` stat rows. Metadata
    ids are positions in ``event_names`` / ``stat_names`` plus 1. ``stat_value`` holds the
    int64 (a uint64's bits, a double's bits) or, for str and bytes values, an index into
    ``blobs``.
    """

    id: int
    name: str
    event_names: list[str]
    stat_names: list[str]
    line_id: list[int]
    line_name: list[str]
    line_timestamp_ns: list[int]
    line_begin: _I64
    metadata_id: _I64
    offset_ps: _I64
    duration_ps: _I64
    nstats: NDArray[np.int32]
    stat_metadata_id: _I64
    stat_field: NDArray[np.int8]
    stat_value: _I64
    blobs: list[bytes]


def varint_sizes(values: _U64) -> _I64:
    """Bytes each value takes as a varint (1 to 10)."""
    sizes = np.ones(len(values), dtype=np.int64)
    for step in _VARINT_STEPS:
        above = values >= np.uint64(step)
        if not above.any():
            break
        sizes += above
    return sizes


def put_varints(out: _U8, at: _I64, values: _U64, sizes: _I64) -> None:
    """Write each value as a varint at its position in ``out`` (``sizes`` from varint_sizes)."""
    if not len(values):
        return
    for k in range(int(sizes.max())):
        rows = slice(None) if k == 0 else np.flatnonzero(sizes > k)
        v = values[rows]
        byte = (v >> np.uint64(7 * k)) & np.uint64(0x7F)
        more = sizes[rows] > k + 1
        out[at[rows] + k] = (byte | (more.astype(np.uint64) << np.uint64(7))).astype(np.uint8)


def _as_u64(values: _I64) -> _U64:
    """int64 → uint64 with the same bits (a negative int64 is a 10-byte varint, as protobuf
    writes it)."""
    return np.ascontiguousarray(values, dtype=np.int64).view(np.uint64)


def _exclusive_cumsum(sizes: NDArray[np.integer[Any]]) -> _I64:
    out = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(sizes, out=out[1:])
    return out


def _copy_runs(out: _U8, dst: _I64, src_bytes: _U8, src: _I64, lengths: _I64) -> None:
    """``out[dst[i]:dst[i] + lengths[i]] = src_bytes[src[i]:src[i] + lengths[i]]`` for each i."""
    total = int(lengths.sum())
    if total:
        step = np.arange(total, dtype=np.int64) - np.repeat(_exclusive_cumsum(lengths)[:-1],
                                                            lengths)
        out[np.repeat(dst, lengths) + step] = src_bytes[np.repeat(src, lengths) + step]


def _encode_stats(p: PlaneColumns) -> tuple[_I64, _U8]:
    """Each stat row's framed size (tag, length, XStat) and all of them laid end to end."""
    n = len(p.stat_metadata_id)
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.uint8)
    mid = _as_u64(p.stat_metadata_id)
    mid_size = varint_sizes(mid)
    field = p.stat_field.astype(np.int64)
    is_double = field == DOUBLE_VALUE
    is_blob = (field == STR_VALUE) | (field == BYTES_VALUE)
    blob_sizes = np.array([len(b) for b in p.blobs], dtype=np.int64)
    blob_len = np.zeros(n, dtype=np.int64)
    blob_len[is_blob] = blob_sizes[p.stat_value[is_blob]]
    value_u64 = _as_u64(p.stat_value)
    # The value part: a varint, 8 bytes, or a length varint and the bytes.
    varint_u64 = np.where(is_blob, _as_u64(blob_len), value_u64)
    varint_size = varint_sizes(varint_u64)
    value_size = np.where(is_double, 8, varint_size + blob_len)
    body = 1 + mid_size + 1 + value_size
    body_size = varint_sizes(_as_u64(body))
    framed = 1 + body_size + body
    begin = _exclusive_cumsum(framed)
    out = np.zeros(int(begin[-1]), dtype=np.uint8)
    at = begin[:-1]
    out[at] = (4 << 3) | _LEN  # XEvent.stats
    put_varints(out, at + 1, _as_u64(body), body_size)
    at = at + 1 + body_size
    out[at] = (1 << 3) | 0  # XStat.metadata_id
    put_varints(out, at + 1, mid, mid_size)
    at = at + 1 + mid_size
    wire = np.where(is_double, 1, np.where(is_blob, _LEN, 0))
    out[at] = ((field << 3) | wire).astype(np.uint8)
    at = at + 1
    rows = np.flatnonzero(~is_double)
    put_varints(out, at[rows], varint_u64[rows], varint_size[rows])
    rows = np.flatnonzero(is_double)
    if len(rows):
        raw = value_u64[rows].astype("<u8").view(np.uint8).reshape(-1, 8)
        out[at[rows, None] + np.arange(8)] = raw
    rows = np.flatnonzero(is_blob)
    if len(rows):
        joined = np.frombuffer(b"".join(p.blobs), dtype=np.uint8)
        blob_begin = _exclusive_cumsum(blob_sizes)
        lengths = blob_len[rows]
        dst = at[rows] + varint_size[rows]
        src = blob_begin[p.stat_value[rows]]
        _copy_runs(out, dst, joined, src, lengths)
    return framed, out


def _encode_events(p: PlaneColumns) -> tuple[_I64, _U8]:
    """Each event's position in the byte array of every line's ``events`` fields, and it."""
    stat_framed, stat_bytes = _encode_stats(p)
    stat_row = _exclusive_cumsum(p.nstats)
    stat_at = _exclusive_cumsum(stat_framed)
    stats_size = stat_at[stat_row[1:]] - stat_at[stat_row[:-1]]
    mid, off, dur = _as_u64(p.metadata_id), _as_u64(p.offset_ps), _as_u64(p.duration_ps)
    mid_size, off_size, dur_size = varint_sizes(mid), varint_sizes(off), varint_sizes(dur)
    has_dur = p.duration_ps != 0
    has_mid = p.metadata_id != 0
    body = (has_mid * (1 + mid_size) + 1 + off_size + has_dur * (1 + dur_size) + stats_size)
    body_size = varint_sizes(_as_u64(body))
    framed = 1 + body_size + body
    begin = _exclusive_cumsum(framed)
    out = np.empty(int(begin[-1]), dtype=np.uint8)
    at = begin[:-1]
    out[at] = (4 << 3) | _LEN  # XLine.events
    put_varints(out, at + 1, _as_u64(body), body_size)
    at = at + 1 + body_size
    rows = np.flatnonzero(has_mid)
    out[at[rows]] = (1 << 3) | 0  # metadata_id
    put_varints(out, at[rows] + 1, mid[rows], mid_size[rows])
    at = at + has_mid * (1 + mid_size)
    out[at] = (2 << 3) | 0  # offset_ps
    put_varints(out, at + 1, off, off_size)
    at = at + 1 + off_size
    rows = np.flatnonzero(has_dur)
    out[at[rows]] = (3 << 3) | 0  # duration_ps
    put_varints(out, at[rows] + 1, dur[rows], dur_size[rows])
    at = at + has_dur * (1 + dur_size)
    if len(stat_bytes):
        # Each event's stats are one run of stat_bytes: copy the runs to their places.
        _copy_runs(out, at, stat_bytes, stat_at[stat_row[:-1]], stats_size)
    return begin, out


def line_events(p: PlaneColumns, compiled: bool | None = None) -> list[bytes | memoryview]:
    """Each line's ``XLine.events`` fields, serialised; ``compiled`` picks the encoder
    (None: the compiled one where it was built)."""
    if compiled is None:
        compiled = _xplane_encode is not None
    if compiled:
        blob_begin = _exclusive_cumsum(np.array([len(b) for b in p.blobs], dtype=np.int64))
        as64 = np.ascontiguousarray
        return _xplane_encode.encode_events(  # type: ignore[no-any-return]
            as64(p.metadata_id, np.int64), as64(p.offset_ps, np.int64),
            as64(p.duration_ps, np.int64), as64(p.nstats, np.int32),
            as64(p.stat_metadata_id, np.int64), as64(p.stat_field, np.int8),
            as64(p.stat_value, np.int64), blob_begin, b"".join(p.blobs),
            as64(p.line_begin, np.int64))
    begin, events = _encode_events(p)
    view = memoryview(events.data) if len(events) else memoryview(b"")
    bounds = begin[p.line_begin].tolist()
    return [view[lo:hi] for lo, hi in zip(bounds[:-1], bounds[1:], strict=True)]


def _len_prefix(field: int, size: int) -> bytes:
    """The key and length of a length-delimited field of ``size`` bytes."""
    out = bytearray([(field << 3) | _LEN])
    while True:
        byte = size & 0x7F
        size >>= 7
        if size:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def encode_plane(p: PlaneColumns) -> bytes:
    """The serialised ``XPlane``."""
    return b"".join(plane_parts(p.id, p.name, p.line_id, p.line_name, p.line_timestamp_ns,
                                line_events(p), p.event_names, p.stat_names))


def plane_parts(plane_id: int, name: str, line_id: list[int], line_name: list[str],
                line_timestamp_ns: list[int], events: list[bytes | memoryview],
                event_names: list[str], stat_names: list[str]) -> list[bytes | memoryview]:
    """A serialised ``XPlane`` in parts, to be joined (or written one after the other):
    ``events`` holds each line's ``XLine.events`` fields, metadata ids are positions in
    ``event_names`` / ``stat_names`` plus 1."""
    # Each message's fields in field-number order, as protobuf writes them: a plane's id and
    # name, its lines, its metadata; a line's id, name and timestamp, its events, display_id.
    parts: list[bytes | memoryview] = [XPlane(id=plane_id, name=name).SerializeToString()]
    for i, one_id in enumerate(line_id):
        head = XLine(id=one_id, name=line_name[i],
                     timestamp_ns=line_timestamp_ns[i]).SerializeToString()
        tail = XLine(display_id=one_id).SerializeToString()
        body = events[i]
        parts += [_len_prefix(3, len(head) + len(body) + len(tail)), head, body, tail]
    meta = XPlane()
    for i, text in enumerate(event_names, start=1):
        md = meta.event_metadata[i]
        md.id = i
        md.name = text
    for i, text in enumerate(stat_names, start=1):
        md = meta.stat_metadata[i]
        md.id = i
        md.name = text
    parts.append(meta.SerializeToString())
    return parts


def space_plane_parts(plane: list[bytes | memoryview]) -> list[bytes | memoryview]:
    """One ``XSpace.planes`` field holding the plane of ``plane_parts``, in parts."""
    return [_len_prefix(1, sum(len(part) for part in plane)), *plane]


def encode_space_planes(planes: list[bytes]) -> bytes:
    """The ``planes`` fields of an XSpace holding these serialised planes, in order."""
    return b"".join(part for plane in planes for part in (_len_prefix(1, len(plane)), plane))
