"""XSpace columns → a host's EventTable: names interned, typed stats split out, ns times."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from google.protobuf.message import DecodeError
from numpy.typing import NDArray

from stepscope.errors import ProfileFormatError
from stepscope.formats import xspace_columns as xc
from stepscope.formats.xplane_proto import XPlane, XSpace, metadata_entry
from stepscope.formats.xspace_compiled import decode_threads as decode_threads
from stepscope.formats.xspace_compiled import text as text
from stepscope.model.events import (
    I32,
    I64,
    TYPED_STATS,
    EventTable,
    Plane,
    StatTable,
    TypedStats,
    narrow_codes,
    narrow_durations,
)
from stepscope.model.locations import as_path, is_remote, read_bytes
from stepscope.model.schema import NEGATIVE_DURATIONS, XLA_OP_METADATA
from stepscope.model.stat_kinds import (
    KIND_BYTES,
    KIND_INT64,
    KIND_REF,
    KIND_STR,
    KIND_UINT64,
)

UNKNOWN_STAT = "<unknown stat>"  # the name of a stat (or ref) whose metadata id has no entry


def _stat_name(plane: Any, key: int) -> str:
    md = metadata_entry(plane.stat_metadata, key)
    return UNKNOWN_STAT if md is None else text(md.name)


def _plane_stats(plane: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for stat in plane.stats:
        which = stat.WhichOneof("value")
        if which is None:
            continue
        value = getattr(stat, which)
        if which == "ref_value":
            value = _stat_name(plane, value)
        elif which == "str_value":
            value = text(value)
        out[_stat_name(plane, stat.metadata_id)] = value
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


class _Dictionaries:
    """The table's name dictionaries over all planes, and each plane's metadata ids → codes."""

    def __init__(self, planes: list[Any]) -> None:
        self.names: list[str] = []
        self.stat_names: list[str] = []
        name_codes: dict[str, int] = {}
        self.stat_codes: dict[str, int] = {}
        self.event_maps: list[dict[int, int]] = []
        self.stat_maps: list[dict[int, int]] = []
        for plane in planes:
            event_map = {}
            for mid, md in plane.event_metadata.items():
                event_name = text(md.name or md.display_name)
                event_map[mid] = name_codes.setdefault(event_name, len(name_codes))
                if event_map[mid] == len(self.names):
                    self.names.append(event_name)
            stat_map = {}
            for mid, md in plane.stat_metadata.items():
                stat_name_text = text(md.name)
                stat_map[mid] = self.stat_codes.setdefault(stat_name_text,
                                                           len(self.stat_codes))
                if stat_map[mid] == len(self.stat_names):
                    self.stat_names.append(stat_name_text)
            self.event_maps.append(event_map)
            self.stat_maps.append(stat_map)
        self._name_codes = name_codes

    def unknown_event(self) -> int:
        """The code of the name given to events whose metadata id has no entry."""
        unknown = self._name_codes.setdefault("<unknown event>", len(self._name_codes))
        if unknown == len(self.names):
            self.names.append("<unknown event>")
        return unknown

    def unknown_stat(self) -> int:
        """The code of the name given to stats (and ref values) whose metadata id has no
        entry: an explicit name, never another stat's (code -1 indexes the last one)."""
        unknown = self.stat_codes.setdefault(UNKNOWN_STAT, len(self.stat_codes))
        if unknown == len(self.stat_names):
            self.stat_names.append(UNKNOWN_STAT)
        return unknown

    def typed_slots(self) -> NDArray[np.int8]:
        """Per stat code: the index in TYPED_STATS of the typed stat it is, else -1."""
        slots = np.full(len(self.stat_names), -1, np.int8)
        for i, stat in enumerate(TYPED_STATS):
            code = self.stat_codes.get(stat)
            if code is not None:
                slots[code] = i
        return slots


def _planes(planes: list[Any]) -> list[Plane]:
    out = [Plane(p.id, text(p.name), _plane_stats(p)) for p in planes]
    for plane, message in zip(out, planes, strict=True):
        ops = _xla_op_metadata(message)
        if ops:
            plane.stats[XLA_OP_METADATA] = json.dumps(ops, sort_keys=True)
    return out


# The facts of an XLA op that live on its event metadata (TPU "XLA Ops" lines), which the
# event table does not otherwise keep.
_XLA_OP_METADATA_STATS = ("tf_op", "program_id", "symbol_id")


def _xla_op_metadata(plane: Any) -> dict[str, list[Any]]:
    """Event name → [display name, tf_op, program id, symbol id] for the plane's event
    metadata that name an XLA op of a program (``program_id`` and ``symbol_id`` stats)."""
    wanted = {mid: text(md.name) for mid, md in plane.stat_metadata.items()
              if text(md.name) in _XLA_OP_METADATA_STATS}
    if len(wanted) < 2:
        return {}
    out: dict[str, list[Any]] = {}
    for md in plane.event_metadata.values():
        found: dict[str, Any] = {}
        for stat in md.stats:
            key = wanted.get(stat.metadata_id)
            which = stat.WhichOneof("value") if key else None
            if key is None or which is None:
                continue
            value = getattr(stat, which)
            if which == "ref_value":
                value = _stat_name(plane, value)
            elif which == "str_value":
                value = text(value)
            elif which in ("int64_value", "uint64_value"):
                value = str(value % (1 << 64))
            else:
                continue
            found[key] = value
        if "program_id" in found and "symbol_id" in found:
            name, display = text(md.name or md.display_name), text(md.display_name)
            # Metadata may share a name (an async op's halves: "%copy-start.4 = …" shown as
            # copy-start.4 on the op line and as async-copy beside it); the table knows events
            # by name alone, so the instruction the name defines is kept.
            if name in out and not name.startswith(f"%{display} "):
                continue
            out[name] = [display, found.get("tf_op", ""), found["program_id"],
                         found["symbol_id"]]
    return out


def from_columns(cols: xc.XSpaceColumns) -> EventTable:
    """Build a host's event table from decoded XSpace columns."""
    ev, st = cols.events, cols.stats
    plane_of_event = cols.lines.plane[ev.line]
    dicts = _Dictionaries(cols.planes)
    name = np.full(len(ev), -1, dtype=np.int32)
    stat_event = np.repeat(np.arange(len(ev), dtype=np.int32), ev.nstats)
    stat_name = np.full(len(st.metadata_id), -1, dtype=np.int32)
    stat_value = np.array(st.value, dtype=np.int64)  # a copy: refs are rewritten below
    ranges = _plane_ranges(plane_of_event, len(cols.planes))
    stat_begin = ev.stat_begin()
    for index, (event_map, stat_map) in enumerate(zip(dicts.event_maps, dicts.stat_maps,
                                                      strict=True)):
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
        name[name < 0] = dicts.unknown_event()
    _name_unknown_stats(dicts, stat_name, st.kind, stat_value)

    typed: dict[str, tuple[I64, I64]] = {}
    typed_rows = []
    is_int = (st.kind == KIND_INT64) | (st.kind == KIND_UINT64)
    for stat in TYPED_STATS:
        code = dicts.stat_codes.get(stat)
        rows = np.zeros(0, np.int64) if code is None else \
            np.flatnonzero((stat_name == code) & is_int)
        typed[stat] = (stat_event[rows].astype(np.int64), stat_value[rows])
        typed_rows.append(rows)
    del is_int
    dropped = np.concatenate(typed_rows)
    kind, length = st.kind, st.length
    if len(dropped):
        keep = np.ones(len(stat_name), dtype=bool)
        keep[dropped] = False
        stat_event, stat_name = _compact(stat_event, keep), _compact(stat_name, keep)
        stat_value, kind, length = _compact(stat_value, keep), kind[keep], length[keep]
    texts, offsets = _texts(kind, stat_value, length, st.blob)
    side = StatTable(stat_event, narrow_codes(stat_name, len(dicts.stat_names)), kind,
                     stat_value, texts, offsets, dicts.stat_names)
    del stat_name

    start_ns = cols.event_start_ns()
    duration_ns = xc.ps_to_ns(ev.duration_ps)
    planes = _planes(cols.planes)
    negative = duration_ns < 0
    if negative.any():  # bad data: an event cannot end before it starts
        duration_ns = np.where(negative, 0, duration_ns)
        for index, count in enumerate(np.bincount(plane_of_event[negative],
                                                  minlength=len(planes)).tolist()):
            if count:
                planes[index].stats[NEGATIVE_DURATIONS] = count
    kept_planes = _kept_planes(cols.lines.plane, [_has_metadata(p) or bool(planes[i].stats)
                                                  for i, p in enumerate(cols.planes)],
                               [p.name for p in planes])
    line_plane = cols.lines.plane
    if kept_planes is not None:
        planes, line_plane = _keep_planes(planes, line_plane, kept_planes)
    return EventTable(
        planes=planes,
        line_plane=line_plane, line_id=cols.lines.id,
        line_name=[text(d or n) for n, d in zip(cols.lines.name, cols.lines.display_name,
                                                strict=True)],
        line=narrow_codes(ev.line, len(line_plane)), name=narrow_codes(name, len(dicts.names)),
        start_ns=start_ns,
        # int32 where every one fits, as the compiled decoder writes them
        duration_ns=narrow_durations(duration_ns), typed=TypedStats(len(ev), typed),
        names=dicts.names,
        stats=side, hostnames=[text(h) for h in cols.hostnames],
    )


def _texts(kind: NDArray[np.int8], value: I64, length: I32, blob: bytes
           ) -> tuple[bytes, I64]:
    """Str/bytes stats as indices into their texts: ``value`` (a blob offset) rewritten in
    place to the text's index; the texts, one after another, and their offsets."""
    rows = np.flatnonzero((kind == KIND_STR) | (kind == KIND_BYTES))
    starts, lengths = value[rows], length[rows].astype(np.int64)
    offsets = np.zeros(len(rows) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if not np.array_equal(starts, offsets[:-1]):
        # Bytes between the texts (a stat that set its value twice): keep only the texts.
        blob = b"".join(blob[a:a + n] for a, n in zip(starts.tolist(), lengths.tolist(),
                                                      strict=True))
    elif len(blob) != int(offsets[-1]):
        blob = blob[:int(offsets[-1])]
    value[rows] = np.arange(len(rows), dtype=np.int64)
    return blob, offsets


def _name_unknown_stats(dicts: _Dictionaries, name: I32, kind: NDArray[np.int8],
                        value: I64) -> None:
    """Give stats (and ref values) whose metadata id has no entry an explicit name, in place:
    their code -1 would otherwise index the last stat name, a silently wrong label."""
    unknown_name = name < 0
    unknown_ref = (kind == KIND_REF) & (value < 0)
    if unknown_name.any() or unknown_ref.any():
        code = dicts.unknown_stat()
        name[unknown_name] = code
        value[unknown_ref] = code


def _bare_name(raw: bytes) -> bytes | None:
    """The name (raw bytes) of a serialised XPlane that holds nothing but its id and name;
    None when it holds more."""
    i, n, name = 0, len(raw), b""
    while i < n:
        key, i = _varint(raw, i)
        if key >> 3 not in (1, 2):
            return None
        wire = key & 7
        if wire == 0:
            _, i = _varint(raw, i)
        elif wire == 2:
            size, i = _varint(raw, i)
            if key >> 3 == 2:
                name = raw[i:i + size]
            i += size
        else:
            return None
    return name


def _varint(raw: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while i < len(raw):
        byte = raw[i]
        i += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            break
        shift += 7
    return value, i


def _has_metadata(plane: Any) -> bool:
    return bool(len(plane.event_metadata) or len(plane.stat_metadata) or len(plane.stats))


def _kept_planes(line_plane: Any, has_content: list[bool], names: list[Any]
                 ) -> NDArray[np.bool_] | None:
    """Which planes a table keeps: those with lines, stats or metadata, and the first of the
    others by name (a device with nothing recorded still counts, once); None when all are
    kept (the usual case). A file of a million empty planes costs what its distinct names do."""
    if all(has_content):
        return None
    keep = np.array(has_content, dtype=bool)
    if len(line_plane):
        keep[np.unique(np.asarray(line_plane))] = True
    seen = set()
    for i in np.flatnonzero(~keep).tolist():
        if names[i] and names[i] not in seen:
            seen.add(names[i])
            keep[i] = True
    return None if bool(keep.all()) else keep


def _remap(line_plane: Any, keep: NDArray[np.bool_]) -> I32:
    """Lines' plane indices after the planes not in ``keep`` are left out."""
    new_index = (np.cumsum(keep) - 1).astype(np.int32)
    return new_index[np.asarray(line_plane, dtype=np.int64)]


def _keep_planes(planes: list[Plane], line_plane: Any, keep: NDArray[np.bool_]
                 ) -> tuple[list[Plane], I32]:
    return ([p for p, k in zip(planes, keep.tolist(), strict=True) if k],
            _remap(line_plane, keep))


_CODE_TYPES: dict[int, type[np.integer[Any]]] = {2: np.int16, 4: np.int32}
# The decoder's durations: int32 where every one fits, else int64 (as narrow_durations).
_DURATION_TYPES: dict[int, type[np.integer[Any]]] = {4: np.int32, 8: np.int64}


def _code_width(count: int) -> int:
    """The bytes of a dictionary code column of ``count`` codes (and -1): as ``narrow_codes``
    keeps it, written so by the decoder."""
    return 2 if count <= np.iinfo(np.int16).max else 4


def _map_arrays(mapping: dict[int, int]) -> tuple[I64, I32]:
    """A metadata map as (ids ascending, codes) for the compiled decoder."""
    keys = np.array(sorted(mapping), dtype=np.int64)
    return keys, np.array([mapping[k] for k in keys.tolist()], dtype=np.int32)


def from_source(source: int | bytes, name: str = "<bytes>") -> EventTable:
    """A host's event table straight from XSpace data (an open file's descriptor, read
    through a small window, or bytes) by the compiled decoder: no copy of the file and no
    intermediate columns are held. ``name`` names the data in errors."""
    decoder = xc.compiled_decoder()
    try:
        head, raw_planes = decoder.scan(source)
        space = XSpace.FromString(head)
        # Planes with nothing but an id and a name (a file of a million empty planes is a few
        # megabytes) cost no message, no map and no Plane unless they hold lines.
        bare = [b"" if not b else _bare_name(b) for b in raw_planes]
        full = [i for i, name in enumerate(bare) if name is None]
        messages = [XPlane.FromString(raw_planes[i]) for i in full]
        dicts = _Dictionaries(messages)
        maps: list[tuple[Any, ...] | None] = [None] * len(raw_planes)  # None: no metadata
        for i, e, s in zip(full, dicts.event_maps, dicts.stat_maps, strict=True):
            maps[i] = (*_map_arrays(e), *_map_arrays(s))
        # Codes written as int16 where they will fit: a name or stat name more may come
        # (an id without metadata); lines are not counted before, so more than int16 holds
        # is an OverflowError and the data is read again with int32 lines.
        widths = (2, _code_width(len(dicts.names) + 1), _code_width(len(dicts.stat_names) + 1))
        threads = decode_threads()
        try:
            raw = decoder.decode_table(source, maps, dicts.typed_slots(), widths,
                                       threads=threads)
        except OverflowError:
            widths = (4, *widths[1:])
            raw = decoder.decode_table(source, maps, dicts.typed_slots(), widths,
                                       threads=threads)
    except (ValueError, RuntimeError, DecodeError) as err:
        raise xc.format_error(name, err) from err

    def col(key: str, dtype: type) -> Any:
        return np.frombuffer(raw[key], dtype=dtype)

    n_events, unknown = raw["counts"]
    name_col = col("ev_name", _CODE_TYPES[widths[1]])
    if unknown:  # an event whose metadata id has no entry: kept, under an explicit name
        name_col[name_col < 0] = dicts.unknown_event()
    line_plane = col("ln_plane", np.int32)
    has_content = np.zeros(len(raw_planes), bool)
    has_content[full] = True
    keep = _kept_planes(line_plane, has_content.tolist(), bare)
    kept = range(len(raw_planes)) if keep is None else np.flatnonzero(keep).tolist()
    by_index = dict(zip(full, messages, strict=True))
    planes = _planes([by_index[i] if i in by_index else XPlane.FromString(raw_planes[i])
                      for i in kept])
    negative = list(raw["negative"])
    for at, index in enumerate(kept):
        if negative[index]:  # bad data: an event cannot end before it starts
            planes[at].stats[NEGATIVE_DURATIONS] = negative[index]
    if keep is not None:
        line_plane = _remap(line_plane, keep)
    typed = {stat: (col(f"ty_rows{i}", np.int64), col(f"ty_values{i}", np.int64))
             for i, stat in enumerate(TYPED_STATS)}
    st_name, st_kind, st_value = col("st_name", _CODE_TYPES[widths[2]]), \
        col("st_kind", np.int8), col("st_value", np.int64)
    _name_unknown_stats(dicts, st_name, st_kind, st_value)

    def codes(key: str, column: Any, count: int) -> Any:
        """``column`` (of ``raw[key]``) narrowed where its codes fit, the decoder's int32
        buffer let go at once: the two are held together only for one column."""
        narrow = narrow_codes(column, count)
        if narrow is not column:
            del raw[key]
        return narrow

    st_name = codes("st_name", st_name, len(dicts.stat_names))
    stats = StatTable(col("st_event", np.int32), st_name, st_kind, st_value,
                      memoryview(raw["blob"]).cast("B"),
                      np.r_[np.int64(0), col("st_text_end", np.int64)], dicts.stat_names)
    return EventTable(
        planes=planes, line_plane=line_plane, line_id=col("ln_id", np.int64),
        line_name=[d or n for n, d in zip(raw["line_name"], raw["line_display_name"],
                                          strict=True)],
        line=codes("ev_line", col("ev_line", _CODE_TYPES[widths[0]]), len(line_plane)),
        name=codes("ev_name", name_col, len(dicts.names)), start_ns=col("ev_start", np.int64),
        duration_ns=col("ev_dur", _DURATION_TYPES[raw["dur_bytes"]]),
        typed=TypedStats(n_events, typed),
        names=dicts.names, stats=stats, hostnames=[text(h) for h in space.hostnames],
    )


def load_xspace(path: str | Path) -> EventTable:
    """Load one ``.xplane.pb`` file into an event table."""
    path = as_path(path)
    if xc.compiled():
        if is_remote(path):
            return from_source(read_bytes(path), str(path))
        try:
            with open(path, "rb") as f:
                return from_source(f.fileno(), str(path))
        except OSError as err:
            raise ProfileFormatError(f"Cannot read {path} ({err.strerror or err}).") from err
    data = read_bytes(path)
    cols = xc.decode_columns(data, str(path))
    del data  # the columns hold what is needed; free the file's bytes before building
    return from_columns(cols)
