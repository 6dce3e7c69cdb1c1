"""The kinds of a stat's value in ``StatTable.kind``: how to read its ``value`` column."""

from __future__ import annotations

KIND_NONE, KIND_DOUBLE, KIND_UINT64, KIND_INT64, KIND_STR, KIND_BYTES, KIND_REF = range(7)
