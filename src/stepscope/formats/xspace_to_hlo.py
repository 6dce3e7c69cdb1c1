"""XSpace bytes → the XLA programs' HLO of its ``/host:metadata`` plane, reading nothing else.

The memory and graph viewers need only the serialized ``HloProto``s. Rather than decode every
event of the file, the XSpace's top-level fields are walked on the wire (a plane is one
length-delimited field 1; its name is field 2) and only the metadata plane is parsed.
Programs are named and numbered as ``xspace_to_xla`` names them (``module(program_id)``
metadata names, or a ``program_id`` stat), so both tools agree with the op profile.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from stepscope.errors import ProfileFormatError
from stepscope.formats.xplane_proto import XPlane
from stepscope.formats.xspace_to_xla import METADATA_PLANE, Programs, programs_of_plane
from stepscope.model.locations import as_path, read_bytes

_PLANES, _PLANE_NAME = 1, 2
_LEN, _VARINT, _I64, _I32 = 2, 0, 1, 5


def _varint(data: memoryview, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(data) or shift > 63:
            raise ValueError("truncated varint")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
        shift += 7


def _fields(data: memoryview) -> Any:
    """(field number, wire type, start, end) of each top-level field of a message."""
    at = 0
    while at < len(data):
        key, at = _varint(data, at)
        number, wire = key >> 3, key & 7
        if wire == _VARINT:
            start = at
            _, at = _varint(data, at)
        elif wire == _LEN:
            size, start = _varint(data, at)
            at = start + size
        elif wire == _I64:
            start, at = at, at + 8
        elif wire == _I32:
            start, at = at, at + 4
        else:
            raise ValueError(f"wire type {wire}")
        if at > len(data):
            raise ValueError("truncated field")
        yield number, wire, start, at


def _metadata_plane(data: bytes) -> bytes | None:
    view = memoryview(data)
    for number, wire, start, end in _fields(view):
        if number != _PLANES or wire != _LEN:
            continue
        plane = view[start:end]
        for field, kind, a, b in _fields(plane):
            if field == _PLANE_NAME and kind == _LEN:
                if bytes(plane[a:b]) == METADATA_PLANE.encode():
                    return bytes(plane)
                break
    return None


def hlo_from_xspace(data: bytes, source: str = "<bytes>") -> Programs:
    """(program id → decoded HLO module, program id → name, program id → why unreadable)."""
    try:
        raw = _metadata_plane(data)
        plane = XPlane.FromString(raw) if raw is not None else None
    except Exception as err:  # a damaged wire walk, or protobuf's DecodeError
        raise ProfileFormatError(f"{source}: not a readable XSpace ({err}).") from err
    if plane is None:
        return {}, {}, {}
    return programs_of_plane(plane, source)


def load_hlo(path: str | Path) -> Programs:
    """The HLO programs of one ``.xplane.pb`` file, local or a URL (see ``hlo_from_xspace``)."""
    source = as_path(path)
    return hlo_from_xspace(read_bytes(source), str(source))
