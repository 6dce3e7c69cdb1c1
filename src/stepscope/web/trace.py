"""The trace viewer's HTTP answers: its tool data (sections and tracks) and its queries.

``/api/trace/<view>?run=…&host=…&…`` with ``view`` one of

``window``     ``start_ns``, ``end_ns`` (relative to the trace's origin), ``width`` (pixels),
               optional ``tracks`` (comma-separated ids): the level-of-detail events
               (``"flows_pending": true`` where its flows are still being sorted: asked
               again for them; ``"coarse": true`` before the exact answers, and
               ``"events_coming": true`` where that window's events are being read from a
               big file's skim: asked again soon for them);
``event``      ``id``: one event's details, stats and flows;
``search``     ``q``: events whose name holds the text, in time order;
``selection``  ``start_ns``, ``end_ns``, ``tracks``: the events there, summed by name.

Every number is checked strictly (digits only, within bounds); anything else is a 400.

A large host's index takes seconds to build. Meanwhile (once the host's table is loaded) the
tool data and ``window`` answer from the coarse overview (``analysis.trace_overview``, marked
``"coarse": true``: every track's events counted per pixel column) for as long as the
per-track table (``analysis.track_table``: the events by track and start, laid out in rows)
takes; from then on every view is answered exactly, as the full index will, from that table
until the full index is built. The other views answer 202 while only the overview is there.
A profile opened before answers its tool data and first windows at once from its cached
preview (``analysis.trace_preview``), until the table and index are read. A big XSpace file
(``web.skim_ahead.SKIM_BYTES`` or more) not in the cache answers them from a skim of the file
instead (``formats.xspace_skim``: one pass that keeps nothing per event, a third of the
decode's CPU time, made beside the decode where the machine has cores for both, else before
it: ``skim_ahead.skim_mode``; a server starts the pass over its first run's file before it
has imported the rest: ``web.skim_ahead``): its events counted per span of time and those
at least a pixel wide drawn, and a zoom's real events read from the blocks of the file it
holds them in (beside, for the next ask, where they are many), until the per-track table
answers (the overview, made meanwhile, has no events to show).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, wait
from typing import Any

from stepscope.analysis.trace.trace_index import MAX_WIDTH, TraceIndex, plan_tracks
from stepscope.analysis.trace.trace_overview import TraceOverview
from stepscope.analysis.trace.trace_preview import PreviewTooCoarse, TracePreview
from stepscope.analysis.trace.track_table import TrackTable, flows_of
from stepscope.errors import NotFoundError, StepscopeError
from stepscope.model.run_tables import LazyTables
from stepscope.run.storage import (
    cached_index,
    cached_preview,
    index_for,
    map_large_blocks,
    map_table,
    memory_is_short,
    save_preview,
)
from stepscope.run.tools import clock_of, trace_host
from stepscope.web import skim_ahead
from stepscope.web.loaded_run import LoadedRun, fill

VIEWS = ("window", "event", "search", "selection")
_INT = re.compile(r"-?[0-9]{1,19}")
_MAX_TIME = 1 << 62
_MAX_TRACKS = 100_000
WAIT_S = 0.5  # how long a request waits for an index being built before it answers 202
# A trace with fewer events gets its index within WAIT_S of its overview, so its page waits
# for it (one picture, not two); a larger one's overview is answered at once.
WAIT_EVENTS = 1_000_000
FIRST_WINDOW_WAIT_S = 2.0  # how long the full index's build waits for the table's first window
# How long a coarse request waits (beyond WAIT_S) for a skim's preview being made: its page
# then gets the preview as soon as it is out, not at its next ask (a 202, then a pause).
PREVIEW_WAIT_S = 3.0


class TraceParamError(ValueError):
    """A trace query parameter is missing or not a number in range."""


host_of = trace_host  # the host a trace request is about: the one named, else the first


class IndexPending(Exception):
    """A host's index is still being built; ``progress`` is the 202 answer saying how far."""

    def __init__(self, progress: dict[str, Any]) -> None:
        super().__init__("The trace viewer's index is being built.")
        self.progress = progress


def start_index(run: LoadedRun, host: str | None) -> Future[TraceIndex]:
    """Start building one host's index in the background (once per run; a cached index on
    disk is only read). The host's table is loaded in that thread too, and its coarse
    overview made first (kept in ``run.partials``) unless the index is cached; meanwhile a
    cached preview (``analysis.trace_preview``) answers in the overview's place."""
    name = host_of(run, host)
    key = ("trace_overview", name)
    table_key = ("trace_table", name)
    # The builds' columns (and the run model's after them) are handed back to the system as
    # each is freed, not kept in the heap for the next: the server's peak is lower.
    map_large_blocks()

    def build(report: Callable[[float], None]) -> TraceIndex:
        source = run.profile.sources.get(name)
        kept = source if run.use_cache else None
        try:
            preview = cached_preview(kept) if kept is not None else None
            if preview is not None:
                run.partials[key] = (preview, time.monotonic())
            table = run.profile.hosts[name]
            if kept is not None:
                hit = cached_index(table, kept)
                if hit is not None:
                    # Its zooms' flows by time are made beside them (a second at 1 GB).
                    hit.flow_times_coming = True
                    threading.Thread(target=fill, args=(Future(), lambda: _make_flow_times(hit),
                                                        run.writes),
                                     daemon=True, name="stepscope-flow-times").start()
                    return hit
                if memory_is_short(table):
                    # The overview's, the per-track table's and the flows' columns are then
                    # not made beside the parse's anonymous ones. Otherwise the table is
                    # mapped by the index's build, after the first window: writing it to the
                    # cache first put seconds before that window (most of it at 1 GB).
                    map_table(table, kept)
            plan = plan_tracks(table)
            # The flows (a hash join of millions of ids, without the GIL) are found beside the
            # overview and the order (NumPy's and compiled steps, mostly without it too).
            flows: Future[Any] = Future()
            threading.Thread(target=fill, args=(flows, lambda: flows_of(table, plan),
                                                run.writes),
                             daemon=True, name="stepscope-flows").start()
            overview = TraceOverview(table, plan)
            shown = run.partials.get(key)
            if shown is None or not (isinstance(shown[0], TracePreview)
                                     and shown[0].skim is not None):
                # (A skim's preview answers on until the exact table: its zooms show real
                # events, the overview's only counts.)
                run.partials[key] = (overview, time.monotonic())
            if kept is not None and preview is None:
                save_preview(kept, TracePreview.of(overview))
            events = TrackTable(table, plan, overview.order, flows.result())
            events.flow_times_coming = True  # made below, once the first window is out
            # The table answers every view exactly from now: the overview is let go.
            run.partials[table_key] = (events, time.monotonic())
            run.partials.pop(key, None)
            run.trace_ready.set()
            del overview
            # The first exact window goes out before the full index takes the CPU (and the
            # GIL, in NumPy's longer steps); the page asks for it as soon as it is there.
            events.answered.wait(FIRST_WINDOW_WAIT_S)
            if kept is not None:
                # The table mapped from the cache now (written there first), before what is
                # built next: that is not made beside the parse's anonymous columns.
                map_table(table, kept)
            # Then the flows by time, which every zoom but the whole trace's asks for (made
            # here, not in the first zoom: ~1 s at 1 GB), and which the full index takes over.
            _make_flow_times(events)
            depth, by_start = events.layout()
            try:
                index = index_for(table, source, use_cache=run.use_cache, progress=report,
                                  plan=plan, by_start=by_start, depth=depth,
                                  flows=events.flows())
                index.share_flow_times(events)
                return index
            finally:
                del by_start, depth
        finally:
            run.partials.pop(key, None)  # the index answers from now
            run.partials.pop(table_key, None)
            run.trace_ready.set()

    future: Future[TraceIndex] = run.background(("trace_index", name), build)
    return future


def publish_skim(run: LoadedRun, host: str | None) -> None:
    """Before a big host file's table is read (``skim_ahead.skimmable``: a big local XSpace
    file whose table is not in the cache): the preview of a skim of it (its pass over the
    file taken from ``skim_ahead`` where the server started it) answers the trace viewer
    (``run.partials``) until the overview (or a cached preview) does. Nothing where it
    cannot be made: the table's read reports what is wrong with the file."""
    name = host_of(run, host)
    file = run.profile.sources.get(name)
    if file is None:
        return
    ahead = skim_ahead.take(file)  # (taken whatever follows: each pass is taken once)
    if not skim_ahead.skimmable(file, run.use_cache):
        return
    coming = ("trace_preview_coming", name)  # (coarse requests wait for it: trace_index)
    run.partials[coming] = time.monotonic()
    try:
        # Imported here: a server's start-up does not wait for the protobuf runtime.
        from stepscope.formats.xspace_skim import skim_of, skim_xspace

        skim = skim_xspace(file) if ahead is None else skim_of(ahead.result())
        # Not once the exact answers are there (the overview, which takes the preview's
        # place, is let go then): the preview would outlive its use.
        if skim is not None and not run.trace_ready.is_set():
            run.partials.setdefault(("trace_overview", name),
                                    (TracePreview.of_skim(skim), time.monotonic()))
    except (OSError, StepscopeError):
        return
    finally:
        run.partials.pop(coming, None)


def _make_flow_times(index: TraceIndex) -> None:
    """Make ``index``'s flows by time; its windows answer without them meanwhile
    (``flow_times_coming``), and make them themselves where this fails."""
    try:
        index.flow_times()
    finally:
        index.flow_times_coming = False


def index_pending(run: LoadedRun, host: str | None) -> bool:
    """Whether a host's index is still being built (its first exact window included). What
    else would start meanwhile (a one-host run's model) waits for it rather than share 2
    cores with it, and so that the two builds' peaks of memory do not add up."""
    future = run.started(("trace_index", host_of(run, host)))
    return future is not None and not future.done()


def trace_index(run: LoadedRun, host: str | None, wait_s: float | None = None,
                coarse: bool = False) -> TraceIndex | TraceOverview | TracePreview:
    """The index of one host of a loaded run; with ``coarse``, its coarse overview while the
    index is built (once it has been building for ``wait_s``); else IndexPending if it is not
    built within ``wait_s`` (default WAIT_S: a large trace's first build takes seconds, and is
    reported, not waited on), or, where a skim's preview is being made (``publish_skim``),
    within PREVIEW_WAIT_S of its start, whichever is later.
    """
    future = start_index(run, host)
    name = host_of(run, host)
    limit = WAIT_S if wait_s is None else wait_s
    deadline = time.monotonic() + limit
    while not future.done():
        events = run.partials.get(("trace_table", name))
        if events is not None:  # exact answers (the full index's) while it is built
            table: TrackTable = events[0]
            return table
        overview = run.partials.get(("trace_overview", name)) if coarse else None
        now = time.monotonic()
        grace = limit if overview is not None and overview[0].events < WAIT_EVENTS else 0.0
        if overview is not None and now >= min(deadline, overview[1] + grace):
            answer: TraceOverview | TracePreview = overview[0]
            return answer
        coming = run.partials.get(("trace_preview_coming", name)) if coarse else None
        until = deadline if coming is None else max(deadline, coming + PREVIEW_WAIT_S)
        if now >= until:
            hosts = run.profile.hosts
            loaded = hosts.loaded() if isinstance(hosts, LazyTables) else list(hosts)
            events = len(hosts[name]) if name in loaded else 0
            raise IndexPending({"status": "indexing", "done_bytes": 0, "total_bytes": 0,
                                "file": "", "events": events,
                                "share": run.share(("trace_index", name))})
        if run.trace_ready.is_set():
            wait([future], timeout=min(0.02, until - now))
        else:  # woken once the per-track table is out, not at the next poll (a fresh
            run.trace_ready.wait(min(0.02, until - now))  # server's first answer waited)
    return future.result()


def trace_viewer_data(run: LoadedRun, host: str | None) -> dict[str, Any]:
    """The trace viewer's tool data (as ``run.tools.trace_viewer``), answered from the coarse
    overview while the host's index builds."""
    name = host_of(run, host)
    return {"run": run.profile.run, "host": name, "hosts": list(run.profile.hosts),
            "clock": clock_of(run, name), **trace_index(run, host, coarse=True).meta()}


def integer(query: Mapping[str, str], name: str, low: int, high: int) -> int:
    """A required integer parameter within [low, high]."""
    text = query.get(name)
    if text is None or text == "":
        raise TraceParamError(f"Parameter {name} is required.")
    if not _INT.fullmatch(text):
        raise TraceParamError(f"Parameter {name} must be an integer, not {text[:40]!r}.")
    value = int(text)
    if not low <= value <= high:
        raise TraceParamError(f"Parameter {name} must be between {low} and {high}.")
    return value


def track_list(query: Mapping[str, str], required: bool) -> list[int] | None:
    """The ``tracks`` parameter: comma-separated track ids."""
    text = query.get("tracks")
    if text is None or text == "":
        if required:
            raise TraceParamError("Parameter tracks is required.")
        return None
    parts = text.split(",")
    if len(parts) > _MAX_TRACKS or not all(re.fullmatch(r"[0-9]{1,9}", p) for p in parts):
        raise TraceParamError("Parameter tracks must be comma-separated track numbers.")
    return [int(p) for p in parts]


def answer(index: TraceIndex | TraceOverview | TracePreview, view: str,
           query: Mapping[str, str]) -> dict[str, Any]:
    """The answer to one trace query (TraceParamError or TraceQueryError when bad,
    NotFoundError for an unknown view or event); IndexPending for a view other than
    ``window`` while only the coarse overview is ready."""
    if view == "window":
        start = integer(query, "start_ns", -_MAX_TIME, _MAX_TIME)
        end = integer(query, "end_ns", -_MAX_TIME, _MAX_TIME)
        width = integer(query, "width", 1, MAX_WIDTH)
        try:
            return index.query(start, end, width, track_list(query, False))
        except PreviewTooCoarse:  # too fine a window for the preview: wait for the index
            events = index.events if isinstance(index, TracePreview) else 0
            raise IndexPending({"status": "indexing", "done_bytes": 0, "total_bytes": 0,
                                "file": "", "events": events, "share": 0.0}) from None
    if isinstance(index, TraceOverview | TracePreview):
        if view not in VIEWS:
            raise NotFoundError(f"No trace view {view!r}; views are {', '.join(VIEWS)}.")
        raise IndexPending({"status": "indexing", "done_bytes": 0, "total_bytes": 0,
                            "file": "", "events": index.events, "share": 0.0})
    if view == "event":
        return index.event(integer(query, "id", 0, _MAX_TIME))
    if view == "search":
        return index.search(query.get("q", ""))
    if view == "selection":
        start = integer(query, "start_ns", -_MAX_TIME, _MAX_TIME)
        end = integer(query, "end_ns", -_MAX_TIME, _MAX_TIME)
        return index.selection(start, end, track_list(query, True) or [])
    raise NotFoundError(f"No trace view {view!r}; views are {', '.join(VIEWS)}.")
