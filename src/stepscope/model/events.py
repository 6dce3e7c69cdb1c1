"""The in-memory profile of one host: every event of every plane in one columnar table.

Names are dictionary-encoded (one list of distinct names, an int32 code per event); the
well-known stats that analyses join on (step_num, _r, group_id, correlation_id) get typed
columns; every other event stat lives in a side table keyed by event row.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from stepscope.errors import ProfileFormatError
from stepscope.formats import xspace_columns as xc
from stepscope.model import schema

I32 = NDArray[np.int32]
I64 = NDArray[np.int64]

# Value of a typed stat column for events that do not carry that stat.
MISSING = np.iinfo(np.int64).min

# Stats that get a typed int64 column of their own.
TYPED_STATS = (schema.STEP_NUM, schema.ROOT_LEVEL, schema.GROUP_ID, schema.CORRELATION_ID)


@dataclass
class Plane:
    """One plane's identity and its plane-level stats."""

    id: int
    name: str
    stats: dict[str, Any] = field(default_factory=dict)


@dataclass
class StatTable:
    """Event stats other than the typed ones: one row per (event, stat)."""

    event: I64  # row in the EventTable
    name: I32  # index into stat_names
    kind: NDArray[np.int8]  # xspace_columns.KIND_*
    value: I64  # ints as they are, doubles as their bits, str offsets into text, refs as
    # indices into stat_names (the interned string a ref stat stands for)
    length: I32
    text: bytes | memoryview  # a memoryview when read from the cache (no copy)
    stat_names: list[str]

    def value_of(self, row: int) -> Any:
        """The Python value of stat ``row``."""
        kind = int(self.kind[row])
        raw = int(self.value[row])
        if kind == xc.KIND_DOUBLE:
            return float(np.array(raw, dtype=np.int64).view(np.float64))
        if kind == xc.KIND_UINT64:
            return raw & 0xFFFF_FFFF_FFFF_FFFF
        if kind == xc.KIND_REF:
            return self.stat_names[raw]
        if kind in (xc.KIND_STR, xc.KIND_BYTES):
            data = bytes(self.text[raw:raw + int(self.length[row])])
            return data.decode("utf-8", "replace") if kind == xc.KIND_STR else data
        return raw


@dataclass
class EventTable:
    """All events of one host, one row each, in file order."""

    planes: list[Plane]
    line_plane: I32  # per line: index into planes
    line_id: I64
    line_name: list[str]
    plane: I32  # per event: index into planes
    line: I32  # per event: index into the line_* columns
    name: I32  # per event: index into names
    start_ns: I64
    duration_ns: I64
    typed: dict[str, I64]  # TYPED_STATS → column (MISSING where absent)
    names: list[str]
    stats: StatTable
    hostnames: list[str]

    def __len__(self) -> int:
        return len(self.name)

    def text_stat(self, stat: str) -> tuple[I64, I32, list[str]]:
        """A string (or ref) stat as columns: (event rows, value codes, distinct values)."""
        st = self.stats
        try:
            code = st.stat_names.index(stat)
        except ValueError:
            return np.zeros(0, np.int64), np.zeros(0, np.int32), []
        rows = np.flatnonzero((st.name == code) & np.isin(st.kind, (xc.KIND_STR, xc.KIND_REF)))
        # Decode each distinct (kind, value, length) once: values repeat (refs, shared text).
        keys = np.stack([st.kind[rows].astype(np.int64), st.value[rows],
                         st.length[rows].astype(np.int64)], axis=1)
        distinct, first, inverse = np.unique(keys, axis=0, return_index=True,
                                             return_inverse=True)
        texts = [str(st.value_of(int(rows[i]))) for i in first]
        values = sorted(set(texts))
        code_of = {text: i for i, text in enumerate(values)}
        codes = np.array([code_of[t] for t in texts], dtype=np.int32)
        return st.event[rows], codes[inverse.reshape(-1)] if len(rows) else codes, values

    def int_stat(self, stat: str) -> tuple[I64, I64]:
        """An integer stat as columns: (event rows, values)."""
        st = self.stats
        try:
            code = st.stat_names.index(stat)
        except ValueError:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        rows = np.flatnonzero((st.name == code)
                              & np.isin(st.kind, (xc.KIND_INT64, xc.KIND_UINT64)))
        return np.asarray(st.event[rows], np.int64), np.asarray(st.value[rows], np.int64)

    def plane_index(self, name: str) -> int | None:
        """Index of the plane called ``name``, or None."""
        return next((i for i, p in enumerate(self.planes) if p.name == name), None)

    def name_code(self, name: str) -> int | None:
        """The dictionary code of an event name, or None if no event has it."""
        try:
            return self.names.index(name)
        except ValueError:
            return None


def _plane_stats(plane: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for stat in plane.stats:
        which = stat.WhichOneof("value")
        if which is None:
            continue
        value = getattr(stat, which)
        if which == "ref_value":
            value = plane.stat_metadata[value].name
        out[plane.stat_metadata[stat.metadata_id].name] = value
    return out


def _lookup(keys: I64, table: dict[int, int]) -> I32:
    """Map each key through ``table`` (vectorised); unknown keys map to -1."""
    if not table:
        return np.full(len(keys), -1, dtype=np.int32)
    known = np.array(sorted(table), dtype=np.int64)
    codes = np.array([table[k] for k in known.tolist()], dtype=np.int32)
    pos = np.clip(np.searchsorted(known, keys), 0, len(known) - 1)
    return np.where(known[pos] == keys, codes[pos], -1).astype(np.int32)


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
    for index, plane in enumerate(cols.planes):
        event_map = {}
        for mid, md in plane.event_metadata.items():
            text = md.name or md.display_name
            event_map[mid] = name_codes.setdefault(text, len(name_codes))
            if event_map[mid] == len(names):
                names.append(text)
        stat_map = {}
        for mid, md in plane.stat_metadata.items():
            stat_map[mid] = stat_codes.setdefault(md.name, len(stat_codes))
            if stat_map[mid] == len(stat_names):
                stat_names.append(md.name)
        on_plane = plane_of_event == index
        name[on_plane] = _lookup(ev.metadata_id[on_plane], event_map)
        stats_on_plane = on_plane[stat_event]
        stat_name[stats_on_plane] = _lookup(st.metadata_id[stats_on_plane], stat_map)
        # A ref stat's value is a stat metadata id of this plane: make it a global code.
        refs = stats_on_plane & (st.kind == xc.KIND_REF)
        stat_value[refs] = _lookup(stat_value[refs], stat_map)
    if len(name) and name.min() < 0:
        # An event whose metadata id has no entry: keep it, under an explicit name.
        unknown = name_codes.setdefault("<unknown event>", len(name_codes))
        if unknown == len(names):
            names.append("<unknown event>")
        name[name < 0] = unknown

    typed: dict[str, I64] = {}
    is_typed = np.zeros(len(stat_name), dtype=bool)
    for stat in TYPED_STATS:
        column = np.full(len(ev), MISSING, dtype=np.int64)
        code = stat_codes.get(stat)
        if code is not None:
            rows = np.flatnonzero((stat_name == code) & np.isin(
                st.kind, (xc.KIND_INT64, xc.KIND_UINT64)))
            column[stat_event[rows]] = stat_value[rows]
            is_typed[rows] = True
        typed[stat] = column
    keep = ~is_typed
    side = StatTable(stat_event[keep], stat_name[keep], st.kind[keep], stat_value[keep],
                     st.length[keep], st.blob, stat_names)

    start_ns = cols.event_start_ns()
    return EventTable(
        planes=[Plane(p.id, p.name, _plane_stats(p)) for p in cols.planes],
        line_plane=cols.lines.plane, line_id=cols.lines.id,
        line_name=[d or n for n, d in zip(cols.lines.name, cols.lines.display_name,
                                          strict=True)],
        plane=plane_of_event, line=ev.line, name=name, start_ns=start_ns,
        duration_ns=xc.ps_to_ns(ev.duration_ps), typed=typed, names=names, stats=side,
        hostnames=cols.hostnames,
    )


def load_xspace(path: str | Path) -> EventTable:
    """Load one ``.xplane.pb`` file into an event table."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as err:
        raise ProfileFormatError(f"Cannot read {path} ({err.strerror or err}).") from err
    cols = xc.decode_columns(data, str(path))
    del data  # the columns hold what is needed; free the file's bytes before building
    return from_columns(cols)
