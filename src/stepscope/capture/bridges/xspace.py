"""Reading a framework's XSpace for merging: absolute times, plain-Python host events.

TensorFlow (and JAX) write XSpace with line timestamps *relative to the profile's start*
(the ``profile_start_time`` stat of their Task Environment plane); stepscope's lines carry
absolute wall-clock times. Both clocks are the wall clock (CLOCK_REALTIME, ``time.time_ns``),
so adding that start time is all the alignment needed.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from stepscope.capture.bridges import BridgeData, HostLine
from stepscope.formats.xplane_proto import metadata_entry
from stepscope.model import schema


def _stat_value(plane: Any, stat: Any) -> Any:
    kind = stat.WhichOneof("value")
    if kind is None:
        return None
    if kind == "ref_value":  # a string interned as a stat metadata name
        md = metadata_entry(plane.stat_metadata, stat.ref_value)
        return "<unknown stat>" if md is None else md.name
    return getattr(stat, kind)


def _name(md: Any, what: str) -> str:
    return f"<unknown {what}>" if md is None else str(md.name)


def profile_start_ns(space: Any) -> int:
    """The wall-clock start that the space's line timestamps count from (0 if absolute)."""
    for plane in space.planes:
        if plane.name != schema.TASK_ENV_PLANE:
            continue
        for stat in plane.stats:
            md = metadata_entry(plane.stat_metadata, stat.metadata_id)
            if md is not None and md.name == schema.ENV_PROFILE_START_TIME:
                return int(_stat_value(plane, stat) or 0)
    return 0


def host_lines(plane: Any, base_ns: int, framework: str | None = None) -> list[HostLine]:
    """A host plane's lines as ``HostLine``s with absolute times (``base_ns`` added); with
    ``framework``, each event says which framework's profiler recorded it (the
    ``stepscope_bridge`` stat), so that the analysis reads it by that framework's rules."""
    lines: list[HostLine] = []
    for line in plane.lines:
        start = base_ns + line.timestamp_ns
        out = HostLine(line.id, line.name or line.display_name or str(line.id))
        for event in line.events:
            begin = start + event.offset_ps // 1000
            stats = {_name(metadata_entry(plane.stat_metadata, s.metadata_id), "stat"):
                     _stat_value(plane, s) for s in event.stats}
            if framework:
                stats[schema.BRIDGE] = framework
            name = _name(metadata_entry(plane.event_metadata, event.metadata_id), "event")
            out.events.append((name, begin, begin + event.duration_ps // 1000, stats or None))
        lines.append(out)
    return lines


def shift_plane(plane: Any, base_ns: int) -> Any:
    """``plane`` with ``base_ns`` added to its line timestamps (made absolute), in place."""
    for line in plane.lines:
        line.timestamp_ns += base_ns
    return plane


def _main_thread_os_name() -> str | None:
    """The OS name of the main thread, which TF and JAX use to name its line (Linux only)."""
    try:
        return Path("/proc/self/comm").read_text().strip()
    except OSError:
        return None


def merge_space(space: Any, data: BridgeData) -> None:
    """Add the host lines and device planes of a framework's ``space`` to ``data``.

    Times become absolute. The line of the Python main thread takes the id stepscope gives
    that thread, so the framework's events nest in the user's ``Trace`` steps; the space's
    Task Environment is left out (ours describes the session).
    """
    base = profile_start_ns(space)
    main_name = _main_thread_os_name()
    main_id = threading.main_thread().native_id
    for plane in space.planes:
        if plane.name == schema.TASK_ENV_PLANE:
            continue
        if plane.name != schema.HOST_PLANE:
            data.planes.append(shift_plane(plane, base))
            continue
        lines = host_lines(plane, base, data.framework)
        mains = [line for line in lines if main_name and line.name == main_name]
        for line in lines:
            if len(mains) == 1 and line is mains[0] and main_id is not None:
                line = HostLine(main_id, threading.main_thread().name, line.events)
            data.host_lines.append(line)
