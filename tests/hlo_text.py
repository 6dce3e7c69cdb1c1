"""A small reader of XLA's HLO text form, for tests: enough of it (instruction names, shapes,
operands, custom-call targets and backend configs of one computation) to build the
``HloModule`` our cost analysis reads from a real program's printed text."""

from __future__ import annotations

import re

from stepscope.model.hlo import Computation, HloModule, Instruction, Shape

_ARRAY = re.compile(r"(\w+)\[([\d,]*)\](?:\{([\d,]*)\})?")
_LINE = re.compile(r"^\s*(?:ROOT\s+)?([\w.\-]+)\s*=\s*(.*)$")


def _shape(text: str, i: int = 0) -> tuple[Shape, int]:
    """The shape starting at text[i], and the index after it."""
    if text[i] == "(":
        parts: list[Shape] = []
        i += 1
        while text[i] != ")":
            shape, i = _shape(text, i)
            parts.append(shape)
            while text[i] in ", ":
                i += 1
        return Shape("tuple", tuple_shapes=parts), i + 1
    m = _ARRAY.match(text, i)
    assert m, text[i:i + 40]
    dims = [int(d) for d in m.group(2).split(",") if d]
    layout = [int(d) for d in m.group(3).split(",") if d] if m.group(3) is not None else None
    return Shape(m.group(1), dims, minor_to_major=layout), m.end()


def _balanced(text: str, i: int, open_: str, close: str) -> int:
    """The index just after the bracket that closes text[i] (strings skipped)."""
    depth, quoted = 0, False
    while True:
        c = text[i]
        if c == '"' and text[i - 1] != "\\":
            quoted = not quoted
        elif not quoted and c == open_:
            depth += 1
        elif not quoted and c == close:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1


def parse_computation(text: str, name: str = "main") -> HloModule:
    """One computation's instructions (lines ``name = shape opcode(operands), attrs``)."""
    insts: list[Instruction] = []
    ids: dict[str, int] = {}
    for line in text.splitlines():
        m = _LINE.match(line)
        if not m or line.strip()[-1:] == "{":
            continue
        rest = m.group(2)
        shape, i = _shape(rest)
        op = re.match(r"\s*([\w\-]+)\(", rest[i:])
        assert op, line
        start = i + op.end() - 1
        end = _balanced(rest, start, "(", ")")
        operands = [re.sub(r"/\*.*?\*/", "", o).strip()
                    for o in rest[start + 1:end - 1].split(",")]
        attrs = rest[end:]
        target = re.search(r'custom_call_target="([^"]+)"', attrs)
        config = ""
        at = attrs.find("backend_config={")
        if at >= 0:
            b = at + len("backend_config=")
            config = attrs[b:_balanced(attrs, b, "{", "}")]
        inst = Instruction(m.group(1), op.group(1), shape, id=len(insts) + 1,
                           operand_ids=[ids[o] for o in operands if o in ids],
                           custom_call_target=target.group(1) if target else "",
                           backend_config=config)
        ids[inst.name] = inst.id
        insts.append(inst)
    return HloModule(name, 1, [Computation(name, 1, insts, root_id=insts[-1].id)], 1, name)
