"""XLA programs as plain data: HLO modules, their computations and instructions.

What a profile's ``/host:metadata`` plane carries as serialized ``HloProto``s, decoded by
``formats.hlo_proto`` into these dataclasses so that analyses (op profile, HLO op stats,
roofline, and later the memory viewer) read Python values, never protobuf messages.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

# XLA's element types by their PrimitiveType number, and each one's size in bits.
ELEMENT_TYPES: dict[int, tuple[str, int]] = {
    1: ("pred", 8), 2: ("s8", 8), 3: ("s16", 16), 4: ("s32", 32), 5: ("s64", 64),
    6: ("u8", 8), 7: ("u16", 16), 8: ("u32", 32), 9: ("u64", 64), 10: ("f16", 16),
    11: ("f32", 32), 12: ("f64", 64), 13: ("tuple", 0), 14: ("opaque", 0),
    15: ("c64", 64), 16: ("bf16", 16), 17: ("token", 0), 18: ("c128", 128),
    19: ("f8e5m2", 8), 20: ("f8e4m3fn", 8), 21: ("s4", 4), 22: ("u4", 4),
    23: ("f8e4m3b11fnuz", 8), 24: ("f8e5m2fnuz", 8), 25: ("f8e4m3fnuz", 8), 26: ("s2", 2),
    27: ("u2", 2), 28: ("f8e4m3", 8), 29: ("f8e3m4", 8), 30: ("s1", 1), 31: ("u1", 1),
    32: ("f4e2m1fn", 4), 33: ("f8e8m0fnu", 8),
}
_BITS = dict(ELEMENT_TYPES.values())


@dataclass
class Shape:
    """An array shape (element type, dimensions, layout) or a tuple of shapes."""

    element_type: str = "invalid"
    dimensions: list[int] = field(default_factory=list)
    tuple_shapes: list[Shape] = field(default_factory=list)
    minor_to_major: list[int] | None = None  # None: no layout recorded
    tiles: list[list[int]] = field(default_factory=list)
    memory_space: int = 0

    @property
    def is_tuple(self) -> bool:
        return self.element_type == "tuple"

    def elements(self) -> int:
        """Number of elements of an array shape (0 for a tuple)."""
        if self.is_tuple:
            return 0
        n = 1
        for d in self.dimensions:
            n *= max(int(d), 0)
        return n

    def element_bits(self) -> int:
        return _BITS.get(self.element_type, 0)

    def bytes(self) -> int:
        """Bytes the shape holds, tuple elements summed (layout padding not counted)."""
        if self.is_tuple:
            return sum(s.bytes() for s in self.tuple_shapes)
        return (self.elements() * self.element_bits() + 7) // 8

    def padded_elements(self) -> int:
        """Elements the layout's first tiling really occupies (the tile's dimensions apply to
        the most minor dimensions, each rounded up to a multiple); ``elements()`` untiled."""
        if self.is_tuple:
            return sum(s.padded_elements() for s in self.tuple_shapes)
        if not self.tiles or not self.minor_to_major or \
                sorted(self.minor_to_major) != list(range(len(self.dimensions))):
            return self.elements()
        physical = [max(int(self.dimensions[d]), 0) for d in reversed(self.minor_to_major)]
        tile = [t for t in self.tiles[0] if t > 0][-len(physical):]
        for i, t in enumerate(tile):
            at = len(physical) - len(tile) + i
            physical[at] = -(-physical[at] // t) * t
        n = 1
        for d in physical:
            n *= d
        return n

    def text(self) -> str:
        """XLA's text form, e.g. ``f32[8,128]{1,0:T(8,128)}``."""
        if self.is_tuple:
            return "(" + ", ".join(s.text() for s in self.tuple_shapes) + ")"
        out = f"{self.element_type}[{','.join(str(d) for d in self.dimensions)}]"
        if self.minor_to_major is not None and self.dimensions:
            layout = ",".join(str(d) for d in self.minor_to_major)
            extra = "".join("T(" + ",".join(str(d) for d in t) + ")" for t in self.tiles)
            if self.memory_space:
                extra += f"S({self.memory_space})"
            out += "{" + layout + (":" + extra if extra else "") + "}"
        return out


@dataclass
class WindowDim:
    """One dimension of a convolution's or reduce-window's window."""

    size: int = 1
    stride: int = 1
    padding_low: int = 0
    padding_high: int = 0
    window_dilation: int = 1
    base_dilation: int = 1


@dataclass
class ConvDims:
    """Which dimension of input, kernel and output is batch, feature and spatial."""

    input_batch: int = 0
    input_feature: int = 0
    input_spatial: list[int] = field(default_factory=list)
    kernel_input_feature: int = 0
    kernel_output_feature: int = 0
    kernel_spatial: list[int] = field(default_factory=list)
    output_batch: int = 0
    output_feature: int = 0
    output_spatial: list[int] = field(default_factory=list)


@dataclass
class DotDims:
    """A dot's contracting and batch dimensions of each side."""

    lhs_contracting: list[int] = field(default_factory=list)
    rhs_contracting: list[int] = field(default_factory=list)
    lhs_batch: list[int] = field(default_factory=list)
    rhs_batch: list[int] = field(default_factory=list)


@dataclass
class Instruction:
    """One HLO instruction."""

    name: str
    opcode: str
    shape: Shape
    id: int = 0
    operand_ids: list[int] = field(default_factory=list)
    called_computation_ids: list[int] = field(default_factory=list)
    fusion_kind: str = ""  # "kLoop", "kInput", "kOutput", "kCustom" for fusions
    custom_call_target: str = ""
    dimensions: list[int] = field(default_factory=list)
    window: list[WindowDim] = field(default_factory=list)
    conv_dims: ConvDims | None = None
    dot_dims: DotDims | None = None
    feature_group_count: int = 1
    batch_group_count: int = 1
    op_type: str = ""  # the framework op it came from (metadata)
    op_name: str = ""
    source_file: str = ""
    source_line: int = 0
    backend_config: str = ""  # the backend's JSON configuration (GPU), where given
    # A dot's or convolution's precision config: its operands' highest precision (0 DEFAULT,
    # 1 HIGH, 2 HIGHEST) and its algorithm (XLA's PrecisionConfig.Algorithm; 0 unset).
    operand_precision: int = 0
    algorithm: int = 0


@dataclass
class Computation:
    """One HLO computation: its instructions in dependency order."""

    name: str
    id: int
    instructions: list[Instruction]
    root_id: int = 0
    is_fusion: bool = False


@dataclass
class LogicalBuffer:
    """A value the program needs memory for: where it is defined and its size."""

    id: int
    size: int
    instruction_id: int
    instruction_name: str  # older protos name the instruction instead of giving its id
    shape_index: list[int]
    color: int = 0  # the memory space it lives in


@dataclass
class BufferAllocation:
    """One allocation of the compiled program, and the logical buffers placed in it."""

    index: int
    size: int
    is_thread_local: bool
    is_tuple: bool
    is_entry_parameter: bool
    is_constant: bool
    parameter_number: int
    maybe_live_out: bool
    color: int
    assigned: list[tuple[int, int, int]]  # (logical buffer id, offset, size)


# Heap simulator event kinds.
HEAP_ALLOC, HEAP_FREE, HEAP_SHARE_WITH = 0, 1, 2


@dataclass
class HeapTrace:
    """One heap-simulator run, in event order, as columns."""

    allocation_index: int
    whole_module: bool
    kind: NDArray[np.int8]  # HEAP_*
    buffer_id: NDArray[np.int64]
    share_with: NDArray[np.int64]  # the canonical buffer of a SHARE_WITH event
    instruction: list[str]  # the instruction being processed when it happened


@dataclass
class BufferAssignment:
    """Where each value of a compiled program lives in memory (for the memory viewer)."""

    logical_buffers: list[LogicalBuffer]
    allocations: list[BufferAllocation]
    heap_traces: list[HeapTrace]


@dataclass
class HloModule:
    """One XLA program as compiled: its computations, the entry one named."""

    name: str
    id: int
    computations: list[Computation]
    entry_computation_id: int = 0
    entry_computation_name: str = ""
    buffer_assignment: BufferAssignment | None = None
    # Computation id → its instruction ids in the order they run, where the module is
    # scheduled (XLA's GPU programs are); empty where the proto has no schedule.
    schedule: dict[int, list[int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._by_id = {c.id: c for c in self.computations}
        self._instructions = {i.name: i for c in self.computations for i in c.instructions}
        self._instruction_ids = {i.id: i for c in self.computations for i in c.instructions}

    def computation(self, cid: int) -> Computation | None:
        """The computation with id ``cid``, or None."""
        return self._by_id.get(cid)

    def instruction(self, name: str) -> Instruction | None:
        """The instruction called ``name`` (instruction names are unique in a module)."""
        return self._instructions.get(name)

    def by_id(self, iid: int) -> Instruction | None:
        """The instruction with id ``iid``, or None."""
        return self._instruction_ids.get(iid)

    def in_order(self, comp: Computation) -> list[Instruction]:
        """``comp``'s instructions in the order the schedule runs them (its own order, a
        topological one, where the module has no schedule or it names unknown ids)."""
        ids = self.schedule.get(comp.id)
        mine = {i.id: i for i in comp.instructions}
        if not ids or any(i not in mine for i in ids):
            return list(comp.instructions)
        return [mine[i] for i in ids]
