"""The HTTP API's answers, independent of the web framework that carries them.

Runs, hosts and tools are named by the client and checked against what exists: a name that
tries to leave the logdir (``..``, an absolute path, a backslash, or any of these once
percent-decoded again) is a 400; a well-formed name that is not there is a NotFoundError (a
404). No path is ever built from a client's string: names are only looked up among the runs
found on disk. ``routes`` maps URLs to these answers.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from stepscope.capture.options import ProfilerOptions
from stepscope.errors import NotFoundError, StepscopeError
from stepscope.model.locations import as_path
from stepscope.model.logdir import host_name, list_runs, resolve
from stepscope.run_loader import has_hlo_data, has_xla_data
from stepscope.version import __version__
from stepscope.web.capture_jobs import CaptureBusyError, CaptureJobs
from stepscope.web.store import RunState, RunStore
from stepscope.web.tools import TOOLS, Tool

_MAX_NAME = 1024
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"", "0", "false", "no", "off"}
_CAPTURE_LEVELS = ("host_tracer_level", "python_tracer_level", "device_tracer_level")


class ApiError(Exception):
    """A refused request: its HTTP status and one sentence (a missing run, host, tool, event or
    capture is an ``errors.NotFoundError`` instead, answered with 404)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass
class Reply:
    """A finished answer: status, media type and body."""

    status: int
    content_type: str
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)


def check_name(value: str, what: str) -> str:
    """``value`` if it is a safe name; ApiError(400) if it tries to leave the logdir."""
    if len(value) > _MAX_NAME:
        raise ApiError(400, f"The {what} name is too long.")
    decoded, seen = value, {value}
    while True:  # "%252e%252e" → "%2e%2e" → "..": look through every layer of encoding
        once = unquote(decoded)
        if once in seen:
            break
        seen.add(once)
        decoded = once
    for form in seen:
        parts = form.replace("\\", "/").split("/")
        if (_CONTROL.search(form) or "\\" in form or form.startswith(("/", "~"))
                or ".." in parts or re.match(r"^[A-Za-z]:", form)):
            raise ApiError(400, f"Invalid {what} name {value!r}: names may not leave the "
                                "logdir.")
    return value


def flag(query: Mapping[str, str], name: str) -> bool:
    """A boolean query parameter (1/0, true/false, yes/no, on/off)."""
    value = query.get(name, "").strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ApiError(400, f"Parameter {name} must be true or false, not {value!r}.")


def integer(query: Mapping[str, str], name: str, low: int, high: int,
            default: int | None) -> int | None:
    """An integer query parameter within [low, high]; ``default`` when absent or empty."""
    text = query.get(name, "").strip()
    if not text:
        return default
    if not re.fullmatch(r"[+-]?\d{1,19}", text):
        raise ApiError(400, f"Parameter {name} must be an integer, not {text[:40]!r}.")
    value = int(text)
    if not low <= value <= high:
        raise ApiError(400, f"Parameter {name} must be between {low} and {high}, not "
                            f"{value}.")
    return value


def text(query: Mapping[str, str], name: str) -> str:
    """A text query parameter ("" when absent): bounded, without control characters."""
    value = query.get(name, "")
    if len(value) > _MAX_NAME or _CONTROL.search(value):
        raise ApiError(400, f"Parameter {name} is too long or holds control characters.")
    return value


class Api:
    """The API over one logdir."""

    def __init__(self, logdir: str | Path, *, use_cache: bool = True,
                 engine: str = "auto", allow_link_local_capture: bool = False) -> None:
        self.logdir = as_path(logdir)
        self.store = RunStore(use_cache=use_cache, engine=engine)
        self.captures = CaptureJobs(self.logdir, allow_link_local=allow_link_local_capture)

    # -- names -----------------------------------------------------------------------------

    def _run_path(self, run: str | None) -> Path:
        if not run:
            raise ApiError(400, "Parameter run is required.")
        check_name(run, "run")
        runs = list_runs(self.logdir)
        if run not in runs:
            raise NotFoundError(f"No run {run!r} in {self.logdir}.")
        return runs[run]

    def _tool(self, tool: str | None) -> Tool:
        if not tool:
            raise ApiError(400, "Parameter tool is required.")
        check_name(tool, "tool")
        if tool not in TOOLS:
            raise NotFoundError(f"No tool {tool!r}; tools are {', '.join(TOOLS)}.")
        return TOOLS[tool]

    def _host_names(self, path: Path) -> list[str]:
        _, _, files, _ = resolve(path)
        return sorted(host_name(f) for f in files)

    def _host(self, host: str | None, state: RunState | None, path: Path) -> str | None:
        """The host a request names (None: all hosts), checked against the run's hosts."""
        if not host:
            return None
        check_name(host, "host")
        names = (list(state.run.profile.hosts) if state is not None and state.run is not None
                 else self._host_names(path))
        if host not in names:
            failed = state.run.profile.failed if state is not None and state.run else {}
            if host in failed:
                raise NotFoundError(f"Host {host!r} could not be read: {failed[host]}")
            raise NotFoundError(f"No host {host!r} in this run.")
        return host

    # -- answers ---------------------------------------------------------------------------

    def runs(self) -> dict[str, Any]:
        """Every run of the logdir (newest first), read afresh so new runs appear."""
        runs = list_runs(self.logdir)
        return {"logdir": str(self.logdir), "version": __version__,
                "runs": [{"name": name, "hosts": self._host_names(path)}
                         for name, path in reversed(runs.items())]}

    def hosts(self, run: str | None) -> dict[str, Any]:
        """The hosts of one run."""
        path = self._run_path(run)
        return {"run": run, "hosts": self._host_names(path)}

    def tools(self, run: str | None, host: str | None) -> dict[str, Any]:
        """The tools available for one run (and host)."""
        path = self._run_path(run)
        self._host(host, None, path)
        xla = any(t.needs_xla for t in TOOLS.values()) and _has_xla(path)
        hlo = any(t.needs_hlo for t in TOOLS.values()) and _has_hlo(path)
        return {"run": run, "host": host or None,
                "tools": [{"name": t.name, "title": t.title, "csv": t.csv is not None,
                           "flags": list(t.flags), "texts": list(t.texts)}
                          for t in TOOLS.values()
                          if (xla or not t.needs_xla) and (hlo or not t.needs_hlo)
                          and self._offers(t, path, host or None)]}

    def _offers(self, tool: Tool, path: Path, host: str | None) -> bool:
        """Whether to list ``tool``: a tool that shows only some runs' data (the memory
        profile) is listed once the run is loaded and has that data."""
        if tool.available is None:
            return True
        state = self.store.get(path)
        if state.run is None:
            return False
        try:
            with state.lock:
                return tool.available(state.run, host)
        except StepscopeError:
            return False

    def status(self, run: str | None) -> dict[str, Any]:
        """How far loading the run has got (and starts loading it)."""
        return self.store.get(self._run_path(run)).progress()

    def _ready(self, run: str | None, host: str | None, tool: str | None,
               query: Mapping[str, str]
               ) -> tuple[RunState, Tool, str | None, dict[str, int | bool | str]]:
        path = self._run_path(run)
        chosen = self._tool(tool)
        if chosen.needs_xla and not _has_xla(path):
            raise NotFoundError(f"Tool {chosen.name!r} needs XLA programs; run {run!r} has none.")
        if chosen.needs_hlo and not _has_hlo(path):
            raise NotFoundError(f"Tool {chosen.name!r} needs the HLO of XLA programs; run "
                                f"{run!r} has none.")
        params: dict[str, int | bool | str] = {name: flag(query, name) for name in chosen.flags}
        params.update({name: text(query, name) for name in chosen.texts})
        for p in chosen.ints:
            value = integer(query, p.name, p.low, p.high, p.default)
            if value is not None:
                params[p.name] = value
        state = self.store.get(path)
        if state.state == "failed":
            raise ApiError(422, state.error)
        return state, chosen, self._host(host, state if state.run else None, path), params

    def data(self, run: str | None, host: str | None, tool: str | None,
             query: Mapping[str, str]) -> tuple[int, dict[str, Any]]:
        """A tool's data as JSON: (200, data), or (202, progress) while the run loads."""
        state, chosen, host_name_, params = self._ready(run, host, tool, query)
        # The trace viewer of a one-host run answers before the run model is built.
        loaded = state.run or (state.early if chosen.name == "trace_viewer" else None)
        if loaded is None:
            return 202, state.progress()
        from stepscope.web.trace import IndexPending

        try:
            with state.lock:
                return 200, chosen.data(loaded, host_name_, params)
        except IndexPending as pending:
            return 202, pending.progress

    def trace(self, view: str, query: Mapping[str, str]) -> tuple[int, dict[str, Any]]:
        """A trace viewer query (see ``web.trace``): (200, answer), or (202, progress)."""
        from stepscope.analysis.trace_index import TraceQueryError
        from stepscope.web.trace import IndexPending, TraceParamError, answer, trace_index

        check_name(view, "trace view")
        state, _, host_name_, _ = self._ready(query.get("run"), query.get("host"),
                                              "trace_viewer", {})
        run = state.run or state.early  # a one-host run: before its run model
        if run is None:
            return 202, state.progress()
        try:
            # Built outside the run's lock; a window is answered coarsely meanwhile.
            index = trace_index(run, host_name_, coarse=view == "window")
            with state.lock:
                return 200, answer(index, view, query)
        except IndexPending as pending:
            return 202, pending.progress
        except NotFoundError:
            raise
        except (TraceParamError, TraceQueryError) as err:
            raise ApiError(400, str(err)) from err

    def csv(self, run: str | None, host: str | None, tool: str | None,
            query: Mapping[str, str]) -> tuple[str, str]:
        """A tool's CSV export: (file name, text); waits for the run to load."""
        state, chosen, host_name_, params = self._ready(run, host, tool, query)
        if chosen.csv is None:
            raise NotFoundError(f"Tool {chosen.name!r} has no CSV export.")
        state = self.store.wait(self._run_path(run))
        if state.run is None:
            raise ApiError(422, state.error or "The run could not be loaded.")
        with state.lock:
            text = chosen.csv(state.run, host_name_, params)
        parts = [run or "run", host_name_ or "all_hosts", chosen.name]
        return re.sub(r"[^A-Za-z0-9._-]+", "_", "-".join(parts)) + ".csv", text

    # -- captures ---------------------------------------------------------------------------

    def start_capture(self, body: Any) -> dict[str, Any]:
        """Start capturing running workers into the logdir (the Capture profile dialog)."""
        if not isinstance(body, dict):
            raise ApiError(400, "The capture request must be a JSON object.")
        addr = body.get("service_addr")
        if not isinstance(addr, str) or not addr.strip() or len(addr) > 4096:
            raise ApiError(400, "service_addr must name one or more workers, e.g. "
                                "grpc://127.0.0.1:6009,grpc://127.0.0.1:6010.")
        is_tpu = body.get("is_tpu_name", False)
        if not isinstance(is_tpu, bool):
            raise ApiError(400, "is_tpu_name must be true or false.")
        try:
            options = ProfilerOptions(**{k: body[k] for k in _CAPTURE_LEVELS if k in body})
            job = self.captures.start(addr.strip(), body.get("duration_ms", 2000), options,
                                      body.get("num_tracing_attempts", 3), is_tpu=is_tpu)
        except CaptureBusyError as err:
            raise ApiError(409, str(err)) from err
        except (StepscopeError, TypeError, ValueError) as err:
            raise ApiError(400, str(err)) from err
        return job.to_dict()

    def capture(self, capture_id: str | None) -> dict[str, Any]:
        """Where a capture started here stands."""
        if not capture_id or not re.fullmatch(r"[0-9a-f]{1,64}", capture_id):
            raise ApiError(400, "Parameter id must be a capture id.")
        job = self.captures.get(capture_id)
        if job is None:
            raise NotFoundError(f"No capture {capture_id!r} on this server.")
        return job.to_dict()


def _has_xla(path: Path) -> bool:
    """Whether the run at ``path`` has XLA programs (False when its files cannot be listed)."""
    try:
        return has_xla_data(resolve(path)[2])
    except StepscopeError:
        return False


def _has_hlo(path: Path) -> bool:
    """Whether the run at ``path`` holds XLA programs' HLO (False when its files cannot be
    listed)."""
    try:
        return has_hlo_data(resolve(path)[2])
    except StepscopeError:
        return False


def check_post(content_type: str, origin: str | None, host: str | None) -> None:
    """Refuse a state-changing request another site's page could have sent.

    A JSON body cannot be sent cross-origin without a CORS preflight, which this server never
    approves; an Origin header, when the browser sends one, must be this server.
    """
    if content_type.split(";")[0].strip().lower() != "application/json":
        raise ApiError(415, "Send the request as application/json.")
    if origin is not None and origin != "null":
        netloc = origin.split("://", 1)[-1].rstrip("/")
        if host is None or netloc != host:
            raise ApiError(403, f"Requests from {origin} are not accepted.")
    elif origin == "null":
        raise ApiError(403, "Requests from an opaque origin are not accepted.")


def json_reply(status: int, body: dict[str, Any]) -> Reply:
    """A JSON answer, encoded as FastAPI's JSONResponse encodes it."""
    return Reply(status, "application/json",
                 json.dumps(body, ensure_ascii=False, allow_nan=False,
                            separators=(",", ":")).encode())
