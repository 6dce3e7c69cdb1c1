"""A tool's JSON cut to fit an agent's context window, saying what it left out.

An answer is ``ToolResult.to_dict()`` with: the main table paged (``limit`` rows from
``offset``), other long lists and column tables cut to their first items, dicts with many
entries cut to their first ones, long strings (names, mostly) shortened to their start and
``…`` unless ``full_names``, and floats to 6 significant digits. Everything cut is counted in
``omitted`` (by where it sits: ``"ops": 480``), the page is described in ``page``, and any
answer fits ``BUDGET_BYTES`` of compact JSON: when the first cut is too large, the next is
tighter (fewer rows, shorter lists and names), down to the answer's top-level figures alone.
Nothing here computes a figure; it only leaves things out.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from stepscope.run.params import Param

BUDGET_BYTES = 8 * 1024  # no answer's compact JSON is larger (UTF-8 bytes)
DEFAULT_LIMIT = 20  # rows of the main table in a default answer
_MIN_ROWS = 10  # rows kept while detail elsewhere can still be cut
MAX_LIMIT = 1000
SHORT_TEXT = 80  # strings longer than this are shortened unless full_names
_SKELETON_TEXT = 200
# Sentences (advice, verdicts, notes) are kept whole far longer than names.
_PROSE = {"text", "because", "statement", "evidence", "reason", "hints", "notes", "note",
          "summary", "found_by_text", "message", "why", "detail", "description", "error",
          "missing"}
_PROSE_TEXT = 600  # strings in the last-resort answer
_SHORT_LIST = 4  # lists of this many scalars or fewer (shapes, pairs) are never cut
_MAX_OMITTED = 12  # places named in ``omitted``; the rest are summed as "(elsewhere)"
_ELLIPSIS = "…"
# Keys the answer adds to the tool's JSON (no tool's JSON uses them at its top level).
META_KEYS = ("page", "omitted", "units", "note")

# Sizing parameters every tool's MCP form takes, declared like a tool's own parameters.
SIZING: tuple[Param, ...] = (
    Param("limit", "int", "rows of the main table shown: the top N (next pages: offset)",
          DEFAULT_LIMIT, 1, MAX_LIMIT),
    Param("offset", "int", "first row of the main table shown (0: the top)", 0, 0, 1 << 62),
    Param("full_names", "flag", f"give names longer than {SHORT_TEXT} characters whole "
          "(default: shortened, ending in …)", False),
)

# Numbers whose key does not name their unit (keys ending _ns, _us, _ms, _s, _bytes,
# _percent, _per_s name theirs; counts and ids have none).
_UNITS = {
    "start": "ns after the trace's origin", "end": "ns after the trace's origin",
    "dur": "ns", "covered": "ns", "time": "ns after the trace's origin",
    "breakdown": "percent of step time", "ridge_point": "FLOP per byte",
    "fragmentation": "fraction (0 to 1)", "fragmentation_at_peak": "fraction (0 to 1)",
    "flops_utilization": "fraction (0 to 1)", "bandwidth_utilization": "fraction (0 to 1)",
    "xla_flops_utilization": "fraction (0 to 1)",
}


@dataclass(frozen=True)
class Sizing:
    """How much of an answer to give: ``limit`` rows from ``offset``, names whole or not."""

    limit: int = DEFAULT_LIMIT
    offset: int = 0
    full_names: bool = False


@dataclass(frozen=True)
class _Cut:
    rows: int  # rows of the main table
    items: int  # items of any other list or column table
    keys: int  # entries of a dict below the top level (a table's rows keep all theirs)
    text: int | None  # characters of a string (None: whole)
    depth: int = 9  # lists and dicts nested deeper than this are left out


def _cuts(s: Sizing) -> list[_Cut]:
    """Ever tighter cuts: secondary detail (other lists, dicts, names) is trimmed before the
    main table's rows, which keep at least _MIN_ROWS (or the limit) until detail is at its
    least."""
    def text(n: int) -> int | None:
        return None if s.full_names else n

    steps = [(20, 24, SHORT_TEXT, 9), (10, 16, SHORT_TEXT, 9), (5, 12, 60, 4), (3, 8, 48, 3),
             (2, 6, 40, 3), (1, 4, 32, 2), (0, 2, 24, 2)]
    out = [_Cut(s.limit if i < 3 else min(s.limit, _MIN_ROWS), items, keys, text(chars), depth)
           for i, (items, keys, chars, depth) in enumerate(steps)]
    rows = min(s.limit, _MIN_ROWS)
    while rows > 1:
        rows //= 2
        out.append(_Cut(max(rows, 1), 0, 2, text(24), 2))
    return out


def fit(data: Mapping[str, Any], table_key: str | None, sizing: Sizing,
        budget: int = BUDGET_BYTES) -> dict[str, Any]:
    """``data`` (a tool's JSON) cut to ``sizing`` and to ``budget`` bytes of compact JSON."""
    def build(cut: _Cut) -> dict[str, Any] | None:
        answer = _Trim(cut).answer(data, table_key, sizing.offset)
        return answer if size_of(answer) <= budget else None

    for cut in _cuts(sizing):
        answer = build(cut)
        if answer is not None:
            return answer
        if cut.rows > _MIN_ROWS:  # a large page: as many rows as fit at this detail
            best, lo, hi = None, _MIN_ROWS, cut.rows - 1
            while lo <= hi:
                mid = (lo + hi) // 2
                found = build(replace(cut, rows=mid))
                if found is not None:
                    best, lo = found, mid + 1
                else:
                    hi = mid - 1
            if best is not None:
                return best
    return _skeleton(data, table_key, sizing, budget)


def size_of(answer: Any) -> int:
    """Bytes of the answer's compact JSON text (what an agent reads)."""
    return len(to_text(answer).encode())


def to_text(answer: Any) -> str:
    """The answer as compact JSON text."""
    return json.dumps(answer, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def _is_columns(value: Mapping[str, Any]) -> bool:
    """Whether a dict is a column table: two or more lists of one length."""
    lists = list(value.values())
    return len(lists) >= 2 and all(isinstance(v, list) for v in lists) \
        and len({len(v) for v in lists}) == 1


def _rows_of(table: Any) -> int:
    if isinstance(table, list):
        return len(table)
    if isinstance(table, Mapping) and _is_columns(table):
        return len(next(iter(table.values())))
    return 0


class _Trim:
    """One cut applied to one answer, counting what it leaves out."""

    def __init__(self, cut: _Cut) -> None:
        self.cut = cut
        self.omitted: Counter[str] = Counter()
        self.shortened = 0
        self.units: dict[str, str] = {}

    def answer(self, data: Mapping[str, Any], table_key: str | None,
               offset: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        page: dict[str, Any] | None = None
        for key, value in data.items():
            if key == table_key and (isinstance(value, list) or (
                    isinstance(value, Mapping) and _is_columns(value))):
                total = _rows_of(value)
                start = min(offset, total)
                shown = self._slice(value, start, start + self.cut.rows, key)
                out[key] = shown
                n = _rows_of(shown)
                page = {"table": key, "offset": start, "rows": n, "total": total,
                        "next_offset": start + n if start + n < total else None}
                if total - n:
                    self.omitted[key] += total - n
            else:
                out[key] = self.value(value, key, 1)
        self._lookups(out, data, table_key)
        if page is not None:
            out["page"] = page
        if self.shortened:
            self.omitted["names_shortened"] += self.shortened
        if self.omitted:
            out["omitted"] = _named(self.omitted)
        if self.units:
            out["units"] = self.units
        return out

    def _slice(self, table: Any, lo: int, hi: int, path: str) -> Any:
        """Rows ``lo:hi`` of a list or column table, each row trimmed."""
        if isinstance(table, list):
            return [self._row(r, path + "[]") for r in table[lo:hi]]
        return {k: [self.value(v, f"{path}.{k}[]", 3) for v in col[lo:hi]]
                for k, col in table.items()}

    def _row(self, row: Any, path: str) -> Any:
        """One row of the main table: every key kept, what it holds trimmed."""
        if not isinstance(row, Mapping) or _is_columns(row):
            return self.value(row, path, 2)
        out = {}
        for k, v in row.items():
            self._unit(str(k), v)
            out[str(k)] = self.value(v, f"{path}.{k}", 3)
        return out

    def value(self, value: Any, path: str, depth: int) -> Any:
        """One value at ``depth`` (1: the answer's top level), trimmed by the cut (``path``
        names it in ``omitted``)."""
        if isinstance(value, str):
            return self._text(value, path)
        if isinstance(value, float):
            return float(f"{value:.6g}")
        if isinstance(value, list):
            if len(value) <= _SHORT_LIST and not any(isinstance(v, list | Mapping)
                                                     for v in value):
                return [self.value(v, path, depth + 1) for v in value]  # a shape: whole
            kept = value[: self.cut.items]
            if len(value) > len(kept):
                self.omitted[path] += len(value) - len(kept)
            return [self.value(v, path + "[]", depth + 1) for v in kept]
        if isinstance(value, Mapping):
            if _is_columns(value):
                n = _rows_of(value)
                if n > self.cut.items:
                    self.omitted[path] += n - self.cut.items
                return {k: [self.value(v, f"{path}.{k}[]", depth + 1)
                            for v in col[: self.cut.items]] for k, col in value.items()}
            items = list(value.items())
            # The answer's own figures (its summary, its breakdown) keep more entries.
            keys = self.cut.keys * 8 if depth == 1 else self.cut.keys
            if len(items) > keys:
                self.omitted[path + "{}"] += len(items) - keys
            # Lists of one length side by side (a timeline's columns) are rows: counted once.
            lengths = Counter(len(v) for _, v in items if isinstance(v, list))
            rows_cut = 0
            out = {}
            for k, v in items[:keys]:
                self._unit(str(k), v)
                if depth >= self.cut.depth and isinstance(v, list | Mapping) and v and not (
                        isinstance(v, list) and len(v) <= _SHORT_LIST
                        and not any(isinstance(x, list | Mapping) for x in v)):
                    self.omitted[f"{path}.{k}"] += len(v)  # nested too deep for this cut
                elif isinstance(v, list) and lengths[len(v)] > 1 and len(v) > self.cut.items:
                    out[str(k)] = [self.value(x, f"{path}.{k}[]", depth + 2)
                                   for x in v[: self.cut.items]]
                    rows_cut = max(rows_cut, len(v) - self.cut.items)
                else:
                    out[str(k)] = self.value(v, f"{path}.{k}", depth + 1)
            if rows_cut:
                self.omitted[path] += rows_cut
            return out
        return value

    def _unit(self, key: str, value: Any) -> None:
        if key in _UNITS and (isinstance(value, int | float | list | Mapping)
                              and not isinstance(value, bool)):
            self.units[key] = _UNITS[key]

    def _text(self, text: str, path: str = "") -> str:
        limit = self.cut.text
        if limit is not None and path.rsplit(".", 1)[-1].rstrip("[]") in _PROSE:
            limit = max(limit, _PROSE_TEXT if self.cut.items >= 5 else 2 * limit)
        if limit is None or len(text) <= limit:
            return text
        self.shortened += 1
        return text[: limit - 1] + _ELLIPSIS

    def _lookups(self, out: dict[str, Any], data: Mapping[str, Any],
                 table_key: str | None) -> None:
        """A top-level ``names`` map that the main table's ``name`` column indexes (the trace
        window's) keeps the names of the rows shown, whole or shortened as names are."""
        names, table = data.get("names"), out.get(table_key) if table_key else None
        if not isinstance(names, Mapping) or not isinstance(table, Mapping):
            return
        used = {str(i) for i in table.get("name", []) if isinstance(i, int)}
        kept = {k: self._text(str(v)) for k, v in names.items() if k in used}
        self.omitted.pop("names{}", None)
        if len(names) > len(kept):
            self.omitted["names"] = len(names) - len(kept)
        out["names"] = kept
        for key in ("start", "dur", "end"):
            if key in table:
                self.units[key] = _UNITS[key]


def _named(omitted: Counter[str]) -> dict[str, int]:
    """``omitted`` as a small dict: the places that lost most, the others summed."""
    top = omitted.most_common()
    out = dict(top[: _MAX_OMITTED])
    rest = sum(n for _, n in top[_MAX_OMITTED:])
    if rest:
        out["(elsewhere)"] = rest
    return out


def _skeleton(data: Mapping[str, Any], table_key: str | None, sizing: Sizing,
              budget: int) -> dict[str, Any]:
    """The last resort: the answer's top-level figures alone (as many as fit), each name
    shortened."""
    out: dict[str, Any] = {}
    omitted: Counter[str] = Counter()
    room = budget - 1024  # for "omitted" and "note"
    for key, value in data.items():
        if isinstance(value, str):
            value = value if len(value) <= _SKELETON_TEXT else \
                value[: _SKELETON_TEXT - 1] + _ELLIPSIS
        elif isinstance(value, float):
            value = float(f"{value:.6g}")
        elif not (value is None or isinstance(value, bool | int)):
            omitted[str(key)[:_SKELETON_TEXT]] += max(1, _rows_of(value) if key == table_key
                                                      else len(value)
                                                      if isinstance(value, list | Mapping)
                                                      else 1)
            continue
        cost = size_of({str(key): value})
        if cost > room:
            omitted["(top-level figures)"] += 1
            continue
        room -= cost
        out[str(key)] = value
    note = ("The answer was too large even at one row: only its top-level figures are "
            f"shown. Ask for a host, a shorter time range or offset={sizing.offset + 1}.")
    return {**out, "omitted": _named(omitted), "note": note}
