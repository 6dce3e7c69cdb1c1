"""One host's XLA op executions on its devices, as columns, with the programs they ran.

Filled by ``formats.xspace_to_xla`` from an XSpace: on TPU the "XLA Ops" line of each device
plane (op facts on the event metadata), on GPU the kernels that carry ``hlo_op`` stats (one
op may run several kernels). Analyses aggregate these columns; nothing here is per event
Python.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from stepscope.model.hlo import HloModule

I32 = NDArray[np.int32]
I64 = NDArray[np.int64]


@dataclass
class XlaOp:
    """One distinct HLO op seen on a device: which program, its name, and what the profile
    says of it (``stats``: ``hlo_category``, ``flops``, ``bytes_accessed``, ``tf_op``,
    ``source``, ``deduplicated_name``, ``expression``..., where the profiler recorded them)."""

    program_id: str  # "" where the profile does not say
    module: str  # the program's name ("" where unknown)
    name: str  # the HLO instruction's name
    stats: dict[str, Any] = field(default_factory=dict)


@dataclass
class DeviceInfo:
    """One device plane that ran XLA ops."""

    name: str  # plane name, e.g. "/device:TPU:0"
    kind: str  # the device's model as the profile names it ("TPU v6 Lite", "NVIDIA H100 ...")
    busy_start_ps: int  # first XLA op start (ps since the host's ``origin_ns``)
    busy_end_ps: int  # last XLA op end
    peak_tflops: float | None = None  # as the profile states it, where it does
    peak_hbm_gbytes_per_s: float | None = None
    props: dict[str, Any] = field(default_factory=dict)  # the plane's numeric device stats
    # (compute_cap_major/minor, core_count, clock_rate, memory_bandwidth, device_vendor)


@dataclass
class XlaHostOps:
    """Every XLA op execution of one host: one row per execution (a kernel on GPU)."""

    ops: list[XlaOp]
    devices: list[DeviceInfo]
    op: I32  # per execution: index into ops
    device: I32  # per execution: index into devices
    line: I32  # per execution: the timeline row it ran on (nesting is looked for per row)
    start_ps: I64  # since ``origin_ns``
    duration_ps: I64
    modules: dict[str, HloModule]  # program id (text) → its HLO, where the profile has it
    module_names: dict[str, str]  # program id → program name, HLO or not
    bad_modules: dict[str, str] = field(default_factory=dict)  # program id → why unreadable
    # op index → times it ran, for ops that run several kernels per execution (GPU); an op
    # not here ran once per row
    executions: dict[int, int] = field(default_factory=dict)
    origin_ns: int = 0  # where ``start_ps`` counts from, ns since the epoch

    def __len__(self) -> int:
        return len(self.op)
