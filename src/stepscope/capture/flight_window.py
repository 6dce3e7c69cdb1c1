"""A flight recorder's window → a run on disk: its segments' events merged into one
``XSpace``, written so that no reader (and no kill) ever sees half of it.

Each segment is a whole ``Recorder`` with its own names; a window's lines are each thread's
events of every segment, their name ids shifted into one merged ``objects`` list. The events
of a segment still recording are read as they stand (each ``Records.columns`` call copies
under the GIL; tuples are copied before they are read), so a dump never stops the loop.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from stepscope.capture.options import ProfilerOptions
from stepscope.capture.recorder import PyNames, Recorder, Sample, ThreadBuffer
from stepscope.capture.recorder_columns import (
    STAT_OBJ,
    STAT_STR,
    EventColumns,
    records_columns,
    tuples_to_columns,
)
from stepscope.capture.session import SpaceParts, encode_space
from stepscope.formats import xplane_builder as xb
from stepscope.model import locations
from stepscope.model import logdir as layout

# Where runs are put together before they are renamed into the profile folder: beside it,
# not in it, so that no run lister ever sees one half-made (a kill leaves only this).
STAGING_DIR = ".stepscope-flight-staging"
# A staging folder this old belongs to no write still under way.
_STALE_STAGING_S = 3600.0
# Run folders and the staging are named under this lock (two dumps in one second).
_name_lock = threading.Lock()


@dataclass(frozen=True)
class Part:
    """One buffer's events as columns whose ids index ``objects``."""

    line_id: int
    line_name: str
    columns: EventColumns
    objects: list[Any]
    python: bool = False  # a Python-tracer buffer (else a host one)


def recorder_parts(rec: Recorder) -> tuple[list[Part], list[Part]]:
    """The host and Python-tracer events of one recorder, per buffer.

    Binary records index the recorder's names, read once after every buffer's columns (so
    every id read is there); tuples are copied and interned anew, so that the recording
    threads' names are never written from here.
    """
    rec.refresh_thread_names()
    read: list[tuple[bool, ThreadBuffer, EventColumns]] = []
    tuples: list[Part] = []
    for python, buffers in ((False, list(rec.host_buffers)), (True, list(rec.python_buffers))):
        for buf in buffers:
            listed = list(buf.listed)
            if listed:
                fresh = PyNames()
                cols = tuples_to_columns(listed, fresh)
                tuples.append(Part(buf.thread_id, buf.thread_name, cols, fresh.objects, python))
            if buf.records is not None and len(buf.records):
                read.append((python, buf, records_columns(buf.records)))
    objects = list(rec.names.objects)
    parts = tuples + [Part(buf.thread_id, buf.thread_name, cols, objects, python)
                      for python, buf, cols in read]
    return [p for p in parts if not p.python], [p for p in parts if p.python]


def _shifted(cols: EventColumns, offset: int) -> EventColumns:
    if not offset:
        return cols
    value = cols.stat_value
    named = (cols.stat_kind == STAT_STR) | (cols.stat_kind == STAT_OBJ)
    if named.any():
        value = np.where(named, value + offset, value)
    return EventColumns(cols.name + offset, cols.start, cols.end, cols.nstats,
                        cols.stat_key + offset, cols.stat_kind, value)


def merge_parts(parts: list[Part]) -> tuple[list[tuple[int, str, EventColumns]], list[Any]]:
    """Lines (one per line id, parts in order) over one merged list of named objects."""
    objects: list[Any] = []
    offsets: dict[int, int] = {}
    lines: dict[int, tuple[str, list[EventColumns]]] = {}
    for part in parts:
        key = id(part.objects)
        if key not in offsets:
            offsets[key] = len(objects)
            objects.extend(part.objects)
        cols = _shifted(part.columns, offsets[key])
        if part.line_id in lines:
            lines[part.line_id][1].append(cols)
        else:
            lines[part.line_id] = (part.line_name, [cols])
    return ([(line_id, name, EventColumns.concat(cols))
             for line_id, (name, cols) in lines.items()], objects)


def window_space(recorders: list[Recorder], *, keep_from_ns: int, stop_ns: int, host: str,
                 options: ProfilerOptions, python: bool, env: dict[str, Any]) -> bytes:
    """The ``XSpace`` of the events ``recorders`` (oldest first) hold that began from
    ``keep_from_ns`` until ``stop_ns`` (the loop goes on while a dump is built)."""
    host_parts: list[Part] = []
    py_parts: list[Part] = []
    samples: list[Sample] = []
    recorded = dropped = 0
    for rec in recorders:
        hosts, pys = recorder_parts(rec)
        host_parts += hosts
        py_parts += pys
        samples += list(rec.samples)
        recorded += rec.recorded
        dropped += rec.dropped
    host_lines, host_objects = merge_parts(host_parts)
    py_lines, py_objects = merge_parts(py_parts)
    # The two planes are encoded over one objects list: the Python tracer's ids follow.
    shift = len(host_objects)
    py_lines = [(i, name, _shifted(cols, shift)) for i, name, cols in py_lines]
    max_events = sum(rec.max_events for rec in recorders)
    return encode_space(SpaceParts(
        host=host, start_ns=keep_from_ns, stop_ns=stop_ns, keep_from_ns=keep_from_ns,
        host_lines=host_lines, python_lines=py_lines if python else None,
        objects=host_objects + py_objects, samples=samples, bridge_data=[],
        recorded=recorded, dropped=dropped, max_events=max_events, options=options, env=env,
        keep_until_ns=stop_ns))


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def remove_stale_staging(logdir: Path, min_age_s: float = _STALE_STAGING_S) -> None:
    """Remove what killed dumps left in the staging folder (only what is old enough)."""
    staging = layout.profile_root(logdir).parent / STAGING_DIR
    if locations.is_remote(staging):
        return
    try:
        entries = list(staging.iterdir())
    except OSError:
        return
    now = time.time()
    for entry in entries:
        try:
            if entry.is_dir() and not entry.is_symlink() and \
                    entry.lstat().st_mtime < now - min_age_s:
                shutil.rmtree(entry, ignore_errors=True)
        except OSError:
            continue


def save_run(logdir: Path, suffix: str, host: str, data: bytes,
             when: datetime | None = None) -> Path:
    """Write ``data`` as a new run named ``<time>-<suffix>``; return its profile file.

    Locally the run is made in a staging folder beside the profile folder and renamed into
    place whole: a kill at any moment leaves either no run or the complete one. On object
    storage the one object is written at once (objects are never seen half-written).
    """
    when = when or datetime.now()
    root = layout.profile_root(logdir)
    file_name = layout.host_file_name(host)
    if locations.is_remote(root):
        path = root / f"{layout.run_name(when)}-{suffix}" / file_name
        xb.write_atomic(path, data)
        return path
    staging_root = root.parent / STAGING_DIR
    staging_root.mkdir(parents=True, exist_ok=True)
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="run-", dir=staging_root))
    try:
        xb.write_atomic(staging / file_name, data)
        _fsync_dir(staging)
        with _name_lock:
            base = f"{layout.run_name(when)}-{suffix}"
            target, n = root / base, 1
            while target.exists():
                target, n = root / f"{base}_{n}", n + 1
            os.rename(staging, target)
        _fsync_dir(root)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target / file_name
