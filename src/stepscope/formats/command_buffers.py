"""The HLO ops behind the kernels of an XLA command buffer (a CUDA graph) on GPU.

XLA on GPU records runs of its thunks into command buffers; every kernel one runs names the
buffer (``hlo_op`` ``command_buffer_1``), not the fusion or library call it belongs to, and
the HLO the profile keeps usually predates the buffers (no instruction has the buffer's
name). XProf stops there: on such a profile its HLO op stats and op profile are empty and
every kernel's op is ``XlaModule``. We go further, from three facts of the format:

- each launch of a buffer is one ``scope_range_id`` (``correlation_id`` where that is
  absent), and its kernels run in the order of the buffer's commands, which is the order the
  module's schedule (``HloModuleProto.schedule``) runs its instructions;
- a fusion's kernel is named after it, with the characters other than letters, digits and
  ``_`` made ``_`` (``loop_add_fusion.2`` runs ``loop_add_fusion_2``); XLA reuses one kernel
  for fusions of the same computation, so a kernel named after one fusion may run for a
  like one (``wrapped_subtract_3`` for ``wrapped_subtract.1``);
- a library call (cuBLAS's ``nvjet`` GEMMs, cuDNN) runs kernels named after nothing in the
  HLO, with memsets of its own before them.

One launch, the most common sequence of kernels, is aligned with the buffer's instructions
in schedule order: named kernels anchor to the next instruction of their name (or a fusion
like it), and the unnamed kernels between two anchors go to the instructions between them
(one each where the counts agree, memsets with the kernel after them; all to it where there
is one). Every launch with the same sequence gets the same ops by position; a kernel that
cannot be placed, or a launch that differs, keeps the buffer as its op.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
from numpy.typing import NDArray

from stepscope.model.hlo import HloModule, Instruction

I64 = NDArray[np.int64]

# Opcodes that run no kernel of their own (bookkeeping, control flow run as other thunks).
_NO_KERNEL = frozenset({
    "parameter", "constant", "get-tuple-element", "tuple", "bitcast", "after-all",
    "add-dependency", "opt-barrier", "partition-id", "replica-id", "while", "conditional",
    "call", "domain",
})
_MEMORY_OP = re.compile(r"^(Memset|Memcpy|memset|memcpy)")
_NOT_IN_NAME = re.compile(r"[^A-Za-z0-9_]")


def kernel_name(inst_name: str) -> str:
    """The name XLA gives the kernel of an instruction (its name, sanitised)."""
    return _NOT_IN_NAME.sub("_", inst_name)


def buffer_instructions(module: HloModule, buffer: str, outside: set[str]
                        ) -> list[Instruction]:
    """The instructions a command buffer may run, in schedule order: the computation the
    buffer's instruction calls where the HLO has it, else the entry computation's; those
    that run no kernel, or whose kernels the profile names apart (``outside``), left out."""
    inst = module.instruction(buffer)
    comps = [module.computation(c) for c in inst.called_computation_ids] if inst else [
        module.computation(module.entry_computation_id) or next(
            (c for c in module.computations if c.name == module.entry_computation_name),
            None)]
    return [i for c in comps if c is not None for i in module.in_order(c)
            if i.opcode not in _NO_KERNEL and i.name not in outside]


def _signature(module: HloModule, inst: Instruction) -> tuple[Any, ...]:
    """What makes two fusions run one kernel: their kind, shapes and fused opcodes."""
    fused = [module.computation(c) for c in inst.called_computation_ids]
    return (inst.opcode, inst.fusion_kind, inst.shape.text(),
            tuple(operand.shape.text() if (operand := module.by_id(o)) is not None else ""
                  for o in inst.operand_ids),
            tuple((i.opcode, i.shape.text()) for c in fused if c is not None
                  for i in c.instructions))


def align(module: HloModule, kernels: list[str], cands: list[Instruction]) -> list[int]:
    """For one launch's kernels (names, in time order): the index into ``cands`` of the
    instruction each belongs to, -1 where it cannot be told (see the module docstring)."""
    by_kernel = {kernel_name(i.name): i for c in module.computations for i in c.instructions}
    signatures: dict[int, tuple[Any, ...]] = {}  # by candidate: computed once, compared often

    def signature(j: int) -> tuple[Any, ...]:
        if j not in signatures:
            signatures[j] = _signature(module, cands[j])
        return signatures[j]

    named_kernels = set(kernels)
    out = [-1] * len(kernels)
    anchors: list[tuple[int, int]] = []  # (kernel position, candidate index)
    pos = 0
    for k, name in enumerate(kernels):
        named = by_kernel.get(name)
        if named is None:
            continue
        found = next((j for j in range(pos, len(cands)) if cands[j].name == named.name), -1)
        if found < 0 and named.opcode == "fusion":
            sig = _signature(module, named)
            found = next((j for j in range(pos, len(cands)) if cands[j].opcode == "fusion"
                          and signature(j) == sig), -1)
        if found >= 0:
            out[k] = found
            anchors.append((k, found))
            pos = found + 1
    bounds = [(-1, -1), *anchors, (len(kernels), len(cands))]
    for (k0, j0), (k1, j1) in zip(bounds, bounds[1:], strict=False):
        gap_k = [k for k in range(k0 + 1, k1) if out[k] < 0]
        gap_c = [j for j in range(j0 + 1, j1)
                 if kernel_name(cands[j].name) not in named_kernels]  # none of its name ran
        work = [k for k in gap_k if not _MEMORY_OP.match(kernels[k])]
        if len(gap_c) == 1:
            for k in gap_k:
                out[k] = gap_c[0]
        elif gap_c and len(work) == len(gap_c):
            for k, j in zip(work, gap_c, strict=True):
                out[k] = j
            # A library call's memsets run just before its kernels: each joins the next.
            following = -1
            for k in reversed(gap_k):
                if out[k] >= 0:
                    following = out[k]
                elif following >= 0:
                    out[k] = following
    return out


def attribute(module: HloModule, buffer: str, outside: set[str], names: list[str],
              name_code: I64, launch: I64, start: I64) -> tuple[I64, list[Instruction]]:
    """Each kernel row of one command buffer (``name_code`` into ``names``, its launch id,
    -1 where unknown, and start): the index of its instruction in the returned list, -1
    where it stays with the buffer."""
    n = len(name_code)
    op = np.full(n, -1, np.int64)
    cands = buffer_instructions(module, buffer, outside)
    if not n or not cands or (launch < 0).any():
        return op, cands
    order = np.lexsort((start, launch))
    sl = launch[order]
    first = np.r_[0, np.flatnonzero(sl[1:] != sl[:-1]) + 1]
    sizes = np.diff(np.r_[first, n])
    position = np.arange(n, dtype=np.int64) - np.repeat(first, sizes)
    # One hash per launch of its kernel sequence (uint64 arithmetic wraps, as meant).
    powers = np.cumprod(np.full(int(sizes.max()), 1_000_003, np.uint64), dtype=np.uint64)
    with np.errstate(over="ignore"):
        term = (name_code[order].astype(np.uint64) + np.uint64(1)) * powers[position]
    digest = np.add.reduceat(term, first)
    keys, inverse, counts = np.unique(np.stack([sizes.astype(np.uint64), digest]), axis=1,
                                      return_inverse=True, return_counts=True)
    common = int(np.argmax(counts))
    template_launch = int(np.flatnonzero(inverse.reshape(-1) == common)[0])
    a = int(first[template_launch])
    kernels = [names[int(c)] for c in name_code[order[a:a + int(sizes[template_launch])]]]
    template = np.array(align(module, kernels, cands), np.int64)
    same = np.repeat(inverse.reshape(-1) == common, sizes)
    op[order[same]] = template[position[same]]
    return op, cands
