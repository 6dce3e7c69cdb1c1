"""Service addresses: ``grpc://host:port``, ``host:port`` or a bare host name or IP address
(the profiler server's default port, 6009, as in TensorFlow's guides), one or comma-separated;
and Cloud TPU names, resolved to their workers as TensorBoard's capture dialog resolves them.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from stepscope.errors import InvalidOptionError
from stepscope.model import logdir as layout

_SCHEME = "grpc://"
# The port the TensorFlow Profiler's guides start the profiler server on
# (tf.profiler.experimental.server.start(6009)), and TensorBoard's capture dialog suggests.
DEFAULT_PORT = 6009
# A Cloud TPU's workers serve the profiler on 8466; the TPU API gives them as <ip>:8470.
TPU_GRPC_PORT = 8470
TPU_PROFILER_PORT = 8466
# Cloud TPU node names: lower-case letters, digits and hyphens, a letter first.
_TPU_NAME = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")
_LABEL = r"[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
_HOST_NAME = re.compile(rf"{_LABEL}(\.{_LABEL})*\.?")


@dataclass(frozen=True)
class Worker:
    """One profiler server to capture: its host and port."""

    host: str
    port: int

    @property
    def target(self) -> str:
        """The address gRPC dials (IPv6 hosts in brackets)."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @property
    def host_name(self) -> str:
        """``host:port``, the name TensorFlow's client gives the worker in its request."""
        return f"{self.host}:{self.port}"

    @property
    def name(self) -> str:
        """The worker's name in a run: its profile is ``<name>.xplane.pb`` (``host_port``)."""
        return layout.host_file_name(self.host_name).removesuffix(".xplane.pb")

    @property
    def file_name(self) -> str:
        """The worker's profile file name in a run directory."""
        return layout.host_file_name(self.host_name)


def parse_one(address: str) -> Worker:
    """Parse one ``grpc://host:port``, ``host:port`` or bare host (port 6009) address."""
    text = address.strip()
    if text.lower().startswith(_SCHEME):
        text = text[len(_SCHEME):]
    elif "://" in text:
        raise InvalidOptionError(
            f"Service address {_shown(address)} has an unknown scheme; write grpc://host:port.")
    text = text.rstrip("/")
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else ""
        if not sep:
            port_text = ""
        elif not rest:
            port_text = str(DEFAULT_PORT)
    elif ":" not in text:
        host, port_text = text, str(DEFAULT_PORT)
    else:
        host, _, port_text = text.rpartition(":")
    if (not host or not re.fullmatch(r"[0-9]{1,5}", port_text)
            or not 0 < int(port_text) < 65536):
        raise InvalidOptionError(
            f"Service address {_shown(address)} is not host:port; write e.g. "
            "grpc://127.0.0.1:6009 (a bare host name means port 6009).")
    if not _is_host(host) or (text.startswith("[") and ":" not in host):
        raise InvalidOptionError(
            f"Service address {_shown(address)} does not name a host (a host name, an IPv4 "
            "address, or an IPv6 address in brackets).")
    return Worker(host, int(port_text))


def _is_host(host: str) -> bool:
    """Whether ``host`` is an IP address or a DNS host name (what gRPC can dial)."""
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return len(host) <= 253 and _HOST_NAME.fullmatch(host) is not None


def _shown(address: str) -> str:
    """An address quoted for an error message, cut short if long."""
    return repr(address[:80]) + ("…" if len(address) > 80 else "")


def parse(addresses: str | list[str] | tuple[str, ...]) -> list[Worker]:
    """Parse one address, a comma-separated list, or a sequence of them (no duplicates)."""
    parts = [addresses] if isinstance(addresses, str) else list(addresses)
    items = [piece for part in parts for piece in part.split(",") if piece.strip()]
    if not items:
        raise InvalidOptionError(
            "No service address given; pass grpc://host:port (comma-separated for several).")
    workers: list[Worker] = []
    for item in items:
        worker = parse_one(item)
        if any(w.name == worker.name for w in workers):
            raise InvalidOptionError(f"Service address {_shown(item.strip())} is listed twice.")
        workers.append(worker)
    return workers


def resolve_tpu(name: str) -> list[Worker]:
    """The profiler servers of the Cloud TPU ``name``: its workers, on port 8466.

    As TensorBoard does, through TensorFlow's TPU cluster resolver, which asks the Cloud TPU
    API (from a VM in the TPU's project and zone).
    """
    text = name.strip().removeprefix(_SCHEME)
    if not _TPU_NAME.fullmatch(text):
        raise InvalidOptionError(
            f"{_shown(name)} is not a Cloud TPU name (lower-case letters, digits and "
            "hyphens, a letter first, at most 63); pass a TPU name, or host:port without "
            "--tpu.")
    try:
        import tensorflow as tf

        resolver_class = tf.distribute.cluster_resolver.TPUClusterResolver
    except (ImportError, AttributeError) as err:
        raise InvalidOptionError(
            f"Resolving the TPU name {_shown(text)} needs TensorFlow's TPU cluster resolver: "
            f"pip install tensorflow ({err}). Or pass the TPU workers' host:port.") from None
    try:
        spec = resolver_class(tpu=text).cluster_spec()
        found = [spec.task_address("worker", i) for i in spec.task_indices("worker")]
    except Exception as err:  # the resolver's errors: no API access, no such TPU, no auth
        raise InvalidOptionError(
            f"Could not resolve the TPU name {_shown(text)} ({type(err).__name__}: "
            f"{str(err)[:200]}). TPU names are resolved through the Cloud TPU API, from a VM "
            "in the TPU's project and zone; elsewhere pass its workers' host:port.") from None
    workers = []
    for address in found:
        worker = parse_one(str(address))
        port = TPU_PROFILER_PORT if worker.port == TPU_GRPC_PORT else worker.port
        workers.append(Worker(worker.host, port))
    if not workers:
        raise InvalidOptionError(f"The TPU {_shown(text)} has no workers to capture.")
    return workers
