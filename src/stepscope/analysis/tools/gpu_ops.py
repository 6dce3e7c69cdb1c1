"""The device side of one host's events as columns: every GPU op (kernel, memcpy, memset), its
stream, kind, step and the host call that launched it.

Which events are device ops:

* **Kineto** (PyTorch): events of categories ``kernel``, ``gpu_memcpy`` and ``gpu_memset`` on
  the device planes (HTA's GPU kernel categories; ``gpu_user_annotation`` and ``cuda_sync``
  are not work and are left out).
* **XSpace** (TensorFlow, JAX, XLA on GPU): events of the device planes that are not on the
  derived lines (``TensorFlow Ops``, ``XLA Ops``, ``Steps``, ...): CUPTI's kernels, memcpys
  and memsets on their stream lines.

A stream is the op's line. An op's kind is *communication* when its name is a collective
library's kernel (NCCL, RCCL, HCCL, MSCCL), *memcpy* or *memset* by its category or name,
else *compute*: HTA's grouping, with RCCL and MSCCL added. The launch is the host event with
the op's correlation id (Kineto's ``correlation``, CUPTI's ``correlation_id``); the first one
in file order where several carry it. The launching op is the innermost framework op around
the launch (``framework_op_stats.launching_ops``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from stepscope.analysis.run_model.framework_op_stats import (
    DERIVED_OP_LINES,
    DERIVED_OTHER_LINES,
    KINETO_KERNEL_CATEGORIES,
    OpEvents,
    classify,
    kineto_categories,
    launching_ops,
)
from stepscope.analysis.run_model.steps import Steps, device_planes, find_steps
from stepscope.model import schema
from stepscope.model.events import MISSING, EventTable

I64 = NDArray[np.int64]
I8 = NDArray[np.int8]

COMPUTE, COMMUNICATION, MEMCPY, MEMSET = 0, 1, 2, 3
KINDS = ("compute", "communication", "memcpy", "memset")

_COMM = re.compile(r"(?i)^(nccl|rccl|hccl|msccl)|ncclKernel|ncclDevKernel")
_MEMCPY = re.compile(r"(?i)^(hip)?memcpy|copybuffer")
_MEMSET = re.compile(r"(?i)^(hip)?memset|fillbuffer")
_KINETO_KINDS = {**{c: COMPUTE for c in KINETO_KERNEL_CATEGORIES},
                 "gpu_memcpy": MEMCPY, "gpu_memset": MEMSET}


def kind_of(name: str, default: int = COMPUTE) -> int:
    """The kind of a device op by its name (``default`` where the name does not say)."""
    if _COMM.search(name):
        return COMMUNICATION
    if _MEMCPY.search(name):
        return MEMCPY
    if _MEMSET.search(name):
        return MEMSET
    return default


@dataclass(frozen=True)
class GpuOps:
    """One host's device ops, sorted by (device, stream, start); launches matched."""

    host: str
    table: EventTable
    row: I64  # event row of each op
    device: I64  # plane index
    stream: I64  # line index
    kind: I8
    start: I64
    end: I64
    step: I64  # index into ``steps`` (-1: none)
    launch: I64  # event row of the host call that launched it (-1: none found)
    launch_op: I64  # the launching framework op, an index into ``op_names`` (-1: unknown)
    op_names: list[str]
    steps: Steps
    events: OpEvents

    def __len__(self) -> int:
        return len(self.row)

    @property
    def devices(self) -> list[int]:
        """Plane indices of the devices with ops, in order."""
        return [int(d) for d in np.unique(self.device)]

    def name(self, i: int) -> str:
        """The name of op ``i``."""
        return self.table.names[int(self.table.name[self.row[i]])]

    def device_label(self, plane: int) -> str:
        """``GPU:0`` for plane ``/device:GPU:0``."""
        return self.table.planes[plane].name.removeprefix("/device:")


def _device_rows(table: EventTable, events: OpEvents) -> tuple[I64, I8]:
    """Rows of the device ops of a table and their kinds."""
    device = device_planes(table)
    if not len(table) or not device.any():
        return np.zeros(0, np.int64), np.zeros(0, np.int8)
    on_device = device[table.plane]
    category, categories = events.category, events.categories
    if not categories:
        category, categories = kineto_categories(table)
    names_kind = np.array([kind_of(n, -1) for n in table.names] + [-1], np.int8)
    if categories and any(c in _KINETO_KINDS for c in categories):
        base = np.array([_KINETO_KINDS.get(c, -1) for c in categories] + [-1], np.int8)
        kind = base[category]
        rows = np.flatnonzero(on_device & (kind >= 0))
        kind = kind[rows]
        by_name = names_kind[table.name[rows]]
        # A kernel named as a collective is communication; copies keep their category.
        kind = np.where((kind == COMPUTE) & (by_name == COMMUNICATION), by_name, kind)
        return rows, kind.astype(np.int8)
    lines = np.array(table.line_name, dtype=object)
    derived = np.isin(lines, DERIVED_OP_LINES + DERIVED_OTHER_LINES)
    rows = np.flatnonzero(on_device & ~derived[table.line])
    kind = names_kind[table.name[rows]]
    return rows, np.where(kind < 0, COMPUTE, kind).astype(np.int8)


def gpu_ops(host: str, table: EventTable, steps: Steps | None = None,
            events: OpEvents | None = None) -> GpuOps:
    """The device ops of one host's table (``steps``/``events``: its steps and ``classify``
    where already made)."""
    events = events or classify(table)
    steps = steps if steps is not None else find_steps(table)
    rows, kind = _device_rows(table, events)
    keep = table.duration_ns[rows] >= 0
    rows, kind = rows[keep], kind[keep]
    start = table.start_ns[rows]
    end = start + table.duration_ns[rows]
    device = table.plane[rows].astype(np.int64)
    stream = table.line[rows].astype(np.int64)
    order = np.lexsort((end, start, stream, device))
    rows, kind, start, end = rows[order], kind[order], start[order], end[order]
    device, stream = device[order], stream[order]
    step = (steps.event_step[rows].astype(np.int64) if len(steps.event_step)
            else np.full(len(rows), -1, np.int64))
    launch = _launches(table, rows)
    launch_op = launching_ops(table, events, rows) if len(rows) else np.zeros(0, np.int64)
    return GpuOps(host, table, rows, device, stream, kind, start, end, step, launch,
                  launch_op.astype(np.int64), list(events.names), steps, events)


def _launches(table: EventTable, rows: I64) -> I64:
    """For each device op row: the host event row with its correlation id (-1: none)."""
    out = np.full(len(rows), -1, np.int64)
    if not len(rows):
        return out
    corr = table.typed[schema.CORRELATION_ID]
    mine = corr[rows]
    device = device_planes(table)[table.plane]
    host_rows = np.flatnonzero(~device & (corr != MISSING))
    if not len(host_rows):
        return out
    keys, first = np.unique(corr[host_rows], return_index=True)
    pos = np.clip(np.searchsorted(keys, mine), 0, len(keys) - 1)
    found = (keys[pos] == mine) & (mine != MISSING)
    out[found] = host_rows[first[pos[found]]]
    return out
