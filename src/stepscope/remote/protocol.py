"""TensorFlow's profiler gRPC protocol, declared from its published field numbers.

Service ``tensorflow.ProfilerService`` (``profiler_service.proto``) with the messages of its
``Profile``, ``Terminate``, ``Monitor`` and ``GetSnapshot`` RPCs, and ``tensorflow.ProfileOptions``
(``profiler_options.proto``). The message classes are ordinary protobuf messages built at
import time (see ``stepscope.formats.protodef``); method paths are the gRPC wire names.
"""

from __future__ import annotations

from typing import Any

from stepscope.formats.protodef import Field, Message, build

SERVICE = "tensorflow.ProfilerService"
PROFILE_METHOD = f"/{SERVICE}/Profile"
TERMINATE_METHOD = f"/{SERVICE}/Terminate"
MONITOR_METHOD = f"/{SERVICE}/Monitor"
# Continuous profiling's "the recent past, now": answered from the flight recorder's ring.
SNAPSHOT_METHOD = f"/{SERVICE}/GetSnapshot"
# RPCs the service declares that stepscope does not serve (answered UNIMPLEMENTED by gRPC).
UNSERVED_METHODS = ("StartContinuousProfiling", "StopContinuousProfiling")

# ProfileOptions.version: TensorFlow's clients send 1; with 0 a server applies its defaults
# instead of the tracer levels in the message (proto3 cannot tell 0 from "unset").
OPTIONS_VERSION = 1

_PROFILE_OPTIONS = Message(
    "ProfileOptions",
    [
        Field("version", 5, "uint32"),
        Field("device_type", 6, "DeviceType"),
        Field("include_dataset_ops", 1, "bool"),
        Field("host_tracer_level", 2, "uint32"),
        Field("device_tracer_level", 3, "uint32"),
        Field("python_tracer_level", 4, "uint32"),
        Field("enable_hlo_proto", 7, "bool"),
        Field("start_timestamp_ns", 8, "uint64"),
        Field("duration_ms", 9, "uint64"),
        Field("repository_path", 10, "string"),
        Field("trace_options", 11, "ProfileOptions.TraceOptions"),
        Field("advanced_configuration", 12, "map<string, ProfileOptions.AdvancedConfigValue>"),
        Field("raise_error_on_start_failure", 13, "bool"),
        Field("session_id", 14, "string"),
        Field("override_hostname", 15, "string"),
    ],
    enums={"DeviceType": {"UNSPECIFIED": 0, "CPU": 1, "GPU": 2, "TPU": 3,
                          "PLUGGABLE_DEVICE": 4}},
    nested=[
        Message("TraceOptions", [Field("host_traceme_filter_mask", 1, "uint64")]),
        Message("AdvancedConfigValue", [
            Field("string_value", 1, "string", oneof="value"),
            Field("bool_value", 2, "bool", oneof="value"),
            Field("int64_value", 3, "int64", oneof="value"),
        ]),
    ],
)

MESSAGES = [
    _PROFILE_OPTIONS,
    Message("ToolRequestOptions", [
        Field("output_formats", 2, "string"),
        Field("save_to_repo", 3, "bool"),
    ]),
    Message("ProfileRequest", [
        Field("duration_ms", 1, "uint64"),
        Field("max_events", 2, "uint64"),
        Field("tools", 3, "string", repeated=True),
        Field("tool_options", 8, "map<string, ToolRequestOptions>"),
        Field("opts", 4, "ProfileOptions"),
        Field("repository_root", 5, "string"),
        Field("session_id", 6, "string"),
        Field("host_name", 7, "string"),
        Field("emit_xspace", 9, "bool"),
    ]),
    Message("ProfileToolData", [
        Field("name", 1, "string"),
        Field("data", 2, "bytes"),
    ]),
    Message("ProfileResponse", [
        Field("tool_data", 6, "ProfileToolData", repeated=True),
        Field("empty_trace", 7, "bool"),
        # A ``tensorflow.profiler.XSpace`` message on the wire. Declared as bytes, which is the
        # same encoding, so a server embeds an already serialised space without parsing it
        # again and a client writes the bytes to disk as they came.
        Field("xspace", 8, "bytes"),
    ]),
    Message("TerminateRequest", [Field("session_id", 1, "string")]),
    # GetSnapshot's request has no fields; its answer is a ProfileResponse.
    Message("GetSnapshotRequest", []),
    Message("TerminateResponse", []),
    Message("MonitorRequest", [
        Field("duration_ms", 1, "uint64"),
        Field("monitoring_level", 2, "int32"),
        Field("timestamp", 3, "bool"),
    ]),
    # Field 10 (monitor_result) is left undeclared: stepscope does not serve Monitor results,
    # and an undeclared field is kept as unknown bytes rather than rejected.
    Message("MonitorResponse", [Field("data", 1, "string")]),
]

_CLASSES = build("stepscope/profiler_service.proto", "tensorflow", MESSAGES)

ProfileOptions: Any = _CLASSES["ProfileOptions"]
ToolRequestOptions: Any = _CLASSES["ToolRequestOptions"]
ProfileRequest: Any = _CLASSES["ProfileRequest"]
ProfileToolData: Any = _CLASSES["ProfileToolData"]
ProfileResponse: Any = _CLASSES["ProfileResponse"]
TerminateRequest: Any = _CLASSES["TerminateRequest"]
GetSnapshotRequest: Any = _CLASSES["GetSnapshotRequest"]
TerminateResponse: Any = _CLASSES["TerminateResponse"]
MonitorRequest: Any = _CLASSES["MonitorRequest"]
MonitorResponse: Any = _CLASSES["MonitorResponse"]
