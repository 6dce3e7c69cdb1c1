"""Test-side reading of XSpace messages into plain dicts (independent of stepscope.model)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Ev:
    """One event as the tests see it."""

    line: str
    line_id: int
    name: str
    start_ns: float
    duration_ns: float
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def end_ns(self) -> float:
        return self.start_ns + self.duration_ns


def stat_value(stat: Any, plane: Any) -> Any:
    kind = stat.WhichOneof("value")
    value = getattr(stat, kind) if kind else None
    if kind == "ref_value":
        return plane.stat_metadata[value].name
    return value


def plane(space: Any, name: str) -> Any:
    found = [p for p in space.planes if p.name == name]
    assert found, f"no plane {name!r} in {[p.name for p in space.planes]}"
    return found[0]


def plane_stats(p: Any) -> dict[str, Any]:
    return {p.stat_metadata[s.metadata_id].name: stat_value(s, p) for s in p.stats}


def events(p: Any) -> list[Ev]:
    out = []
    for line in p.lines:
        for e in line.events:
            stats = {p.stat_metadata[s.metadata_id].name: stat_value(s, p) for s in e.stats}
            out.append(Ev(line.name, line.id, p.event_metadata[e.metadata_id].name,
                          line.timestamp_ns + e.offset_ps / 1000, e.duration_ps / 1000, stats))
    return out
