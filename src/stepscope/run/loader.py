"""Opening a run for the tools: its run model, from the on-disk cache when fresh.

The run model (``analysis.run_model``) is kept in the result cache beside the host tables,
keyed by the run's files (paths, sizes, modification times): a second open of an unchanged
run reads one small JSON entry and loads no event table at all. A run with a host that failed
to load is not cached, so that a fixed file is read again.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from stepscope.errors import ProfileFormatError, StepscopeError, not_found
from stepscope.model import cache, schema
from stepscope.model.logdir import host_names, resolve
from stepscope.model.run_tables import Progress, RunTables

# What a cached open does not need (the readers and protobuf, the engines' process pool, the
# XLA and pod viewer analyses) is imported where it is used: `stepscope report` on a cached
# run starts in a fraction of the time.
if TYPE_CHECKING:
    from stepscope.analysis.run_model import RunModel
    from stepscope.analysis.xla.hlo_programs import HloProgram
    from stepscope.analysis.xla.xla_model import XlaModel
    from stepscope.model.xla_ops import XlaHostOps
    from stepscope.run.engines import HostResult

# The XLA model's cache entry, named with XLA_MODEL_VERSION (analysis.xla.xla_model).
XLA_MODEL_NAME = "xla_model.{}"


def open_run_model(path: str | Path, *, use_cache: bool = True,
                   progress: Progress | None = None, engine: str = "auto") -> RunModel:
    """The run model of the run ``path`` names (see ``run_reader.load`` for what it may be).

    Each host is a task on ``engine`` (see ``stepscope.run.engines``): only the host models come
    back, and are combined here.
    """
    from stepscope.analysis.run_model import combine
    from stepscope.run.engines import check_engine, run_tasks, tasks_for

    check_engine(engine)
    run, where, files, _ = resolve(path)
    if use_cache:
        cached = _cached(files)
        if cached is not None:
            return cached
    tasks = tasks_for(files, host_names(files))
    sizes = {t.name: t.size for t in tasks}
    total = sum(sizes.values())
    finished = 0

    def done(result: HostResult) -> None:
        nonlocal finished
        finished += sizes[result.name]
        if progress:
            progress(finished, total, result.name)

    if progress:
        progress(0, total, tasks[0].name if tasks else "")
    results = run_tasks(tasks, engine, use_cache=use_cache, done=done)
    raw = {r.name: r.model_json for r in sorted(results, key=lambda r: r.name)
           if r.model_json is not None}
    failed = {r.name: r.error or "unreadable" for r in results if r.model_json is None}
    if not raw:
        raise ProfileFormatError(next(iter(failed.values())))
    from stepscope.analysis.run_model import LazyHosts, RunModel

    model = RunModel(run, str(where), LazyHosts(raw), failed)
    model.combined = combine(model)
    keep_results(model)
    if use_cache and not model.failed:
        save_model(files, model)
    return model


def run_model_of(profile: RunTables, *, use_cache: bool = True) -> RunModel:
    """The run model of a loaded run: from the cache when fresh, else built (and kept)."""
    from stepscope.analysis.run_model import build_run_model
    from stepscope.run.storage import run_memory_keeper

    files: list[Path] = []
    if use_cache:
        try:
            files = resolve(profile.path)[2]
        except StepscopeError:
            files = []
        cached = _cached(files) if files else None
        if cached is not None and set(cached.hosts) == set(profile.hosts):
            return cached
    model = keep_results(build_run_model(
        profile, keep_memory=run_memory_keeper(profile) if use_cache else None))
    if files and not model.failed:
        save_model(files, model)
    return model


def keep_results(model: RunModel) -> RunModel:
    """Add to ``model`` the tools' results that are kept with it in the cache (the pod
    viewer's, which reads every host): a cached open answers them without decoding a host."""
    if "pod" not in model.combined:
        from stepscope.analysis.tools.run_to_pod_viewer import pod_viewer

        model.combined["pod"] = pod_viewer(model).to_dict()
    return model


def pod_dict(model: RunModel) -> dict[str, Any]:
    """The pod viewer's JSON of ``model`` (kept with it; computed for a model without it)."""
    result: dict[str, Any] = keep_results(model).combined["pod"]
    return result


def save_model(files: list[Path], model: RunModel) -> None:
    """Keep ``model`` in the cache for ``files``: the combined results as the entry's JSON
    header, each host's part as raw UTF-8 bytes of its own (JSON text inside JSON would be
    escaped and unescaped whole at every open; this way a cached open parses only the
    combined results, and a host's part when a tool asks for that host)."""
    data = model.to_dict()
    hosts: dict[str, str] = data.pop("hosts")
    data["host_names"] = list(hosts)
    cache.save_arrays(files, _model_entry(), data, {
        f"host.{i}": np.frombuffer(text.encode("utf-8"), dtype=np.uint8)
        for i, text in enumerate(hosts.values())})


def _model_entry() -> str:
    """The run model's cache entry name (its modules are imported when first needed: a
    server's first trace window does not wait for them)."""
    from stepscope.analysis.run_model import RUN_MODEL_NAME

    return RUN_MODEL_NAME


def cached_model(files: list[Path]) -> RunModel | None:
    """The run model of ``files`` from the cache, when fresh."""
    return _cached(files)


def _cached(files: list[Path]) -> RunModel | None:
    hit = cache.load_arrays(files, _model_entry())
    if hit is None:
        return None
    from stepscope.analysis.run_model import RunModel

    data, arrays = hit
    try:
        names = data.pop("host_names")
        data["hosts"] = {str(name): arrays[f"host.{i}"].tobytes().decode("utf-8")
                         for i, name in enumerate(names)}
        return RunModel.from_dict(data)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError):
        return None  # a damaged or foreign entry: build afresh (and overwrite it)


def overview_dict(path: str | Path, *, use_cache: bool = True,
                  progress: Progress | None = None, engine: str = "auto") -> dict[str, Any]:
    """The overview page of the run ``path`` names, as its JSON form."""
    return open_run_model(path, use_cache=use_cache, progress=progress,
                          engine=engine).overview_dict()


# -- XLA programs (op profile, HLO op stats, roofline) ----------------------------------------

def xla_model_of(profile: RunTables, model: RunModel | None = None, *,
                 use_cache: bool = True, host: str | None = None) -> XlaModel:
    """The XLA model of a loaded run, or of its host ``host`` (its XSpace files read again
    for their XLA parts), from the cache when fresh; ``model`` gives the steps."""
    from stepscope.analysis.xla.xla_model import HostSteps, build_xla_model
    from stepscope.formats.xspace_to_xla import load_xla, may_hold_xla

    sources = dict(sorted(profile.sources.items()))
    if host is not None:
        if host not in sources:
            raise not_found("host", host, f"run {profile.run!r}", list(sources))
        sources = {host: sources[host]}
    files: list[Path] = []
    if use_cache:
        try:
            files = resolve(profile.path)[2] if host is None else [sources[host]]
        except StepscopeError:
            files = []
        cached = _cached_xla(files) if files else None
        if cached is not None:
            return cached
    hosts: dict[str, XlaHostOps] = {}
    notes: list[str] = []
    for name, source in sources.items():
        if not source.name.endswith(schema.XPLANE_SUFFIX) or not may_hold_xla(source):
            continue
        try:
            hosts[name] = load_xla(source)
        except ProfileFormatError as err:
            notes.append(f"Host {name}: {err}")
    steps = {}
    if model is not None:
        for name in hosts:
            if name in model.hosts:
                s = model.hosts[name].steps
                steps[name] = HostSteps(s.step_num, s.start_ns, s.end_ns)
    result = build_xla_model(hosts, steps)
    result.notes[:0] = notes
    if files and not notes:
        cache.save_result(files, _xla_model_name(), result.to_dict())
    return result


def open_xla_model(path: str | Path, *, use_cache: bool = True,
                   progress: Progress | None = None, host: str | None = None) -> XlaModel:
    """The XLA model of the run ``path`` names, or of its host ``host``."""
    from stepscope.formats.run_reader import load

    _, _, files, _ = resolve(path)
    if use_cache and host is None:
        cached = _cached_xla(files)
        if cached is not None:
            return cached
    profile = load(path, use_cache=use_cache, progress=progress)
    return xla_model_of(profile, run_model_of(profile, use_cache=use_cache),
                        use_cache=use_cache, host=host)


def has_xla_data(files: list[Path]) -> bool:
    """Whether any of a run's files may hold XLA data (a byte probe, nothing decoded; each
    file's answer is kept while its size and modification time stay the same)."""
    return _any_file(files, "xla")


def has_hlo_data(files: list[Path]) -> bool:
    """Whether any of a run's files may hold XLA programs' HLO (a byte probe, kept per file
    while its size and modification time stay the same)."""
    return _any_file(files, "hlo")


def _any_file(files: list[Path], what: str) -> bool:
    for f in files:
        if not f.name.endswith(schema.XPLANE_SUFFIX):
            continue
        try:
            st = f.stat()
        except Exception:  # unreadable, or a bucket that cannot be reached: no data here
            continue
        if _probe(what, f, str(f), st.st_size, st.st_mtime_ns):
            return True
    return False


@functools.lru_cache(maxsize=1024)
def _probe(what: str, file: Path, path: str, size: int, mtime_ns: int) -> bool:
    """The byte probe's answer, kept in memory and in the on-disk cache: it reads the whole
    file (a third of a second for 150 MB), which a tool opened on a cached run must not."""
    from stepscope.formats.xspace_to_xla import may_hold_hlo, may_hold_xla

    name = f"probe_{what}"
    kept = cache.load_result([file], name) if cache.enabled() else None
    if kept is not None and isinstance(kept.get("found"), bool):
        return bool(kept["found"])
    found = may_hold_xla(path) if what == "xla" else may_hold_hlo(path)
    cache.save_result([file], name, {"found": found})  # an unwritable cache only warns
    return found


def _xla_model_name() -> str:
    from stepscope.analysis.xla.xla_model import XLA_MODEL_VERSION

    return XLA_MODEL_NAME.format(XLA_MODEL_VERSION)


def _cached_xla(files: list[Path]) -> XlaModel | None:
    from stepscope.analysis.xla.xla_model import XlaModel

    data = cache.load_result(files, _xla_model_name())
    if data is None:
        return None
    try:
        return XlaModel.from_dict(data)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError):
        return None  # a damaged or foreign entry: build afresh (and overwrite it)


# -- XLA programs' HLO (memory viewer, graph viewer) -------------------------------------------


def hlo_programs_of(sources: dict[str, Path], host: str | None = None) -> dict[str, HloProgram]:
    """The XLA programs whose HLO the run's XSpace files hold (``sources``: host → file), or
    those of its host ``host``, keyed by program id."""
    from stepscope.analysis.xla.hlo_programs import HloProgram
    from stepscope.formats.xspace_to_hlo import load_hlo
    from stepscope.formats.xspace_to_xla import may_hold_hlo

    if host is not None:
        if host not in sources:
            raise not_found("host", host, "this run", sorted(sources))
        sources = {host: sources[host]}
    programs: dict[str, HloProgram] = {}
    for name in sorted(sources):
        source = sources[name]
        if not source.name.endswith(schema.XPLANE_SUFFIX) or not may_hold_hlo(source):
            continue
        modules, names, bad = load_hlo(source)
        for pid, module in modules.items():
            programs.setdefault(pid, HloProgram(pid, names.get(pid, module.name), module))
        for pid, why in bad.items():
            programs.setdefault(pid, HloProgram(pid, names.get(pid, ""), None, why))
    return programs


def open_hlo_programs(path: str | Path, host: str | None = None) -> dict[str, HloProgram]:
    """The XLA programs with HLO of the run ``path`` names (see ``hlo_programs_of``)."""
    _, _, files, _ = resolve(path)
    names = host_names(files)
    return hlo_programs_of(dict(zip(names, files, strict=True)), host)
