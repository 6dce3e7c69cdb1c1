"""The XSpace wire schema (TensorFlow/XProf's ``xplane.proto``), declared from its field numbers.

Message classes: ``XSpace``, ``XPlane``, ``XLine``, ``XEvent``, ``XStat``, ``XEventMetadata``,
``XStatMetadata``. Times on the wire: ``XLine.timestamp_ns`` in nanoseconds since the epoch,
``XEvent.offset_ps``/``duration_ps`` in picoseconds relative to their line's timestamp.
"""

from __future__ import annotations

from typing import Any

from stepscope.formats.protodef import Field, Message, build

_STAT_VALUE = [
    Field("double_value", 2, "double", oneof="value"),
    Field("uint64_value", 3, "uint64", oneof="value"),
    Field("int64_value", 4, "int64", oneof="value"),
    Field("str_value", 5, "string", oneof="value"),
    Field("bytes_value", 6, "bytes", oneof="value"),
    # An id into the plane's stat_metadata whose name is the string value (interned strings).
    Field("ref_value", 7, "uint64", oneof="value"),
]

MESSAGES = [
    Message("XSpace", [
        Field("planes", 1, "XPlane", repeated=True),
        Field("errors", 2, "string", repeated=True),
        Field("warnings", 3, "string", repeated=True),
        Field("hostnames", 4, "string", repeated=True),
    ]),
    Message("XPlane", [
        Field("id", 1, "int64"),
        Field("name", 2, "string"),
        Field("lines", 3, "XLine", repeated=True),
        Field("event_metadata", 4, "map<int64, XEventMetadata>"),
        Field("stat_metadata", 5, "map<int64, XStatMetadata>"),
        Field("stats", 6, "XStat", repeated=True),
    ]),
    Message("XLine", [
        Field("id", 1, "int64"),
        Field("display_id", 10, "int64"),
        Field("name", 2, "string"),
        Field("display_name", 11, "string"),
        Field("timestamp_ns", 3, "int64"),
        Field("duration_ps", 9, "int64"),
        Field("events", 4, "XEvent", repeated=True),
    ]),
    Message("XEvent", [
        Field("metadata_id", 1, "int64"),
        Field("offset_ps", 2, "int64", oneof="data"),
        Field("num_occurrences", 5, "int64", oneof="data"),
        Field("duration_ps", 3, "int64"),
        Field("stats", 4, "XStat", repeated=True),
    ]),
    Message("XStat", [Field("metadata_id", 1, "int64"), *_STAT_VALUE]),
    Message("XEventMetadata", [
        Field("id", 1, "int64"),
        Field("name", 2, "string"),
        Field("display_name", 4, "string"),
        Field("metadata", 3, "bytes"),
        Field("stats", 5, "XStat", repeated=True),
        Field("child_id", 6, "int64", repeated=True),
    ]),
    Message("XStatMetadata", [
        Field("id", 1, "int64"),
        Field("name", 2, "string"),
        Field("description", 3, "string"),
    ]),
]

_CLASSES = build("stepscope/xplane.proto", "tensorflow.profiler", MESSAGES)

XSpace: Any = _CLASSES["XSpace"]
XPlane: Any = _CLASSES["XPlane"]
XLine: Any = _CLASSES["XLine"]
XEvent: Any = _CLASSES["XEvent"]
XStat: Any = _CLASSES["XStat"]
XEventMetadata: Any = _CLASSES["XEventMetadata"]
XStatMetadata: Any = _CLASSES["XStatMetadata"]


_KEY_LIMIT = 1 << 63  # metadata maps are keyed by int64


def metadata_entry(mapping: Any, key: int) -> Any | None:
    """The entry for ``key`` in a plane's ``event_metadata`` or ``stat_metadata``, or None
    when there is none, ``key`` (a ``ref_value`` of 2^64-1, say) beyond the map's keys
    included. A missing entry is never created, as ``mapping[key]`` would."""
    if not -_KEY_LIMIT <= key < _KEY_LIMIT:
        return None
    return mapping.get(key)
