"""Reading TensorFlow's legacy ``StepStats`` (or the ``RunMetadata`` that holds them) from a
TensorFlow message, serialized bytes, or a binary ``.pb`` / text ``.pbtxt`` file.

Which of the two messages a file holds is told by what parses: both start with a field 1
message, so a reading is accepted only when every device it finds is named like a TensorFlow
device (``/job:...`` or ``/device:...``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from google.protobuf import message as pb_message
from google.protobuf import text_format

from stepscope.errors import ProfileFormatError
from stepscope.formats.step_stats_proto import RunMetadata, StepStats

_TEXT_SUFFIXES = (".pbtxt", ".pb.txt", ".txt")
_MAX_FILE_BYTES = 4 << 30
_FIRST_KEY = re.compile(rb"\A(?:\s|#[^\n]*\n)*([A-Za-z_]\w*)\s*[:{<]")
_DEVICE_NAME = re.compile(r"^/(job|device|gpu|cpu|replica|task)[:/]?", re.IGNORECASE)
_TF_MESSAGES = {"tensorflow.StepStats": StepStats, "tensorflow.RunMetadata": RunMetadata}


def read_step_stats(source: Any, *, what: str | None = None) -> Any:
    """The ``StepStats`` message of ``source``: a StepStats or RunMetadata message (ours or
    TensorFlow's), their serialized bytes, or a path to a binary or text file of either."""
    descriptor = getattr(source, "DESCRIPTOR", None)
    full_name = getattr(descriptor, "full_name", None)
    if full_name in _TF_MESSAGES and hasattr(source, "SerializeToString"):
        label = what or full_name
        try:
            msg = _TF_MESSAGES[full_name].FromString(source.SerializeToString())
        except (pb_message.DecodeError, RuntimeError, ValueError) as err:
            raise _bad(label, f"cannot be copied: {err}") from err
        return check_step_stats(msg.step_stats if full_name.endswith("RunMetadata") else msg,
                                label)
    if isinstance(source, (bytes, bytearray, memoryview)):
        label = what or "the given bytes"
        return check_step_stats(_parse_any(bytes(source), label, text_first=False), label)
    if isinstance(source, (str, Path)):
        path = Path(source)
        label = what or str(path)
        return check_step_stats(_parse_any(_read(path), label,
                                   text_first=path.name.lower().endswith(_TEXT_SUFFIXES)),
                        label)
    raise ProfileFormatError(
        f"Cannot read step stats from a {type(source).__name__}; pass a StepStats or "
        "RunMetadata message, its serialized bytes, or a .pb/.pbtxt file.")


def _read(path: Path) -> bytes:
    try:
        size = path.stat().st_size
        if size > _MAX_FILE_BYTES:
            raise ProfileFormatError(f"{path} is too large to be step stats ({size} bytes).")
        return path.read_bytes()
    except OSError as err:
        raise ProfileFormatError(f"Cannot read {path} ({err.strerror or err}).") from err


def _bad(what: str, problem: str) -> ProfileFormatError:
    return ProfileFormatError(
        f"{what} is not TensorFlow step stats ({problem}); pass RunMetadata or StepStats "
        "recorded with RunOptions(trace_level=FULL_TRACE), binary (.pb) or text (.pbtxt).")


def _parse_any(data: bytes, what: str, *, text_first: bool) -> Any:
    if not data.strip():
        raise _bad(what, "empty file")
    readers = [_parse_text, _parse_binary]
    if not text_first and not _FIRST_KEY.match(data):
        readers.reverse()
    for reader in readers:
        try:
            return reader(data, what)
        except ProfileFormatError:
            continue
    raise _bad(what, "truncated, or neither binary nor text protobuf of StepStats or "
                     "RunMetadata")


def _devices_ok(stats: Any) -> bool:
    return bool(len(stats.dev_stats)) and all(
        _DEVICE_NAME.match(_text(d.device)) and _text(d.device).isprintable()
        for d in stats.dev_stats)


def _parse_binary(data: bytes, what: str) -> Any:
    for cls in (RunMetadata, StepStats):
        msg = cls()
        try:
            msg.ParseFromString(data)
        except (pb_message.DecodeError, RuntimeError, ValueError, OverflowError):
            continue
        stats = msg.step_stats if cls is RunMetadata else msg
        if _devices_ok(stats):
            return stats
    raise _bad(what, "not a binary StepStats or RunMetadata with named devices")


def _parse_text(data: bytes, what: str) -> Any:
    match = _FIRST_KEY.match(data)
    if match is None:
        raise _bad(what, "not protobuf text")
    cls = StepStats if match.group(1) == b"dev_stats" else RunMetadata
    try:
        text = data.decode("utf-8")
        msg = text_format.Parse(text, cls(), allow_unknown_field=True)
    except (text_format.ParseError, UnicodeDecodeError, RecursionError, ValueError) as err:
        raise _bad(what, f"bad protobuf text: {err}") from err
    stats = msg.step_stats if cls is RunMetadata else msg
    return stats


def _text(value: str | bytes) -> str:
    """A string field's text: the runtime hands back bytes where they are not UTF-8."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _repair_strings(stats: Any) -> None:
    """Make every name the timeline reads a str (TensorFlow's writer does not check UTF-8)."""
    for dev in stats.dev_stats:
        if isinstance(dev.device, bytes):
            dev.device = _text(dev.device)
        for node in dev.node_stats:
            for owner, attr in ((node, "node_name"), (node, "timeline_label")):
                if isinstance(getattr(owner, attr), bytes):
                    setattr(owner, attr, _text(getattr(owner, attr)))
            for used in node.memory:
                if isinstance(used.allocator_name, bytes):
                    used.allocator_name = _text(used.allocator_name)
            for out in node.output:
                alloc = out.tensor_description.allocation_description
                if isinstance(alloc.allocator_name, bytes):
                    alloc.allocator_name = _text(alloc.allocator_name)


def check_step_stats(stats: Any, what: str) -> Any:
    """``stats`` if it can be drawn: devices, each with named, timed nodes."""
    if not len(stats.dev_stats):
        raise _bad(what, "no step_stats: run with RunOptions(trace_level=FULL_TRACE)")
    _repair_strings(stats)
    for dev in stats.dev_stats:
        if not dev.device:
            raise _bad(what, "a device without a name")
        if not _DEVICE_NAME.match(dev.device) or not dev.device.isprintable():
            raise _bad(what, f"unknown device {dev.device[:80]!r}")
        for node in dev.node_stats:
            if node.all_start_micros <= 0 and node.all_start_nanos <= 0:
                raise _bad(what, f"node {node.node_name[:80]!r} on {dev.device} has no "
                                 "start time (all_start_micros)")
            if node.all_end_rel_micros < 0 or node.all_end_rel_nanos < 0:
                raise _bad(what, f"node {node.node_name[:80]!r} on {dev.device} has a "
                                 "negative duration")
    return stats
