"""The overview page: step time and its breakdown, the input-bound verdict, top ops, the run
environment and what to look at next.

Step-time breakdown: within each step, every instant is given to the first category below
that is busy at that instant (XProf's priorities), so that the categories add up to the step
time:

1. device compute: kernels running on an accelerator for this step, collectives excepted;
2. output: outfeed and device-to-host copies;
3. device to device: device-to-device and peer copies;
4. input: the step waiting for input (tf.data ``IteratorGetNext``, PyTorch
   ``DataLoader.__next__``, stepscope's ``Iterator::`` events) and host-to-device copies;
5. collectives (``device_collectives``, as XProf names it): collective kernels and ops
   (NCCL/RCCL kernels; XLA all-reduce, all-gather, reduce-scatter, all-to-all and
   collective-permute; on the host TensorFlow's collective ops and PyTorch's c10d, gloo and
   nccl ops): in a data-parallel job, mostly time spent waiting for the slowest worker;
6. kernel launch: the host launching kernels and copies (cudaLaunchKernel and kin);
7. compilation: compiling (XLA, ``torch.compile``);
8. host compute: any other host event of the step;
9. all others: time when none of the above was recorded (often Python, or untraced I/O).

Which host events are the step's: where the profile carries TensorFlow's producer/consumer
context links (TensorFlow and JAX XSpace files), those grouped into the step as XProf groups
them (``step_groups``), less the events XProf does not count as work: the eager dispatch
wrappers (``EagerExecute``, ``EagerLocalExecute``, ``EagerKernelExecute``, ``FunctionRun``)
and step markers (names starting with ``train``, ``test`` or ``TraceContext``); their time
that no nested event covers is "all others", as in XProf. Elsewhere (Kineto traces,
stepscope's own traces) the events of the step's threads in its span, and host ops on any
thread.

The input verdict uses XProf's published thresholds: at least 20 % of step time in input is
"highly" input-bound, at least 5 % "moderately"; below that, at least 3 % in "all others"
is "potentially" input-bound (untraced input may hide there), else "not". Unlike XProf, the
"all others" the verdict reads leaves out the step time that XLA ops ran on the host's threads
(JAX on the CPU): that is compute, not untraced input (the breakdown's figures stay XProf's).
"""

from __future__ import annotations

import json
import re
from collections import ChainMap
from collections.abc import Iterator, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any, Literal, cast

import numpy as np
from numpy.typing import NDArray

from stepscope.analysis.run_model import intervals
from stepscope.analysis.run_model.dropped_events import host_dropped
from stepscope.analysis.run_model.framework_op_stats import (
    DERIVED_OP_LINES,
    DERIVED_OTHER_LINES,
    DEVICE,
    HOST,
    IDLE,
    KINETO_DEVICE_OPS,
    OpEvents,
    OpStats,
    classify,
    kernel_type,
    launching_op_rows,
    merge,
    op_stats,
)
from stepscope.analysis.run_model.step_groups import grouped_step, has_links
from stepscope.analysis.run_model.steps import (
    PROFILER_STEP,
    StepCodes,
    Steps,
    device_planes,
    find_steps,
)
from stepscope.analysis.run_model.steps_found import steps_found_sentence
from stepscope.analysis.step_categories import CATEGORIES as CATEGORIES
from stepscope.analysis.step_categories import CATEGORY_LABELS as CATEGORY_LABELS
from stepscope.model import schema
from stepscope.model.events import EventTable, is_in, rows_where, typed_equals
from stepscope.model.run_tables import RunTables

I64 = NDArray[np.int64]
BoolArray = NDArray[np.bool_]

# The order in which the partition gives an instant to a category (XProf's event-type
# priorities: device work, then waiting for input, then the host's own work).
PRIORITY = ("device_compute", "output", "device_to_device", "input", "device_collectives",
            "kernel_launch", "compilation", "host_compute")
VERDICTS = ("highly", "moderately", "potentially", "not")
HIGHLY_INPUT_BOUND = 20.0
MODERATELY_INPUT_BOUND = 5.0
POTENTIALLY_ALL_OTHERS = 3.0

INPUT_EVENT = re.compile(
    r"^(EagerLocalExecute: )?IteratorGetNext|^Iterator::|^PrefetchConsume$|^InfeedDequeue"
    r"|^enumerate\(DataLoader\)|DataLoader\w*\.__next__|dataloader\.py:\d+ .*__next__")
# Waits for input that may run on another thread than the step's (inside tf.function the
# IteratorGetNext op runs on an executor thread while the step's thread waits for it).
INPUT_WAIT = re.compile(r"^(EagerLocalExecute: )?IteratorGetNext|^InfeedDequeue")
# Waits for input as XProf counts them on grouped threads (the op and its DoCompute).
XPROF_INPUT_WAIT = re.compile(r"(?i)^IteratorGetNext")
# Host events XProf does not count as work: eager dispatch wrappers and step markers.
NOT_HOST_WORK = re.compile(
    r"^(EagerExecute|EagerLocalExecute|EagerKernelExecute|FunctionRun)"
    r"|^(train|test|TraceContext)[^/]*$")
OUTPUT_EVENT = re.compile(r"(?i)outfeed")
COMPILE_EVENT = re.compile(
    r"(?i)(^|[^a-z])compil(e|ation|er)?($|[^a-z])|XlaCompile|backend_compile|jit_compile")
LAUNCH_EVENT = re.compile(
    r"^(cu|cuda|hip)\w*Launch\w*$|^(cu|cuda|hip)(Memcpy|Memset)\w*Async$")
_TO_DEVICE = re.compile(r"HtoD|H2D|Host ?-> ?Device")
# Not an overview category: the part of "input" that copies to the device took.
INPUT_TRANSFER = "input_transfer"
_TO_HOST = re.compile(r"DtoH|D2H|Device ?-> ?Host")
_DEVICE_TO_DEVICE = re.compile(r"DtoD|D2D|PtoP|P2P|Device ?-> ?Device|Peer")
# Collective communication, by the names NCCL/RCCL kernels, XLA's HLO ops, TensorFlow's
# collective ops and PyTorch's c10d/gloo ops carry.
COLLECTIVE_EVENT = re.compile(
    r"(?i)^(nccl|rccl)|(^|[^a-z])(nccl|rccl|gloo)[^a-z]|all-?reduce|all[-_]?gather"
    r"|reduce[-_]?scatter|all[-_]?to[-_]?all|collective[-_]?permute|(^|[:/])Collective"
    r"|c10d::|record_param_comms")
# On the host, only collective ops proper: not XLA's compiler passes, which carry the same
# words ("all-reduce-simplifier").
HOST_COLLECTIVE_EVENT = re.compile(
    r"^(c10d::|gloo:|nccl:|record_param_comms)|:(Collective|Nccl)\w*$"
    r"|^(EagerLocalExecute: )?(Collective|Nccl)[A-Z]\w*$")
_SIXTEEN_BIT = re.compile(r"(?i)bf16|fp16|f16\[|half|bfloat16|h884|h1688|h16816|hmma|_f16")
# PyTorch's 16-bit data types in an op's ``Input type`` stat (c10::BFloat16, c10::Half).
_SIXTEEN_BIT_TYPE = re.compile(r"BFloat16|Half")
_INPUT_TYPE = "Input type"
# A device plane's stats that name its device.
_DEVICE_NAME_STATS = ("gpu_device_name", "device_name")


@dataclass
class HostOverview:
    """The overview of one host."""

    name: str
    steps: Steps
    step_category_ns: I64  # per step × CATEGORIES
    ops: OpStats
    device_type: str
    device_count: int
    device_names: list[str]
    cpu_count: int | None
    sixteen_bit_ns: int
    device_compute_ns: int
    ops_idle: OpStats | None = None  # the op stats with idle rows, where computed
    flight: dict[str, Any] | None = None  # a flight recorder's dump: what triggered it
    # Step time that XLA ops ran on the host's threads (JAX or TF XLA on the CPU) and that the
    # breakdown, as XProf's, leaves in "all others": compute, not untraced input.
    xla_host_others_ns: int = 0
    dropped: dict[str, Any] | None = None  # DroppedEvents.to_dict(); None: nothing dropped
    # Of the steps' input time, what copies from host to device took (the rest: the host's
    # wait for input).
    input_transfer_ns: int = 0


@dataclass
class Overview:
    """The overview of a run: per host and aggregated over hosts."""

    run: str
    path: str
    hosts: list[HostOverview]
    failed: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The stable, JSON-ready form (see the README for the keys scripts can rely on)."""
        hosts = {h.name: _summary([h]) for h in self.hosts}
        # One host: the run's summary is its host's, the same objects (not made twice: at
        # 3,500 steps, 2.5 MB of a server's run model).
        out = next(iter(hosts.values())) if len(self.hosts) == 1 else _summary(self.hosts)
        out = {"run": self.run, "path": self.path, **out,
               "hosts": hosts,
               "failed_hosts": dict(self.failed),
               "dropped_events": {h.name: h.dropped for h in self.hosts if h.dropped}}
        return out


class CategoryMasks(Mapping[str, BoolArray]):
    """Per category, which events count towards it: one bit an event per category, eight
    categories to a uint8 column, not a bool column each (the 14 masks of a host were 14 B
    an event, the largest part of the run model's peak on millions of events). A mask is made
    when asked for: hold it only while it is used."""

    def __init__(self, events: int) -> None:
        self.events = events
        self._bytes: list[NDArray[np.uint8]] = []
        self._bit: dict[str, tuple[int, int]] = {}  # name -> (column, bit)

    def add(self, name: str, mask: BoolArray) -> None:
        """Keep ``mask`` (one bool an event) as category ``name``."""
        if name in self._bit:
            raise ValueError(f"category {name!r} is kept already")
        column, bit = divmod(len(self._bit), 8)
        if column == len(self._bytes):
            self._bytes.append(np.zeros(self.events, dtype=np.uint8))
        # In place where the mask is set: no temporary as long as the events.
        np.bitwise_or(self._bytes[column], np.uint8(1 << bit), out=self._bytes[column],
                      where=mask)
        self._bit[name] = (column, bit)

    def add_none(self, name: str) -> None:
        """Keep category ``name`` with no event in it (no mask made: its bits stay 0)."""
        if name in self._bit:
            raise ValueError(f"category {name!r} is kept already")
        column, bit = divmod(len(self._bit), 8)
        if column == len(self._bytes):
            self._bytes.append(np.zeros(self.events, dtype=np.uint8))
        self._bit[name] = (column, bit)

    def __getitem__(self, name: str) -> BoolArray:
        column, bit = self._bit[name]
        out = np.right_shift(self._bytes[column], bit)
        np.bitwise_and(out, 1, out=out)
        mask: BoolArray = out.view(np.bool_)  # every byte 0 or 1
        return mask

    def __iter__(self) -> Iterator[str]:
        return iter(self._bit)

    def __len__(self) -> int:
        return len(self._bit)


def overview(profile: RunTables) -> Overview:
    """Compute the overview of every host of ``profile``."""
    hosts = [host_overview(name, table) for name, table in profile.hosts.items()]
    return Overview(profile.run, str(profile.path), hosts, dict(profile.failed))


def host_overview(name: str, table: EventTable) -> HostOverview:
    """The overview of one host's events."""
    return host_facts(name, table)[0]


def host_facts(name: str, table: EventTable
               ) -> tuple[HostOverview, OpEvents, CategoryMasks]:
    """The overview of one host, with the op classification and category masks it used
    (the run model derives its other per-host facts from them)."""
    steps = find_steps(table)
    events = classify(table)
    ops = op_stats(table, events=events, include_idle=True)
    masks = _category_masks(table, steps, events)
    order = [PRIORITY.index(c) for c in CATEGORIES[:-1]] + [len(PRIORITY)]
    ends = instant_ends(table, steps, masks, PRIORITY) if has_links(table) else None
    # Input time is split in two, copies to the device first: what is left is the host's
    # wait. The input analyzer shows the first part as transfer to the device.
    at = PRIORITY.index("input")
    split = partition(table, steps, masks, (*PRIORITY[:at], INPUT_TRANSFER, *PRIORITY[at:]),
                      ends)
    transfer = split[:, at]
    per_step = np.delete(split, at, axis=1)
    per_step[:, at] += transfer
    per_step = per_step[:, order]
    # XLA's execution on the host: its ops (hlo_op) and the program runs around them (run_id:
    # the executor that waits for the ops it hands to the host's thread pool).
    xla_others = _xla_host_others(table, steps, masks, ends)
    del ends
    device_type, count, names = _devices(table)
    device_rows = np.flatnonzero(masks["device_compute"])
    sixteen = np.array([bool(_SIXTEEN_BIT.search(n)) for n in table.names] + [False], bool)
    sixteen_rows = sixteen[table.name[device_rows]]
    if events.categories:
        sixteen_rows |= _sixteen_bit_inputs(table, events, device_rows)
    dur = table.duration_ns[device_rows]
    result = HostOverview(
        name=name, steps=steps, step_category_ns=per_step, ops=ops.without_idle(),
        device_type=device_type, device_count=count, device_names=names,
        cpu_count=_cpu_count(table),
        sixteen_bit_ns=int(dur[sixteen_rows].sum()),
        device_compute_ns=int(dur.sum()), ops_idle=ops, flight=flight_info(table),
        xla_host_others_ns=xla_others, dropped=_dropped(name, table, steps),
        input_transfer_ns=int(transfer.sum()))
    return result, events, masks


def flight_info(table: EventTable) -> dict[str, Any] | None:
    """What triggered a flight recorder's dump and the step's figures, from the Task
    Environment plane's ``stepscope_flight_*`` stats (None for any other profile)."""
    for p in table.planes:
        trigger = p.stats.get(schema.ENV_FLIGHT_TRIGGER)
        if isinstance(trigger, str):
            out: dict[str, Any] = {}
            for key, value in p.stats.items():
                if key.startswith(schema.ENV_FLIGHT_STAT_PREFIX):
                    out[key[len(schema.ENV_FLIGHT_STAT_PREFIX):]] = value
            if out.get("step") == -1:
                out["step"] = None
            return out
    return None


def _xla_host_others(table: EventTable, steps: Steps, masks: Mapping[str, BoolArray],
                     ends: Ends | None) -> int:
    """Step time (ns) that XLA's execution on the host covers and no category of the
    breakdown does ("all others" in XProf's figures): from the start of each program run
    (``run_id``) to the end of its last op, the gaps between its ops on the thread pool
    included, and its ops (``hlo_op``)."""
    if not len(steps) or not len(table):
        return 0
    on_host = ~device_planes(table)[table.plane] if len(table.planes) else np.ones(
        len(table), bool)
    xla = np.zeros(len(table), dtype=bool)
    xla[table.text_stat("hlo_op")[0]] = True
    run_rows, run_ids = table.int_stat("run_id")
    keep = on_host[run_rows]
    run_rows, run_ids = run_rows[keep], run_ids[keep]
    xla[run_rows] = True
    xla &= on_host
    if not xla.any():
        return 0
    end = ends.column(table) if ends is not None else table.start_ns + table.duration_ns
    # Each run's span, carried by one of its events that no category counts (an op on the
    # pool's threads), so that the categories' own times stay as they are.
    counted = np.zeros(len(table), dtype=bool)
    for cat in PRIORITY:
        counted |= masks[cat]
    free = ~counted[run_rows]
    run_rows, run_ids = run_rows[free], run_ids[free]
    if len(run_rows):
        order = np.lexsort((table.start_ns[run_rows], run_ids))
        run_rows, run_ids = run_rows[order], run_ids[order]
        first = np.flatnonzero(np.r_[True, run_ids[1:] != run_ids[:-1]])
        last_end = np.maximum.reduceat(end[run_rows], first)
        end[run_rows[first]] = np.maximum(end[run_rows[first]], last_end)
    # Layered, not {**masks, ...}: that would make every kept mask at once.
    # (ChainMap only reads the maps after its first: the cast is for its signature.)
    with_xla = partition(table, steps,
                         ChainMap({"xla_host": xla}, cast(MutableMapping[str, BoolArray], masks)),
                         (*PRIORITY, "xla_host"), end)
    return int(with_xla[:, -2].sum())


def _dropped(name: str, table: EventTable, steps: Steps) -> dict[str, Any] | None:
    dropped = host_dropped(name, table, steps.step_num, steps.end_ns)
    return None if dropped is None else dropped.to_dict()


# Names already tested, per pattern: the hosts of a run share most of their event names.
_SEEN: dict[re.Pattern[str], dict[str, bool]] = {}
_SEEN_LIMIT = 2_000_000  # names remembered in all, so that a long-lived server stays bounded


def _name_mask(table: EventTable, pattern: re.Pattern[str]) -> BoolArray:
    """Per event: whether its name matches ``pattern`` (tested once per distinct name)."""
    if sum(len(seen) for seen in list(_SEEN.values())) > _SEEN_LIMIT:
        _SEEN.clear()
    seen = _SEEN.setdefault(pattern, {})
    hits = []
    for n in table.names:
        hit = seen.get(n)
        if hit is None:
            hit = seen[n] = bool(pattern.search(n))
        hits.append(hit)
    per_name = np.array(hits + [False], dtype=bool)
    return per_name[table.name]


def _any_device_work(device_work: BoolArray) -> bool:
    """Whether any event is the device's work (else its categories are all empty)."""
    return bool(device_work.any())


def _category_masks(table: EventTable, steps: Steps, events: OpEvents) -> CategoryMasks:
    """Per category: which events count towards it (before the priority partition)."""
    n = len(table)
    device_plane = device_planes(table)
    if not (steps.event_step >= 0).any():
        # No event lies in a step (a profile without steps): every category below is empty
        # but the device's events, whatever the events are. Their columns (a dozen bytes an
        # event, the peak of a stepless profile's model) are not made.
        return _stepless_masks(device_plane[table.plane] if len(table.planes)
                               else np.zeros(n, bool))

    # The step's own threads: its marker lines, and lines of other host planes (the Python
    # tracer's) that stand for the same threads.
    step_line_ids = table.line_id[steps.lines] if len(steps.lines) else np.zeros(0, np.int64)
    host_line = ~device_plane[table.line_plane] if len(table.line_plane) else np.zeros(0, bool)
    step_lines = np.isin(table.line_id, step_line_ids) & host_line
    on_step_thread = step_lines[table.line] if len(step_lines) else np.zeros(n, bool)

    grouped: BoolArray | None = None
    if has_links(table):
        # TensorFlow/JAX: the step's host events are those grouped into it (and into the
        # step their start falls in), less what XProf does not count as work. Found first,
        # while few columns are held: the grouping's own peak was the model's, on top of
        # the columns below.
        # As narrow as the steps' column (int16 where the steps allow).
        seed = cast(StepCodes, np.where(on_step_thread, steps.event_step, -1).astype(
            steps.event_step.dtype, copy=False))
        del on_step_thread  # (made again below: a lookup, not held through the grouping)
        group = grouped_step(table, seed)  # fills ``seed`` in: one column, not two
        del seed
        grouped = (group == steps.event_step) & ~_name_mask(table, NOT_HOST_WORK)
        del group
        on_step_thread = step_lines[table.line] if len(step_lines) else np.zeros(n, bool)
    # (Made after the grouping: not held through its peak.)
    in_step = steps.event_step >= 0
    on_device = device_plane[table.plane] if len(table.planes) else np.zeros(n, bool)
    quiet = np.array([p.name in (schema.COUNTERS_PLANE, schema.TASK_ENV_PLANE, "/host:metadata")
                      for p in table.planes], dtype=bool)
    on_host = ~on_device & ~(quiet[table.plane] if len(table.planes) else np.zeros(n, bool))

    # Device events: kernels and copies on stream lines, not TensorFlow/XLA's derived lines.
    line_names = np.array(table.line_name, dtype=object)
    derived = np.isin(line_names, DERIVED_OP_LINES + DERIVED_OTHER_LINES) if len(line_names) \
        else np.zeros(0, bool)
    category, categories = events.category, events.categories
    if categories:
        gpu_cats = np.array([c in KINETO_DEVICE_OPS for c in categories]
                            + [False], dtype=bool)
        device_work = gpu_cats[category]
        annotation = np.array([c == "gpu_user_annotation" for c in categories] + [False], bool)
        device_work &= ~annotation[category]
    else:
        device_work = on_device & ~(derived[table.line] if len(derived) else np.zeros(n, bool))
        # TPUs have no stream lines: there the XLA ops themselves are the device's work.
        with_streams = np.unique(table.plane[device_work])
        xla_ops = np.array([ln == "XLA Ops" for ln in table.line_name] + [False], dtype=bool)
        device_work |= on_device & xla_ops[table.line] & ~is_in(table.plane, with_streams)
    # No device work (a host-only profile): the device's categories are empty, and their
    # columns (copies, collectives, transfers) are not made.
    devices = _any_device_work(device_work)
    # Per name, then per event by its name code (a flag a name, not an object an event).
    not_kernel = np.array([kernel_type(name) != "Kernel" for name in table.names] + [False],
                          dtype=bool)
    copy_line = np.array([("Memcpy" in ln) for ln in table.line_name] + [False], dtype=bool)
    is_copy = not_kernel[table.name] | copy_line[table.line] if devices else None

    def matches(pattern: re.Pattern[str]) -> BoolArray:
        hit = _name_mask(table, pattern)
        per_line = np.array([bool(pattern.search(ln)) for ln in table.line_name] + [False],
                            dtype=bool)
        both: BoolArray = hit | per_line[table.line]
        return both

    del derived, not_kernel, copy_line
    device_copy = device_work & is_copy if is_copy is not None else None
    marker = typed_equals(table, schema.ROOT_LEVEL, 1) | _name_mask(table, PROFILER_STEP)
    if steps.marker:
        code = table.name_code(steps.marker)
        if code is not None:
            marker |= (table.name == code) & on_step_thread
    host = on_host & in_step & ~marker
    del marker
    if grouped is not None:
        del on_host  # (the host's ops count only without links: not held through these)
        host &= grouped
        del grouped
        step_work = host
        input_wait = host & _name_mask(table, XPROF_INPUT_WAIT)
    else:
        step_work = host & (on_step_thread | ((events.op >= 0) & on_host))
        del on_host
        input_wait = host & _name_mask(table, INPUT_WAIT)
    # The masks are made one at a time, each column above dropped after its last use: over
    # millions of events the intermediate masks held together were a large part of the peak.
    out = CategoryMasks(n)
    if is_copy is None or device_copy is None:  # no device work
        out.add_none("device_compute")
        out.add("device_collectives", host & _name_mask(table, HOST_COLLECTIVE_EVENT))
        out.add_none("device_to_device")
        out.add("input", (host & on_step_thread & _name_mask(table, INPUT_EVENT)) | input_wait)
        del input_wait
        out.add_none(INPUT_TRANSFER)
        out.add("output", host & on_step_thread & _name_mask(table, OUTPUT_EVENT))
    else:
        collective = _name_mask(table, COLLECTIVE_EVENT)
        out.add("device_compute", device_work & ~is_copy & ~collective & in_step)
        del is_copy
        out.add("device_collectives", (device_work & collective & in_step) | (
            host & _name_mask(table, HOST_COLLECTIVE_EVENT)))
        del collective
        to_device = matches(_TO_DEVICE)
        out.add("device_to_device", device_copy & matches(_DEVICE_TO_DEVICE) & in_step)
        out.add("input", (host & on_step_thread & _name_mask(table, INPUT_EVENT)) | input_wait
                | (device_copy & to_device & in_step))
        del input_wait
        out.add(INPUT_TRANSFER, device_copy & to_device & in_step)
        del to_device
        out.add("output", (host & on_step_thread & _name_mask(table, OUTPUT_EVENT))
                | (device_copy & matches(_TO_HOST) & in_step))
    del on_step_thread
    out.add("compilation", host & _name_mask(table, COMPILE_EVENT))
    out.add("kernel_launch", host & _name_mask(table, LAUNCH_EVENT))
    out.add("host_compute", step_work)
    del host, step_work
    # Not overview categories: the device's own work, for per-device breakdowns.
    if device_copy is None:
        out.add_none("device_work")
        out.add_none("device_copies")
    else:
        out.add("device_work", device_work & in_step)
        out.add("device_copies", device_copy & in_step)
    out.add("device_events", on_device)
    return out


# Events the partition takes at a time (its columns: some 30 B an event of the chunk): 1/64 of
# the host's, at least 65,536 (on a small host the chunk's columns were a large part of the
# model's peak; on a big one more chunks would each copy the union so far again).
_PARTITION_CHUNK = 1 << 16
_PARTITION_CHUNKS = 64


# The categories ``_category_masks`` keeps, in the order it adds them.
_MASKS = ("device_compute", "device_collectives", "device_to_device", "input", INPUT_TRANSFER,
          "output", "compilation", "kernel_launch", "host_compute", "device_work",
          "device_copies", "device_events")


def _stepless_masks(on_device: BoolArray) -> CategoryMasks:
    """``_category_masks`` where no event is in a step: only the device's events are set."""
    out = CategoryMasks(len(on_device))
    none = np.zeros(len(on_device), dtype=bool)
    for name in _MASKS[:-1]:
        out.add(name, none)
    out.add(_MASKS[-1], on_device)
    return out


def partition(table: EventTable, steps: Steps, masks: Mapping[str, BoolArray],
              order: tuple[str, ...] = CATEGORIES[:-1], ends: Ends | I64 | None = None
              ) -> I64:
    """Per step, the time given to each category of ``order`` (ns), first come first served,
    and in a last column the rest of the step; rows add up to the step time. ``ends``
    overrides the events' end times: ``instant_ends``' few, or a column of every event's."""
    n_steps = len(steps)
    out = np.zeros((n_steps, len(order) + 1), dtype=np.int64)
    if n_steps == 0:
        return out
    # The union of the categories so far, as disjoint segments: each category adds its
    # (clipped) events to it, and the growth of the union is that category's time.
    seg_group: NDArray[np.integer[Any]] = np.zeros(0, dtype=np.int64)
    seg_start = seg_end = np.zeros(0, dtype=np.int64)
    done = np.zeros(n_steps, dtype=np.int64)
    for k, cat in enumerate(order):
        # The category's events a chunk at a time, each chunk's union added to the union so
        # far: the same union, with a chunk's columns held at once rather than columns of
        # every event of the category (tens of MB over millions of events).
        mask = masks[cat]
        chunk = max(_PARTITION_CHUNK, len(mask) // _PARTITION_CHUNKS)
        for at in range(0, len(mask), chunk):
            rows = np.flatnonzero(mask[at:at + chunk])
            rows += at
            in_step = steps.event_step[rows]
            keep = in_step >= 0
            rows, step = rows[keep], in_step[keep]  # int32 steps: merged takes any integers
            del keep, in_step
            if len(rows) == 0:
                continue
            lo = table.start_ns[rows]
            # int64 ends (the durations may be int32: not added to in place)
            hi = (lo + table.duration_ns[rows] if ends is None else ends[rows]
                  if isinstance(ends, np.ndarray) else ends.of(table, rows))
            del rows
            np.maximum(lo, steps.start_ns[step], out=lo)
            np.minimum(hi, steps.end_ns[step], out=hi)
            # The chunk's own union first (nested events collapse to their outermost), then
            # its union with what is there so far: the same time, fewer rows held at once.
            own = intervals.merged(step, lo, hi)
            del step, lo, hi
            seg_group, seg_start, seg_end = intervals.merged(
                np.concatenate([seg_group, own[0]]), np.concatenate([seg_start, own[1]]),
                np.concatenate([seg_end, own[2]]))
            del own
        del mask
        union = np.zeros(n_steps, dtype=np.int64)
        np.add.at(union, seg_group, seg_end - seg_start)
        out[:, k] = union - done
        done = union
    out[:, -1] = np.maximum(steps.duration_ns - done, 0)
    return out


@dataclass
class Ends:
    """Event ends where some differ from start + duration (``instant_ends``): the events
    that do (ascending) and their ends; every other event ends at start + duration. Kept so
    rather than as every event's end: that column (8 B an event) was held through the
    partitions."""

    rows: I64
    values: I64

    def of(self, table: EventTable, rows: NDArray[np.integer[Any]]) -> I64:
        """The ends of events ``rows`` (int64)."""
        out: I64 = table.start_ns[rows] + table.duration_ns[rows]
        if len(self.rows) and len(rows):
            at = np.searchsorted(self.rows, rows)
            np.minimum(at, len(self.rows) - 1, out=at)
            hit = self.rows[at] == rows
            out[hit] = self.values[at[hit]]
        return out

    def column(self, table: EventTable) -> I64:
        """Every event's end."""
        out: I64 = table.start_ns + table.duration_ns
        out[self.rows] = self.values
        return out


def instant_ends(table: EventTable, steps: Steps, masks: Mapping[str, BoolArray],
                 order: tuple[str, ...]) -> Ends | None:
    """The events' ends where zero-length events of a step last as XProf's sweep has them
    (``Ends``: those that differ from start + duration).

    XProf settles overlaps by sweeping the start and end boundaries of a step's events, ends
    before starts at equal times, keeping a count per category. A zero-length event's end
    then comes before its start: when no event of its category is open, the count dips and
    comes back to zero, yet the category becomes the step's current one and stays so until an
    event of that category ends or one of a higher category starts. (A JAX step's
    ``ThreadpoolListener::StartRegion`` is such an event: its host compute runs on to the
    step's next host event.) Each such event is given that end here, so that the union-based
    ``partition`` finds XProf's figures. None where no end changes (no such event): the
    events' own ends, without a column of them held through the partition.
    """
    n_steps = len(steps)
    if n_steps == 0 or len(table) == 0:
        return None
    # Each event's category is the first of ``order`` it belongs to (its priority).
    kind = np.full(len(table), -1, dtype=np.int8)  # a few categories: int8, not int64
    in_step = steps.event_step >= 0
    for k, cat in enumerate(order):
        kind[masks[cat] & in_step & (kind < 0)] = k
    zero = np.flatnonzero((kind >= 0) & (table.duration_ns == 0))
    if len(zero) == 0:
        return None
    # The events of each step together (int32 rows where they fit, the sort's int64 order
    # let go at once: over millions of events each column is tens of MB).
    rows = rows_where(kind >= 0)
    rows = rows[np.argsort(steps.event_step[rows], kind="stable")]
    their_step = steps.event_step[rows]
    step_bounds = np.arange(n_steps + 1)
    if n_steps <= np.iinfo(their_step.dtype).max:
        # As narrow as the steps' column: int64 values would cast an int64 copy of it.
        step_bounds = step_bounds.astype(their_step.dtype)
    bounds = np.searchsorted(their_step, step_bounds)
    del their_step, step_bounds
    zero = zero[np.lexsort((table.start_ns[zero], kind[zero], steps.event_step[zero]))]
    z_step, z_kind = steps.event_step[zero].astype(np.int64), kind[zero]
    # The zero-length events' ends, in this order (their starts to begin with). No column of
    # every event's end is made: the other events' ends stay start + duration, and within a
    # step those of its earlier (higher) categories' zero-length events are read from here.
    z_end = table.start_ns[zero]
    first = np.flatnonzero(np.concatenate([[True], (z_step[1:] != z_step[:-1])
                                           | (z_kind[1:] != z_kind[:-1])]))
    step_first = 0  # where the current step's zero-length events begin in this order
    for lo, hi in zip(first.tolist(), np.append(first[1:], len(zero)).tolist(), strict=True):
        step, k = int(z_step[lo]), int(z_kind[lo])
        if lo == 0 or int(z_step[lo - 1]) != step:
            step_first = lo
        mine = rows[bounds[step]:bounds[step + 1]]
        t = table.start_ns[zero[lo:hi]]
        higher = mine[kind[mine] < k]
        h_start = table.start_ns[higher]
        h_end = _ends_with(table, higher, zero[step_first:lo], z_end[step_first:lo])
        # A higher category open at the instant keeps it; one starting later cuts it short.
        stop = int(steps.end_ns[step])
        cut = _next_after(np.sort(h_start), t, "left", stop)
        same = mine[(kind[mine] == k) & (table.duration_ns[mine] > 0)]
        same_end = table.start_ns[same] + table.duration_ns[same]  # (not zero-length)
        cut = np.minimum(cut, _next_after(np.sort(same_end), t, "right", stop))
        open_higher = np.zeros(len(t), dtype=bool)
        if len(higher):
            # Whether a higher event spans the instant: its intervals merged, then searched.
            _, m_start, m_end = intervals.merged(np.zeros(len(higher), np.int64), h_start, h_end)
            at = np.searchsorted(m_start, t, side="left") - 1
            ok = at >= 0
            open_higher[ok] = m_end[at[ok]] > t[ok]
        z_end[lo:hi] = np.where(open_higher, t, np.maximum(cut, t))
    # Those whose end changed, by row.
    keep = z_end != table.start_ns[zero]
    if not keep.any():
        return None
    zero, z_end = zero[keep], z_end[keep]
    by_row = np.argsort(zero)
    changed = z_end[by_row]
    zero = zero[by_row]
    return Ends(zero, changed)


def _ends_with(table: EventTable, rows: NDArray[np.integer[Any]],
               known: NDArray[np.integer[Any]], known_end: I64) -> I64:
    """The ends of events ``rows``: start + duration, or for those among ``known`` (a few
    events, any order) the end ``known_end`` gives."""
    out: I64 = table.start_ns[rows] + table.duration_ns[rows]
    if len(known) and len(rows):
        order = np.argsort(known)
        known, known_end = known[order], known_end[order]
        at = np.searchsorted(known, rows)
        np.minimum(at, len(known) - 1, out=at)
        hit = known[at] == rows
        out[hit] = known_end[at[hit]]
    return out


def _next_after(times: I64, t: I64, side: Literal["left", "right"], default: int) -> I64:
    """Per instant of ``t``: the first of the sorted ``times`` at or after it (``side``
    "left") or strictly after it ("right"); ``default`` where there is none."""
    pos = np.searchsorted(times, t, side=side)
    padded = np.append(times, default)
    return padded[pos]


def _sixteen_bit_inputs(table: EventTable, events: OpEvents, device_rows: I64) -> BoolArray:
    """Per device row of a PyTorch (Kineto) table: whether the op that launched it took 16-bit
    inputs (its ``Input type`` names BFloat16 or Half). cuBLAS's and cuDNN's kernels often do
    not say their precision in their name (Hopper's ``nvjet_…`` GEMMs), their op does."""
    out = np.zeros(len(device_rows), bool)
    rows, codes, values = table.text_stat(_INPUT_TYPE)
    if len(rows) == 0 or len(device_rows) == 0:
        return out
    sixteen = np.array([bool(_SIXTEEN_BIT_TYPE.search(v)) for v in values] + [False], bool)
    launcher = launching_op_rows(table, events, device_rows)
    # The launcher's Input type: text_stat's rows ascend, so a search finds each.
    pos = np.clip(np.searchsorted(rows, launcher), 0, len(rows) - 1)
    found = (launcher >= 0) & (rows[pos] == launcher)
    out[found] = sixteen[codes[pos[found]]]
    return out


def _devices(table: EventTable) -> tuple[str, int, list[str]]:
    """Device type (CPU, GPU, TPU, ...), how many ran something (a device plane with no
    event, as XSpace files keep for every idle GPU, is not counted), and the names of all."""
    # A flag per line that has events, then per plane: bincount of the events' planes would
    # cast every event's int32 code to a temporary int64 column.
    ran = np.zeros(len(table.planes), bool)
    if len(table):
        used = np.zeros(len(table.line_plane), bool)
        used[table.line] = True
        ran[table.line_plane[used]] = True
    planes = [p for p, dev, used in zip(table.planes, device_planes(table), ran, strict=True)
              if dev and used]
    if not planes:
        return "CPU", 0, []
    kinds = sorted({p.name.split(":")[1] for p in planes})
    names: list[str] = []
    for p in table.planes:
        props = p.stats.get(schema.ENV_DEVICE_PROPERTIES)
        if isinstance(props, str):
            try:
                names = [str(d.get("name", "")) for d in json.loads(props) if isinstance(d, dict)]
            except ValueError:
                names = []
    if not names:
        # Else each device plane's own name: TensorFlow's and JAX's GPU planes say
        # ``gpu_device_name``, stepscope's PyTorch and CUDA bridges ``device_name``.
        for p in planes:
            name = next((p.stats[k] for k in _DEVICE_NAME_STATS
                         if isinstance(p.stats.get(k), str) and p.stats[k].strip()), None)
            if name is not None:
                names.append(name.strip())
    return "/".join(kinds), len(planes), names


def _cpu_count(table: EventTable) -> int | None:
    for p in table.planes:
        value = p.stats.get(schema.ENV_CPU_COUNT)
        if isinstance(value, int) and value > 0:
            return value
    return None


def verdict(input_percent: float, all_others_percent: float) -> str:
    """The input-bound verdict for the given shares of step time (see the module docs)."""
    if input_percent >= HIGHLY_INPUT_BOUND:
        return "highly"
    if input_percent >= MODERATELY_INPUT_BOUND:
        return "moderately"
    if all_others_percent >= POTENTIALLY_ALL_OTHERS:
        return "potentially"
    return "not"


def _step_times(hosts: list[HostOverview]) -> tuple[I64, I64, I64]:
    """Step numbers, step times and per-step category times across hosts.

    A step lasts as long as its slowest host, and its breakdown is that host's.
    """
    nums = [h.steps.step_num for h in hosts if len(h.steps)]
    if not nums:
        empty = np.zeros(0, np.int64)
        return empty, empty, np.zeros((0, len(CATEGORIES)), np.int64)
    all_nums = np.unique(np.concatenate(nums))
    times = np.full(len(all_nums), -1, dtype=np.int64)
    cats = np.zeros((len(all_nums), len(CATEGORIES)), dtype=np.int64)
    for h in hosts:
        if len(h.steps):
            pos = np.searchsorted(all_nums, h.steps.step_num)
            slower = h.steps.duration_ns > times[pos]
            times[pos[slower]] = h.steps.duration_ns[slower]
            cats[pos[slower]] = h.step_category_ns[slower]
    return all_nums, times, cats


def _summary(hosts: list[HostOverview]) -> dict[str, Any]:
    """The overview dictionary of one host, or the aggregate of several."""
    nums, times, step_cats = _step_times(hosts)
    ms = times / 1e6
    category_ns = np.zeros(len(CATEGORIES), dtype=np.int64)
    total_step_ns = 0
    for h in hosts:
        category_ns += h.step_category_ns.sum(axis=0)
        total_step_ns += int(h.steps.duration_ns.sum())
    breakdown = {c: (100.0 * float(category_ns[i]) / total_step_ns if total_step_ns else 0.0)
                 for i, c in enumerate(CATEGORIES)}
    n = len(times)
    has_steps = n > 0
    input_percent = breakdown["input"] if has_steps else None
    # Our verdict does not take XLA compute on the host for untraced input (XProf's does).
    xla_percent = (100.0 * sum(h.xla_host_others_ns for h in hosts) / total_step_ns
                   if total_step_ns else 0.0)
    others = max(breakdown["all_others"] - xla_percent, 0.0)
    kind = verdict(breakdown["input"], others) if has_steps else "not"
    ops = merge([h.ops for h in hosts])
    top = ops.top(10)
    methods = sorted({h.steps.method for h in hosts})
    markers = sorted({h.steps.marker for h in hosts if h.steps.marker})
    device_types = sorted({h.device_type for h in hosts if h.device_type != "CPU"})
    device_ns = sum(h.device_compute_ns for h in hosts)
    sixteen_ns = sum(h.sixteen_bit_ns for h in hosts)
    cores = [h.cpu_count for h in hosts if h.cpu_count]
    out: dict[str, Any] = {
        "steps": {
            "count": n,
            "avg_ms": float(ms.mean()) if has_steps else None,
            "min_ms": float(ms.min()) if has_steps else None,
            "max_ms": float(ms.max()) if has_steps else None,
            "stddev_ms": float(ms.std()) if has_steps else None,
            "found_by": methods[0] if len(methods) == 1 else methods,
            "marker": markers[0] if len(markers) == 1 else markers,
            "found_by_text": steps_found_sentence(methods, markers),
            "trimmed": sorted({n for h in hosts for n in h.steps.trimmed}),
            "per_step": [{"step_num": int(s), "ms": float(t),
                          "breakdown_ms": dict(zip(CATEGORIES, (c / 1e6).tolist(), strict=True))}
                         for s, t, c in zip(nums, ms, step_cats, strict=True)],
        },
        "breakdown": breakdown,
        "breakdown_ms": {c: (float(category_ns[i]) / 1e6 / max(sum(len(h.steps)
                                                                   for h in hosts), 1))
                         for i, c in enumerate(CATEGORIES)},
        "input": {"percent": input_percent, "verdict": kind,
                  "statement": _input_statement(kind, breakdown, has_steps, xla_percent),
                  "xla_on_host_percent": xla_percent},
        "precision": ({"16bit_percent": 100.0 * sixteen_ns / device_ns,
                       "32bit_percent": 100.0 - 100.0 * sixteen_ns / device_ns}
                      if device_ns else None),
        "top_ops": [{"name": r.name, "type": r.type, "host_or_device": r.host_or_device,
                     "self_ms": r.self_ns / 1e6, "self_percent": r.self_percent,
                     # XProf's cumulative column: this op's share and those above it (the
                     # top ops are of one side, so the shares add up to at most 100).
                     "cumulative_self_percent": float(min(cumulative, 100.0)),
                     "occurrences": r.occurrences}
                    for r, cumulative in zip(top, np.cumsum([r.self_percent for r in top]),
                                             strict=True)],
        "environment": {
            "hosts": len(hosts), "host_names": [h.name for h in hosts],
            "device_type": "/".join(device_types) if device_types else "CPU",
            "device_count": sum(h.device_count for h in hosts),
            "device_names": sorted({d for h in hosts for d in h.device_names if d}),
            "cpu_count": sum(cores) if cores else None,
        },
        # A flight recorder's dump: what saved it, and the step's figures.
        "flight": next((h.flight for h in hosts if h.flight), None),
    }
    out["recommendation"] = _recommendation(out, has_steps)
    return out


def _input_statement(kind: str, breakdown: dict[str, float], has_steps: bool,
                     xla_percent: float = 0.0) -> str:
    if not has_steps:
        return ("No steps were found, so input-boundness is unknown; the advice says how to "
                "mark steps in the framework this run used.")
    pct = breakdown["input"]
    if xla_percent >= 1.0 and kind in ("not", "moderately", "highly"):
        xla = (f" XLA ops ran on the host's threads for {xla_percent:.1f}% of step time: "
               "compute, which XProf's breakdown counts as 'all others'.")
    else:
        xla = ""
    if kind == "highly":
        return (f"This run is HIGHLY input-bound: {pct:.1f}% of step time waits for input. "
                "Reduce input time first.")
    if kind == "moderately":
        return (f"This run is MODERATELY input-bound: {pct:.1f}% of step time waits for "
                "input. Reduce both input time and the rest.")
    if kind == "potentially":
        return (f"This run is POTENTIALLY input-bound: {breakdown['all_others']:.1f}% of step "
                "time went to 'all others' (untraced I/O or Python, or both).")
    return (f"This run is NOT input-bound: only {pct:.1f}% of step time waits for input. "
            f"Focus on the rest of the step.{xla}")


def _recommendation(summary: dict[str, Any], has_steps: bool) -> dict[str, Any]:
    """The next tool to open, and hints drawn from the breakdown."""
    hints: list[str] = []
    b = summary["breakdown"]
    if not has_steps:
        return {"next_tool": "ops", "hints": [
            "No steps found: op stats are still shown; mark steps to get a breakdown."]}
    kind = summary["input"]["verdict"]
    if kind in ("highly", "moderately"):
        next_tool = "input_pipeline"
        hints.append("Open the input pipeline analyzer to see which input stage is slow; "
                     "prefetch, parallelise or cache the input.")
    elif b["device_compute"] >= max(b["host_compute"], 1.0):
        next_tool = "kernel_stats"
        hints.append("Device compute dominates: look at the top device ops and kernels; "
                     "mixed precision and fusion help most here.")
    else:
        next_tool = "ops"
        hints.append("Host time dominates: open framework op stats and the trace viewer "
                     "to see which host work fills the step.")
    if b["kernel_launch"] >= 10.0:
        hints.append(f"{b['kernel_launch']:.1f}% of step time launches kernels: fuse ops, "
                     "use tf.function/XLA, torch.compile or CUDA graphs.")
    if b["compilation"] >= 10.0:
        hints.append(f"{b['compilation']:.1f}% of step time compiles: look for shapes or "
                     "arguments that change from step to step and force recompilation.")
    others = b["all_others"] - float(summary["input"].get("xla_on_host_percent") or 0.0)
    if kind != "potentially" and others >= 20.0:
        hints.append(f"{b['all_others']:.1f}% of step time is untraced: turn on the Python "
                     "tracer (python_tracer_level=1) to see it.")
    return {"next_tool": next_tool, "hints": hints}


__all__ = ["CATEGORIES", "CATEGORY_LABELS", "DEVICE", "HOST", "IDLE", "VERDICTS", "Overview",
           "CategoryMasks", "HostOverview", "overview", "host_facts", "host_overview", "verdict"]
