"""The profiler client: capture one or many running workers into one run directory.

Every worker is asked over the same wall-clock window (one shared start time), each from its
own thread, with retries and back-off; each worker's profile is written as soon as it arrives
(atomically), so a worker that is down or dies mid-capture costs only its own file. Works with
stepscope's server and with TensorFlow's (``tf.profiler.experimental.server.start``).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from time import monotonic, sleep, time_ns
from typing import Any

import grpc

from stepscope.capture import python_tracer
from stepscope.capture.options import ProfilerOptions
from stepscope.capture.session import check_writable
from stepscope.errors import CaptureError, InvalidOptionError, LogdirError
from stepscope.formats import xplane_builder as xb
from stepscope.formats.xplane_proto import XSpace
from stepscope.model import logdir as layout
from stepscope.model.locations import as_path, is_remote
from stepscope.remote import addresses, limits, protocol

# Lead time of the shared start, so every worker has the request before the window opens.
_START_LEAD_MS = 100
# Time a worker gets, past the window, to build and send its profile.
_ANSWER_SLACK_S = 30.0
_BACKOFF_FIRST_S = 0.5
_BACKOFF_MAX_S = 8.0
# Failures that can pass (the worker is starting, restarting, or recorded nothing yet).
_RETRYABLE = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED}
# How gRPC words an UNAVAILABLE that happened before any connection was made.
_NOT_CONNECTED = ("failed to connect", "connection refused", "errors resolving",
                  "dns resolution failed", "name resolution")


@dataclass(frozen=True)
class WorkerProgress:
    """One step of one worker's capture, for progress displays.

    ``state`` is ``capturing`` (an attempt began), ``retrying`` (it failed, another follows),
    ``done`` or ``failed``; ``detail`` says why or how many events.
    """

    worker: str
    state: str
    attempt: int
    detail: str = ""


@dataclass(frozen=True)
class WorkerResult:
    """How one worker's capture ended."""

    worker: str
    address: str
    ok: bool
    path: Path | None = None
    events: int = 0
    attempts: int = 0
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The result as plain JSON-ready data."""
        data = asdict(self)
        data["path"] = str(self.path) if self.path is not None else None
        return data


@dataclass(frozen=True)
class CaptureResult:
    """A capture of one or more workers into ``run_dir`` (removed again if none succeeded)."""

    run_dir: Path
    duration_ms: int
    workers: list[WorkerResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when every worker's profile was written."""
        return all(w.ok for w in self.workers)

    @property
    def succeeded(self) -> list[WorkerResult]:
        """The workers whose profile was written."""
        return [w for w in self.workers if w.ok]

    @property
    def failed(self) -> list[WorkerResult]:
        """The workers that gave no profile."""
        return [w for w in self.workers if not w.ok]

    def to_dict(self) -> dict[str, Any]:
        """The result as plain JSON-ready data."""
        return {"run_dir": str(self.run_dir), "run": self.run_dir.name,
                "duration_ms": self.duration_ms, "ok": self.ok,
                "workers": [w.to_dict() for w in self.workers]}


class _Failure(Exception):
    """One failed attempt: why, and whether another attempt could do better."""

    def __init__(self, reason: str, retryable: bool) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retryable = retryable


@dataclass(frozen=True)
class _Job:
    """What every worker thread shares: the request's fixed parts and the time limits."""

    logdir: Path
    run_dir: Path
    duration_ms: int
    options: ProfilerOptions
    attempts: int
    metadata: tuple[tuple[str, str], ...]
    first_start_ns: int
    deadline: float  # monotonic seconds
    progress: Callable[[WorkerProgress], None] | None


def trace(service_addr: str | Sequence[str], logdir: str | os.PathLike[str], duration_ms: int,
          options: ProfilerOptions | None = None, num_tracing_attempts: int = 3,
          token: str | None = None, *, deadline_s: float | None = None,
          progress: Callable[[WorkerProgress], None] | None = None) -> CaptureResult:
    """Capture ``duration_ms`` of every worker in ``service_addr`` into a new run under ``logdir``.

    ``service_addr`` is ``grpc://host:port`` (or ``host:port``), comma-separated or a list for
    several workers. Raises ``CaptureError`` only when no worker gave a profile; otherwise the
    result says which failed and why. ``progress`` is called from the workers' threads.
    """
    workers = addresses.parse(service_addr if isinstance(service_addr, str)
                              else list(service_addr))
    check_arguments(duration_ms, options, num_tracing_attempts, token, deadline_s)
    options = options or ProfilerOptions()
    if not str(logdir):
        raise InvalidOptionError("logdir is empty; pass the directory to write profiles into.")
    root = as_path(logdir)
    check_writable(root)
    run_dir = _reserve_run_dir(root)
    delay_ms = options.delay_ms or 0
    if deadline_s is None:
        # Every attempt may use its full window and answer time, plus the waits between them.
        per_try = (_START_LEAD_MS + delay_ms + duration_ms) / 1000 + _ANSWER_SLACK_S
        deadline_s = num_tracing_attempts * (per_try + _BACKOFF_MAX_S)
    job = _Job(root, run_dir, duration_ms, options, num_tracing_attempts,
               limits.token_metadata(token) if token else (),
               time_ns() + (_START_LEAD_MS + delay_ms) * 1_000_000,
               monotonic() + deadline_s, progress)

    results: dict[str, WorkerResult] = {}

    def run(worker: addresses.Worker) -> None:
        results[worker.name] = _capture(job, worker)

    threads = [threading.Thread(target=run, args=(w,), name=f"stepscope-capture-{w.name}",
                                daemon=True) for w in workers]
    for t in threads:
        python_tracer.leave_out(t)
        t.start()
    for t in threads:
        t.join(max(0.0, job.deadline - monotonic()) + 1.0)
    result = CaptureResult(run_dir, duration_ms, [
        results.get(w.name) or WorkerResult(w.name, w.target, False, attempts=num_tracing_attempts,
                                            error="no answer before the deadline")
        for w in workers])
    if not result.succeeded:
        if not is_remote(run_dir):
            with contextlib.suppress(OSError):  # left in place if anything got in after all
                run_dir.rmdir()
        reasons = "; ".join(f"{w.worker}: {w.error}" for w in result.workers)
        raise CaptureError(f"No worker gave a profile ({reasons}).", result)
    return result


def _reserve_run_dir(root: Path) -> Path:
    """Create a new, empty run folder (two captures in the same second get two folders)."""
    while True:
        run_dir = layout.new_run_dir(root, datetime.now())
        if is_remote(run_dir):
            return run_dir  # object stores have no folders: the host objects make the run
        try:
            run_dir.mkdir()
        except FileExistsError:  # another capture took the name between the check and now
            continue
        except OSError as err:
            raise LogdirError(f"Cannot create the run folder {run_dir} "
                              f"({err.strerror or err}).") from err
        return run_dir


def check_arguments(duration_ms: Any, options: Any = None, attempts: Any = 1,
                    token: Any = None, deadline_s: Any = None) -> None:
    """Raise ``InvalidOptionError`` for an argument of ``trace`` it would refuse."""
    if isinstance(duration_ms, bool) or not isinstance(duration_ms, int) or not (
            0 < duration_ms <= limits.MAX_DURATION_MS):
        raise InvalidOptionError(f"duration_ms must be 1..{limits.MAX_DURATION_MS:,} "
                                 f"milliseconds (up to an hour), got {duration_ms!r}.")
    if options is not None and not isinstance(options, ProfilerOptions):
        raise InvalidOptionError(
            f"options must be a stepscope.ProfilerOptions, got {type(options).__name__}.")
    if isinstance(attempts, bool) or not isinstance(attempts, int) or not 1 <= attempts <= 100:
        raise InvalidOptionError(
            f"num_tracing_attempts must be an integer in 1..100, got {attempts!r}.")
    if token is not None and not (isinstance(token, str) and token):
        raise InvalidOptionError("token must be a non-empty string, or None for no token.")
    if deadline_s is not None and not (isinstance(deadline_s, int | float) and deadline_s > 0):
        raise InvalidOptionError(f"deadline_s must be a positive number, got {deadline_s!r}.")


def _tell(job: _Job, worker: addresses.Worker, state: str, attempt: int, detail: str) -> None:
    if job.progress is not None:
        job.progress(WorkerProgress(worker.name, state, attempt, detail))


def _capture(job: _Job, worker: addresses.Worker) -> WorkerResult:
    """One worker's capture with its retries; never raises."""
    reasons: list[str] = []
    for attempt in range(1, job.attempts + 1):
        # The first attempt shares the common window; a retry opens its own.
        start_ns = job.first_start_ns if attempt == 1 else time_ns() + _START_LEAD_MS * 1_000_000
        _tell(job, worker, "capturing", attempt, "")
        try:
            path, events = _attempt(job, worker, start_ns)
        except _Failure as failure:
            reasons.append(failure.reason)
            wait_s = min(_BACKOFF_FIRST_S * 2 ** (attempt - 1), _BACKOFF_MAX_S)
            more = (failure.retryable and attempt < job.attempts
                    and monotonic() + wait_s < job.deadline)
            if not more:
                break
            _tell(job, worker, "retrying", attempt, failure.reason)
            sleep(wait_s)
        except Exception as err:  # a bug or an odd answer must not take the others down
            reasons.append(f"failed: {err}")
            break
        else:
            _tell(job, worker, "done", attempt, f"{events:,} events")
            return WorkerResult(worker.name, worker.target, True, path, events, attempt)
    error = _summary(reasons)
    _tell(job, worker, "failed", len(reasons), error)
    return WorkerResult(worker.name, worker.target, False, attempts=len(reasons), error=error)


def _summary(reasons: list[str]) -> str:
    """One phrase for all of a worker's failed attempts."""
    tries = len(reasons)
    if tries == 1:
        return reasons[0]
    if all(r == reasons[0] for r in reasons):
        return f"{reasons[0]} after {tries} tries"
    return f"{reasons[0]}, then {reasons[-1]} ({tries} tries)"


def _attempt(job: _Job, worker: addresses.Worker, start_ns: int) -> tuple[Path, int]:
    """Ask ``worker`` for one capture; write its profile; return the path and event count."""
    request = _request(job, worker, start_ns)
    window_s = max(0.0, (start_ns - time_ns()) / 1e9) + job.duration_ms / 1000
    timeout = min(window_s + _ANSWER_SLACK_S, job.deadline - monotonic())
    if timeout <= 0:
        raise _Failure("no time left before the deadline", retryable=False)
    channel = grpc.insecure_channel(worker.target, options=[
        ("grpc.max_receive_message_length", -1),
        # A fresh channel per attempt: a failed one waits out gRPC's own reconnect back-off.
        ("grpc.enable_retries", 0),
    ])
    try:
        call = channel.unary_unary(protocol.PROFILE_METHOD,
                                   request_serializer=_serialize,
                                   response_deserializer=protocol.ProfileResponse.FromString)
        try:
            response = call(request, timeout=timeout, metadata=job.metadata or None)
        except grpc.RpcError as err:
            raise _failure(err) from None
    finally:
        channel.close()
    return _save(job, worker, response)


def _serialize(message: Any) -> bytes:
    return message.SerializeToString()  # type: ignore[no-any-return]


def _request(job: _Job, worker: addresses.Worker, start_ns: int) -> Any:
    """The ``ProfileRequest`` TensorFlow's client would send, asking for the data back."""
    opts = job.options
    request = protocol.ProfileRequest(
        duration_ms=job.duration_ms, max_events=opts.max_events,
        # Set as TensorFlow's client sets them: a server that ignores emit_xspace writes the
        # file itself, which is then where we want it when it runs on this machine.
        repository_root=str(layout.profile_root(job.logdir).absolute()),
        session_id=job.run_dir.name, host_name=worker.host_name, emit_xspace=True,
        tools=["xplane.pb"])
    request.opts.version = protocol.OPTIONS_VERSION
    request.opts.host_tracer_level = opts.host_tracer_level
    request.opts.device_tracer_level = opts.device_tracer_level
    request.opts.python_tracer_level = opts.python_tracer_level
    request.opts.duration_ms = job.duration_ms
    request.opts.start_timestamp_ns = start_ns
    request.opts.repository_path = str(job.logdir.absolute())
    request.opts.session_id = job.run_dir.name
    return request


def _failure(err: grpc.RpcError) -> _Failure:
    """The failure a gRPC error means, worded for the user."""
    code = err.code()  # type: ignore[attr-defined]
    details = err.details() or code.name  # type: ignore[attr-defined]
    if code == grpc.StatusCode.UNAVAILABLE:
        # gRPC says "unavailable" both when it never connected and when the connection broke;
        # only its message tells them apart (watching the channel's state races its close).
        never = any(hint in details.lower() for hint in _NOT_CONNECTED)
        reason = "unreachable" if never else "lost the connection during the capture"
    elif code == grpc.StatusCode.UNIMPLEMENTED and protocol.SERVICE not in details:
        reason = "not a profiler server (it does not serve tensorflow.ProfilerService)"
    elif code == grpc.StatusCode.DEADLINE_EXCEEDED:
        reason = "no answer before the deadline"
    else:
        reason = f"refused: {details}"
    return _Failure(reason, retryable=code in _RETRYABLE)


def _save(job: _Job, worker: addresses.Worker, response: Any) -> tuple[Path, int]:
    """Write the worker's profile into the run; return its path and event count."""
    path = job.run_dir / worker.file_name
    data = response.xspace
    if response.empty_trace:
        raise _Failure("recorded no events", retryable=True)
    if not data:
        if path.is_file():  # an older server wrote it itself, on this machine
            return path, _count_events(path.read_bytes())
        raise _Failure("answered without profile data", retryable=False)
    events = _count_events(data)
    try:
        xb.write_atomic(path, data)
    except OSError as err:
        raise _Failure(f"cannot write {path} ({err.strerror or err})", retryable=False) from err
    return path, events


def _count_events(data: bytes) -> int:
    """Events in a serialized ``XSpace`` (parsing it also proves it is whole)."""
    try:
        space = XSpace.FromString(data)
    except Exception as err:  # protobuf's DecodeError has no stable import path
        raise _Failure("sent a profile that is not a valid XSpace", retryable=True) from err
    return sum(len(line.events) for plane in space.planes for line in plane.lines)


@dataclass(frozen=True)
class SnapshotResult:
    """A flight recorder's window fetched from one worker and saved as a run."""

    worker: str
    address: str
    path: Path
    events: int

    def to_dict(self) -> dict[str, Any]:
        """The result as plain JSON-ready data."""
        return {"worker": self.worker, "address": self.address, "path": str(self.path),
                "run": self.path.parent.name, "events": self.events}


def snapshot(service_addr: str, logdir: str | os.PathLike[str], token: str | None = None,
             timeout_s: float = 120.0) -> SnapshotResult:
    """Fetch the running flight recorder's window from one worker (``GetSnapshot``) and save
    it as a new run ``<time>-flight-snapshot`` under ``logdir``; no capture is planned."""
    from stepscope.capture.flight_window import save_run

    workers = addresses.parse(service_addr)
    if len(workers) != 1:
        raise InvalidOptionError("A snapshot is taken of one worker at a time; pass one "
                                 "host:port.")
    check_arguments(1, None, 1, token)
    if not (isinstance(timeout_s, int | float) and timeout_s > 0):
        raise InvalidOptionError(f"timeout_s must be a positive number, got {timeout_s!r}.")
    if not str(logdir):
        raise InvalidOptionError("logdir is empty; pass the directory to write profiles into.")
    root = as_path(logdir)
    check_writable(root)
    worker = workers[0]
    channel = grpc.insecure_channel(worker.target, options=[
        ("grpc.max_receive_message_length", -1), ("grpc.enable_retries", 0)])
    try:
        call = channel.unary_unary(protocol.SNAPSHOT_METHOD, request_serializer=_serialize,
                                   response_deserializer=protocol.ProfileResponse.FromString)
        try:
            response = call(protocol.GetSnapshotRequest(), timeout=timeout_s,
                            metadata=limits.token_metadata(token) if token else None)
        except grpc.RpcError as err:
            failure = _failure(err)
            code = err.code()  # type: ignore[attr-defined]
            if code == grpc.StatusCode.UNIMPLEMENTED:
                raise CaptureError(f"{worker.name}: its profiler server does not serve "
                                   "snapshots (a TensorFlow server, or an older stepscope); "
                                   "capture with a duration instead.") from None
            raise CaptureError(f"{worker.name}: {failure.reason}.") from None
    finally:
        channel.close()
    try:
        events = _count_events(response.xspace)
    except _Failure as failure:
        raise CaptureError(f"{worker.name} {failure.reason}.") from None
    try:
        path = save_run(root, "flight-snapshot", worker.name, response.xspace)
    except OSError as err:
        raise LogdirError(f"Cannot write the snapshot under {root} "
                          f"({err.strerror or err}).") from err
    return SnapshotResult(worker.name, worker.target, path, events)
