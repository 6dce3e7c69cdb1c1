"""``Run``: one profiled run, opened once, and every tool's answer for it.

``stepscope.open(path)`` is the one door to a run for the command line, the web API, the
TensorBoard plugin, notebooks and the MCP server. It finds the run's files, and reads what a
tool needs only when the tool is first asked: the run model (``analysis.run_model``) through
the on-disk cache, a host's event table, the XLA programs. Every tool is declared once
(``run.tools``); ``Run.tool(name, host, **params)`` checks the parameters against the
declaration and answers a ``ToolResult``, kept for the next ask.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stepscope.errors import NotFoundError, not_found
from stepscope.model.logdir import host_names, resolve
from stepscope.model.run_tables import LazyTables, Progress, RunTables
from stepscope.run import loader
from stepscope.run.engines import check_engine
from stepscope.run.kept import keep_result, kept_result
from stepscope.run.params import number_text
from stepscope.run.result import ToolResult

if TYPE_CHECKING:
    from stepscope.analysis.run_model import RunModel
    from stepscope.analysis.trace.trace_index import TraceIndex
    from stepscope.analysis.xla.hlo_programs import HloProgram
    from stepscope.analysis.xla.xla_model import XlaModel


def _load_file(file: Path, *, use_cache: bool) -> Any:
    """One host's event table (the readers are imported when a table is first needed: a
    cached run answers its tools without them)."""
    from stepscope.formats.run_reader import load_file

    return load_file(file, use_cache=use_cache)


def _storage() -> Any:
    """``stepscope.run.storage`` (it imports the trace viewer's index), on first use."""
    from stepscope.run import storage

    return storage


class Run:
    """One run: its hosts' files, read as tools need them, and the tools' answers."""

    def __init__(self, tables: RunTables, model: RunModel | None = None, *,
                 use_cache: bool = True, engine: str = "auto",
                 progress: Progress | None = None) -> None:
        self.tables = tables
        self.use_cache = use_cache  # whether results may be read from and kept on disk
        self.engine = engine
        self._progress = progress
        self._model = model
        self._origin: str | Path | None = None  # the path the run was opened by
        self._results: dict[tuple[Any, ...], Any] = {}

    @classmethod
    def open(cls, path: str | Path, *, engine: str = "auto", cache: bool = True,
             progress: Progress | None = None) -> Run:
        """The run that ``path`` names: a logdir (its newest run), a run directory, one
        file, or a URL of any of these. Nothing is read until a tool asks."""
        check_engine(engine)
        run, where, files, others = resolve(path)
        sources = dict(zip(host_names(files), files, strict=True))
        tables = LazyTables(sources, lambda file: _load_file(file, use_cache=cache))
        profile = RunTables(run=run, path=where, hosts=tables, sources=sources,
                            other_runs=others)
        opened = cls(profile, use_cache=cache, engine=engine, progress=progress)
        opened._origin = path
        return opened

    # -- what the run is ----------------------------------------------------------------------

    @property
    def name(self) -> str:
        """The run's name (its directory, or a lone file's stem)."""
        return self.tables.run

    @property
    def path(self) -> Path:
        """The directory or file the run was found in."""
        return self.tables.path

    @property
    def model(self) -> RunModel:
        """The run model: from the cache when fresh, else built from the hosts' tables."""
        if self._model is None:
            if self._origin is not None:  # each host a task on the engine, or the cache
                self._model = loader.open_run_model(
                    self._origin, use_cache=self.use_cache, progress=self._progress,
                    engine=self.engine)
                self._drop_failed(self._model)
            else:
                self._model = loader.run_model_of(self.tables, use_cache=self.use_cache)
        return self._model

    def attach_model(self, model: RunModel) -> None:
        """Use ``model`` (built elsewhere from the same files) as the run's model."""
        self._model = model
        self._drop_failed(model)

    def _drop_failed(self, model: RunModel) -> None:
        """Hosts whose files could not be read are the model's ``failed``, not tables."""
        if not model.failed:
            return
        sources = {n: f for n, f in self.tables.sources.items() if n in model.hosts}
        self.tables.sources = sources
        self.tables.failed = dict(model.failed)
        use_cache = self.use_cache
        self.tables.hosts = LazyTables(sources, lambda f: _load_file(f, use_cache=use_cache))

    @property
    def hosts(self) -> list[str]:
        """The hosts that could be read, in name order."""
        return list(self.model.hosts)

    @property
    def failed(self) -> dict[str, str]:
        """Hosts that could not be read, with why."""
        return dict(self.model.failed)

    def check_host(self, host: str | None) -> str | None:
        """``host`` if the run has it (None: every host); else a NotFoundError."""
        if host is None:
            return None
        if host in self.model.failed:
            raise NotFoundError(f"Host {host!r} could not be read: {self.model.failed[host]}")
        if host not in self.model.hosts:
            raise not_found("host", host, f"run {self.name!r}", list(self.model.hosts))
        return host

    # -- results ------------------------------------------------------------------------------

    def result(self, key: tuple[Any, ...], compute: Callable[[], Any]) -> Any:
        """``compute()``, once per key for this run (callers serialise access per run)."""
        if key not in self._results:
            self._results[key] = compute()
        return self._results[key]

    def tool(self, name: str, host: str | None = None, **params: object) -> ToolResult:
        """The answer of the tool declared as ``name`` (see ``run.tools.TOOLS``), for the
        whole run or one host; ``params`` checked against the tool's declaration."""
        from stepscope.run.tools import ToolNotAvailableError, spec

        chosen = spec(name)
        values = chosen.parse(params)
        host = self.check_host(host)
        key = ("tool", chosen.name, host, tuple(sorted(values.items())))
        if key not in self._results:
            kept = kept_result(self._files(), chosen.name, host, values) \
                if chosen.keep and self.use_cache else None
            if kept is not None:
                self._results[key] = kept
            else:
                # ``available`` only decides what is listed; a tool answers what it can.
                if not chosen.offered(self):
                    raise ToolNotAvailableError(chosen.unavailable(self))
                result = chosen.compute(self, host, values)
                if chosen.keep and self.use_cache and not self.failed:
                    keep_result(self._files(), result, host, values)
                self._results[key] = result
        answer: ToolResult = self._results[key]
        return answer

    def _files(self) -> list[Path]:
        """The run's files, which a kept answer belongs to. (An answer is kept only while
        every host could be read: the same files then give no kept answer to read back, and
        a fixed file is read again.)"""
        return [self.tables.sources[n] for n in sorted(self.tables.sources)]

    def tool_available(self, name: str, host: str | None = None) -> bool:
        """Whether tool ``name`` has anything to show for this run (and host)."""
        from stepscope.run.tools import spec

        return spec(name).available_for(self, host)

    def available_tools(self, host: str | None = None) -> list[str]:
        """The tools with something to show for this run (and host)."""
        from stepscope.run.tools import TOOLS

        return [t.name for t in TOOLS.values() if t.available_for(self, host)]

    # One method per tool: each is ``tool(<its name>, …)``.

    def overview(self, host: str | None = None, *,
                 peak_tflops: float | None = None) -> ToolResult:
        """The overview page: step time, its breakdown, top ops, MFU, advice (MFU against
        ``peak_tflops`` per device where given)."""
        return self.tool("overview_page", host, peak_tflops=number_text(peak_tflops))

    def advice(self) -> ToolResult:
        """What to change, each rule with its evidence."""
        return self.tool("advice")

    @property
    def steps(self) -> ToolResult:
        """Every host's steps: number, start, end and duration."""
        return self.tool("steps")

    def op_stats(self, host: str | None = None, *,
                 include_idle: bool = False) -> ToolResult:
        """Framework op stats: time and self time per op."""
        return self.tool("framework_op_stats", host, include_idle=include_idle)

    def kernel_stats(self, host: str | None = None) -> ToolResult:
        """GPU kernel stats."""
        return self.tool("kernel_stats", host)

    def input_pipeline(self, host: str | None = None) -> ToolResult:
        """The input pipeline analyzer."""
        return self.tool("input_pipeline_analyzer", host)

    def pod(self, host: str | None = None, *, peak_tflops: float | None = None) -> ToolResult:
        """The pod viewer: every host's step time side by side, stragglers, each host's MFU
        (against ``peak_tflops`` per device where given)."""
        return self.tool("pod_viewer", host, peak_tflops=number_text(peak_tflops))

    def memory_profile(self, host: str | None = None, *, allocator: int | str | None = None,
                       width: int | None = None) -> ToolResult:
        """The memory profile (allocator: its index or name; width: timeline points)."""
        return self.tool("memory_profile", host, allocator=allocator, width=width)

    def op_profile(self, host: str | None = None, *, top: int | None = None) -> ToolResult:
        """The op profile of the run's XLA programs."""
        return self.tool("op_profile", host, top=top)

    def hlo_op_stats(self, host: str | None = None) -> ToolResult:
        """HLO op stats of the run's XLA programs."""
        return self.tool("hlo_op_stats", host)

    def roofline(self, host: str | None = None) -> ToolResult:
        """The roofline model of the run's XLA programs."""
        return self.tool("roofline_model", host)

    def memory_viewer(self, program: str | None = None, *, memory_space: int = 0,
                      host: str | None = None) -> ToolResult:
        """The XLA memory viewer of one program (default: the most time-consuming)."""
        return self.tool("memory_viewer", host, module=program, memory_space=memory_space)

    def graph_viewer(self, op: str | None = None, *, program: str | None = None,
                     depth: int = 2, expand_fusions: bool = False,
                     host: str | None = None) -> ToolResult:
        """The HLO graph around one op."""
        return self.tool("graph_viewer", host, op=op, module=program, depth=depth,
                         expand_fusions=expand_fusions)

    def trace_window(self, start_ns: int | None = None, end_ns: int | None = None, *,
                     width: int = 1000, host: str | None = None) -> ToolResult:
        """The trace viewer's events of a time range (ns from the trace's start; default the
        whole trace) at ``width`` pixels' detail."""
        return self.tool("trace_window", host, start_ns=start_ns, end_ns=end_ns, width=width)

    def trace_search(self, text: str, *, host: str | None = None) -> ToolResult:
        """Trace events whose name holds ``text``, in time order."""
        return self.tool("trace_search", host, q=text)

    def trace_summary(self, start_ns: int | None = None, end_ns: int | None = None, *,
                      host: str | None = None) -> ToolResult:
        """Events of a time range summed by name: count and time."""
        return self.tool("trace_summary", host, start_ns=start_ns, end_ns=end_ns)

    def summary(self) -> ToolResult:
        """The run's small, versioned summary (what ``diff`` and ``check`` compare)."""
        return self.tool("summary")

    def open_other(self, path: str | Path) -> Run:
        """Another run (a baseline), opened as this one was (cache, engine)."""
        return Run.open(path, engine=self.engine, cache=self.use_cache)

    def diff(self, base: Run | str | Path) -> ToolResult:
        """This run against the baseline ``base`` (a Run, or the path of one)."""
        return self.tool("diff", base=str(base.path if isinstance(base, Run) else base))

    # -- what the tools read ------------------------------------------------------------------

    def xla(self, host: str | None = None) -> XlaModel:
        """The XLA model of the run, or of one host (from the cache when fresh)."""
        model: XlaModel = self.result(("xla_model", host), lambda: loader.xla_model_of(
            self.tables, self.model, use_cache=self.use_cache, host=host))
        return model

    def hlo_programs(self, host: str | None = None) -> dict[str, HloProgram]:
        """The XLA programs whose HLO the run's files hold, keyed by program id."""
        programs: dict[str, HloProgram] = self.result(
            ("hlo_programs", host), lambda: loader.hlo_programs_of(dict(self.tables.sources),
                                                                   host))
        return programs

    def has_xla(self) -> bool:
        """Whether the run's files may hold XLA programs (a byte probe, kept per file)."""
        return bool(self.result(("has_xla",), lambda: loader.has_xla_data(
            list(self.tables.sources.values()))))

    def has_hlo(self) -> bool:
        """Whether the run's files may hold XLA programs' HLO (a byte probe, kept per file)."""
        return bool(self.result(("has_hlo",), lambda: loader.has_hlo_data(
            list(self.tables.sources.values()))))

    def trace_index(self, host: str | None = None) -> TraceIndex:
        """The trace viewer's index of one host (default the first), built or read from
        the cache."""
        name = host or self.hosts[0]
        index: TraceIndex = self.result(("trace_index", name), lambda: _storage().index_for(
            self.tables.hosts[name], self.tables.sources.get(name), use_cache=self.use_cache))
        return index


def open_run(path: str | Path, *, engine: str = "auto", cache: bool = True,
             progress: Progress | None = None) -> Run:
    """The run that ``path`` names (see ``Run.open``)."""
    return Run.open(path, engine=engine, cache=cache, progress=progress)
