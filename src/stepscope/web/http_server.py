"""``stepscope serve``: run the web UI on a logdir, on loopback by default.

The app (``web.app``) is plain ASGI; it is served here by a small HTTP/1.1 server on
asyncio's streams, with h11 parsing and writing the messages (``_serve_asgi``). uvicorn did
the same, and a fresh server spent ~0.1 s of CPU importing and starting it (its command line,
logging configuration, process supervisors) while the first trace window was being made on
the same two cores and one GIL. Every request still ends in the one route table
(``routes.dispatch``, through the app); one request at a time per connection, keep-alive,
no WebSockets (the UI uses none).
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import socket
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stepscope.errors import StepscopeError
from stepscope.web.host_check import ANY_HOST, HostCheck, host_name_of

if TYPE_CHECKING:
    import asyncio

    from stepscope.web.app import App

log = logging.getLogger("stepscope.web")

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 6006


def is_loopback(host: str) -> bool:
    """Whether ``host`` names only this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_port(host: str, port: int) -> None:
    """Raise a clear error now if ``host:port`` cannot be bound (e.g. already in use)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as err:
            raise StepscopeError(f"Cannot listen on {host}:{port} ({err.strerror or err}); "
                                 "pick another --port.") from err


def host_check(host: str, allow_hosts: Sequence[str] = ()) -> HostCheck:
    """The Host-header check of a server listening on ``host`` that also answers to
    ``allow_hosts`` (names or addresses; ``*`` for any); StepscopeError for a bad name."""
    for name in allow_hosts:
        if name != ANY_HOST and host_name_of(name) is None:
            raise StepscopeError(f"--allow-host {name!r} is not a host name or address.")
    if ANY_HOST in allow_hosts:
        log.warning("stepscope serve: --allow-host '*' answers requests for any host name, "
                    "which lets a web page that rebinds its name to this machine read the "
                    "profiles; use it only behind a proxy that checks the name.")
    return HostCheck(host, allow_hosts)


def serve(logdir: str | Path, *, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT,
          use_cache: bool = True, quiet: bool = False,
          allow_hosts: Sequence[str] = (), engine: str = "auto",
          allow_link_local_capture: bool = False) -> None:
    """Serve the UI for ``logdir`` until interrupted; requests must name ``host``, a loopback
    name or one of ``allow_hosts`` in their Host header."""
    if not 1 <= port <= 65535:
        raise StepscopeError(f"Port {port} is out of range (1-65535).")
    hosts = host_check(host, allow_hosts)
    if not is_loopback(host):
        log.warning("stepscope serve: listening on %s makes every profile in %s readable "
                    "by anyone who can reach this machine.", host, logdir)
    check_port(host, port)
    from stepscope.model.locations import as_path
    from stepscope.web.store import RunStore

    # The newest run (the page's first) is read while the rest of the web stack (the API,
    # asyncio, h11) is imported: the first trace window is then answered about as soon
    # as the server listens.
    store = RunStore(use_cache=use_cache, engine=engine)
    store.preload(as_path(logdir))
    from stepscope.web.api import Api
    from stepscope.web.app import create_app

    api = Api(logdir, allow_link_local_capture=allow_link_local_capture, store=store)
    app = create_app(logdir, hosts=hosts, api=api)
    shown = f"[{host}]" if ":" in host else host
    if not quiet:
        print(f"stepscope: serving {logdir} at http://{shown}:{port}/ (Ctrl-C to stop)",
              flush=True)
    try:
        run_app(app, host, port)
    finally:
        store.close()  # a load or index build still running saves nothing half-done


# Header block of a request (h11's limit on an incomplete event): the UI's requests are short.
MAX_HEAD_BYTES = 64 * 1024
# An idle keep-alive connection, or a request that stops arriving, is closed after this long.
READ_TIMEOUT_S = 30.0
READ_CHUNK = 64 * 1024


def run_app(app: App, host: str, port: int) -> None:
    """Serve the ASGI ``app`` on ``host:port`` until interrupted (Ctrl-C)."""
    import asyncio

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve_asgi(app, host, port))


async def _serve_asgi(app: App, host: str, port: int) -> None:
    import asyncio

    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await _connection(app, _Peer(reader, writer), (host, port))
        except (ConnectionError, asyncio.TimeoutError):
            pass  # the client went away, or stopped sending: nothing to answer
        except Exception:  # a bug: logged, and this connection closed; the server goes on
            log.exception("stepscope serve: a connection failed")
        finally:
            writer.close()

    server = await asyncio.start_server(connection, host, port, reuse_address=True)
    async with server:
        await server.serve_forever()


class _Peer:
    """One client connection: h11's state of it over asyncio's streams."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        import h11

        self.reader = reader
        self.writer = writer
        self.conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
        peer = writer.get_extra_info("peername")
        self.client = (str(peer[0]), int(peer[1])) if isinstance(peer, tuple) else None

    async def next_event(self) -> Any:
        """The next h11 event, reading as needed (``READ_TIMEOUT_S`` at most per read)."""
        import asyncio

        import h11

        while True:
            event = self.conn.next_event()
            if event is not h11.NEED_DATA:
                return event
            data = await asyncio.wait_for(self.reader.read(READ_CHUNK), READ_TIMEOUT_S)
            self.conn.receive_data(data)  # b"": the client closed its side

    async def write(self, *events: Any) -> None:
        for event in events:
            self.writer.write(self.conn.send(event))
        await self.writer.drain()


async def _connection(app: App, peer: _Peer, server: tuple[str, int]) -> None:
    """One client connection's requests, one after another, each answered by ``app``."""
    import h11

    while True:
        try:
            request = await peer.next_event()
        except h11.RemoteProtocolError as err:
            if peer.conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                status = err.error_status_hint
                body = f'{{"error": "Bad request ({status})."}}'.encode()
                headers = [("content-type", "application/json"),
                           ("content-length", str(len(body))), ("connection", "close")]
                await peer.write(
                    h11.Response(status_code=status, reason=_reason(status), headers=headers),
                    h11.Data(data=body), h11.EndOfMessage())
            return
        if not isinstance(request, h11.Request):
            return  # closed (or paused on a protocol switch the server never agrees to)
        await _exchange(app, peer, request, server)
        # The end of the request (h11 reports it apart, even without a body), and what the
        # app did not read of a small body; a larger one ends the connection instead.
        left = MAX_HEAD_BYTES
        while peer.conn.their_state is h11.SEND_BODY and left >= 0:
            event = await peer.next_event()
            left -= len(event.data) if isinstance(event, h11.Data) else 0
        if peer.conn.our_state is not h11.DONE or peer.conn.their_state is not h11.DONE:
            return  # a body left unread, or an answer cut short: the connection ends
        peer.conn.start_next_cycle()


async def _exchange(app: App, peer: _Peer, request: Any, server: tuple[str, int]) -> None:
    """One request through the ASGI ``app``: its scope, its body as asked, its answer."""
    from urllib.parse import unquote

    import h11

    target = request.target.decode("latin-1")
    path, _, query = target.partition("?")
    scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"},
             "http_version": request.http_version.decode("latin-1"),
             "method": request.method.decode("latin-1"), "scheme": "http",
             "path": unquote(path), "raw_path": path.encode("latin-1"),
             "query_string": query.encode("latin-1"), "root_path": "",
             "headers": list(request.headers), "server": server, "client": peer.client}
    ended = False

    async def receive() -> dict[str, Any]:
        nonlocal ended
        if peer.conn.their_state is h11.SEND_BODY:
            event = await peer.next_event()
            if isinstance(event, h11.Data):
                return {"type": "http.request", "body": bytes(event.data), "more_body": True}
            if isinstance(event, h11.EndOfMessage):
                ended = True
                return {"type": "http.request", "body": b"", "more_body": False}
        if peer.conn.their_state is h11.DONE and not ended:
            ended = True  # a request without a body (or its end already read)
            return {"type": "http.request", "body": b"", "more_body": False}
        return {"type": "http.disconnect"}

    async def send(message: Any) -> None:
        if message["type"] == "http.response.start":
            status = int(message["status"])
            # Written with the body's first part (one segment for a small answer).
            peer.writer.write(peer.conn.send(h11.Response(
                status_code=status, headers=list(message.get("headers", ())),
                reason=_reason(status))))
        elif message["type"] == "http.response.body":
            body = message.get("body", b"")
            events: list[Any] = []
            if body and request.method != b"HEAD":
                events.append(h11.Data(data=body))
            if not message.get("more_body", False):
                events.append(h11.EndOfMessage())
            await peer.write(*events)

    await app(scope, receive, send)


def _reason(status: int) -> bytes:
    """The status line's reason phrase (browsers show it in their console)."""
    from http import HTTPStatus

    try:
        return HTTPStatus(status).phrase.encode("ascii")
    except ValueError:
        return b""
