"""XSpace bytes → flat columns (NumPy arrays), without one Python object per event.

The compiled decoder (``_xspace_decode``) walks the wire format once; where it was not built,
the same columns come from the protobuf runtime (slower, same result). Plane-level parts
(names, metadata maps, plane stats) stay protobuf messages: they are small.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from google.protobuf.message import DecodeError
from numpy.typing import NDArray

from stepscope import native
from stepscope.formats.xplane_proto import XPlane, XSpace
from stepscope.formats.xspace_compiled import compiled_decoder as compiled_decoder
from stepscope.formats.xspace_compiled import format_error as format_error
from stepscope.model.stat_kinds import (
    KIND_BYTES,
    KIND_DOUBLE,
    KIND_INT64,
    KIND_NONE,
    KIND_REF,
    KIND_STR,
    KIND_UINT64,
)

_xspace_decode: Any = compiled_decoder()

I32 = NDArray[np.int32]
I64 = NDArray[np.int64]


@dataclass
class LineColumns:
    """One row per XLine of every plane."""

    plane: I32  # index into XSpaceColumns.planes
    id: I64
    display_id: I64
    timestamp_ns: I64
    duration_ps: I64
    name: list[str]
    display_name: list[str]


@dataclass
class EventColumns:
    """One row per XEvent, in file order; an event's stats are the next ``nstats`` stat rows."""

    line: I32  # index into LineColumns
    metadata_id: I64  # key into the plane's event_metadata
    offset_ps: I64
    duration_ps: I64
    nstats: I32
    occurrences: I64  # (event index, num_occurrences) pairs, for aggregated events only

    def __len__(self) -> int:
        return len(self.line)

    def stat_begin(self) -> I64:
        """Index of each event's first stat row (length: events + 1)."""
        begin = np.zeros(len(self.nstats) + 1, dtype=np.int64)
        np.cumsum(self.nstats, out=begin[1:])
        return begin


@dataclass
class StatColumns:
    """One row per XStat of an event: ``value`` holds ints, a double's bits, or a blob offset."""

    metadata_id: I64  # key into the plane's stat_metadata
    kind: NDArray[np.int8]  # stat_kinds.KIND_*
    value: I64
    length: I32  # bytes in ``blob`` for str/bytes values
    blob: bytes

    def text(self, row: int) -> str:
        """The str value of stat ``row``."""
        start = int(self.value[row])
        return self.blob[start:start + int(self.length[row])].decode("utf-8", "replace")


@dataclass
class XSpaceColumns:
    """A whole XSpace as columns, with its planes' metadata as protobuf messages."""

    planes: list[Any]  # XPlane messages without lines
    lines: LineColumns
    events: EventColumns
    stats: StatColumns
    hostnames: list[str]
    errors: list[str]
    warnings: list[str]

    def event_start_ns(self) -> I64:
        """Each event's start in ns since the epoch (picoseconds rounded to the nearest ns)."""
        return self.lines.timestamp_ns[self.events.line] + ps_to_ns(self.events.offset_ps)


def ps_to_ns(ps: I64) -> I64:
    """Picoseconds to nanoseconds, rounded to the nearest."""
    return (ps + 500) // 1000


def compiled() -> bool:
    """Whether the compiled decoder is built and not turned off (``STEPSCOPE_PURE_PYTHON``)."""
    return _xspace_decode is not None and not native.pure_python()


def decode_columns(data: bytes, source: str = "<bytes>") -> XSpaceColumns:
    """Decode XSpace bytes; ``source`` names the file in errors."""
    try:
        if compiled():
            return _from_compiled(_xspace_decode.decode(data))
        return decode_columns_protobuf(data)
    except (ValueError, RuntimeError, DecodeError) as err:  # the decoders' and protobuf's
        raise format_error(source, err) from err


def _from_compiled(raw: dict[str, Any]) -> XSpaceColumns:
    def col(name: str, dtype: type) -> Any:
        return np.frombuffer(raw[name], dtype=dtype)

    rest = XSpace.FromString(raw["space_rest"])
    return XSpaceColumns(
        planes=[XPlane.FromString(b) for b in raw["planes"]],
        lines=LineColumns(col("ln_plane", np.int32), col("ln_id", np.int64),
                          col("ln_display_id", np.int64), col("ln_timestamp_ns", np.int64),
                          col("ln_duration_ps", np.int64), raw["line_name"],
                          raw["line_display_name"]),
        events=EventColumns(col("ev_line", np.int32), col("ev_metadata", np.int64),
                            col("ev_offset_ps", np.int64), col("ev_duration_ps", np.int64),
                            col("ev_nstats", np.int32), col("ev_occurrences", np.int64)),
        stats=StatColumns(col("st_metadata", np.int64), col("st_kind", np.int8),
                          col("st_value", np.int64), col("st_len", np.int32),
                          bytes(raw["blob"])),
        hostnames=list(rest.hostnames), errors=list(rest.errors), warnings=list(rest.warnings),
    )


_STAT_KINDS = {"double_value": KIND_DOUBLE, "uint64_value": KIND_UINT64,
               "int64_value": KIND_INT64, "str_value": KIND_STR, "bytes_value": KIND_BYTES,
               "ref_value": KIND_REF}


def decode_columns_protobuf(data: bytes) -> XSpaceColumns:
    """The same columns through the protobuf runtime (the fallback, and a cross-check)."""
    space = XSpace()
    try:
        space.ParseFromString(data)
    except Exception as err:  # protobuf's DecodeError
        raise ValueError(str(err)) from err
    ln: dict[str, list[Any]] = {k: [] for k in
                                ("plane", "id", "display_id", "ts", "dur", "name", "dname")}
    ev: dict[str, list[int]] = {k: [] for k in ("line", "md", "off", "dur", "n", "occ")}
    st: dict[str, list[int]] = {k: [] for k in ("md", "kind", "value", "len")}
    blob = bytearray()
    planes = []
    for plane_index, plane in enumerate(space.planes):
        for line in plane.lines:
            line_index = len(ln["plane"])
            for key, value in (("plane", plane_index), ("id", line.id),
                               ("display_id", line.display_id), ("ts", line.timestamp_ns),
                               ("dur", line.duration_ps), ("name", line.name),
                               ("dname", line.display_name)):
                ln[key].append(value)
            for event in line.events:
                if event.num_occurrences:
                    ev["occ"] += [len(ev["line"]), event.num_occurrences]
                ev["line"].append(line_index)
                ev["md"].append(event.metadata_id)
                ev["off"].append(event.offset_ps)
                ev["dur"].append(event.duration_ps)
                ev["n"].append(len(event.stats))
                for stat in event.stats:
                    which = stat.WhichOneof("value")
                    kind = _STAT_KINDS.get(which or "", KIND_NONE)
                    value, length = 0, 0
                    if kind == KIND_DOUBLE:
                        value = int(np.array(stat.double_value).view(np.int64))
                    elif kind in (KIND_STR, KIND_BYTES):
                        raw = getattr(stat, which or "")
                        raw = raw.encode() if isinstance(raw, str) else raw
                        value, length = len(blob), len(raw)
                        blob += raw
                    elif which:
                        value = int(np.array(getattr(stat, which)).astype(np.uint64)
                                    .view(np.int64))
                    st["md"].append(stat.metadata_id)
                    st["kind"].append(kind)
                    st["value"].append(value)
                    st["len"].append(length)
        bare = XPlane()
        bare.CopyFrom(plane)
        del bare.lines[:]
        planes.append(bare)

    def arr(values: list[Any], dtype: type) -> Any:
        return np.array(values, dtype=dtype)

    return XSpaceColumns(
        planes=planes,
        lines=LineColumns(arr(ln["plane"], np.int32), arr(ln["id"], np.int64),
                          arr(ln["display_id"], np.int64), arr(ln["ts"], np.int64),
                          arr(ln["dur"], np.int64), ln["name"], ln["dname"]),
        events=EventColumns(arr(ev["line"], np.int32), arr(ev["md"], np.int64),
                            arr(ev["off"], np.int64), arr(ev["dur"], np.int64),
                            arr(ev["n"], np.int32), arr(ev["occ"], np.int64)),
        stats=StatColumns(arr(st["md"], np.int64), arr(st["kind"], np.int8),
                          arr(st["value"], np.int64), arr(st["len"], np.int32), bytes(blob)),
        hostnames=list(space.hostnames), errors=list(space.errors),
        warnings=list(space.warnings),
    )
