"""What the analysis keeps in the on-disk cache beside a run's files, read and written here
only (analysis code does no I/O): the trace viewer's index and preview of a host, and a host's
memory events (for the memory profile's timeline). Each entry belongs to one source file and
is a miss once that file changes (``model.cache``). Tools' answers are kept by ``run.kept``."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from numpy.typing import NDArray

from stepscope.analysis.trace.trace_index import INDEX_VERSION, TraceIndex, TrackPlan, build
from stepscope.analysis.trace.trace_preview import TracePreview
from stepscope.model import cache
from stepscope.model.events import EventTable
from stepscope.model.run_tables import RunTables

if TYPE_CHECKING:
    from stepscope.analysis.run_model.memory_events import MemoryEvents

I64 = NDArray[Any]

_INDEX = f"trace_index.{INDEX_VERSION}"
_PREVIEW = f"trace_preview.{INDEX_VERSION}"
_MEMORY_LISTS = ("allocators", "source", "capacity", "texts", "problems")


# -- the trace viewer's index -----------------------------------------------------------------

def cached_index(table: EventTable, source: Path) -> TraceIndex | None:
    """The index of a host's table from the on-disk cache, when ``source`` is unchanged."""
    hit = cache.load_arrays([source], _INDEX)
    if hit is not None:
        header, arrays = hit
        if header.get("version") == INDEX_VERSION and header.get("events") == len(table):
            return TraceIndex(table, header, arrays)
    return None


def map_table(table: EventTable, source: Path) -> None:
    """Put a host's parsed table's columns in its place mapped from the cache (``cache.
    map_table``: written there first if not yet), so that what is made from it next (the
    trace viewer's overview, per-track table and index) is not made beside the parse's
    anonymous columns. Nothing changes where the cache is off or the table is mapped."""
    cache.map_table(source, table)


def memory_is_short(table: EventTable, meminfo: Path = Path("/proc/meminfo")) -> bool:
    """Whether the trace viewer's first builds beside ``table`` (its overview, per-track table
    and flows: about the table's size again, twice that to be safe) would take more than half
    the memory the system has available (``MemAvailable``; not short where that is unknown).
    Where it is short, the table is mapped from the cache first (``map_table``): slower (the
    entry is written before the first window), but its columns are then pages of a file."""
    try:
        with open(meminfo) as f:
            fields_kb = dict(line.split(":", 1) for line in f if ":" in line)
        available = int(fields_kb["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError, IndexError):
        return False
    return 2 * cache.table_bytes(table) > available // 2


def index_for(table: EventTable, source: Path | None, *, use_cache: bool = True,
              progress: Callable[[float], None] | None = None,
              plan: TrackPlan | None = None, by_start: I64 | None = None,
              depth: I64 | None = None,
              flows: tuple[I64, I64, I64] | None = None) -> TraceIndex:
    """The index of a host's table, from the on-disk cache when ``source`` is unchanged, else
    built (``progress``, ``plan``, ``by_start``, ``depth`` and ``flows`` as for
    ``trace_index.build``) and kept. With the cache on, each array the index keeps goes to
    a private file in the cache directory as soon as the build has made it
    (``cache.ColumnFile``) and is mapped from there: what the build and then the caller hold
    is pages of a file, not anonymous memory; the cache entry is then written from those
    pages, which this process lets go of once written."""
    if not (use_cache and source is not None):
        return build(table, progress, plan, by_start, depth, flows)
    hit = cached_index(table, source)
    if hit is not None:
        return hit
    # The build holds a few columns an event over what it keeps: the table's own columns
    # are mapped from the cache first (written there now if not yet), not held beside it.
    map_table(table, source)
    give_back_freed_memory()  # what the parse and the first builds freed: not the build's
    try:
        columns: cache.ColumnFile | None = cache.ColumnFile() if cache.enabled() else None
    except OSError:
        columns = None  # no room in the cache directory: built in memory
    try:
        index = build(table, progress, plan, by_start, depth, flows,
                      keep=columns.put if columns is not None else None)
    finally:
        if columns is not None:
            columns.close()
    cache.save_arrays([source], _INDEX, {**index.header, "events": len(table)}, index.arrays)
    for array in index.arrays.values():
        cache.release(array)  # written: read again from the page cache when asked
    give_back_freed_memory()
    return index


def give_back_freed_memory() -> None:
    """Hand the memory freed inside the C heap back to the system (glibc's ``malloc_trim``;
    nothing elsewhere). The build's columns of tens of MB come from the heap (glibc raises
    its threshold for mapping large blocks on its own after the first are freed), where a
    free does not give pages back: a server that had built a 75 MB profile's index held
    295 MB it no longer used, 37 MB after a trim."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass  # not glibc (musl, say): nothing to trim this way


_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter
LARGE_BLOCK = 1 << 20  # blocks of this many bytes or more are mapped on their own


def map_large_blocks() -> None:
    """Have the C heap map every block of ``LARGE_BLOCK`` bytes or more on its own, so that
    freeing it hands its pages back at once (glibc's ``mallopt``; nothing elsewhere). Left
    to itself glibc raises that threshold to the size of the largest mapped block freed (up
    to 32 MiB), and the columns of a few MB to 32 MB that a server's trace viewer and run
    model make and drop one after another then stay in the heap, held, between and after
    the builds (at 75 MB, the index's build peaked 0.8x the file higher)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").mallopt(_M_MMAP_THRESHOLD, LARGE_BLOCK)
    except (OSError, AttributeError):
        pass  # not glibc: its own policy stands


# -- the trace viewer's preview ---------------------------------------------------------------

def save_preview(source: Path, preview: TracePreview) -> None:
    """Keep ``preview`` in the on-disk cache for ``source`` as it is now."""
    cache.save_arrays([source], _PREVIEW, {"meta": preview.meta(), "bin_ns": preview.bin_ns},
                      {"track": preview.track_ids, "count": preview.count,
                       "covered": preview.covered, **preview.counters})


def cached_preview(source: Path) -> TracePreview | None:
    """The preview of a host's events from the on-disk cache, when ``source`` is unchanged."""
    hit = cache.load_arrays([source], _PREVIEW)
    if hit is None:
        return None
    try:
        return TracePreview(*hit)
    except (KeyError, TypeError, ValueError):
        return None  # a foreign or damaged entry: made again with the overview


# -- a host's memory events -------------------------------------------------------------------

def _memory_entry() -> str:
    """The cache entry's name of a host's memory events (the run model's modules are imported
    on first use: a server's first trace window does not wait for them)."""
    from stepscope.analysis.run_model.memory_events import MEMORY_EVENTS_VERSION

    return f"memory_events.{MEMORY_EVENTS_VERSION}"


def save_memory_events(source: Path, ev: MemoryEvents) -> None:
    """Keep a host's memory events in the on-disk cache (for ``source`` as it is now), so
    that the memory profile's timeline is drawn without reading the host's table again."""
    header = {name: getattr(ev, name) for name in _MEMORY_LISTS}
    arrays = {f.name: getattr(ev, f.name) for f in fields(ev) if f.name not in _MEMORY_LISTS}
    cache.save_arrays([source], _memory_entry(), header, arrays)


def cached_memory_events(source: Path) -> MemoryEvents | None:
    """A host's memory events from the on-disk cache, when ``source`` is unchanged."""
    from stepscope.analysis.run_model.memory_events import MemoryEvents

    hit = cache.load_arrays([source], _memory_entry())
    if hit is None:
        return None
    header, arrays = hit
    try:
        parts: dict[str, Any] = {name: header[name] for name in _MEMORY_LISTS}
        parts.update(arrays)
        ev = MemoryEvents(**parts)
        n = len(ev.time_ns)
        if any(len(a) != n for a in arrays.values()) or set(arrays) != \
                {f.name for f in fields(ev)} - set(_MEMORY_LISTS):
            return None
        return ev
    except (KeyError, TypeError):
        return None  # a foreign or damaged entry: computed again


def memory_keeper(source: Path | None) -> Callable[[MemoryEvents], None] | None:
    """What ``build_host`` hands a host's memory events to: kept in the cache for
    ``source`` (None: not kept)."""
    if source is None:
        return None
    return lambda ev: save_memory_events(source, ev)


def run_memory_keeper(profile: RunTables) -> Callable[[str, MemoryEvents], None]:
    """What ``build_run_model`` hands each host's memory events to: kept in the cache beside
    the host's file."""
    def keep(host: str, ev: MemoryEvents) -> None:
        source = profile.sources.get(host)
        if source is not None:
            save_memory_events(source, ev)
    return keep
