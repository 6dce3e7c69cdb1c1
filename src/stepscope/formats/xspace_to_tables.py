"""XSpace columns → a host's EventTable: names interned, typed stats split out, ns times."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from stepscope.formats import xspace_columns as xc
from stepscope.model.events import (
    I32,
    I64,
    TYPED_STATS,
    EventTable,
    Plane,
    StatTable,
    TypedStats,
)
from stepscope.model.locations import as_path, read_bytes
from stepscope.model.schema import NEGATIVE_DURATIONS
from stepscope.model.stat_kinds import KIND_INT64, KIND_REF, KIND_UINT64


def text(value: str | bytes) -> str:
    """A name as text: TensorFlow writes names verbatim, so bytes that are not UTF-8 (which
    protobuf then hands back as bytes) are decoded with replacement characters."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value


def _plane_stats(plane: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for stat in plane.stats:
        which = stat.WhichOneof("value")
        if which is None:
            continue
        value = getattr(stat, which)
        if which == "ref_value":
            value = text(plane.stat_metadata[value].name)
        elif which == "str_value":
            value = text(value)
        out[text(plane.stat_metadata[stat.metadata_id].name)] = value
    return out


def _lookup(keys: I64, table: dict[int, int]) -> I32:
    """Map each key through ``table`` (vectorised); unknown keys map to -1."""
    if not table:
        return np.full(len(keys), -1, dtype=np.int32)
    known = np.array(sorted(table), dtype=np.int64)
    codes = np.array([table[k] for k in known.tolist()], dtype=np.int32)
    low, high = int(known[0]), int(known[-1])
    if low >= 0 and high < 4 * len(known) + 4096:
        # Metadata ids are usually small and dense: one gather from a direct table.
        direct = np.full(high + 2, -1, dtype=np.int32)
        direct[known] = codes
        return direct[np.clip(keys, -1, high + 1)]  # -1 and high + 1 both hold -1
    pos = np.clip(np.searchsorted(known, keys), 0, len(known) - 1)
    return np.where(known[pos] == keys, codes[pos], -1).astype(np.int32)


def _compact(array: Any, keep: Any, chunk: int = 1 << 20) -> Any:
    """``array[keep]`` written over ``array``'s own memory a chunk at a time (a view of its
    start): the columns of millions of stats are not held twice at the load's peak."""
    w = 0
    for lo in range(0, len(array), chunk):
        part = array[lo:lo + chunk][keep[lo:lo + chunk]]
        array[w:w + len(part)] = part  # w <= lo: only rows already read are overwritten
        w += len(part)
    return array[:w]


def _plane_ranges(plane_of: I32, planes: int) -> list[tuple[int, int]]:
    """Each plane's rows as a [start, stop) range, when rows come plane by plane (as the
    decoder writes them); else an empty list."""
    if len(plane_of) and bool(np.any(plane_of[1:] < plane_of[:-1])):
        return []
    bounds = np.searchsorted(plane_of, np.arange(planes + 1))
    return list(zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True))


def from_columns(cols: xc.XSpaceColumns) -> EventTable:
    """Build a host's event table from decoded XSpace columns."""
    ev, st = cols.events, cols.stats
    plane_of_event = cols.lines.plane[ev.line]
    names: list[str] = []
    name_codes: dict[str, int] = {}
    stat_names: list[str] = []
    stat_codes: dict[str, int] = {}
    name = np.full(len(ev), -1, dtype=np.int32)
    stat_event = np.repeat(np.arange(len(ev), dtype=np.int64), ev.nstats)
    stat_name = np.full(len(st.metadata_id), -1, dtype=np.int32)
    stat_value = np.array(st.value, dtype=np.int64)  # a copy: refs are rewritten below
    ranges = _plane_ranges(plane_of_event, len(cols.planes))
    stat_begin = ev.stat_begin()
    for index, plane in enumerate(cols.planes):
        event_map = {}
        for mid, md in plane.event_metadata.items():
            event_name = text(md.name or md.display_name)
            event_map[mid] = name_codes.setdefault(event_name, len(name_codes))
            if event_map[mid] == len(names):
                names.append(event_name)
        stat_map = {}
        for mid, md in plane.stat_metadata.items():
            stat_name_text = text(md.name)
            stat_map[mid] = stat_codes.setdefault(stat_name_text, len(stat_codes))
            if stat_map[mid] == len(stat_names):
                stat_names.append(stat_name_text)
        if ranges:  # the plane's events and stats are slices: no masks over every row
            lo, hi = ranges[index]
            slo, shi = int(stat_begin[lo]), int(stat_begin[hi])
            name[lo:hi] = _lookup(ev.metadata_id[lo:hi], event_map)
            stat_name[slo:shi] = _lookup(st.metadata_id[slo:shi], stat_map)
            refs = slo + np.flatnonzero(st.kind[slo:shi] == KIND_REF)
        else:
            on_plane = plane_of_event == index
            name[on_plane] = _lookup(ev.metadata_id[on_plane], event_map)
            stats_on_plane = on_plane[stat_event]
            stat_name[stats_on_plane] = _lookup(st.metadata_id[stats_on_plane], stat_map)
            refs = np.flatnonzero(stats_on_plane & (st.kind == KIND_REF))
        # A ref stat's value is a stat metadata id of this plane: make it a global code.
        stat_value[refs] = _lookup(stat_value[refs], stat_map)
    if len(name) and name.min() < 0:
        # An event whose metadata id has no entry: keep it, under an explicit name.
        unknown = name_codes.setdefault("<unknown event>", len(name_codes))
        if unknown == len(names):
            names.append("<unknown event>")
        name[name < 0] = unknown

    typed: dict[str, tuple[I64, I64]] = {}
    typed_rows = []
    is_int = (st.kind == KIND_INT64) | (st.kind == KIND_UINT64)
    for stat in TYPED_STATS:
        code = stat_codes.get(stat)
        rows = np.zeros(0, np.int64) if code is None else \
            np.flatnonzero((stat_name == code) & is_int)
        typed[stat] = (stat_event[rows], stat_value[rows])
        typed_rows.append(rows)
    del is_int
    dropped = np.concatenate(typed_rows)
    if len(dropped):
        keep = np.ones(len(stat_name), dtype=bool)
        keep[dropped] = False
        side = StatTable(_compact(stat_event, keep), _compact(stat_name, keep),
                         st.kind[keep], _compact(stat_value, keep), st.length[keep], st.blob,
                         stat_names)
    else:  # nothing typed: the columns as they are (no copies)
        side = StatTable(stat_event, stat_name, st.kind, stat_value, st.length, st.blob,
                         stat_names)

    start_ns = cols.event_start_ns()
    duration_ns = xc.ps_to_ns(ev.duration_ps)
    planes = [Plane(p.id, text(p.name), _plane_stats(p)) for p in cols.planes]
    negative = duration_ns < 0
    if negative.any():  # bad data: an event cannot end before it starts
        duration_ns = np.where(negative, 0, duration_ns)
        for index, count in enumerate(np.bincount(plane_of_event[negative],
                                                  minlength=len(planes)).tolist()):
            if count:
                planes[index].stats[NEGATIVE_DURATIONS] = count
    return EventTable(
        planes=planes,
        line_plane=cols.lines.plane, line_id=cols.lines.id,
        line_name=[text(d or n) for n, d in zip(cols.lines.name, cols.lines.display_name,
                                                strict=True)],
        plane=plane_of_event, line=ev.line, name=name, start_ns=start_ns,
        duration_ns=duration_ns, typed=TypedStats(len(ev), typed), names=names, stats=side,
        hostnames=[text(h) for h in cols.hostnames],
    )


def load_xspace(path: str | Path) -> EventTable:
    """Load one ``.xplane.pb`` file into an event table."""
    path = as_path(path)
    data = read_bytes(path)
    cols = xc.decode_columns(data, str(path))
    del data  # the columns hold what is needed; free the file's bytes before building
    return from_columns(cols)
