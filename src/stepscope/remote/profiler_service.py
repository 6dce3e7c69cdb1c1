"""The profiler server: TensorFlow's ``ProfilerService`` served from inside a training process.

A ``Profile`` request runs a stepscope capture for the requested duration in the server's own
thread (the training loop pays only the recording cost), then answers with the ``XSpace``
and/or writes it to ``<repository_root>/<session_id>/<host>.xplane.pb``, as TensorFlow's
server does. One capture at a time; a second gets a "busy" error. A ``GetSnapshot`` request
answers at once with the flight recorder's window (``capture.flight``), where one runs.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import threading
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass, field
from time import time_ns
from typing import Any, NoReturn

import grpc

from stepscope.capture import python_tracer, session
from stepscope.errors import (
    InvalidOptionError,
    ProfilerAlreadyRunningError,
    ProfilerNotRunningError,
    ProfilerServerError,
)
from stepscope.formats import xplane_builder as xb
from stepscope.model import logdir as layout
from stepscope.remote import limits, protocol
from stepscope.remote.plan import BadRequest, CapturePlan, check_out_path, plan_capture

log = logging.getLogger(__name__)

DEFAULT_HOST = "127.0.0.1"
# Seconds a stopping server waits for a capture in flight to send what it recorded.
_STOP_GRACE_S = 5.0


class _Refused(Exception):
    """A request the server answers with a gRPC error status."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass
class _Capture:
    """The capture in flight: its session id and the event that ends it early."""

    session_id: str
    done: threading.Event = field(default_factory=threading.Event)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class ProfilerServer:
    """A gRPC server speaking ``tensorflow.ProfilerService`` for this process."""

    def __init__(self, port: int, host: str = DEFAULT_HOST, token: str | None = None) -> None:
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port < 65536:
            raise InvalidOptionError(f"port must be an integer in 0..65535, got {port!r}.")
        if not host:
            raise InvalidOptionError("host is empty; pass the address to listen on, e.g. "
                                     "127.0.0.1.")
        if token is not None and not (isinstance(token, str) and token):
            raise InvalidOptionError("token must be a non-empty string, or None for no token.")
        self.host = host
        self.port = port
        self._token = token
        self._busy = threading.Lock()
        self._capture: _Capture | None = None
        self._stopping = threading.Event()
        self._grpc: Any = None

    @property
    def address(self) -> str:
        """``host:port`` as bound (IPv6 hosts in brackets)."""
        host = f"[{self.host}]" if ":" in self.host and not self.host.startswith("[") else self.host
        return f"{host}:{self.port}"

    def start(self) -> int:
        """Listen and serve; return the bound port (useful when ``port`` was 0)."""
        self._stopping.clear()
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=4,
                                       thread_name_prefix=python_tracer.PROFILER_SERVER_POOL),
            handlers=[self._handlers()],
            maximum_concurrent_rpcs=8,
            options=[
                # gRPC shares ports between processes by default on Linux: two servers on one
                # port would split the requests between them.
                ("grpc.so_reuseport", 0),
                ("grpc.max_receive_message_length", limits.MAX_REQUEST_BYTES),
                ("grpc.max_send_message_length", -1),
            ],
        )
        try:
            bound = int(server.add_insecure_port(self.address))
        except RuntimeError:  # gRPC's own message adds nothing but a debugging hint
            bound = 0
        if not bound:
            server.stop(None)
            raise ProfilerServerError(
                f"Cannot listen on {self.address}: the port is in use or the host is not one "
                "of this machine's addresses; pick another.")
        self.port = bound
        if not _is_loopback(self.host):
            log.warning("stepscope profiler server listens on %s: anyone who can reach this port "
                        "can profile this process%s.", self.address,
                        "" if self._token else " (pass token= to require a shared token)")
        before = set(threading.enumerate())
        server.start()
        # gRPC's polling thread is the server's own too: the Python tracer leaves it out.
        for thread in set(threading.enumerate()) - before:
            if thread.daemon:
                python_tracer.leave_out(thread)
        self._grpc = server
        log.info("stepscope profiler server listening on %s", self.address)
        return bound

    def stop(self) -> None:
        """End any capture in flight (it sends what it recorded), stop serving, free the port."""
        self._stopping.set()
        capture = self._capture
        if capture is not None:
            capture.done.set()
        if self._grpc is not None:
            self._grpc.stop(_STOP_GRACE_S).wait()
            self._grpc = None

    def _handlers(self) -> grpc.GenericRpcHandler:
        def serialize(message: Any) -> bytes:
            return message.SerializeToString()  # type: ignore[no-any-return]

        def unary(behaviour: Callable[[Any, grpc.ServicerContext], Any],
                  parse: Callable[[bytes], Any] | None) -> grpc.RpcMethodHandler:
            return grpc.unary_unary_rpc_method_handler(self._guarded(behaviour),
                                                       request_deserializer=parse,
                                                       response_serializer=serialize)

        methods = {
            "Profile": unary(self._profile, protocol.ProfileRequest.FromString),
            "Terminate": unary(self._terminate, protocol.TerminateRequest.FromString),
            "Monitor": unary(self._unserved("Monitor"), protocol.MonitorRequest.FromString),
            "GetSnapshot": unary(self._snapshot, protocol.GetSnapshotRequest.FromString),
        }
        for name in protocol.UNSERVED_METHODS:
            methods[name] = unary(self._unserved(name), None)
        return grpc.method_handlers_generic_handler(protocol.SERVICE, methods)

    def _guarded(self, behaviour: Callable[[Any, grpc.ServicerContext], Any]
                 ) -> Callable[[Any, grpc.ServicerContext], Any]:
        """``behaviour`` behind the token check, with refusals turned into gRPC statuses."""
        def handler(request: Any, context: grpc.ServicerContext) -> Any:
            try:
                self._authorize(context)
                return behaviour(request, context)
            except _Refused as refusal:
                log.info("stepscope profiler server refused a request: %s", refusal.message)
                _abort(context, refusal.code, refusal.message)
        return handler

    def _authorize(self, context: grpc.ServicerContext) -> None:
        if self._token is None:
            return
        expected = f"Bearer {self._token}".encode()
        for key, value in context.invocation_metadata():
            if key == limits.TOKEN_METADATA_KEY:
                given = value.encode() if isinstance(value, str) else bytes(value)
                if hmac.compare_digest(given, expected):
                    return
                raise _Refused(grpc.StatusCode.UNAUTHENTICATED,
                               "The token does not match this profiler server's; pass the "
                               "server's token to the client.")
        raise _Refused(grpc.StatusCode.UNAUTHENTICATED,
                       "This profiler server requires a token; pass it to the client (token= or "
                       "--token).")

    def _profile(self, request: Any, context: grpc.ServicerContext) -> Any:
        try:
            plan = plan_capture(request, time_ns())
        except BadRequest as err:
            raise _Refused(grpc.StatusCode.INVALID_ARGUMENT, str(err)) from err
        if not self._busy.acquire(blocking=False):
            raise _Refused(grpc.StatusCode.RESOURCE_EXHAUSTED,
                           "This worker is busy with another capture; try again when it ends.")
        try:
            capture = _Capture(str(request.session_id))
            self._capture = capture
            # Ends the capture early when the caller goes away (cancelled, deadline, exited).
            context.add_callback(capture.done.set)
            if self._stopping.is_set():
                capture.done.set()
            captured = self._run(plan, capture)
        finally:
            self._capture = None
            self._busy.release()
        return self._answer(plan, captured)

    def _run(self, plan: CapturePlan, capture: _Capture) -> session.Captured:
        """Wait for the planned start, record for the planned duration, return the space."""
        wait_s = (plan.start_ns - time_ns()) / 1e9
        if wait_s > 0 and capture.done.wait(wait_s):
            raise _Refused(grpc.StatusCode.CANCELLED,
                           "The capture was cancelled before it started.")
        if session.is_running():
            raise _Refused(grpc.StatusCode.FAILED_PRECONDITION,
                           "This process is already profiling itself (stepscope.start); try "
                           "again once its session has stopped.")
        try:
            session.start_capture(plan.options)
        except ProfilerAlreadyRunningError as err:
            raise _Refused(grpc.StatusCode.FAILED_PRECONDITION,
                           "This process is already profiling itself (stepscope.start); try "
                           "again once its session has stopped.") from err
        log.info("stepscope remote capture started for %d ms", plan.duration_ms)
        try:
            capture.done.wait(plan.duration_ms / 1000.0)
        finally:
            captured = session.stop_capture(layout.local_hostname())
        log.info("stepscope remote capture recorded %d events", captured.recorded)
        return captured

    def _answer(self, plan: CapturePlan, captured: session.Captured) -> Any:
        data = captured.data
        if plan.out_path is not None:
            try:
                check_out_path(plan.out_path)  # again: the capture took a while
            except BadRequest as err:
                raise _Refused(grpc.StatusCode.FAILED_PRECONDITION, str(err)) from err
            try:
                xb.write_atomic(plan.out_path, data)
            except (OSError, ValueError) as err:
                raise _Refused(grpc.StatusCode.FAILED_PRECONDITION,
                               f"Cannot write the profile to {plan.out_path} on the worker "
                               f"({getattr(err, 'strerror', None) or err}).") from err
            log.info("stepscope remote capture written to %s", plan.out_path)
        response = protocol.ProfileResponse(empty_trace=captured.recorded == 0)
        if plan.emit:
            response.xspace = data
        return response

    def _snapshot(self, request: Any, context: grpc.ServicerContext) -> Any:
        """The flight recorder's window as it stands, without planning a capture."""
        from stepscope.capture import flight

        recorder = flight.active()
        if recorder is None or not recorder.running:
            raise _Refused(grpc.StatusCode.FAILED_PRECONDITION,
                           "This process runs no flight recorder, so it has no recent past to "
                           "send; start one (stepscope.flight_recorder) or capture with "
                           "Profile.")
        try:
            data = recorder.snapshot()
        except ProfilerNotRunningError as err:  # it stopped meanwhile
            raise _Refused(grpc.StatusCode.FAILED_PRECONDITION, str(err)) from err
        log.info("stepscope profiler server sent the flight recorder's window (%d bytes)",
                 len(data))
        return protocol.ProfileResponse(xspace=data, empty_trace=False)

    def _terminate(self, request: Any, context: grpc.ServicerContext) -> Any:
        capture = self._capture
        if capture is not None and request.session_id in ("", capture.session_id):
            capture.done.set()
        return protocol.TerminateResponse()

    @staticmethod
    def _unserved(name: str) -> Callable[[Any, grpc.ServicerContext], Any]:
        def refuse(request: Any, context: grpc.ServicerContext) -> NoReturn:
            raise _Refused(grpc.StatusCode.UNIMPLEMENTED,
                           f"stepscope's profiler server does not serve {name}; capture a "
                           "profile with Profile (stepscope capture) instead.")
        return refuse


def _abort(context: grpc.ServicerContext, code: grpc.StatusCode, message: str) -> NoReturn:
    context.abort(code, message)
    raise AssertionError("grpc's abort returned")  # abort always raises


_server: ProfilerServer | None = None
_lock = threading.Lock()


def start(port: int, host: str = DEFAULT_HOST, token: str | None = None) -> int:
    """Start this process's profiler server on ``host:port``; return the bound port.

    Binds 127.0.0.1 unless ``host`` says otherwise (``"0.0.0.0"`` serves every interface and
    logs a warning). With ``token``, callers must present it (``client.trace(token=...)``).
    """
    global _server
    with _lock:
        if _server is not None:
            raise ProfilerServerError(
                f"A profiler server is already running on {_server.address}; call "
                "stepscope.server.stop() before starting another.")
        server = ProfilerServer(port, host, token)
        bound = server.start()
        _server = server
        return bound


def stop() -> None:
    """Stop this process's profiler server and free its port (nothing to do if none runs)."""
    global _server
    with _lock:
        server, _server = _server, None
    if server is not None:
        server.stop()


def running_address() -> str | None:
    """``host:port`` of this process's profiler server, or None when none runs."""
    server = _server
    return server.address if server is not None else None
