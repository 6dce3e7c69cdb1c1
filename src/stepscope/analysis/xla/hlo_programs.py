"""The XLA programs of a run whose HLO the profile holds, and choosing one by name or id.

What the memory viewer and the graph viewer read: each program's decoded HLO module (with its
buffer assignment), keyed by program id, over every host (a program compiled on several
hosts is the same program; the first host's copy is kept).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from stepscope.errors import NotFoundError
from stepscope.model.hlo import HloModule


@dataclass
class HloProgram:
    """One XLA program: its id, name and HLO (None where unreadable, with why)."""

    program_id: str
    name: str
    module: HloModule | None
    error: str | None = None

    @property
    def label(self) -> str:
        """``name(id)``, the form XProf lists modules in."""
        return f"{self.name}({self.program_id})"

    @property
    def has_memory_data(self) -> bool:
        return self.module is not None and self.module.buffer_assignment is not None


def program_list(programs: dict[str, HloProgram]) -> list[dict[str, object]]:
    """Each program as plain data, for listing: id, name, label, whether it has HLO."""
    return [{"program_id": p.program_id, "name": p.name, "label": p.label,
             "hlo": p.module is not None, "buffer_assignment": p.has_memory_data,
             "error": p.error} for p in programs.values()]


def program_times(ops: Iterable[Any]) -> dict[str, int]:
    """Each program's time (ps, its ops' self times summed) from the XLA model's ops
    (``XlaModel.ops``): which program the run spent its time in."""
    out: dict[str, int] = {}
    for o in ops:
        if o.program_id:
            out[o.program_id] = out.get(o.program_id, 0) + int(o.self_ps)
    return out


def choose_program(programs: dict[str, HloProgram], wanted: str) -> HloProgram:
    """The program ``wanted`` names: ``name(id)``, an id, or a name that only one program
    has; NotFoundError naming the choices otherwise."""
    wanted = wanted.strip()
    for p in programs.values():
        if wanted in (p.label, p.program_id):
            return p
    named = [p for p in programs.values() if p.name == wanted]
    if len(named) == 1:
        return named[0]
    choices = ", ".join(p.label for p in (named or list(programs.values()))[:20])
    if named:
        raise NotFoundError(f"{len(named)} programs are named {wanted!r}; name one as "
                            f"name(id): {choices}.")
    raise NotFoundError(f"No XLA program {wanted!r} with HLO in this run"
                        + (f"; programs: {choices}." if choices else "."))
