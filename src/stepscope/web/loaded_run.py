"""A run loaded for the web UI, with the results computed from it so far (see ``store``)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from stepscope.model.run_tables import RunTables


class LoadedRun:
    """A loaded run and the results computed from it so far."""

    def __init__(self, profile: RunTables, *, use_cache: bool = True) -> None:
        self.profile = profile
        self.use_cache = use_cache  # whether results may be read from and kept on disk
        self._results: dict[tuple[Any, ...], Any] = {}
        self._background: dict[tuple[Any, ...], Future[Any]] = {}
        self._background_lock = threading.Lock()
        self._shares: dict[tuple[Any, ...], float] = {}
        # What a background computation offers before it is done (the trace viewer's coarse
        # overview while its index builds); written by that computation's thread only.
        self.partials: dict[tuple[Any, ...], Any] = {}

    def result(self, key: tuple[Any, ...], compute: Callable[[], Any]) -> Any:
        """``compute()``, once per key for this run (callers serialise access per run)."""
        if key not in self._results:
            self._results[key] = compute()
        return self._results[key]

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

                threading.Thread(target=_fill, args=(future, lambda: compute(report)),
                                 daemon=True, name=f"stepscope-{key[0]}").start()
        return future

    def share(self, key: tuple[Any, ...]) -> float:
        """How far the background computation of ``key`` has got (0 to 1)."""
        return self._shares.get(key, 0.0)


def _fill(future: Future[Any], compute: Callable[[], Any]) -> None:
    try:
        future.set_result(compute())
    except BaseException as err:  # handed to whoever asks for the result
        future.set_exception(err)
