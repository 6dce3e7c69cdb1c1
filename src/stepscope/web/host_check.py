"""Which ``Host`` headers the web server answers: the names it was started for.

A web page on another site can make its own name resolve to 127.0.0.1 (DNS rebinding); the
browser then treats this server as that page's origin and lets the page read profiles and
start captures. The browser still sends the page's name in the ``Host`` header, so answering
only the names this server was started for (loopback, ``--host``, ``--allow-host``) closes
that door. An IP address in ``Host`` cannot be rebound (a page's origin would be that address
itself), so a server listening on every interface also answers any address of this machine.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Iterable

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")
ANY_HOST = "*"  # --allow-host '*': answer every Host (behind a proxy that checks it)
_WILDCARDS = {"0.0.0.0", "::", ""}
_LABEL = r"[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?"
_NAME = re.compile(rf"{_LABEL}(\.{_LABEL})*")
_SHOWN = 100  # characters of a refused header quoted back


def host_name_of(value: str) -> str | None:
    """The host a ``Host`` header or a host argument names: lower case, without port, IPv6
    brackets or a final dot (IP addresses in their usual spelling); None when it names none."""
    value = value.strip().lower()
    try:
        return ipaddress.ip_address(value).compressed  # a bare address (IPv6: no brackets)
    except ValueError:
        pass
    if value.startswith("["):
        name, bracket, port = value[1:].partition("]")
        if not bracket or (port and not re.fullmatch(r":\d{1,5}", port)):
            return None
        try:
            return ipaddress.IPv6Address(name).compressed
        except ValueError:
            return None
    name, colon, port = value.partition(":")
    if colon and not re.fullmatch(r"\d{1,5}", port):
        return None
    name = name[:-1] if name.endswith(".") else name
    try:
        return ipaddress.IPv4Address(name).compressed
    except ValueError:
        pass
    return name if len(name) <= 253 and _NAME.fullmatch(name) else None


class HostCheck:
    """The host names one server answers to."""

    def __init__(self, listen_host: str = "127.0.0.1", allow: Iterable[str] = ()) -> None:
        allow = list(allow)
        self.any_host = ANY_HOST in allow
        listen = listen_host.strip().strip("[]")
        # Listening on every interface: people reach it by any of this machine's addresses
        # (accepted as addresses, see the module's note) or by its name.
        self.any_address = listen in _WILDCARDS
        names = [*LOOPBACK_NAMES, listen_host, *(a for a in allow if a != ANY_HOST)]
        if self.any_address:
            names.append(socket.gethostname())
        self.names = frozenset(n for n in map(host_name_of, names) if n)

    def refusal(self, header: str | None) -> tuple[int, str] | None:
        """None when a request with this ``Host`` header may be answered, else its (status,
        message)."""
        if self.any_host:
            return None
        if not header:
            return 400, "The request has no Host header."
        name = host_name_of(header)
        shown = header[:_SHOWN] + ("…" if len(header) > _SHOWN else "")
        if name is None:
            return 400, f"The Host header {shown!r} does not name a host."
        if name in self.names:
            return None
        if self.any_address:
            try:
                ipaddress.ip_address(name)
                return None
            except ValueError:
                pass
        return 403, (f"This server does not answer to host {name[:_SHOWN]!r} (it answers to "
                     f"{', '.join(sorted(self.names))}); start it with --allow-host "
                     f"{name[:_SHOWN]} to reach it by that name.")
