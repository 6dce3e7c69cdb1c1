"""A tool's answer: its JSON (what every interface gives), its main table as columns, and the
typed result of the analysis it came from.

``to_dict()`` is exactly the JSON of ``stepscope <command> --json``, of the web API's
``/api/data`` and of the MCP server. ``table()`` is the tool's main table as equal-length
columns (nested objects flattened as ``outer.inner``), the source of CSV, pandas and Arrow.
pandas and pyarrow are optional: imported only when asked for.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TextIO

from stepscope.errors import StepscopeError

Columns = dict[str, list[Any]]

_WRITE_BLOCK = 1 << 16  # characters ``write_json`` gathers before each write


@dataclass(frozen=True)
class ToolResult:
    """One tool's answer for one run (and host, and parameters)."""

    tool: str
    data: dict[str, Any]  # the JSON form; never changed after it is made
    table_key: str | None = None  # where the main table (a list of rows) sits in ``data``
    value: Any = None  # the analysis' own typed result, where the tool has one
    csv_text: str | None = field(default=None, repr=False)  # the tool's own CSV columns

    def to_dict(self) -> dict[str, Any]:
        """The JSON every interface gives for this answer (a fresh copy)."""
        copy: dict[str, Any] = json.loads(self.to_json())
        return copy

    def to_json(self, indent: int | None = None) -> str:
        """The JSON text of ``to_dict()``."""
        return json.dumps(self.data, indent=indent, allow_nan=False, ensure_ascii=False)

    def write_json(self, out: TextIO, indent: int | None = None) -> None:
        """Write ``to_json(indent)`` to ``out`` as it is made, a block at a time: the whole
        text is not held, nor the list of its pieces that ``json.dumps`` joins (a small
        string each: some 30 times the text, tens of MB for a long run's per-step rows)."""
        encoder = json.JSONEncoder(indent=indent, allow_nan=False, ensure_ascii=False)
        block: list[str] = []
        size = 0
        for piece in encoder.iterencode(self.data):
            block.append(piece)
            size += len(piece)
            if size >= _WRITE_BLOCK:
                out.write("".join(block))
                block, size = [], 0
        out.write("".join(block))

    def __getitem__(self, key: str) -> Any:
        return self.data[key]

    def table(self) -> Columns:
        """The main table as columns: one list per column, all of equal length."""
        rows = self.data.get(self.table_key) if self.table_key else None
        if isinstance(rows, Mapping) and all(isinstance(v, list) for v in rows.values()):
            return {str(k): list(v) for k, v in rows.items()}  # already columns
        if not isinstance(rows, list):
            return {}
        return rows_to_columns(rows)

    def to_csv(self) -> str:
        """The main table as CSV: the tool's own columns where it declares them (those of
        ``stepscope <command> --csv``), else ``table()``."""
        if self.csv_text is not None:
            return self.csv_text
        return columns_to_csv(self.table())

    def to_pandas(self) -> Any:
        """The main table as a pandas DataFrame (needs pandas: ``pip install pandas``)."""
        try:
            import pandas as pd
        except ImportError as err:
            raise StepscopeError("to_pandas() needs pandas: pip install pandas (or "
                                 "stepscope[pandas]).") from err
        return pd.DataFrame(self.table())

    def to_arrow(self) -> Any:
        """The main table as a pyarrow Table (needs pyarrow: ``pip install pyarrow``)."""
        try:
            import pyarrow as pa
        except ImportError as err:
            raise StepscopeError("to_arrow() needs pyarrow: pip install pyarrow (or "
                                 "stepscope[pandas]).") from err
        return pa.table({k: [_scalar(v) for v in col] for k, col in self.table().items()})


def rows_to_columns(rows: list[Any]) -> Columns:
    """Rows (dicts, nested dicts flattened as ``a.b``) as columns; a key missing from a row is
    None there. Columns keep the order in which keys first appear."""
    flat = [_flatten(r) if isinstance(r, Mapping) else {"value": r} for r in rows]
    names: dict[str, None] = {}
    for r in flat:
        names.update(dict.fromkeys(r))
    return {n: [r.get(n) for r in flat] for n in names}


def _flatten(row: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in row.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(_flatten(value, name + "."))
        else:
            out[name] = value
    return out


def _scalar(value: Any) -> Any:
    """A cell Arrow can hold in a column of scalars: lists and dicts as JSON text."""
    return json.dumps(value) if isinstance(value, list | dict) else value


def columns_to_csv(columns: Columns) -> str:
    """Columns as CSV text (lists and dicts in a cell as JSON)."""
    import csv  # here: a command printing an answer does not load it
    import io

    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(list(columns))
    for row in zip(*columns.values(), strict=True):
        writer.writerow([_scalar(v) for v in row])
    return out.getvalue()
