"""The in-memory profile of one host: every event of every plane in one columnar table.

Names are dictionary-encoded (one list of distinct names, an int32 code per event); the
well-known stats that analyses join on (step_num, _r, group_id, correlation_id) get typed
columns (kept sparse where read from a file: most events carry none of them); every other
event stat lives in a side table keyed by event row.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
from numpy.typing import NDArray

from stepscope.model import schema
from stepscope.model.stat_kinds import (
    KIND_BYTES,
    KIND_DOUBLE,
    KIND_INT64,
    KIND_REF,
    KIND_STR,
    KIND_UINT64,
)

I32 = NDArray[np.int32]
I64 = NDArray[np.int64]

# Value of a typed stat column for events that do not carry that stat.
MISSING = np.iinfo(np.int64).min

# Stats that get a typed int64 column of their own.
TYPED_STATS = (schema.STEP_NUM, schema.ROOT_LEVEL, schema.GROUP_ID, schema.CORRELATION_ID)


class TypedStats(Mapping[str, "I64"]):
    """The typed stat columns kept sparse: per stat, the rows that carry it (ascending) and
    their values. Asking for a stat gives its dense column (MISSING where absent), made anew
    each time: hold on to it rather than ask again in a loop."""

    def __init__(self, events: int, sparse: Mapping[str, tuple[I64, I64]]) -> None:
        self.events = events
        self.sparse = dict(sparse)

    @classmethod
    def of(cls, columns: Mapping[str, I64]) -> TypedStats:
        """The sparse form of dense columns."""
        if isinstance(columns, TypedStats):
            return columns
        n = len(next(iter(columns.values()))) if columns else 0
        out = {}
        for stat, column in columns.items():
            rows = np.flatnonzero(column != MISSING)
            out[stat] = (rows.astype(np.int64), np.asarray(column[rows], np.int64))
        return cls(n, out)

    def __getitem__(self, stat: str) -> I64:
        rows, values = self.sparse[stat]
        column = np.full(self.events, MISSING, dtype=np.int64)
        column[rows] = values
        return column

    def __iter__(self) -> Iterator[str]:
        return iter(self.sparse)

    def __len__(self) -> int:
        return len(self.sparse)

    def at(self, row: int) -> dict[str, int]:
        """The typed stats event ``row`` carries."""
        out = {}
        for stat, (rows, values) in self.sparse.items():
            i = int(np.searchsorted(rows, row, side="right")) - 1
            if i >= 0 and int(rows[i]) == row:
                out[stat] = int(values[i])
        return out

    @property
    def nbytes(self) -> int:
        """Bytes its arrays hold."""
        return sum(r.nbytes + v.nbytes for r, v in self.sparse.values())


Codes = NDArray[np.int16] | NDArray[np.int32]  # dictionary codes: int16 where every one fits


def narrow_codes(codes: NDArray[np.integer[Any]], count: int) -> Codes:
    """Dictionary codes below ``count`` as int16 where ``count`` allows (a table's lines,
    event names and stat names: a few hundred distinct values over millions of rows), else
    int32. Readers index with them and compare them; arithmetic on them casts first (an
    int16 sum or product overflows)."""
    if count <= np.iinfo(np.int16).max:
        return np.asarray(codes, dtype=np.int16)
    return np.asarray(codes, dtype=np.int32)


Durations = NDArray[np.int32] | NDArray[np.int64]  # ns: int32 where every duration fits


def narrow_durations(durations: NDArray[np.integer[Any]]) -> Durations:
    """Durations in ns as int32 where every one fits (events up to 2.147 s: most tables),
    else int64. Readers index and compare them as they are; arithmetic that can pass 2**31
    (a product, the sum of two, an end ``start + duration`` with int64 starts is safe) casts
    first, and sums widen (``np.sum``, ``np.cumsum`` and ``np.add.reduceat`` with
    ``dtype=np.int64``)."""
    column = np.asarray(durations)
    if column.dtype == np.int32:
        return column
    if len(column) and (int(column.min()) < _INT32.min or int(column.max()) > _INT32.max):
        return np.asarray(column, dtype=np.int64)
    return np.asarray(column, dtype=np.int32)


_INT32 = np.iinfo(np.int32)


def is_in(codes: NDArray[np.integer[Any]], wanted: Any) -> NDArray[np.bool_]:
    """``np.isin(codes, wanted)`` for a column of small non-negative codes (names, lines,
    planes): one lookup into a table of flags, where np.isin sorts or builds temporaries of
    several bytes a row (tens of MB over millions of events)."""
    want = np.asarray(wanted, dtype=np.int64).reshape(-1)
    if not len(codes) or not len(want):
        return np.zeros(len(codes), dtype=bool)
    low, high = int(codes.min()), int(codes.max())
    if low < 0 or high >= 1 << 24:
        found: NDArray[np.bool_] = np.isin(codes, want)
        return found
    flags = np.zeros(high + 1, dtype=bool)
    flags[want[(want >= 0) & (want <= high)]] = True
    out: NDArray[np.bool_] = flags[codes]
    return out


# Rows found at a time by ``rows_where``: 1/64 of them, at least this many (the chunk's int64
# index is 8 B a row: on a small host the whole column's was a large part of the model's peak).
_ROW_CHUNK = 1 << 16
_ROW_PARTS = 64


def rows_where(mask: NDArray[np.bool_]) -> NDArray[np.int32] | I64:
    """``np.flatnonzero(mask)``, int32 where every row fits: found a chunk of rows at a time,
    so that no int64 index of every set row is held on the way (8 B a row: tens of MB where
    most of millions of events are set)."""
    if len(mask) >= 1 << 31:
        return np.flatnonzero(mask)
    out = np.empty(int(np.count_nonzero(mask)), dtype=np.int32)
    at = 0
    step = max(_ROW_CHUNK, len(mask) // _ROW_PARTS)
    for i in range(0, len(mask), step):
        chunk = np.flatnonzero(mask[i:i + step])
        chunk += i
        out[at:at + len(chunk)] = chunk
        at += len(chunk)
    return out


def distinct(values: NDArray[np.integer[Any]]) -> NDArray[np.integer[Any]]:
    """The distinct values, ascending: ``np.unique(values)`` by a sort. NumPy 2's own takes a
    hash set where it can, 20-30 times slower than a sort over a million distinct ids."""
    ordered = np.sort(values)
    if len(ordered) < 2:
        return ordered
    fresh = np.empty(len(ordered), dtype=bool)
    fresh[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=fresh[1:])
    return ordered[fresh]


def codes_of(values: NDArray[np.integer[Any]]) -> tuple[NDArray[np.integer[Any]], I64]:
    """(the distinct values ascending, each value's index among them): ``np.unique(values,
    return_inverse=True)``, holding a sorted copy and the indices, not a sort's index too."""
    found = distinct(values)
    return found, np.searchsorted(found, values).astype(np.int64)


def typed_rows(table: EventTable, stat: str) -> tuple[I64, I64]:
    """The events of ``table`` that carry typed stat ``stat`` (ascending) and its values,
    from the sparse rows where the table keeps them so (no dense column is made)."""
    typed = table.typed
    if isinstance(typed, TypedStats):
        rows, values = typed.sparse.get(stat, (np.zeros(0, np.int64), np.zeros(0, np.int64)))
        present = values != MISSING
        if not present.all():
            rows, values = rows[present], values[present]
        return rows, values
    if stat not in typed:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    column = typed[stat]
    rows = np.flatnonzero(column != MISSING).astype(np.int64)
    return rows, np.asarray(column[rows], np.int64)


def typed_equals(table: EventTable, stat: str, value: int) -> NDArray[np.bool_]:
    """Per event of ``table``: whether its typed stat ``stat`` is ``value``, from the sparse
    rows where the table keeps them so (no dense int64 column of every event is made)."""
    typed = table.typed
    out = np.zeros(len(table), dtype=bool)
    if isinstance(typed, TypedStats):
        if stat in typed.sparse:
            rows, values = typed.sparse[stat]
            out[rows[values == value]] = True
        return out
    if stat in typed:
        np.equal(typed[stat], value, out=out)
    return out


@dataclass
class Plane:
    """One plane's identity and its plane-level stats."""

    id: int
    name: str
    stats: dict[str, Any] = field(default_factory=dict)


@dataclass
class StatTable:
    """Event stats other than the typed ones: one row per (event, stat)."""

    event: I32  # row in the EventTable
    name: Codes  # index into stat_names (int16 where every name's fits: narrow_codes)
    kind: NDArray[np.int8]  # stat_kinds.KIND_*
    value: I64  # ints as they are, doubles as their bits, refs as indices into stat_names
    # (the interned string a ref stat stands for), str/bytes as the index i of their text,
    # text[text_offsets[i]:text_offsets[i + 1]]
    text: bytes | memoryview  # a memoryview when read from the cache (no copy)
    text_offsets: I64  # one more than there are texts, from 0
    stat_names: list[str]

    def text_spans(self, rows: NDArray[Any]) -> tuple[I64, I64]:
        """(start in ``text``, length) of the str/bytes stats ``rows``."""
        items = np.asarray(self.value[rows], np.int64)
        start = np.asarray(self.text_offsets[items], np.int64)
        return start, np.asarray(self.text_offsets[items + 1], np.int64) - start

    def value_of(self, row: int) -> Any:
        """The Python value of stat ``row``."""
        kind = int(self.kind[row])
        raw = int(self.value[row])
        if kind == KIND_DOUBLE:
            return float(np.array(raw, dtype=np.int64).view(np.float64))
        if kind == KIND_UINT64:
            return raw & 0xFFFF_FFFF_FFFF_FFFF
        if kind == KIND_REF:
            return self.stat_names[raw]
        if kind in (KIND_STR, KIND_BYTES):
            data = bytes(self.text[int(self.text_offsets[raw]):int(self.text_offsets[raw + 1])])
            return data.decode("utf-8", "replace") if kind == KIND_STR else data
        return raw


def no_stats() -> StatTable:
    """A stat table without rows."""
    return StatTable(np.zeros(0, np.int32), np.zeros(0, np.int32), np.zeros(0, np.int8),
                     np.zeros(0, np.int64), b"", np.zeros(1, np.int64), [])


@dataclass
class EventTable:
    """All events of one host, one row each, in file order."""

    planes: list[Plane]
    line_plane: I32  # per line: index into planes
    line_id: I64
    line_name: list[str]
    line: Codes  # per event: index into the line_* columns (int16 where they fit)
    name: Codes  # per event: index into names (int16 where they fit)
    start_ns: I64
    duration_ns: Durations  # int32 where every one fits (narrow_durations), else int64
    typed: Mapping[str, I64]  # TYPED_STATS → column (MISSING where absent); TypedStats
    # when read from a file or the cache
    names: list[str]
    stats: StatTable
    hostnames: list[str]

    def __len__(self) -> int:
        return len(self.name)

    @cached_property
    def plane(self) -> NDArray[np.int8] | Codes:
        """Per event: index into planes (its line's), made from ``line`` on first use: a load
        does not hold a column that the lines give. Int8 where the planes allow (a few
        planes: a byte an event), else as ``narrow_codes``; arithmetic on it casts first."""
        if len(self.planes) <= np.iinfo(np.int8).max:
            small: NDArray[np.int8] = np.asarray(self.line_plane, np.int8)[self.line]
            return small
        # The lines' planes narrowed first: indexing gives the narrow column at once.
        return narrow_codes(self.line_plane, len(self.planes))[self.line]

    def text_stat(self, stat: str) -> tuple[I64, I32, list[str]]:
        """A string (or ref) stat as columns: (event rows, value codes, distinct values)."""
        st = self.stats
        try:
            code = st.stat_names.index(stat)
        except ValueError:
            return np.zeros(0, np.int64), np.zeros(0, np.int32), []
        # Two comparisons, not np.isin: it holds ~10 bytes a stat row (tens of MB) at once.
        rows = np.flatnonzero((st.name == code)
                              & ((st.kind == KIND_STR) | (st.kind == KIND_REF)))
        # Decode each distinct (kind, value) once: values repeat (refs, shared text). Both are
        # small non-negative numbers here (a kind, an index): one int64 key sorts far faster
        # than rows of two.
        keys = st.value[rows].astype(np.int64) * 16 + st.kind[rows].astype(np.int64)
        distinct, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
        texts = [str(st.value_of(int(rows[i]))) for i in first]
        values = sorted(set(texts))
        code_of = {text: i for i, text in enumerate(values)}
        codes = np.array([code_of[t] for t in texts], dtype=np.int32)
        return (np.asarray(st.event[rows], np.int64),
                codes[inverse.reshape(-1)] if len(rows) else codes, values)

    def int_stat(self, stat: str) -> tuple[I64, I64]:
        """An integer stat as columns: (event rows, values)."""
        st = self.stats
        try:
            code = st.stat_names.index(stat)
        except ValueError:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        rows = np.flatnonzero(st.name == code)
        kind = st.kind[rows]  # only the stat's own rows: far fewer than every stat's
        rows = rows[(kind == KIND_INT64) | (kind == KIND_UINT64)]
        return np.asarray(st.event[rows], np.int64), np.asarray(st.value[rows], np.int64)

    def typed_at(self, row: int) -> dict[str, int]:
        """The typed stats event ``row`` carries."""
        if isinstance(self.typed, TypedStats):
            return self.typed.at(row)
        return {stat: int(column[row]) for stat, column in self.typed.items()
                if int(column[row]) != MISSING}

    def plane_index(self, name: str) -> int | None:
        """Index of the plane called ``name``, or None."""
        return next((i for i, p in enumerate(self.planes) if p.name == name), None)

    def name_code(self, name: str) -> int | None:
        """The dictionary code of an event name, or None if no event has it."""
        try:
            return self.names.index(name)
        except ValueError:
            return None
