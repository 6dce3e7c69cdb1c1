"""The web app: the API's routes (``routes``) and the bundled front end. ``http_server``
calls ``App.respond`` for each request; the app is a plain ASGI app too (any ASGI server can
serve it: the tests use Starlette's TestClient; asyncio is imported only then).

No web framework: every request under ``/api/`` is answered by ``routes.dispatch`` (the one
route table, which the TensorBoard plugin answers from too, and which checks every parameter
itself), and the rest are the bundle's files. A framework would add nothing here but its
import, which a fresh server's first trace window waited for (FastAPI with pydantic about
0.2 s; Starlette with AnyIO about 0.05 s).

Every page and asset comes from this origin; the Content-Security-Policy header makes the
browser refuse anything else, so the UI works behind a firewall. Requests naming a host the
server was not started for are refused before anything else (``host_check``). The OpenAPI
schema is at ``/api/openapi.json`` (no interactive docs pages: they load scripts from a CDN).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

from stepscope.web.api import Api, Reply, json_reply
from stepscope.web.assets import SECURITY_HEADERS, static_reply
from stepscope.web.host_check import HostCheck
from stepscope.web.routes import ApiRequest, dispatch

log = logging.getLogger("stepscope.web")

# The API's bodies are small JSON requests (a capture's service addresses and options).
MAX_BODY_BYTES = 64 * 1024
# Requests answered at once under an ASGI server; more wait for a thread. (An answer may wait
# on a run being read or an index being built, so the event loop's default of a few threads
# is too few.)
MAX_THREADS = 40

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

_SECURITY = [(k.lower().encode(), v.encode()) for k, v in SECURITY_HEADERS.items()]


def create_app(logdir: str | Path, *, use_cache: bool = True,
               hosts: HostCheck | None = None, engine: str = "auto",
               allow_link_local_capture: bool = False, api: Api | None = None) -> App:
    """The web app serving the runs of ``logdir`` to requests for ``hosts`` (default: this
    machine's loopback names only); run models are built on ``engine``. Captures asked for
    over HTTP may reach link-local and metadata targets only with
    ``allow_link_local_capture``. ``api``: the answers over ``logdir`` made already (by a
    server that started loading a run before it imported this module); the options above
    are then its own."""
    api = api or Api(logdir, use_cache=use_cache, engine=engine,
                     allow_link_local_capture=allow_link_local_capture)
    return App(api, hosts or HostCheck())


class App:
    """The app: ``/api/…`` from the route table, ``/`` and ``/static/…`` from the bundle,
    every answer with the security headers. ``respond`` answers one request (our server
    calls it in the connection's thread); called with an ASGI scope, it is an ASGI app."""

    def __init__(self, api: Api, hosts: HostCheck) -> None:
        self.api = api
        self.hosts = hosts
        self._threads = ThreadPoolExecutor(MAX_THREADS, thread_name_prefix="stepscope-request")

    def respond(self, method: str, path: str, query: str, headers: Mapping[str, str],
                read_body: Callable[[int], bytes | None]) -> Reply:
        """The reply to one request (its security headers added by ``reply_headers``):
        ``path`` percent-decoded, ``query`` as sent, ``headers`` by lower-case name,
        ``read_body(limit)`` its body (None once past ``limit`` bytes), called only when the
        answer needs it. It may read files and compute: call it off an event loop."""
        refused = self.hosts.refusal(headers.get("host"))
        if refused is not None:
            return json_reply(refused[0], {"error": refused[1]})
        try:
            return self._answer(method, path, query, headers, read_body)
        except Exception:  # a bug: logged with its traceback, answered in one line
            log.exception("stepscope serve: %s %s failed", method, path)
            return json_reply(500, {"error": "The server failed to answer; its log says why."})

    def _answer(self, method: str, path: str, query: str, headers: Mapping[str, str],
                read_body: Callable[[int], bytes | None]) -> Reply:
        method = "GET" if method == "HEAD" else method
        if path.startswith("/api/"):
            body = read_body(MAX_BODY_BYTES) if method == "POST" else b""
            if body is None:
                return json_reply(413, {"error": f"The request body is over "
                                                 f"{MAX_BODY_BYTES:,} bytes."})
            call = ApiRequest(query=dict(parse_qsl(query, keep_blank_values=True)),
                              body=body, content_type=headers.get("content-type", ""),
                              origin=headers.get("origin"), host=headers.get("host"))
            return dispatch(self.api, method, path[len("/api/"):], call)
        if method != "GET":
            return json_reply(405, {"error": f"{method} is not allowed here."})
        if path == "/":
            return Reply(*static_reply("index.html"))
        if path.startswith("/static/"):
            return Reply(*static_reply(path[len("/static/"):]), {"Cache-Control": "no-cache"})
        return json_reply(404, {"error": f"Nothing at {path[:200]!r}."})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The ASGI app (any ASGI server, Starlette's TestClient): ``respond`` in a thread."""
        import asyncio

        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":  # a WebSocket: none is served
            await send({"type": "websocket.close", "code": 1008})
            return
        method, path = scope["method"], scope["path"]  # the path percent-decoded
        body = (await _bounded_body(receive) if method == "POST" and path.startswith("/api/")
                else b"")
        reply = await asyncio.get_running_loop().run_in_executor(
            self._threads, self.respond, method, path,
            scope.get("query_string", b"").decode("latin-1"), _headers(scope),
            lambda limit: body)
        await send({"type": "http.response.start", "status": reply.status,
                    "headers": reply_headers(reply)})
        await send({"type": "http.response.body",
                    "body": b"" if method == "HEAD" else reply.body})


def reply_headers(reply: Reply) -> list[tuple[bytes, bytes]]:
    """``reply``'s response headers, the security headers among them."""
    return [(b"content-type", reply.content_type.encode("latin-1")),
            (b"content-length", str(len(reply.body)).encode()),
            *((k.lower().encode("latin-1"), v.encode("latin-1"))
              for k, v in reply.headers.items()),
            *_SECURITY]


def _headers(scope: Scope) -> dict[str, str]:
    """The request's headers by lower-case name (the first of a repeated one)."""
    out: dict[str, str] = {}
    for name, value in scope.get("headers", ()):
        out.setdefault(name.decode("latin-1").lower(), value.decode("latin-1"))
    return out


async def _bounded_body(receive: Receive) -> bytes | None:
    """The request's body, or None once it grows past ``MAX_BODY_BYTES`` (read no further)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return b"".join(chunks)
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def _lifespan(receive: Receive, send: Send) -> None:
    """The server's start and stop: nothing to set up or tear down."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
