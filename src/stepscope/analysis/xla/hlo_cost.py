"""What an HLO instruction costs, estimated from its program: FLOPs, bytes, category, text.

Used where a profile records no FLOP counts (GPU and CPU profiles). The formulas are the
usual ones, as XLA's cost analysis counts them:

- dot: 2 × output elements × the contracted size;
- convolution (and cuDNN/MIOpen convolution custom calls): 2 × batch × output features ×
  input features per group × the (output, kernel) position pairs that land on real input
  (padding and dilation holes excluded), per spatial dimension;
- elementwise arithmetic: one FLOP per output element (transcendental functions, which XLA
  counts apart, are not FLOPs);
- reduce: (input elements − output elements) × the reducer's FLOPs per application;
- fusion: the sum over its fused computation.

Bytes accessed are the operands' and the output's sizes (a fusion counts only its own
operands and output: what it reads and writes of memory). A custom call's bytes are counted
only for convolutions (their operands); other custom calls (library GEMMs, FFI kernels such
as fused attention) count none, as XLA's GPU cost analysis and so XProf count none, rather
than a guess that can exceed the device's bandwidth.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stepscope.model.hlo import HloModule, Instruction, WindowDim

# Elementwise opcodes XLA counts as one FLOP per element.
ELEMENTWISE_FLOPS = frozenset({
    "add", "subtract", "multiply", "divide", "maximum", "minimum", "power", "remainder",
    "abs", "negate", "compare", "select", "clamp", "and", "or", "xor", "not", "sign", "floor",
    "ceil", "round-nearest-afz", "round-nearest-even", "atan2", "is-finite", "shift-left",
    "shift-right-arithmetic", "shift-right-logical", "popcnt", "clz", "real", "imag",
})
# Data movement and bookkeeping: no FLOPs.
_NO_FLOPS = frozenset({
    "parameter", "constant", "tuple", "get-tuple-element", "bitcast", "reshape", "transpose",
    "broadcast", "copy", "slice", "dynamic-slice", "dynamic-update-slice", "concatenate",
    "pad", "iota", "convert", "reverse", "gather", "scatter", "copy-start", "copy-done",
})
_CONV_TARGETS = ("__cudnn$conv", "__miopen$conv")
# Fusion kinds as XProf names their categories.
FUSION_CATEGORY = {"kLoop": "loop fusion", "kInput": "input fusion", "kOutput": "output fusion",
                   "kCustom": "custom fusion"}
# Nesting deeper than this (fusions in fusions) is cut off: it bounds the work on absurd input.
_MAX_DEPTH = 16
# A window or output dimension beyond this is not a real convolution: its FLOPs are left at 0
# rather than enumerated.
_MAX_DIM = 1 << 20


@dataclass(frozen=True)
class Cost:
    """One execution's estimated FLOPs and bytes accessed."""

    flops: float
    bytes_accessed: float


def category_of(inst: Instruction) -> str:
    """The op's category as XProf names it on GPU: ``<kind> fusion`` or the opcode."""
    if inst.opcode == "fusion":
        return FUSION_CATEGORY.get(inst.fusion_kind, "fusion")
    return inst.opcode


def cost_of(module: HloModule, inst: Instruction) -> Cost:
    """The estimated cost of one execution of ``inst``."""
    return Cost(_flops(module, inst, 0, {}), _bytes(module, inst))


def _operands(module: HloModule, inst: Instruction) -> list[Instruction]:
    return [op for op in (module.by_id(i) for i in inst.operand_ids) if op is not None]


def _bytes(module: HloModule, inst: Instruction) -> float:
    if inst.opcode in ("parameter", "constant", "tuple", "get-tuple-element", "bitcast"):
        return 0.0
    operands = sum(op.shape.bytes() for op in _operands(module, inst))
    if inst.opcode == "custom-call":
        if not inst.custom_call_target.startswith(_CONV_TARGETS):
            return 0.0  # what a library call reads is unknown: XLA (and XProf) count none
        return float(operands)  # scratch space in the output tuple is not data
    return float(operands + inst.shape.bytes())


def _flops(module: HloModule, inst: Instruction, depth: int, memo: dict[int, float]) -> float:
    op = inst.opcode
    if depth > _MAX_DEPTH or op in _NO_FLOPS:
        return 0.0
    if op in ELEMENTWISE_FLOPS:
        return float(inst.shape.elements())
    if op == "dot":
        return _dot_flops(module, inst)
    if op == "convolution" or (op == "custom-call"
                               and inst.custom_call_target.startswith(_CONV_TARGETS)):
        return _conv_flops(module, inst)
    if op in ("reduce", "reduce-window"):
        return _reduce_flops(module, inst, depth, memo)
    if op in ("fusion", "call"):
        return sum(_computation_flops(module, c, depth + 1, memo)
                   for c in inst.called_computation_ids)
    return 0.0


def _computation_flops(module: HloModule, cid: int, depth: int, memo: dict[int, float]
                       ) -> float:
    # Memoised per computation (and 0 while being computed: a cycle in bad input ends there),
    # so that many callers of one computation cost one walk of it.
    if cid in memo:
        return memo[cid]
    comp = module.computation(cid)
    if comp is None or depth > _MAX_DEPTH:
        return 0.0
    memo[cid] = 0.0
    memo[cid] = total = sum(_flops(module, i, depth, memo) for i in comp.instructions)
    return total


def _dot_flops(module: HloModule, inst: Instruction) -> float:
    operands = _operands(module, inst)
    if not operands or inst.dot_dims is None:
        return 0.0
    dims = operands[0].shape.dimensions
    contracted = 1
    for d in inst.dot_dims.lhs_contracting:
        if 0 <= d < len(dims):
            contracted *= dims[d]
    return 2.0 * inst.shape.elements() * contracted


def _valid_pairs(size_in: int, size_out: int, w: WindowDim) -> int:
    """(output position, kernel position) pairs of one dimension that read real input."""
    if not (size_in > 0 and 0 < size_out <= _MAX_DIM and 0 < w.size <= _MAX_DIM) \
            or size_out * w.size > _MAX_DIM * 16:
        return 0
    out = np.arange(size_out, dtype=np.int64)[:, None]
    k = np.arange(w.size, dtype=np.int64)[None, :]
    pos = out * w.stride + k * w.window_dilation - w.padding_low
    dilated = (size_in - 1) * w.base_dilation + 1
    ok = (pos >= 0) & (pos < dilated) & (pos % w.base_dilation == 0)
    return int(ok.sum())


def _conv_flops(module: HloModule, inst: Instruction) -> float:
    operands = _operands(module, inst)
    dn = inst.conv_dims
    if len(operands) < 2 or dn is None:
        return 0.0
    lhs, rhs = operands[0].shape, operands[1].shape
    out = inst.shape.tuple_shapes[0] if inst.shape.is_tuple and inst.shape.tuple_shapes \
        else inst.shape
    try:
        batch = out.dimensions[dn.output_batch]
        features = out.dimensions[dn.output_feature]
        per_group = rhs.dimensions[dn.kernel_input_feature]
        taps = 1
        for i, (di, do) in enumerate(zip(dn.input_spatial, dn.output_spatial, strict=True)):
            w = inst.window[i] if i < len(inst.window) else WindowDim()
            taps *= _valid_pairs(lhs.dimensions[di], out.dimensions[do], w)
    except (IndexError, ValueError):
        return 0.0
    return 2.0 * batch * features * per_group * taps


def _reduce_flops(module: HloModule, inst: Instruction, depth: int,
                  memo: dict[int, float]) -> float:
    operands = _operands(module, inst)
    if not operands:
        return 0.0
    inputs = operands[: max(len(operands) // 2, 1)]  # (inputs..., init values...)
    out = inst.shape.tuple_shapes if inst.shape.is_tuple else [inst.shape]
    applications = max(sum(s.shape.elements() for s in inputs)
                       - sum(s.elements() for s in out), 0)
    per = sum(_computation_flops(module, c, depth + 1, memo)
              for c in inst.called_computation_ids)
    return float(applications) * max(per, 1.0)


def expression(module: HloModule, inst: Instruction) -> str:
    """The instruction in XLA's text form (shape, opcode, operands, main attributes)."""
    args = ", ".join(f"{op.shape.text()} %{op.name}" for op in _operands(module, inst))
    text = f"%{inst.name} = {inst.shape.text()} {inst.opcode}({args})"
    extras = []
    if inst.window:
        extras.append("window={size=" + "x".join(str(w.size) for w in inst.window) + "}")
    if inst.fusion_kind:
        extras.append(f"kind={inst.fusion_kind}")
    for cid in inst.called_computation_ids:
        comp = module.computation(cid)
        if comp is not None:
            extras.append(f"calls=%{comp.name}")
    if inst.custom_call_target:
        extras.append(f'custom_call_target="{inst.custom_call_target}"')
    return ", ".join([text, *extras])


def fused_ops(module: HloModule, inst: Instruction) -> list[Instruction]:
    """The instructions a fusion runs (parameters left out), in program order."""
    out: list[Instruction] = []
    for cid in inst.called_computation_ids if inst.opcode == "fusion" else []:
        comp = module.computation(cid)
        if comp is not None:
            out += [i for i in comp.instructions if i.opcode != "parameter"]
    return out
