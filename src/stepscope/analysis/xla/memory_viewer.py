"""Memory viewer: what occupies one XLA program's memory at its peak.

A pure function of one decoded HLO module (``model.hlo.HloModule``) with its buffer
assignment. The heap simulator trace of the chosen memory space is replayed in program order
(allocations add a buffer's size, frees remove it once no sharer holds it, a buffer sharing
another's memory adds nothing while that one is live); buffers of indefinite lifetime
(parameters, outputs, constants, thread-local) are live throughout and are added to every
point. The buffers live at the peak are listed by size, those under ``SMALL_BUFFER_BYTES``
summed into one figure, as XProf's memory viewer does.

Sizes are bytes. ``heap_bytes[i]`` is the heap before the trace's event ``i`` (the last entry:
after every event); the peak is held from ``heap_bytes[peak_index]``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from stepscope.analysis.xla.hlo_programs import HloProgram, choose_program, program_list
from stepscope.errors import NotFoundError
from stepscope.model.hlo import (
    HEAP_ALLOC,
    HEAP_FREE,
    HEAP_SHARE_WITH,
    BufferAllocation,
    HeapTrace,
    HloModule,
    Instruction,
    LogicalBuffer,
    Shape,
)

# Buffers smaller than this are summed into one figure rather than listed (XProf's default).
SMALL_BUFFER_BYTES = 16 * 1024
# A tuple's buffer holds one pointer per element.
_POINTER_BYTES = 8


class MemoryViewerError(NotFoundError):
    """A module has no buffer assignment, or no memory space of that number."""


@dataclass
class PeakBuffer:
    """One buffer live at the peak."""

    name: str  # the defining instruction, with its tuple index: "fusion.3{1}"
    op: str  # the instruction's opcode
    shape: str  # with layout
    size_bytes: int
    unpadded_bytes: int
    allocation_type: str  # parameter, output, thread-local, constant or temporary
    source_op: str  # the framework op it came from (metadata op_name)
    source: str  # file:line of the framework code, where recorded
    logical_buffer_id: int

    @property
    def padding_bytes(self) -> int:
        return max(self.size_bytes - self.unpadded_bytes, 0)


@dataclass
class MemoryViewer:
    """One program's memory at its peak, and its heap over program order."""

    module: str
    program_id: str
    memory_space: int
    peak_heap_bytes: int
    peak_unpadded_heap_bytes: int
    argument_bytes: int  # entry computation parameters
    output_bytes: int  # may be live out
    temporary_bytes: int  # the simulated heap at its peak, indefinite allocations excluded
    reserved_bytes: int  # every allocation of the memory space (fragmentation included)
    indefinite_bytes: int  # allocations live throughout (parameters, outputs, constants...)
    heap_bytes: list[int]
    unpadded_heap_bytes: list[int]
    instructions: list[str]  # the instruction of each heap point ("" for the last)
    peak_index: int
    peak_buffers: list[PeakBuffer]  # largest first
    small_buffers_bytes: int  # buffers under ``small_buffer_limit`` at the peak, summed
    small_buffers_count: int
    small_buffer_limit: int = SMALL_BUFFER_BYTES
    memory_spaces: list[int] = field(default_factory=list)  # those the module allocates in
    notes: list[str] = field(default_factory=list)
    module_label: str = ""  # name(program id)
    programs: list[dict[str, Any]] = field(default_factory=list)  # those one may choose

    @property
    def padding_overhead_bytes(self) -> int:
        return self.peak_heap_bytes - self.peak_unpadded_heap_bytes

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["padding_overhead_bytes"] = self.padding_overhead_bytes
        for buf, out in zip(self.peak_buffers, d["peak_buffers"], strict=True):
            out["padding_bytes"] = buf.padding_bytes
        return d


def unpadded_bytes(shape: Shape) -> int:
    """Bytes of a shape's elements without layout padding (a tuple: its pointer table)."""
    if shape.is_tuple:
        return _POINTER_BYTES * len(shape.tuple_shapes)
    return shape.bytes()


def _subshape(shape: Shape, index: list[int]) -> Shape:
    for i in index:
        if not shape.is_tuple or not 0 <= i < len(shape.tuple_shapes):
            break
        shape = shape.tuple_shapes[i]
    return shape


def _display_shape(shape: Shape, index: list[int]) -> Shape:
    # XProf shows the shape at the index's last element only (a flat tuple, in practice).
    if index and shape.is_tuple and 0 <= index[-1] < len(shape.tuple_shapes):
        return shape.tuple_shapes[index[-1]]
    return shape


def _allocation_type(a: BufferAllocation) -> str:
    if a.is_entry_parameter:
        return "parameter"
    if a.maybe_live_out:
        return "output"
    if a.is_thread_local:
        return "thread-local"
    if a.is_constant:
        return "constant"
    return "temporary"


def _indefinite(a: BufferAllocation) -> bool:
    # Thread-local allocations live on the stack of each thread, not in the device's heap:
    # XLA's totals leave them out, and so does this view.
    return not a.is_thread_local and (a.is_entry_parameter or a.is_constant
                                      or a.maybe_live_out)


@dataclass
class _Buffer:
    """A logical buffer placed in an allocation, with its instruction."""

    proto: LogicalBuffer
    allocation: BufferAllocation
    instruction: Instruction
    unpadded: int


def memory_spaces(module: HloModule) -> list[int]:
    """The memory spaces (colors) the module's allocations are in."""
    b = module.buffer_assignment
    return sorted({a.color for a in b.allocations}) if b is not None else []


def memory_viewer(module: HloModule, memory_space: int = 0, *, program_id: str = "",
                  small_buffer_limit: int = SMALL_BUFFER_BYTES) -> MemoryViewer:
    """The memory viewer of ``module`` in ``memory_space`` (0: the device's main memory)."""
    b = module.buffer_assignment
    if b is None:
        raise MemoryViewerError(f"Program {module.name!r} has no buffer assignment in the "
                                "profile (the memory viewer needs XLA's buffer assignment).")
    spaces = memory_spaces(module)
    if memory_space not in spaces and spaces:
        raise MemoryViewerError(
            f"Program {module.name!r} has no memory space {memory_space}; it has "
            f"{', '.join(map(str, spaces))}.")
    buffers = _buffers(module)
    allocations = {a.index: a for a in b.allocations}
    notes: list[str] = []
    trace = _trace_of(b.heap_traces, b.allocations, buffers, memory_space)
    sim = (_simulate(trace, buffers, notes) if trace is not None
           else _Simulation([], [], [], 0, 0, 0, []))

    ours = [a for a in b.allocations if a.color == memory_space]
    indefinite = [a for a in ours if _indefinite(a)]
    live: list[_Buffer] = []
    indefinite_live = 0
    for a in indefinite:
        best: _Buffer | None = None
        for lb_id, _, _ in a.assigned:
            buf = buffers.get(lb_id)
            if buf is not None and buf.proto.size > (best.proto.size if best else 0):
                best = buf
        if best is not None:
            indefinite_live += a.size
            # Outside the main memory XLA places no indefinite buffer (XProf omits them too).
            if memory_space == 0:
                live.append(best)
    live += [buffers[i] for i in sim.peak_live if i in buffers]

    shown: list[tuple[int, PeakBuffer]] = []
    small_bytes = small_count = 0
    for order, buf in enumerate(live):
        if buf.proto.size < small_buffer_limit:
            small_bytes += buf.proto.size
            small_count += 1
            continue
        shown.append((order, _peak_buffer(buf, allocations)))
    shown.sort(key=lambda t: (-t[1].size_bytes, t[0]))

    indefinite_total = sum(a.size for a in indefinite)
    peak = sim.peak + indefinite_live
    return MemoryViewer(
        module=module.name, program_id=program_id, memory_space=memory_space,
        peak_heap_bytes=peak, peak_unpadded_heap_bytes=sim.peak_unpadded + indefinite_live,
        argument_bytes=sum(a.size for a in ours if a.is_entry_parameter),
        output_bytes=sum(a.size for a in ours if a.maybe_live_out),
        temporary_bytes=peak - indefinite_total,
        reserved_bytes=sum(a.size for a in ours if not a.is_thread_local),
        indefinite_bytes=indefinite_total,
        heap_bytes=[h + indefinite_live for h in sim.heap],
        unpadded_heap_bytes=[h + indefinite_live for h in sim.unpadded],
        instructions=sim.instructions, peak_index=sim.peak_index,
        peak_buffers=[p for _, p in shown], small_buffers_bytes=small_bytes,
        small_buffers_count=small_count, small_buffer_limit=small_buffer_limit,
        memory_spaces=spaces, notes=notes)


def _buffers(module: HloModule) -> dict[int, _Buffer]:
    """Every logical buffer that an allocation holds and whose instruction is known."""
    b = module.buffer_assignment
    assert b is not None
    protos = {x.id: x for x in b.logical_buffers}
    out: dict[int, _Buffer] = {}
    for a in b.allocations:
        for lb_id, _, _ in a.assigned:
            lb = protos.get(lb_id)
            if lb is None:
                continue
            inst = module.by_id(lb.instruction_id) if lb.instruction_id else None
            if inst is None:  # older protos name the instruction rather than give its id
                inst = module.instruction(lb.instruction_name)
            if inst is None:
                continue
            out[lb_id] = _Buffer(lb, a, inst, unpadded_bytes(_subshape(inst.shape,
                                                                       lb.shape_index)))
    return out


def _trace_of(traces: list[HeapTrace], allocations: list[BufferAllocation],
              buffers: dict[int, _Buffer], color: int) -> HeapTrace | None:
    """The heap simulator trace of the memory space: the one whose first buffer lies in a
    temporary allocation of that space (the trace's own allocation index is not reliable),
    else the one with most events on buffers of that space."""
    trace_of_allocation: dict[int, int] = {}
    for i, t in enumerate(traces):
        if len(t.buffer_id) and int(t.buffer_id[0]) in buffers:
            trace_of_allocation[buffers[int(t.buffer_id[0])].allocation.index] = i
    for a in sorted(allocations, key=lambda a: a.index):
        if (a.color == color and not _indefinite(a) and not a.is_thread_local
                and a.index in trace_of_allocation):
            return traces[trace_of_allocation[a.index]]
    best, best_count = None, 0
    colored = np.array(sorted(i for i, buf in buffers.items() if buf.proto.color == color),
                       np.int64)
    for t in traces:
        count = int(np.isin(t.buffer_id, colored).sum())
        if count > best_count:
            best, best_count = t, count
    return best


@dataclass
class _Simulation:
    heap: list[int] = field(default_factory=lambda: [0])
    unpadded: list[int] = field(default_factory=lambda: [0])
    instructions: list[str] = field(default_factory=lambda: [""])
    peak: int = 0
    peak_unpadded: int = 0
    peak_index: int = 0
    peak_live: list[int] = field(default_factory=list)  # logical buffer ids, program order


def _simulate(trace: HeapTrace, buffers: dict[int, _Buffer], notes: list[str]) -> _Simulation:
    """Replay a heap simulator trace: the heap before each event, the peak, and which buffers
    are live there (the buffer shown for shared memory is its latest sharer)."""
    kinds = trace.kind.tolist()
    ids = trace.buffer_id.tolist()
    shares = trace.share_with.tolist()
    first = _Replay(kinds, ids, shares, buffers, len(kinds), record=True)
    # The live set is taken by replaying up to the peak once more, rather than copied at
    # every new peak (a heap that grows for n events would cost n² copies).
    at_peak = _Replay(kinds, ids, shares, buffers, first.peak_event + 1, record=False)
    if first.bad:
        notes.append(f"The heap simulator trace is damaged ({first.bad}); the heap is shown "
                     "up to that point.")
    if len(first.allocations) > 1:
        notes.append("The heap simulator trace spans several allocations; XLA simulates one.")
    names = list(trace.instruction[:len(first.heap) - 1]) + [""]
    return _Simulation(first.heap, first.unpadded, names, first.peak, first.peak_unpadded,
                       first.peak_event + 1,
                       [at_peak.shown.get(i, i) for i in at_peak.live])


class _Replay:
    """The heap state after the first ``stop`` events of a trace (and, with ``record``, the
    heap before each event and its peak)."""

    def __init__(self, kinds: list[int], ids: list[int], shares: list[int],
                 buffers: dict[int, _Buffer], stop: int, *, record: bool) -> None:
        self.refs: dict[int, int] = {}
        self.canonical: dict[int, int] = {}  # a sharer → the buffer whose memory it shares
        self.live: dict[int, None] = {}  # canonical buffer ids in the order they became live
        self.shown: dict[int, int] = {}  # a root canonical buffer → the sharer now using it
        self.allocations: set[int] = set()
        self.heap: list[int] = []
        self.unpadded: list[int] = []
        self.peak = self.peak_unpadded = 0
        self.peak_event = -1
        self.bad = ""
        self._limit = len(kinds)
        size = pad = 0
        for e in range(stop):
            if record:
                self.heap.append(size)
                self.unpadded.append(pad)
            buf = buffers.get(ids[e])
            if buf is None:
                continue
            self.allocations.add(buf.allocation.index)
            kind, bid = kinds[e], ids[e]
            grew = False
            if kind == HEAP_ALLOC:
                r = self._root(bid)
                self.refs[r] = self.refs.get(r, 0) + 1
                self.live[bid] = None
                size += buf.proto.size
                pad += buf.unpadded
                grew = True
            elif kind == HEAP_FREE:
                r = self._root(bid)
                self.refs[r] = self.refs.get(r, 0) - 1
                if self.refs[r] < 0:
                    self.bad = f"buffer {bid} is freed more than once"
                    break
                if self.refs[r] == 0 and r in buffers:
                    self.live.pop(r, None)
                    size -= buffers[r].proto.size
                    pad -= buffers[r].unpadded
                    if size < 0:
                        self.bad = "the heap size falls below zero"
                        break
            elif kind == HEAP_SHARE_WITH:
                target = shares[e]
                if target not in buffers:
                    continue
                self.canonical[bid] = target
                r = self._root(target)
                self.refs[r] = self.refs.get(r, 0) + 1
                if self.refs[r] == 1:  # the shared memory was freed and is taken again
                    self.shown[r] = bid
                    self.live.pop(r, None)
                    self.live[r] = None
                    size += buffers[r].proto.size
                    pad += buffers[r].unpadded
                    grew = True
            else:
                self.bad = f"event kind {kind} is unknown"
                break
            if grew and size > self.peak:
                self.peak, self.peak_unpadded, self.peak_event = size, pad, e
        else:
            if record:
                self.heap.append(size)
                self.unpadded.append(pad)

    def _root(self, i: int) -> int:
        seen = 0
        while i in self.canonical and seen <= self._limit:  # ends a cycle in a damaged trace
            i = self.canonical[i]
            seen += 1
        return i


def _peak_buffer(buf: _Buffer, allocations: dict[int, BufferAllocation]) -> PeakBuffer:
    inst = buf.instruction
    index = buf.proto.shape_index
    name = inst.name + ("{" + ",".join(map(str, index)) + "}" if index else "")
    source = f"{inst.source_file}:{inst.source_line}" if inst.source_file else ""
    return PeakBuffer(name, inst.opcode, _display_shape(inst.shape, index).text(),
                      buf.proto.size, buf.unpadded, _allocation_type(buf.allocation),
                      inst.op_name, source, buf.proto.id)


def memory_viewer_of(programs: dict[str, HloProgram], module: str | None = None,
                     memory_space: int = 0,
                     times_ps: dict[str, int] | None = None) -> MemoryViewer:
    """The memory viewer of the program ``module`` names (see ``choose_program``), or, when
    none is named, of the program that took the most time (``times_ps``, by program id:
    ``program_times``), the training step rather than a one-off such as RNG set-up, and
    failing times of the program with the largest peak heap; the result lists every
    program with a buffer assignment in ``programs``."""
    usable = {k: p for k, p in programs.items() if p.has_memory_data}
    if not usable:
        raise NotFoundError("The profile holds no XLA program with a buffer assignment "
                            "(HLO protos with buffer assignment are recorded by JAX, "
                            "TensorFlow jit_compile and PyTorch/XLA profiles).")
    if module:
        chosen = choose_program(programs, module)
        if not chosen.has_memory_data:
            raise NotFoundError(f"Program {chosen.label} has no buffer assignment in the "
                                f"profile{': ' + chosen.error if chosen.error else ''}.")
        result = _of(chosen, memory_space)
    else:
        results = []
        for p in usable.values():
            try:
                results.append(_of(p, memory_space))
            except MemoryViewerError:
                continue  # a program without that memory space
        if not results:
            raise NotFoundError(f"No program has memory space {memory_space}.")
        spent = times_ps or {}
        result = max(results, key=lambda r: (spent.get(r.program_id, 0), r.peak_heap_bytes))
    result.programs = [p for p in program_list(usable)]
    return result


def _of(program: HloProgram, memory_space: int) -> MemoryViewer:
    assert program.module is not None
    result = memory_viewer(program.module, memory_space, program_id=program.program_id)
    result.module_label = program.label
    return result
