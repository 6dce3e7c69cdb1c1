"""The web app: the JSON API of ``api`` and the bundled front end, served by FastAPI.

Every page and asset comes from this origin; the Content-Security-Policy header makes the
browser refuse anything else, so the UI works behind a firewall. The OpenAPI schema is at
``/api/openapi.json`` (the interactive docs pages are off: they load scripts from a CDN).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response

from stepscope.version import __version__
from stepscope.web.api import Api, ApiError, check_post
from stepscope.web.assets import SECURITY_HEADERS, static_reply


def create_app(logdir: str | Path, *, use_cache: bool = True) -> FastAPI:
    """The web app serving the runs of ``logdir``."""
    api = Api(logdir, use_cache=use_cache)
    app = FastAPI(title="stepscope", version=__version__, docs_url=None, redoc_url=None,
                  openapi_url="/api/openapi.json",
                  description="Profiles of ML programs: runs, hosts, tools and their data.")
    app.state.api = api

    @app.middleware("http")
    async def security_headers(request: Request, call_next: Any) -> Response:
        response: Response = await call_next(request)
        response.headers.update(SECURITY_HEADERS)
        return response

    @app.exception_handler(ApiError)
    async def api_error(request: Request, err: ApiError) -> JSONResponse:
        return JSONResponse({"error": err.message}, status_code=err.status)

    @app.exception_handler(RequestValidationError)
    async def bad_request(request: Request, err: RequestValidationError) -> JSONResponse:
        problems = "; ".join(f"{'.'.join(str(x) for x in e.get('loc', ())[1:])}: "
                             f"{e.get('msg', 'invalid')}" for e in err.errors())
        return JSONResponse({"error": f"Bad request ({problems})."}, status_code=400)

    run_q = Query(description="a run name from /api/runs")
    host_q = Query(None, description="a host of the run; omitted or empty: all hosts")
    tool_q = Query(description="a tool name from /api/tools")

    @app.get("/api/runs", summary="Runs of the logdir, newest first, with their hosts")
    def runs() -> dict[str, Any]:
        return api.runs()

    @app.get("/api/hosts", summary="Hosts of one run")
    def hosts(run: str = run_q) -> dict[str, Any]:
        return api.hosts(run)

    @app.get("/api/tools", summary="Tools available for a run and host")
    def tools(run: str = run_q, host: str | None = host_q) -> dict[str, Any]:
        return api.tools(run, host)

    @app.get("/api/status", summary="Loading progress of a run (starts loading it)")
    def status(run: str = run_q) -> dict[str, Any]:
        return api.status(run)

    @app.get("/api/data", summary="A tool's data as JSON (202 with progress while loading)")
    def data(request: Request, run: str = run_q, host: str | None = host_q,
             tool: str = tool_q, include_idle: bool = False) -> JSONResponse:
        code, body = api.data(run, host, tool, dict(request.query_params))
        return JSONResponse(body, status_code=code)

    @app.get("/api/csv", summary="A tool's table as CSV", response_class=Response)
    def csv(request: Request, run: str = run_q, host: str | None = host_q,
            tool: str = tool_q, include_idle: bool = False) -> Response:
        name, text = api.csv(run, host, tool, dict(request.query_params))
        return Response(text, media_type="text/csv; charset=utf-8",
                        headers={"Content-Disposition": f'attachment; filename="{name}"'})

    @app.post("/api/capture", status_code=202,
              summary="Capture running workers into the logdir (body: service_addr, "
              "duration_ms, host/python/device_tracer_level, num_tracing_attempts)")
    async def start_capture(request: Request) -> dict[str, Any]:
        check_post(request.headers.get("content-type", ""), request.headers.get("origin"),
                   request.headers.get("host"))
        try:
            body = await request.json()
        except ValueError as err:
            raise ApiError(400, "The request body is not JSON.") from err
        return api.start_capture(body)

    @app.get("/api/capture", summary="Progress and result of a capture started here")
    def capture(id: str = Query(description="the id POST /api/capture returned")
                ) -> dict[str, Any]:
        return api.capture(id)

    @app.get("/api/trace/{view}", summary="Trace viewer: a window's events at a width in "
             "pixels (view=window: start_ns, end_ns, width, tracks), one event (event: id), "
             "a search (search: q), a selection summed by name (selection: start_ns, end_ns, "
             "tracks)")
    def trace(request: Request, view: str, run: str = run_q,
              host: str | None = host_q) -> JSONResponse:
        code, body = api.trace(view, dict(request.query_params))
        return JSONResponse(body, status_code=code)

    @app.get("/api/{rest:path}", include_in_schema=False)
    def unknown(rest: str) -> JSONResponse:
        return JSONResponse({"error": f"No API route {rest!r}."}, status_code=404)

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
