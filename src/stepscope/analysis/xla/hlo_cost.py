"""What an HLO instruction costs, estimated from its program: FLOPs, bytes, category, text.

Used where a profile records no FLOP counts (GPU and CPU profiles). FLOPs are counted as
XLA's generic cost analysis (``HloCostAnalysis``) counts them:

- dot: 2 × output elements × the contracted size;
- convolution (and cuDNN/MIOpen convolution custom calls): 2 × batch × output features ×
  input features per group × the (output, kernel) position pairs that land on real input
  (padding and dilation holes excluded), per spatial dimension;
- elementwise arithmetic, comparisons, selects, clamps and converts: one FLOP per output
  element; transcendental functions (exp, log, logistic, power, sqrt, cbrt, rsqrt, tanh,
  sin, cos, tan, expm1, log1p, atan2, erf) are counted apart, as transcendentals, not FLOPs;
- reduce: (elements of the first input − elements of the first output) × the reducer's
  FLOPs per application; reduce-window: (window elements − 1) × output elements × the
  reducer's;
- fusion: the sum over its fused computation (Triton and cuDNN GEMM fusions included: their
  dot is inside).

Past XLA's cost analysis (which, and so XProf, counts library calls as 0 FLOPs):

- library GEMMs (``__cublas$gemm``, ``__cublas$lt$matmul``…, cuBLAS on CUDA and
  rocBLAS/hipBLASLt on ROCm under the same targets): 2 × output elements × the contracted
  size, the contracting dimensions read from the call's ``gemm_backend_config``;
- fused attention (TransformerEngine's ``te_fused_attn_{forward,backward}_ffi``, XLA's
  cuDNN ``__cudnn$fmha…`` calls and their ``…Backward`` twins): the flash-attention
  convention, 2 × batch × heads × query length × key length × (query-key
  head size + value head size) forward, half of it under a causal mask, 2.5 × that backward.

XProf on GPU counts elementwise ops by XLA's GPU cost model, which prices each element in
estimated clock cycles (3 for a plain op, more for a transcendental one), not FLOPs: its
elementwise and reduce fusions show about 3× (or more) our figures; dots and convolutions
agree.

Bytes accessed are the operands' and the output's sizes (a fusion counts only its own
operands and output: what it reads and writes of memory). A custom call's bytes are counted
only for convolutions (their operands); other custom calls (library GEMMs, FFI kernels such
as fused attention) count none, as XLA's GPU cost analysis and so XProf count none, rather
than a guess that can exceed the device's bandwidth.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from stepscope.model.hlo import HloModule, Instruction, Shape, WindowDim

# Elementwise opcodes XLA counts as one FLOP per element.
ELEMENTWISE_FLOPS = frozenset({
    "add", "subtract", "multiply", "divide", "maximum", "minimum", "remainder",
    "abs", "negate", "compare", "select", "clamp", "and", "or", "xor", "not", "sign", "floor",
    "ceil", "round-nearest-afz", "round-nearest-even", "is-finite", "shift-left",
    "shift-right-arithmetic", "shift-right-logical", "popcnt", "clz", "real", "imag",
    "convert", "complex",
})
# Elementwise opcodes XLA counts as one transcendental per element (and no FLOPs).
TRANSCENDENTAL = frozenset({
    "exponential", "log", "logistic", "power", "sqrt", "cbrt", "rsqrt", "tanh", "sine",
    "cosine", "tan", "exponential-minus-one", "log-plus-one", "atan2", "erf",
})
# Data movement and bookkeeping: no FLOPs.
_NO_FLOPS = frozenset({
    "parameter", "constant", "tuple", "get-tuple-element", "bitcast", "reshape", "transpose",
    "broadcast", "copy", "slice", "dynamic-slice", "dynamic-update-slice", "concatenate",
    "pad", "iota", "reverse", "gather", "scatter", "copy-start", "copy-done",
})
_CONV_TARGETS = ("__cudnn$conv", "__miopen$conv")
# Library GEMM calls (XLA's names; ROCm's rocBLAS and hipBLASLt calls use the same ones).
GEMM_TARGETS = ("__cublas$gemm", "__cublas$lt$matmul")
# TransformerEngine's fused attention (JAX FFI custom calls).
_TE_ATTENTION = re.compile(r"^te_fused_attn_(forward|backward)")
# XLA's cuDNN fused attention (``__cudnn$fmhaSoftmax``, ``…ScaleBiasSoftmaxDropout``,
# ``…SoftmaxF8``, each with a ``…Backward`` twin).
_CUDNN_ATTENTION = re.compile(r"^__cudnn\$fmha\w*$")
_CUDNN_CAUSAL = frozenset({"CAUSAL", "PADDING_CAUSAL"})
# TransformerEngine's causal mask kinds (NVTE_Mask_Type: causal, padding-causal, and their
# bottom-right variants).
_TE_CAUSAL = frozenset({2, 3, 4, 5})
_TE_ATTR = re.compile(r"(\w+)\s*=\s*(-?\d+)\s*:\s*i64")
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
    """One execution's estimated FLOPs, bytes accessed and transcendentals."""

    flops: float
    bytes_accessed: float
    transcendentals: float = 0.0


def category_of(inst: Instruction) -> str:
    """The op's category as XProf names it on GPU: ``<kind> fusion`` or the opcode."""
    if inst.opcode == "fusion":
        return FUSION_CATEGORY.get(inst.fusion_kind, "fusion")
    return inst.opcode


def cost_of(module: HloModule, inst: Instruction) -> Cost:
    """The estimated cost of one execution of ``inst``."""
    return Cost(_flops(module, inst, 0, {}), _bytes(module, inst),
                _flops(module, inst, 0, {}, TRANSCENDENTAL))


def flops_known(inst: Instruction) -> bool:
    """Whether our count of ``inst``'s FLOPs means something: False for a custom call whose
    work we cannot count (an FFI kernel, a library call other than a GEMM or convolution)."""
    if inst.opcode != "custom-call":
        return True
    target = inst.custom_call_target
    return target.startswith(_CONV_TARGETS + GEMM_TARGETS) or bool(
        _TE_ATTENTION.match(target) or _CUDNN_ATTENTION.match(target))


def flops_precision(module: HloModule, inst: Instruction, depth: int = 0) -> str:
    """The element type the op's FLOPs are done in: the first input of its dot, convolution
    or library GEMM (a bf16 GEMM often writes f32), else its output's."""
    if inst.opcode in ("dot", "convolution", "custom-call") and inst.operand_ids:
        first = module.by_id(inst.operand_ids[0])
        if first is not None and not first.shape.is_tuple:
            return first.shape.element_type
    if inst.opcode == "fusion" and depth < _MAX_DEPTH:
        for cid in inst.called_computation_ids:
            comp = module.computation(cid)
            for sub in comp.instructions if comp is not None else []:
                if sub.opcode in ("dot", "convolution", "fusion"):
                    found = flops_precision(module, sub, depth + 1)
                    if found:
                        return found
    if depth:
        return ""
    out = inst.shape.tuple_shapes[0] if inst.shape.is_tuple and inst.shape.tuple_shapes \
        else inst.shape
    return "" if out.is_tuple else out.element_type


# XLA's PrecisionConfig: operand precisions and the dot algorithms that run TF32 or FP32.
_PRECISION_LEVEL = {"DEFAULT": 0, "HIGH": 1, "HIGHEST": 2}
_TF32_ALGORITHMS = frozenset({9, 10})  # ALG_DOT_TF32_TF32_F32, …_X3
_ALGORITHM_NUMBER = {"ALG_UNSET": 0, "ALG_DOT_TF32_TF32_F32": 9,
                     "ALG_DOT_TF32_TF32_F32_X3": 10, "ALG_DOT_F32_F32_F32": 11}


def tf32_allowed(module: HloModule, inst: Instruction, depth: int = 0) -> bool | None:
    """Whether XLA on an NVIDIA GPU may run the op's f32 matrix work (a dot, convolution or
    library GEMM, or one inside a fusion) on TF32 tensor cores: a TF32 algorithm, or no
    algorithm and DEFAULT precision (XLA's GPU backend allows TF32 there); False for f32 work
    at HIGH/HIGHEST or another algorithm; None where the op does no f32 matrix work."""
    if inst.opcode == "fusion" and depth < _MAX_DEPTH:
        for cid in inst.called_computation_ids:
            comp = module.computation(cid)
            for sub in comp.instructions if comp is not None else []:
                if sub.opcode in ("dot", "convolution", "fusion"):
                    found = tf32_allowed(module, sub, depth + 1)
                    if found is not None:
                        return found
        return None
    gemm = inst.opcode == "custom-call" and inst.custom_call_target.startswith(GEMM_TARGETS)
    conv = inst.opcode == "convolution" or (
        inst.opcode == "custom-call" and inst.custom_call_target.startswith(_CONV_TARGETS))
    if not (inst.opcode == "dot" or gemm or conv) or flops_precision(module, inst) != "f32":
        return None
    precision, algorithm = inst.operand_precision, inst.algorithm
    if gemm:  # its precision is in its backend config
        try:
            config = json.loads(inst.backend_config)["gemm_backend_config"]
            pc = config.get("precision_config", {})
            precision = max((_PRECISION_LEVEL.get(str(p), 2)
                             for p in pc.get("operand_precision", [])), default=0)
            algorithm = _ALGORITHM_NUMBER.get(str(pc.get("algorithm", "ALG_UNSET")), -1)
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
            return None
    if algorithm:
        return algorithm in _TF32_ALGORITHMS
    return precision == 0


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


def _flops(module: HloModule, inst: Instruction, depth: int, memo: dict[int, float],
           elementwise: frozenset[str] = ELEMENTWISE_FLOPS) -> float:
    """FLOPs of one execution of ``inst`` (with ``elementwise=TRANSCENDENTAL``: its
    transcendentals, which only elementwise ops, and what calls them, have)."""
    op = inst.opcode
    if depth > _MAX_DEPTH or op in _NO_FLOPS:
        return 0.0
    if op in elementwise:
        return float(inst.shape.elements())
    counting_flops = elementwise is ELEMENTWISE_FLOPS
    if op == "dot":
        return _dot_flops(module, inst) if counting_flops else 0.0
    if op == "convolution" or (op == "custom-call"
                               and inst.custom_call_target.startswith(_CONV_TARGETS)):
        return _conv_flops(module, inst) if counting_flops else 0.0
    if op == "custom-call":
        return _library_flops(module, inst) if counting_flops else 0.0
    if op in ("reduce", "reduce-window"):
        return _reduce_flops(module, inst, depth, memo, elementwise)
    if op in ("fusion", "call"):
        return sum(_computation_flops(module, c, depth + 1, memo, elementwise)
                   for c in inst.called_computation_ids)
    return 0.0


def _computation_flops(module: HloModule, cid: int, depth: int, memo: dict[int, float],
                       elementwise: frozenset[str] = ELEMENTWISE_FLOPS) -> float:
    # Memoised per computation (and 0 while being computed: a cycle in bad input ends there),
    # so that many callers of one computation cost one walk of it.
    if cid in memo:
        return memo[cid]
    comp = module.computation(cid)
    if comp is None or depth > _MAX_DEPTH:
        return 0.0
    memo[cid] = 0.0
    memo[cid] = total = sum(_flops(module, i, depth, memo, elementwise)
                            for i in comp.instructions)
    return total


def _dot_flops(module: HloModule, inst: Instruction) -> float:
    operands = _operands(module, inst)
    if not operands or inst.dot_dims is None:
        return 0.0
    return _gemm_flops(operands[0], inst.shape, inst.dot_dims.lhs_contracting)


def _gemm_flops(lhs: Instruction, out: Shape, contracting: list[int]) -> float:
    """2 × output elements × the size of the lhs's contracting dimensions."""
    dims = lhs.shape.dimensions
    contracted = 1
    for d in contracting:
        if 0 <= d < len(dims):
            contracted *= dims[d]
    return 2.0 * out.elements() * contracted


def _library_flops(module: HloModule, inst: Instruction) -> float:
    """FLOPs of a library call XLA's cost analysis leaves at 0: a GEMM or fused attention."""
    target = inst.custom_call_target
    if target.startswith(GEMM_TARGETS):
        operands = _operands(module, inst)
        contracting = _gemm_contracting(inst.backend_config)
        if not operands or contracting is None:
            return 0.0
        out = inst.shape.tuple_shapes[0] if inst.shape.is_tuple and inst.shape.tuple_shapes \
            else inst.shape  # (result, workspace)
        return _gemm_flops(operands[0], out, contracting)
    match = _TE_ATTENTION.match(target)
    if match:
        return _te_attention_flops(inst.backend_config, backward=match.group(1) == "backward")
    if _CUDNN_ATTENTION.match(target):
        return _cudnn_attention_flops(module, inst)
    return 0.0


def _gemm_contracting(config: str) -> list[int] | None:
    """The lhs contracting dimensions a GEMM call's backend config names (None: unreadable)."""
    try:
        data = json.loads(config)
        dims = data["gemm_backend_config"]["dot_dimension_numbers"]["lhs_contracting_dimensions"]
        return [int(d) for d in dims]
    except (ValueError, KeyError, TypeError, RecursionError):
        return None


def _te_attention_flops(config: str, *, backward: bool) -> float:
    """FLOPs of one TransformerEngine fused attention call, from its attributes."""
    attrs = {k: int(v) for k, v in _TE_ATTR.findall(config[:8192])}
    try:
        b, h = attrs["input_batch"], attrs["attn_heads"]
        sq, skv = attrs["q_max_seqlen"], attrs["kv_max_seqlen"]
        dqk = attrs.get("qk_head_dim") or attrs["head_dim"]
        dv = attrs.get("v_head_dim") or dqk
    except KeyError:
        return 0.0
    if min(b, h, sq, skv, dqk, dv) <= 0:
        return 0.0
    forward = 2.0 * b * h * sq * skv * (dqk + dv)
    if attrs.get("mask_type") in _TE_CAUSAL:
        forward /= 2.0
    return 2.5 * forward if backward else forward


def _size(shape: Shape, keep: Callable[[int], bool]) -> int:
    """The product of the shape's dimensions whose index ``keep`` accepts."""
    n = 1
    for i, d in enumerate(shape.dimensions):
        if keep(i):
            n *= d
    return n


def _dims(numbers: dict[str, Any], key: str) -> list[int]:
    return [int(d) for d in numbers.get(key, [])]


def _cudnn_attention_flops(module: HloModule, inst: Instruction) -> float:
    """FLOPs of one XLA cuDNN fused attention call (``__cudnn$fmha…``), the flash-attention
    convention: forward 2 × batch·heads × Sq × Skv × (Dqk + Dv) (Q·Kᵀ and P·V), halved under
    a causal mask, 2.5 × that backward. The forward reads Q, K, V (its first three operands)
    through the dot dimensions of its config (any layout); the backward writes dQ, dK, dV
    (its first three results), each [batch, heads, sequence, head size]."""
    backward = inst.custom_call_target.endswith("Backward")
    try:
        config = json.loads(inst.backend_config)["cudnn_fmha_backend_config"]
        causal = config.get("mask_type") in _CUDNN_CAUSAL or config.get("is_causal_mask") is True
        if backward:
            dq, dk, dv = (s.dimensions for s in inst.shape.tuple_shapes[:3])
            if not (len(dq) == len(dk) == len(dv) == 4 and dq[:2] == dk[:2] == dv[:2]
                    and dq[3] == dk[3] and dk[2] == dv[2]):
                return 0.0
            batch, sq, skv, dqk, d_v = dq[0] * dq[1], dq[2], dk[2], dq[3], dv[3]
        else:
            q, k, v = (o.shape for o in _operands(module, inst)[:3])
            bmm1 = config["bmm1_dot_dimension_numbers"]
            bmm2 = config["bmm2_dot_dimension_numbers"]
            q_batch = _dims(bmm1, "lhs_batch_dimensions")
            q_sum = _dims(bmm1, "lhs_contracting_dimensions")
            k_out = _dims(bmm1, "rhs_batch_dimensions") + _dims(bmm1, "rhs_contracting_dimensions")
            v_out = _dims(bmm2, "rhs_batch_dimensions") + _dims(bmm2, "rhs_contracting_dimensions")
            batch = _size(q, lambda i: i in q_batch)
            dqk = _size(q, lambda i: i in q_sum)
            sq = _size(q, lambda i: i not in q_batch and i not in q_sum)
            skv = _size(k, lambda i: i not in k_out)
            d_v = _size(v, lambda i: i not in v_out)
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return 0.0
    if min(batch, sq, skv, dqk, d_v) <= 0:
        return 0.0
    forward = 2.0 * batch * sq * skv * (dqk + d_v)
    if causal:
        forward /= 2.0
    return 2.5 * forward if backward else forward


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
                  memo: dict[int, float], elementwise: frozenset[str]) -> float:
    operands = _operands(module, inst)
    if not operands:
        return 0.0
    out = inst.shape.tuple_shapes[0] if inst.shape.is_tuple and inst.shape.tuple_shapes \
        else inst.shape
    if inst.opcode == "reduce-window":
        window = 1
        for w in inst.window:
            window *= w.size
        applications = max(window - 1, 0) * out.elements()
    else:  # the first input's and output's elements: the reducer already prices the others
        applications = max(operands[0].shape.elements() - out.elements(), 0)
    per = sum(_computation_flops(module, c, depth + 1, memo, elementwise)
              for c in inst.called_computation_ids)
    return float(applications) * per


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
