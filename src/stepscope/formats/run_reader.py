"""Reading a run from disk: each host's file into an event table, through the cache.

``load(path)`` accepts a TensorBoard logdir (newest run), a run directory, a directory written
by PyTorch's ``tensorboard_trace_handler``, or a single file (``.xplane.pb``, Kineto
``.json``/``.json.gz``, TensorFlow's timeline ``ctf.json``, RunMetadata/StepStats
``.pb``/``.pbtxt``). Each host's table comes from the on-disk cache when it is fresh.
"""

from __future__ import annotations

import json
import stat
from collections.abc import Callable
from pathlib import Path

from stepscope.errors import ProfileFormatError, StepscopeError
from stepscope.model import cache, schema
from stepscope.model.events import EventTable
from stepscope.model.logdir import host_name, host_names, is_step_stats_path, resolve
from stepscope.model.run_tables import Progress, RunTables

__all__ = ["host_names", "load", "load_file", "reader_of"]  # host_names lives in model.logdir


def load_file(path: Path, *, use_cache: bool = True,
              saved: Callable[[Callable[[], None]], None] | None = None) -> EventTable:
    """Load one profile file into an event table, through the cache when allowed; a table
    just parsed is saved to the cache at once, or by whoever ``saved`` hands the save to
    (the web server: after its first answers)."""
    _check_readable(path)
    if use_cache:
        cached = cache.load_table(path)
        if cached is not None:
            return cached
    table = reader_of(path)(path)
    if use_cache:
        if saved is None:
            cache.save_table(path, table)
        else:
            saved(lambda: cache.save_table(path, table, remap=True))
    return table


def reader_of(path: Path) -> Callable[[Path], EventTable]:
    """The parser of a file like ``path`` (an event table from the file; no cache). Each
    format's reader is imported here, when a file of it is first read: a server's first
    trace window waits for one reader only (``web.store.RunStore.preload`` imports it before
    its reading thread starts)."""
    if path.name.endswith(schema.XPLANE_SUFFIX):
        from stepscope.formats.xspace_to_tables import load_xspace

        def xspace(file: Path) -> EventTable:
            table = load_xspace(file)
            _attach_hlo_op_names(table, file)
            return table

        return xspace
    if is_step_stats_path(path):
        from stepscope.formats.step_stats_to_tables import load_step_stats

        def step_stats(file: Path) -> EventTable:
            table = load_step_stats(file)
            table.hostnames = table.hostnames or [host_name(file)]
            return table

        return step_stats
    from stepscope.formats.kineto_to_tables import load_chrome_trace

    def chrome_trace(file: Path) -> EventTable:
        table = load_chrome_trace(file)
        if not table.hostnames:
            table.hostnames = [host_name(file)]
        return table

    return chrome_trace


def _attach_hlo_op_names(table: EventTable, path: Path) -> None:
    """Give the table, as a stat of its first device plane, the framework op of each HLO
    instruction its events name (``hlo_op``), and the op types the HLO gives, from the
    file's HLO protos: XProf names an XLA kernel's op this way. Nothing is attached where the
    file holds no HLO or it is unreadable (the kernel stats then read the kernels' own
    ``name`` stat)."""
    device = next((p for p in table.planes if p.name.startswith("/device:")), None)
    if device is None:
        return
    wanted = set(table.text_stat("hlo_op")[2])
    from stepscope.formats.xspace_to_xla import may_hold_hlo

    if not wanted or not may_hold_hlo(path):
        return
    from stepscope.formats.xspace_to_hlo import load_hlo

    try:
        modules, _, _ = load_hlo(path)
    except StepscopeError:
        return  # the op names stay the events' own
    names: dict[str, dict[str, str]] = {}
    types: dict[str, dict[str, str]] = {}
    for pid, module in modules.items():
        found = [i for c in module.computations for i in c.instructions if i.name in wanted]
        if found:
            names[pid] = {i.name: i.op_name for i in found}
        typed = {i.name: i.op_type for i in found if i.op_type}
        if typed:
            types[pid] = typed
    if names:
        device.stats[schema.HLO_OP_NAMES] = json.dumps(names, sort_keys=True)
    if types:
        device.stats[schema.HLO_OP_TYPES] = json.dumps(types, sort_keys=True)


def load(path: str | Path, *, use_cache: bool = True,
         progress: Progress | None = None) -> RunTables:
    """Load the run that ``path`` names (see the module docstring for what it may be).

    A host whose file cannot be read is listed in ``failed`` while the others load; when no
    host loads, the first host's problem is raised as a ProfileFormatError.
    """
    run, where, files, others = resolve(path)
    sizes = [_size(f) for f in files]
    total, done = sum(sizes), 0
    hosts: dict[str, EventTable] = {}
    sources: dict[str, Path] = {}
    failed: dict[str, str] = {}
    for file, size, name in zip(files, sizes, host_names(files), strict=True):
        if progress:
            progress(done, total, file.name)
        try:
            hosts[name] = load_file(file, use_cache=use_cache)
            sources[name] = file
        except ProfileFormatError as err:
            failed[name] = str(err)
        done += size
        if progress:
            progress(done, total, file.name)
    if not hosts:
        raise ProfileFormatError(next(iter(failed.values())))
    return RunTables(run=run, path=where, hosts=dict(sorted(hosts.items())),
                   sources=sources, failed=failed, other_runs=others)


def _check_readable(path: Path) -> None:
    """Raise ProfileFormatError for what cannot be a profile before anything reads it: an
    empty file, or no regular file at all (reading a FIFO would block forever)."""
    try:
        st = path.stat()
    except OSError as err:
        raise ProfileFormatError(f"Cannot read {path} ({err.strerror or err}).") from err
    if not stat.S_ISREG(st.st_mode):
        raise ProfileFormatError(f"{path} is not a regular file, so not a profile.")
    if st.st_size == 0:
        raise ProfileFormatError(f"{path} is empty (0 bytes): not a profile. A profiler that "
                                 "was stopped while writing can leave such a file.")


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0
