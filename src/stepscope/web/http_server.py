"""``stepscope serve``: run the web UI on a logdir with uvicorn, on loopback by default."""

from __future__ import annotations

import ipaddress
import logging
import socket
from collections.abc import Sequence
from pathlib import Path

from stepscope.errors import StepscopeError
from stepscope.web.host_check import ANY_HOST, HostCheck, host_name_of

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
    # uvicorn) is imported: the first trace window is then answered about as soon
    # as the server listens.
    store = RunStore(use_cache=use_cache, engine=engine)
    store.preload(as_path(logdir))
    import uvicorn

    from stepscope.web.api import Api
    from stepscope.web.app import create_app

    api = Api(logdir, allow_link_local_capture=allow_link_local_capture, store=store)
    app = create_app(logdir, hosts=hosts, api=api)
    shown = f"[{host}]" if ":" in host else host
    if not quiet:
        print(f"stepscope: serving {logdir} at http://{shown}:{port}/ (Ctrl-C to stop)",
              flush=True)
    # h11 and no WebSockets named outright: uvicorn would otherwise try to import httptools,
    # websockets and wsproto at start-up (the UI uses none of them).
    try:
        uvicorn.run(app, host=host, port=port, log_level="warning", http="h11", ws="none",
                    interface="asgi3")
    finally:
        store.close()  # a load or index build still running saves nothing half-done
