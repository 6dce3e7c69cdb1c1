"""A run loaded for the web UI: a ``Run``, with the long computations it runs in the
background (the trace viewer's index) and what they offer before they are done.

The background work writes to the cache as its owner's (``writes``: the run's own, or its
store's): once the owner is closed (``release``, a store's ``close``) it writes nothing more,
and a save under way ends whole before ``release`` returns."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from stepscope.model.cache import Writes, writes_for
from stepscope.model.run_tables import RunTables
from stepscope.run import Run


class LoadedRun(Run):
    """A run held by the web server's store, and its background computations."""

    def __init__(self, profile: RunTables, *, use_cache: bool = True,
                 writes: Writes | None = None) -> None:
        super().__init__(profile, use_cache=use_cache)
        # A store's runs write as the store (its ``close`` stops them all, those of runs it
        # creates later too); a run of its own owns its writes.
        self.writes = writes if writes is not None else Writes()
        self._owns_writes = writes is None
        self._background: dict[tuple[Any, ...], Future[Any]] = {}
        self._background_lock = threading.Lock()
        self._shares: dict[tuple[Any, ...], float] = {}
        # What a background computation offers before it is done (the trace viewer's coarse
        # overview while its index builds); written by that computation's thread only.
        self.partials: dict[tuple[Any, ...], Any] = {}
        # Set once the trace viewer of the first host can answer exactly (its per-track table
        # or index is there) or its build has ended: a one-host run's model is built only
        # after that (``store``), not beside it.
        self.trace_ready = threading.Event()

    @property
    def profile(self) -> RunTables:
        """The run's host tables (each read on first use)."""
        return self.tables

    def background(self, key: tuple[Any, ...],
                   compute: Callable[[Callable[[float], None]], Any]) -> Future[Any]:
        """``compute(report)`` once per key for this run, in a thread of its own, so that a
        long computation blocks neither the request that asked for it nor the run's other
        tools; ``report(share)`` tells how far it has got (see ``share``).
        """
        with self._background_lock:
            future = self._background.get(key)
            if future is None:
                future = self._background[key] = Future()
                self._shares[key] = 0.0

                def report(share: float) -> None:
                    self._shares[key] = share

                threading.Thread(target=fill,
                                 args=(future, lambda: compute(report), self.writes),
                                 daemon=True, name=f"stepscope-{key[0]}").start()
        return future

    def release(self) -> None:
        """Stop the background work's cache writes: none is written after this returns (a
        computation still running answers its waiters, but saves nothing). A store's run
        leaves this to the store (``RunStore.close``)."""
        if self._owns_writes:
            self.writes.close()

    def started(self, key: tuple[Any, ...]) -> Future[Any] | None:
        """The background computation of ``key``, where one was started."""
        with self._background_lock:
            return self._background.get(key)

    def share(self, key: tuple[Any, ...]) -> float:
        """How far the background computation of ``key`` has got (0 to 1)."""
        return self._shares.get(key, 0.0)


BACKGROUND_NICE = 10  # how much lower a background thread's priority is than the server's


def background_priority() -> None:
    """Lower the calling thread's CPU priority (and that of the threads it starts from now,
    compiled ones included, which inherit it) below the server's: its answers then take the
    cores first on a busy machine, a zoom's in tens of ms while a big file is read, laid out
    and indexed, which take as long as before when no answer is asked for. Linux only (where
    a nice value is a thread's own); nothing elsewhere, or where the system refuses."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError):
        tid = threading.get_native_id()
        target = min(os.getpriority(os.PRIO_PROCESS, os.getpid()) + BACKGROUND_NICE, 19)
        if os.getpriority(os.PRIO_PROCESS, tid) < target:  # (raised only: never lowered)
            os.setpriority(os.PRIO_PROCESS, tid, target)


def fill(future: Future[Any], compute: Callable[[], Any], writes: Writes | None) -> None:
    """``future``'s result (or exception) made by ``compute()``, in the calling thread (a
    background one: its priority lowered), its cache writes ``writes``'s."""
    background_priority()
    try:
        with writes_for(writes):
            result = compute()
        future.set_result(result)
    except BaseException as err:  # handed to whoever asks for the result
        future.set_exception(err)
