"""The web tools that read XLA programs' HLO: the memory viewer and the graph viewer.

Their parameters arrive as text (``module``, ``memory_space``, ``op``, ``depth``): each is
checked here, and a bad one is a 400; a program or op the run does not have is a 404.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from stepscope.analysis.hlo_programs import HloProgram, choose_program, program_list
from stepscope.web.loaded_run import LoadedRun

Params = Mapping[str, "int | bool | str"]  # as web.tools.Params (it imports this module)
# Ops offered for choosing in the graph viewer: the program's costliest first.
_TOP_OPS = 200


def _programs(run: LoadedRun, host: str | None) -> dict[str, HloProgram]:
    from stepscope.run_loader import hlo_programs_of

    programs: dict[str, HloProgram] = run.result(
        ("hlo_programs", host), lambda: hlo_programs_of(dict(run.profile.sources), host))
    return programs


def _bad(message: str) -> Exception:
    from stepscope.web.api import ApiError  # the API imports the tools

    return ApiError(400, message)


def _int(params: Params, name: str, default: int, low: int, high: int) -> int:
    text = str(params.get(name) or "").strip()
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        value = low - 1
    if not low <= value <= high:
        raise _bad(f"Parameter {name} must be a whole number from {low} to {high}, "
                   f"not {text!r}.")
    return value


def memory_viewer_data(run: LoadedRun, host: str | None, params: Params) -> dict[str, Any]:
    """The memory viewer of one program (default: the one that took the most time)."""
    from stepscope.analysis.hlo_programs import program_times
    from stepscope.analysis.memory_viewer import memory_viewer_of
    from stepscope.web.tools import _xla

    module = str(params.get("module") or "") or None
    space = _int(params, "memory_space", 0, 0, (1 << 31) - 1)
    # An unknown program or memory space is a NotFoundError: the API answers 404.
    data: dict[str, Any] = run.result(
        ("memory_viewer", host, module, space),
        lambda: memory_viewer_of(_programs(run, host), module, space,
                                 None if module else program_times(_xla(run, host).ops))
        .to_dict())
    return {"run": run.profile.run, "host": host, **data}


def graph_viewer_data(run: LoadedRun, host: str | None, params: Params) -> dict[str, Any]:
    """The HLO graph around one op of one program (default: the program's costliest op)."""
    from stepscope.analysis.hlo_graph import MAX_DEPTH, hlo_graph, op_times
    from stepscope.errors import NotFoundError
    from stepscope.web.tools import _xla

    programs = {k: p for k, p in _programs(run, host).items() if p.module is not None}
    if not programs:
        raise NotFoundError("The run holds no readable HLO of an XLA program.")
    depth = _int(params, "depth", 2, 0, MAX_DEPTH)
    ops = _xla(run, host).ops
    wanted = str(params.get("module") or "")
    if wanted:
        program = choose_program(programs, wanted)
    else:  # the program with the most device time, else the first
        spent: dict[str, int] = {}
        for o in ops:
            spent[o.program_id] = spent.get(o.program_id, 0) + int(o.total_ps)
        program = max(programs.values(), key=lambda p: spent.get(p.program_id, 0))
    module = program.module
    assert module is not None
    times = op_times(ops, program.program_id, program.name)
    entry = module.computation(module.entry_computation_id)
    in_entry = [i.name for i in entry.instructions] if entry is not None else []
    ranked = sorted((n for n in in_entry if n in times), key=lambda n: -times[n].total_ps)
    ranked += [n for n in in_entry if n not in times]
    op = str(params.get("op") or "") or (ranked[0] if ranked else "")
    if not op:
        raise NotFoundError(f"Program {program.label} has no instructions.")
    expand = bool(params.get("expand_fusions"))
    graph = run.result(("graph_viewer", host, program.program_id, op, depth, expand),
                       lambda: hlo_graph(module, op, depth, expand_fusions=expand,
                                         times=times, program_id=program.program_id))
    return {"run": run.profile.run, "host": host, "module_label": program.label,
            "programs": program_list(programs), "ops": ranked[:_TOP_OPS], **graph.to_dict()}
