"""CSV text for every table stepscope writes, with cells a spreadsheet would run made inert.

A cell that begins with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return is read as a
formula by spreadsheet programs, so an op named ``=HYPERLINK(...)`` in a profile could run in
the reader's spreadsheet. Such text gets a leading apostrophe, as OWASP's guidance on CSV
injection advises; numbers (``-1.5``) are left as they are. A NUL character, which Python
3.10's csv writer refuses to write (3.11+ quotes it), becomes U+FFFD on every version, so that a
name with one gives the same CSV everywhere rather than an error on 3.10.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable, Sequence

_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")


def safe_cell(value: object) -> object:
    """``value``, or, for text a spreadsheet would take for a formula, that text quoted; NUL
    characters in text as U+FFFD."""
    if not isinstance(value, str):
        return value
    if "\0" in value:
        value = value.replace("\0", "\ufffd")
    if value.startswith(_FORMULA_START) and not _NUMBER.fullmatch(value):
        return "'" + value
    return value


def csv_text(columns: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A header row and ``rows`` as CSV text (``\\n`` line ends), every cell made safe."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    writer.writerows([safe_cell(v) for v in row] for row in rows)
    return out.getvalue()
