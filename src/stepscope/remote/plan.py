"""Turning a ``ProfileRequest`` into a checked capture plan (what the server will do)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from stepscope.capture.options import ProfilerOptions
from stepscope.errors import InvalidOptionError
from stepscope.model import logdir as layout
from stepscope.remote import limits


class BadRequest(ValueError):
    """The request asks for something the server refuses; the message says what and why."""


@dataclass(frozen=True)
class CapturePlan:
    """One checked capture: how long, from when, with which options, and where the data goes.

    ``out_path`` is where the server writes the profile itself (TensorFlow's clients ask for
    that); ``emit`` says whether the response carries the ``XSpace`` (stepscope's client asks
    for that, so it works across machines).
    """

    duration_ms: int
    start_ns: int
    options: ProfilerOptions
    out_path: Path | None
    emit: bool


def _check_session_id(session_id: str) -> None:
    # The id becomes one folder name under repository_root, never a path of its own.
    if session_id in (".", "..") or any(c in session_id for c in "/\\\0"):
        raise BadRequest(f"session_id {session_id!r} is not a plain folder name.")


def _check_repository_root(root: str) -> None:
    # A caller names where this process writes; TensorFlow's and XProf's clients always name a
    # logdir's plugins/profile folder, so refusing anything else (or any '..') keeps a caller
    # from writing into an arbitrary directory of this machine.
    path = Path(root)
    if path.parts[-2:] != ("plugins", "profile") or ".." in path.parts:
        raise BadRequest(f"repository_root {root!r} is not a <logdir>/plugins/profile folder; "
                         "this server writes profiles only there.")


def plan_capture(request: Any, now_ns: int) -> CapturePlan:
    """Check ``request`` (a ``ProfileRequest``) against the server's limits and plan it."""
    opts = request.opts
    # TensorFlow's servers read the duration from the options; older clients set only the
    # request's own field, so fall back to it.
    duration_ms = int(opts.duration_ms or request.duration_ms)
    if duration_ms <= 0:
        raise BadRequest("duration_ms is 0; ask for a capture of 1 ms up to "
                         f"{limits.MAX_DURATION_MS:,} ms.")
    if duration_ms > limits.MAX_DURATION_MS:
        raise BadRequest(f"duration_ms={duration_ms:,} is over this server's limit of "
                         f"{limits.MAX_DURATION_MS:,} ms (1 hour); capture a shorter window.")
    max_events = int(request.max_events)
    if max_events > limits.MAX_EVENTS:
        raise BadRequest(f"max_events={max_events:,} is over this server's limit of "
                         f"{limits.MAX_EVENTS:,}; ask for fewer events.")
    start_ns = int(opts.start_timestamp_ns)
    if start_ns > now_ns + limits.MAX_START_DELAY_MS * 1_000_000:
        raise BadRequest("start_timestamp_ns is more than an hour ahead of this worker's clock; "
                         "start the capture sooner.")
    options = _options(opts, max_events)
    session_id = str(request.session_id)
    _check_session_id(session_id)
    out_path = None
    if request.repository_root and not request.emit_xspace:
        _check_repository_root(str(request.repository_root))
        run = session_id or layout.run_name(datetime.now())
        host = request.host_name or layout.local_hostname()
        out_path = Path(request.repository_root) / run / layout.host_file_name(host)
    return CapturePlan(duration_ms, start_ns, options, out_path,
                       emit=bool(request.emit_xspace) or out_path is None)


def _options(opts: Any, max_events: int) -> ProfilerOptions:
    """The session options a request's ``ProfileOptions`` asks for."""
    extra: dict[str, Any] = {"max_events": max_events} if max_events > 0 else {}
    try:
        if opts.version == 0:
            # Version 0 means "unset" in TensorFlow's protocol: the server's defaults apply.
            return ProfilerOptions(**extra)
        return ProfilerOptions(host_tracer_level=int(opts.host_tracer_level),
                               python_tracer_level=int(opts.python_tracer_level),
                               device_tracer_level=int(opts.device_tracer_level), **extra)
    except InvalidOptionError as err:
        raise BadRequest(str(err)) from err
