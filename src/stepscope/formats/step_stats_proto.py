"""TensorFlow's legacy step statistics (``step_stats.proto`` and ``RunMetadata``), declared
from their field numbers so that reading them needs no TensorFlow.

Message classes: ``StepStats``, ``DeviceStepStats``, ``NodeExecStats``,
``AllocatorMemoryUsed``, ``AllocationRecord``, ``NodeOutput``, ``MemoryStats``,
``TensorDescription``, ``TensorShapeProto``, ``AllocationDescription`` and ``RunMetadata``
(only its ``step_stats``; graphs and cost models are kept as unknown fields). They are
declared in the ``tensorflow`` package under TensorFlow's own names, so that their text
format (``str(message)``) is the one TensorFlow prints.
"""

from __future__ import annotations

from typing import Any

from stepscope.formats.protodef import Field, Message, build

# tensorflow.DataType (types.proto): the plain types and their reference twins (+100).
_PLAIN_TYPES = [
    "FLOAT", "DOUBLE", "INT32", "UINT8", "INT16", "INT8", "STRING", "COMPLEX64", "INT64", "BOOL",
    "QINT8", "QUINT8", "QINT32", "BFLOAT16", "QINT16", "QUINT16", "UINT16", "COMPLEX128", "HALF",
    "RESOURCE", "VARIANT", "UINT32", "UINT64", "FLOAT8_E5M2", "FLOAT8_E4M3FN",
    "FLOAT8_E4M3FNUZ", "FLOAT8_E4M3B11FNUZ", "FLOAT8_E5M2FNUZ", "INT4", "UINT4", "INT2", "UINT2",
    "FLOAT4_E2M1FN",
]
DATA_TYPES: dict[str, int] = {"DT_INVALID": 0}
DATA_TYPES.update({f"DT_{name}": i for i, name in enumerate(_PLAIN_TYPES, start=1)})
DATA_TYPES.update({f"DT_{name}_REF": 100 + i for i, name in enumerate(_PLAIN_TYPES, start=1)})

MESSAGES = [
    Message("AllocationDescription", [
        Field("requested_bytes", 1, "int64"),
        Field("allocated_bytes", 2, "int64"),
        Field("allocator_name", 3, "string"),
        Field("allocation_id", 4, "int64"),
        Field("has_single_reference", 5, "bool"),
        Field("ptr", 6, "uint64"),
    ]),
    Message("TensorShapeProto", [
        Field("dim", 2, "TensorShapeProto.Dim", repeated=True),
        Field("unknown_rank", 3, "bool"),
    ], nested=[Message("Dim", [Field("size", 1, "int64"), Field("name", 2, "string")])]),
    Message("TensorDescription", [
        Field("dtype", 1, "DataType"),
        Field("shape", 2, "TensorShapeProto"),
        Field("allocation_description", 4, "AllocationDescription"),
    ], enums={"DataType": DATA_TYPES}),
    Message("AllocationRecord", [
        Field("alloc_micros", 1, "int64"),
        Field("alloc_bytes", 2, "int64"),
    ]),
    Message("AllocatorMemoryUsed", [
        Field("allocator_name", 1, "string"),
        Field("total_bytes", 2, "int64"),
        Field("peak_bytes", 3, "int64"),
        Field("live_bytes", 4, "int64"),
        Field("allocator_bytes_in_use", 5, "int64"),
        Field("allocation_records", 6, "AllocationRecord", repeated=True),
    ]),
    Message("NodeOutput", [
        Field("slot", 1, "int32"),
        Field("tensor_description", 3, "TensorDescription"),
    ]),
    Message("MemoryStats", [
        Field("temp_memory_size", 1, "int64"),
        Field("device_temp_memory_size", 2, "int64"),
        Field("persistent_memory_size", 3, "int64"),
        Field("device_persistent_memory_size", 4, "int64"),
        Field("persistent_tensor_alloc_ids", 5, "int64", repeated=True),
        Field("device_persistent_tensor_alloc_ids", 6, "int64", repeated=True),
    ]),
    Message("NodeExecStats", [
        Field("node_name", 1, "string"),
        Field("all_start_micros", 2, "int64"),
        Field("op_start_rel_micros", 3, "int64"),
        Field("op_end_rel_micros", 4, "int64"),
        Field("all_end_rel_micros", 5, "int64"),
        Field("memory", 6, "AllocatorMemoryUsed", repeated=True),
        Field("output", 7, "NodeOutput", repeated=True),
        Field("timeline_label", 8, "string"),
        Field("scheduled_micros", 9, "int64"),
        Field("thread_id", 10, "uint32"),
        Field("referenced_tensor", 11, "AllocationDescription", repeated=True),
        Field("memory_stats", 12, "MemoryStats"),
        Field("all_start_nanos", 13, "int64"),
        Field("op_start_rel_nanos", 14, "int64"),
        Field("op_end_rel_nanos", 15, "int64"),
        Field("all_end_rel_nanos", 16, "int64"),
        Field("scheduled_nanos", 17, "int64"),
    ]),
    Message("DeviceStepStats", [
        Field("device", 1, "string"),
        Field("node_stats", 2, "NodeExecStats", repeated=True),
        Field("thread_names", 3, "map<uint32, string>"),
    ]),
    Message("StepStats", [Field("dev_stats", 1, "DeviceStepStats", repeated=True)]),
    Message("RunMetadata", [Field("step_stats", 1, "StepStats")]),
]

_CLASSES = build("stepscope/step_stats.proto", "tensorflow", MESSAGES)

StepStats: Any = _CLASSES["StepStats"]
DeviceStepStats: Any = _CLASSES["DeviceStepStats"]
NodeExecStats: Any = _CLASSES["NodeExecStats"]
AllocatorMemoryUsed: Any = _CLASSES["AllocatorMemoryUsed"]
AllocationRecord: Any = _CLASSES["AllocationRecord"]
NodeOutput: Any = _CLASSES["NodeOutput"]
MemoryStats: Any = _CLASSES["MemoryStats"]
TensorDescription: Any = _CLASSES["TensorDescription"]
TensorShapeProto: Any = _CLASSES["TensorShapeProto"]
AllocationDescription: Any = _CLASSES["AllocationDescription"]
RunMetadata: Any = _CLASSES["RunMetadata"]
