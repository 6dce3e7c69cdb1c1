"""Which addresses a capture asked for over HTTP may reach.

``POST /api/capture`` makes this server dial the gRPC addresses in the request. Only local
clients that pass the Host/Origin checks can ask, but a page they open could still aim the
server at a link-local address or a cloud metadata service (169.254.169.254 and its names),
which answer anyone on the machine with credentials. Those targets are refused unless the
server was started with ``--allow-link-local-capture``.

Names are resolved here once; a name whose resolution fails is left for the capture to
report (it fails to connect). A name that changes its address between this check and gRPC's
own lookup (DNS rebinding) is not caught: run captures of untrusted names from the CLI.
"""

from __future__ import annotations

import ipaddress
import socket

from stepscope.errors import InvalidOptionError
from stepscope.remote.addresses import Worker

# Cloud metadata services by name (GCP, AWS, Azure, Oracle, Alibaba, OpenStack).
METADATA_NAMES = frozenset({
    "metadata", "metadata.google.internal", "metadata.goog", "instance-data",
    "instance-data.ec2.internal", "metadata.azure.internal", "metadata.platformequinix.com",
})
# Their addresses outside 169.254.0.0/16 (which is refused as link-local anyway).
METADATA_ADDRESSES = frozenset({
    ipaddress.ip_address("fd00:ec2::254"), ipaddress.ip_address("100.100.100.200"),
})
ALLOW_FLAG = "--allow-link-local-capture"


def _addresses(host: str) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    try:
        return [ipaddress.ip_address(host)]
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        return []  # the capture itself will say it cannot connect
    out = []
    for info in infos:
        try:
            out.append(ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]))
        except ValueError:
            continue
    return out


def refusal(host: str) -> str | None:
    """Why a capture may not dial ``host`` (a name or address), or None if it may."""
    name = host.lower().rstrip(".")
    if name in METADATA_NAMES:
        return "names a cloud metadata service"
    for address in _addresses(name):
        mapped = getattr(address, "ipv4_mapped", None) or address
        if mapped in METADATA_ADDRESSES:
            return f"is a cloud metadata service's address ({address})"
        if mapped.is_link_local:
            return f"is a link-local address ({address})"
    return None


def check_targets(workers: list[Worker], allow_link_local: bool) -> None:
    """InvalidOptionError (a 400) naming the first worker this server may not dial."""
    if allow_link_local:
        return
    for worker in workers:
        why = refusal(worker.host)
        if why:
            raise InvalidOptionError(
                f"Service address {worker.host_name} {why}; this server does not capture "
                f"from such targets unless started with {ALLOW_FLAG}.")
