"""One loaded run: an event table per host, with where each came from and what failed."""

from __future__ import annotations

from collections.abc import Callable
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
    hosts: dict[str, EventTable]  # host name → its events, in name order
    sources: dict[str, Path]  # host name → the file it was read from
    failed: dict[str, str] = field(default_factory=dict)  # host → why it could not be read
    other_runs: list[str] = field(default_factory=list)  # runs of the logdir not opened

    @property
    def host_names(self) -> list[str]:
        """Hosts that loaded, in name order."""
        return list(self.hosts)
