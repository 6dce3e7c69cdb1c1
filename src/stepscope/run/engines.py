"""Where a run's per-host work runs: in this process, in a local process pool, or on Ray.

Building a run model is one task per host (read the host's file where it lies, through the
local cache; classify its events; keep what the tools need) followed by one small combine.
Only the per-host results, tens of kilobytes to a few megabytes of JSON, travel back to the
caller; the event tables never do. The engines:

``local``
    every host in this process, one after another;
``pool``
    a local process pool sized to the machine's cores (the embedded engine);
``ray``, ``ray://ADDRESS``
    Ray tasks on a running cluster (``RAY_ADDRESS``, or the address given) or, with none, on
    a Ray started on this machine. Tasks read their host file where it lies, so a run in a
    bucket is never copied through the driver.

``auto`` (the default) picks ``pool`` where several hosts hold enough data to repay starting
worker processes, and ``local`` otherwise.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from stepscope.errors import InvalidOptionError, ProfileFormatError, StepscopeError
from stepscope.model.locations import as_path, redact

log = logging.getLogger(__name__)

ENGINES = ("auto", "local", "pool", "ray")
# Below this much profile data, starting worker processes costs more than it saves.
POOL_MIN_BYTES = 64 * 2**20
# A host task's memory besides its table: the interpreter, NumPy and stepscope.
TASK_BASE_BYTES = 160 * 2**20


@dataclass(frozen=True)
class HostTask:
    """One host of a run: its name and its file (a local path or a URL, as text)."""

    name: str
    file: str
    size: int


@dataclass
class HostResult:
    """What a host task sends back: the host model's JSON text, or why it failed, and the
    peak memory of the process that ran it."""

    name: str
    model_json: str | None
    error: str | None
    peak_rss_bytes: int = 0


def run_host_task(task: HostTask, use_cache: bool) -> HostResult:
    """Load one host's file and build its model (the unit of work of every engine)."""
    from stepscope.analysis.run_model import build_host, host_json
    from stepscope.formats.run_reader import load_file
    from stepscope.run.storage import map_large_blocks, memory_keeper

    # The passes' columns of a MB or more handed back to the system as each is freed, not
    # kept in the heap: their peaks then do not stack (a 48 MB TensorFlow profile's report
    # peaked at 182 MiB with glibc's own threshold, 167 MiB so), as the server has them.
    map_large_blocks()
    # Every failure becomes this host's reason, here, so that every engine gives the same
    # answer for it (the host named in failed_hosts, the others reported): the local engine
    # raising, the pool naming it and Ray wrapping it in its own traceback differed.
    try:
        table = load_file(as_path(task.file), use_cache=use_cache)
        model = build_host(task.name, table,
                           memory_keeper(as_path(task.file)) if use_cache else None)
        del table
        text = host_json(model)
    except ProfileFormatError as err:
        return HostResult(task.name, None, str(err), _peak_rss())
    except Exception as err:  # noqa: BLE001 - a bug or an unexpected error of this host
        log.debug("host %s could not be analysed", task.name, exc_info=True)
        return HostResult(task.name, None, unexpected_reason(err), _peak_rss())
    return HostResult(task.name, text, None, _peak_rss())


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def unexpected_reason(err: BaseException, where: str = "") -> str:
    """One line saying why a host failed unexpectedly (no traceback, no colour codes, no
    credentials), the same whichever engine ran it."""
    text = _ANSI.sub("", str(err)).strip()
    line = text.splitlines()[-1].strip() if text else ""
    line = redact(line)
    if len(line) > 300:
        line = line[:297] + "..."
    what = f"{type(err).__name__}: {line}" if line else type(err).__name__
    return f"it could not be analysed{where} ({what})"


def _peak_rss() -> int:
    """The peak resident memory of this process so far, in bytes (0 where unknown)."""
    try:
        import resource
    except ImportError:  # not on this platform
        return 0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak) * (1 if sys.platform == "darwin" else 1024)


def check_engine(engine: str) -> str:
    """``engine`` if it names an engine; InvalidOptionError otherwise."""
    if engine in ENGINES or engine.startswith("ray://"):
        return engine
    raise InvalidOptionError(f"engine {engine!r} is not one of {', '.join(ENGINES)} or "
                             "ray://ADDRESS.")


def choose(engine: str, tasks: list[HostTask]) -> str:
    """The engine ``auto`` means for these tasks (others are returned as they are)."""
    check_engine(engine)
    if engine != "auto":
        return engine
    if len(tasks) >= 2 and (os.cpu_count() or 1) >= 2 and \
            sum(t.size for t in tasks) >= POOL_MIN_BYTES:
        return "pool"
    return "local"


def run_tasks(tasks: list[HostTask], engine: str, *, use_cache: bool = True,
              done: Callable[[HostResult], None] | None = None) -> list[HostResult]:
    """Run every host task on ``engine``; results in the order of ``tasks``. ``done`` is told
    of each result as it arrives."""
    engine = choose(engine, tasks)
    report = done or (lambda result: None)
    if engine == "local" or (len(tasks) <= 1 and engine == "pool"):
        results = []
        for task in tasks:
            results.append(run_host_task(task, use_cache))
            report(results[-1])
        return results
    runner = _run_on_pool if engine == "pool" else _run_on_ray
    by_name = {}
    for result in runner(tasks, engine, use_cache):
        by_name[result.name] = result
        report(result)
    return [by_name[t.name] for t in tasks]


def _run_on_pool(tasks: list[HostTask], engine: str, use_cache: bool) -> Iterator[HostResult]:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    workers = max(1, min(len(tasks), os.cpu_count() or 1))
    # forkserver: the workers do not inherit this process's threads (a web server's, a
    # framework's) or their locks, as forked children would.
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        futures = {pool.submit(run_host_task, task, use_cache): task for task in tasks}
        for future in as_completed(futures):
            try:
                yield future.result()
            except Exception as err:  # its worker died: that host failed, not the run
                yield HostResult(futures[future].name, None,
                                 unexpected_reason(err, " (its worker process failed)"))


def _run_on_ray(tasks: list[HostTask], engine: str, use_cache: bool) -> Iterator[HostResult]:
    try:
        import ray
    except ImportError as err:
        raise StepscopeError("The ray engine needs Ray: pip install 'stepscope[ray]'.") from err
    address = engine if engine.startswith("ray://") else os.environ.get("RAY_ADDRESS")
    if not ray.is_initialized():
        try:
            ray.init(address=address, ignore_reinit_error=True, log_to_driver=False,
                     include_dashboard=False, logging_level=logging.ERROR)
        except Exception as err:  # Ray's own errors: no cluster at the address, and such
            raise StepscopeError(f"Cannot reach a Ray cluster at {address or 'this machine'} "
                                 f"({type(err).__name__}: {err}).") from err
    remote = ray.remote(run_host_task)
    pending = {remote.options(memory=task_memory_bytes(task.size)).remote(task, use_cache): task
               for task in tasks}
    while pending:
        ready, _ = ray.wait(list(pending), num_returns=1)
        for ref in ready:
            task = pending.pop(ref)
            try:
                yield ray.get(ref)
            except Exception as err:  # a task that died: that host failed, not the run
                cause = getattr(err, "cause", None)
                yield HostResult(task.name, None, unexpected_reason(
                    cause if isinstance(cause, BaseException) else err,
                    " (its task failed on Ray)"))


def task_memory_bytes(file_bytes: int) -> int:
    """Memory to reserve for a host task, so that a scheduler never packs more tasks on a node
    than fit: what was measured (benchmarks/engines.py: a 10.8 MB XSpace host peaks at 187 MB,
    about 60 MB of it the interpreter and libraries) rounded up, 12 bytes per file byte plus
    a base."""
    return TASK_BASE_BYTES + 12 * max(0, file_bytes)


def tasks_for(files: Iterable[Any], names: Iterable[str]) -> list[HostTask]:
    """One task per host file (sizes read where they lie; 0 where they cannot be)."""
    out = []
    for name, file in zip(names, files, strict=True):
        try:
            size = int(file.stat().st_size)
        except Exception:  # an unreadable file fails in its task, with its reason
            size = 0
        out.append(HostTask(name, str(file), size))
    return out
