"""The web app: the API's routes (``routes``) and the bundled front end, as an ASGI app made
with Starlette (no FastAPI: ``routes`` checks every parameter itself, and pydantic's import
alone took longer than a small profile's first trace window).

Every page and asset comes from this origin; the Content-Security-Policy header makes the
browser refuse anything else, so the UI works behind a firewall. Requests naming a host the
server was not started for are refused before anything else (``host_check``). Every request
under ``/api/`` is answered by ``routes.dispatch``, the one route table the TensorBoard plugin
answers from too; its OpenAPI schema is at ``/api/openapi.json`` (no interactive docs pages:
they load scripts from a CDN).
"""

from __future__ import annotations

from pathlib import Path

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers, MutableHeaders
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from stepscope.web.api import Api, Reply
from stepscope.web.assets import SECURITY_HEADERS, static_reply
from stepscope.web.host_check import HostCheck
from stepscope.web.routes import ApiRequest, dispatch

# The API's bodies are small JSON requests (a capture's service addresses and options).
MAX_BODY_BYTES = 64 * 1024
# The methods passed on to the route table, which refuses those a route does not take (405).
_API_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]


def create_app(logdir: str | Path, *, use_cache: bool = True,
               hosts: HostCheck | None = None, engine: str = "auto",
               allow_link_local_capture: bool = False, api: Api | None = None) -> Starlette:
    """The web app serving the runs of ``logdir`` to requests for ``hosts`` (default: this
    machine's loopback names only); run models are built on ``engine``. Captures asked for
    over HTTP may reach link-local and metadata targets only with
    ``allow_link_local_capture``. ``api``: the answers over ``logdir`` made already (by a
    server that started loading a run before it imported this module); the options above
    are then its own."""
    api = api or Api(logdir, use_cache=use_cache, engine=engine,
                     allow_link_local_capture=allow_link_local_capture)

    async def api_route(request: Request) -> Response:
        # Any method: the route table answers 405 for one it does not take (HEAD as GET).
        method = "GET" if request.method == "HEAD" else request.method
        body = await _bounded_body(request) if method == "POST" else b""
        if body is None:
            return JSONResponse({"error": f"The request body is over {MAX_BODY_BYTES:,} "
                                          "bytes."}, status_code=413)
        call = ApiRequest(query=dict(request.query_params), body=body,
                          content_type=request.headers.get("content-type", ""),
                          origin=request.headers.get("origin"),
                          host=request.headers.get("host"))
        reply = await run_in_threadpool(dispatch, api, method, request.path_params["path"],
                                        call)
        return _response(reply)

    def index(request: Request) -> Response:
        code, kind, body = static_reply("index.html")
        return Response(body, status_code=code, media_type=kind)

    def static(request: Request) -> Response:
        code, kind, body = static_reply(request.path_params["name"])
        return Response(body, status_code=code, media_type=kind,
                        headers={"Cache-Control": "no-cache"})

    app = Starlette(routes=[Route("/api/{path:path}", api_route, methods=_API_METHODS),
                            Route("/", index), Route("/static/{name:path}", static)],
                    middleware=[Middleware(Guard, hosts=hosts or HostCheck())])
    app.state.api = api
    return app


class Guard:
    """ASGI middleware: refuses a request whose Host header names a host the server was not
    started for (before the app sees it), and adds the security headers to every answer."""

    def __init__(self, app: ASGIApp, hosts: HostCheck) -> None:
        self.app = app
        self.hosts = hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, send)
            return

        async def send_secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message).update(SECURITY_HEADERS)
            await send(message)

        refused = self.hosts.refusal(Headers(scope=scope).get("host"))
        if refused is not None:
            if scope["type"] == "http":
                await JSONResponse({"error": refused[1]}, status_code=refused[0])(
                    scope, receive, send_secured)
            else:  # a WebSocket (which no route takes): closed unanswered
                await send({"type": "websocket.close", "code": 1008})
            return
        await self.app(scope, receive, send_secured)


async def _bounded_body(request: Request) -> bytes | None:
    """The request's body, or None once it grows past ``MAX_BODY_BYTES`` (read no further)."""
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def _response(reply: Reply) -> Response:
    return Response(reply.body, status_code=reply.status, media_type=reply.content_type,
                    headers=reply.headers)
