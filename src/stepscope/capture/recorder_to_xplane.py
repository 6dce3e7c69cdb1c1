"""A recorder's events → an XPlane: from columns (``plane_columns``, then ``xplane_encoder``),
or straight from the compiled records (``plane_parts``: ``records_xplane.c``), the same bytes.

Per line: events that began before ``keep_from_ns`` (or, where given, at or after
``keep_until_ns``) are left out, the rest sorted by start
(parents before children: the longer first), times made offsets in picoseconds from the
line's timestamp. Event and stat metadata ids are given in order of first use, names merged
by text, as ``xplane_builder`` gives them. Python work is per line and per distinct name or
string value, never per event.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from stepscope.capture import recorder
from stepscope.capture.recorder_columns import (
    I64,
    STAT_BOOL,
    STAT_DOUBLE,
    STAT_INT,
    STAT_OBJ,
    STAT_STR,
    STAT_UINT,
    EventColumns,
    records_columns,
)
from stepscope.capture.safe_text import TextRepairs
from stepscope.formats import xplane_encoder as enc

# (line id, line name, its events).
Line = tuple[int, str, EventColumns]
# (line id, line name, its events as columns or as one compiled Records).
AnyLine = tuple[int, str, Any]

# The XStat value field of each stat kind (strings' and objects' are settled per value).
_FIELD_OF_KIND = {STAT_INT: enc.INT64_VALUE, STAT_BOOL: enc.INT64_VALUE,
                  STAT_UINT: enc.UINT64_VALUE, STAT_DOUBLE: enc.DOUBLE_VALUE,
                  STAT_STR: enc.STR_VALUE, STAT_OBJ: enc.STR_VALUE}


def _exclusive_cumsum(sizes: Any) -> I64:
    out = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(sizes, out=out[1:])
    return out


def _ordered(cols: EventColumns, keep_from_ns: int,
             keep_until_ns: int | None = None) -> EventColumns:
    """The events kept, sorted by (start, longest first), with their stats in that order."""
    rows = None
    if keep_until_ns is not None:
        rows = np.flatnonzero((cols.start >= keep_from_ns) & (cols.start < keep_until_ns))
    elif keep_from_ns:
        rows = np.flatnonzero(cols.start >= keep_from_ns)
    start = cols.start if rows is None else cols.start[rows]
    end = cols.end if rows is None else cols.end[rows]
    order = np.lexsort((-end, start))
    if rows is not None:
        order = rows[order]
    nstats = cols.nstats[order]
    stat_rows: Any = slice(0, 0)
    if len(cols.stat_key):
        first = _exclusive_cumsum(cols.nstats)[:-1][order]
        within = np.arange(int(nstats.sum()), dtype=np.int64) - np.repeat(
            _exclusive_cumsum(nstats)[:-1], nstats)
        stat_rows = np.repeat(first, nstats) + within
    return EventColumns(cols.name[order], cols.start[order], cols.end[order], nstats,
                        cols.stat_key[stat_rows], cols.stat_kind[stat_rows],
                        cols.stat_value[stat_rows])


def _first_use_ids(ids: Any, text_of: Callable[[int], str],
                   size: int) -> tuple[I64, list[str]]:
    """Metadata ids (from 1) for name ids, in order of first use, equal texts merged."""
    if not len(ids):
        return np.zeros(0, dtype=np.int64), []
    first = np.full(size, len(ids), dtype=np.int64)
    np.minimum.at(first, ids, np.arange(len(ids), dtype=np.int64))
    used = np.flatnonzero(first < len(ids))
    md_of = np.zeros(size, dtype=np.int64)
    by_text: dict[str, int] = {}
    for name_id in used[np.argsort(first[used], kind="stable")].tolist():
        md_of[name_id] = by_text.setdefault(text_of(name_id), len(by_text) + 1)
    return md_of[ids], list(by_text)


def _stat_values(kind: Any, value: Any, objects: list[Any],
                 repairs: TextRepairs) -> tuple[Any, I64, list[bytes]]:
    """XStat value fields, values (blob indices for strings and bytes), and the blobs."""
    field_of_kind = np.zeros(max(_FIELD_OF_KIND) + 1, dtype=np.int8)
    for k, f in _FIELD_OF_KIND.items():
        field_of_kind[k] = f
    field = field_of_kind[kind]
    value = value.copy()
    blobs: list[bytes] = []
    rows = np.flatnonzero((kind == STAT_STR) | (kind == STAT_OBJ))
    if len(rows):
        uniq, inverse = np.unique(value[rows], return_inverse=True)
        fields = np.empty(len(uniq), dtype=np.int8)
        for j, obj_id in enumerate(uniq.tolist()):
            obj = objects[obj_id]
            if isinstance(obj, bytes):
                fields[j] = enc.BYTES_VALUE
                blobs.append(obj)
            else:
                fields[j] = enc.STR_VALUE
                blobs.append(repairs.text(obj).encode("utf-8"))
        field[rows] = fields[inverse]
        value[rows] = inverse
    return field, value, blobs


def plane_columns(plane_id: int, plane_name: str, lines: list[Line], objects: list[Any],
                  timestamp_ns: int, keep_from_ns: int,
                  name_of: Callable[[Any], str],
                  keep_until_ns: int | None = None,
                  repairs: TextRepairs | None = None) -> enc.PlaneColumns:
    """The plane holding ``lines``; ``objects`` are the recorder's names by id, and
    ``name_of`` gives an event's name from its object.

    A name or value that cannot be written as UTF-8 text (or whose ``str()`` raises) is
    replaced, and counted in ``repairs``.
    """
    if repairs is None:
        repairs = TextRepairs()
    fix = repairs.text

    def event_name(i: int) -> str:
        try:
            name = name_of(objects[i])
        except Exception:  # noqa: BLE001 - a user's object whose name cannot be made
            repairs.count += 1
            return "<unprintable name>"
        return fix(name)

    ordered = [_ordered(cols, keep_from_ns, keep_until_ns) for _, _, cols in lines]
    cols = EventColumns.concat(ordered)
    size = len(objects)
    metadata_id, event_names = _first_use_ids(cols.name, event_name, size)
    stat_md, stat_names = _first_use_ids(cols.stat_key, lambda i: fix(objects[i]), size)
    field, value, blobs = _stat_values(cols.stat_kind, cols.stat_value, objects, repairs)
    return enc.PlaneColumns(
        id=plane_id, name=plane_name, event_names=event_names, stat_names=stat_names,
        line_id=[line_id for line_id, _, _ in lines],
        line_name=[fix(name) for _, name, _ in lines],
        line_timestamp_ns=[timestamp_ns] * len(lines),
        line_begin=_exclusive_cumsum([len(c) for c in ordered]),
        metadata_id=metadata_id,
        offset_ps=(cols.start - timestamp_ns) * 1000,
        duration_ps=(cols.end - cols.start) * 1000,
        nstats=cols.nstats.astype(np.int32, copy=False),
        stat_metadata_id=stat_md, stat_field=field, stat_value=value, blobs=blobs)



def _metadata_of(ids: Any, text_of: Callable[[int], str], size: int) -> tuple[I64, list[str]]:
    """Metadata ids (from 1) by Names id for ``ids`` (in order of first use), equal texts
    merged, and the texts."""
    md_of = np.zeros(size, dtype=np.int64)
    by_text: dict[str, int] = {}
    for name_id in ids.tolist():
        md_of[name_id] = by_text.setdefault(text_of(name_id), len(by_text) + 1)
    return md_of, list(by_text)


def _blobs_of(value_ids: Any, objects: list[Any], repairs: TextRepairs,
              size: int) -> tuple[I64, Any, I64, bytes]:
    """For string (and object) stat values: the blob of each Names id (-1 for none), each
    blob's XStat field, where each begins in the joined blobs, and those."""
    blob_of = np.full(size, -1, dtype=np.int64)
    fields = np.empty(len(value_ids), dtype=np.int8)
    blobs: list[bytes] = []
    for j, obj_id in enumerate(value_ids.tolist()):
        obj = objects[obj_id]
        blob_of[obj_id] = j
        if isinstance(obj, bytes):
            fields[j] = enc.BYTES_VALUE
            blobs.append(obj)
        else:
            fields[j] = enc.STR_VALUE
            blobs.append(repairs.text(obj).encode("utf-8"))
    begin = _exclusive_cumsum([len(b) for b in blobs])
    return blob_of, fields, begin, b"".join(blobs)


def plane_parts(plane_id: int, plane_name: str, lines: list[AnyLine], objects: list[Any],
                timestamp_ns: int, keep_from_ns: int, name_of: Callable[[Any], str],
                keep_until_ns: int | None = None, repairs: TextRepairs | None = None,
                release: bool = False,
                compiled: bool | None = None) -> list[bytes | memoryview]:
    """The serialised XPlane holding ``lines``, in parts (``xplane_encoder.plane_parts``),
    as ``plane_columns`` and ``encode_plane`` would write it.

    Where every line holds one compiled ``Records`` (and ``compiled`` is not False), the
    events go from the records' chunks to bytes in C, one line at a time, with no column
    per event; ``release`` then frees each line's records once its bytes are made (the
    session is over). Otherwise records are read as columns first. ``objects`` are the
    names by id (of the records' ``Names``).
    """
    if repairs is None:
        repairs = TextRepairs()
    fp = recorder._fastpath
    fast = (compiled is not False and fp is not None
            and all(not isinstance(events, EventColumns) for _, _, events in lines))
    if not fast:
        cols: list[Line] = [(line_id, name, events if isinstance(events, EventColumns)
                             else records_columns(events)) for line_id, name, events in lines]
        p = plane_columns(plane_id, plane_name, cols, objects, timestamp_ns, keep_from_ns,
                          name_of, keep_until_ns, repairs)
        return enc.plane_parts(p.id, p.name, p.line_id, p.line_name, p.line_timestamp_ns,
                               enc.line_events(p), p.event_names, p.stat_names)
    fix = repairs.text

    def event_name(i: int) -> str:
        try:
            name = name_of(objects[i])
        except Exception:  # noqa: BLE001 - a user's object whose name cannot be made
            repairs.count += 1
            return "<unprintable name>"
        return fix(name)

    # As _ordered: a keep_from_ns of 0 keeps everything, negative starts too.
    orders = [fp.line_order(records, keep_from_ns or None, keep_until_ns)
              for _, _, records in lines]
    name_ids, key_ids, value_ids = (np.frombuffer(ids, dtype=np.int32) for ids in
                                    fp.first_uses([(records, order) for (_, _, records), order
                                                   in zip(lines, orders, strict=True)]))
    size = len(objects)
    md_name, event_names = _metadata_of(name_ids, event_name, size)
    md_key, stat_names = _metadata_of(key_ids, lambda i: fix(objects[i]), size)
    blob_of, blob_field, blob_begin, blobs = _blobs_of(value_ids, objects, repairs, size)
    events: list[bytes | memoryview] = []
    for i, (_, _, records) in enumerate(lines):
        events.append(fp.encode_line(records, orders[i], timestamp_ns, md_name, md_key,
                                     blob_of, blob_field, blob_begin, blobs))
        orders[i] = b""  # its memory goes (b"" orders nothing; None would be all)
        if release:
            records.clear()
    return enc.plane_parts(plane_id, plane_name, [line_id for line_id, _, _ in lines],
                           [fix(name) for _, name, _ in lines], [timestamp_ns] * len(lines),
                           events, event_names, stat_names)
