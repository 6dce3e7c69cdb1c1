"""The ``memory_access_breakdown`` stat of TPU XLA ops: bytes per memory space and direction.

The stat holds a serialized ``MemoryAccessBreakdown`` message (XProf's ``op_metrics.proto``):
field 1, repeated ``MemoryAccessed`` {1: operation type (0 unknown, 1 read, 2 write),
2: memory space (1 is HBM, the off-chip memory; others are on-chip: CMEM, VMEM), 3: bytes}.
Decoded by hand: three varint fields do not warrant a message class.
"""

from __future__ import annotations

READ, WRITE = 1, 2
HBM = 1
_MAX_ENTRIES = 1 << 16  # far more than any op has; a bound against absurd input


class BadBreakdown(ValueError):
    """The bytes are not a ``MemoryAccessBreakdown`` message."""


def _varint(data: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if i >= len(data) or shift > 63:
            raise BadBreakdown("truncated or overlong varint")
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, i


def _fields(data: bytes) -> list[tuple[int, int | bytes]]:
    """(field number, value) of a message whose fields are varints or length-delimited."""
    out: list[tuple[int, int | bytes]] = []
    i = 0
    while i < len(data):
        key, i = _varint(data, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(data, i)
            out.append((number, value))
        elif wire == 2:
            size, i = _varint(data, i)
            if i + size > len(data):
                raise BadBreakdown("field runs past the end")
            out.append((number, data[i:i + size]))
            i += size
        elif wire in (1, 5):  # fixed 64/32-bit: not in this message, skipped
            i += 8 if wire == 1 else 4
        else:
            raise BadBreakdown(f"wire type {wire}")
        if len(out) > _MAX_ENTRIES:
            raise BadBreakdown("too many fields")
    if i != len(data):
        raise BadBreakdown("field runs past the end")
    return out


def memory_accesses(data: bytes) -> list[tuple[int, int, int]]:
    """(operation type, memory space, bytes) of each entry; BadBreakdown if malformed."""
    out = []
    for number, value in _fields(data):
        if number != 1 or not isinstance(value, bytes):
            continue
        entry = {n: v for n, v in _fields(value) if isinstance(v, int)}
        out.append((entry.get(1, 0), entry.get(2, 0), entry.get(3, 0)))
    return out


def hbm_bytes(data: bytes) -> int | None:
    """Bytes read from and written to HBM per execution, as XProf's op profile counts them
    (entries of unknown direction left out); None where ``data`` is not a breakdown. An
    empty breakdown gives 0."""
    try:
        accesses = memory_accesses(data)
    except BadBreakdown:
        return None
    return sum(n for kind, space, n in accesses if space == HBM and kind in (READ, WRITE))
