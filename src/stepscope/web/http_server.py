"""``stepscope serve``: run the web UI on a logdir, on loopback by default.

The app (``web.app``) is served here by a small HTTP/1.1 server: a thread per connection
(at most ``MAX_CONNECTIONS``) on blocking sockets, each request answered by ``App.respond``
in that thread. uvicorn, then our own server on asyncio's streams with h11 parsing the
messages, did the same; a fresh server spent ~0.1 s of CPU importing and starting uvicorn,
~0.03 s importing asyncio (with ssl and subprocess) and ~0.015 s importing h11, while the
first trace window was being made on the same two cores and one GIL.

What is parsed (RFC 9112), and refused in one line otherwise (400; 431 for a head over
``MAX_HEAD_BYTES``; 501 for a transfer coding other than chunked; 505 for HTTP/2+): a
request line ``METHOD target HTTP/1.x``, header fields ``name: value`` (no folded lines, no
control characters, one Host header with HTTP/1.1), a body framed by one Content-Length or by
``Transfer-Encoding: chunked`` (never both). Keep-alive for HTTP/1.1 unless ``Connection:
close``; a body the app did not read is drained up to ``MAX_HEAD_BYTES`` after the answer,
else the connection ends. Every request still ends in the one
route table (``routes.dispatch``, through the app; the app is ASGI too, for other servers and
the tests); one request at a time per connection, keep-alive, no WebSockets (the UI uses
none).
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import re
import socket
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

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
    from stepscope.web import skim_ahead

    if engine in ("auto", "local", "pool"):  # where the store reads the run itself
        # A big file's skim, for the first trace window: its pass over the file starts now,
        # while the rest (NumPy, the store, the web stack) is imported.
        skim_ahead.start(as_path(logdir), use_cache)
    from stepscope.web.store import RunStore

    # The newest run (the page's first) is read while the rest of the web stack (the API,
    # the app) is imported: the first trace window is then answered about as soon
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


# A request's head (its request line and header fields): the UI's requests are short.
MAX_HEAD_BYTES = 64 * 1024
# An idle keep-alive connection, or a request that stops arriving, is closed after this long.
READ_TIMEOUT_S = 30.0
READ_CHUNK = 64 * 1024
# Connections served at once (a thread each); more wait to be accepted. A page keeps a few
# open; an answer may wait on a run being read or an index being built.
MAX_CONNECTIONS = 64
# A chunk-size line of a chunked body (its size in hex and any extensions).
MAX_CHUNK_LINE = 1024

_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_REQUEST_LINE = re.compile(rb"([!#$%&'*+\-.^_`|~0-9A-Za-z]+) ([\x21-\x7e]+) HTTP/([0-9])\.([0-9])")
_FIELD_VALUE = re.compile(rb"[\t\x20-\x7e\x80-\xff]*")
_LENGTH = re.compile(rb"[0-9]{1,18}")
_CHUNK_SIZE = re.compile(rb"([0-9A-Fa-f]{1,15})[ \t]*(?:;.*)?")


def run_app(app: App, host: str, port: int) -> None:
    """Serve ``app`` on ``host:port`` until interrupted (Ctrl-C)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.create_server((host, port), family=family, backlog=128) as listener, \
            contextlib.suppress(KeyboardInterrupt):
        slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        while True:
            slots.acquire()
            try:
                sock, _ = listener.accept()
            except OSError:  # e.g. out of file descriptors: wait, then accept again
                slots.release()
                time.sleep(0.05)
                continue
            threading.Thread(target=_serve_connection, args=(app, sock, slots), daemon=True,
                             name="stepscope-http").start()


def _serve_connection(app: App, sock: socket.socket, slots: threading.BoundedSemaphore
                      ) -> None:
    """One client connection, until it closes (in a thread of its own)."""
    try:
        sock.settimeout(READ_TIMEOUT_S)
        _connection(app, _Reader(sock))
    except OSError:
        pass  # the client went away, or stopped sending (a timeout): nothing to answer
    except Exception:  # a bug: logged, and this connection closed; the server goes on
        log.exception("stepscope serve: a connection failed")
    finally:
        sock.close()
        slots.release()


class BadRequest(Exception):
    """A request that breaks HTTP/1.1: answered with ``status`` and the connection closed."""

    def __init__(self, status: int = 400) -> None:
        super().__init__(f"Bad request ({status}).")
        self.status = status


class _Reader:
    """The bytes a client sends, read as asked (``READ_TIMEOUT_S`` at most per read)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = bytearray()

    def fill(self) -> bool:
        """Read more; False once the client has closed its side."""
        data = self.sock.recv(READ_CHUNK)
        self.buf += data
        return bool(data)

    def head(self) -> bytes | None:
        """The next request's head (up to its blank line); None when the client closed (or
        sent nothing but blank lines) before one began."""
        while True:
            while self.buf[:2] == b"\r\n" or self.buf[:1] == b"\n":  # blank lines before it
                del self.buf[:2 if self.buf[:1] == b"\r" else 1]
            ends = [(at, len(mark)) for mark in (b"\r\n\r\n", b"\n\n")
                    if (at := self.buf.find(mark)) >= 0]
            if ends:
                at, size = min(ends)
                if at > MAX_HEAD_BYTES:
                    raise BadRequest(431)
                out = bytes(self.buf[:at])
                del self.buf[:at + size]
                return out
            if len(self.buf) > MAX_HEAD_BYTES:
                raise BadRequest(431)
            if not self.fill():
                if self.buf:
                    raise BadRequest(400)  # closed partway through a head
                return None

    def line(self, limit: int) -> bytes:
        """One line (without its end) of at most ``limit`` bytes."""
        while (at := self.buf.find(b"\n")) < 0:
            if len(self.buf) > limit or not self.fill():
                raise BadRequest(400)
        if at > limit:
            raise BadRequest(400)
        out = bytes(self.buf[:at])
        del self.buf[:at + 1]
        return out[:-1] if out.endswith(b"\r") else out

    def some(self, most: int) -> bytes:
        """At least one and at most ``most`` bytes (BadRequest if the client closed)."""
        if not self.buf and not self.fill():
            raise BadRequest(400)
        out = bytes(self.buf[:most])
        del self.buf[:most]
        return out


class _Request:
    """A request's head, parsed, and its body, read as asked (``read``, ``drain``)."""

    def __init__(self, head: bytes, reader: _Reader) -> None:
        lines = [line[:-1] if line.endswith(b"\r") else line for line in head.split(b"\n")]
        start = _REQUEST_LINE.fullmatch(lines[0])
        if start is None:
            raise BadRequest(400)
        if start[3] != b"1":
            raise BadRequest(505)
        self.method = start[1].decode("ascii")
        self.target = start[2].decode("ascii")
        self.fields: list[tuple[str, str]] = []
        for line in lines[1:]:
            name, colon, value = line.partition(b":")
            value = value.strip(b" \t")
            if not colon or not _TOKEN.fullmatch(name) or not _FIELD_VALUE.fullmatch(value):
                raise BadRequest(400)  # a folded line, a space before the colon, a control
            self.fields.append((name.decode("ascii").lower(), value.decode("latin-1")))
        one_one = start[4] != b"0"
        if one_one and len(self.all("host")) != 1:
            raise BadRequest(400)
        connection = {t.strip().lower() for v in self.all("connection") for t in v.split(",")}
        self.keep_alive = one_one and "close" not in connection
        codings = self.all("transfer-encoding")
        lengths = {t.strip() for v in self.all("content-length") for t in v.split(",")}
        if codings:
            if lengths:
                raise BadRequest(400)  # framed twice: which one a proxy believed is unknown
            if [c.strip().lower() for c in ",".join(codings).split(",")] != ["chunked"]:
                raise BadRequest(501)
        elif len(lengths) > 1 or any(not _LENGTH.fullmatch(v.encode()) for v in lengths):
            raise BadRequest(400)
        self.chunked = bool(codings)
        self.left = int(next(iter(lengths))) if lengths else 0  # bytes of the body not read
        self.ended = not self.chunked and self.left == 0
        self.reader = reader

    def all(self, name: str) -> list[str]:
        """The values of header field ``name`` (lower case)."""
        return [v for n, v in self.fields if n == name]

    def headers(self) -> dict[str, str]:
        """The header fields by lower-case name (the first of a repeated one)."""
        out: dict[str, str] = {}
        for name, value in self.fields:
            out.setdefault(name, value)
        return out

    def piece(self) -> bytes:
        """The body's next bytes (b"" once it has all been read)."""
        reader = self.reader
        if self.ended:
            return b""
        if self.left == 0:  # chunked: the next chunk's size line
            size = _CHUNK_SIZE.fullmatch(reader.line(MAX_CHUNK_LINE))
            if size is None:
                raise BadRequest(400)
            self.left = int(size[1], 16)
            if self.left == 0:  # the last chunk: trailer fields up to a blank line
                budget = MAX_HEAD_BYTES
                while line := reader.line(budget):
                    budget -= len(line) + 2
                self.ended = True
                return b""
        out = reader.some(min(self.left, READ_CHUNK))
        self.left -= len(out)
        if self.left == 0:
            if self.chunked and reader.line(2) != b"":
                raise BadRequest(400)  # a chunk longer than its size said
            self.ended = not self.chunked
        return out

    def read(self, limit: int) -> bytes | None:
        """The whole body, or None once it grows past ``limit`` bytes (read no further)."""
        parts: list[bytes] = []
        size = 0
        while piece := self.piece():
            size += len(piece)
            if size > limit:
                return None
            parts.append(piece)
        return b"".join(parts)

    def drain(self, most: int) -> bool:
        """Read and drop what is left of the body, ``most`` bytes at most; whether it
        ended."""
        while not self.ended and most >= 0:
            most -= len(self.piece())
        return self.ended


def _connection(app: App, reader: _Reader) -> None:
    """One client connection's requests, one after another, each answered by ``app``."""
    while True:
        try:
            head = reader.head()
            if head is None:
                return
            request = _Request(head, reader)
        except BadRequest as bad:
            _refuse(reader.sock, bad.status)
            return
        if not _exchange(app, reader.sock, request):
            return


def _exchange(app: App, sock: socket.socket, request: _Request) -> bool:
    """One request answered by ``app`` (its body read as the app asks, what is left of it
    drained after); whether the connection goes on."""
    from urllib.parse import unquote

    from stepscope.web.app import reply_headers

    broken = False

    def read_body(limit: int) -> bytes | None:
        nonlocal broken
        try:
            return request.read(limit)
        except BadRequest:  # a malformed chunk: answered as an empty body, then closed
            broken = True
            return b""

    path, _, query = request.target.partition("?")
    reply = app.respond(request.method, unquote(path), query, request.headers(), read_body)
    keep = request.keep_alive and not broken
    headers = reply_headers(reply)
    if not all(_TOKEN.fullmatch(n) and _FIELD_VALUE.fullmatch(v) for n, v in headers):
        log.error("stepscope serve: %s %s: a reply header holds a control character",
                  request.method, path[:200])
        _refuse(sock, 500)
        return False
    _send(sock, reply.status, headers, b"" if request.method == "HEAD" else reply.body, keep)
    try:
        return keep and request.drain(MAX_HEAD_BYTES)
    except BadRequest:
        return False


def _send(sock: socket.socket, status: int, headers: list[tuple[bytes, bytes]], body: bytes,
          keep: bool) -> None:
    """Write one response (``Connection: close`` unless ``keep``)."""
    lines = [b"HTTP/1.1 %d %s" % (status, _reason(status)),
             *(name + b": " + value for name, value in headers)]
    if not keep:
        lines.append(b"connection: close")
    sock.sendall(b"\r\n".join(lines) + b"\r\n\r\n" + body)


def _refuse(sock: socket.socket, status: int) -> None:
    """Answer a request that cannot be read with ``status`` in one line, and let the client
    finish sending before the connection closes (closed with unread bytes, the socket would
    be reset, and the client might lose the answer)."""
    body = f'{{"error": "Bad request ({status})."}}'.encode()
    _send(sock, status, [(b"content-type", b"application/json"),
                         (b"content-length", str(len(body)).encode())], body, keep=False)
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_WR)
        sock.settimeout(1.0)
        left = 1 << 20
        while left > 0 and (data := sock.recv(READ_CHUNK)):
            left -= len(data)


def _reason(status: int) -> bytes:
    """The status line's reason phrase (browsers show it in their console)."""
    from http import HTTPStatus

    try:
        return HTTPStatus(status).phrase.encode("ascii")
    except ValueError:
        return b""
