"""The ``memory_access_breakdown`` stat (bytes per memory space and direction) of TPU ops,
decoded by hand: real entries, and hostile bytes giving None, not an exception."""

from __future__ import annotations

import pytest

from stepscope.formats.memory_access import BadBreakdown, hbm_bytes, memory_accesses


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _entry(kind: int, space: int, nbytes: int) -> bytes:
    body = b"\x08" + _varint(kind) + b"\x10" + _varint(space) + b"\x18" + _varint(nbytes)
    return b"\x0a" + _varint(len(body)) + body


def test_hbm_reads_and_writes_count_on_chip_and_unknown_direction_do_not() -> None:
    data = (_entry(1, 1, 5 << 30) + _entry(2, 1, 3) + _entry(1, 3, 1000)  # VMEM read
            + _entry(2, 2, 7) + _entry(0, 1, 11))  # CMEM write; HBM of unknown direction
    assert memory_accesses(data) == [(1, 1, 5 << 30), (2, 1, 3), (1, 3, 1000), (2, 2, 7),
                                     (0, 1, 11)]
    assert hbm_bytes(data) == (5 << 30) + 3
    assert hbm_bytes(b"") == 0


@pytest.mark.parametrize("data", [b"\x0a", b"\x0a\x05\x08", b"\xff" * 20, b"\x0b\x00",
                                  _entry(1, 1, 9)[:-1]])
def test_malformed_breakdown_is_none(data: bytes) -> None:
    assert hbm_bytes(data) is None
    with pytest.raises(BadBreakdown):
        memory_accesses(data)
