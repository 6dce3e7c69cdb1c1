"""One loaded run: an event table per host, with where each came from and what failed."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from stepscope.model.events import EventTable

# (bytes done, bytes in all, file being loaded) → None; called before and after each file.
Progress = Callable[[int, int, str], None]


@dataclass
class RunTables:
    """One run of one or more hosts."""

    run: str  # the run's name (its directory, or the file's stem for a lone file)
    path: Path  # the directory or file the run was found in
    hosts: Mapping[str, EventTable]  # host name → its events, in name order (a dict, or
    # LazyTables: each read on first use)
    sources: dict[str, Path]  # host name → the file it was read from
    failed: dict[str, str] = field(default_factory=dict)  # host → why it could not be read
    other_runs: list[str] = field(default_factory=list)  # runs of the logdir not opened

    @property
    def host_names(self) -> list[str]:
        """Hosts that loaded, in name order."""
        return list(self.hosts)


class LazyTables(Mapping[str, EventTable]):
    """Host tables read on first use: the web UI answers from a run's model at once and reads
    a host's events only when a tool needs them (the trace viewer of one host of a thousand).
    Safe to use from several threads; each host is read once."""

    def __init__(self, files: Mapping[str, Path], read: Callable[[Path], EventTable]) -> None:
        self._files = dict(files)
        self._read = read
        self._tables: dict[str, EventTable] = {}
        self._locks = {name: threading.Lock() for name in self._files}

    def __getitem__(self, name: str) -> EventTable:
        table = self._tables.get(name)
        if table is not None:
            return table
        if name not in self._files:
            raise KeyError(name)
        with self._locks[name]:
            if name not in self._tables:
                self._tables[name] = self._read(self._files[name])
            return self._tables[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._files)

    def __len__(self) -> int:
        return len(self._files)

    def __contains__(self, name: object) -> bool:
        return name in self._files

    def loaded(self) -> list[str]:
        """The hosts whose tables have been read so far."""
        return list(self._tables)
