"""Building XSpace messages: planes with interned event and stat metadata, and atomic writes."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from stepscope.errors import ProfileFormatError
from stepscope.formats.xplane_proto import XSpace
from stepscope.model.locations import as_path, is_remote, read_bytes, write_remote

_INT64_MAX = 2**63 - 1


class PlaneBuilder:
    """Adds lines, events and stats to one ``XPlane``, interning metadata by name."""

    def __init__(self, plane: Any) -> None:
        self.plane = plane
        self._event_ids: dict[str, int] = {}
        self._stat_ids: dict[str, int] = {}

    def event_metadata_id(self, name: str) -> int:
        """The id of the event metadata named ``name`` (created on first use; ids start at 1)."""
        mid = self._event_ids.get(name)
        if mid is None:
            mid = len(self._event_ids) + 1
            self._event_ids[name] = mid
            md = self.plane.event_metadata[mid]
            md.id = mid
            md.name = name
        return mid

    def stat_metadata_id(self, name: str) -> int:
        """The id of the stat metadata named ``name`` (created on first use; ids start at 1)."""
        sid = self._stat_ids.get(name)
        if sid is None:
            sid = len(self._stat_ids) + 1
            self._stat_ids[name] = sid
            md = self.plane.stat_metadata[sid]
            md.id = sid
            md.name = name
        return sid

    def set_stat(self, stat: Any, name: str, value: Any) -> None:
        """Fill an ``XStat`` with a typed value (int, float, bool, str, bytes; else its str)."""
        stat.metadata_id = self.stat_metadata_id(name)
        if isinstance(value, bool):
            stat.int64_value = int(value)
        elif isinstance(value, int):
            if value > _INT64_MAX:
                stat.uint64_value = value
            else:
                stat.int64_value = value
        elif isinstance(value, float):
            stat.double_value = value
        elif isinstance(value, bytes):
            stat.bytes_value = value
        else:
            stat.str_value = str(value)

    def add_plane_stat(self, name: str, value: Any) -> None:
        """Add a stat to the plane itself."""
        self.set_stat(self.plane.stats.add(), name, value)

    def add_line(self, line_id: int, name: str, timestamp_ns: int) -> Any:
        """Add a line whose event offsets are relative to ``timestamp_ns``."""
        return self.plane.lines.add(id=line_id, display_id=line_id, name=name,
                                    timestamp_ns=timestamp_ns)

    def add_event(self, line: Any, name: str, start_ns: int, duration_ns: int,
                  stats: dict[str, Any] | None = None) -> Any:
        """Add a complete event to ``line`` (times in ns, stored in ps as XSpace wants)."""
        event = line.events.add(metadata_id=self.event_metadata_id(name),
                                offset_ps=(start_ns - line.timestamp_ns) * 1000,
                                duration_ps=duration_ns * 1000)
        if stats:
            for key, value in stats.items():
                self.set_stat(event.stats.add(), key, value)
        return event


def new_space(hostname: str) -> Any:
    """An empty ``XSpace`` naming its host."""
    space = XSpace()
    space.hostnames.append(hostname)
    return space


def add_plane(space: Any, plane_id: int, name: str) -> PlaneBuilder:
    """Add a plane to ``space`` and return a builder for it."""
    return PlaneBuilder(space.planes.add(id=plane_id, name=name))


def _umask_at_import() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_IMPORT_UMASK = _umask_at_import()


def file_mode() -> int:
    """The mode ``open`` gives a new file under the process's current umask.

    mkstemp makes files private (0600); profiles are shared like any file the user writes
    (TensorBoard may run as another user), so they get the usual mode. Linux tells the umask
    in /proc without changing it (``os.umask`` would, racing other threads).
    """
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return 0o666 & ~int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return 0o666 & ~_IMPORT_UMASK


def write_atomic(path: Path, data: bytes | list[bytes | memoryview]) -> None:
    """Write ``data`` (bytes, or parts written one after the other: no joined copy) to
    ``path`` (a local path or what ``locations.as_path`` made of a URL) so that readers never
    see a half-written file."""
    parts = data if isinstance(data, list) else [data]
    if is_remote(path):
        write_remote(path, b"".join(parts))  # (one bytes part is passed on as it is)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, file_mode())
        with os.fdopen(fd, "wb") as f:
            for part in parts:
                f.write(part)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_space(space: Any, path: Path) -> None:
    """Serialise an ``XSpace`` to ``path`` atomically."""
    write_atomic(path, space.SerializeToString())


def read_space(path: Path) -> Any:
    """Parse an ``.xplane.pb`` file into an ``XSpace`` message."""
    data = read_bytes(as_path(path))
    space = XSpace()
    try:
        space.ParseFromString(data)
    except Exception as err:  # protobuf's DecodeError; any parse failure means a bad file
        raise ProfileFormatError(
            f"{path} is not an XSpace profile ({err}); pass a .xplane.pb file written by "
            "TensorFlow, JAX or stepscope.") from err
    return space
