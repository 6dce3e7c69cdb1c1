"""The HTTP API's one route table: each URL under ``/api/`` with its handler, summary and
parameters, and the OpenAPI schema made from it (``/api/openapi.json``).

Both hosts answer every request under ``/api/`` through ``dispatch``: ``app`` (the ASGI app
that ``stepscope serve`` runs) and ``tensorboard_plugin`` (WSGI), so the two cannot disagree.
Each handler checks its own parameters (a missing or malformed one is a 400).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from functools import cache
from typing import Any

from stepscope.errors import InvalidParameterError, NotFoundError
from stepscope.version import __version__
from stepscope.web.api import Api, ApiError, Reply, check_post, json_reply


@dataclass(frozen=True)
class Param:
    """A query (or path) parameter of a route."""

    name: str
    description: str
    required: bool = False
    boolean: bool = False  # true/false rather than text
    in_path: bool = False  # a ``{name}`` segment of the route's path


@dataclass(frozen=True)
class ApiRequest:
    """One request, as a handler sees it, whichever web framework carried it."""

    query: Mapping[str, str]
    path_params: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""
    content_type: str = ""
    origin: str | None = None
    host: str | None = None


Handler = Callable[[Api, ApiRequest], Reply]


@dataclass(frozen=True)
class Route:
    """One URL of the API."""

    method: str
    path: str  # under /api/; ``{name}`` stands for one path segment
    handler: Handler
    name: str
    summary: str
    params: tuple[Param, ...] = ()
    status: int = 200  # the status of a success
    media_type: str = "application/json"

    def match(self, path: str) -> dict[str, str] | None:
        """The path parameters if ``path`` (under /api/) is this route's, else None."""
        found = _pattern(self.path).fullmatch(path)
        return found.groupdict() if found else None


@cache
def _pattern(path: str) -> re.Pattern[str]:
    parts = re.split(r"\{(\w+)\}", path)  # literal, name, literal, name, …
    return re.compile("".join(f"(?P<{part}>[^/]+)" if i % 2 else re.escape(part)
                              for i, part in enumerate(parts)))


def _runs(api: Api, request: ApiRequest) -> Reply:
    return json_reply(200, api.runs())


def _hosts(api: Api, request: ApiRequest) -> Reply:
    return json_reply(200, api.hosts(request.query.get("run")))


def _tools(api: Api, request: ApiRequest) -> Reply:
    return json_reply(200, api.tools(request.query.get("run"), request.query.get("host")))


def _status(api: Api, request: ApiRequest) -> Reply:
    return json_reply(200, api.status(request.query.get("run")))


def _data(api: Api, request: ApiRequest) -> Reply:
    q = request.query
    return json_reply(*api.data(q.get("run"), q.get("host"), q.get("tool"), q))


def _csv(api: Api, request: ApiRequest) -> Reply:
    q = request.query
    name, text = api.csv(q.get("run"), q.get("host"), q.get("tool"), q)
    return Reply(200, "text/csv; charset=utf-8", text.encode(),
                 {"Content-Disposition": f'attachment; filename="{name}"'})


def _start_capture(api: Api, request: ApiRequest) -> Reply:
    check_post(request.content_type, request.origin, request.host)
    try:
        body = json.loads(request.body)
    except (ValueError, RecursionError) as err:  # deep nesting: RecursionError
        raise ApiError(400, "The request body is not JSON.") from err
    return json_reply(202, api.start_capture(body))


def _capture(api: Api, request: ApiRequest) -> Reply:
    return json_reply(200, api.capture(request.query.get("id")))


def _trace(api: Api, request: ApiRequest) -> Reply:
    return json_reply(*api.trace(request.path_params["view"], request.query))


def _openapi(api: Api, request: ApiRequest) -> Reply:
    return json_reply(200, openapi_schema())


_RUN = Param("run", "a run name from /api/runs", required=True)
_HOST = Param("host", "a host of the run; omitted or empty: all hosts")
_TOOL = Param("tool", "a tool name from /api/tools", required=True)
_IDLE = Param("include_idle", "framework_op_stats: count idle time as an op", boolean=True)
_MEMORY = (Param("allocator", "memory_profile: the allocator whose timeline to send (an index "
                 "into allocators; default 0)"),
           Param("width", "memory_profile: the most timeline points to send (default 1000; 0: "
                 "no timeline)"),
           Param("from_us", "memory_profile: timeline from this time (µs since the host's "
                 "profile start)"),
           Param("to_us", "memory_profile: timeline up to this time (µs)"))
_HLO = (Param("module", "memory_viewer, graph_viewer: the program, name(id), id or name"),
        Param("memory_space", "memory_viewer: the memory space (XLA memory colour, default 0)"),
        Param("op", "graph_viewer: the HLO op (default: the program's costliest)"),
        Param("depth", "graph_viewer: steps out from the op, 0 to 20 (default 2)"),
        Param("expand_fusions", "graph_viewer: true to show the instructions inside fusions"))

ROUTES: tuple[Route, ...] = (
    Route("GET", "runs", _runs, "runs", "Runs of the logdir, newest first, with their hosts"),
    Route("GET", "hosts", _hosts, "hosts", "Hosts of one run", (_RUN,)),
    Route("GET", "tools", _tools, "tools", "Tools available for a run and host", (_RUN, _HOST)),
    Route("GET", "status", _status, "status", "Loading progress of a run (starts loading it)",
          (_RUN,)),
    Route("GET", "data", _data, "data",
          "A tool's data as JSON (202 with progress while loading)",
          (_RUN, _HOST, _TOOL, _IDLE, *_MEMORY, *_HLO)),
    Route("GET", "csv", _csv, "csv", "A tool's table as CSV", (_RUN, _HOST, _TOOL, _IDLE),
          media_type="text/csv"),
    Route("POST", "capture", _start_capture, "start_capture",
          "Capture running workers into the logdir (body: service_addr, duration_ms, "
          "host/python/device_tracer_level, num_tracing_attempts)", status=202),
    Route("GET", "capture", _capture, "capture",
          "Progress and result of a capture started here",
          (Param("id", "the id POST /api/capture returned", required=True),)),
    Route("GET", "trace/{view}", _trace, "trace",
          "Trace viewer: a window's events at a width in pixels (view=window: start_ns, "
          "end_ns, width, tracks), one event (event: id), a search (search: q), a selection "
          "summed by name (selection: start_ns, end_ns, tracks)",
          (Param("view", "window, event, search or selection", in_path=True), _RUN, _HOST)),
    Route("GET", "openapi.json", _openapi, "openapi", "This API's OpenAPI schema"),
)


@cache
def openapi_schema() -> dict[str, Any]:
    """The OpenAPI 3.1 description of ``ROUTES``: each route's parameters and the status of
    its success; every refusal is JSON ``{"error": "<one sentence>"}``."""
    error = {"description": "Refused: a bad (400) or unknown (404) name or parameter",
             "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
    paths: dict[str, Any] = {}
    for route in ROUTES:
        params = [{"name": p.name, "in": "path" if p.in_path else "query",
                   "required": p.required or p.in_path, "description": p.description,
                   "schema": {"type": "boolean" if p.boolean else "string"}}
                  for p in route.params]
        operation: dict[str, Any] = {
            "operationId": route.name, "summary": route.summary,
            "responses": {str(route.status): {"description": "Success", "content": {
                route.media_type: {"schema": {"type": "object"} if
                                   route.media_type == "application/json" else
                                   {"type": "string"}}}},
                          "4XX": error}}
        if params:
            operation["parameters"] = params
        if route.method == "POST":
            operation["requestBody"] = {"required": True, "content": {
                "application/json": {"schema": {"type": "object"}}}}
        paths.setdefault(f"/api/{route.path}", {})[route.method.lower()] = operation
    return {"openapi": "3.1.0",
            "info": {"title": "stepscope", "version": __version__,
                     "description": "Profiles of ML programs: runs, hosts, tools and their "
                                    "data."},
            "paths": paths,
            "components": {"schemas": {"Error": {
                "type": "object", "required": ["error"],
                "properties": {"error": {"type": "string"}}}}}}


def answer(api: Api, route: Route, request: ApiRequest) -> Reply:
    """The route's reply to ``request``; a refusal becomes its 4xx JSON ``{"error": …}``."""
    try:
        return route.handler(api, request)
    except NotFoundError as err:
        return json_reply(404, {"error": str(err)})
    except InvalidParameterError as err:
        return json_reply(400, {"error": str(err)})
    except ApiError as err:
        return json_reply(err.status, {"error": err.message})


def unknown_route(path: str) -> Reply:
    """The reply to a GET of a path under /api/ that no route has."""
    return json_reply(404, {"error": f"No API route {path!r}."})


def dispatch(api: Api, method: str, path: str, request: ApiRequest) -> Reply:
    """Answer ``<method> /api/<path>`` by the table (a path no route has: 404 for a GET, else
    405)."""
    for route in ROUTES:
        params = route.match(path) if route.method == method else None
        if params is not None:
            return answer(api, route, replace(request, path_params=params))
    if method != "GET":
        return json_reply(405, {"error": f"{method} is not allowed here."})
    return unknown_route(path)
