"""Framework op full names (``name:type``) as XProf reads them.

XProf names a framework op from a full name: an event's own name on the host, a ``tf_op``
stat, or an HLO instruction's metadata (``op_name``, ``op_type``) on devices. The rules
(facts from XProf's and TSL's ``tf_op_utils``, written here anew):

* ``Iterator::…`` is a tf.data op of type ``Dataset``;
* ``name:Type`` with a TensorFlow name (``[A-Za-z0-9.][A-Za-z0-9_./>-]*``) and type
  (``[A-Z_][A-Za-z0-9_]*``) is a TensorFlow op;
* otherwise the type is the text after the colon, or, when that is empty, the last ``/`` part
  of the name less a numeric ``_N`` suffix; a type that is lower case (``[a-z_][a-z0-9_]*``,
  perhaps followed by ``[…]``, which is dropped) makes a JAX op; a derived type that is not
  makes a TensorFlow op of that type;
* a name without a colon is no framework op, unless it starts (in any case) with
  ``MEMCPYHToD``/``MEMCPYDToH``/``MEMCPYDToD``/``MEMCPYHToH``, a copy of that type.

What is no framework op keeps its whole text as name and an empty type.
"""

from __future__ import annotations

import re
from typing import NamedTuple

_TF_NAME = re.compile(r"[A-Za-z0-9.][A-Za-z0-9_./>\-]*")
_TF_TYPE = re.compile(r"[A-Z_][a-zA-Z0-9_]*")
_JAX_TYPE = re.compile(r"[a-z_][a-z0-9_]*(\[.*\])?", re.DOTALL)
_MEMCPY_TYPES = ("MemcpyHToD", "MemcpyDToH", "MemcpyDToD", "MemcpyHToH")
# What the HLO's metadata names when the framework gave no type (TensorFlow's XLA bridge).
_XLA_ARGS_OR_RETVALS = ("XLA_Args", "XLA_Retvals")


class FrameworkOp(NamedTuple):
    """A full name read: the op's name and type, and whether it is a framework op at all."""

    name: str
    type: str
    known: bool


def derived_op_type(name: str) -> str:
    """The type an op name implies: its last ``/`` part less a numeric ``_N`` suffix."""
    last = name.split("/")[-1]
    stem, sep, suffix = last.rpartition("_")
    if sep and _is_integer(suffix):
        return stem
    return last


def _is_integer(text: str) -> bool:
    body = text[1:] if text[:1] in "+-" else text
    return body.isascii() and body.isdigit()


def parse_op_fullname(fullname: str) -> FrameworkOp:
    """The framework op a full name names (see the module docstring)."""
    name, colon, op_type = fullname.partition(":")
    if not colon:
        for memcpy in _MEMCPY_TYPES:
            if fullname[:len(memcpy)].lower() == memcpy.lower():
                return FrameworkOp(fullname, memcpy, True)
        return FrameworkOp(fullname, "", False)
    if name == "Iterator":
        return FrameworkOp(fullname, "Dataset", True)
    if _TF_NAME.fullmatch(name) and _TF_TYPE.fullmatch(op_type):
        return FrameworkOp(name, op_type, True)
    derived = op_type or derived_op_type(name)
    if _JAX_TYPE.fullmatch(derived):
        return FrameworkOp(name, derived.split("[", 1)[0], True)
    if not op_type:
        return FrameworkOp(name, derived, True)
    return FrameworkOp(fullname, "", False)


def hlo_provenance(op_name: str, op_type: str) -> str:
    """The full name an HLO instruction's metadata gives its framework op ("" for none)."""
    if not op_type:
        if not op_name:
            return ""
        if op_name in _XLA_ARGS_OR_RETVALS:
            op_type = op_name
    return f"{op_name}:{op_type}"
