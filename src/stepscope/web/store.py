"""Runs loaded for the web UI: each once, in a background thread, with its progress.

The first request for a run starts loading it and is told how far loading has got; later
requests get the loaded run (and the results computed from it), or the error that loading it
ended with, until its files change.
Only the few most recently used runs stay in memory. Once a run is loaded, the trace
viewer's index of its first host starts building in the background.

A run of one host is opened the other way round: its table is read first, and the trace
viewer's coarse overview and index start from it at once (``RunState.early``: the trace
viewer answers from it before the run model is built); the run model is then built from the
same table in memory, not read again (or read from the cache). It is built once something
needs it (``RunState.wanted``: another page, a status or CSV request), or once the trace
viewer's index is built (``trace.index_pending``; with ``MODEL_WAIT_S`` set, at most that long
after the trace viewer can answer exactly): until then the first trace window has the CPU (2
cores, one GIL) to itself, and the model's build does not add its memory to the index's.

``stepscope serve`` starts loading the newest run (the page's first) before it imports the
rest of its web stack (``RunStore.preload``), so the two overlap: the file's decode runs
without the GIL while the server imports.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stepscope.errors import StepscopeError
from stepscope.formats.run_reader import host_names, load_file, reader_of
from stepscope.model.cache import Writes, writes_for
from stepscope.model.logdir import newest_run, resolve
from stepscope.model.run_tables import LazyTables, Progress, RunTables
from stepscope.run.loader import cached_model, keep_results, open_run_model, save_model
from stepscope.run.storage import give_back_freed_memory
from stepscope.web.loaded_run import LoadedRun, background_priority

if TYPE_CHECKING:  # the run model's modules are imported when one is built, not at start-up
    from stepscope.analysis.run_model import RunModel
    from stepscope.model.events import EventTable

log = logging.getLogger("stepscope.web")

Signature = tuple[tuple[str, int, int, int], ...]
# The longest a one-host run's model waits for the trace viewer's index, once the trace
# viewer can answer exactly (None: until the index is built, or something needs the model).
MODEL_WAIT_S: float | None = None


@dataclass
class RunState:
    """One run's loading state."""

    signature: Signature
    state: str = "loading"  # loading → ready | failed
    done: int = 0  # bytes read so far
    total: int = 0  # bytes to read
    file: str = ""  # file being read
    error: str = ""
    run: LoadedRun | None = None
    early: LoadedRun | None = None  # a one-host run before its run model (trace viewer only)
    saves: list[Callable[[], None]] = field(default_factory=list)  # cache writes put off
    # Set once something needs the run model: a page other than the trace viewer, a status or
    # CSV request. A one-host run's model is built after that or once the trace viewer's index
    # is built (``_wait_for_first_window``), so that it does not compete with the first window
    # nor add its memory to the index's build.
    wanted: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)  # one analysis at a time

    def progress(self) -> dict[str, Any]:
        """The JSON form of where loading stands."""
        out: dict[str, Any] = {"status": self.state, "done_bytes": self.done,
                               "total_bytes": self.total, "file": self.file}
        if self.error:
            out["error"] = self.error
        return out


def signature(path: Path) -> Signature:
    """What identifies a run's contents: its files with their sizes, modification times and
    status-change times (a file made readable again counts as changed)."""
    _, _, files, _ = resolve(path)
    out = []
    for f in files:
        try:
            st = f.stat()
            out.append((str(f), st.st_size, st.st_mtime_ns, st.st_ctime_ns))
        except OSError:
            out.append((str(f), -1, -1, -1))
    return tuple(out)


class RunStore:
    """Loaded runs, keyed by path; at most ``keep`` of them stay in memory."""

    def __init__(self, *, use_cache: bool = True, keep: int = 3,
                 index_traces: bool = True, engine: str = "auto") -> None:
        self._use_cache = use_cache
        self._engine = engine
        self._index_traces = index_traces
        self._keep = keep
        self._lock = threading.Lock()
        self._runs: OrderedDict[Path, RunState] = OrderedDict()
        # The cache writes of every thread the store starts (its runs' too): ``close``
        # stops them, so a closed store writes nothing more.
        self.writes = Writes()

    def close(self) -> None:
        """Stop the store's background cache writes; returns once none is under way."""
        self.writes.close()

    def get(self, path: Path) -> RunState:
        """The state of the run at ``path``; starts loading it when needed."""
        sig = signature(path)
        with self._lock:
            state = self._runs.get(path)
            # A failed run is remembered as failed until its files change: reading it again
            # would fail again, and a page polling it would never hear why.
            if state is not None and state.signature == sig:
                self._runs.move_to_end(path)
                return state
            state = RunState(signature=sig, total=sum(max(s, 0) for _, s, _, _ in sig))
            self._runs[path] = state
            self._runs.move_to_end(path)
            while len(self._runs) > self._keep:
                self._runs.popitem(last=False)
        threading.Thread(target=_as_owner, args=(self.writes, self._load, path, state),
                         daemon=True,
                         name=f"stepscope-load-{path.name}").start()
        return state

    def preload(self, logdir: Path) -> None:
        """Start loading the newest run of ``logdir``, the one the page opens first (a server
        calls this before it imports the rest of its web stack, so that the two overlap)."""
        try:
            path = newest_run(logdir)
        except (OSError, StepscopeError):
            return  # the page's own requests say what is wrong
        if path is None:
            return
        # Its files' reader is imported here, not in the thread that reads them: that thread
        # then goes straight into the decoder, which runs without the GIL while the caller
        # imports its web stack (on two cores the two overlap; imported there, they took
        # turns and the decode started after both).
        with contextlib.suppress(OSError, StepscopeError):
            for file in resolve(path)[2]:
                reader_of(file)
        self.get(path)

    def wait(self, path: Path, timeout: float | None = None) -> RunState:
        """The state of the run at ``path`` once it is loaded or failed (or ``timeout``)."""
        state = self.get(path)
        state.wanted.set()
        deadline = None if timeout is None else time.monotonic() + timeout
        while state.state == "loading" and (deadline is None or time.monotonic() < deadline):
            time.sleep(0.02)
        return state

    def _early(self, path: Path, state: RunState) -> RunTables | None:
        """A one-host run's tables, published in ``state.early`` with the trace viewer's
        index (and overview) started; None for other runs. (Whether its run model is cached
        is looked at later, in ``_open``: that needs the run model's modules, which the first
        trace window does not.)"""
        if not self._index_traces or self._engine not in ("auto", "local", "pool"):
            return None
        run, where, files, others = resolve(path)
        if len(files) != 1:
            return None
        use_cache = self._use_cache
        sources = dict(zip(host_names(files), files, strict=True))
        # The table's cache entry is written after the run model is built, not before the
        # trace viewer's first answer.
        def load(file: Path) -> EventTable:
            # A big file's skim, for the trace viewer's first answer, started by whichever
            # thread asks for the table first (made first: the others wait for the table).
            if state.early is not None:
                _skim(state.early, file)
            return load_file(file, use_cache=use_cache, saved=state.saves.append)

        tables = LazyTables(sources, load)
        profile = RunTables(run=run, path=where, hosts=tables, sources=sources,
                            other_runs=others)
        state.early = LoadedRun(profile, use_cache=self._use_cache, writes=self.writes)
        # The table is read from now (a big file skimmed beside it or first: ``_skim``), in
        # a thread of its own: the decoder releases the GIL, so the file is read
        # while this thread imports the trace viewer's modules (and the server its web
        # stack); the index thread below takes the table once it is read.
        threading.Thread(target=_as_owner,
                         args=(self.writes, _read_ahead, tables, next(iter(sources))),
                         daemon=True,
                         name=f"stepscope-read-{path.name}").start()
        from stepscope.web.trace import start_index

        start_index(state.early, None)
        return profile

    def _open(self, path: Path, progress: Progress,
              early: RunTables | None = None, state: RunState | None = None
              ) -> tuple[RunTables, RunModel]:
        """The run's model (on the store's engine, or from the cache), and its host tables,
        each read only when a tool first needs it (``early``: a one-host run's tables, the
        model built from them)."""
        if early is not None:
            name, file = next(iter(early.sources.items()))
            progress(0, state_total(file), name)
            if state is not None:
                _wait_for_first_window(state)
            model = cached_model([file]) if self._use_cache else None
            if model is None:
                # Waits for the table the index thread reads.
                model = keep_results(build_run_model(early))
                if self._use_cache:
                    # What the build freed inside the C heap handed back first: the save's
                    # text is made beside what the model holds, not beside that too.
                    give_back_freed_memory()
                    save_model([file], model)
            while state is not None and state.saves:
                state.saves.pop()()
            progress(state_total(file), state_total(file), name)
            return early, model
        model = open_run_model(path, use_cache=self._use_cache, progress=progress,
                               engine=self._engine)
        run, where, files, others = resolve(path)
        sources = {name: file for name, file in zip(host_names(files), files, strict=True)
                   if name in model.hosts}
        use_cache = self._use_cache
        tables = LazyTables(sources, lambda file: load_file(file, use_cache=use_cache))
        profile = RunTables(run=run, path=where, hosts=tables, sources=sources,
                            failed=dict(model.failed), other_runs=others)
        return profile, model

    def _load(self, path: Path, state: RunState) -> None:
        def progress(done: int, total: int, file: str) -> None:
            state.done, state.total, state.file = done, total, file

        try:
            profile, model = self._open(path, progress, self._early(path, state), state)
        except StepscopeError as err:
            state.error, state.state = str(err), "failed"
            log.warning("stepscope serve: %s", err)  # once: the failure is kept (see get)
            return
        except Exception as err:  # a bug must not leave the page waiting for ever
            state.error, state.state = f"Loading failed: {err!r}", "failed"
            raise
        # The model's build freed more than it keeps, inside the C heap: handed back, not held
        # for as long as the server runs.
        give_back_freed_memory()
        run = state.early or LoadedRun(profile, use_cache=self._use_cache, writes=self.writes)
        run.attach_model(model)
        state.run = run
        state.state = "ready"
        if self._index_traces and profile.hosts and state.early is None:
            # The trace viewer's index of a large trace takes seconds to build: start it now,
            # so that it is ready by the time the user has read the overview and opens it.
            from stepscope.web.trace import start_index

            start_index(state.run, None)


def _as_owner(writes: Writes, fn: Callable[..., None], *args: Any) -> None:
    """``fn(*args)`` in a background thread (its priority lowered), its cache writes the
    store's (see ``RunStore.close``)."""
    background_priority()
    with writes_for(writes):
        fn(*args)


def build_run_model(profile: RunTables) -> RunModel:
    """``analysis.run_model.build_run_model``, its modules imported on first use (a server's
    first trace window does not wait for them)."""
    from stepscope.analysis.run_model import build_run_model as build

    return build(profile)


def _wait_for_first_window(state: RunState) -> None:
    """Until something needs the run model, or the trace viewer's index is built (at most
    ``MODEL_WAIT_S`` once the trace viewer can answer exactly, where set: counted from then,
    since on a busy machine its table alone may take longer, and the model's build would slow
    it)."""
    from stepscope.web.trace import index_pending

    early = state.early
    while early is not None and not early.trace_ready.is_set() and not state.wanted.is_set():
        early.trace_ready.wait(0.02)
    until = None if MODEL_WAIT_S is None else time.monotonic() + MODEL_WAIT_S
    while (early is not None and not state.wanted.is_set()
           and (until is None or time.monotonic() < until) and index_pending(early, None)):
        state.wanted.wait(0.02)


def _read_ahead(tables: LazyTables, name: str) -> None:
    """Read one host's table ahead of its first use; a failure is left for that use to meet
    and report (it reads the file again)."""
    try:
        tables[name]
    except Exception:  # reported by the reader that needs the table
        log.debug("stepscope serve: reading %s ahead failed", name, exc_info=True)


def _skim(run: LoadedRun, file: Path) -> None:
    """The skim of a big host file for ``run``'s trace viewer (``web.trace.publish_skim``),
    as ``web.skim_ahead.skim_mode`` says: in a thread beside the table's read, or before it, here
    (a failure then is logged in one line and the table read as usual: a first picture never
    costs the table)."""
    from stepscope.web.skim_ahead import skim_mode
    from stepscope.web.trace import publish_skim

    mode = skim_mode()
    if mode == "beside":
        threading.Thread(target=publish_skim, args=(run, None), daemon=True,
                         name="stepscope-skim").start()
    elif mode == "first":
        try:
            publish_skim(run, None)
        except Exception as err:
            log.warning("stepscope serve: skimming %s failed (%r); reading its table as "
                        "usual", file, err)
            log.debug("the skim's failure", exc_info=True)


def state_total(file: Path) -> int:
    """A file's size for the progress report (0 where it cannot be read)."""
    try:
        return file.stat().st_size
    except OSError:
        return 0

