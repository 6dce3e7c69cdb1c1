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
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stepscope.errors import InvalidParameterError, NotFoundError, StepscopeError
from stepscope.model.locations import as_path
from stepscope.model.logdir import check_name as logdir_check_name
from stepscope.model.logdir import flight_trigger, host_name, list_runs, resolve
from stepscope.version import __version__
from stepscope.web.store import RunState, RunStore
from stepscope.web.tools import TOOLS, ToolSpec, listing, parse, tool_csv, tool_data

if TYPE_CHECKING:  # the capture's modules are imported by the first capture request
    from stepscope.web.capture_jobs import CaptureJobs

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
    """``value`` if it is a safe name; ApiError(400) if it tries to leave the logdir (the rule
    is ``model.logdir.check_name``, shared with the MCP server)."""
    try:
        return logdir_check_name(value, what)
    except InvalidParameterError as err:
        raise ApiError(400, str(err)) from err


class Api:
    """The API over one logdir."""

    def __init__(self, logdir: str | Path, *, use_cache: bool = True,
                 engine: str = "auto", allow_link_local_capture: bool = False,
                 store: RunStore | None = None) -> None:
        """``store``: the runs loaded already (by a server that started reading the newest
        run before it imported this module); ``use_cache`` and ``engine`` are then its own."""
        self.logdir = as_path(logdir)
        self.store = store or RunStore(use_cache=use_cache, engine=engine)
        self._allow_link_local_capture = allow_link_local_capture
        self._captures: CaptureJobs | None = None
        self._captures_lock = threading.Lock()

    @property
    def captures(self) -> CaptureJobs:
        """The captures started from this server; made (and the capture's modules imported:
        options, targets, ``secrets``) on the first capture request, not by a fresh server
        before its first pages."""
        with self._captures_lock:
            if self._captures is None:
                from stepscope.web.capture_jobs import CaptureJobs

                self._captures = CaptureJobs(self.logdir,
                                             allow_link_local=self._allow_link_local_capture)
            return self._captures

    # -- names -----------------------------------------------------------------------------

    def _run_path(self, run: str | None) -> Path:
        if not run:
            raise ApiError(400, "Parameter run is required.")
        check_name(run, "run")
        runs = list_runs(self.logdir)
        if run not in runs:
            raise NotFoundError(f"No run {run!r} in {self.logdir}.")
        return runs[run]

    def _tool(self, tool: str | None) -> ToolSpec:
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
                "runs": [{"name": name, "hosts": self._host_names(path),
                          "trigger": flight_trigger(name)}
                         for name, path in reversed(runs.items())]}

    def hosts(self, run: str | None) -> dict[str, Any]:
        """The hosts of one run."""
        path = self._run_path(run)
        return {"run": run, "hosts": self._host_names(path)}

    def tools(self, run: str | None, host: str | None) -> dict[str, Any]:
        """The tools with a page that are available for one run (and host)."""
        path = self._run_path(run)
        self._host(host, None, path)
        probe = self._probe(path)
        return {"run": run, "host": host or None,
                "tools": [listing(t) for t in TOOLS.values()
                          if t.page and t.offered(probe) and self._offers(t, path, host or None)]}

    def _probe(self, path: Path) -> Any:
        """The run at ``path`` as far as the byte probes need (its files; nothing decoded):
        the loaded run when there is one."""
        from stepscope.run import Run

        state = self.store.get(path)
        if state.run is not None:
            return state.run
        try:
            return Run.open(path)
        except StepscopeError as err:
            raise ApiError(422, str(err)) from err

    def _offers(self, tool: ToolSpec, path: Path, host: str | None) -> bool:
        """Whether to list ``tool``: a tool that shows only some runs' data (the memory
        profile) is listed once the run is loaded and has that data."""
        if tool.available is None:
            return True
        state = self.store.get(path)
        if state.run is None:
            return False
        with state.lock:
            return tool.available_for(state.run, host)

    def status(self, run: str | None) -> dict[str, Any]:
        """How far loading the run has got (and starts loading it)."""
        state = self.store.get(self._run_path(run))
        state.wanted.set()
        return state.progress()

    def _ready(self, run: str | None, host: str | None, tool: str | None,
               query: Mapping[str, str]
               ) -> tuple[RunState, ToolSpec, str | None, dict[str, Any]]:
        path = self._run_path(run)
        chosen = self._tool(tool)
        if not chosen.offered(self._probe(path)):
            raise NotFoundError(chosen.unavailable(self._probe(path)))
        try:
            params = parse(chosen, query)
        except InvalidParameterError as err:
            raise ApiError(400, str(err)) from err
        for p in chosen.params:  # another run of the logdir: checked, then its path
            if p.kind == "run" and params.get(p.name):
                params[p.name] = str(self._run_path(str(params[p.name])))
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
        if chosen.name != "trace_viewer":
            state.wanted.set()
        if loaded is None:
            return 202, state.progress()
        from stepscope.web.trace import IndexPending

        try:
            with state.lock:
                return 200, dict(tool_data(loaded, chosen, host_name_, params))
        except IndexPending as pending:
            return 202, pending.progress
        except InvalidParameterError as err:
            raise ApiError(400, str(err)) from err

    def trace(self, view: str, query: Mapping[str, str]) -> tuple[int, dict[str, Any]]:
        """A trace viewer query (see ``web.trace``): (200, answer), or (202, progress)."""
        from stepscope.analysis.trace.trace_index import TraceQueryError
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
                reply = answer(index, view, query)
            # (A one-host run's model waits for the index's build, not for this answer.)
            return 200, reply
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
        if not chosen.csv:
            raise NotFoundError(f"Tool {chosen.name!r} has no CSV export.")
        state = self.store.wait(self._run_path(run))
        if state.run is None:
            raise ApiError(422, state.error or "The run could not be loaded.")
        with state.lock:
            text = tool_csv(state.run, chosen, host_name_, params)
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
        from stepscope.capture.options import ProfilerOptions
        from stepscope.web.capture_jobs import CaptureBusyError

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
    """A JSON answer: compact UTF-8 JSON (non-ASCII text kept as is; NaN refused)."""
    return Reply(status, "application/json",
                 json.dumps(body, ensure_ascii=False, allow_nan=False,
                            separators=(",", ":")).encode())
