"""Reading a framework's XSpace for merging: absolute times, plain-Python host events.

TensorFlow (and JAX) write XSpace with line timestamps *relative to the profile's start*
(the ``profile_start_time`` stat of their Task Environment plane); stepscope's lines carry
absolute wall-clock times. Both clocks are the wall clock (CLOCK_REALTIME, ``time.time_ns``),
so adding that start time is all the alignment needed.
"""

from __future__ import annotations

from typing import Any

from stepscope.capture.bridges import HostLine
from stepscope.model import schema


def _stat_value(plane: Any, stat: Any) -> Any:
    kind = stat.WhichOneof("value")
    if kind is None:
        return None
    if kind == "ref_value":  # a string interned as a stat metadata name
        return plane.stat_metadata[stat.ref_value].name
    return getattr(stat, kind)


def profile_start_ns(space: Any) -> int:
    """The wall-clock start that the space's line timestamps count from (0 if absolute)."""
    for plane in space.planes:
        if plane.name != schema.TASK_ENV_PLANE:
            continue
        for stat in plane.stats:
            if plane.stat_metadata[stat.metadata_id].name == schema.ENV_PROFILE_START_TIME:
                return int(_stat_value(plane, stat) or 0)
    return 0


def host_lines(plane: Any, base_ns: int) -> list[HostLine]:
    """A host plane's lines as ``HostLine``s with absolute times (``base_ns`` added)."""
    lines: list[HostLine] = []
    for line in plane.lines:
        start = base_ns + line.timestamp_ns
        out = HostLine(line.id, line.name or line.display_name or str(line.id))
        for event in line.events:
            begin = start + event.offset_ps // 1000
            stats = {plane.stat_metadata[s.metadata_id].name: _stat_value(plane, s)
                     for s in event.stats}
            name = plane.event_metadata[event.metadata_id].name
            out.events.append((name, begin, begin + event.duration_ps // 1000, stats or None))
        lines.append(out)
    return lines


def shift_plane(plane: Any, base_ns: int) -> Any:
    """``plane`` with ``base_ns`` added to its line timestamps (made absolute), in place."""
    for line in plane.lines:
        line.timestamp_ns += base_ns
    return plane
