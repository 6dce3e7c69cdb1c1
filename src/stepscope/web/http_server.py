"""``stepscope serve``: run the web UI on a logdir, on loopback by default.

The app (``web.app``) is served here by a small HTTP/1.1 server: a thread per connection
(at most ``MAX_CONNECTIONS``) on blocking sockets, with h11 parsing and writing the messages,
each request answered by ``App.respond`` in that thread. uvicorn, then our own server on
asyncio's streams, did the same; a fresh server spent ~0.1 s of CPU importing and starting
uvicorn, and ~0.03 s importing asyncio (with ssl and subprocess), while the first trace
window was being made on the same two cores and one GIL. Every request still ends in the one
route table (``routes.dispatch``, through the app; the app is ASGI too, for other servers and
the tests); one request at a time per connection, keep-alive, no WebSockets (the UI uses
none).
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import socket
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stepscope.errors import StepscopeError
from stepscope.web.host_check import ANY_HOST, HostCheck, host_name_of

if TYPE_CHECKING:
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
    # h11) is imported: the first trace window is then answered about as soon
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
# Connections served at once (a thread each); more wait to be accepted. A page keeps a few
# open; an answer may wait on a run being read or an index being built.
MAX_CONNECTIONS = 64


def run_app(app: App, host: str, port: int) -> None:
    """Serve ``app`` on ``host:port`` until interrupted (Ctrl-C)."""
    import h11  # noqa: F401  (here, beside the newest run's decode: not by the first request)

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.create_server((host, port), family=family, backlog=128) as listener, \
            contextlib.suppress(KeyboardInterrupt):
        slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        while True:
            slots.acquire()
            try:
                sock, peer = listener.accept()
            except OSError:  # e.g. out of file descriptors: wait, then accept again
                slots.release()
                time.sleep(0.05)
                continue
            threading.Thread(target=_serve_connection,
                             args=(app, sock, peer, (host, port), slots), daemon=True,
                             name="stepscope-http").start()


def _serve_connection(app: App, sock: socket.socket, peer: Any, server: tuple[str, int],
                      slots: threading.BoundedSemaphore) -> None:
    """One client connection, until it closes (in a thread of its own)."""
    try:
        sock.settimeout(READ_TIMEOUT_S)
        _connection(app, _Peer(sock, peer), server)
    except OSError:
        pass  # the client went away, or stopped sending (a timeout): nothing to answer
    except Exception:  # a bug: logged, and this connection closed; the server goes on
        log.exception("stepscope serve: a connection failed")
    finally:
        sock.close()
        slots.release()


class _Peer:
    """One client connection: h11's state of it over a blocking socket."""

    def __init__(self, sock: socket.socket, peer: Any) -> None:
        import h11

        self.sock = sock
        self.conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
        self.client = (str(peer[0]), int(peer[1])) if isinstance(peer, tuple) else None

    def next_event(self) -> Any:
        """The next h11 event, reading as needed (``READ_TIMEOUT_S`` at most per read)."""
        import h11

        while True:
            event = self.conn.next_event()
            if event is not h11.NEED_DATA:
                return event
            self.conn.receive_data(self.sock.recv(READ_CHUNK))  # b"": the client closed

    def write(self, *events: Any) -> None:
        self.sock.sendall(b"".join(self.conn.send(event) or b"" for event in events))


def _connection(app: App, peer: _Peer, server: tuple[str, int]) -> None:
    """One client connection's requests, one after another, each answered by ``app``."""
    import h11

    while True:
        try:
            request = peer.next_event()
        except h11.RemoteProtocolError as err:
            if peer.conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                status = err.error_status_hint
                body = f'{{"error": "Bad request ({status})."}}'.encode()
                headers = [("content-type", "application/json"),
                           ("content-length", str(len(body))), ("connection", "close")]
                peer.write(
                    h11.Response(status_code=status, reason=_reason(status), headers=headers),
                    h11.Data(data=body), h11.EndOfMessage())
            return
        if not isinstance(request, h11.Request):
            return  # closed (or paused on a protocol switch the server never agrees to)
        _exchange(app, peer, request)
        # The end of the request (h11 reports it apart, even without a body), and what the
        # app did not read of a small body; a larger one ends the connection instead.
        left = MAX_HEAD_BYTES
        while peer.conn.their_state is h11.SEND_BODY and left >= 0:
            event = peer.next_event()
            left -= len(event.data) if isinstance(event, h11.Data) else 0
        if peer.conn.our_state is not h11.DONE or peer.conn.their_state is not h11.DONE:
            return  # a body left unread, or an answer cut short: the connection ends
        peer.conn.start_next_cycle()


def _exchange(app: App, peer: _Peer, request: Any) -> None:
    """One request answered by ``app``: its body read as the app asks, its reply written."""
    from urllib.parse import unquote

    import h11

    from stepscope.web.app import reply_headers

    target = request.target.decode("latin-1")
    path, _, query = target.partition("?")
    headers: dict[str, str] = {}
    for name, value in request.headers:  # h11 gives names in lower case
        headers.setdefault(name.decode("latin-1"), value.decode("latin-1"))

    def read_body(limit: int) -> bytes | None:
        """The request's body, or None once it grows past ``limit`` bytes (read no
        further)."""
        chunks: list[bytes] = []
        size = 0
        while peer.conn.their_state is h11.SEND_BODY:
            event = peer.next_event()
            if not isinstance(event, h11.Data):
                break  # its end
            size += len(event.data)
            if size > limit:
                return None
            chunks.append(bytes(event.data))
        return b"".join(chunks)

    method = request.method.decode("latin-1")
    reply = app.respond(method, unquote(path), query, headers, read_body)
    events: list[Any] = [h11.Response(status_code=reply.status, headers=reply_headers(reply),
                                      reason=_reason(reply.status))]
    if reply.body and method != "HEAD":
        events.append(h11.Data(data=reply.body))
    events.append(h11.EndOfMessage())
    peer.write(*events)


def _reason(status: int) -> bytes:
    """The status line's reason phrase (browsers show it in their console)."""
    from http import HTTPStatus

    try:
        return HTTPStatus(status).phrase.encode("ascii")
    except ValueError:
        return b""
