"""The on-disk cache's file format without NumPy: where entries live, how they are keyed, the
fixed prefix of an entry, and reading back a JSON result entry.

``model.cache`` describes the layout and reads and writes every kind of entry; what is here
is the part a process that only prints a kept answer needs (``stepscope report`` on a cached
profile: see ``run.kept``), so that it neither imports NumPy nor pays for it. A JSON result
read here is checked exactly as ``cache`` checks any entry (size, header checksum, identity,
the one array's bounds, dtype and checksum); damage is a miss and the entry is deleted.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import stat
import struct
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

from stepscope import version
from stepscope.model import locations

TABLE_NAME = "table"  # a host's EventTable's entry

# Bump whenever the file layout, or the EventTable it holds, changes.
FORMAT_VERSION = 10  # 3: typed stats kept sparse; 4: no plane column, int32 stat rows,
# texts by index; 5: stats with no metadata named "<unknown stat>" (never code -1); 6: XSpace
# tables carry stepscope_hlo_op_names; 7: and stepscope_hlo_op_types; 8: device planes carry
# stepscope_xla_op_metadata; 9: lines, event and stat names int16 where every code fits;
# 10: durations int32 where every one fits

MAGIC = b"stepscope-cache\n"
PREFIX = struct.Struct("<16sQQ16sI4x")
ALIGN = 64
# A header larger than this is damage, not a table (names of millions of events fit).
MAX_HEADER = 1 << 31
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,200}")
# A JSON result entry holds one array of bytes, by this name.
JSON_ARRAY = "json"
_T = TypeVar("_T")


def cache_dir() -> Path:
    """The directory that holds the cache files."""
    explicit = os.environ.get("STEPSCOPE_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg and os.path.isabs(xdg):  # the XDG spec says to ignore a relative value
        return Path(xdg) / "stepscope"
    return Path.home() / ".cache" / "stepscope"


def enabled() -> bool:
    """Whether the cache is on (``STEPSCOPE_NO_CACHE`` unset, empty or "0")."""
    return os.environ.get("STEPSCOPE_NO_CACHE", "") in ("", "0")


def source_key(paths: Sequence[Path], salt: str = "") -> str:
    """A hex key for these source files as they are now (local paths or fsspec URLs);
    raises OSError if one is missing.

    The order of ``paths`` does not matter.
    """
    entries = sorted(locations.identity(locations.as_path(path)) for path in paths)
    identity = [FORMAT_VERSION, version.__version__, salt, entries]
    digest = hashlib.blake2b(json.dumps(identity).encode(), digest_size=16)
    return digest.hexdigest()


def has_table(source: Path) -> bool:
    """Whether ``source``'s table has an entry in the cache (not read: it may still turn out
    stale or damaged, and miss)."""
    if not enabled():
        return False
    try:
        key = source_key([source])
    except OSError:
        return False
    return (cache_dir() / f"{key}.{TABLE_NAME}.cache").is_file()


def check_name(name: str) -> None:
    """A ValueError unless ``name`` can name a cache entry."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(f"Cache entry name {name!r} is not valid: use 1 to 200 of the "
                         "characters A-Z a-z 0-9 _ . -")


def aligned(offset: int) -> int:
    """``offset`` rounded up to the next multiple of ``ALIGN``."""
    return -(-offset // ALIGN) * ALIGN


def remove(path: Path) -> int:
    """Remove a cache file (or an empty directory squatting on an entry's name)."""
    try:
        path.unlink()
    except IsADirectoryError:
        with contextlib.suppress(OSError):
            path.rmdir()
            return 1
        return 0
    except OSError:
        return 0
    return 1


def load_json(paths: Sequence[Path], name: str) -> dict[str, Any] | None:
    """The JSON result stored as entry ``name`` of ``paths`` (``cache.save_result``), or
    None on a miss: no entry, the sources changed, another stepscope or format, or damage
    (then the entry is deleted)."""
    check_name(name)
    return find_entry(paths, name, lambda path, key: _read_json_entry(path, key, name))


def find_entry(paths: Sequence[Path], name: str,
               read: Callable[[Path, str], _T]) -> _T | None:
    """What ``read(path, key)`` makes of entry ``name`` of ``paths``, or None on a miss: the
    cache off, no entry, or any exception from ``read`` (damage, another stepscope or
    format, changed sources: then the entry is deleted). The one lookup of every entry."""
    if not enabled():
        return None
    try:
        key = source_key(paths)
    except OSError:
        return None
    path = cache_dir() / f"{key}.{name}.cache"
    try:
        result = read(path, key)
    except FileNotFoundError:
        return None
    except Exception:  # any damage at all is a miss, never an error for the caller
        remove(path)
        return None
    with contextlib.suppress(OSError):
        os.utime(path)  # recently used: the last to go when the cache is trimmed
    return result


def open_entry(path: Path) -> BinaryIO:
    """The entry file at ``path``, opened unbuffered for reading (never through a link, never
    waiting on a FIFO); ValueError if it is not a regular file."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    f = os.fdopen(os.open(path, flags), "rb", buffering=0)
    if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
        f.close()
        raise ValueError("not a regular file")
    return f


def read_header(f: BinaryIO, key: str, name: str) -> tuple[dict[str, Any], int, int]:
    """The checked header of the entry open as ``f`` (``open_entry``), written for ``key`` and
    ``name`` by this stepscope in this format, with where its data section starts and its
    length; ValueError if not (then the file is damage, or stale)."""
    magic, header_length, data_length, _, header_crc = PREFIX.unpack(f.read(PREFIX.size))
    if magic != MAGIC or header_length > MAX_HEADER:
        raise ValueError("not a stepscope cache entry")
    data_start = aligned(PREFIX.size + header_length)
    if os.fstat(f.fileno()).st_size != data_start + data_length:
        raise ValueError("truncated or padded")
    blob = f.read(header_length)
    if len(blob) != header_length or zlib.crc32(blob) != header_crc:
        raise ValueError("header checksum")
    header = json.loads(blob)
    if (header["format"], header["stepscope"], header["key"], header["name"]) != (
            FORMAT_VERSION, version.__version__, key, name):
        raise ValueError("stale")
    return header, data_start, data_length


def _read_json_entry(path: Path, key: str, name: str) -> dict[str, Any]:
    """The JSON object of a result entry, checked in full; ValueError (or OSError) if not."""
    with open_entry(path) as f:
        header, data_start, data_length = read_header(f, key, name)
        columns = header["arrays"]
        if not isinstance(header["meta"], dict) or not isinstance(columns, list) or [
                c.get("name") for c in columns] != [JSON_ARRAY]:
            raise ValueError("not a JSON result")
        col = columns[0]
        shape, offset = col["shape"], col["offset"]
        if col["dtype"] != "|u1" or not (isinstance(shape, list) and len(shape) == 1
                                         and isinstance(shape[0], int) and shape[0] >= 0):
            raise ValueError("bad array")
        if not (isinstance(offset, int) and offset % ALIGN == 0
                and 0 <= offset <= offset + shape[0] <= data_length):
            raise ValueError("array outside the data section")
        f.seek(data_start)
        data = bytearray(data_length)
        if read_fully(f, memoryview(data)) != data_length or f.read(1):
            raise ValueError("the file changed while it was read")
    raw = memoryview(data)[offset:offset + shape[0]]
    if zlib.crc32(raw) != col["crc"]:
        raise ValueError(f"checksum of {JSON_ARRAY}")
    result = json.loads(bytes(raw))
    if not isinstance(result, dict):
        raise ValueError("not an object")
    return result


def read_fully(f: Any, buffer: memoryview) -> int:
    """Read into the whole of ``buffer`` (bytes) from the unbuffered file ``f``, as far as it
    goes; how many bytes were read. One read returns at most about 2 GiB on Linux (and less
    from a pipe): a table or index of a 1 GB profile is larger, and was a miss every time."""
    done = 0
    while done < len(buffer):
        n = f.readinto(buffer[done:])
        if not n:
            break
        done += n
    return done
