"""A loaded profile: one run, one event table per host, from any supported source.

``load(path)`` accepts a TensorBoard logdir (newest run), a run directory, a directory written
by PyTorch's ``tensorboard_trace_handler``, or a single file (``.xplane.pb``, Kineto
``.json``/``.json.gz``). Each host's table comes from the on-disk cache when it is fresh.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from stepscope.errors import ProfileFormatError
from stepscope.model import cache, schema
from stepscope.model.events import EventTable, load_xspace

# (bytes done, bytes in all, file being loaded) → None; called before and after each file.
Progress = Callable[[int, int, str], None]

_TORCH_TRACE = re.compile(r"^(?P<worker>.+?)\.(?P<stamp>\d+)\.pt\.trace\.json(\.gz)?$")
_XSPACE_SUFFIX = schema.XPLANE_SUFFIX


@dataclass
class Profile:
    """One run of one or more hosts."""

    run: str  # the run's name (its directory, or the file's stem for a lone file)
    path: Path  # the directory or file the run was found in
    hosts: dict[str, EventTable]  # host name → its events, in name order
    sources: dict[str, Path]  # host name → the file it was read from
    failed: dict[str, str] = field(default_factory=dict)  # host → why it could not be read
    other_runs: list[str] = field(default_factory=list)  # runs of the logdir not opened

    @property
    def host_names(self) -> list[str]:
        """Hosts that loaded, in name order."""
        return list(self.hosts)


def is_profile_file(path: Path) -> bool:
    """Whether ``path`` looks like a profile file we can read (by its name)."""
    name = path.name
    return name.endswith(_XSPACE_SUFFIX) or name.endswith((".json", ".json.gz"))


def host_name(path: Path) -> str:
    """The host a profile file belongs to, from its name."""
    name = path.name
    if name.endswith(_XSPACE_SUFFIX):
        return name[: -len(_XSPACE_SUFFIX)]
    match = _TORCH_TRACE.match(name)
    if match:
        return match.group("worker")
    for suffix in (".pt.trace.json.gz", ".pt.trace.json", ".json.gz", ".json"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def _run_files(directory: Path) -> list[Path]:
    """The profile files of one run directory (newest trace per worker for torch's layout)."""
    entries = sorted(p for p in directory.iterdir() if p.is_file())
    xspace = [p for p in entries if p.name.endswith(_XSPACE_SUFFIX)]
    if xspace:
        return xspace
    newest: dict[str, tuple[int, Path]] = {}
    plain: list[Path] = []
    for p in entries:
        match = _TORCH_TRACE.match(p.name)
        if match:
            stamp = int(match.group("stamp"))
            if match.group("worker") not in newest or stamp > newest[match.group("worker")][0]:
                newest[match.group("worker")] = (stamp, p)
        elif p.name.endswith((".json", ".json.gz")):
            plain.append(p)
    return [p for _, p in sorted(newest.values(), key=lambda item: item[1].name)] or plain


def _runs_in(directory: Path) -> list[Path]:
    """Sub-directories of ``directory`` that hold profile files, oldest name first."""
    return sorted(d for d in directory.iterdir() if d.is_dir() and _run_files(d))


def _logdir_runs(logdir: Path) -> list[Path]:
    """Runs under ``logdir/plugins/profile``, or, as Keras writes them, under
    ``logdir/<sub>/plugins/profile`` (e.g. ``train/``); newest (by run name) last."""
    plugin = Path(*schema.PLUGIN_DIR)
    roots = [logdir / plugin] if (logdir / plugin).is_dir() else sorted(
        p for p in logdir.glob(f"*/{plugin.as_posix()}") if p.is_dir())
    runs = [run for root in roots for run in _runs_in(root)]
    return sorted(runs, key=lambda r: (r.name, str(r)))


def _run_label(logdir: Path, run: Path) -> str:
    """A run's name as the user would spell it from ``logdir``."""
    try:
        return run.relative_to(logdir).as_posix()
    except ValueError:
        return run.name


def list_runs(logdir: str | Path) -> dict[str, Path]:
    """Every run under ``logdir`` by name, oldest first (the newest is last).

    A run's name is its directory relative to ``logdir`` with the ``plugins/profile`` part
    left out (``2024_01_01_00_00_00``, or ``train/2024_...`` where Keras wrote it); when
    ``logdir`` itself holds profile files it is the one run, named after it. A logdir that
    does not exist (yet) has no runs.
    """
    logdir = Path(logdir)
    if not logdir.is_dir():
        return {}
    try:
        if _run_files(logdir):
            return {logdir.resolve().name or ".": logdir}
        runs = _logdir_runs(logdir) or _runs_in(logdir)
    except OSError:
        return {}
    plugin = "/" + "/".join(schema.PLUGIN_DIR) + "/"
    out: dict[str, Path] = {}
    for run in runs:
        label = "/" + _run_label(logdir, run)
        out[label.replace(plugin, "/").lstrip("/")] = run
    return out


def resolve(path: str | Path) -> tuple[str, Path, list[Path], list[str]]:
    """Find the run ``path`` means: (run name, run dir or file, its files, other run names)."""
    path = Path(path)
    if not path.exists():
        raise ProfileFormatError(f"{path} does not exist.")
    if path.is_file():
        if not is_profile_file(path):
            raise ProfileFormatError(
                f"{path} is not a profile file (expected .xplane.pb, .json or .json.gz).")
        return path.parent.name or path.name, path, [path], []
    try:
        files = _run_files(path)
        if files:
            return path.name, path, files, []
        runs = _logdir_runs(path) or _runs_in(path)
    except OSError as err:
        raise ProfileFormatError(f"Cannot read {path} ({err.strerror or err}).") from err
    if not runs:
        raise ProfileFormatError(
            f"{path} holds no profiles (no .xplane.pb or trace .json files, and no "
            f"{'/'.join(schema.PLUGIN_DIR)}/<run> directories).")
    newest = runs[-1]
    return newest.name, newest, _run_files(newest), [_run_label(path, r) for r in runs[:-1]]


def load_file(path: Path, *, use_cache: bool = True) -> EventTable:
    """Load one profile file into an event table, through the cache when allowed."""
    if use_cache:
        cached = cache.load_table(path)
        if cached is not None:
            return cached
    if path.name.endswith(_XSPACE_SUFFIX):
        table = load_xspace(path)
    else:
        from stepscope.formats.chrome_trace import load_chrome_trace

        table = load_chrome_trace(path)
        if not table.hostnames:
            table.hostnames = [host_name(path)]
    if use_cache:
        cache.save_table(path, table)
    return table


def load(path: str | Path, *, use_cache: bool = True,
         progress: Progress | None = None) -> Profile:
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
    for file, size in zip(files, sizes, strict=True):
        name = host_name(file)
        if name in hosts or name in failed:  # two files for one host: keep both, apart
            name = file.name
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
    return Profile(run=run, path=where, hosts=dict(sorted(hosts.items())),
                   sources=sources, failed=failed, other_runs=others)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0
