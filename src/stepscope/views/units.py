"""The one way the terminal writes bytes and counts (the web UI's ``frontend/src/dom.ts`` writes
them the same way): bytes in B, KiB, MiB, GiB, TiB, named so, with three significant figures
(at least); counts with thousands separators, never in e-notation."""

from __future__ import annotations

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def size_text(value: float | None) -> str:
    """Bytes in binary units: ``512 B``, ``433 KiB``, ``1.21 MiB``, ``12.5 GiB`` (``-`` when
    unknown; a negative amount keeps its sign)."""
    if value is None:
        return "-"
    amount = abs(float(value))
    unit = 0
    while amount >= 1024 and unit < len(_UNITS) - 1:
        amount /= 1024
        unit += 1
    sign = "-" if value < 0 else ""
    if unit == 0:
        return f"{sign}{amount:.0f} B"
    digits = 2 if amount < 10 else 1 if amount < 100 else 0
    return f"{sign}{amount:.{digits}f} {_UNITS[unit]}"


def count_text(value: float | None) -> str:
    """A count or a counter's value: integers with thousands separators, fractions with
    three significant figures (at least), never e-notation (``-`` when unknown)."""
    if value is None:
        return "-"
    if float(value).is_integer():
        return f"{int(value):,}"
    a = abs(float(value))
    digits = 0 if a >= 100 else 1 if a >= 10 else 2 if a >= 0.01 else 6
    return f"{float(value):,.{digits}f}"
