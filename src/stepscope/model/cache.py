"""The on-disk cache: a loaded host's EventTable and small analysis results, keyed by source.

A second open of the same profile maps the cached columns instead of parsing the XSpace file
again. Every entry is keyed by :func:`source_key`: the sources' resolved paths, sizes and
modification times, the cache format and the stepscope version, so a changed source or a new
stepscope never sees an old entry.

Files in :func:`cache_dir`:

``<key>.table``
    One EventTable, laid out so that loading is a memory map, not a parse::

        0   16 bytes  magic  b"stepscope-table\\n"
        16  u64 LE    header length H
        24  u64 LE    data length D
        32  16 bytes  source id: a digest of the source's resolved path alone (to find the
                      entries a newer one supersedes without parsing their headers)
        48  H bytes   JSON header (ASCII): format, stepscope version, key, source identity,
                      planes (with tagged stats), name lists, and for every column its
                      dtype, shape and offset into the data section
        ..  zero padding to the next multiple of 64 (the data section's start, S)
        S   D bytes   the raw numpy columns, little-endian, uncompressed, each one
                      starting at a multiple of 64 bytes

    The file is exactly S + D bytes; any other size means a truncated or damaged file.
    Columns are not checksummed (hashing hundreds of megabytes would cost more than the parse
    it saves); the header is validated in full and every column must lie inside the data
    section with the dtype and length its field requires.

``<key>.<name>.json``
    One analysis result: a line of JSON with the entry's identity (format, stepscope version,
    key, name, sources), then a line with the result's JSON.

Saving an entry removes the entries it supersedes: those of the same sources (and name) in an
older state, whose keys can never be hit again.

Tables loaded from the cache hold **read-only** numpy arrays backed by the mapped file (the
mapping lives as long as any array does); copy a column before changing it in place.

Reads never raise: a missing, stale, corrupt, truncated or foreign file is a miss (and is
deleted where possible). Writes go to a temporary file in the cache directory and are renamed
into place, so no half-written entry is ever visible; a failed write warns once per directory
and is otherwise ignored. Set ``STEPSCOPE_NO_CACHE=1`` to turn the cache off.
"""

from __future__ import annotations

import base64
import hashlib
import json
import mmap
import os
import re
import struct
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from stepscope import version
from stepscope.model.events import EventTable, Plane, StatTable

# Bump whenever the layout of either file kind, or the EventTable it holds, changes.
FORMAT_VERSION = 1

_MAGIC = b"stepscope-table\n"
_PREFIX = struct.Struct("<16sQQ16s")
_ALIGN = 64
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,200}")
_KEY = r"[0-9a-f]{32}"
_TABLE_FILE = re.compile(_KEY + r"\.table")
_RESULT_FILE = re.compile(_KEY + r"\.[A-Za-z0-9_.-]+\.json")
_TEMP_PREFIX = ".tmp-"

# Column dtypes the format accepts; anything else in a header means a corrupt or foreign file.
_DTYPES = {name: np.dtype(name) for name in ("|i1", "|u1", "<i4", "<i8")}

_warned_dirs: set[str] = set()


class CacheWarning(UserWarning):
    """The cache could not be written; profiles still load, only without the cache."""


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
    """A hex key for these source files as they are now; raises OSError if one is missing.

    The order of ``paths`` does not matter.
    """
    entries = []
    for path in paths:
        resolved = Path(path).resolve()
        st = resolved.stat()
        entries.append([str(resolved), st.st_size, st.st_mtime_ns])
    entries.sort()
    identity = [FORMAT_VERSION, version.__version__, salt, entries]
    digest = hashlib.blake2b(json.dumps(identity).encode(), digest_size=16)
    return digest.hexdigest()


# -- tables -----------------------------------------------------------------------------------


def load_table(source: Path) -> EventTable | None:
    """The cached EventTable of ``source``, or None on a miss."""
    if not enabled():
        return None
    try:
        key = source_key([source])
    except OSError:
        return None
    path = cache_dir() / f"{key}.table"
    try:
        table = _read_table(path, key)
    except FileNotFoundError:
        return None
    except Exception:  # any damage at all is a miss, never an error for the caller
        _remove(path)
        return None
    return table


def save_table(source: Path, table: EventTable) -> None:
    """Store ``table`` as the cached EventTable of ``source``."""
    if not enabled():
        return
    try:
        key = source_key([source])
        resolved = str(Path(source).resolve())
        header: dict[str, Any] = {
            "format": FORMAT_VERSION,
            "stepscope": version.__version__,
            "key": key,
            "source": resolved,
            "planes": [[p.id, p.name, _encode_stats(p.stats)] for p in table.planes],
            "line_name": table.line_name,
            "names": table.names,
            "hostnames": table.hostnames,
            "stat_names": table.stats.stat_names,
            "typed": list(table.typed),
        }
    except OSError:
        return
    except (TypeError, ValueError) as err:
        _warn(cache_dir(), err)
        return
    arrays = _columns(table)
    columns = []
    offset = 0
    for name, array in arrays:
        columns.append({"name": name, "dtype": array.dtype.str, "shape": list(array.shape),
                        "offset": offset})
        offset = _aligned(offset + array.nbytes)
    header["columns"] = columns
    data_length = offset
    blob = json.dumps(header, separators=(",", ":")).encode("ascii")
    data_start = _aligned(_PREFIX.size + len(blob))
    source_id = _source_id(resolved)

    def write(f: Any) -> None:
        f.write(_PREFIX.pack(_MAGIC, len(blob), data_length, source_id))
        f.write(blob)
        f.write(b"\0" * (data_start - _PREFIX.size - len(blob)))
        written = 0
        for _, array in arrays:
            f.write(b"\0" * (_aligned(written) - written))
            f.write(array.view(np.uint8).data)
            written = _aligned(written) + array.nbytes
        f.write(b"\0" * (data_length - written))

    if _write_atomic(f"{key}.table", write):
        _prune(_TABLE_FILE, f"{key}.table", lambda other: _table_source_id(other) == source_id)


def _columns(table: EventTable) -> list[tuple[str, NDArray[Any]]]:
    """Every array of the table, by its name in the file, native-endian and contiguous."""
    st = table.stats
    named: list[tuple[str, NDArray[Any]]] = [
        ("line_plane", table.line_plane), ("line_id", table.line_id),
        ("plane", table.plane), ("line", table.line), ("name", table.name),
        ("start_ns", table.start_ns), ("duration_ns", table.duration_ns),
        *((f"typed.{k}", v) for k, v in table.typed.items()),
        ("stats.event", st.event), ("stats.name", st.name), ("stats.kind", st.kind),
        ("stats.value", st.value), ("stats.length", st.length),
        ("stats.text", np.frombuffer(st.text, dtype=np.uint8)),
    ]
    out = []
    for name, array in named:
        array = np.ascontiguousarray(array)
        if array.dtype.byteorder == ">":
            array = array.astype(array.dtype.newbyteorder("<"))
        out.append((name, array))
    return out


def _read_table(path: Path, key: str) -> EventTable:
    with open(path, "rb") as f:
        if sys.version_info >= (3, 13):  # no duplicated descriptor held per loaded table
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ, trackfd=False)
        else:
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    magic, header_length, data_length, _ = _PREFIX.unpack_from(mm, 0)
    if magic != _MAGIC:
        raise ValueError("not a stepscope table")
    data_start = _aligned(_PREFIX.size + header_length)
    if len(mm) != data_start + data_length:
        raise ValueError("truncated or padded")
    header = json.loads(mm[_PREFIX.size:_PREFIX.size + header_length])
    if (header["format"], header["stepscope"], header["key"]) != (
            FORMAT_VERSION, version.__version__, key):
        raise ValueError("stale")

    cols: dict[str, NDArray[Any]] = {}
    for col in header["columns"]:
        dtype = _DTYPES[col["dtype"]]
        (count,) = col["shape"]
        offset = int(col["offset"])
        if not (isinstance(count, int) and count >= 0 and offset % _ALIGN == 0
                and 0 <= offset <= offset + count * dtype.itemsize <= data_length):
            raise ValueError("column outside the data section")
        if count:
            cols[col["name"]] = np.frombuffer(mm, dtype=dtype, count=count,
                                              offset=data_start + offset)
        else:
            cols[col["name"]] = np.empty(0, dtype=dtype)
            cols[col["name"]].flags.writeable = False

    def take(name: str, dtype: type[np.generic], length: int | None) -> NDArray[Any]:
        array = cols[name]
        if array.dtype != dtype or (length is not None and len(array) != length):
            raise ValueError(f"bad column {name}")
        return array

    n_lines, n_events = len(cols["line_id"]), len(cols["name"])
    n_stats = len(cols["stats.event"])
    stats = StatTable(
        event=take("stats.event", np.int64, n_stats),
        name=take("stats.name", np.int32, n_stats),
        kind=take("stats.kind", np.int8, n_stats),
        value=take("stats.value", np.int64, n_stats),
        length=take("stats.length", np.int32, n_stats),
        # A view of the mapped file: the (often large) text blob is not copied.
        text=take("stats.text", np.uint8, None).data,
        stat_names=_strings(header["stat_names"]),
    )
    line_name = _strings(header["line_name"])
    if len(line_name) != n_lines:
        raise ValueError("line names do not match the lines")
    return EventTable(
        planes=[Plane(int(pid), str(pname), _decode_stats(pstats))
                for pid, pname, pstats in header["planes"]],
        line_plane=take("line_plane", np.int32, n_lines),
        line_id=take("line_id", np.int64, n_lines),
        line_name=line_name,
        plane=take("plane", np.int32, n_events),
        line=take("line", np.int32, n_events),
        name=take("name", np.int32, n_events),
        start_ns=take("start_ns", np.int64, n_events),
        duration_ns=take("duration_ns", np.int64, n_events),
        typed={str(k): take(f"typed.{k}", np.int64, n_events) for k in header["typed"]},
        names=_strings(header["names"]),
        stats=stats,
        hostnames=_strings(header["hostnames"]),
    )


def _source_id(resolved: str) -> bytes:
    return hashlib.blake2b(resolved.encode("utf-8", "surrogateescape"), digest_size=16).digest()


def _table_source_id(path: Path) -> bytes | None:
    """The source id in a table file's prefix, or None if it is not a table file."""
    try:
        with open(path, "rb") as f:
            magic, _, _, source_id = _PREFIX.unpack(f.read(_PREFIX.size))
    except (OSError, struct.error):
        return None
    return source_id if magic == _MAGIC else None


def _strings(value: Any) -> list[str]:
    if not (isinstance(value, list) and set(map(type, value)) <= {str}):
        raise ValueError("expected a list of strings")
    return value


def _encode_stats(stats: dict[str, Any]) -> dict[str, list[Any]]:
    """Plane stats tagged with their type, so that JSON gives back the same Python values."""
    out: dict[str, list[Any]] = {}
    for name, value in stats.items():
        if isinstance(value, bool):
            out[name] = ["?", value]
        elif isinstance(value, int):
            out[name] = ["i", value]
        elif isinstance(value, float):
            out[name] = ["f", value]
        elif isinstance(value, str):
            out[name] = ["s", value]
        elif isinstance(value, bytes):
            out[name] = ["b", base64.b64encode(value).decode("ascii")]
        else:
            raise TypeError(f"plane stat {name!r} has a type the cache cannot store: "
                            f"{type(value).__name__}")
    return out


def _decode_stats(stats: Any) -> dict[str, Any]:
    types: dict[str, type] = {"?": bool, "i": int, "f": float, "s": str}
    out: dict[str, Any] = {}
    for name, (tag, value) in stats.items():
        if tag == "b":
            out[name] = base64.b64decode(value, validate=True)
        elif tag == "f" and isinstance(value, int) and not isinstance(value, bool):
            out[name] = float(value)  # defensive: a float that JSON wrote as an integer
        elif type(value) is types[tag]:
            out[name] = value
        else:
            raise ValueError(f"plane stat {name!r} does not match its tag")
    return out


# -- results ----------------------------------------------------------------------------------


def load_result(paths: Sequence[Path], name: str) -> dict[str, Any] | None:
    """The cached result ``name`` computed from ``paths``, or None on a miss.

    The result comes back as JSON gives it (tuples become lists, keys become strings).
    """
    _check_name(name)
    if not enabled():
        return None
    try:
        key = source_key(paths)
    except OSError:
        return None
    path = cache_dir() / f"{key}.{name}.json"
    try:
        with open(path, encoding="utf-8") as f:
            identity = json.loads(f.readline())
            result = json.loads(f.readline())
            if f.read():
                raise ValueError("trailing data")
        if (identity["format"], identity["stepscope"], identity["key"], identity["name"]) != (
                FORMAT_VERSION, version.__version__, key, name):
            raise ValueError("stale")
        if not isinstance(result, dict):
            raise ValueError("not an object")
    except FileNotFoundError:
        return None
    except Exception:  # any damage at all is a miss
        _remove(path)
        return None
    return result


def save_result(paths: Sequence[Path], name: str, result: dict[str, Any]) -> None:
    """Store ``result`` (a JSON-serialisable dict) as result ``name`` of ``paths``.

    Raises ValueError for a bad name and TypeError for a result that JSON cannot hold.
    """
    _check_name(name)
    if not isinstance(result, dict):
        raise TypeError(f"a cached result must be a dict, not {type(result).__name__}")
    text = json.dumps(result, separators=(",", ":"))  # TypeError here is the caller's bug
    if not enabled():
        return
    try:
        key = source_key(paths)
        sources = sorted(str(Path(p).resolve()) for p in paths)
    except OSError:
        return
    identity = {"format": FORMAT_VERSION, "stepscope": version.__version__, "key": key,
                "name": name, "sources": sources}
    data = (json.dumps(identity, separators=(",", ":")) + "\n" + text + "\n").encode("utf-8")
    if _write_atomic(f"{key}.{name}.json", lambda f: f.write(data)):
        _prune(_RESULT_FILE, f"{key}.{name}.json",
               lambda other: _result_identity(other) == (sources, name))


def _result_identity(path: Path) -> tuple[Any, Any] | None:
    """The sources and name on a result file's first line, or None if unreadable."""
    try:
        with open(path, encoding="utf-8") as f:
            identity = json.loads(f.readline())
        return identity.get("sources"), identity.get("name")
    except (OSError, ValueError, AttributeError):
        return None


def _check_name(name: str) -> None:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(f"Cache result name {name!r} is not valid: use 1 to 200 of the "
                         "characters A-Z a-z 0-9 _ . -")


# -- files ------------------------------------------------------------------------------------


def clear() -> int:
    """Remove every cache file (and leftover temporary file); return how many were removed."""
    removed = 0
    for path in _entries():
        if _TABLE_FILE.fullmatch(path.name) or _RESULT_FILE.fullmatch(path.name) or \
                path.name.startswith(_TEMP_PREFIX):
            removed += _remove(path)
    return removed


def _entries() -> Iterator[Path]:
    try:
        yield from cache_dir().iterdir()
    except OSError:
        return


def _prune(pattern: re.Pattern[str], keep: str, superseded: Callable[[Path], bool]) -> None:
    """Remove entries that an entry just written replaces (same sources, older state)."""
    for path in _entries():
        if path.name != keep and pattern.fullmatch(path.name) and superseded(path):
            _remove(path)


def _write_atomic(filename: str, write: Callable[[Any], Any]) -> bool:
    """Write ``filename`` in the cache directory through a temporary file; False on failure."""
    directory = cache_dir()
    temp: str | None = None
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, temp = tempfile.mkstemp(dir=directory, prefix=_TEMP_PREFIX)
        with os.fdopen(fd, "wb") as f:
            write(f)
        os.replace(temp, directory / filename)
        return True
    except (OSError, ValueError) as err:
        if temp is not None:
            _remove(Path(temp))
        _warn(directory, err)
        return False


def _warn(directory: Path, err: Exception) -> None:
    """Warn that the cache cannot be written, once per directory."""
    if str(directory) in _warned_dirs:
        return
    _warned_dirs.add(str(directory))
    warnings.warn(f"stepscope cannot write its cache in {directory} ({err}); profiles will "
                  "load without it. Set STEPSCOPE_CACHE_DIR to a writable directory, or "
                  "STEPSCOPE_NO_CACHE=1 to turn the cache off.", CacheWarning, stacklevel=4)


def _remove(path: Path) -> int:
    try:
        path.unlink()
    except OSError:
        return 0
    return 1


def _aligned(offset: int) -> int:
    return -(-offset // _ALIGN) * _ALIGN
