"""GPU kernel stats: every kernel–op pair with its launch figures, ranked by total GPU time.

A row is one kernel name launched by one op with one launch configuration (registers per
thread, shared memory, block and grid dimensions), as XProf groups them: the same kernel
launched with another configuration, or by another op, is another row.

Where the figures come from:

* **XSpace** (TensorFlow, JAX, XLA through CUPTI or ROCm): kernels are the events of GPU
  planes (not on derived lines) that carry a ``kernel_details`` stat, a space-separated list
  of ``key:value`` tokens. Keys read: ``regs``; ``static_shared`` + ``dynamic_shared``, or
  older TensorFlow's single ``shm``, or ROCm's ``group_mem`` (LDS per work-group) for shared
  memory; ``grid:x,y,z`` and ``block:x,y,z``. ROCm's ``private_mem`` (scratch) and
  ``occ_pct`` are not shared memory and are left out. A profile with no ``kernel_details``
  at all on its GPU planes falls back to every GPU event that is not a memcpy or memset,
  with no launch figures.
* **Kineto** (PyTorch): kernels are the events of category ``kernel``, with the int stats
  ``registers per thread`` and ``shared memory`` (CUPTI's static + dynamic; on ROCm's older
  roctracer the LDS size) and the JSON lists ``grid`` and ``block``. ROCm traces often give
  only grid and block, and some kernels nothing.

Memcpy and memset records are not kernels. ROCm runs copies and fills as ordinary kernels
(``__amd_rocclr_copyBuffer``/``fillBuffer`` blit kernels) on a kernel stream, with
``kernel_details``: in an XSpace those are kernels, listed as XProf lists them. (In a Kineto
trace the copy kernels are left out, as PyTorch's ``key_averages`` files copies apart.)

Figures that no GPU can have are not reported (``None``) and counted in
``KernelStats.implausible_launches``: CUPTI's launch records have been seen carrying
uninitialised memory (legacy ROCm XLA profiles report ``regs:2191500840``; TensorFlow's host
launch events in the V100 demo profile carry such values throughout, but those are not kernel
events and are never read). The bounds are generous: at most 1,024 registers per thread and
1 MiB of shared memory (today's largest: 255 and 228 KiB on NVIDIA, 512 VGPRs and 160 KiB LDS
on AMD), block dimensions of at least 1 and at most 1,024 threads in all, grid dimensions from
1 to 2^31 - 1.

The op that launched a kernel is the framework op named by the kernel (TensorFlow's ``tf_op``,
JAX's op name, else XLA's ``hlo_op``) or, failing that, the innermost host op around its launch
(correlation id), as ``framework_op_stats`` finds it; ``""`` where neither says.

Tensor Cores (NVIDIA) and Matrix Cores (AMD):

* A kernel uses them when its name holds one of its vendor's patterns (case matters). XProf's
  (2.24, as observed): for NVIDIA ``16816``, ``h884``, ``s1688``, ``hmma``, ``xmma_gemm`` and
  the like; for AMD ``mfma``, ``wmma``, ``_MI<m>x<n>x<k>`` (Tensile/hipBLASLt), ``_xdl``
  (Composable Kernel), ``gtcx`` (MIOpen xdlops iGEMM), ``gemm_fusion`` (XLA GEMM fusions) and
  ck_tile attention kernels with a tile shape. We add for NVIDIA ``tensorop`` (CUTLASS),
  ``wmma``, ``imma``, ``gmma`` (Hopper warp-group MMA), every ``sm<NN>_xmma_`` kernel (cuDNN
  and cuBLAS xmma kernels, implicit-GEMM convolutions included), cuBLAS's ``nvjet`` kernels and
  FlashAttention's ``flash_fwd``/``flash_bwd``. The vendor is the GPU plane's
  ``device_vendor``; where none is known both vendors' patterns apply (XProf marks none).
* An op is eligible when it is a convolution, a matrix multiplication or a cuDNN RNN: XProf's
  rules on TensorFlow op names (``…Conv2D``, ``…/MatMul``, ``…BatchMatMul…``,
  ``…FusedMatMul``, ``…/CudnnRNN``, ``…XlaDot`` ...) and JAX op names (``…dot_general``,
  ``…conv_general_dilated``), and a kernel with a two-operand Einsum ``equation``. We also
  apply them to the TensorFlow op's type, and add PyTorch's ATen ops (``aten::mm``,
  ``addmm``, ``bmm``, ``matmul``, ``linear``, ``conv*``, ``*convolution*``, ``einsum``,
  scaled-dot-product and flash attention, cuDNN/MIOpen RNNs) and XLA HLO names (``dot``,
  ``convolution``, ``cudnn-conv…``, ``cublas…``, ``gemm_fusion…``, ``triton_gemm…``). As in
  XProf, an op whose kernel uses Tensor Cores is eligible, and a kernel with no op is not.

Other differences from XProf's kernel_stats: kernels of zero duration are counted (XProf drops
them; traces rounded to microseconds have many); Kineto's memcpy/memset blit kernels are left
out; figures a file does not give are ``None`` (XProf shows 0 registers, 0 bytes and 1,1,1), and
``shm``/``group_mem`` are read (XProf reads neither); TensorFlow kernels get the op that
launched them (XProf leaves it empty); rows are not capped at 1,000. XLA kernels get the op
XProf gives them: the ``op_name`` of their HLO instruction (``program_id`` + ``hlo_op``) in
the file's HLO (``schema.HLO_OP_NAMES``, which the reader attaches), empty where the
instruction has none, never guessed from the kernel's ``name`` stat (which names another op
for some fusions); only a file without HLO falls back to that ``name`` stat.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from stepscope.analysis.csv_table import csv_text
from stepscope.analysis.run_model.framework_op_stats import (
    DERIVED_OP_LINES,
    DERIVED_OTHER_LINES,
    KINETO_KERNEL_CATEGORIES,
    OpEvents,
    classify,
    kernel_type,
    launching_ops,
)
from stepscope.analysis.run_model.steps import device_planes
from stepscope.errors import not_found
from stepscope.model import schema
from stepscope.model.events import EventTable
from stepscope.model.run_tables import RunTables

I64 = NDArray[np.int64]
Bools = NDArray[np.bool_]
Dims = tuple[int, int, int]

# Stat names.
KERNEL_DETAILS = "kernel_details"  # XSpace: "regs:32 static_shared:0 ... grid:1,1,1 block:..."
EQUATION = "equation"  # XSpace: an Einsum kernel's equation
DEVICE_VENDOR = "device_vendor"  # GPU plane stat: "Nvidia", "AMD"
XLA_TF_OP = "tf_op"
XLA_MODULE_MARKER = "XlaModule"  # XLA's GPU kernels: tf_op "XlaModule:", the op in "name"
XLA_OP_NAME = "name"
XLA_HLO_OP = "hlo_op"  # the HLO instruction an XLA kernel runs
XLA_PROGRAM_ID = "program_id"  # and its program
KINETO_REGISTERS = "registers per thread"
KINETO_SHARED_MEMORY = "shared memory"
KINETO_GRID = "grid"
KINETO_BLOCK = "block"
KINETO_KERNEL = "kernel"  # the Kineto category of (CUDA, ROCm, XPU...) kernels

# Bounds beyond any GPU (see the module docstring).
MAX_REGISTERS = 1024
MAX_SHARED_MEMORY = 1 << 20
MAX_BLOCK_THREADS = 1024
MAX_GRID_DIM = (1 << 31) - 1

_NONE = -1  # a figure the file does not give (or gives out of bounds), in the int columns

# Kernel names that use Tensor Cores: (XProf's, ours) per vendor.
_NVIDIA_TC = re.compile("|".join([
    # XProf's patterns.
    "16816", "c1688", "conv1x1", "conv2d_c1_k1", "dgrad_1x1_stride_2x2", "direct_group",
    "first_layer_wgrad_kernel", "h1688", "h884", "hmma", "i16832", "i8816", "s884", "s1688",
    "xmma_gemm", "xmma_implicit_gemm", "xmma_sparse_conv", "xmma_sparse_gemm",
    "xmma_warp_specialized_implicit_gemm",
    # Ours: CUTLASS tensor-op kernels, WMMA/IMMA/GMMA, cuDNN/cuBLAS xmma kernels, cuBLAS nvjet,
    # FlashAttention (fp16/bf16 only, on Tensor Cores).
    "tensorop", "wmma", "imma", "gmma", r"sm\d+_xmma_", "nvjet", "flash_fwd", "flash_bwd",
]))
_AMD_TC = re.compile("|".join([
    "mfma", "wmma", r"_MI\d+x\d+x\d+", "_xdl", "gtcx", "gemm_fusion", r"TileFmha\w*Shape<",
]))
NVIDIA, AMD, UNKNOWN_VENDOR = 1, 2, 0

# Ops eligible for Tensor Cores.
_TF_ENDS = ("Conv2D", "Conv2DBackpropFilter", "Conv2DBackpropInput", "Conv3D",
            "DepthwiseConv2dNative", "DepthwiseConv2dNativeBackpropFilter",
            "DepthwiseConv2dNativeBackpropInput", "/MatMul", "FusedMatMul", "/CudnnRNN",
            "XlaDot", "XlaDotV2", "dot_general", "conv_general_dilated")
_TF_CONTAINS = ("BatchMatMul", "CudnnRNNV", "CudnnRNNForward", "CudnnRNNBackprop")
_ATEN = re.compile(
    r"^aten::(?:_?(?:mm|bmm|addmm|addbmm|baddbmm|matmul|linear|einsum|_?scaled_mm|_int_mm)"
    r"|conv\d+d|conv_transpose\d+d|conv_tbc|\w*convolution\w*|\w*scaled_dot_product\w*"
    r"|_flash_attention\w*|_efficient_attention\w*|_?cudnn_rnn\w*|miopen_rnn\w*|lstm|gru"
    r"|rnn_tanh|rnn_relu)$")
_HLO_ELIGIBLE = re.compile(
    r"^(?:dot|convolution|cudnn-conv[\w\-]*|cublas[\w\-$]*|__cublas\S*|gemm_fusion\w*"
    r"|triton_gemm\w*)(?:\.\d+)?$")


@dataclass
class KernelStatRow:
    """One kernel launched by one op with one launch configuration, over its launches."""

    kernel: str
    op: str  # the op that launched it; "" where the profile does not say
    registers_per_thread: int | None
    shared_memory_bytes: int | None  # static + dynamic
    block: Dims | None  # (x, y, z)
    grid: Dims | None  # (x, y, z)
    op_tensor_core_eligible: bool
    kernel_uses_tensor_core: bool
    occurrences: int
    total_us: float
    avg_us: float
    min_us: float
    max_us: float
    percent: float = 0.0  # of the total time of all kernels

    def to_dict(self) -> dict[str, Any]:
        return {
            "kernel": self.kernel, "op": self.op,
            "registers_per_thread": self.registers_per_thread,
            "shared_memory_bytes": self.shared_memory_bytes,
            "block": list(self.block) if self.block else None,
            "grid": list(self.grid) if self.grid else None,
            "op_tensor_core_eligible": self.op_tensor_core_eligible,
            "kernel_uses_tensor_core": self.kernel_uses_tensor_core,
            "occurrences": self.occurrences, "total_us": self.total_us, "avg_us": self.avg_us,
            "min_us": self.min_us, "max_us": self.max_us, "percent": self.percent,
        }


@dataclass
class PieSlice:
    """One kernel name's share of all kernel time (or the rest, as ``Other``)."""

    kernel: str
    total_us: float
    percent: float

    def to_dict(self) -> dict[str, Any]:
        return {"kernel": self.kernel, "total_us": self.total_us, "percent": self.percent}


OTHER = "Other"
PIE_SLICES = 10  # kernel names with a pie slice of their own in ``KernelStats.to_dict``


@dataclass
class KernelStats:
    """Kernel rows, by total time (largest first)."""

    rows: list[KernelStatRow]
    # Kernel launches whose file gave a figure out of any GPU's bounds (reported as None).
    implausible_launches: int = 0

    @property
    def total_us(self) -> float:
        """Time of all kernels, in µs."""
        return sum(r.total_us for r in self.rows)

    def top(self, n: int = 10) -> list[KernelStatRow]:
        """The ``n`` rows with most total time."""
        return self.rows[:n]

    def pie(self, n: int = 10) -> list[PieSlice]:
        """Total time per kernel name: the ``n`` largest, then the rest as one ``Other``."""
        totals: dict[str, float] = {}
        for r in self.rows:
            totals[r.kernel] = totals.get(r.kernel, 0.0) + r.total_us
        ranked = sorted(totals.items(), key=lambda item: (-item[1], item[0]))
        whole = sum(totals.values()) or 1.0
        out = [PieSlice(k, t, 100.0 * t / whole) for k, t in ranked[:n]]
        rest = sum(t for _, t in ranked[n:])
        if len(ranked) > n:
            out.append(PieSlice(OTHER, rest, 100.0 * rest / whole))
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"total_us": self.total_us, "implausible_launches": self.implausible_launches,
                "rows": [r.to_dict() for r in self.rows],
                "pie": [s.to_dict() for s in self.pie(PIE_SLICES)]}


# --- classification of names -------------------------------------------------------------


def vendor_of(name: str | None) -> int:
    """NVIDIA, AMD or UNKNOWN_VENDOR, from a ``device_vendor`` value."""
    lowered = (name or "").lower()
    if lowered.startswith("nvidia"):
        return NVIDIA
    if lowered.startswith(("amd", "advanced micro devices")):
        return AMD
    return UNKNOWN_VENDOR


def kernel_uses_tensor_core(kernel: str, vendor: int = UNKNOWN_VENDOR) -> bool:
    """Whether a kernel, by its name, runs on Tensor Cores (NVIDIA) or Matrix Cores (AMD)."""
    if vendor == NVIDIA:
        return bool(_NVIDIA_TC.search(kernel))
    if vendor == AMD:
        return bool(_AMD_TC.search(kernel))
    return bool(_NVIDIA_TC.search(kernel) or _AMD_TC.search(kernel))


def _tf_rule(name: str) -> bool:
    return name.endswith(_TF_ENDS) or any(part in name for part in _TF_CONTAINS)


def einsum_equation_eligible(equation: str) -> bool:
    """Whether an Einsum equation multiplies two operands (``"ab,bc->ac"``)."""
    sides = equation.split("->")
    return len(sides) == 2 and len(sides[0].split(",")) == 2


def op_tensor_core_eligible(op: str, op_type: str = "") -> bool:
    """Whether an op (by its name, and its type where known) could use Tensor Cores."""
    if not op:
        return False
    if _tf_rule(op) or (op_type and op_type != op and _tf_rule("/" + op_type)):
        return True
    if _ATEN.match(op):
        return True
    return bool(_HLO_ELIGIBLE.match(op.rsplit("/", 1)[-1]))


# --- launch figures ----------------------------------------------------------------------


@dataclass
class Launch:
    """Launch figures of a kernel as a file gives them (None: not given or out of bounds)."""

    registers_per_thread: int | None = None
    shared_memory_bytes: int | None = None
    block: Dims | None = None
    grid: Dims | None = None
    implausible: bool = False  # some figure was given but out of bounds


_UINT = re.compile(r"^\d+$")


def _uint(text: str) -> int | None:
    return int(text) if _UINT.match(text.strip()) else None


def _dims(values: list[int | None]) -> Dims | None:
    if len(values) != 3 or any(v is None for v in values):
        return None
    x, y, z = (int(v) for v in values if v is not None)
    return x, y, z


def _check(launch: Launch) -> Launch:
    """``launch`` with figures beyond any GPU's bounds removed (and marked implausible)."""
    bad = False
    regs = launch.registers_per_thread
    if regs is not None and regs > MAX_REGISTERS:
        launch.registers_per_thread, bad = None, True
    shared = launch.shared_memory_bytes
    if shared is not None and shared > MAX_SHARED_MEMORY:
        launch.shared_memory_bytes, bad = None, True
    block = launch.block
    if block is not None and (min(block) < 1 or block[0] * block[1] * block[2] >
                              MAX_BLOCK_THREADS):
        launch.block, bad = None, True
    grid = launch.grid
    if grid is not None and (min(grid) < 1 or max(grid) > MAX_GRID_DIM):
        launch.grid, bad = None, True
    launch.implausible = launch.implausible or bad
    return launch


def parse_kernel_details(text: str) -> Launch:
    """Launch figures from an XSpace ``kernel_details`` stat (see the module docstring)."""
    values: dict[str, str] = {}
    for token in text.split():
        key, sep, value = token.partition(":")
        if sep and ":" not in value:
            values[key] = value
    launch = Launch()
    malformed = False

    def number(key: str) -> int | None:
        nonlocal malformed
        if key not in values:
            return None
        parsed = _uint(values[key])
        malformed |= parsed is None
        return parsed

    def dims(key: str) -> Dims | None:
        nonlocal malformed
        if key not in values:
            return None
        parsed = _dims([_uint(v) for v in values[key].split(",")])
        malformed |= parsed is None
        return parsed

    launch.registers_per_thread = number("regs")
    parts = [number(k) for k in ("static_shared", "dynamic_shared") if k in values]
    if parts:
        launch.shared_memory_bytes = None if None in parts else sum(p or 0 for p in parts)
    elif "shm" in values:
        launch.shared_memory_bytes = number("shm")
    elif "group_mem" in values:
        launch.shared_memory_bytes = number("group_mem")
    launch.block = dims("block")
    launch.grid = dims("grid")
    launch.implausible = malformed
    return _check(launch)


def parse_dims_list(text: str) -> Dims | None:
    """``(x, y, z)`` from a Kineto ``grid``/``block`` value such as ``"[16, 15, 1]"``."""
    try:
        value = json.loads(text)
    except ValueError:
        return None
    if not isinstance(value, list):
        return None
    return _dims([v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None
                  for v in value])


@dataclass
class _LaunchColumns:
    """Per kernel event: registers, shared memory, block and grid (_NONE where unknown)."""

    regs: I64
    shared: I64
    block: I64  # (n, 3)
    grid: I64  # (n, 3)
    implausible: Bools

    @classmethod
    def empty(cls, n: int) -> _LaunchColumns:
        return cls(np.full(n, _NONE, np.int64), np.full(n, _NONE, np.int64),
                   np.full((n, 3), _NONE, np.int64), np.full((n, 3), _NONE, np.int64),
                   np.zeros(n, bool))

    def set_from(self, at: I64, codes: NDArray[Any], launches: list[Launch]) -> None:
        """Set the kernels at positions ``at`` from ``launches[codes]``."""
        if len(at) == 0:
            return

        def column(get: Any) -> I64:
            return np.array([_NONE if get(x) is None else get(x) for x in launches], np.int64)

        def dims(get: Any) -> I64:
            return np.array([get(x) or (_NONE,) * 3 for x in launches],
                            np.int64).reshape(-1, 3)

        self.regs[at] = column(lambda x: x.registers_per_thread)[codes]
        self.shared[at] = column(lambda x: x.shared_memory_bytes)[codes]
        self.block[at] = dims(lambda x: x.block)[codes]
        self.grid[at] = dims(lambda x: x.grid)[codes]
        self.implausible[at] |= np.array([x.implausible for x in launches], bool)[codes]


def _positions(table: EventTable, kernels: I64, rows: I64) -> tuple[I64, I64]:
    """For stat ``rows`` (event rows): which are kernels, and their positions in ``kernels``."""
    pos = np.full(len(table), -1, np.int64)
    pos[kernels] = np.arange(len(kernels))
    at = pos[rows]
    keep = np.flatnonzero(at >= 0)
    return keep, at[keep]


def _xspace_launches(table: EventTable, kernels: I64) -> _LaunchColumns:
    cols = _LaunchColumns.empty(len(kernels))
    rows, codes, values = table.text_stat(KERNEL_DETAILS)
    keep, at = _positions(table, kernels, rows)
    cols.set_from(at, codes[keep], [parse_kernel_details(v) for v in values])
    return cols


def _kineto_launches(table: EventTable, kernels: I64) -> _LaunchColumns:
    cols = _LaunchColumns.empty(len(kernels))
    for stat, column, bound in ((KINETO_REGISTERS, cols.regs, MAX_REGISTERS),
                                (KINETO_SHARED_MEMORY, cols.shared, MAX_SHARED_MEMORY)):
        rows, values = table.int_stat(stat)
        keep, at = _positions(table, kernels, rows)
        values = values[keep]
        bad = (values < 0) | (values > bound)
        column[at] = np.where(bad, _NONE, values)
        cols.implausible[at[bad]] = True
    for stat, dims in ((KINETO_BLOCK, cols.block), (KINETO_GRID, cols.grid)):
        rows, codes, texts = table.text_stat(stat)
        keep, at = _positions(table, kernels, rows)
        launches = []
        for text in texts:
            parsed = parse_dims_list(text)
            launch = Launch(block=parsed) if stat == KINETO_BLOCK else Launch(grid=parsed)
            launches.append(_check(launch) if parsed else Launch(implausible=True))
        if launches:
            got = np.array([(x.block if stat == KINETO_BLOCK else x.grid) or (_NONE,) * 3
                            for x in launches], np.int64).reshape(-1, 3)
            dims[at] = got[codes[keep]]
            cols.implausible[at] |= np.array([x.implausible for x in launches],
                                             bool)[codes[keep]]
    return cols


# --- the analysis ------------------------------------------------------------------------


def _kernel_rows(table: EventTable, events: OpEvents) -> tuple[I64, bool]:
    """Event rows of the kernels of a table, and whether it is a Kineto table."""
    not_kernel = np.array([kernel_type(n) != "Kernel" for n in table.names] + [True], bool)
    if events.categories:
        kernel_cats = [i for i, c in enumerate(events.categories)
                       if c in KINETO_KERNEL_CATEGORIES]
        if not kernel_cats:
            return np.zeros(0, np.int64), True
        rows = np.flatnonzero(np.isin(events.category, kernel_cats))
        return rows[~not_kernel[table.name[rows]]], True
    if not table.planes or not table.line_name:
        return np.zeros(0, np.int64), False
    derived = np.isin(np.array(table.line_name, dtype=object),
                      DERIVED_OP_LINES + DERIVED_OTHER_LINES)
    gpu_plane = np.array([p.name.startswith(schema.GPU_PLANE_PREFIX) for p in table.planes])
    candidates = device_planes(table)[table.plane] & ~derived[table.line]
    rows, codes, values = table.text_stat(KERNEL_DETAILS)
    nonempty = np.array([bool(v.strip()) for v in values] + [False], bool)
    with_details = np.zeros(len(table), bool)
    with_details[rows[nonempty[codes]]] = True
    if (with_details & candidates).any():
        # A launch record makes a kernel: ROCm's copy and fill blit kernels included.
        return np.flatnonzero(candidates & with_details), False
    # No launch records at all: every GPU event that is not a copy or a fill.
    rows = np.flatnonzero(candidates & gpu_plane[table.plane])
    return rows[~not_kernel[table.name[rows]]], False


def _equation_eligible(table: EventTable, kernels: I64) -> Bools:
    """Per kernel: whether it carries a two-operand Einsum ``equation``."""
    out = np.zeros(len(kernels), bool)
    rows, codes, values = table.text_stat(EQUATION)
    keep, at = _positions(table, kernels, rows)
    flags = np.array([einsum_equation_eligible(v) for v in values] + [False], bool)
    out[at] = flags[codes[keep]]
    return out


def _xla_op_names(table: EventTable, kernels: I64, op: I64, op_names: list[str],
                  op_types: list[str]) -> None:
    """Name the ops of XLA GPU kernels whose ``tf_op`` is only the module marker.

    XLA annotates its GPU kernels ``XlaModule:`` (as ``tf_op``) with the op in a ``name``
    stat (JAX's op name, e.g. ``jit(f)/dot_general``); such kernels get that op, or none.
    """
    rows, codes, values = table.text_stat(XLA_TF_OP)
    marker = np.array([v.startswith(XLA_MODULE_MARKER) for v in values] + [False], bool)
    _, marked = _positions(table, kernels, rows[marker[codes]])
    if len(marked) == 0:
        return
    op[marked] = -1
    is_marked = np.zeros(len(kernels), bool)
    is_marked[marked] = True
    hlo_names = _hlo_op_names(table)
    if hlo_names:
        # As XProf: the op is the HLO instruction's op_name ("" where it has none), looked
        # up by the kernel's program id and hlo_op; the kernel's name stat is not read.
        program = np.full(len(kernels), -1, np.int64)
        pid_rows, pid_values = table.int_stat(XLA_PROGRAM_ID)
        keep, at = _positions(table, kernels, pid_rows)
        program[at] = pid_values[keep]
        hlo_rows, hlo_codes, hlo_values = table.text_stat(XLA_HLO_OP)
        keep, at = _positions(table, kernels, hlo_rows)
        hlo_of = np.full(len(kernels), -1, np.int64)
        hlo_of[at] = hlo_codes[keep]
        # One look-up per distinct (program, instruction), not per launch.
        pairs, inverse = np.unique(np.stack([program[marked], hlo_of[marked]], axis=1),
                                   axis=0, return_inverse=True)
        codes_of: dict[str, int] = {}
        code_of_pair = np.full(len(pairs), -1, np.int64)
        for i, (pid, inst) in enumerate(pairs.tolist()):
            name = (hlo_names.get(str(pid), {}).get(hlo_values[inst])
                    if pid >= 0 and inst >= 0 else None)
            if name:
                if name not in codes_of:
                    codes_of[name] = len(op_names)
                    op_names.append(name)
                    op_types.append(name.rsplit("/", 1)[-1])
                code_of_pair[i] = codes_of[name]
        op[marked] = code_of_pair[inverse.reshape(-1)]
        return
    rows, codes, values = table.text_stat(XLA_OP_NAME)
    keep, named = _positions(table, kernels, rows)
    use = is_marked[named]
    op[named[use]] = len(op_names) + codes[keep][use]
    op_names.extend(values)
    op_types.extend(v.rsplit("/", 1)[-1] for v in values)


def _hlo_op_names(table: EventTable) -> dict[str, dict[str, str]]:
    """The HLO op names the file's HLO gives (see ``schema.HLO_OP_NAMES``); {} if none."""
    for plane in table.planes:
        text = plane.stats.get(schema.HLO_OP_NAMES)
        if isinstance(text, str):
            try:
                names = json.loads(text)
            except ValueError:
                return {}
            return names if isinstance(names, dict) else {}
    return {}


# A group's key: (kernel, op, regs, shared, block, grid, uses tensor cores, op eligible).
_Key = tuple[str, str, int, int, tuple[int, ...], tuple[int, ...], bool, bool]


@dataclass
class _Group:
    count: int
    total_ns: int
    min_ns: int
    max_ns: int


def _groups(table: EventTable, events: OpEvents | None) -> tuple[dict[_Key, _Group], int]:
    """Kernel launches of one table grouped by key, and the count of implausible ones."""
    events = events or classify(table)
    kernels, kineto = _kernel_rows(table, events)
    if len(kernels) == 0:
        return {}, 0
    launch = _kineto_launches(table, kernels) if kineto else _xspace_launches(table, kernels)
    op = launching_ops(table, events, kernels)
    op_names, op_types = list(events.names), list(events.types)
    if not kineto:
        _xla_op_names(table, kernels, op, op_names, op_types)

    vendors = np.array([vendor_of(p.stats.get(DEVICE_VENDOR)) for p in table.planes], np.int64)
    name = table.name[kernels].astype(np.int64)
    pair = name * 3 + vendors[table.plane[kernels]]
    pairs, pair_inv = np.unique(pair, return_inverse=True)
    tc_of_pair = np.array([kernel_uses_tensor_core(table.names[int(p) // 3], int(p) % 3)
                           for p in pairs], bool)
    uses_tc = tc_of_pair[pair_inv.reshape(-1)]

    op_codes, op_inv = np.unique(op, return_inverse=True)
    eligible_of_op = np.array([c >= 0 and op_tensor_core_eligible(op_names[c], op_types[c])
                               for c in op_codes.tolist()], bool)
    known_op = op >= 0
    eligible = eligible_of_op[op_inv.reshape(-1)] | (
        known_op & (uses_tc | _equation_eligible(table, kernels)))

    key_cols = np.column_stack([name, op, launch.regs, launch.shared, launch.block,
                                launch.grid, uses_tc, eligible])
    keys, inverse = np.unique(key_cols, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    dur = table.duration_ns[kernels]
    count = np.bincount(inverse, minlength=len(keys))
    total = np.bincount(inverse, weights=dur, minlength=len(keys))
    low = np.full(len(keys), np.iinfo(np.int64).max, np.int64)
    high = np.full(len(keys), np.iinfo(np.int64).min, np.int64)
    np.minimum.at(low, inverse, dur)
    np.maximum.at(high, inverse, dur)
    out: dict[_Key, _Group] = {}
    for i, k in enumerate(keys.tolist()):
        key: _Key = (table.names[k[0]], op_names[k[1]] if k[1] >= 0 else "", k[2], k[3],
                     tuple(k[4:7]), tuple(k[7:10]), bool(k[10]), bool(k[11]))
        # Exact: integer nanoseconds (bincount's float sum is exact below 2^53 ns).
        out[key] = _Group(int(count[i]), int(round(total[i])), int(low[i]), int(high[i]))
    return out, int(launch.implausible.sum())


def _rows(groups: dict[_Key, _Group]) -> list[KernelStatRow]:
    def opt(value: int) -> int | None:
        return None if value == _NONE else value

    def dims(value: tuple[int, ...]) -> Dims | None:
        return None if _NONE in value else (value[0], value[1], value[2])

    all_ns = sum(g.total_ns for g in groups.values()) or 1
    ranked = sorted(groups.items(), key=lambda item: (-item[1].total_ns, item[0]))
    return [KernelStatRow(
        kernel=k[0], op=k[1], registers_per_thread=opt(k[2]), shared_memory_bytes=opt(k[3]),
        block=dims(k[4]), grid=dims(k[5]), op_tensor_core_eligible=k[7],
        kernel_uses_tensor_core=k[6], occurrences=g.count, total_us=g.total_ns / 1e3,
        avg_us=g.total_ns / 1e3 / g.count, min_us=g.min_ns / 1e3, max_us=g.max_ns / 1e3,
        percent=100.0 * g.total_ns / all_ns) for k, g in ranked]


def table_kernel_stats(table: EventTable, events: OpEvents | None = None) -> KernelStats:
    """Kernel stats of one host's events (``events``: its ``classify``, if already made)."""
    groups, implausible = _groups(table, events)
    return KernelStats(_rows(groups), implausible)


def kernel_stats(profile: RunTables, host: str | None = None) -> KernelStats:
    """GPU kernel stats of one host of ``profile`` (``host``), or of all its hosts merged."""
    if host is not None and host not in profile.hosts:
        raise not_found("host", host, f"run {profile.run!r}", list(profile.hosts))
    names = [host] if host is not None else list(profile.hosts)
    return merge_groups([host_groups(profile.hosts[name]) for name in names])


def host_groups(table: EventTable, events: OpEvents | None = None) -> KernelGroups:
    """One host's kernel launches grouped by kernel, op and launch configuration."""
    groups, implausible = _groups(table, events)
    return KernelGroups(groups, implausible)


def merge_groups(parts: list[KernelGroups]) -> KernelStats:
    """Kernel stats of several hosts' groups summed into one."""
    if len(parts) == 1:
        return KernelStats(_rows(parts[0].groups), parts[0].implausible)
    merged = merged_groups(parts)
    return KernelStats(_rows(merged.groups), merged.implausible)


def merged_groups(parts: list[KernelGroups]) -> KernelGroups:
    """Several hosts' kernel groups summed into one."""
    merged: dict[_Key, _Group] = {}
    implausible = 0
    for part in parts:
        implausible += part.implausible
        for key, g in part.groups.items():
            m = merged.get(key)
            if m is None:
                merged[key] = _Group(g.count, g.total_ns, g.min_ns, g.max_ns)
            else:
                m.count += g.count
                m.total_ns += g.total_ns
                m.min_ns = min(m.min_ns, g.min_ns)
                m.max_ns = max(m.max_ns, g.max_ns)
    return KernelGroups(merged, implausible)


@dataclass
class KernelGroups:
    """One host's kernel launches by group: what the run model keeps for kernel stats."""

    groups: dict[_Key, _Group]
    implausible: int = 0

    def to_list(self) -> list[Any]:
        """JSON-ready form: [implausible, [[key..., count, total, min, max], ...]]."""
        return [self.implausible,
                [[k[0], k[1], k[2], k[3], list(k[4]), list(k[5]), k[6], k[7],
                  g.count, g.total_ns, g.min_ns, g.max_ns] for k, g in self.groups.items()]]

    @classmethod
    def from_list(cls, data: list[Any]) -> KernelGroups:
        """The inverse of ``to_list``."""
        implausible, rows = data
        groups: dict[_Key, _Group] = {}
        for r in rows:
            key: _Key = (str(r[0]), str(r[1]), int(r[2]), int(r[3]), tuple(r[4]),
                         tuple(r[5]), bool(r[6]), bool(r[7]))
            groups[key] = _Group(int(r[8]), int(r[9]), int(r[10]), int(r[11]))
        return cls(groups, int(implausible))


CSV_COLUMNS = ("rank", "kernel_name", "registers_per_thread", "shared_memory_bytes",
               "block_dim", "grid_dim", "op_tensor_core_eligible", "kernel_uses_tensor_core",
               "op_name", "occurrences", "total_duration_us", "avg_duration_us",
               "min_duration_us", "max_duration_us")


def kernel_stats_csv(stats: KernelStats) -> str:
    """The kernel rows as CSV, one per row in rank order (unknown figures left empty)."""
    def text(value: object) -> str:
        if value is None:
            return ""
        if isinstance(value, tuple):
            return ",".join(str(v) for v in value)
        return str(value)

    return csv_text(CSV_COLUMNS, (
        [rank, r.kernel, text(r.registers_per_thread), text(r.shared_memory_bytes),
         text(r.block), text(r.grid), r.op_tensor_core_eligible, r.kernel_uses_tensor_core,
         r.op, r.occurrences, f"{r.total_us:.3f}", f"{r.avg_us:.3f}", f"{r.min_us:.3f}",
         f"{r.max_us:.3f}"] for rank, r in enumerate(stats.rows, 1)))
