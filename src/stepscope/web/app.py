"""The web app: the API's routes (``routes``) and the bundled front end, served by FastAPI.

Every page and asset comes from this origin; the Content-Security-Policy header makes the
browser refuse anything else, so the UI works behind a firewall. Requests naming a host the
server was not started for are refused before anything else (``host_check``). The OpenAPI
schema is at ``/api/openapi.json`` (the interactive docs pages are off: they load scripts
from a CDN).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Query, Request
from fastapi import Path as PathParam
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from stepscope.version import __version__
from stepscope.web.api import Api, Reply
from stepscope.web.assets import SECURITY_HEADERS, static_reply
from stepscope.web.host_check import HostCheck
from stepscope.web.routes import ROUTES, ApiRequest, Param, Route, answer, unknown_route

# The API's bodies are small JSON requests (a capture's service addresses and options).
MAX_BODY_BYTES = 64 * 1024


def create_app(logdir: str | Path, *, use_cache: bool = True,
               hosts: HostCheck | None = None, engine: str = "auto",
               allow_link_local_capture: bool = False, api: Api | None = None) -> FastAPI:
    """The web app serving the runs of ``logdir`` to requests for ``hosts`` (default: this
    machine's loopback names only); run models are built on ``engine``. Captures asked for
    over HTTP may reach link-local and metadata targets only with
    ``allow_link_local_capture``. ``api``: the answers over ``logdir`` made already (by a
    server that started loading a run before it imported this module); the options above
    are then its own."""
    api = api or Api(logdir, use_cache=use_cache, engine=engine,
                     allow_link_local_capture=allow_link_local_capture)
    hosts = hosts or HostCheck()
    app = FastAPI(title="stepscope", version=__version__, docs_url=None, redoc_url=None,
                  openapi_url="/api/openapi.json",
                  description="Profiles of ML programs: runs, hosts, tools and their data.")
    app.state.api = api

    @app.middleware("http")
    async def security_headers(request: Request, call_next: Any) -> Response:
        refused = hosts.refusal(request.headers.get("host"))
        response: Response = (JSONResponse({"error": refused[1]}, status_code=refused[0])
                              if refused else await call_next(request))
        response.headers.update(SECURITY_HEADERS)
        return response

    @app.exception_handler(RequestValidationError)
    async def bad_request(request: Request, err: RequestValidationError) -> JSONResponse:
        problems = "; ".join(f"{'.'.join(str(x) for x in e.get('loc', ())[1:])}: "
                             f"{e.get('msg', 'invalid')}" for e in err.errors())
        return JSONResponse({"error": f"Bad request ({problems})."}, status_code=400)

    for route in ROUTES:
        is_json = route.media_type == "application/json"
        app.add_api_route(f"/api/{route.path}", _endpoint(api, route), methods=[route.method],
                          name=route.name, summary=route.summary, status_code=route.status,
                          response_class=JSONResponse if is_json else Response,
                          response_model=dict[str, Any] if is_json else None)

    @app.get("/api/{rest:path}", include_in_schema=False)
    def unknown(rest: str) -> Response:
        return _response(unknown_route(rest))

    @app.get("/", include_in_schema=False)
    def index() -> Response:
        code, kind, body = static_reply("index.html")
        return Response(body, status_code=code, media_type=kind)

    @app.get("/static/{name:path}", include_in_schema=False)
    def static(name: str) -> Response:
        code, kind, body = static_reply(name)
        return Response(body, status_code=code, media_type=kind,
                        headers={"Cache-Control": "no-cache"})

    return app


def _endpoint(api: Api, route: Route) -> Callable[..., Awaitable[Response]]:
    """A FastAPI endpoint for ``route``: its parameters declared (FastAPI checks them and lists
    them in the schema), its answer from the route table."""

    async def endpoint(request: Request, **_: Any) -> Response:
        body = await _bounded_body(request) if route.method == "POST" else b""
        if body is None:
            return JSONResponse({"error": f"The request body is over {MAX_BODY_BYTES:,} "
                                          "bytes."}, status_code=413)
        call = ApiRequest(query=dict(request.query_params), path_params=request.path_params,
                          body=body,
                          content_type=request.headers.get("content-type", ""),
                          origin=request.headers.get("origin"),
                          host=request.headers.get("host"))
        return _response(await run_in_threadpool(answer, api, route, call))

    endpoint.__name__ = route.name
    endpoint.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter("request", inspect.Parameter.POSITIONAL_OR_KEYWORD,
                           annotation=Request),
         *(_parameter(p) for p in route.params)])
    return endpoint


async def _bounded_body(request: Request) -> bytes | None:
    """The request's body, or None once it grows past ``MAX_BODY_BYTES`` (read no further)."""
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def _parameter(param: Param) -> inspect.Parameter:
    """A route parameter as FastAPI reads it from an endpoint's signature."""
    kind = inspect.Parameter.KEYWORD_ONLY
    if param.in_path:
        return inspect.Parameter(param.name, kind, annotation=str,
                                 default=PathParam(description=param.description))
    if param.boolean:
        return inspect.Parameter(param.name, kind, annotation=bool,
                                 default=Query(False, description=param.description))
    if param.required:
        return inspect.Parameter(param.name, kind, annotation=str,
                                 default=Query(description=param.description))
    return inspect.Parameter(param.name, kind, annotation=str | None,
                             default=Query(None, description=param.description))


def _response(reply: Reply) -> Response:
    return Response(reply.body, status_code=reply.status, media_type=reply.content_type,
                    headers=reply.headers)
