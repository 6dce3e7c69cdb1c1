"""The MCP server's tools: one per declared tool (``run.tools.TOOLS``), generated from its
declaration, and the few that are the server's own (list runs, list hosts, capture).

``Catalog.call(name, arguments)`` answers one call as a dict sized by ``answers.fit``; it
raises a ``StepscopeError`` (one sentence) for anything it refuses. Runs are named as
``list_runs`` names them, never by path: a name is checked by ``model.logdir.check_name`` and
looked up among the runs found under the logdir, and a run whose files lie outside the logdir
(through a link) is refused. Nothing here writes, except ``capture``, which is refused unless
the server was started with ``--allow-capture``.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stepscope.errors import InvalidParameterError, NotFoundError, StepscopeError, not_found
from stepscope.mcp import answers
from stepscope.model.locations import as_path, is_remote
from stepscope.model.logdir import check_name, host_name, list_runs, resolve
from stepscope.run import Run
from stepscope.run.params import Param, parse_all
from stepscope.run.tools import TOOLS, ToolSpec

_RUN = Param("run", "text", "the run, as list_runs names it (default: the newest run)")
_HOST = Param("host", "text", "one host of the run, as list_hosts names it (default: the "
              "whole run)")
_TOKEN_ENV = "STEPSCOPE_PROFILER_TOKEN"  # the workers' shared token, from the server's env
_CAPTURE_MS = 2000
_MAX_CAPTURE_MS = 60_000  # an agent's capture: a minute at most
_KINDS = {"int": "an integer", "flag": "true or false", "text": "a string", "run": "a run name"}


@dataclass(frozen=True)
class McpTool:
    """One MCP tool: its name, title, description and parameters (the input schema)."""

    name: str
    title: str
    description: str
    params: tuple[Param, ...]
    read_only: bool = True

    def input_schema(self) -> dict[str, Any]:
        """The JSON Schema of the tool's arguments."""
        schema: dict[str, Any] = {
            "type": "object", "properties": {p.name: param_schema(p) for p in self.params},
            "additionalProperties": False}
        required = [p.name for p in self.params if p.required]
        if required:
            schema["required"] = required
        return schema


def param_schema(p: Param) -> dict[str, Any]:
    """A declared parameter as a JSON Schema property."""
    out: dict[str, Any] = {"description": p.help}
    if p.kind == "int":
        out.update(type="integer", minimum=p.low, maximum=p.high)
    elif p.kind == "flag":
        out["type"] = "boolean"
    elif p.kind == "run":
        out.update(type="string", maxLength=1024,
                   description=p.help + " (a run's name, as list_runs gives it)")
    else:
        out.update(type="string", maxLength=1024)
    if p.default is not None:
        out["default"] = p.default
    return out


def _sized(params: tuple[Param, ...]) -> tuple[Param, ...]:
    """``params`` with the sizing parameters a tool does not declare itself."""
    names = {p.name for p in params}
    return (*params, *(p for p in answers.SIZING if p.name not in names))


def _declared(t: ToolSpec) -> McpTool:
    needs = {"xla": " Needs XLA programs in the run.",
             "hlo": " Needs the HLO of XLA programs in the run."}.get(t.needs or "", "")
    text = (f"{t.summary}{needs} Answer: at most {answers.BUDGET_BYTES // 1024} KB of JSON, the "
            "main table's top rows; 'omitted' says what was left out.")
    names = {p.name for p in t.params}
    where = tuple(p for p in (_RUN, _HOST) if p.name not in names)  # the tool's own wins
    return McpTool(t.name, t.title, text, (*where, *_sized(t.params)))


_OWN = {
    "list_runs": McpTool(
        "list_runs", "List runs", "The runs of the logdir, newest first, with their hosts. "
        "Every other tool takes one of these names as 'run' (default: the newest).",
        _sized(())),
    "list_hosts": McpTool(
        "list_hosts", "List hosts", "One run's hosts (workers, ranks), those that could not "
        "be read and why, and the tools that have something to show for the run.",
        (_RUN, *_sized(()))),
    "capture": McpTool(
        "capture", "Capture a running job", "Record a running job's profile over gRPC into "
        "a new run of the logdir (workers run stepscope.server.start(port) or "
        "tf.profiler.experimental.server.start(port)). Off unless the server was started "
        "with --allow-capture.", (
            Param("service_addr", "text", "grpc://host:port of each worker, comma-separated"),
            Param("duration_ms", "int", "how long to record", _CAPTURE_MS, 1,
                  _MAX_CAPTURE_MS),
            Param("attempts", "int", "attempts per worker before giving up on it", 3, 1, 10)),
        read_only=False),
}


def tools() -> list[McpTool]:
    """Every MCP tool: the server's own, then one per declared tool (a declared tool named
    like one of the server's own is not offered twice)."""
    return [*_OWN.values(), *(_declared(t) for t in TOOLS.values() if t.name not in _OWN)]


class Catalog:
    """The answers of one server: its logdir, its runs (opened once each), its tools."""

    def __init__(self, logdir: str | Path, *, allow_capture: bool = False,
                 use_cache: bool = True) -> None:
        self.logdir = as_path(logdir)
        self.allow_capture = allow_capture
        self.use_cache = use_cache
        self._lock = threading.Lock()  # a Run is used by one call at a time
        self._runs: dict[str, tuple[tuple[Any, ...], Run]] = {}
        self._tools = {t.name: t for t in tools()}

    def call(self, name: str, arguments: Mapping[str, Any] | None) -> dict[str, Any]:
        """The answer of tool ``name`` to ``arguments`` (a StepscopeError if refused)."""
        if not isinstance(name, str) or name not in self._tools:
            raise not_found("tool", str(name)[:80], "this server", list(self._tools))
        if arguments is not None and not isinstance(arguments, Mapping):
            raise InvalidParameterError("The arguments must be a JSON object.")
        args = dict(arguments or {})
        tool = self._tools[name]
        _check_types(tool, args)
        values = parse_all(tool.params, args, name)
        sizing = answers.Sizing(int(values.get("limit") or answers.DEFAULT_LIMIT),
                                int(values.get("offset") or 0), bool(values.get("full_names")))
        own: dict[str, Callable[[dict[str, Any], answers.Sizing], dict[str, Any]]] = {
            "list_runs": self._list_runs, "list_hosts": self._list_hosts}
        if name == "capture":  # minutes of waiting on workers: other calls go on meanwhile
            return self._capture(values, sizing)
        with self._lock:
            if name in own:
                return own[name](values, sizing)
            return self._tool(TOOLS[name], values, sizing)

    # -- runs -----------------------------------------------------------------------------

    def runs(self) -> dict[str, Path]:
        """The logdir's runs by name, oldest first (those inside the logdir only)."""
        return {n: p for n, p in list_runs(self.logdir).items() if self._inside(p)}

    def _inside(self, path: Path) -> bool:
        """Whether ``path`` lies inside the logdir once links are followed."""
        if is_remote(self.logdir) or is_remote(path):
            return True  # object stores have no links
        try:
            path.resolve().relative_to(Path(self.logdir).resolve())
        except (ValueError, OSError):
            return False
        return True

    def run(self, name: Any) -> Run:
        """The run ``name`` names (None or "": the newest), opened once and kept while its
        files are unchanged."""
        runs = self.runs()
        if not runs:
            raise NotFoundError(f"The logdir {self.logdir} holds no runs yet; profile a "
                                "program into it (or capture one) first.")
        if not name:
            name = list(runs)[-1]
        check_name(str(name), "run")
        if name not in runs:
            raise not_found("run", str(name), "this logdir", list(reversed(runs)))
        path = runs[name]
        _, _, files, _ = resolve(path)
        if not all(self._inside(f) for f in files):
            raise InvalidParameterError(f"Run {name!r} has files outside the logdir (links); "
                                        "this server reads only inside its logdir.")
        stamp = tuple((str(f), *_stat(f)) for f in files)
        kept = self._runs.get(name)
        if kept is None or kept[0] != stamp:
            kept = (stamp, Run.open(path, cache=self.use_cache))
            self._runs[name] = kept
        return kept[1]

    # -- answers --------------------------------------------------------------------------

    def _tool(self, spec: ToolSpec, values: dict[str, Any],
              sizing: answers.Sizing) -> dict[str, Any]:
        run = self.run(values.get("run"))
        host = values.get("host") or None
        if host is not None:
            check_name(str(host), "host")
        own = {p.name: values[p.name] for p in spec.params}
        for p in spec.params:  # another run of the logdir: named as a run is, then its path
            if p.kind == "run" and own.get(p.name):
                own[p.name] = str(self.run(own[p.name]).path)
        result = run.tool(spec.name, host, **own)
        return answers.fit(result.to_dict(), result.table_key, sizing)

    def _list_runs(self, values: dict[str, Any], sizing: answers.Sizing) -> dict[str, Any]:
        runs = self.runs()
        rows = [{"name": n, "hosts": sorted(host_name(f) for f in resolve(p)[2])}
                for n, p in reversed(runs.items())]
        return answers.fit({"logdir": str(self.logdir), "runs": rows}, "runs", sizing)

    def _list_hosts(self, values: dict[str, Any], sizing: answers.Sizing) -> dict[str, Any]:
        run = self.run(values.get("run"))
        data = {"run": run.name, "hosts": run.hosts, "failed": run.failed,
                "tools": run.available_tools()}
        return answers.fit(data, "hosts", sizing)

    def _capture(self, values: dict[str, Any], sizing: answers.Sizing) -> dict[str, Any]:
        if not self.allow_capture:
            raise StepscopeError("Capture is off: this server is read-only. Start it with "
                                 "`stepscope mcp LOGDIR --allow-capture` to let an agent "
                                 "capture a running job.")
        from stepscope.remote import addresses, client

        target = str(values.get("service_addr") or "")
        if not target:
            raise InvalidParameterError("Parameter service_addr is required "
                                        "(grpc://host:port of each worker).")
        addresses.parse(target)  # an invalid address is refused before anything is written
        result = client.trace(target, self.logdir, int(values["duration_ms"]),
                              num_tracing_attempts=int(values["attempts"]),
                              token=os.environ.get(_TOKEN_ENV) or None)
        names = [n for n, p in self.runs().items() if p.name == result.run_dir.name]
        data = {**result.to_dict(), "run": names[0] if names else result.run_dir.name}
        data.pop("run_dir", None)  # the run is named, as every other tool takes it
        return answers.fit(data, "workers", sizing)


def _stat(path: Path) -> tuple[int, int]:
    try:
        st = path.stat()
    except OSError:
        return (0, 0)
    return (st.st_mtime_ns, st.st_size)


def _check_types(tool: McpTool, args: Mapping[str, Any]) -> None:
    """JSON values of the wrong shape for a declared parameter (a list, an object, a number
    for a name) are refused here; the declaration's parser checks the rest."""
    kinds = {p.name: p.kind for p in tool.params}
    for key, value in args.items():
        kind = kinds.get(key)
        if kind is None or value is None:
            continue
        bad = isinstance(value, list | dict) or (
            kind in ("text", "run") and not isinstance(value, str)) or (
            kind == "int" and isinstance(value, float))
        if bad:
            raise InvalidParameterError(f"Parameter {key} must be {_KINDS[kind]}, not "
                                        f"{type(value).__name__} {str(value)[:40]!r}.")
