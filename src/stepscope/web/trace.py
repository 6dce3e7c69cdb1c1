"""The trace viewer's HTTP answers: its tool data (sections and tracks) and its queries.

``/api/trace/<view>?run=…&host=…&…`` with ``view`` one of

``window``     ``start_ns``, ``end_ns`` (relative to the trace's origin), ``width`` (pixels),
               optional ``tracks`` (comma-separated ids): the level-of-detail events;
``event``      ``id``: one event's details, stats and flows;
``search``     ``q``: events whose name holds the text, in time order;
``selection``  ``start_ns``, ``end_ns``, ``tracks``: the events there, summed by name.

Every number is checked strictly (digits only, within bounds); anything else is a 400.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from concurrent.futures import Future, wait
from typing import Any

from stepscope.analysis.trace_index import MAX_WIDTH, TraceIndex, index_for
from stepscope.errors import NotFoundError
from stepscope.web.loaded_run import LoadedRun
from stepscope.web.tools import Params

VIEWS = ("window", "event", "search", "selection")
_INT = re.compile(r"-?[0-9]{1,19}")
_MAX_TIME = 1 << 62
_MAX_TRACKS = 100_000
WAIT_S = 0.5  # how long a request waits for an index being built before it answers 202


class TraceParamError(ValueError):
    """A trace query parameter is missing or not a number in range."""


def host_of(run: LoadedRun, host: str | None) -> str:
    """The host a trace request is about: the one named, else the run's first."""
    return host if host is not None else next(iter(run.profile.hosts))


class IndexPending(Exception):
    """A host's index is still being built; ``progress`` is the 202 answer saying how far."""

    def __init__(self, progress: dict[str, Any]) -> None:
        super().__init__("The trace viewer's index is being built.")
        self.progress = progress


def start_index(run: LoadedRun, host: str | None) -> Future[TraceIndex]:
    """Start building one host's index in the background (once per run; a cached index on
    disk is only read)."""
    name = host_of(run, host)
    table = run.profile.hosts[name]
    source = run.profile.sources.get(name)

    def build(report: Callable[[float], None]) -> TraceIndex:
        return index_for(table, source, use_cache=run.use_cache, progress=report)

    future: Future[TraceIndex] = run.background(("trace_index", name), build)
    return future


def trace_index(run: LoadedRun, host: str | None, wait_s: float | None = None) -> TraceIndex:
    """The index of one host of a loaded run; IndexPending if it is not built within
    ``wait_s`` (default WAIT_S: a large trace's first build takes seconds, and is reported,
    not waited on).
    """
    future = start_index(run, host)
    if not wait([future], timeout=WAIT_S if wait_s is None else wait_s).done:
        name = host_of(run, host)
        events = len(run.profile.hosts[name])
        raise IndexPending({"status": "indexing", "done_bytes": 0, "total_bytes": 0,
                            "file": "", "events": events,
                            "share": run.share(("trace_index", name))})
    return future.result()


def trace_viewer_data(run: LoadedRun, host: str | None, params: Params) -> dict[str, Any]:
    """The trace viewer's tool data: the host, its sections and tracks, its time span."""
    name = host_of(run, host)
    return {"run": run.profile.run, "host": name, "hosts": list(run.profile.hosts),
            "clock": clock_of(run, name), **trace_index(run, host).meta()}


def clock_of(run: LoadedRun, host: str) -> dict[str, Any]:
    """How the host's clock is lined up with the run's other hosts (the pod viewer's
    alignment): add ``shift_ns`` to its times to compare them with another host's."""
    from stepscope.web.tools import run_model

    alignment = run_model(run).pod_dict().get("alignment", {}).get(host)
    if not alignment:
        return {"shift_ns": 0, "method": "none", "reason": "One host: nothing to line up."}
    return {"shift_ns": int(alignment["shift_ns"]), "method": str(alignment["method"]),
            "reason": str(alignment["reason"])}


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


def answer(index: TraceIndex, view: str, query: Mapping[str, str]) -> dict[str, Any]:
    """The answer to one trace query (TraceParamError or TraceQueryError when bad,
    NotFoundError for an unknown view or event)."""
    if view == "window":
        start = integer(query, "start_ns", -_MAX_TIME, _MAX_TIME)
        end = integer(query, "end_ns", -_MAX_TIME, _MAX_TIME)
        width = integer(query, "width", 1, MAX_WIDTH)
        return index.query(start, end, width, track_list(query, False))
    if view == "event":
        return index.event(integer(query, "id", 0, _MAX_TIME))
    if view == "search":
        return index.search(query.get("q", ""))
    if view == "selection":
        start = integer(query, "start_ns", -_MAX_TIME, _MAX_TIME)
        end = integer(query, "end_ns", -_MAX_TIME, _MAX_TIME)
        return index.selection(start, end, track_list(query, True) or [])
    raise NotFoundError(f"No trace view {view!r}; views are {', '.join(VIEWS)}.")
