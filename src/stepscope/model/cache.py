"""The on-disk cache: host tables, derived arrays and analysis results, in one file format.

A second open of the same profile reads the cached columns instead of parsing its files again.
Every entry is keyed by :func:`source_key`: the sources' resolved paths, sizes and
modification times, the cache format and the stepscope version, so a changed source or a new
stepscope never sees an old entry. Three kinds of entry share one format:

- a host's EventTable (:func:`load_table` / :func:`save_table`, entry name ``table``);
- named numpy arrays with a JSON header, such as the trace viewer's index
  (:func:`load_arrays` / :func:`save_arrays`);
- a JSON result, such as the run model (:func:`load_result` / :func:`save_result`).

File ``<key>.<name>.cache`` in :func:`cache_dir`::

    0   16 bytes  magic  b"stepscope-cache\\n"
    16  u64 LE    header length H
    24  u64 LE    data length D
    32  16 bytes  lineage: a digest of the entry's name and its sources' resolved paths (not
                  their state), to find the entries a newer one supersedes without a parse
    48  u32 LE    CRC-32 of the header
    52  4 bytes   zero
    56  H bytes   JSON header: format, stepscope version, key, name, sources, the caller's
                  ``meta``, and for every array its name, dtype, shape, offset into the data
                  section and CRC-32
    ..  zero padding to the next multiple of 64 (the data section's start, S)
    S   D bytes   the raw arrays, little-endian, each starting at a multiple of 64 bytes

The file is exactly S + D bytes. Reading checks all of it: the size, the header's checksum,
every array's bounds, dtype and checksum (CRC-32 runs at gigabytes a second, a fraction of
the parse it saves). Any mismatch, truncation, foreign or stale content is a miss; the entry
is deleted and rebuilt by the caller, so a damaged cache never yields a wrong answer.

An entry of :data:`MAP_FROM` bytes or more comes back *mapped*: its data section is copied,
a chunk at a time, into a private file without a name in the cache directory (each chunk's
share of every array's checksum taken on the way), and that file is mapped read-only, so
its arrays are pages of the page cache, which the kernel can drop and read again, not
anonymous memory (a server that has read a 1 GB profile's table and index holds little
memory of its own). The entry itself is never mapped: another process that truncates or
rewrites a cache file in place would make the pages of a mapping of it vanish, and the
reader die of SIGBUS on its next touch; nothing but this process can reach the private
copy. Smaller entries (results, previews) are read into private memory. Either way the
checks above run on the bytes the arrays then hold. A table already in memory can trade its
columns for mapped ones holding the same values (:func:`map_table`, ``save_table(...,
remap=True)``). Only regular files are opened, never through a symlink, and without
blocking (a FIFO in place of an entry is a miss, not a hang). Arrays come back read-only.

Saving an entry removes the entries it supersedes (the same name and sources in an older
state, whose keys can never be hit again) and files of earlier cache formats; when the cache
holds more than :func:`max_bytes`, the least recently used entries go. Writes go to a
temporary file in the cache directory and are renamed into place, so no half-written entry is
ever visible; a failed write warns once per directory and is otherwise ignored. Set
``STEPSCOPE_NO_CACHE=1`` to turn the cache off, ``STEPSCOPE_CACHE_DIR`` to move it and
``STEPSCOPE_CACHE_MAX_GB`` to bound it.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import mmap
import os
import re
import stat
import struct
import tempfile
import threading
import warnings
import weakref
import zlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

from stepscope import version
from stepscope.errors import StepscopeWarning
from stepscope.model import cache_format as _format  # the NumPy-free part (a cached report)
from stepscope.model import locations
from stepscope.model.cache_format import FORMAT_VERSION as FORMAT_VERSION
from stepscope.model.cache_format import JSON_ARRAY, load_json
from stepscope.model.cache_format import TABLE_NAME as TABLE_NAME
from stepscope.model.cache_format import cache_dir as cache_dir
from stepscope.model.cache_format import enabled as enabled
from stepscope.model.cache_format import has_table as has_table
from stepscope.model.cache_format import read_fully as read_fully
from stepscope.model.cache_format import source_key as source_key
from stepscope.model.events import EventTable, Plane, StatTable, TypedStats

_MAGIC, _PREFIX, _ALIGN = _format.MAGIC, _format.PREFIX, _format.ALIGN
_aligned, _check_name, _remove = _format.aligned, _format.check_name, _format.remove

DEFAULT_MAX_GB = 20.0

_ENTRY_FILE = re.compile(r"[0-9a-f]{32}\.[A-Za-z0-9_.-]+\.cache")
# Files of the formats before this one: never hit again, removed on the next save.
_OLD_FILES = re.compile(r"[0-9a-f]{32}(\.table|\.arrays|\.[A-Za-z0-9_.-]+\.json)")
_TEMP_PREFIX = ".tmp-"
#: Entries whose data section is at least this large come back mapped (the module docstring).
MAP_FROM = 1 << 20

# Array dtypes the format accepts; anything else in a header means a corrupt or foreign file.
_DTYPES = {name: np.dtype(name) for name in ("|i1", "|u1", "<i2", "<i4", "<i8", "<f8", "|b1")}

_warned_dirs: set[str] = set()

Arrays = dict[str, NDArray[Any]]


class CacheWarning(StepscopeWarning):
    """The cache could not be written; profiles still load, only without the cache."""


def max_bytes() -> int:
    """How large the cache may grow (``STEPSCOPE_CACHE_MAX_GB``, default 20 GB)."""
    try:
        gigabytes = float(os.environ.get("STEPSCOPE_CACHE_MAX_GB", DEFAULT_MAX_GB))
    except ValueError:
        gigabytes = DEFAULT_MAX_GB
    if not gigabytes > 0:  # also NaN
        gigabytes = DEFAULT_MAX_GB
    return int(min(gigabytes, 1e9) * 1e9)


# -- tables -----------------------------------------------------------------------------------


def load_table(source: Path) -> EventTable | None:
    """The cached EventTable of ``source``, or None on a miss."""
    entry = _load([source], TABLE_NAME)
    if entry is None:
        return None
    meta, arrays, path = entry
    try:
        return _table(meta, arrays)
    except Exception:  # a header that passed its checksum but does not make a table
        _remove(path)
        return None


def save_table(source: Path, table: EventTable, *, remap: bool = False) -> None:
    """Store ``table`` as the cached EventTable of ``source``; with ``remap``, then read the
    entry back and put its columns in the table's place where they come back mapped (the
    same values: a long-lived process, the server, then holds them as pages of a file, not
    as anonymous memory; see the module docstring). A table whose columns are mapped
    already (``map_table``) is not written again with ``remap``."""
    if not enabled() or (remap and _is_mapped(table.name)):
        return
    try:
        meta: dict[str, Any] = {
            "planes": [[p.id, p.name, _encode_stats(p.stats)] for p in table.planes],
            "line_name": table.line_name,
            "names": table.names,
            "hostnames": table.hostnames,
            "stat_names": table.stats.stat_names,
            "typed": list(table.typed),
        }
    except (TypeError, ValueError) as err:
        _warn(cache_dir(), err)
        return
    if _save([source], TABLE_NAME, meta, dict(_columns(table))) and remap:
        _adopt_mapped(table, load_table(source))


def map_table(source: Path, table: EventTable) -> None:
    """Put the columns of ``table`` (read from ``source``) in its place from the cache, mapped
    (``save_table``'s ``remap``): from the cached entry when it holds the same table, else
    from one written now. Nothing changes where the cache is off, the entry is small or the
    columns are mapped already."""
    if not enabled() or _is_mapped(table.name):
        return
    if not _adopt_mapped(table, load_table(source)):
        save_table(source, table, remap=True)


def _adopt_mapped(table: EventTable, mapped: EventTable | None) -> bool:
    """Put the columns of ``mapped`` in ``table``'s place where they are mapped and hold the
    same values (compared in full: an entry written from another state of the source is
    never taken); whether they were."""
    if mapped is None or not len(mapped.name) or not _is_mapped(mapped.name) \
            or not _same_columns(table, mapped):
        return False
    _adopt(table, mapped)
    # The comparison touched every page: let them go from this process's mapping (they
    # come back from the page cache on the next touch), as the check does.
    mapping = _mapping_of(mapped.name)
    if mapping is not None and hasattr(mmap, "MADV_DONTNEED"):
        mapping.madvise(mmap.MADV_DONTNEED)
    return True


def _same_columns(a: EventTable, b: EventTable) -> bool:
    """Whether two tables hold the same columns (what ``_adopt`` moves)."""
    if len(a) != len(b) or list(a.typed) != list(b.typed) \
            or a.stats.stat_names != b.stats.stat_names:
        return False
    pairs = [(x, y) for (_, x), (_, y) in zip(_columns(a), _columns(b), strict=True)]
    return all(x.dtype == y.dtype and np.array_equal(x, y) for x, y in pairs)


def _is_mapped(array: NDArray[Any]) -> bool:
    """Whether ``array`` is a view of a mapped file (not of private memory)."""
    return _mapping_of(array) is not None


def _mapping_of(array: NDArray[Any]) -> mmap.mmap | None:
    """The mapping ``array`` is a view of, or None (private memory)."""
    base: Any = array
    while isinstance(base, np.ndarray):
        base = base.base
    if isinstance(base, memoryview):  # np.frombuffer's base: a view of the mapping
        base = base.obj
    return base if isinstance(base, mmap.mmap) else None


def _adopt(table: EventTable, mapped: EventTable) -> None:
    """Put the columns of ``mapped`` (the same table, read back) in ``table``'s place, one
    attribute at a time: a thread still reading ``table`` sees the one or the other, and
    both hold the same values. The lists and plane stats stay the table's own."""
    for name in ("line_plane", "line_id", "line", "name", "start_ns", "duration_ns", "typed"):
        setattr(table, name, getattr(mapped, name))
    mapped.stats.stat_names = table.stats.stat_names
    table.stats = mapped.stats


def table_bytes(table: EventTable) -> int:
    """The bytes of a table's columns (its cache entry's data, near enough)."""
    return sum(int(array.nbytes) for _, array in _columns(table))


def _columns(table: EventTable) -> list[tuple[str, NDArray[Any]]]:
    """Every array of the table, by its name in the file."""
    st = table.stats
    return [
        ("line_plane", table.line_plane), ("line_id", table.line_id),
        ("line", table.line), ("name", table.name),
        ("start_ns", table.start_ns), ("duration_ns", table.duration_ns),
        *((f"typed.{k}.{part}", array)
          for k, pair in TypedStats.of(table.typed).sparse.items()
          for part, array in zip(("rows", "values"), pair, strict=True)),
        ("stats.event", st.event), ("stats.name", st.name), ("stats.kind", st.kind),
        ("stats.value", st.value), ("stats.text_offsets", st.text_offsets),
        ("stats.text", np.frombuffer(st.text, dtype=np.uint8)),
    ]


# Dictionary-code columns (lines, event and stat names) are int16 where every code fits
# (``events.narrow_codes``), else int32.
_CODES = (np.int16, np.int32)
# Durations are stored as the table holds them: int32 where every one fits
# (``events.narrow_durations``), else int64.
_DURATIONS = (np.int32, np.int64)


def _table(meta: dict[str, Any], cols: Arrays) -> EventTable:
    """The EventTable that a table entry's header and arrays describe; ValueError if none."""

    def take(name: str, dtype: type[np.generic] | tuple[type[np.generic], ...],
             length: int | None) -> NDArray[Any]:
        array = cols[name]
        if array.dtype not in (dtype if isinstance(dtype, tuple) else (dtype,)) \
                or array.ndim != 1 or (
                length is not None and len(array) != length):
            raise ValueError(f"bad column {name}")
        return array

    n_lines, n_events = len(cols["line_id"]), len(cols["name"])
    n_stats = len(cols["stats.event"])
    text, offsets = take("stats.text", np.uint8, None), take("stats.text_offsets", np.int64, None)
    if not len(offsets) or int(offsets[0]) != 0 or int(offsets[-1]) > len(text) \
            or bool(np.any(np.diff(offsets) < 0)):
        raise ValueError("bad text offsets")
    stats = StatTable(
        event=take("stats.event", np.int32, n_stats),
        name=take("stats.name", _CODES, n_stats),
        kind=take("stats.kind", np.int8, n_stats),
        value=take("stats.value", np.int64, n_stats),
        text=text.data,  # a view: the text blob is not copied
        text_offsets=offsets,
        stat_names=_strings(meta["stat_names"]),
    )
    line_name = _strings(meta["line_name"])
    if len(line_name) != n_lines:
        raise ValueError("line names do not match the lines")
    return EventTable(
        planes=[Plane(int(pid), str(pname), _decode_stats(pstats))
                for pid, pname, pstats in meta["planes"]],
        line_plane=take("line_plane", np.int32, n_lines),
        line_id=take("line_id", np.int64, n_lines),
        line_name=line_name,
        line=take("line", _CODES, n_events),
        name=take("name", _CODES, n_events),
        start_ns=take("start_ns", np.int64, n_events),
        duration_ns=take("duration_ns", _DURATIONS, n_events),
        typed=TypedStats(n_events, {str(k): _typed(cols, str(k), n_events)
                                    for k in meta["typed"]}),
        names=_strings(meta["names"]),
        stats=stats,
        hostnames=_strings(meta["hostnames"]),
    )


def _typed(cols: Arrays, stat: str, n_events: int) -> tuple[NDArray[np.int64],
                                                             NDArray[np.int64]]:
    """A typed stat's sparse columns; ValueError when they do not fit the table."""
    rows, values = cols[f"typed.{stat}.rows"], cols[f"typed.{stat}.values"]
    if rows.dtype != np.int64 or values.dtype != np.int64 or rows.shape != values.shape \
            or rows.ndim != 1:
        raise ValueError(f"bad typed stat {stat}")
    if len(rows) and (int(rows.min()) < 0 or int(rows.max()) >= n_events):
        raise ValueError(f"typed stat {stat} names rows outside the table")
    return rows, values


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


# -- arrays -----------------------------------------------------------------------------------


def save_arrays(paths: Sequence[Path], name: str, header: dict[str, Any],
                arrays: Arrays) -> bool:
    """Store ``arrays`` and ``header`` (JSON) as entry ``name`` of ``paths``; whether written.

    Raises ValueError for a bad name, TypeError for an array dtype the format cannot hold.
    """
    _check_name(name)
    for key, array in arrays.items():
        if _little_endian(array).dtype.str not in _DTYPES:
            raise TypeError(f"array {key!r} has a dtype the cache cannot store: {array.dtype}")
    if not enabled():
        return False
    return _save(paths, name, {"header": header}, arrays)


def load_arrays(paths: Sequence[Path], name: str) -> tuple[dict[str, Any], Arrays] | None:
    """The header and arrays stored as entry ``name`` of ``paths``, or None on a miss."""
    _check_name(name)
    entry = _load(paths, name)
    if entry is None:
        return None
    meta, arrays, path = entry
    if not isinstance(meta.get("header"), dict):
        _remove(path)
        return None
    return meta["header"], arrays


# -- results ----------------------------------------------------------------------------------


def load_result(paths: Sequence[Path], name: str) -> dict[str, Any] | None:
    """The cached result ``name`` computed from ``paths``, or None on a miss.

    The result comes back as JSON gives it (tuples become lists, keys become strings).
    """
    return load_json(paths, name)  # without NumPy: a cached `report` reads it there


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
    _save(paths, name, {}, {JSON_ARRAY: np.frombuffer(text.encode("utf-8"), dtype=np.uint8)})


# -- entries ----------------------------------------------------------------------------------


def _save(paths: Sequence[Path], name: str, meta: dict[str, Any], arrays: Arrays) -> bool:
    """Write one entry through a temporary file; whether it was written."""
    try:
        key = source_key(paths)
        sources = sorted(str(locations.identity(locations.as_path(p))[0]) for p in paths)
    except OSError:
        return False
    prepared = [(k, _little_endian(a)) for k, a in arrays.items()]
    columns = []
    offset = 0
    for k, array in prepared:
        columns.append({"name": k, "dtype": array.dtype.str, "shape": list(array.shape),
                        "offset": offset, "crc": zlib.crc32(array.reshape(-1).view(np.uint8).data)})
        release(array)  # a mapped array's pages: read, not kept (written below, let go again)
        offset = _aligned(offset + array.nbytes)
    data_length = offset
    identity = {"format": FORMAT_VERSION, "stepscope": version.__version__, "key": key,
                "name": name, "sources": sources}
    header = {**identity, "meta": meta, "arrays": columns}
    lineage = _lineage(name, sources)

    def write(f: Any) -> None:
        # The header's JSON written a piece at a time (its length and checksum in the prefix
        # once known): a run model's is MBs, made whole it was text, a copy as bytes and the
        # encoder's pieces at once, some 4 MB of a 10 MB profile's server peak.
        f.write(_PREFIX.pack(_MAGIC, 0, 0, lineage, 0))
        length, crc = 0, 0
        try:
            for piece in _json_pieces(header, _HEADER_DEPTH):
                blob = piece.encode("utf-8")
                f.write(blob)
                length += len(blob)
                crc = zlib.crc32(blob, crc)
        except TypeError as err:  # what JSON cannot hold: no entry (the file is removed)
            raise ValueError(f"a cache header JSON cannot hold ({err})") from err
        data_start = _aligned(_PREFIX.size + length)
        f.write(b"\0" * (data_start - _PREFIX.size - length))
        written = 0
        for _, array in prepared:
            f.write(b"\0" * (_aligned(written) - written))
            f.write(array.reshape(-1).view(np.uint8).data)
            release(array)
            written = _aligned(written) + array.nbytes
        f.write(b"\0" * (data_length - written))
        f.seek(0)
        f.write(_PREFIX.pack(_MAGIC, length, data_length, lineage, crc))

    filename = f"{key}.{name}.cache"
    if not _write_atomic(filename, write):
        return False
    _prune(filename, lineage)
    return True


# Levels of an entry's header written as pieces of their own (``_json_pieces``): the entry,
# its meta, a run model's header, its combined results, each tool's result.
_HEADER_DEPTH = 5


def _json_pieces(value: Any, depth: int) -> Iterator[str]:
    """``json.dumps(value, separators=(",", ":"))`` in pieces: a dict of str keys ``depth``
    levels down as its keys and its values' own pieces, anything else whole. TypeError for
    what JSON cannot hold."""
    if depth <= 0 or not isinstance(value, dict) or \
            not all(isinstance(k, str) for k in value):
        yield json.dumps(value, separators=(",", ":"))
        return
    yield "{"
    for i, (k, v) in enumerate(value.items()):
        yield ("," if i else "") + json.dumps(k) + ":"
        yield from _json_pieces(v, depth - 1)
    yield "}"


def _load(paths: Sequence[Path], name: str) -> tuple[dict[str, Any], Arrays, Path] | None:
    """The meta and arrays of entry ``name`` of ``paths``, checked in full; None on a miss."""
    return _format.find_entry(paths, name,
                              lambda path, key: (*_read_entry(path, key, name), path))


def _read_entry(path: Path, key: str, name: str) -> tuple[dict[str, Any], Arrays]:
    with _format.open_entry(path) as f:
        fd = f.fileno()
        header, data_start, data_length = _format.read_header(f, key, name)
        columns = _spans(header, data_length)
        if data_length and data_length >= MAP_FROM:
            data = _checked_copy(fd, data_start, data_length, columns, path.parent)
        else:
            f.seek(data_start)
            data = np.empty(data_length, dtype=np.uint8)
            if read_fully(f, data.data) != data_length or f.read(1):
                raise ValueError("the file changed while it was read")
            data.flags.writeable = False
            for span in columns:
                if zlib.crc32(data[span.offset:span.offset + span.nbytes].data) != span.crc:
                    raise ValueError(f"checksum of {span.name}")
    arrays: Arrays = {
        span.name: data[span.offset:span.offset + span.nbytes].view(span.dtype).reshape(
            span.shape) for span in columns}
    if not isinstance(header["meta"], dict):
        raise ValueError("bad meta")
    return header["meta"], arrays


# Bytes a mapped entry is copied and checked at a time: the buffer is anonymous memory held
# while the entry is read (32 MiB was a third of a 10 MB profile's whole peak), and a few
# hundred syscalls a gigabyte cost nothing beside the checksums.
_CHECK_CHUNK = 1 << 20


class _Span(NamedTuple):
    """Where one array of an entry lies in its data section, and what it must hold."""

    name: str
    dtype: np.dtype[Any]
    shape: tuple[int, ...]
    offset: int
    nbytes: int
    crc: int


def _spans(header: dict[str, Any], data_length: int) -> list[_Span]:
    """The arrays an entry's header lists, each checked to lie within the data section;
    ValueError (or KeyError, TypeError) for a header that does not describe them."""
    out = []
    for col in header["arrays"]:
        dtype = _DTYPES[col["dtype"]]
        shape = tuple(col["shape"])
        if not all(isinstance(n, int) and n >= 0 for n in shape):
            raise ValueError("bad shape")
        nbytes = int(np.prod(shape, dtype=object)) * dtype.itemsize
        offset = col["offset"]
        if not (isinstance(offset, int) and offset % _ALIGN == 0
                and 0 <= offset <= offset + nbytes <= data_length):
            raise ValueError("array outside the data section")
        if not isinstance(col["crc"], int):
            raise ValueError("bad checksum")
        out.append(_Span(str(col["name"]), dtype, shape, offset, nbytes, col["crc"]))
    return out


def _checked_copy(fd: int, offset: int, length: int, columns: list[_Span],
                  directory: Path) -> NDArray[np.uint8]:
    """Bytes ``offset`` to ``offset + length`` of the open file ``fd`` (an entry's data
    section), copied into a file without a name in ``directory`` a chunk at a time, each
    chunk's share of every array's checksum taken on the way, and mapped read-only (the
    module docstring says why a copy). What is mapped is what was checked: no other process
    can reach the copy. ValueError when a checksum fails or the file holds fewer bytes (it
    shrank meanwhile)."""
    copy = _nameless_file(directory)
    try:
        crcs = [0] * len(columns)
        buffer = memoryview(bytearray(min(_CHECK_CHUNK, length)))
        done = 0
        while done < length:
            n = os.preadv(fd, [buffer[:min(len(buffer), length - done)]], offset + done)
            if n <= 0:
                raise ValueError("the file changed while it was read")
            chunk = buffer[:n]
            for i, span in enumerate(columns):
                lo, hi = max(span.offset, done), min(span.offset + span.nbytes, done + n)
                if lo < hi:
                    crcs[i] = zlib.crc32(chunk[lo - done:hi - done], crcs[i])
            written = 0
            while written < n:
                written += os.pwrite(copy, chunk[written:], done + written)
            done += n
        for span, crc in zip(columns, crcs, strict=True):
            if crc != span.crc:
                raise ValueError(f"checksum of {span.name}")
        if os.fstat(fd).st_size != offset + length or os.fstat(copy).st_size != length:
            raise ValueError("the file changed while it was read")
        mapping = mmap.mmap(copy, length, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
    finally:
        os.close(copy)  # the mapping keeps the file; without a name it goes with the mapping
    # The array holds the mapping (through its buffer): unmapped when the last view goes.
    return np.frombuffer(mapping, dtype=np.uint8)


class ColumnFile:
    """Arrays kept one at a time, as they are made, in a private file without a name in the
    cache directory, each mapped back read-only (``put``): a long computation's results are
    pages of a file from the moment each is made (the kernel writes them back and can drop
    them), not anonymous memory beside the temporaries that make the next one. Nothing but
    this process can reach the file (as for a mapped entry); it goes with the last view of
    its arrays. Raises OSError when the cache directory has no room for one."""

    def __init__(self) -> None:
        directory = cache_dir()
        directory.mkdir(parents=True, exist_ok=True)
        self._fd = _nameless_file(directory)
        self._end = 0
        self.failed = False

    def put(self, array: NDArray[Any]) -> NDArray[Any]:
        """``array`` as kept: a read-only view of its copy in the file (its own memory can go),
        or ``array`` itself where the file could not take it (a full disk: kept in memory)."""
        array = np.ascontiguousarray(array)
        if self.failed or array.nbytes < mmap.PAGESIZE:
            return array
        offset = self._end
        data = array.reshape(-1).view(np.uint8).data
        try:
            done = 0
            while done < len(data):
                n = os.pwrite(self._fd, data[done:done + (64 << 20)], offset + done)
                if n <= 0:
                    raise OSError("the column file took no bytes")
                done += n
            mapping = mmap.mmap(self._fd, array.nbytes, flags=mmap.MAP_SHARED,
                                prot=mmap.PROT_READ, offset=offset)
        except (OSError, ValueError):
            self.close()
            return array
        self._end = offset + -(-array.nbytes // mmap.ALLOCATIONGRANULARITY) \
            * mmap.ALLOCATIONGRANULARITY
        return np.frombuffer(mapping, dtype=array.dtype).reshape(array.shape)

    def close(self) -> None:
        """Take no more arrays (those kept stay mapped)."""
        if not self.failed:
            self.failed = True
            os.close(self._fd)


def release(array: NDArray[Any]) -> None:
    """Let the pages of a mapped array go from this process (they are read again from the
    page cache or the file on the next touch); nothing for an array in private memory."""
    mapping = _mapping_of(array)
    if mapping is not None and hasattr(mmap, "MADV_DONTNEED"):
        mapping.madvise(mmap.MADV_DONTNEED)


def _nameless_file(directory: Path) -> int:
    """A new file in ``directory`` that no other process can open by a name: ``O_TMPFILE``
    where the file system has it, else a temporary file unlinked at once."""
    tmpfile = getattr(os, "O_TMPFILE", 0)
    if tmpfile:
        try:
            return os.open(directory, tmpfile | os.O_RDWR, 0o600)
        except OSError:
            pass  # not supported by this file system: a named one, unlinked
    fd, name = tempfile.mkstemp(dir=directory, prefix=_TEMP_PREFIX)
    os.unlink(name)
    return fd


def _little_endian(array: NDArray[Any]) -> NDArray[Any]:
    array = np.ascontiguousarray(array)
    if array.dtype.byteorder == ">":
        array = array.astype(array.dtype.newbyteorder("<"))
    return array


def _lineage(name: str, sources: list[str]) -> bytes:
    text = json.dumps([name, sources]).encode("utf-8", "surrogateescape")
    return hashlib.blake2b(text, digest_size=16).digest()


def _entry_lineage(path: Path) -> bytes | None:
    """The lineage in an entry's prefix, or None if it is not an entry."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0)
                     | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            magic, _, _, lineage, _ = _PREFIX.unpack(f.read(_PREFIX.size))
    except (OSError, struct.error):
        return None
    return lineage if magic == _MAGIC else None


# -- files ------------------------------------------------------------------------------------


def clear() -> int:
    """Remove every cache file (and leftover temporary file); return how many were removed."""
    removed = 0
    for path in _entries():
        if _ENTRY_FILE.fullmatch(path.name) or _OLD_FILES.fullmatch(path.name) or \
                path.name.startswith(_TEMP_PREFIX):
            removed += _remove(path)
    return removed


def _entries() -> Iterator[Path]:
    try:
        yield from cache_dir().iterdir()
    except OSError:
        return


def _prune(keep: str, lineage: bytes) -> None:
    """Remove what an entry just written makes useless, and trim the cache to its bound.

    Gone are: entries of the same lineage in an older state, files of earlier formats, and,
    while the cache is over :func:`max_bytes`, the least recently used entries.
    """
    sized: list[tuple[int, int, Path]] = []  # (last use, size, path) of the entries kept
    total = 0
    for path in _entries():
        if _OLD_FILES.fullmatch(path.name):
            _remove(path)
            continue
        if not _ENTRY_FILE.fullmatch(path.name):
            continue
        if path.name != keep and _entry_lineage(path) == lineage:
            _remove(path)
            continue
        try:
            st = path.lstat()
        except OSError:
            continue
        total += st.st_size
        if path.name != keep:
            sized.append((st.st_mtime_ns, st.st_size, path))
    limit = max_bytes()
    for _, size, path in sorted(sized):
        if total <= limit:
            break
        total -= size * _remove(path)


class Writes:
    """The cache writes of one owner's background work (a server's store, a loaded run):
    threads that run ``with writes_for(owner)`` write only until the owner ``close``s it.
    ``close`` waits for a write under way to end (an entry is written whole or not at all)
    and returns only then: nothing of the owner's is written after it (a late save would
    otherwise land in whatever cache directory the environment names by then)."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._under_way = 0  # writes begun and not ended (they run side by side)
        self.closed = False
        _open_writes.add(self)

    def close(self) -> None:
        """Stop this owner's writes; returns once none is under way."""
        with self._changed:
            self.closed = True
            self._changed.wait_for(lambda: self._under_way == 0)
        _open_writes.discard(self)

    def write(self, filename: str, write: Callable[[Any], Any]) -> bool:
        """``_write_file``, unless this owner is closed (then False, nothing written)."""
        with self._changed:
            if self.closed:
                return False
            self._under_way += 1
        try:
            return _write_file(filename, write)
        finally:
            with self._changed:
                self._under_way -= 1
                self._changed.notify_all()


_open_writes: weakref.WeakSet[Writes] = weakref.WeakSet()
_thread_writes = threading.local()


@contextlib.contextmanager
def writes_for(owner: Writes | None) -> Iterator[None]:
    """Cache writes of this thread, inside the block, belong to ``owner`` (None: to nobody,
    as outside any block)."""
    before = getattr(_thread_writes, "owner", None)
    _thread_writes.owner = owner
    try:
        yield
    finally:
        _thread_writes.owner = before


def open_writes() -> set[Writes]:
    """The owners whose writes are not closed."""
    return set(_open_writes)


def close_all_writes() -> None:
    """Close every owner's writes (a test's teardown: nothing left running from one test
    writes into the next one's cache directory)."""
    for owner in list(_open_writes):
        owner.close()


def _write_atomic(filename: str, write: Callable[[Any], Any]) -> bool:
    """Write ``filename`` in the cache directory through a temporary file; False on failure
    or when the owner of this thread's writes has closed them."""
    owner: Writes | None = getattr(_thread_writes, "owner", None)
    return _write_file(filename, write) if owner is None else owner.write(filename, write)


def _write_file(filename: str, write: Callable[[Any], Any]) -> bool:
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
    warnings.warn(f"cannot write the cache in {directory} ({err}); profiles will "
                  "load without it. Set STEPSCOPE_CACHE_DIR to a writable directory, or "
                  "STEPSCOPE_NO_CACHE=1 to turn the cache off.", CacheWarning, stacklevel=5)
