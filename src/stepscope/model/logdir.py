"""The TensorBoard profile logdir layout: ``<logdir>/plugins/profile/<run>/<host>.xplane.pb``.

Naming the runs and hosts to write, and finding them again: ``list_runs`` and ``resolve``
also know the layouts PyTorch's ``tensorboard_trace_handler`` and Keras write.
"""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path
from urllib.parse import unquote

from stepscope.errors import InvalidParameterError, ProfileFormatError, StorageError
from stepscope.model import schema
from stepscope.model.locations import (
    AnyPath,
    as_path,
    failure_reason,
    is_remote,
    reachable_exists,
    redact,
)

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
_TORCH_TRACE = re.compile(r"^(?P<worker>.+?)\.(?P<stamp>\d+)\.pt\.trace\.json(\.gz)?$")
_XSPACE_SUFFIX = schema.XPLANE_SUFFIX
# What an interrupted atomic write leaves (xplane_builder.write_atomic's temporary names).
_TEMP_FILE = re.compile(r"\..+\.tmp")
# A run folder with no profile this old was abandoned: no write takes an hour.
ABANDONED_AFTER_S = 3600.0
MAX_NAME = 1024  # the longest run, host or tool name a client may send
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# TensorFlow's legacy RunMetadata/StepStats, binary or text.
_STEP_STATS_SUFFIXES = (".pb", ".pbtxt", ".pb.txt")
# In a directory only files named for what they hold count (a model's saved_model.pb does not).
_STEP_STATS_NAME = re.compile(r"run_?metadata|step_?stats", re.IGNORECASE)


def check_name(value: str, what: str) -> str:
    """``value`` if it is a safe name to look up under a logdir (a run, host or tool a client
    sent over HTTP or MCP); an InvalidParameterError if it is too long or tries to leave the
    logdir: ``..``, an absolute path, ``~``, a backslash, a drive letter, a control character,
    or any of these once percent-decoded again. No path is ever built from it: callers only
    look it up among the names found on disk."""
    if len(value) > MAX_NAME:
        raise InvalidParameterError(f"The {what} name is too long.")
    decoded, seen = value, {value}
    while True:  # "%252e%252e" → "%2e%2e" → "..": look through every layer of encoding
        once = unquote(decoded)
        if once in seen:
            break
        seen.add(once)
        decoded = once
    for form in seen:
        parts = form.replace("\\", "/").split("/")
        if (_CONTROL.search(form) or "\\" in form or form.startswith(("/", "~"))
                or ".." in parts or re.match(r"^[A-Za-z]:", form)):
            raise InvalidParameterError(f"Invalid {what} name {value!r}: names may not leave "
                                        "the logdir.")
    return value


def profile_root(logdir: str | Path) -> AnyPath:
    """The folder that holds one sub-folder per run."""
    return as_path(logdir).joinpath(*schema.PLUGIN_DIR)


def run_name(when: datetime) -> str:
    """A run's folder name, as TensorBoard names them: ``YYYY_MM_DD_HH_MM_SS``."""
    return when.strftime(schema.RUN_NAME_FORMAT)


def new_run_dir(logdir: str | Path, when: datetime) -> AnyPath:
    """A run folder for a profile taken at ``when`` that no earlier profile uses.

    Run folders that earlier captures abandoned (see :func:`remove_abandoned_runs`) go.
    """
    root = profile_root(logdir)
    remove_abandoned_runs(logdir, now=when.timestamp())
    base = run_name(when)
    candidate, n = root / base, 1
    while candidate.exists():
        candidate, n = root / f"{base}_{n}", n + 1
    return candidate


def remove_abandoned_runs(logdir: str | Path, *, now: float,
                          min_age_s: float = ABANDONED_AFTER_S) -> list[Path]:
    """Remove run folders that hold no profile, only what a killed writer left: temporary
    files of an interrupted atomic write, or nothing (a capture client killed before any
    host answered). Only what is older than ``min_age_s`` at ``now`` (seconds since the
    epoch) goes, so a write still under way is never touched. Returns the folders removed."""
    root = profile_root(logdir)
    removed: list[Path] = []
    if is_remote(root):
        return removed  # object stores have no empty folders, and no half-written objects
    try:
        runs = [d for d in root.iterdir() if d.is_dir() and not d.is_symlink()]
    except OSError:
        return removed
    for run in runs:
        try:
            entries = list(run.iterdir())
            if any(not _TEMP_FILE.fullmatch(p.name) or not p.is_file() or p.is_symlink()
                   for p in entries):
                continue  # a profile, or something that is not ours to remove
            if any(p.lstat().st_mtime > now - min_age_s for p in [run, *entries]):
                continue
            for p in entries:
                p.unlink()
            run.rmdir()
            removed.append(run)
        except OSError:
            continue  # another process got there first, or it is not ours: leave it
    return removed


# A flight recorder's dump is a run named ``<time>-flight-<trigger>`` (``_<n>`` when taken).
_FLIGHT_RUN = re.compile(r"-flight-(?P<trigger>[a-z_]+)(_\d+)?$")


def flight_trigger(run: str) -> str | None:
    """What triggered the flight recorder's dump that ``run`` (a run name) is, or None."""
    match = _FLIGHT_RUN.search(run)
    return match.group("trigger") if match else None


def host_file_name(host: str) -> str:
    """The file name of one host's profile in a run folder (unsafe characters replaced)."""
    return _UNSAFE.sub("_", host) + schema.XPLANE_SUFFIX


def local_hostname() -> str:
    """This machine's host name, as used for profile file names."""
    import socket  # here: reading a logdir (a cached report) does not load it

    return socket.gethostname() or "localhost"


def is_step_stats_path(path: Path) -> bool:
    """Whether ``path`` is named like TensorFlow RunMetadata/StepStats (``.pb``, ``.pbtxt``)."""
    name = path.name.lower()
    return name.endswith(_STEP_STATS_SUFFIXES) and not name.endswith(_XSPACE_SUFFIX)


def is_profile_file(path: Path) -> bool:
    """Whether ``path`` looks like a profile file we can read (by its name)."""
    name = path.name
    return name.endswith(_XSPACE_SUFFIX) or name.endswith((".json", ".json.gz")) \
        or is_step_stats_path(path)


def host_name(path: Path) -> str:
    """The host a profile file belongs to, from its name."""
    name = path.name
    if name.endswith(_XSPACE_SUFFIX):
        return name[: -len(_XSPACE_SUFFIX)]
    match = _TORCH_TRACE.match(name)
    if match:
        return match.group("worker")
    for suffix in (".pt.trace.json.gz", ".pt.trace.json", ".json.gz", ".json", ".pbtxt",
                   ".pb.txt", ".pb"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def host_names(files: list[Path]) -> list[str]:
    """The host each file of a run holds (two files named for one host keep their file
    names, so that both are kept, apart)."""
    names: list[str] = []
    for file in files:
        name = host_name(file)
        names.append(file.name if name in names else name)
    return names


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
    return [p for _, p in sorted(newest.values(), key=lambda item: item[1].name)] or plain \
        or [p for p in entries if is_step_stats_path(p) and _STEP_STATS_NAME.search(p.name)]


def _only_plain_json(files: list[Path]) -> bool:
    """Whether ``files`` are all plain ``.json`` files (no XSpace, no PyTorch-named trace, no
    StepStats): what a logdir's top may hold besides its runs (a config, metrics)."""
    return bool(files) and all(
        p.name.endswith((".json", ".json.gz")) and not _TORCH_TRACE.match(p.name)
        for p in files)


def _top_files_and_runs(path: Path) -> tuple[list[Path], list[Path], list[Path]]:
    """(profile files of ``path`` itself, runs below it, files left out as not profiles).

    Plain ``.json`` files at the top of a folder that also holds runs (plugins/profile, or
    sub-folders of profiles) are not a run of their own: a ``config.json`` beside the runs
    must not hide them. They are skipped, and named so."""
    files = _run_files(path)
    if files and not _only_plain_json(files):
        return files, [], []
    runs = _logdir_runs(path) or _runs_in(path)
    if files and runs:
        return [], runs, files
    return files, runs, []


def skipped_files(path: str | Path) -> list[Path]:
    """Files at the top of the logdir ``path`` left out because they are not profiles (see
    :func:`list_runs`); empty for a run folder or a file."""
    path = as_path(path)
    try:
        if is_remote(path) or not path.is_dir():
            return []
        return _top_files_and_runs(path)[2]
    except OSError:
        return []


def _runs_in(directory: Path) -> list[Path]:
    """Sub-directories of ``directory`` that hold profile files, oldest name first."""
    return sorted(d for d in directory.iterdir() if d.is_dir() and _run_files(d))


def _logdir_runs(logdir: Path) -> list[Path]:
    """Runs under ``logdir/plugins/profile``, or, as Keras writes them, under
    ``logdir/<sub>/plugins/profile`` (e.g. ``train/``); newest (by run name) last."""
    plugin = schema.PLUGIN_DIR
    roots = [logdir.joinpath(*plugin)] if logdir.joinpath(*plugin).is_dir() else sorted(
        (d.joinpath(*plugin) for d in logdir.iterdir() if d.is_dir()
         and d.joinpath(*plugin).is_dir()), key=str)
    runs = [run for root in roots for run in _runs_in(root)]
    return sorted(runs, key=lambda r: (r.name, str(r)))


def _run_label(logdir: Path, run: Path) -> str:
    """A run's name as the user would spell it from ``logdir``."""
    base, full = str(logdir).rstrip("/") + "/", str(run)
    if full.startswith(base):
        return full[len(base):]
    return run.name


def list_runs(logdir: str | Path) -> dict[str, Path]:
    """Every run under ``logdir`` by name, oldest first (the newest is last).

    A run's name is its directory relative to ``logdir`` with the ``plugins/profile`` part
    left out (``2024_01_01_00_00_00``, or ``train/2024_...`` where Keras wrote it); when
    ``logdir`` itself holds profile files it is the one run, named after it. A logdir that
    does not exist (yet) has no runs.
    """
    logdir = as_path(logdir)
    try:
        if not reachable_exists(logdir) or not logdir.is_dir():
            return {}
        top, runs, _ = _top_files_and_runs(logdir)
        if top:
            name = logdir.resolve().name if isinstance(logdir, Path) else logdir.name
            return {name or ".": logdir}
    except (OSError, StorageError):  # not there (yet), or storage that cannot be reached now
        return {}
    plugin = "/" + "/".join(schema.PLUGIN_DIR) + "/"
    out: dict[str, Path] = {}
    for run in runs:
        label = "/" + _run_label(logdir, run)
        out[label.replace(plugin, "/").lstrip("/")] = run
    return out


def newest_run(logdir: str | Path) -> Path | None:
    """The newest run under ``logdir`` (the last of ``list_runs``: the one a server opens
    first), or None where it has none."""
    runs = list_runs(logdir)
    return next(reversed(runs.values())) if runs else None


def resolve(path: str | Path) -> tuple[str, Path, list[Path], list[str]]:
    """Find the run ``path`` means: (run name, run dir or file, its files, other run names)."""
    path = as_path(path)
    try:
        exists = reachable_exists(path)  # a URL that cannot be reached fails in seconds
    except StorageError:
        raise
    except Exception as err:  # a filesystem's own error (credentials, network)
        raise ProfileFormatError(f"Cannot read {redact(str(path))} ({failure_reason(err)})."
                                 ) from err
    if not exists:
        raise ProfileFormatError(f"{path} does not exist.")
    if not path.is_file() and not path.is_dir():
        raise ProfileFormatError(f"{path} is neither a regular file nor a directory, so not a "
                                 "profile.")
    if path.is_file():
        if not is_profile_file(path):
            raise ProfileFormatError(
                f"{path} is not a profile file (expected .xplane.pb, .json or .json.gz, or "
                "RunMetadata/StepStats .pb or .pbtxt).")
        return path.parent.name or path.name, path, [path], []
    try:
        files, runs, _ = _top_files_and_runs(path)
        if files:
            return path.name, path, files, []
    except OSError as err:
        raise ProfileFormatError(f"Cannot read {path} ({err.strerror or err}).") from err
    except Exception as err:  # a filesystem's own error (credentials, network)
        raise ProfileFormatError(f"Cannot read {path} ({err}).") from err
    if not runs:
        raise ProfileFormatError(
            f"{path} holds no profiles (no .xplane.pb or trace .json files, and no "
            f"{'/'.join(schema.PLUGIN_DIR)}/<run> directories).")
    newest = runs[-1]
    return newest.name, newest, _run_files(newest), [_run_label(path, r) for r in runs[:-1]]
