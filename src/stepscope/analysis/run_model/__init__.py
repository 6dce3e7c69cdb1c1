"""The run model: every fact the tools need, computed once per run from all of its hosts.

This is the hinge of the analysis (the role XProf's OpStats plays): each host's events are
classified once (steps, op identity, step-time categories), and what every tool answers from
is kept here, small and plain: per host its steps and their breakdown, op metrics (with idle
time), kernel groups, input-pipeline stage totals and bottleneck, per-device step breakdowns
and where each step's last collective ended. Tools (``overview_page``, op stats, kernel
stats, input pipeline, pod viewer) read a ``RunModel`` instead of the event tables, so a run
whose model is cached answers every tool without loading its tables.

Hosts are combined in one place, ``combined_steps``: steps are lined up across hosts by step
number, and a step lasts as long as its slowest host.

``RunModel.to_dict``/``from_dict`` give the lossless JSON form the cache keeps.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from stepscope.analysis.run_model.framework_op_stats import OpStats, merge
from stepscope.analysis.run_model.frameworks import (
    RunFramework,
    combined_framework,
    framework_of,
    input_library_of,
)
from stepscope.analysis.run_model.input_bottleneck import (
    Bottleneck,
    Pipeline,
    async_nodes,
    category_of,
    children_of,
    find_bottleneck,
    find_pipelines,
    iterator_events,
    node_totals,
    per_call_ns,
    work_ns,
)
from stepscope.analysis.run_model.kernel_stats import (
    KernelGroups,
    KernelStats,
    host_groups,
    merge_groups,
    merged_groups,
)
from stepscope.analysis.run_model.memory_events import MemoryEvents, memory_events
from stepscope.analysis.run_model.memory_profile import host_memory, run_memory
from stepscope.analysis.run_model.model_flops import HostModelFlops, pytorch_model_flops
from stepscope.analysis.run_model.overview_page import (
    CATEGORIES,
    HostOverview,
    Overview,
    host_facts,
    partition,
)
from stepscope.analysis.run_model.python_views import python_summary
from stepscope.analysis.run_model.steps import Steps, device_planes
from stepscope.analysis.versions import RUN_MODEL_VERSION as RUN_MODEL_VERSION  # bumped there
from stepscope.errors import NotFoundError, StepscopeError, not_found
from stepscope.model import schema
from stepscope.model.events import EventTable
from stepscope.model.run_tables import RunTables

I64 = NDArray[np.int64]
BoolArray = NDArray[np.bool_]

RUN_MODEL_NAME = f"run_model.{RUN_MODEL_VERSION}"

# The pod viewer's categories of a host's (or device's) step time.
POD_CATEGORIES = ("compute", "input", "collectives", "copy", "other")
# The order in which the host partition gives each instant to a category (first come first
# served): device compute, collectives, copies, input, the host's own work.
_HOST_ORDER = ("device_compute", "device_collectives", "copy", "input", "host_work")
_DEVICE_ORDER = ("device_compute", "device_collectives", "copy", "input")


@dataclass
class HostInput:
    """One host's input-pipeline stages summed over the profile, and its bottleneck."""

    nodes: list[str]
    calls: list[int]
    total_ns: list[int]
    work_ns: list[int]
    categories: list[str]
    bottleneck: Bottleneck
    pipelines: list[Pipeline] = field(default_factory=list)
    asynchronous: list[str] = field(default_factory=list)  # stages whose producers run
    # apart from them (threads, worker processes): their children's time overlaps theirs
    # Each stage's time as the input-op table and host breakdown count it: on tf.data XProf's
    # self time (an asynchronous stage's wait for its producers is its own, as XProf counts
    # it), elsewhere its own work.
    counted_ns: list[int] = field(default_factory=list)
    # tf.data's Root wrappers around the output stages: [calls, total ns, self ns]
    root: list[int] = field(default_factory=lambda: [0, 0, 0])
    # Each stage's own work in a typical call: the lower quartile of its calls' self times
    # (interference on a busy machine only adds time, to half the calls); an asynchronous
    # stage's work a call on average (its calls wait; no one call is its work).
    per_call_ns: list[int] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"nodes": self.nodes, "calls": self.calls, "total_ns": self.total_ns,
                "work_ns": self.work_ns, "categories": self.categories,
                "bottleneck": self.bottleneck.to_dict(),
                "pipelines": [p.to_dict() for p in self.pipelines],
                "asynchronous": list(self.asynchronous), "counted_ns": self.counted_ns,
                "root": list(self.root), "per_call_ns": self.per_call_ns}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> HostInput:
        return cls(list(d["nodes"]), [int(x) for x in d["calls"]],
                   [int(x) for x in d["total_ns"]], [int(x) for x in d["work_ns"]],
                   list(d["categories"]), Bottleneck.from_dict(d["bottleneck"]),
                   [Pipeline.from_dict(p) for p in d.get("pipelines", [])],
                   [str(n) for n in d.get("asynchronous", [])],
                   [int(x) for x in d["counted_ns"]], [int(x) for x in d["root"]],
                   [int(x) for x in d["per_call_ns"]])


@dataclass
class HostModel:
    """What the tools need of one host."""

    overview: HostOverview  # steps, their category breakdown, op stats, devices
    kernels: KernelGroups
    input: HostInput
    pod_ns: I64  # per step × (device compute, collectives, copy, input, host work, rest)
    devices: dict[str, I64]  # active device ("GPU:0") → per step × (compute, collectives,
    # copy, input, rest), the device's own view of the step
    collective_end_ns: I64  # per step: when its last collective ended (-1: none)
    profile_start_ns: int | None  # when the capture started on this host, where recorded
    memory: dict[str, Any] | None = None  # the memory profile's JSON form (HostMemory); None:
    # the host recorded no memory activity
    framework: RunFramework = field(default_factory=lambda: RunFramework("python", ""))
    python: dict[str, Any] | None = None  # Python time per step and the heaviest functions
    # (``python_views.python_summary``); None: no Python tracer or sampler data
    # Model FLOPs per step from the shapes of PyTorch's matmul, convolution and attention ops
    # (``model_flops.HostModelFlops``); None: no such op with recorded shapes
    model_flops: HostModelFlops | None = None

    @property
    def name(self) -> str:
        return self.overview.name

    @property
    def steps(self) -> Steps:
        return self.overview.steps


class LazyHosts(Mapping[str, "HostModel"]):
    """Host models kept as their JSON text until a tool asks for one host."""

    def __init__(self, raw: dict[str, str]) -> None:
        self._raw = raw
        self._decoded: dict[str, HostModel] = {}

    def __contains__(self, name: object) -> bool:
        return name in self._raw

    def __getitem__(self, name: str) -> HostModel:
        if name not in self._raw:
            raise KeyError(name)
        if name not in self._decoded:
            try:
                self._decoded[name] = _host_from_dict(json.loads(self._raw[name]))
            except (KeyError, TypeError, ValueError, IndexError, AttributeError) as err:
                raise StepscopeError(
                    f"The cached run model of host {name!r} is damaged ({err!r}); open the "
                    "run again with --no-cache, or delete the stepscope cache.") from err
        return self._decoded[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._raw)

    def __len__(self) -> int:
        return len(self._raw)

    def text(self, name: str) -> str:
        """One host's JSON text, as stored."""
        return self._raw[name]


@dataclass
class RunModel:
    """One run: its hosts' models, in host-name order, and the results combined over all
    hosts (``combined``: computed once when the model is built, so that a tool asked about
    the whole run reads one small result instead of every host)."""

    run: str
    path: str
    hosts: Mapping[str, HostModel]
    failed: dict[str, str] = field(default_factory=dict)
    combined: dict[str, Any] = field(default_factory=dict)

    def overview(self) -> Overview:
        """The overview page's result (decodes every host; ``overview_dict`` does not)."""
        return Overview(self.run, self.path, [h.overview for h in self.hosts.values()],
                        dict(self.failed))

    def overview_dict(self) -> dict[str, Any]:
        """The overview page's JSON form, for all hosts and each (see ``Overview``)."""
        if "overview" not in self.combined:
            self.combined["overview"] = self.overview().to_dict()
        result: dict[str, Any] = self.combined["overview"]
        return result

    def host_names(self, host: str | None) -> list[str]:
        """``[host]``, or every host when None; a StepscopeError for a host not in the run."""
        if host is None:
            return list(self.hosts)
        if host not in self.hosts:
            if host in self.failed:
                raise NotFoundError(f"Host {host!r} could not be read: {self.failed[host]}")
            raise not_found("host", host, f"run {self.run!r}", list(self.hosts))
        return [host]

    def op_stats(self, host: str | None = None, *, include_idle: bool = False) -> OpStats:
        """Framework op stats of one host, or summed over all hosts."""
        key = "op_stats_idle" if include_idle else "op_stats"
        if host is None and key in self.combined:
            return OpStats.from_record(self.combined[key])
        parts = []
        for name in self.host_names(host):
            ov = self.hosts[name].overview
            parts.append(ov.ops_idle if include_idle and ov.ops_idle is not None else ov.ops)
        if not parts:
            return OpStats([], [], include_idle)
        return merge(parts, include_idle=include_idle)

    def kernel_stats(self, host: str | None = None) -> KernelStats:
        """GPU kernel stats of one host, or of all hosts merged."""
        if host is None and "kernels" in self.combined:
            return merge_groups([KernelGroups.from_list(self.combined["kernels"])])
        return merge_groups([self.hosts[name].kernels for name in self.host_names(host)])

    def host_input(self, name: str) -> HostInput:
        """One host's input-pipeline stages and bottleneck."""
        if name in self.combined.get("input", {}):
            return HostInput.from_dict(self.combined["input"][name])
        return self.hosts[name].input

    def python_dict(self) -> dict[str, Any]:
        """Per host with Python data: its Python time per step and heaviest functions."""
        return {name: h.python for name, h in self.hosts.items() if h.python is not None}

    def memory_dict(self, host: str | None = None) -> dict[str, Any]:
        """The memory profile's JSON form (``memory_profile``), for all hosts or one."""
        if host is None and "memory" in self.combined:
            result: dict[str, Any] = self.combined["memory"]
            return result
        parts = {name: self.hosts[name].memory for name in self.host_names(host)}
        out = run_memory(self.run, host, parts)
        if host is None:
            self.combined["memory"] = out
        return out

    def framework(self) -> RunFramework:
        """The framework the run used and its input library (``frameworks``)."""
        if "framework" not in self.combined:
            self.combined["framework"] = combined_framework(
                [h.framework for h in self.hosts.values()]).to_dict()
        return RunFramework.from_dict(self.combined["framework"])

    def to_dict(self) -> dict[str, Any]:
        """The lossless JSON form (integer nanoseconds), read back by ``from_dict``; each
        host's part is JSON text of its own, decoded only when that host is asked for."""
        hosts = self.hosts
        return {"version": RUN_MODEL_VERSION, "run": self.run, "path": self.path,
                "failed": dict(self.failed), "combined": self.combined,
                "hosts": {name: hosts.text(name) if isinstance(hosts, LazyHosts)
                          else host_json(hosts[name])
                          for name in hosts}}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunModel:
        """The inverse of ``to_dict``; a KeyError/TypeError/ValueError for a foreign form."""
        if d.get("version") != RUN_MODEL_VERSION:
            raise ValueError("not a run model of this version")
        raw = {str(n): h for n, h in d["hosts"].items()}
        if not all(isinstance(h, str) for h in raw.values()) or not isinstance(
                d["combined"], dict):
            raise ValueError("not a run model")
        return cls(str(d["run"]), str(d["path"]), LazyHosts(raw),
                   {str(k): str(v) for k, v in d["failed"].items()}, dict(d["combined"]))


KeepMemory = Callable[[str, MemoryEvents], None]  # host name, its memory events


def build_run_model(profile: RunTables, *, keep_memory: KeepMemory | None = None) -> RunModel:
    """Compute the run model of every host of ``profile``, and combine them; each host's
    memory events (which the memory timeline reads later) are handed to ``keep_memory``."""
    hosts = {name: build_host(name, table, None if keep_memory is None else
                              functools.partial(keep_memory, name))
             for name, table in profile.hosts.items()}
    model = RunModel(profile.run, str(profile.path), hosts, dict(profile.failed))
    model.combined = combine(model)
    return model


def combine(model: RunModel) -> dict[str, Any]:
    """The facts over all hosts that tools ask for most, computed once (the run layer adds
    the results of tools it keeps with the model, such as the pod viewer's)."""
    hosts = list(model.hosts.values())
    ops_idle = [h.overview.ops_idle or h.overview.ops for h in hosts]
    return {
        "overview": model.overview().to_dict(),
        "op_stats": merge([h.overview.ops for h in hosts]).to_record(),
        "op_stats_idle": merge(ops_idle, include_idle=True).to_record(),
        "kernels": merged_groups([h.kernels for h in hosts]).to_list(),
        "input": {h.name: h.input.to_dict() for h in hosts},
        "memory": model.memory_dict(),
        "framework": combined_framework([h.framework for h in hosts]).to_dict(),
    }


def build_host(name: str, table: EventTable,
               keep_memory: Callable[[MemoryEvents], None] | None = None) -> HostModel:
    """The model of one host's events; its memory events, where it has any, are handed to
    ``keep_memory`` (the caller keeps them for the memory profile's timeline)."""
    ov, events, masks = host_facts(name, table)
    steps = ov.steps
    # The pod viewer's two categories kept beside the others (a bit an event each).
    masks.add("host_work", masks["output"] | masks["compilation"] | masks["kernel_launch"]
              | masks["host_compute"])
    masks.add("copy", masks["device_copies"] | masks["device_to_device"])
    pod_ns = partition(table, steps, masks, _HOST_ORDER)

    devices = _device_partitions(table, steps, masks)
    collective_end = np.full(len(steps), -1, dtype=np.int64)
    rows = np.flatnonzero(masks["device_collectives"])
    step = steps.event_step[rows] if len(steps) else np.zeros(0, np.int32)
    rows, step = rows[step >= 0], step[step >= 0]
    if len(rows):
        np.maximum.at(collective_end, step, table.start_ns[rows] + table.duration_ns[rows])
    # The per-event columns above (category masks, classification: tens of MB over millions
    # of events) are dropped before the passes below, so that their peaks do not add up: the
    # masks before the kernel groups (which read only the classification), then that.
    del masks, rows, step
    groups = host_groups(table, events)
    del events
    start = _profile_start(table)
    return HostModel(ov, groups, _host_input(name, table), pod_ns, devices, collective_end,
                     start, _host_memory(name, table, steps, start, keep_memory),
                     framework_of(table), python_summary(table, steps),
                     pytorch_model_flops(table, steps))


def _device_partitions(table: EventTable, steps: Steps,
                       masks: Mapping[str, NDArray[np.bool_]]) -> dict[str, I64]:
    """Per device plane with work: its step time by category (``partition``)."""
    devices: dict[str, I64] = {}
    device_plane = device_planes(table)
    host_input = masks["input"] & ~masks["device_events"]
    for index in np.unique(table.plane[masks["device_work"]]):
        if not device_plane[index]:
            continue
        mine = table.plane == index
        dev_masks = {"device_compute": masks["device_compute"] & mine,
                     "device_collectives": masks["device_collectives"] & mine,
                     "copy": masks["copy"] & mine, "input": host_input}
        label = table.planes[int(index)].name.removeprefix("/device:")
        devices[label] = partition(table, steps, dev_masks, _DEVICE_ORDER)
    return devices


def _host_memory(name: str, table: EventTable, steps: Steps, start: int | None,
                 keep: Callable[[MemoryEvents], None] | None) -> dict[str, Any] | None:
    ev = memory_events(table, steps.step_num, steps.start_ns, steps.end_ns)
    if not len(ev):
        return None
    if keep is not None:
        keep(ev)
    return host_memory(name, table, ev, start).to_dict()


def _host_input(name: str, table: EventTable) -> HostInput:
    ev = iterator_events(table)
    if not len(ev):
        return HostInput([], [], [], [], [], find_bottleneck(name, table, ev))
    totals = node_totals(ev)
    asynchronous = async_nodes(ev)
    work = work_ns(ev.nodes, totals, asynchronous)
    kids = children_of(ev.nodes)
    pipelines = find_pipelines(name, table, ev)
    tf_data = input_library_of(table) == "tf.data"
    return HostInput(list(ev.nodes), [int(x) for x in totals.calls],
                     [int(x) for x in totals.total_ns], [int(x) for x in work],
                     [category_of(n, kids[n], asynchronous, tf_data) for n in ev.nodes],
                     find_bottleneck(name, table, ev, pipelines), pipelines,
                     sorted(asynchronous),
                     [int(x) for x in (totals.self_ns if tf_data else work)],
                     [ev.root_calls, ev.root_total_ns, ev.root_self_ns],
                     [int(x) for x in per_call_ns(ev, totals, work, asynchronous)])


def _profile_start(table: EventTable) -> int | None:
    for plane in table.planes:
        value = plane.stats.get(schema.ENV_PROFILE_START_TIME)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


@dataclass
class CombinedSteps:
    """Steps lined up across hosts by step number."""

    step_num: I64
    present: NDArray[np.bool_]  # step × host: whether the host has the step
    index: I64  # step × host: the step's index in that host's steps (-1: absent)
    hosts: list[str]


def combined_steps(hosts: list[HostModel]) -> CombinedSteps:
    """The union of the hosts' step numbers, and where each host has each step."""
    nums = [h.steps.step_num for h in hosts if len(h.steps)]
    all_nums = np.unique(np.concatenate(nums)) if nums else np.zeros(0, np.int64)
    index = np.full((len(all_nums), len(hosts)), -1, dtype=np.int64)
    for j, h in enumerate(hosts):
        if len(h.steps):
            pos = np.searchsorted(all_nums, h.steps.step_num)
            index[pos, j] = np.arange(len(h.steps))
    return CombinedSteps(all_nums.astype(np.int64), index >= 0, index, [h.name for h in hosts])


# -- the JSON form ----------------------------------------------------------------------------


def _ints(a: Any) -> list[Any]:
    return np.asarray(a, dtype=np.int64).tolist()  # type: ignore[no-any-return]


def _array(values: Any, columns: int | None = None) -> I64:
    out = np.array(values, dtype=np.int64)
    if columns is not None:
        out = out.reshape(-1, columns)
    return out


def host_to_dict(h: HostModel) -> dict[str, Any]:
    """A host model's lossless JSON form (``RunModel.to_dict`` keeps it as text)."""
    return {key: part() for key, part in _host_parts(h)}


def host_json(h: HostModel) -> str:
    """``json.dumps(host_to_dict(h), separators=(",", ":"))``, the same text, made a part at a
    time: only one part's Python objects (a list an array) are held at once, not every
    part's (on a 10 MB profile, 5 MB of objects for 0.4 MB of text)."""
    return "{" + ",".join(f"{json.dumps(key)}:{json.dumps(part(), separators=(',', ':'))}"
                          for key, part in _host_parts(h)) + "}"


def _host_parts(h: HostModel) -> list[tuple[str, Callable[[], Any]]]:
    """The parts of a host model's JSON form, in order, each made when called."""
    ov, steps = h.overview, h.overview.steps
    assert ov.ops_idle is not None
    ops_idle = ov.ops_idle
    return [
        ("name", lambda: ov.name),
        ("steps", lambda: {"method": steps.method, "marker": steps.marker,
                           "step_num": _ints(steps.step_num),
                           "start_ns": _ints(steps.start_ns), "end_ns": _ints(steps.end_ns),
                           "trimmed": list(steps.trimmed)}),
        ("step_category_ns", lambda: _ints(ov.step_category_ns)),
        ("ops_idle", ops_idle.to_record),
        ("device_type", lambda: ov.device_type), ("device_count", lambda: ov.device_count),
        ("device_names", lambda: list(ov.device_names)), ("cpu_count", lambda: ov.cpu_count),
        ("sixteen_bit_ns", lambda: ov.sixteen_bit_ns),
        ("device_compute_ns", lambda: ov.device_compute_ns),
        ("xla_host_others_ns", lambda: ov.xla_host_others_ns),
        ("input_transfer_ns", lambda: ov.input_transfer_ns),
        ("kernels", h.kernels.to_list),
        ("input", h.input.to_dict),
        ("pod_ns", lambda: _ints(h.pod_ns)),
        ("devices", lambda: {k: _ints(v) for k, v in h.devices.items()}),
        ("collective_end_ns", lambda: _ints(h.collective_end_ns)),
        ("profile_start_ns", lambda: h.profile_start_ns),
        ("memory", lambda: h.memory),
        ("flight", lambda: ov.flight),
        ("framework", h.framework.to_dict),
        ("dropped", lambda: ov.dropped),
        ("python", lambda: h.python),
        ("model_flops", lambda: None if h.model_flops is None else h.model_flops.to_dict()),
    ]


def _host_from_dict(d: dict[str, Any]) -> HostModel:
    s = d["steps"]
    empty = np.zeros(0, dtype=np.int64)
    steps = Steps(str(s["method"]), str(s["marker"]), _array(s["step_num"]),
                  _array(s["start_ns"]), _array(s["end_ns"]), empty,
                  np.zeros(0, dtype=np.int32), [int(x) for x in s["trimmed"]])
    ops_idle = OpStats.from_record(d["ops_idle"])
    ov = HostOverview(
        name=str(d["name"]), steps=steps,
        step_category_ns=_array(d["step_category_ns"], len(CATEGORIES)),
        ops=ops_idle.without_idle(), device_type=str(d["device_type"]),
        device_count=int(d["device_count"]), device_names=[str(n) for n in d["device_names"]],
        cpu_count=None if d["cpu_count"] is None else int(d["cpu_count"]),
        sixteen_bit_ns=int(d["sixteen_bit_ns"]), device_compute_ns=int(d["device_compute_ns"]),
        ops_idle=ops_idle, flight=d.get("flight"),
        xla_host_others_ns=int(d["xla_host_others_ns"]),
        dropped=None if d.get("dropped") is None else dict(d["dropped"]),
        input_transfer_ns=int(d["input_transfer_ns"]))
    start = d["profile_start_ns"]
    return HostModel(
        ov, KernelGroups.from_list(d["kernels"]), HostInput.from_dict(d["input"]),
        _array(d["pod_ns"], len(_HOST_ORDER) + 1),
        {str(k): _array(v, len(_DEVICE_ORDER) + 1) for k, v in d["devices"].items()},
        _array(d["collective_end_ns"]), None if start is None else int(start),
        None if d["memory"] is None else dict(d["memory"]),
        RunFramework.from_dict(d["framework"]),
        None if d.get("python") is None else dict(d["python"]),
        None if d.get("model_flops") is None else HostModelFlops.from_dict(d["model_flops"]))
