"""Named numpy arrays with a JSON header, cached on disk beside the table cache.

Derived structures that take seconds to build from a host's table (the trace viewer's index)
are stored here, keyed like the rest of the cache by their sources' paths, sizes and mtimes
(:func:`stepscope.model.cache.source_key`) and a name that carries their layout version.
Loading maps the file: arrays come back read-only, backed by the mapping, so a large index
costs page cache rather than private memory.

File ``<key>.arrays``::

    0   16 bytes  magic  b"stepscope-array\\n"
    16  u64 LE    header length H
    24  u64 LE    data length D
    32  H bytes   JSON header: key, the caller's header, every array's dtype, shape, offset
    ..  zero padding to a multiple of 64 (S), then D bytes of raw little-endian arrays

Reads never raise (anything wrong is a miss); writes go through a temporary file and a
rename, and a failed write is silently skipped (the table cache already warns about an
unwritable directory).
"""

from __future__ import annotations

import contextlib
import json
import mmap
import os
import struct
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from stepscope.model import cache

_MAGIC = b"stepscope-array\n"
_PREFIX = struct.Struct("<16sQQ")
_ALIGN = 64
_DTYPES = {name: np.dtype(name) for name in ("|i1", "|u1", "<i2", "<i4", "<i8", "<f8", "|b1")}


def _aligned(offset: int) -> int:
    return -(-offset // _ALIGN) * _ALIGN


def _path(paths: Sequence[Path], name: str) -> Path:
    return cache.cache_dir() / f"{cache.source_key(paths, salt=name)}.arrays"


def save_arrays(paths: Sequence[Path], name: str, header: dict[str, Any],
                arrays: dict[str, NDArray[Any]]) -> bool:
    """Store ``arrays`` and ``header`` for the sources ``paths``; whether it was written."""
    if not cache.enabled():
        return False
    try:
        target = _path(paths, name)
    except OSError:
        return False
    columns = []
    prepared = []
    offset = 0
    for key, array in arrays.items():
        array = np.ascontiguousarray(array)
        if array.dtype.byteorder == ">":
            array = array.astype(array.dtype.newbyteorder("<"))
        if array.dtype.str not in _DTYPES:
            raise TypeError(f"array {key!r} has a dtype the cache cannot store: {array.dtype}")
        columns.append({"name": key, "dtype": array.dtype.str, "shape": list(array.shape),
                        "offset": offset})
        prepared.append(array)
        offset = _aligned(offset + array.nbytes)
    blob = json.dumps({"key": target.stem, "header": header, "columns": columns},
                      separators=(",", ":")).encode("utf-8")
    data_start = _aligned(_PREFIX.size + len(blob))
    temp: str | None = None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, temp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
        with os.fdopen(fd, "wb") as f:
            f.write(_PREFIX.pack(_MAGIC, len(blob), offset))
            f.write(blob)
            f.write(b"\0" * (data_start - _PREFIX.size - len(blob)))
            written = 0
            for array in prepared:
                f.write(b"\0" * (_aligned(written) - written))
                f.write(array.reshape(-1).view(np.uint8).data)
                written = _aligned(written) + array.nbytes
            f.write(b"\0" * (offset - written))
        os.replace(temp, target)
        return True
    except OSError:
        if temp is not None:
            with contextlib.suppress(OSError):
                os.unlink(temp)
        return False


def load_arrays(paths: Sequence[Path], name: str
                ) -> tuple[dict[str, Any], dict[str, NDArray[Any]]] | None:
    """The header and arrays stored for ``paths`` under ``name``, or None on a miss."""
    if not cache.enabled():
        return None
    try:
        target = _path(paths, name)
        with open(target, "rb") as f:
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError):
        return None
    try:
        magic, header_length, data_length = _PREFIX.unpack_from(mm, 0)
        if magic != _MAGIC:
            raise ValueError("not an array file")
        data_start = _aligned(_PREFIX.size + header_length)
        if len(mm) != data_start + data_length:
            raise ValueError("truncated")
        meta = json.loads(mm[_PREFIX.size:_PREFIX.size + header_length])
        if meta["key"] != target.stem:
            raise ValueError("stale")
        arrays: dict[str, NDArray[Any]] = {}
        for col in meta["columns"]:
            dtype = _DTYPES[col["dtype"]]
            shape = tuple(int(x) for x in col["shape"])
            count = int(np.prod(shape)) if shape else 1
            offset = int(col["offset"])
            if offset % _ALIGN or not 0 <= offset + count * dtype.itemsize <= data_length:
                raise ValueError("array outside the data section")
            if count:
                array = np.frombuffer(mm, dtype=dtype, count=count, offset=data_start + offset)
            else:
                array = np.empty(0, dtype=dtype)
            arrays[col["name"]] = array.reshape(shape)
        header = meta["header"]
        if not isinstance(header, dict):
            raise ValueError("bad header")
        return header, arrays
    except Exception:  # any damage at all is a miss
        with contextlib.suppress(OSError):
            os.unlink(target)
        return None
