"""A small way to declare protobuf messages in Python and get real message classes.

We declare the wire schemas we speak (XSpace, and later the profiler service) as plain Python
data instead of compiling ``.proto`` files: no protoc at set-up time, and no generated code
tied to one protobuf runtime version. The resulting classes are ordinary protobuf messages
(the fast upb/C++ parser where the runtime has one).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_F = descriptor_pb2.FieldDescriptorProto

SCALARS: dict[str, int] = {
    "double": _F.TYPE_DOUBLE,
    "float": _F.TYPE_FLOAT,
    "int64": _F.TYPE_INT64,
    "uint64": _F.TYPE_UINT64,
    "int32": _F.TYPE_INT32,
    "uint32": _F.TYPE_UINT32,
    "bool": _F.TYPE_BOOL,
    "string": _F.TYPE_STRING,
    "bytes": _F.TYPE_BYTES,
}


@dataclass(frozen=True)
class Field:
    """One field: ``type`` is a scalar name, a message name, or ``map<K,V>``."""

    name: str
    number: int
    type: str
    repeated: bool = False
    oneof: str | None = None


@dataclass(frozen=True)
class Message:
    """One message declaration with its fields, enums and nested messages.

    A field names a nested message by its dotted path from the package (``Outer.Inner``).
    """

    name: str
    fields: list[Field] = field(default_factory=list)
    enums: dict[str, dict[str, int]] = field(default_factory=dict)
    nested: list[Message] = field(default_factory=list)


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


def _add_field(msg: descriptor_pb2.DescriptorProto, f: Field, package: str, scope: str,
               oneofs: dict[str, int], enum_names: set[str]) -> None:
    fd = msg.field.add(name=f.name, number=f.number, json_name=f.name)
    if f.type.startswith("map<"):
        key, value = (t.strip() for t in f.type[4:-1].split(","))
        entry = msg.nested_type.add(name=_camel(f.name) + "Entry")
        entry.options.map_entry = True
        _add_field(entry, Field("key", 1, key), package, "", {}, set())
        _add_field(entry, Field("value", 2, value), package, "", {}, set())
        fd.label = _F.LABEL_REPEATED
        fd.type = _F.TYPE_MESSAGE
        fd.type_name = f".{package}.{scope}.{entry.name}"
        return
    fd.label = _F.LABEL_REPEATED if f.repeated else _F.LABEL_OPTIONAL
    if f.type in SCALARS:
        fd.type = SCALARS[f.type]  # type: ignore[assignment]
    elif f.type in enum_names:
        fd.type = _F.TYPE_ENUM
        fd.type_name = f".{package}.{scope}.{f.type}"
    else:
        fd.type = _F.TYPE_MESSAGE
        fd.type_name = f".{package}.{f.type}"
    if f.oneof is not None:
        if f.oneof not in oneofs:
            oneofs[f.oneof] = len(msg.oneof_decl)
            msg.oneof_decl.add(name=f.oneof)
        fd.oneof_index = oneofs[f.oneof]


def _add_message(msg: descriptor_pb2.DescriptorProto, m: Message, package: str,
                 scope: str) -> None:
    msg.name = m.name
    for enum_name, values in m.enums.items():
        enum = msg.enum_type.add(name=enum_name)
        for value_name, number in values.items():
            enum.value.add(name=value_name, number=number)
    for inner in m.nested:
        _add_message(msg.nested_type.add(), inner, package, f"{scope}.{inner.name}")
    oneofs: dict[str, int] = {}
    for f in m.fields:
        _add_field(msg, f, package, scope, oneofs, set(m.enums))


def build(file_name: str, package: str, messages: list[Message]) -> dict[str, Any]:
    """Register the messages in a private pool and return their classes by name."""
    # Edition 2023 with proto3's semantics, except that strings are not checked for UTF-8:
    # profilers write names verbatim (TensorFlow's C++ writer does not validate them), and one
    # bad byte must not make a whole profile unreadable.
    fdp = descriptor_pb2.FileDescriptorProto(name=file_name, package=package, syntax="editions",
                                             edition=descriptor_pb2.EDITION_2023)
    features = fdp.options.features
    features.field_presence = features.IMPLICIT
    features.utf8_validation = features.NONE
    for m in messages:
        _add_message(fdp.message_type.add(), m, package, m.name)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return {
        m.name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.{m.name}"))
        for m in messages
    }
