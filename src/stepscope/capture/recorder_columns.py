"""A recorder's buffers as columns (NumPy arrays), and back to tuples where asked.

The compiled records (``records.h``) are read in place as structured arrays; tuples (the
pure-Python recorder, and producers of rare events) are turned into the same columns one
event at a time. Names and string stat values are ids into the recorder's ``names``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from stepscope.capture import recorder
from stepscope.capture.recorder import ThreadBuffer

# Stat kinds, as records.h numbers them.
STAT_INT, STAT_UINT, STAT_DOUBLE, STAT_BOOL, STAT_STR, STAT_OBJ = range(1, 7)

_INT64_MIN, _INT64_MAX, _UINT64_MAX = -(2**63), 2**63 - 1, 2**64 - 1
_DOUBLE = struct.Struct("<d")
_INT64 = struct.Struct("<q")

I32 = NDArray[np.int32]
I64 = NDArray[np.int64]


@dataclass
class EventColumns:
    """Events of one line, one row each; an event's stats are the next ``nstats`` stat rows."""

    name: I32
    start: I64
    end: I64
    nstats: I32
    stat_key: I32
    stat_kind: I32
    stat_value: I64

    def __len__(self) -> int:
        return len(self.name)

    @staticmethod
    def empty() -> EventColumns:
        """No events."""
        i32, i64 = np.zeros(0, np.int32), np.zeros(0, np.int64)
        return EventColumns(i32, i64, i64, i32, i32, i32, i64)

    @staticmethod
    def concat(parts: list[EventColumns]) -> EventColumns:
        """The rows of ``parts``, one after the other."""
        if len(parts) == 1:
            return parts[0]
        if not parts:
            return EventColumns.empty()
        return EventColumns(*(np.concatenate([getattr(p, f) for p in parts])
                              for f in ("name", "start", "end", "nstats", "stat_key",
                                        "stat_kind", "stat_value")))


def records_columns(records: Any) -> EventColumns:
    """The columns of one compiled ``Records`` (each field copied out contiguous, in C)."""
    name, start, end, nstats, key, kind, value = records.columns()
    i32, i64 = np.dtype("<i4"), np.dtype("<i8")
    return EventColumns(np.frombuffer(name, i32), np.frombuffer(start, i64),
                        np.frombuffer(end, i64), np.frombuffer(nstats, i32),
                        np.frombuffer(key, i32), np.frombuffer(kind, i32),
                        np.frombuffer(value, i64))


def stat_value(names: Any, value: Any) -> tuple[int, int]:
    """``(kind, value)`` of one stat value, as the compiled records store it."""
    if isinstance(value, bool):
        return STAT_BOOL, int(value)
    if isinstance(value, int):
        if _INT64_MIN <= value <= _INT64_MAX:
            return STAT_INT, int(value)
        if 0 <= value <= _UINT64_MAX:
            return STAT_UINT, int(value) - 2**64  # the same bits, as int64
        return STAT_OBJ, names.keep(value)
    if isinstance(value, float):
        return STAT_DOUBLE, _INT64.unpack(_DOUBLE.pack(value))[0]
    if type(value) is str:
        return STAT_STR, names.intern(value)
    return STAT_OBJ, names.keep(value)


def tuples_to_columns(events: list[Any], names: Any) -> EventColumns:
    """Columns of ``(name, start_ns, end_ns[, stats])`` tuples (one Python step per event)."""
    n = len(events)
    name = np.empty(n, np.int32)
    start = np.empty(n, np.int64)
    end = np.empty(n, np.int64)
    nstats = np.zeros(n, np.int32)
    keys: list[int] = []
    kinds: list[int] = []
    values: list[int] = []
    intern = names.intern
    for i, event in enumerate(events):
        name[i] = intern(event[0])
        start[i] = event[1]
        end[i] = event[2]
        stats = event[3] if len(event) > 3 else None
        if stats:
            nstats[i] = len(stats)
            for key, value in stats.items():
                keys.append(intern(key if isinstance(key, str) else str(key)))
                kind, v = stat_value(names, value)
                kinds.append(kind)
                values.append(v)
    return EventColumns(name, start, end, nstats, np.array(keys, np.int32),
                        np.array(kinds, np.int32), np.array(values, np.int64))


def buffer_columns(buf: ThreadBuffer, names: Any) -> EventColumns:
    """Every event of one buffer: its tuples, then its records."""
    parts = []
    if buf.listed:
        parts.append(tuples_to_columns(buf.listed, names))
    if buf.records is not None and len(buf.records):
        parts.append(records_columns(buf.records))
    return EventColumns.concat(parts)


def line_records(names: Any, sources: list[ThreadBuffer | list[Any]]) -> Any:
    """One compiled ``Records`` (of ``names``) holding the events of ``sources`` (buffers,
    or lists of event tuples) in the order ``buffer_columns`` reads them: a buffer's tuples,
    then its records. A lone buffer of records only is returned as it is; otherwise the
    events are copied (threads whose id was reused, and the rare tuples)."""
    if len(sources) == 1:
        only = sources[0]
        if isinstance(only, ThreadBuffer) and not only.listed and only.records is not None:
            return only.records
    out = recorder._fastpath.Records(names)
    for source in sources:
        tuples = source.listed if isinstance(source, ThreadBuffer) else source
        for event in tuples:
            stats = event[3] if len(event) > 3 else None
            out.add(event[0], int(event[1]), int(event[2]),
                    dict(stats) if stats else None)
        if isinstance(source, ThreadBuffer) and source.records is not None:
            out.extend(source.records)
    return out


def _value_of(objects: list[Any], kind: int, value: int) -> Any:
    if kind == STAT_INT:
        return value
    if kind == STAT_BOOL:
        return bool(value)
    if kind == STAT_UINT:
        return value + 2**64 if value < 0 else value
    if kind == STAT_DOUBLE:
        return _DOUBLE.unpack(_INT64.pack(value))[0]
    return objects[value]


def records_to_tuples(records: Any, with_stats: bool) -> list[Any]:
    """The events of one compiled ``Records`` as tuples (the slow path, for inspection):
    ``(name, start_ns, end_ns, stats or None)``, or without stats ``(what, start, end)``."""
    cols = records_columns(records)
    objects = records.names.objects
    names = [objects[i] for i in cols.name.tolist()]
    starts, ends = cols.start.tolist(), cols.end.tolist()
    if not with_stats:
        return list(zip(names, starts, ends, strict=True))
    keys = [objects[i] for i in cols.stat_key.tolist()]
    kinds, values = cols.stat_kind.tolist(), cols.stat_value.tolist()
    out: list[Any] = []
    row = 0
    for name, start, end, n in zip(names, starts, ends, cols.nstats.tolist(), strict=True):
        stats = None
        if n:
            stats = {keys[j]: _value_of(objects, kinds[j], values[j])
                     for j in range(row, row + n)}
            row += n
        out.append((name, start, end, stats))
    return out
