"""Serialized ``HloProto`` bytes → ``model.hlo.HloModule``, without XLA or TensorFlow.

The wire schema is declared from the field numbers of XLA's ``hlo.proto`` and
``xla_data.proto`` (only the fields stepscope reads; the rest are skipped by the parser as
unknown fields). Buffer assignment and heap-simulator traces are not decoded yet.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from stepscope.errors import ProfileFormatError
from stepscope.formats.protodef import Field, Message, build
from stepscope.model.hlo import (
    ELEMENT_TYPES,
    BufferAllocation,
    BufferAssignment,
    Computation,
    ConvDims,
    DotDims,
    HeapTrace,
    HloModule,
    Instruction,
    LogicalBuffer,
    Shape,
    WindowDim,
)

MESSAGES = [
    Message("HloProto", [
        Field("hlo_module", 1, "HloModuleProto"),
        Field("buffer_assignment", 3, "BufferAssignmentProto"),
    ]),
    Message("BufferAssignmentProto", [
        Field("logical_buffers", 1, "LogicalBufferProto", repeated=True),
        Field("buffer_allocations", 3, "BufferAllocationProto", repeated=True),
        Field("heap_simulator_traces", 4, "HeapSimulatorTrace", repeated=True),
    ]),
    Message("LogicalBufferProto", [
        Field("id", 1, "int64"),
        Field("size", 2, "int64"),
        Field("defined_at", 3, "LogicalBufferLocation"),
        Field("color", 4, "int64"),
    ]),
    Message("LogicalBufferLocation", [  # LogicalBufferProto.Location
        Field("instruction_name", 2, "string"),
        Field("shape_index", 3, "int64", repeated=True),
        Field("instruction_id", 4, "int64"),
    ]),
    Message("BufferAllocationProto", [
        Field("index", 1, "int64"),
        Field("size", 2, "int64"),
        Field("is_thread_local", 3, "bool"),
        Field("is_entry_computation_parameter", 5, "bool"),
        Field("parameter_number", 6, "int64"),
        Field("maybe_live_out", 7, "bool"),
        Field("color", 8, "int64"),
        Field("assigned", 9, "BufferAllocationAssigned", repeated=True),
        Field("is_tuple", 11, "bool"),
        Field("is_constant", 12, "bool"),
    ]),
    Message("BufferAllocationAssigned", [  # BufferAllocationProto.Assigned
        Field("logical_buffer_id", 1, "int64"),
        Field("offset", 2, "int64"),
        Field("size", 3, "int64"),
    ]),
    Message("HeapSimulatorTrace", [
        Field("events", 1, "HeapSimulatorEvent", repeated=True),
        Field("whole_module_simulation", 2, "bool"),
        Field("buffer_allocation_index", 3, "int64"),
    ]),
    Message("HeapSimulatorEvent", [  # HeapSimulatorTrace.Event
        Field("kind", 1, "int32"),  # an enum on the wire: ALLOC 0, FREE 1, SHARE_WITH 2
        Field("buffer_id", 2, "int64"),
        Field("computation_name", 3, "string"),
        Field("instruction_name", 4, "string"),
        Field("share_with_canonical_id", 5, "int64"),
    ]),
    Message("HloModuleProto", [
        Field("name", 1, "string"),
        Field("entry_computation_name", 2, "string"),
        Field("computations", 3, "HloComputationProto", repeated=True),
        Field("id", 5, "int64"),
        Field("entry_computation_id", 6, "int64"),
        Field("schedule", 7, "HloScheduleProto"),
    ]),
    # The order a scheduled module runs each computation's instructions in (XLA's
    # HloScheduleProto: a map from computation id to its instruction ids, on the wire a
    # repeated (key 1, value 2) entry).
    Message("HloScheduleProto", [
        Field("sequences", 1, "HloScheduleEntry", repeated=True),
    ]),
    Message("HloScheduleEntry", [
        Field("key", 1, "int64"),
        Field("value", 2, "InstructionSequence"),
    ]),
    Message("InstructionSequence", [Field("instruction_ids", 1, "int64", repeated=True)]),
    Message("HloComputationProto", [
        Field("name", 1, "string"),
        Field("instructions", 2, "HloInstructionProto", repeated=True),
        Field("id", 5, "int64"),
        Field("root_id", 6, "int64"),
        Field("is_fusion_computation", 7, "bool"),
    ]),
    Message("HloInstructionProto", [
        Field("name", 1, "string"),
        Field("opcode", 2, "string"),
        Field("shape", 3, "ShapeProto"),
        Field("metadata", 7, "OpMetadata"),
        Field("fusion_kind", 11, "string"),
        Field("dimensions", 14, "int64", repeated=True),
        Field("window", 15, "Window"),
        Field("convolution_dimension_numbers", 16, "ConvolutionDimensionNumbers"),
        Field("custom_call_target", 28, "string"),
        Field("dot_dimension_numbers", 30, "DotDimensionNumbers"),
        Field("id", 35, "int64"),
        Field("backend_config", 43, "bytes"),  # JSON text on GPU (a GEMM's dot dimensions)
        Field("operand_ids", 36, "int64", repeated=True),
        Field("called_computation_ids", 38, "int64", repeated=True),
        Field("feature_group_count", 50, "int64"),
        Field("precision_config", 51, "PrecisionConfig"),
        Field("batch_group_count", 58, "int64"),
    ]),
    # A dot's or convolution's precision: per operand DEFAULT 0, HIGH 1, HIGHEST 2; the
    # algorithm (ALG_UNSET 0, ALG_DOT_TF32_TF32_F32 9, …_X3 10, ALG_DOT_F32_F32_F32 11, …).
    Message("PrecisionConfig", [
        Field("operand_precision", 1, "int32", repeated=True),
        Field("algorithm", 2, "int32"),
    ]),
    Message("ShapeProto", [
        Field("element_type", 2, "int32"),  # an enum on the wire: the same varint
        Field("dimensions", 3, "int64", repeated=True),
        Field("tuple_shapes", 4, "ShapeProto", repeated=True),
        Field("layout", 5, "LayoutProto"),
    ]),
    Message("LayoutProto", [
        Field("minor_to_major", 1, "int64", repeated=True),
        Field("tiles", 6, "TileProto", repeated=True),
        Field("memory_space", 8, "int64"),
    ]),
    Message("TileProto", [Field("dimensions", 1, "int64", repeated=True)]),
    Message("OpMetadata", [
        Field("op_type", 1, "string"),
        Field("op_name", 2, "string"),
        Field("source_file", 3, "string"),
        Field("source_line", 4, "int32"),
    ]),
    Message("Window", [Field("dimensions", 1, "WindowDimension", repeated=True)]),
    Message("WindowDimension", [
        Field("size", 1, "int64"),
        Field("stride", 2, "int64"),
        Field("padding_low", 3, "int64"),
        Field("padding_high", 4, "int64"),
        Field("window_dilation", 5, "int64"),
        Field("base_dilation", 6, "int64"),
    ]),
    Message("ConvolutionDimensionNumbers", [
        Field("kernel_input_feature_dimension", 3, "int64"),
        Field("kernel_output_feature_dimension", 4, "int64"),
        Field("kernel_spatial_dimensions", 6, "int64", repeated=True),
        Field("input_batch_dimension", 7, "int64"),
        Field("input_feature_dimension", 8, "int64"),
        Field("output_batch_dimension", 9, "int64"),
        Field("output_feature_dimension", 10, "int64"),
        Field("input_spatial_dimensions", 11, "int64", repeated=True),
        Field("output_spatial_dimensions", 12, "int64", repeated=True),
    ]),
    Message("DotDimensionNumbers", [
        Field("lhs_contracting_dimensions", 1, "int64", repeated=True),
        Field("rhs_contracting_dimensions", 2, "int64", repeated=True),
        Field("lhs_batch_dimensions", 3, "int64", repeated=True),
        Field("rhs_batch_dimensions", 4, "int64", repeated=True),
    ]),
]

_CLASSES = build("stepscope/hlo.proto", "xla", MESSAGES)
HloProto: Any = _CLASSES["HloProto"]

# Nesting deeper than this is not a real program (tuples of tuples); it bounds recursion.
_MAX_TUPLE_DEPTH = 64


def _t(value: str | bytes) -> str:
    """A string field as text: bytes that are not UTF-8 (protobuf hands them back as bytes,
    since these fields are not checked) are decoded with replacement characters."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def decode_hlo_proto(data: bytes, source: str = "<bytes>") -> HloModule:
    """Decode one serialized ``HloProto``; a ProfileFormatError names ``source`` if bad."""
    proto = HloProto()
    try:
        proto.ParseFromString(bytes(data))
    except Exception as err:  # protobuf's DecodeError, or recursion on absurd nesting
        raise ProfileFormatError(f"{source}: the HLO proto is not readable ({err}).") from err
    if not proto.HasField("hlo_module"):
        raise ProfileFormatError(f"{source}: the HLO proto holds no module.")
    m = proto.hlo_module
    assignment = (_buffer_assignment(proto.buffer_assignment)
                  if proto.HasField("buffer_assignment") else None)
    schedule = {int(e.key): [int(i) for i in e.value.instruction_ids]
                for e in m.schedule.sequences} if m.HasField("schedule") else {}
    return HloModule(_t(m.name), int(m.id), [_computation(c) for c in m.computations],
                     int(m.entry_computation_id), _t(m.entry_computation_name), assignment,
                     schedule)


def _buffer_assignment(b: Any) -> BufferAssignment:
    buffers = [LogicalBuffer(int(x.id), int(x.size), int(x.defined_at.instruction_id),
                             _t(x.defined_at.instruction_name), list(x.defined_at.shape_index),
                             int(x.color)) for x in b.logical_buffers]
    allocations = [BufferAllocation(
        int(a.index), int(a.size), bool(a.is_thread_local), bool(a.is_tuple),
        bool(a.is_entry_computation_parameter), bool(a.is_constant), int(a.parameter_number),
        bool(a.maybe_live_out), int(a.color),
        [(int(x.logical_buffer_id), int(x.offset), int(x.size)) for x in a.assigned])
        for a in b.buffer_allocations]
    traces = []
    for t in b.heap_simulator_traces:
        events = t.events
        traces.append(HeapTrace(
            int(t.buffer_allocation_index), bool(t.whole_module_simulation),
            np.array([e.kind for e in events], np.int8),
            np.array([e.buffer_id for e in events], np.int64),
            np.array([e.share_with_canonical_id for e in events], np.int64),
            [_t(e.instruction_name) for e in events]))
    return BufferAssignment(buffers, allocations, traces)


def _computation(c: Any) -> Computation:
    return Computation(_t(c.name), int(c.id), [_instruction(i) for i in c.instructions],
                       int(c.root_id), bool(c.is_fusion_computation))


# A backend config longer than this is not read (it names dimensions: a few KiB at most).
_MAX_CONFIG = 1 << 16


def _instruction(i: Any) -> Instruction:
    md = i.metadata
    conv = None
    if i.HasField("convolution_dimension_numbers"):
        d = i.convolution_dimension_numbers
        conv = ConvDims(int(d.input_batch_dimension), int(d.input_feature_dimension),
                        list(d.input_spatial_dimensions), int(d.kernel_input_feature_dimension),
                        int(d.kernel_output_feature_dimension), list(d.kernel_spatial_dimensions),
                        int(d.output_batch_dimension), int(d.output_feature_dimension),
                        list(d.output_spatial_dimensions))
    dot = None
    if i.HasField("dot_dimension_numbers"):
        d = i.dot_dimension_numbers
        dot = DotDims(list(d.lhs_contracting_dimensions), list(d.rhs_contracting_dimensions),
                      list(d.lhs_batch_dimensions), list(d.rhs_batch_dimensions))
    # Zero on the wire means "unset": XLA's defaults are 1 for strides, dilations and counts.
    window = [WindowDim(int(w.size) or 1, int(w.stride) or 1, int(w.padding_low),
                        int(w.padding_high), int(w.window_dilation) or 1,
                        int(w.base_dilation) or 1) for w in i.window.dimensions]
    return Instruction(
        name=_t(i.name), opcode=_t(i.opcode), shape=_shape(i.shape, 0), id=int(i.id),
        operand_ids=list(i.operand_ids), called_computation_ids=list(i.called_computation_ids),
        fusion_kind=_t(i.fusion_kind), custom_call_target=_t(i.custom_call_target),
        dimensions=list(i.dimensions), window=window, conv_dims=conv, dot_dims=dot,
        feature_group_count=int(i.feature_group_count) or 1,
        batch_group_count=int(i.batch_group_count) or 1,
        op_type=_t(md.op_type), op_name=_t(md.op_name), source_file=_t(md.source_file),
        source_line=int(md.source_line), backend_config=_t(bytes(i.backend_config)[:_MAX_CONFIG]),
        operand_precision=max((int(p) for p in i.precision_config.operand_precision), default=0),
        algorithm=int(i.precision_config.algorithm))


def _shape(s: Any, depth: int) -> Shape:
    name = ELEMENT_TYPES.get(int(s.element_type), ("invalid", 0))[0]
    tuples = ([_shape(t, depth + 1) for t in s.tuple_shapes]
              if depth < _MAX_TUPLE_DEPTH else [])
    layout = s.layout if s.HasField("layout") else None
    return Shape(
        element_type=name, dimensions=[int(d) for d in s.dimensions], tuple_shapes=tuples,
        minor_to_major=None if layout is None else [int(d) for d in layout.minor_to_major],
        tiles=[] if layout is None else [[int(d) for d in t.dimensions] for t in layout.tiles],
        memory_space=0 if layout is None else int(layout.memory_space))
