"""Training steps: finding them in a host's events and grouping every event to its step.

Steps are looked for in this order, the first that yields any wins:

1. root events (``_r=1``) with a ``step_num`` (TensorFlow and stepscope ``Trace``, JAX
   ``StepTraceAnnotation``);
2. PyTorch's ``ProfilerStep#N`` annotations;
3. any host events carrying ``step_num`` without ``_r`` (Keras 3's ``Profiled batch``), the
   most frequent such name;
4. the devices' ``Steps`` lines (older TensorFlow GPU profiles, already grouped by
   TensorFlow), each step from its longest device marker, as XProf;
5. repeated executions of the XLA module that takes most device time (JAX without step
   annotations).

Like XProf, when more than ``TRIM_ABOVE`` steps were found from TensorFlow-style markers
(methods 1 and 3), the first and the last are left out (``Steps.trimmed``): a capture
started and stopped mid-run usually cuts them short. In stepscope's own captures (which
record a step when it ends, with its true start, and note when the capture started and
stopped) only the steps that began before the capture or ended after it are left out: the
steps a user asked for (Keras ``profile_batch``) and recorded whole are kept. PyTorch's
``ProfilerStep#N`` marks whole steps, so those are all kept.

Host events belong to the step whose span holds their start; device events follow the host
event that launched them (same correlation id), or else their start time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from stepscope.model import schema
from stepscope.model.events import EventTable, is_in, typed_equals, typed_rows

I32 = NDArray[np.int32]
I64 = NDArray[np.int64]
BoolArray = NDArray[np.bool_]
StepCodes = NDArray[np.int16] | NDArray[np.int32]  # per event: its step index (-1: none)

PROFILER_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_DEVICE_PLANE = re.compile(r"^/device:(GPU|TPU|XPU|NPU):")
DEVICE_STEPS_LINE = "Steps"
TRIM_ABOVE = 5  # XProf's threshold for dropping the first and last step
XLA_MODULES_LINE = "XLA Modules"


@dataclass
class Steps:
    """The steps of one host, in time order, and each event's step (-1: none)."""

    method: str  # how they were found: root, profiler_step, step_num, device_steps, xla_module
    marker: str  # the event name that marks a step ("" when none were found)
    step_num: I64
    start_ns: I64
    end_ns: I64
    lines: I64  # the lines (threads) whose events mark the steps
    event_step: StepCodes  # int16 where every step's index fits (see assign)
    trimmed: list[int] = field(default_factory=list)  # step numbers left out (see above)

    def __len__(self) -> int:
        return len(self.step_num)

    @property
    def duration_ns(self) -> I64:
        return self.end_ns - self.start_ns


def device_planes(table: EventTable) -> BoolArray:
    """Per plane: whether it is an accelerator (GPU, TPU, ...) plane."""
    return np.array([bool(_DEVICE_PLANE.match(p.name)) for p in table.planes], dtype=bool)


def on_device(table: EventTable) -> BoolArray:
    """Per event: whether it ran on an accelerator."""
    return device_planes(table)[table.plane] if len(table.planes) else np.zeros(0, bool)


def _codes(table: EventTable, pattern: re.Pattern[str]) -> dict[int, re.Match[str]]:
    """Name codes whose name matches ``pattern``, with their matches."""
    out = {}
    for code, name in enumerate(table.names):
        match = pattern.match(name)
        if match:
            out[code] = match
    return out


def _merge(step_num: I64, start: I64, end: I64, line: I64) -> tuple[I64, I64, I64, I64]:
    """One step per step number: the union span of its marker events, in time order."""
    nums, inverse = np.unique(step_num, return_inverse=True)
    lo = np.full(len(nums), np.iinfo(np.int64).max, dtype=np.int64)
    hi = np.full(len(nums), np.iinfo(np.int64).min, dtype=np.int64)
    np.minimum.at(lo, inverse, start)
    np.maximum.at(hi, inverse, end)
    order = np.argsort(lo, kind="stable")
    return nums[order], lo[order], hi[order], np.unique(line)


def _from_rows(table: EventTable, rows: I64, nums: I64, method: str) -> Steps:
    start = table.start_ns[rows]
    end = start + table.duration_ns[rows]
    step_num, lo, hi, lines = _merge(nums, start, end, table.line[rows].astype(np.int64))
    trimmed: list[int] = []
    if method in ("root", "step_num") and len(step_num) > TRIM_ABOVE:
        window = _capture_window(table)
        if window is not None:
            # stepscope's own capture records a step when it ends, with its true start: the
            # steps that lie inside the capture are whole, and only those are kept.
            cut = (lo < window[0]) | (hi > window[1])
        else:
            cut = np.zeros(len(step_num), dtype=bool)
            cut[[0, -1]] = True
        trimmed = [int(n) for n in step_num[cut]]
        step_num, lo, hi = step_num[~cut], lo[~cut], hi[~cut]
    names = np.unique(table.name[rows])
    marker = table.names[int(names[0])] if len(names) == 1 else method
    steps = Steps(method, marker, step_num, lo, hi, lines, np.zeros(0, dtype=np.int32),
                  trimmed)
    steps.event_step = assign(table, steps)
    return steps


def _capture_window(table: EventTable) -> tuple[int, int] | None:
    """When stepscope's own capture recorded ``table``: its start and stop times (ns)."""
    for plane in table.planes:
        stats = plane.stats
        start = stats.get(schema.ENV_PROFILE_START_TIME)
        stop = stats.get(schema.ENV_PROFILE_STOP_TIME)
        if stats.get(schema.ENV_PRODUCER) and isinstance(start, int) and isinstance(stop, int):
            return start, stop
    return None


def find_steps(table: EventTable) -> Steps:
    """Find the steps of one host's events (see the module docstring for how)."""
    device = on_device(table)
    host = ~device
    # The events with a step number, from the typed stats' sparse rows (a dense int64 column
    # of every event would be tens of MB for a few thousand markers).
    num_rows, num_values = typed_rows(table, schema.STEP_NUM)
    on_host = host[num_rows]
    numbered, numbers = num_rows[on_host], num_values[on_host]
    del on_host

    is_root = typed_equals(table, schema.ROOT_LEVEL, 1)[numbered]
    roots = numbered[is_root]
    if len(roots):
        return _from_rows(table, roots, numbers[is_root], "root")

    profiler_steps = _codes(table, PROFILER_STEP)
    if profiler_steps:
        codes = np.array(sorted(profiler_steps), dtype=np.int32)
        rows = np.flatnonzero(host & is_in(table.name, codes))
        if len(rows):
            lookup = {c: int(m.group(1)) for c, m in profiler_steps.items()}
            numbers = np.array([lookup[int(c)] for c in table.name[rows]], dtype=np.int64)
            return _from_rows(table, rows, numbers, "profiler_step")

    if len(numbered):
        names, counts = np.unique(table.name[numbered], return_counts=True)
        chosen = table.name[numbered] == names[np.argmax(counts)]
        return _from_rows(table, numbered[chosen], numbers[chosen], "step_num")

    steps_rows = _longest_device_steps(table, device)
    if len(steps_rows):
        nums = np.array([_as_int(table.names[c], i) for i, c in enumerate(table.name[steps_rows])],
                        dtype=np.int64)
        return _from_rows(table, steps_rows, nums, "device_steps")
    rows = _device_line_rows(table, device, XLA_MODULES_LINE)
    if len(rows):
        steps = _module_steps(table, rows)
        if steps is not None:
            return steps

    empty = np.zeros(0, dtype=np.int64)
    # As narrow as assign makes it (no step's index to fit): int16, not int32.
    return Steps("none", "", empty, empty, empty, empty,
                 np.full(len(table), -1, dtype=np.int16))


def _as_int(text: str, default: int) -> int:
    try:
        return int(text)
    except ValueError:
        return default


def _longest_device_steps(table: EventTable, device: BoolArray) -> I64:
    """The events of every device's ``Steps`` line, the longest one per step name: as XProf,
    a step lasts as long as its longest device marker (devices' clocks need not agree, so
    their markers are not merged)."""
    lines = [i for i, name in enumerate(table.line_name)
             if name == DEVICE_STEPS_LINE and device_planes(table)[table.line_plane[i]]]
    rows = np.flatnonzero(is_in(table.line, lines)) if lines else np.zeros(0, np.int64)
    if len(rows) == 0:
        return rows.astype(np.int64)
    # Longest first, then one row per name.
    rows = rows[np.argsort(-table.duration_ns[rows], kind="stable")]
    _, first = np.unique(table.name[rows], return_index=True)
    return np.sort(rows[first]).astype(np.int64)


def _device_line_rows(table: EventTable, device: BoolArray, line_name: str) -> I64:
    """Events of the first device plane that has a line called ``line_name``."""
    for line, name in enumerate(table.line_name):
        if name == line_name and device_planes(table)[table.line_plane[line]]:
            rows = np.flatnonzero(table.line == line)
            if len(rows):
                return rows
    return np.zeros(0, dtype=np.int64)


def _module_steps(table: EventTable, rows: I64) -> Steps | None:
    """Each execution of the module with the most device time, if it ran at least twice."""
    codes, inverse = np.unique(table.name[rows], return_inverse=True)
    busy = np.bincount(inverse, weights=table.duration_ns[rows])
    top = int(np.argmax(busy))
    runs = rows[inverse == top]
    if len(runs) < 2:
        return None
    runs = runs[np.argsort(table.start_ns[runs], kind="stable")]
    return _from_rows(table, runs, np.arange(len(runs), dtype=np.int64), "xla_module")


def assign(table: EventTable, steps: Steps) -> StepCodes:
    """Each event's step index (-1 for none); see the module docstring. Int16 where every
    step's index fits (a column as long as the events, held through the run model's passes;
    arithmetic on it casts first)."""
    out = _by_time(table.start_ns, steps)
    if len(steps) == 0 or len(table) == 0:
        return out
    device = on_device(table)
    if not device.any():
        return out
    # Device events follow their launch: the host event with the same correlation id. (From
    # the stat's sparse rows, ascending: a dense int64 column of every event is not made.)
    rows, corr = typed_rows(table, schema.CORRELATION_ID)
    on_dev = device[rows]
    launch = ~on_dev & (out[rows] >= 0)
    launches, launch_corr = rows[launch], corr[launch]
    kernels, kernel_corr = rows[on_dev], corr[on_dev]
    del rows, corr, on_dev, launch
    if len(launches) and len(kernels):
        order = np.argsort(launch_corr, kind="stable")
        keys, owners = launch_corr[order], out[launches][order]
        pos = np.clip(np.searchsorted(keys, kernel_corr), 0, len(keys) - 1)
        found = keys[pos] == kernel_corr
        out[kernels[found]] = owners[pos[found]]
    return out


_CHUNK = 1 << 16  # events a time in _by_time: its int64 temporaries (some 40 B an event of
# the chunk) stay a few MB


def _by_time(start: I64, steps: Steps) -> StepCodes:
    """The step whose span holds each start time (-1 for none), a chunk of events at a time
    (searchsorted's int64 index of every event was the largest temporary of the steps)."""
    out: StepCodes = (np.full(len(start), -1, dtype=np.int16)
                      if len(steps) < np.iinfo(np.int16).max
                      else np.full(len(start), -1, dtype=np.int32))
    if len(steps) == 0:
        return out
    for i in range(0, len(start), _CHUNK):
        part = start[i:i + _CHUNK]
        index = np.searchsorted(steps.start_ns, part, side="right") - 1
        inside = (index >= 0) & (part < steps.end_ns[np.maximum(index, 0)])
        out[i:i + _CHUNK] = np.where(inside, index, -1)
    return out
