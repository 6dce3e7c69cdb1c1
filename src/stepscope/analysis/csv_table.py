"""CSV text for every table stepscope writes, with cells a spreadsheet would run made inert.

A cell that begins with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return is read as a
formula by spreadsheet programs, so an op named ``=HYPERLINK(...)`` in a profile could run in
the reader's spreadsheet. Such text gets a leading apostrophe, as OWASP's guidance on CSV
injection advises; numbers (``-1.5``) are left as they are.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable, Sequence

_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")


def safe_cell(value: object) -> object:
    """``value``, or, for text a spreadsheet would take for a formula, that text quoted."""
    if isinstance(value, str) and value.startswith(_FORMULA_START) and \
            not _NUMBER.fullmatch(value):
        return "'" + value
    return value


def csv_text(columns: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A header row and ``rows`` as CSV text (``\\n`` line ends), every cell made safe."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    writer.writerows([safe_cell(v) for v in row] for row in rows)
    return out.getvalue()
