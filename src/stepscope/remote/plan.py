"""Turning a ``ProfileRequest`` into a checked capture plan (what the server will do)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from stepscope.capture.options import ProfilerOptions
from stepscope.errors import InvalidOptionError, StepscopeError
from stepscope.model import locations, schema
from stepscope.model import logdir as layout
from stepscope.remote import limits

_PLUGIN_DIR = tuple(schema.PLUGIN_DIR)


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


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# Linux's limits on a path and on one name in it (bytes); longer fails only when writing.
_MAX_PATH_BYTES = 4096
_MAX_NAME_BYTES = 255
_SHOWN = 80  # characters of a refused value quoted back (gRPC caps an error's size)


def _shown(value: str) -> str:
    """``value`` quoted for an error message, cut short if long."""
    return repr(value[:_SHOWN]) + (f"… ({len(value):,} characters)" if len(value) > _SHOWN
                                   else "")


def _check_text(value: str, field: str, max_bytes: int) -> None:
    """Refuse control characters (a NUL ends a path in the OS) and over-long values."""
    if _CONTROL.search(value):
        raise BadRequest(f"{field} {_shown(value)} contains control characters.")
    if len(value.encode()) > max_bytes:
        raise BadRequest(f"{field} {_shown(value)} is longer than {max_bytes} bytes.")


def _check_session_id(session_id: str) -> None:
    # The id becomes one folder name under repository_root, never a path of its own.
    _check_text(session_id, "session_id", _MAX_NAME_BYTES)
    if session_id in (".", "..") or any(c in session_id for c in "/\\"):
        raise BadRequest(f"session_id {_shown(session_id)} is not a plain folder name.")


def _check_host_name(host: str) -> None:
    # The host names the profile's file: one name, with room for its suffix.
    _check_text(host, "host_name", _MAX_NAME_BYTES - len(schema.XPLANE_SUFFIX))


def _check_repository_root(root: str) -> Path:
    """The real folder ``root`` names, symbolic links resolved; BadRequest unless it is a
    ``<logdir>/plugins/profile`` folder."""
    # A caller names where this process writes; TensorFlow's and XProf's clients always name a
    # logdir's plugins/profile folder, so refusing anything else (or any '..') keeps a caller
    # from writing into an arbitrary directory of this machine. The check holds for the real
    # path too: a link named plugins/profile that leads elsewhere is refused.
    _check_text(root, "repository_root", _MAX_PATH_BYTES)
    if locations.url_scheme(root) not in (None, "file", "local"):
        return _check_remote_root(root)
    try:
        path = locations.as_path(root)  # a file:// URL is its local path, never ./file:/…
    except StepscopeError as err:  # a chained or unknown URL form
        raise BadRequest(str(err)) from err
    if any(len(part.encode()) > _MAX_NAME_BYTES for part in path.parts):
        raise BadRequest(f"repository_root {_shown(root)} has a folder name longer than "
                         f"{_MAX_NAME_BYTES} bytes.")
    if path.parts[-2:] != _PLUGIN_DIR or ".." in path.parts:
        raise BadRequest(f"repository_root {_shown(root)} is not a <logdir>/plugins/profile "
                         "folder; this server writes profiles only there.")
    real = Path(os.path.realpath(path))
    if real.parts[-2:] != _PLUGIN_DIR:
        # The real path is not quoted back: where links lead is this machine's business.
        raise BadRequest(f"repository_root {_shown(root)} is a link that leads outside any "
                         "<logdir>/plugins/profile folder; this server writes profiles only "
                         "there.")
    return real


def _check_remote_root(root: str) -> Path:
    """A repository root in a bucket (TensorFlow's clients name gs:// logdirs): the same
    plugins/profile rule on the URL's own path; links do not exist there."""
    parts = root.split("://", 1)[1].rstrip("/").split("/")
    if tuple(parts[-2:]) != _PLUGIN_DIR or ".." in parts or any(
            len(part.encode()) > _MAX_NAME_BYTES for part in parts):
        raise BadRequest(f"repository_root {_shown(root)} is not a <logdir>/plugins/profile "
                         "folder; this server writes profiles only there.")
    try:
        return locations.as_path(root.rstrip("/"))
    except StepscopeError as err:  # the filesystem's package is not installed on this worker
        raise BadRequest(str(err)) from err


def check_out_path(path: Path) -> None:
    """BadRequest unless writing ``path`` (planned as ``<real root>/<run>/<file>``) stays in
    its run folder under that root: neither the run folder nor the root may have become a
    link to somewhere else since the request was checked."""
    run_dir = path.parent
    if locations.is_remote(run_dir):
        return  # object stores have no links
    if Path(os.path.realpath(run_dir)) != run_dir:
        raise BadRequest(f"The run folder {_shown(str(run_dir))} is a link to another place; "
                         "this server writes profiles only inside plugins/profile.")


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
    _check_host_name(str(request.host_name))
    root = str(request.repository_root)
    if root:
        _check_text(root, "repository_root", _MAX_PATH_BYTES)
    out_path = None
    if root and not request.emit_xspace:
        real_root = _check_repository_root(root)
        run = session_id or layout.run_name(datetime.now())
        host = request.host_name or layout.local_hostname()
        out_path = real_root / run / layout.host_file_name(host)
        check_out_path(out_path)
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
