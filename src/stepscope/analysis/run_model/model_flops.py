"""Model FLOPs of a PyTorch run, from the shapes of its matmul, convolution and attention ops.

Kineto records each operator's input shapes (``Input Dims``), element types (``Input type``)
and scalar arguments (``Concrete Inputs``) when the profiler runs with ``record_shapes``.
The FLOPs are counted as the usual analytic model counts them (AMD's TraceLens perf model,
PyTorch's own ``with_flops`` counts, the flash-attention benchmark), one multiply-add = 2:

- ``mm`` A[M,K]·B[K,N], ``addmm``, ``bmm``, ``baddbmm`` (batch b), ``matmul`` (broadcast
  batch) and ``linear`` X[…,K]·W[N,K]ᵀ: 2 × batch × M × N × K (a bias add is not counted);
- convolution (``conv1d/2d/3d``, ``convolution``, ``_convolution``): 2 × batch × output
  positions × output channels × input channels per group × kernel positions, the output
  size from the input, stride, padding and dilation (``Concrete Inputs``); transposed
  convolutions the other way round; ``convolution_backward``: that once per gradient asked
  for (input, weight);
- attention (``scaled_dot_product_attention``, its flash, memory-efficient and cuDNN
  variants, ``_flash_attention_forward``, ``_efficient_attention_forward``): 2 × batch ×
  heads × query length × key length × (query-key head size + value head size), half of it
  when causal; their backward ops 2.5 × the forward.

Only the outermost counted op of a nest is counted (``linear`` calls ``addmm``,
``scaled_dot_product_attention`` calls its flash variant), so each multiply counts once.
An op of these kinds whose shapes are missing, or a convolution without its scalar
arguments, is counted apart as "uncounted": its FLOPs are unknown, not guessed.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from stepscope.analysis.run_model.steps import Steps
from stepscope.model.events import EventTable

I64 = NDArray[np.int64]

_MATMUL = frozenset({"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul",
                     "aten::linear", "aten::_addmm_activation"})
_CONV = frozenset({"aten::conv1d", "aten::conv2d", "aten::conv3d", "aten::convolution",
                   "aten::_convolution", "aten::convolution_backward",
                   "aten::conv_transpose1d", "aten::conv_transpose2d",
                   "aten::conv_transpose3d"})
# Attention ops with [batch, heads, length, head size] inputs: the index of ``is_causal``.
_SDPA_CAUSAL_ARG = {
    "aten::scaled_dot_product_attention": 5,
    "aten::_scaled_dot_product_flash_attention": 4,
    "aten::_scaled_dot_product_flash_attention_for_cpu": 4,
    "aten::_scaled_dot_product_efficient_attention": 6,
    "aten::_scaled_dot_product_cudnn_attention": 6,
}
# Their backward ops: query at 1, ``is_causal`` at this index.
_SDPA_BACKWARD_CAUSAL_ARG = {
    "aten::_scaled_dot_product_flash_attention_backward": 11,
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward": 10,
    "aten::_scaled_dot_product_efficient_attention_backward": 11,
    "aten::_scaled_dot_product_cudnn_attention_backward": 11,
}
# Attention ops with [batch, length, heads, head size] inputs: the index of ``is_causal``.
_FLASH_CAUSAL_ARG = {"aten::_flash_attention_forward": 8,
                     "aten::_efficient_attention_forward": 9}
_COUNTED = _MATMUL | _CONV | set(_SDPA_CAUSAL_ARG) | set(_SDPA_BACKWARD_CAUSAL_ARG) \
    | set(_FLASH_CAUSAL_ARG)
# Kineto's element type names → the precision of a peak.
_PRECISION = {"float": "fp32", "c10::BFloat16": "bf16", "c10::Half": "fp16",
              "c10::Float8_e4m3fn": "fp8", "c10::Float8_e5m2": "fp8",
              "c10::Float8_e4m3fnuz": "fp8", "c10::Float8_e5m2fnuz": "fp8", "double": "fp64"}
_MAX_TEXT = 1 << 16  # an argument list longer than this is not read


@dataclass(frozen=True)
class HostModelFlops:
    """One host's model FLOPs: per step, in all, the precision most of them ran at."""

    step_flops: list[float]  # per step of the host's steps
    total_flops: float  # every counted op of the profile, in a step or not
    precision: str  # "bf16", "fp16", "fp32", "fp8", "fp64" or "" (unknown)
    counted: int  # ops whose FLOPs were counted
    uncounted: int  # matmul/convolution/attention ops whose shapes or arguments are missing
    source: str = "PyTorch op shapes"

    def to_dict(self) -> dict[str, Any]:
        return {"step_flops": list(self.step_flops), "total_flops": self.total_flops,
                "precision": self.precision, "counted": self.counted,
                "uncounted": self.uncounted, "source": self.source}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> HostModelFlops:
        return cls([float(x) for x in d["step_flops"]], float(d["total_flops"]),
                   str(d["precision"]), int(d["counted"]), int(d["uncounted"]),
                   str(d["source"]))


def pytorch_model_flops(table: EventTable, steps: Steps) -> HostModelFlops | None:
    """The model FLOPs of a Kineto trace's host ops (None when no op has recorded shapes)."""
    named = np.array([n in _COUNTED for n in table.names] + [False], dtype=bool)
    if not named.any():
        return None
    dims = _text_stat(table, "Input Dims")
    if not dims:
        return None
    rows = np.flatnonzero(named[table.name])
    rows = _outermost(table, rows)
    types = _text_stat(table, "Input type")
    concrete = _text_stat(table, "Concrete Inputs")
    flops = np.zeros(len(rows), dtype=np.float64)
    by_precision: dict[str, float] = {}
    uncounted = 0
    for k, row in enumerate(rows.tolist()):
        name = table.names[table.name[row]]
        value = op_flops(name, _json_list(dims.get(row)), _json_list(concrete.get(row)))
        if value is None:
            uncounted += 1
            continue
        flops[k] = value
        kinds = _json_list(types.get(row))
        precision = _PRECISION.get(str(kinds[0]) if kinds else "", "")
        by_precision[precision] = by_precision.get(precision, 0.0) + value
    step_flops = [0.0] * len(steps)
    if len(steps) and len(rows):
        start = table.start_ns[rows]
        pos = np.searchsorted(steps.start_ns, start, side="right") - 1
        inside = (pos >= 0) & (start < steps.end_ns[np.clip(pos, 0, None)])
        sums = np.bincount(pos[inside], weights=flops[inside], minlength=len(steps))
        step_flops = [float(x) for x in sums[:len(steps)]]
    precision = max(by_precision, key=lambda p: by_precision[p]) if by_precision else ""
    return HostModelFlops(step_flops, float(flops.sum()), precision,
                          int(len(rows)) - uncounted, uncounted)


def _text_stat(table: EventTable, stat: str) -> dict[int, str]:
    rows, codes, values = table.text_stat(stat)
    return {r: values[c] for r, c in zip(rows.tolist(), codes.tolist(), strict=True)}


def _json_list(text: str | None) -> list[Any]:
    if not text or len(text) > _MAX_TEXT:
        return []
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: absurdly nested text
        return []
    return value if isinstance(value, list) else []


def _outermost(table: EventTable, rows: I64) -> I64:
    """``rows`` less those nested inside another of them on the same thread."""
    if not len(rows):
        return rows
    start = table.start_ns[rows]
    end = start + table.duration_ns[rows]
    line = table.line[rows]
    order = np.lexsort((-end, start, line))
    keep = np.ones(len(rows), dtype=bool)
    last_line, reach = -1, -1
    for k in order.tolist():
        if int(line[k]) != last_line:
            last_line, reach = int(line[k]), -1
        if end[k] <= reach:
            keep[k] = False  # inside an op already counted
        else:
            reach = int(end[k])
    out: I64 = rows[keep]
    return out


def _shape(value: Any) -> list[int] | None:
    if not isinstance(value, list) or not all(isinstance(d, int) and d >= 0 for d in value):
        return None
    return [int(d) for d in value]


def _prod(values: list[int]) -> int:
    return math.prod(values) if values else 1


def op_flops(name: str, dims: list[Any], concrete: list[Any]) -> float | None:
    """The FLOPs of one op from its input shapes and scalar arguments (None: unknown)."""
    shapes = [_shape(d) for d in dims]
    try:
        if name in _MATMUL:
            return _matmul_flops(name, shapes)
        if name in _CONV:
            return _conv_flops(name, shapes, concrete)
        if name in _SDPA_CAUSAL_ARG:
            return _attention_flops(shapes[0], shapes[1], shapes[2], heads_first=True,
                                    causal=_flag(concrete, _SDPA_CAUSAL_ARG[name]))
        if name in _SDPA_BACKWARD_CAUSAL_ARG:
            forward = _attention_flops(shapes[1], shapes[2], shapes[3], heads_first=True,
                                       causal=_flag(concrete, _SDPA_BACKWARD_CAUSAL_ARG[name]))
            return None if forward is None else 2.5 * forward
        if name in _FLASH_CAUSAL_ARG:
            return _attention_flops(shapes[0], shapes[1], shapes[2], heads_first=False,
                                    causal=_flag(concrete, _FLASH_CAUSAL_ARG[name]))
    except (IndexError, TypeError, ValueError):
        return None
    return None


def _flag(concrete: list[Any], index: int) -> bool:
    return index < len(concrete) and str(concrete[index]).strip().lower() == "true"


def _ints(text: Any) -> list[int] | None:
    """A scalar list argument as Kineto writes it ("[1, 1]", "2"); None when not one."""
    if isinstance(text, int):
        return [text]
    try:
        value = json.loads(str(text)[:_MAX_TEXT])
    except (ValueError, RecursionError):
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return [value]
    if isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool)
                                       for v in value):
        return [int(v) for v in value]
    return None


def _matmul_flops(name: str, shapes: list[list[int] | None]) -> float | None:
    if name in ("aten::addmm", "aten::baddbmm", "aten::_addmm_activation"):
        shapes = shapes[1:]  # (bias, a, b, ...)
    a, b = shapes[0], shapes[1]
    if a is None or b is None or not a or not b:
        return None
    if name == "aten::linear":  # x[..., K] · w[N, K]ᵀ
        if len(b) not in (1, 2) or b[-1] != a[-1]:
            return None
        out = b[0] if len(b) == 2 else 1
        return 2.0 * _prod(a[:-1]) * out * a[-1]
    # mm, bmm, matmul: a[..., M, K] · b[..., K, N], batch dimensions broadcast
    m = a[-2] if len(a) >= 2 else 1
    k = a[-1]
    n = b[-1] if len(b) >= 2 else 1
    if (b[-2] if len(b) >= 2 else b[0]) != k:
        return None
    batch_a, batch_b = a[:-2], b[:-2]
    width = max(len(batch_a), len(batch_b))
    batch_a = [1] * (width - len(batch_a)) + batch_a
    batch_b = [1] * (width - len(batch_b)) + batch_b
    batch = _prod([max(x, y) for x, y in zip(batch_a, batch_b, strict=True)])
    return 2.0 * batch * m * n * k


def _conv_flops(name: str, shapes: list[list[int] | None],
                concrete: list[Any]) -> float | None:
    if name == "aten::convolution_backward":
        # (grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed,
        # output_padding, groups, output_mask): the output's size is grad_output's.
        grad, x, w = shapes[0], shapes[1], shapes[2]
        if grad is None or x is None or w is None or len(x) < 3 or len(w) != len(x):
            return None
        transposed = _flag(concrete, 7)
        forward = (2.0 * x[0] * _prod(x[2:]) * x[1] * _prod(w[1:]) if transposed
                   else 2.0 * grad[0] * _prod(grad[2:]) * grad[1] * _prod(w[1:]))
        mask = str(concrete[10]).lower() if len(concrete) > 10 else ""
        wanted = mask.count("true") if "[" in mask else 2
        return forward * min(wanted, 2)
    x, w = shapes[0], shapes[1]
    if x is None or w is None or len(x) < 3 or len(w) != len(x):
        return None
    if name.startswith("aten::conv_transpose"):
        return 2.0 * x[0] * _prod(x[2:]) * x[1] * _prod(w[1:])
    if name in ("aten::convolution", "aten::_convolution"):
        if _flag(concrete, 6):
            return 2.0 * x[0] * _prod(x[2:]) * x[1] * _prod(w[1:])
        stride, padding, dilation = (_arg(concrete, i) for i in (3, 4, 5))
    else:  # conv1d/2d/3d(input, weight, bias, stride, padding, dilation, groups)
        stride, padding, dilation = (_arg(concrete, i) for i in (3, 4, 5))
    spatial = len(x) - 2
    out = _output_size(x[2:], w[2:], stride, padding, dilation, spatial)
    if out is None:
        return None
    # weight[Cout, Cin / groups, *kernel]
    return 2.0 * x[0] * _prod(out) * w[0] * _prod(w[1:])


def _arg(concrete: list[Any], index: int) -> Any:
    return concrete[index] if index < len(concrete) else None


def _output_size(size: list[int], kernel: list[int], stride: Any, padding: Any,
                 dilation: Any, spatial: int) -> list[int] | None:
    def per_dim(value: Any) -> list[int] | None:
        if value is None or value == "":
            return None  # not recorded: the output's size is unknown, not guessed
        got = _ints(value)
        if got is None:
            return None
        return got * spatial if len(got) == 1 else got

    s, d = per_dim(stride), per_dim(dilation)
    if s is None or d is None or len(s) != spatial or len(d) != spatial:
        return None
    text = str(padding).strip().strip('"').lower() if padding is not None else ""
    if text == "same":
        return list(size)
    p = [0] * spatial if text == "valid" else per_dim(padding)
    if p is None or len(p) != spatial or min(s) <= 0:
        return None
    out = [(n + 2 * pi - di * (k - 1) - 1) // si + 1
           for n, k, si, pi, di in zip(size, kernel, s, p, d, strict=True)]
    return out if min(out) > 0 else None


def _attention_flops(q: list[int] | None, k: list[int] | None, v: list[int] | None, *,
                     heads_first: bool, causal: bool) -> float | None:
    if q is None or k is None or v is None or len(q) != 4 or len(k) != 4 or len(v) != 4:
        return None
    if heads_first:  # [batch, heads, length, head size]
        batch, heads, sq, dqk = q
        skv, dv = k[2], v[3]
    else:  # [batch, length, heads, head size]
        batch, sq, heads, dqk = q
        skv, dv = k[1], v[3]
    forward = 2.0 * batch * heads * sq * skv * (dqk + dv)
    return forward / 2.0 if causal else forward
