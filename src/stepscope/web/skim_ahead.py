"""A server's skim of its first run's big file, started before the server imports NumPy and
the rest of its modules (``web.http_server.serve``), and handed to the trace viewer's first
picture (``web.trace.publish_skim``) when it asks.

The skim (``formats.xspace_skim``) is what a big file's first window waits for: at 1 GB its
pass over the file takes about 0.9 s on two cores. Started here, that pass runs while the
server imports what it needs (NumPy, the store, the web stack: a third of a second) instead
of after: only its pass over the file (``xspace_skim_pass``, no NumPy) runs here, and
nothing but the standard library, protobuf and that pass's module is imported for it. Each
pass is taken once; a file that changed since is skimmed again. Also here, so that this
module needs nothing heavier: when a file is big enough to skim (``SKIM_BYTES``) and how
(``skim_mode``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING

from stepscope.errors import StepscopeError
from stepscope.model import schema

if TYPE_CHECKING:
    from stepscope.formats.xspace_skim_pass import SkimPass

log = logging.getLogger(__name__)

# A file this big gets a skimmed first picture while its table is decoded (at 1 GB the decode
# takes seconds, the skim about a third of that); below it the table comes soon enough.
SKIM_BYTES = 256 << 20

FIND_WAIT_S = 5.0  # how long ``take`` waits for ``start``'s thread to find its file

_lock = threading.Lock()
# Per file: its signature (size, modification time) and its pass, done or under way.
_passes: dict[str, tuple[tuple[int, int], Future[SkimPass | None]]] = {}
# Clear while a thread ``start`` began is finding its file: ``take`` waits, so that a file is
# never skimmed twice (once ahead, once by a ``take`` that came too early to find it).
_found = threading.Event()
_found.set()


def skim_mode() -> str:
    """How a big file is skimmed (``web.trace.publish_skim``): ``"beside"`` its decode where
    the machine has 4 cores or more for both (``usable_cores``), else ``"first"``, before the
    decode (its first picture, and a zoom's real events from its blocks, 1 to 2 s from the
    start at 1 GB; the exact windows about the skim's second later); ``STEPSCOPE_TRACE_SKIM``
    says so instead: ``beside`` (or 1), ``first``, or ``off`` (or 0)."""
    forced = os.environ.get("STEPSCOPE_TRACE_SKIM", "").strip().lower()
    if forced in ("0", "off"):
        return "off"
    if forced in ("1", "beside", "first"):
        return "first" if forced == "first" else "beside"
    return "beside" if usable_cores() >= 4 else "first"


def usable_cores() -> int:
    """The cores this process may run on (its affinity where the system says: a container's
    cpuset, not the host's count)."""
    if hasattr(os, "sched_getaffinity"):
        with contextlib.suppress(OSError):
            return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def skimmable(file: Path, use_cache: bool) -> bool:
    """Whether ``file`` gets a skim: a local XSpace file of ``SKIM_BYTES`` or more whose table
    is not in the cache (a cached table is read in a fraction of the skim's time)."""
    from stepscope.model.locations import is_remote

    if not file.name.endswith(schema.XPLANE_SUFFIX) or is_remote(file):
        return False
    try:
        if file.stat().st_size < SKIM_BYTES:
            return False
    except OSError:
        return False
    from stepscope.model.cache_format import has_table

    return not (use_cache and has_table(file))


def start(logdir: Path, use_cache: bool) -> None:
    """Skim the newest run of ``logdir`` (the one a server opens first) in a thread of its
    own, where it is one big local XSpace file and skims are on (``skim_mode``); nothing
    otherwise. Never raises: what is wrong with the logdir is for the server to say."""
    if skim_mode() == "off":
        return
    _found.clear()
    threading.Thread(target=_find_and_skim, args=(logdir, use_cache), daemon=True,
                     name="stepscope-skim-ahead").start()


def _find_and_skim(logdir: Path, use_cache: bool) -> None:
    future: Future[SkimPass | None] = Future()
    try:
        file = _find(logdir, use_cache)
        if file is None:
            return
        with _lock:
            if str(file) in _passes:
                return
            _passes[str(file)] = (_signature(file), future)
    except (OSError, StepscopeError):
        return
    finally:
        _found.set()
    future.set_running_or_notify_cancel()
    try:
        from stepscope.formats.xspace_skim_pass import skim_pass

        future.set_result(skim_pass(file))
    except Exception as err:  # handed to the one who takes it, who reports it
        log.debug("stepscope serve: skimming %s ahead failed", file, exc_info=True)
        future.set_exception(err)


def _find(logdir: Path, use_cache: bool) -> Path | None:
    """The newest run's file where it is one to skim, else None."""
    from stepscope.model.locations import is_remote
    from stepscope.model.logdir import newest_run, resolve

    if is_remote(logdir):
        return None
    run = newest_run(logdir)
    if run is None:
        return None
    files = resolve(run)[2]
    return files[0] if len(files) == 1 and skimmable(files[0], use_cache) else None


def take(file: Path) -> Future[SkimPass | None] | None:
    """The pass over ``file`` started ahead (done or under way: its ``result()`` waits, and
    raises what the pass raised), once; None where none was, or the file changed since."""
    _found.wait(FIND_WAIT_S)
    with _lock:
        entry = _passes.pop(str(file), None)
    if entry is None:
        return None
    try:
        same = _signature(file) == entry[0]
    except OSError:
        same = False
    return entry[1] if same else None


def _signature(file: Path) -> tuple[int, int]:
    st = file.stat()
    return st.st_size, st.st_mtime_ns
