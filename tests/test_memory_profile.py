"""Memory profile: XProf's memory_profile on every XSpace fixture with memory events, the raw
[memory] events of Kineto fixtures, key_averages() of real PyTorch runs, stepscope's NumPy
memory tracer, the timeline's downsampling, bad data, the CLI and the HTTP API."""

from __future__ import annotations

import gzip
import json
import shutil
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import stepscope
from stepscope.analysis.run_model.memory_events import memory_events
from stepscope.analysis.run_model.memory_profile import UNMAPPED_XSPACE, host_memory, timeline
from stepscope.cli import main
from stepscope.formats import xplane_builder as xb
from stepscope.formats.run_reader import load_file
from stepscope.model import schema
from stepscope.run.loader import open_run_model
from stepscope.web.api import Api, ApiError

from conftest import FIXTURES
from xprof_reference import xprof_tool

XSPACE_WITH_MEMORY = [
    "xprof/demo/plugins/profile/GPU-multi-worker/34.83.195.179_6003.xplane.pb",
    "xprof/xprof/convert/test_xplanes/tpu_inference_2.xplane.pb",
    "TraceLens/tests/traces/mi300/jax_conv_minimal_08/tw003.xplane.pb",
    "TraceLens/tests/traces/mi300/jax_conv_minimal_legacy/"
    "chi-mi300x-013.ord.vultr.cpe.ice.amd.com.xplane.pb",
    "TraceLens/tests/test_data_jax_te_fused_attn_categorization/934987a2fc2f.xplane.pb",
]
KINETO_WITH_MEMORY = [
    "TraceLens/tests/traces/h100/gaunernst_bert-small-uncased__1016001.json.gz",
    "TraceLens/tests/traces/mi300/gaunernst_bert-small-uncased__1016001.json.gz",
    "TraceLens/tests/traces/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
    "HolisticTraceAnalysis/tests/data/df_index_resolver/df_index_resolver.json.gz",
    "kineto/tb_plugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",
]
XPROF_MAX_SNAPSHOTS = 1000  # XProf's timeline keeps every event below this many


def _xprof_memory(path: Path, tmp: Path) -> dict[str, Any]:
    """XProf's memory_profile tool on a copy of ``path`` (it writes caches beside it)."""
    result: dict[str, Any] = xprof_tool(path, "memory_profile", tmp)
    return result


def _xprof_rows(alloc: dict[str, Any]) -> list[tuple[str, int, int, int]]:
    """XProf's breakdown at the peak: (op, size, requested, occurrences), heaviest first."""
    rows = []
    for r in alloc["activeAllocations"]:
        if int(r["snapshotIndex"]) < 0:
            meta = alloc["specialAllocations"][int(r["specialIndex"])]
        else:
            meta = alloc["memoryProfileSnapshots"][int(r["snapshotIndex"])]["activityMetadata"]
        rows.append((meta["tfOpName"], int(meta["allocationBytes"]),
                     int(meta["requestedBytes"]), int(r["numOccurrences"])))
    return rows


def _event_times(path: Path) -> dict[tuple[str, int], set[int]]:
    """(allocator, offset in ps) → the absolute ns of memory events with that line offset."""
    space = xb.read_space(path)
    out: dict[tuple[str, int], set[int]] = defaultdict(set)
    for plane in space.planes:
        stat_names = {k: v.name for k, v in plane.stat_metadata.items()}
        event_names = {k: v.name for k, v in plane.event_metadata.items()}
        for line in plane.lines:
            for ev in line.events:
                if event_names.get(ev.metadata_id) not in (schema.MEMORY_ALLOCATION,
                                                           schema.MEMORY_DEALLOCATION):
                    continue
                stats = {stat_names[s.metadata_id]: s for s in ev.stats}
                if schema.ALLOCATOR_NAME in stats:
                    s = stats[schema.ALLOCATOR_NAME]
                    name = (stat_names[s.ref_value] if s.WhichOneof("value") == "ref_value"
                            else s.str_value)
                else:
                    name = str(stats[schema.INDEX_ON_HOST].int64_value
                               or stats[schema.INDEX_ON_HOST].uint64_value)
                out[(name, ev.offset_ps)].add(line.timestamp_ns + ev.offset_ps // 1000)
    return out


@pytest.mark.parametrize("rel", XSPACE_WITH_MEMORY, ids=lambda r: Path(r).name[:24])
def test_memory_profile_matches_xprof(rel: str, tmp_path: Path) -> None:
    path = FIXTURES / rel
    theirs = _xprof_memory(path, tmp_path)["memoryProfilePerAllocator"]
    table = load_file(path, use_cache=False)
    ours = {a.name: a for a in host_memory("h", table, memory_events(table), None).allocators}
    assert set(ours) == set(theirs)
    times = _event_times(path)
    for name, alloc in theirs.items():
        mine, summary = ours[name], alloc["profileSummary"]
        peak = summary["peakStats"]
        assert mine.peak_bytes_in_use == int(peak["peakBytesInUse"]), name
        assert mine.peak_heap_bytes == int(peak["heapAllocatedBytes"]), name
        assert mine.capacity_bytes == int(summary["memoryCapacity"]), name
        assert mine.allocator_peak_bytes == int(summary["peakBytesUsageLifetime"]), name
        assert mine.fragmentation_at_peak == pytest.approx(peak["fragmentation"], abs=1e-6)
        # XProf's peak time is an offset within the event's thread line: the peak we name
        # is one of the events at that offset.
        assert mine.peak_time_ns in times[(name, int(summary["peakStatsTimePs"]))], name
        sampled = alloc["sampledTimelineSnapshots"]
        assert len(sampled) < XPROF_MAX_SNAPSHOTS  # so XProf kept every event
        kinds = Counter(s["activityMetadata"]["memoryActivity"] for s in sampled)
        assert (mine.num_allocations, mine.num_deallocations) == (
            kinds["ALLOCATION"], kinds["DEALLOCATION"]), name
        # The heaviest allocations live at the peak. XProf orders events of different threads
        # by their offsets within their own lines, so at a tie near the peak it can leave one
        # more allocation in "unused preallocated" than we do: compare the rest.
        want = [r for r in _xprof_rows(alloc) if r[0] != UNMAPPED_XSPACE][:5]
        got = [(r.op, r.size_bytes, r.requested_bytes, r.occurrences)
               for r in mine.breakdown_at_peak if r.op != UNMAPPED_XSPACE][:len(want)]
        assert [(o, n) for o, _, _, n in got] == [(o, n) for o, _, _, n in want], name
        for (_, size, req, _), (_, size2, req2, _) in zip(got, want, strict=True):
            assert size == pytest.approx(size2, rel=1e-3)
            assert req == pytest.approx(req2, rel=1e-3)


def test_gpu_breakdown_equals_xprof_row_for_row(tmp_path: Path) -> None:
    """On the TensorFlow GPU profile every row of the breakdown is XProf's, in its order."""
    path = FIXTURES / XSPACE_WITH_MEMORY[0]
    theirs = _xprof_memory(path, tmp_path)["memoryProfilePerAllocator"]["GPU_4_bfc"]
    table = load_file(path, use_cache=False)
    ev = memory_events(table)
    mine = host_memory("h", table, ev, None).allocators[ev.allocators.index("GPU_4_bfc")]
    got = [(r.op, r.size_bytes, r.requested_bytes, r.occurrences)
           for r in mine.breakdown_at_peak]
    assert len(got) > 500
    assert got == _xprof_rows(theirs)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_allocations_match_xprof_and_a_replay(seed: int, tmp_path: Path) -> None:
    """Random allocations and frees over random steps (some frees of memory never seen, some
    addresses reused): XProf's figures, and the live set at the peak by plain replay."""
    rng = np.random.default_rng(seed)
    live: dict[int, tuple[int, str]] = {}
    in_use, t, events = 0, 0, []
    ops = [f"op{i}" for i in range(12)]
    for i in range(1500):
        t += int(rng.integers(1, 500))
        step = i // 300
        if live and rng.random() < 0.45:
            addr = int(rng.choice(list(live)))
            size, op = live.pop(addr)
            in_use -= size
            kind = schema.MEMORY_DEALLOCATION
        elif rng.random() < 0.03:  # a free of something allocated before the profile
            addr, size, op, kind = 1 << 40, 4096, "", schema.MEMORY_DEALLOCATION
        else:
            addr = int(rng.integers(1, 400)) * 4096
            if addr in live:
                continue
            size, op = int(rng.integers(1, 64)) * 512, str(rng.choice(ops))
            live[addr] = (size, op)
            in_use += size
            kind = schema.MEMORY_ALLOCATION
        events.append((kind, t, {schema.ALLOCATOR_NAME: "GPU_0_bfc",
                                 schema.BYTES_ALLOCATED: in_use + (1 << 20),
                                 schema.BYTES_RESERVED: 0, schema.BYTES_AVAILABLE: 1 << 30,
                                 schema.PEAK_BYTES_IN_USE: in_use, schema.REQUESTED_BYTES: size,
                                 schema.ALLOCATION_BYTES: size, schema.ADDRESS: addr,
                                 schema.TF_OP: op, schema.GROUP_ID: step}))
    (tmp_path / "in").mkdir()
    path = _space_with(events, tmp_path / "in" / "random.xplane.pb")
    theirs = _xprof_memory(path, tmp_path)["memoryProfilePerAllocator"]["GPU_0_bfc"]
    table = load_file(path, use_cache=False)
    (mine,) = host_memory("h", table, memory_events(table), None).allocators
    summary = theirs["profileSummary"]
    assert mine.peak_bytes_in_use == int(summary["peakStats"]["peakBytesInUse"])
    assert mine.peak_time_ns - 1_000_000 == int(summary["peakStatsTimePs"]) // 1000
    assert [(r.op, r.size_bytes, r.requested_bytes, r.occurrences)
            for r in mine.breakdown_at_peak] == _xprof_rows(theirs)
    # Replay: what was allocated in the peak's step up to the peak and is still live.
    peak_at = mine.peak_time_ns - 1_000_000
    replay: dict[int, tuple[int, str]] = {}
    for kind, when, stats in events:
        if when > peak_at:
            break
        if stats[schema.GROUP_ID] != mine.peak_step:
            continue
        if kind == schema.MEMORY_ALLOCATION:
            replay[stats[schema.ADDRESS]] = (stats[schema.ALLOCATION_BYTES],
                                             stats[schema.TF_OP])
        else:
            replay.pop(stats[schema.ADDRESS], None)
    grouped = Counter(replay.values())
    ours = {(r.size_bytes, r.op): r.occurrences for r in mine.breakdown_at_peak
            if r.op != UNMAPPED_XSPACE}
    assert ours == dict(grouped)


def _raw_memory_events(path: Path) -> list[dict[str, Any]]:
    doc = json.loads(gzip.decompress(path.read_bytes()))
    return [e for e in doc["traceEvents"] if e.get("name") == "[memory]"]


@pytest.mark.parametrize("rel", KINETO_WITH_MEMORY, ids=lambda r: Path(r).name[:24])
def test_kineto_memory_events_are_all_counted(rel: str) -> None:
    """Counts per device, and the peak of 'Total Allocated', read from the JSON directly."""
    path = FIXTURES / rel
    raw = _raw_memory_events(path)
    expect: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for e in raw:
        a = e["args"]
        kind = {0: "cpu", 1: "cuda", 6: "hip"}[a.get("Device Type", 0)]
        name = "cpu" if kind == "cpu" else f"{kind}:{a['Device Id']}"
        expect[name][0 if a["Bytes"] > 0 else 1] += 1
        expect[name][2] = max(expect[name][2], a.get("Total Allocated", 0))
    data = open_run_model(path, use_cache=False).memory_dict()
    got = {a["name"]: [a["num_allocations"], a["num_deallocations"]]
           for a in data["allocators"]}
    assert got == {k: v[:2] for k, v in expect.items()}
    for a in data["allocators"]:
        if "Total Allocated" in raw[0]["args"]:
            assert a["peak_bytes_in_use"] == expect[a["name"]][2]
        assert a["breakdown_at_peak"] and a["breakdown_at_peak"][0]["size_bytes"] > 0


def test_kineto_gpu_allocator_has_capacity_reserved_and_ops() -> None:
    path = FIXTURES / KINETO_WITH_MEMORY[0]
    data = open_run_model(path, use_cache=False).memory_dict()
    gpu = next(a for a in data["allocators"] if a["name"] == "cuda:0")
    raw = [e["args"] for e in _raw_memory_events(path) if e["args"]["Device Type"] == 1]
    props = json.loads(gzip.decompress(path.read_bytes()))["deviceProperties"][0]
    assert gpu["capacity_bytes"] == props["totalGlobalMem"]
    assert gpu["peak_reserved_bytes"] == max(a["Total Reserved"] for a in raw)
    at_peak = next(a for a in raw if a["Total Allocated"] == gpu["peak_bytes_in_use"])
    assert gpu["fragmentation_at_peak"] == pytest.approx(
        1 - at_peak["Total Allocated"] / at_peak["Total Reserved"], abs=1e-5)
    # The live allocations at the peak and what was there before add up to the heap.
    assert sum(r["size_bytes"] * r["occurrences"] for r in gpu["breakdown_at_peak"]) == \
        gpu["peak_bytes_in_use"]
    names = {o["name"] for o in data["ops"] if o["allocator"] == "cuda:0"}
    assert "aten::empty" in names and all(not n.startswith("torch/") for n in names)


# -- PyTorch: per-op memory against key_averages() ---------------------------------------------

TORCH_STEPS = 3


def _torch_model() -> tuple[Any, Any, Any, Any]:
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    return model, opt, torch.randn(32, 128), torch.randint(0, 10, (32,))


def _torch_step(model: Any, opt: Any, x: Any, y: Any) -> None:
    import torch

    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()


def _key_averages(prof: Any) -> dict[str, tuple[int, int]]:
    # "[memory]" is key_averages' own bucket for memory no op owned: not an op.
    return {e.key: (e.cpu_memory_usage, e.self_cpu_memory_usage) for e in prof.key_averages()
            if e.key != "[memory]"}


def _assert_ops_match(data: dict[str, Any], want: dict[str, tuple[int, int]]) -> None:
    got = {o["name"]: (o["allocated_bytes"], o["self_allocated_bytes"]) for o in data["ops"]
           if o["allocator"] == "cpu"}
    assert any(v != (0, 0) for v in want.values())
    for name, (incl, own) in want.items():
        mine = got.get(name, (0, 0))
        assert mine[0] == pytest.approx(incl, rel=0.01, abs=1), name
        assert mine[1] == pytest.approx(own, rel=0.01, abs=1), name
    assert set(got) <= set(want)


def test_torch_trace_ops_match_key_averages(tmp_path: Path) -> None:
    from torch.profiler import ProfilerActivity, profile

    model, opt, x, y = _torch_model()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        for _ in range(TORCH_STEPS):
            _torch_step(model, opt, x, y)
    trace = tmp_path / "run.pt.trace.json"
    prof.export_chrome_trace(str(trace))
    data = open_run_model(trace, use_cache=False).memory_dict()
    _assert_ops_match(data, _key_averages(prof))
    cpu = data["allocators"][0]
    assert cpu["name"] == "cpu" and cpu["num_allocations"] > 0


def test_torch_bridge_ops_match_key_averages(tmp_path: Path) -> None:
    from stepscope.capture.bridges.pytorch import last_profiler

    model, opt, x, y = _torch_model()
    options = stepscope.ProfilerOptions(counter_interval_ms=0)
    with stepscope.Profile(tmp_path / "logs", options=options):
        for i in range(TORCH_STEPS):
            with stepscope.Trace("train", step_num=i, _r=1):
                _torch_step(model, opt, x, y)
    data = open_run_model(tmp_path / "logs", use_cache=False).memory_dict()
    _assert_ops_match(data, _key_averages(last_profiler()))
    # Every op runs inside a train step: that is where the peak is.
    assert data["allocators"][0]["peak_step"] in range(TORCH_STEPS)
    # Issue 30: the bridge's records carry address and totals, so the breakdown at the peak
    # gives at least what PyTorch's own trace file of the same recording gives.
    trace = tmp_path / "own.pt.trace.json"
    last_profiler().export_chrome_trace(str(trace))
    theirs = open_run_model(trace, use_cache=False).memory_dict()
    (mine_cpu,) = [a for a in data["allocators"] if a["name"] == "cpu"]
    (their_cpu,) = [a for a in theirs["allocators"] if a["name"] == "cpu"]
    assert not any({"no_totals", "missing_address"} & set(p)
                   for p in data["problems"].values()), data["problems"]
    assert mine_cpu["peak_bytes_in_use"] == their_cpu["peak_bytes_in_use"]
    mine_rows, their_rows = mine_cpu["breakdown_at_peak"], their_cpu["breakdown_at_peak"]
    assert len(their_rows) > 1 and len(mine_rows) >= len(their_rows)
    assert sum(r["size_bytes"] * r["occurrences"] for r in mine_rows) == \
        sum(r["size_bytes"] * r["occurrences"] for r in their_rows)
    # ... and more: the tensors' data types and shapes, never TensorFlow's INVALID.
    typed = [r for r in mine_rows if r["data_type"] == "float32" and r["shape"].startswith("[")]
    assert typed, mine_rows
    assert all(r["data_type"] != "INVALID" for r in mine_rows)


# -- stepscope's memory tracer (NumPy) -----------------------------------------------------------

SIZE = 256 * 128 * 8  # bytes of one float64 (256, 128) array


@pytest.fixture(scope="module")
def numpy_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    logdir = tmp_path_factory.mktemp("numpy-memory")
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((256, 64)), rng.standard_normal((64, 128))
    options = stepscope.ProfilerOptions(counter_interval_ms=0, memory_tracer_level=1,
                                        memory_threshold_bytes=4096)
    small = []
    with stepscope.Profile(logdir, options=options):
        for i in range(3):
            with stepscope.Trace("train", step_num=i, _r=1):
                with stepscope.Trace("forward"):
                    h = x @ w  # one (256, 128) array
                    small.append(np.ones(16))  # below the threshold: not recorded
                with stepscope.Trace("backward"):
                    g = h * 2.0  # another
                del h, g
    return logdir


def test_memory_tracer_records_allocations_by_trace(numpy_run: Path) -> None:
    data = open_run_model(numpy_run, use_cache=False).memory_dict()
    (alloc,) = data["allocators"]
    assert alloc["name"] == schema.STEPSCOPE_ALLOCATOR
    assert (alloc["num_allocations"], alloc["num_deallocations"]) == (6, 6)
    assert alloc["peak_bytes_in_use"] == 2 * SIZE
    assert alloc["peak_step"] in range(3)
    rows = [(r["op"], r["size_bytes"], r["occurrences"]) for r in alloc["breakdown_at_peak"]]
    assert rows == [("backward", SIZE, 1), ("forward", SIZE, 1)]
    # Memory records are instants, not ops (issue 30: zero-time rows among the top ops).
    model = open_run_model(numpy_run, use_cache=False)
    op_names = {r.name for r in model.op_stats().rows}
    assert "forward" in op_names and not op_names & {"MemoryAllocation", "MemoryDeallocation"}
    # NumPy's allocator is not told the dtype: unknown, not TensorFlow's INVALID.
    assert [r["data_type"] for r in alloc["breakdown_at_peak"]] == ["", ""]
    ops = {o["name"]: (o["allocated_bytes"], o["self_allocated_bytes"]) for o in data["ops"]}
    # forward allocates h; backward allocates g; both are freed inside train, after backward.
    assert ops["forward"] == (3 * SIZE, 3 * SIZE)
    assert ops["backward"] == (3 * SIZE, 3 * SIZE)
    assert ops["train"] == (0, -6 * SIZE)
    assert data["problems"] == {}


def test_xprof_reads_the_memory_tracer_profile(numpy_run: Path, tmp_path: Path) -> None:
    path = next(numpy_run.rglob("*.xplane.pb"))
    theirs = _xprof_memory(path, tmp_path)["memoryProfilePerAllocator"]
    summary = theirs[schema.STEPSCOPE_ALLOCATOR]["profileSummary"]
    assert int(summary["peakStats"]["peakBytesInUse"]) == 2 * SIZE


def _handler_name() -> str:
    import importlib

    for module in ("numpy._core.multiarray", "numpy.core.multiarray"):
        try:
            return str(importlib.import_module(module).get_handler_name())
        except (ImportError, AttributeError):
            continue
    pytest.skip("this NumPy cannot name its allocator")


def test_memory_tracer_with_delay_and_handler_given_back(tmp_path: Path) -> None:
    before = _handler_name()
    options = stepscope.ProfilerOptions(counter_interval_ms=0, memory_tracer_level=1,
                                        delay_ms=50)
    stepscope.start(tmp_path / "a", options)
    assert _handler_name() == "stepscope_memory_tracer"
    stepscope.stop()  # before the delay ran out: nothing recorded, the handler given back
    assert _handler_name() == before
    import time

    stepscope.start(tmp_path / "b", options)
    time.sleep(0.3)  # recording starts on a timer's thread; allocations here still count
    with stepscope.Trace("late"):
        kept = np.ones(SIZE // 8)
    stepscope.stop()
    assert _handler_name() == before
    del kept
    data = open_run_model(tmp_path / "b", use_cache=False).memory_dict()
    (alloc,) = data["allocators"]
    assert alloc["breakdown_at_peak"][0]["op"] == "late"
    assert alloc["peak_bytes_in_use"] == SIZE


REENTRY_SCRIPT = r"""
import gc, sys
import numpy as np
import stepscope
from stepscope.capture import session
from stepscope.run.loader import open_run_model
opts = stepscope.ProfilerOptions(counter_interval_ms=0, memory_tracer_level=1,
                                 memory_threshold_bytes=0)
stepscope.start(sys.argv[1], opts)
rec = session._session.recorder
add = rec.add
doomed = []

def add_and_free(*args):
    # What the garbage collector does when it runs inside the recorder: free an array.
    add(*args)
    if doomed:
        doomed.pop()

rec.add = add_and_free
for i in range(200):
    doomed.append(np.ones(64))
    kept = np.ones(32)
gc.set_threshold(1, 1, 1)
for i in range(200):
    a = [np.ones(64)]
    a.append(a)
    del a
stepscope.stop()
(alloc,) = open_run_model(sys.argv[1], use_cache=False).memory_dict()["allocators"]
print(alloc["num_allocations"], alloc["num_deallocations"])
"""


def test_memory_tracer_reentered_from_its_own_recording(tmp_path: Path) -> None:
    """An array freed while the tracer records another event (as the garbage collector can
    do) comes back into the tracer on the same thread: it is recorded, and nothing hangs."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(Path(stepscope.__file__).parents[1])}
    done = subprocess.run([sys.executable, "-c", REENTRY_SCRIPT, str(tmp_path)], env=env,
                          capture_output=True, text=True, timeout=30, check=True)
    allocs, frees = map(int, done.stdout.split()[-2:])
    assert allocs >= 600 and frees >= 390


def test_memory_tracer_option_is_checked() -> None:
    with pytest.raises(stepscope.InvalidOptionError if hasattr(stepscope, "InvalidOptionError")
                       else Exception, match="memory_tracer_level"):
        stepscope.ProfilerOptions(memory_tracer_level=2)
    with pytest.raises(Exception, match="memory_threshold_bytes"):
        stepscope.ProfilerOptions(memory_threshold_bytes=-1)


# -- the timeline --------------------------------------------------------------------------------


def test_timeline_is_downsampled_and_keeps_the_peak() -> None:
    path = FIXTURES / KINETO_WITH_MEMORY[3]
    table = load_file(path, use_cache=False)
    ev = memory_events(table)
    index = ev.allocators.index("cuda:1")
    sl = ev.of(index)
    start = int(ev.time_ns[sl][0])
    heap = ev.heap[sl]
    assert len(heap) > 20_000
    for width in (2, 10, 301, 1000, 10_000):
        small = timeline(ev, index, start, width)
        assert small["events"] == len(heap) and small["points"] <= width
        assert max(small["heap_bytes"]) == heap.max()
        assert min(small["heap_bytes"]) == heap.min()
        assert small["time_ms"] == sorted(small["time_ms"])
    # A short window is sent whole.
    t = ev.time_ns[sl]
    few = timeline(ev, index, start, 1000, int(t[100]), int(t[149]))
    assert few["points"] == few["events"] >= 50
    assert few["heap_bytes"] == heap[100:100 + few["points"]].tolist()
    full = timeline(ev, index, start, 10_000)
    # A window holds only its own events.
    mid = full["time_ms"][len(full["time_ms"]) // 2]
    window = timeline(ev, index, start, 50, start + int(mid * 1e6), None)
    assert window["time_ms"][0] >= mid - 1e-6
    # A free shows the op and size of its allocation.
    frees = [i for i, a in enumerate(full["activity"]) if a == "free"]
    assert frees and all(full["size_bytes"][i] > 0 for i in frees)


# -- bad data ------------------------------------------------------------------------------------


def _space_with(events: list[tuple[str, int, dict[str, Any]]], path: Path) -> Path:
    space = xb.new_space("bad")
    host = xb.add_plane(space, schema.HOST_PLANE_ID, schema.HOST_PLANE)
    line = host.add_line(1, "thread", 1_000_000)
    for name, t, stats in events:
        host.add_event(line, name, 1_000_000 + t, 0, stats)
    xb.write_space(space, path)
    return path


def test_bad_memory_data_is_counted_not_raised(tmp_path: Path) -> None:
    good = {schema.ALLOCATOR_NAME: "GPU_0_bfc", schema.BYTES_ALLOCATED: 100,
            schema.BYTES_RESERVED: 0, schema.BYTES_AVAILABLE: 900,
            schema.ALLOCATION_BYTES: 100, schema.REQUESTED_BYTES: 90, schema.ADDRESS: 1,
            schema.TF_OP: "<b>op</b>"}
    path = _space_with([
        (schema.MEMORY_ALLOCATION, 10, good),
        # A free of memory never allocated.
        (schema.MEMORY_DEALLOCATION, 20, {**good, schema.ADDRESS: 77,
                                          schema.BYTES_ALLOCATED: 50}),
        # No stats at all: no allocator, no sizes.
        (schema.MEMORY_ALLOCATION, 30, {}),
        # Sizes beyond any memory (2^63 + 5 as uint64, and 2^60).
        (schema.MEMORY_ALLOCATION, 40, {**good, schema.ADDRESS: 2,
                                        schema.ALLOCATION_BYTES: (1 << 63) + 5,
                                        schema.BYTES_ALLOCATED: 1 << 60}),
        (schema.MEMORY_DEALLOCATION, 50, {**good, schema.BYTES_ALLOCATED: -5}),
    ], tmp_path / "bad.xplane.pb")
    data = open_run_model(path, use_cache=False).memory_dict()
    problems = data["problems"]["bad"]
    assert problems["frees_without_allocation"] == 1
    assert problems["missing_allocator"] == 1 and problems["missing_heap"] == 1
    assert problems["bad_sizes"] >= 3
    gpu = next(a for a in data["allocators"] if a["name"] == "GPU_0_bfc")
    assert gpu["peak_bytes_in_use"] == 100  # the absurd heap counts as nothing
    assert gpu["breakdown_at_peak"][0]["op"] == "<b>op</b>"
    json.dumps(data, allow_nan=False)


def test_kineto_bad_memory_args(tmp_path: Path) -> None:
    events = [{"ph": "X", "name": "aten::empty", "cat": "cpu_op", "pid": 1, "tid": 1,
               "ts": 0, "dur": 100}]
    for i, args in enumerate([{"Bytes": 64, "Addr": 1, "Device Type": 0},
                              {"Bytes": "a lot", "Addr": 2},
                              {"Bytes": 1 << 70, "Addr": 3},
                              {"Bytes": -64, "Addr": 9, "Device Type": 0, "Device Id": -1},
                              {"Addr": 4}, None]):
        events.append({"ph": "i", "s": "t", "name": "[memory]", "pid": 1, "tid": 1,
                       "ts": 10 + i, **({"args": args} if args is not None else {})})
    path = tmp_path / "bad.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    data = open_run_model(path, use_cache=False).memory_dict()
    (cpu,) = data["allocators"]
    assert (cpu["num_allocations"], cpu["num_deallocations"]) == (1, 1)
    assert cpu["peak_bytes_in_use"] == 64
    # Text, a number past int64 (kept as text by the reader), no Bytes, no args at all.
    assert data["problems"]["bad"] == {"missing_size": 4, "no_totals": 2,
                                       "frees_without_allocation": 1}


def test_profile_without_memory_has_no_allocators() -> None:
    path = FIXTURES / "HolisticTraceAnalysis/tests/data/cpu_only/" \
        "rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"
    data = open_run_model(path, use_cache=False).memory_dict()
    assert data["allocators"] == [] and data["has_memory"] is False


# -- CLI -----------------------------------------------------------------------------------------


def test_cli_memory_json_csv_and_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                        cache_home: Path) -> None:
    path = str(FIXTURES / XSPACE_WITH_MEMORY[0])
    assert main(["memory", path, "--json", "--allocator", "GPU_4_bfc",
                 "--csv", str(tmp_path / "b.csv")]) == 0
    data = json.loads(capsys.readouterr().out)
    a = data["allocators"][data["allocator"]]
    assert a["name"] == "GPU_4_bfc"
    for key in ("name", "host", "capacity_bytes", "peak_bytes_in_use", "peak_time_ms",
                "peak_step", "num_allocations", "num_deallocations", "fragmentation_at_peak",
                "breakdown_at_peak"):
        assert key in a
    assert set(a["breakdown_at_peak"][0]) >= {"op", "size_bytes", "requested_bytes",
                                              "occurrences", "region_type", "data_type",
                                              "shape"}
    lines = (tmp_path / "b.csv").read_text().splitlines()
    assert lines[0].startswith("host,allocator,op,size_bytes")
    # The CSV is the tool's, as the web page exports it: every allocator's breakdown.
    assert len(lines) == 1 + sum(len(x["breakdown_at_peak"]) for x in data["allocators"])
    # Cached: the second run reads the run model from the cache and says the same.
    assert main(["memory", path, "--json", "--allocator", "GPU_4_bfc"]) == 0
    assert json.loads(capsys.readouterr().out) == data
    assert main(["memory", path, "--limit", "3"]) == 0
    out = capsys.readouterr().out
    assert "GPU_4_bfc" in out and "unused preallocated device memory" in out
    assert main(["memory", path, "--allocator", "nope"]) == 2
    assert "No allocator 'nope'" in capsys.readouterr().err
    assert main(["memory", path, "--host", "nope"]) == 2
    bad = tmp_path / "junk.xplane.pb"
    bad.write_bytes(b"\x0a\xff\xff\xff\xff\x0f garbage")
    assert main(["memory", str(bad), "--no-cache"]) == 2
    assert "Traceback" not in capsys.readouterr().err
    # Truncated real data, an empty file, an empty trace, random bytes: one line, or an
    # answer (with no memory), never a traceback.
    rng = np.random.default_rng(0)
    raw = (FIXTURES / XSPACE_WITH_MEMORY[0]).read_bytes()
    for name, content in (("cut.xplane.pb", raw[:len(raw) // 2]),
                          ("empty.xplane.pb", b""),
                          ("empty.pt.trace.json", b'{"traceEvents": []}'),
                          ("noise.xplane.pb", rng.bytes(5000))):
        case = tmp_path / name
        case.write_bytes(content)
        assert main(["memory", str(case), "--no-cache", "--json"]) in (0, 2), name
        captured = capsys.readouterr()
        assert "Traceback" not in captured.err, name
        if captured.out:
            json.loads(captured.out)


def test_cli_memory_without_memory_data(capsys: pytest.CaptureFixture[str]) -> None:
    path = FIXTURES / "HolisticTraceAnalysis/tests/data/cpu_only/" \
        "rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"
    assert main(["memory", str(path), "--no-cache"]) == 2
    assert "recorded no memory activity" in capsys.readouterr().err


# -- HTTP API ------------------------------------------------------------------------------------


@pytest.fixture
def api(tmp_path: Path) -> Api:
    for run, rel in (("mem", XSPACE_WITH_MEMORY[2]),
                     ("nomem", "HolisticTraceAnalysis/tests/data/cpu_only/"
                               "rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz")):
        d = tmp_path / "logs" / "plugins" / "profile" / run
        d.mkdir(parents=True)
        shutil.copy(FIXTURES / rel, d / Path(rel).name)
    a = Api(tmp_path / "logs", use_cache=False)
    for run in ("mem", "nomem"):
        a.store.wait(a._run_path(run), timeout=60)
    return a


def test_api_lists_memory_profile_only_with_memory(api: Api) -> None:
    def names(run: str) -> list[str]:
        return [t["name"] for t in api.tools(run, None)["tools"]]

    assert "memory_profile" in names("mem")
    assert "memory_profile" not in names("nomem")
    with pytest.raises(stepscope.errors.NotFoundError):
        api.data("nomem", None, "memory_profile", {})


def test_api_memory_data_and_params(api: Api) -> None:
    status, data = api.data("mem", None, "memory_profile", {"width": "20", "allocator": "1"})
    assert status == 200 and data["allocator"] == 1
    t = data["timeline"]
    assert t["allocator"] == data["allocators"][1]["name"] and t["points"] <= 20
    assert max(t["heap_bytes"]) == data["allocators"][1]["peak_heap_bytes"]
    lo = int(t["time_ms"][len(t["time_ms"]) // 2] * 1000)
    _, zoomed = api.data("mem", None, "memory_profile", {"from_us": str(lo), "width": "1000"})
    assert zoomed["timeline"]["time_ms"][0] * 1000 >= lo - 1
    _, summary_only = api.data("mem", None, "memory_profile", {"width": "0"})
    assert summary_only["timeline"] is None and summary_only["allocators"] == data["allocators"]
    for bad in ({"width": "x"}, {"width": "-1"}, {"width": "10001"}, {"allocator": "-1"},
                {"from_us": "1e5"}, {"width": "9" * 40}, {"allocator": "\x00"}):
        with pytest.raises(ApiError) as err:
            api.data("mem", None, "memory_profile", bad)
        assert err.value.status == 400
    for unknown in ("9999", "<script>"):
        with pytest.raises(stepscope.errors.NotFoundError):
            api.data("mem", None, "memory_profile", {"allocator": unknown})
    name, text = api.csv("mem", None, "memory_profile", {})
    assert name.endswith("memory_profile.csv") and text.startswith("host,allocator,op")


def test_memory_events_kept_with_the_run_model(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Building the run model keeps each host's memory events in the cache, so that a later
    server draws the memory timeline without reading the host's table; they are the ones the
    table gives."""
    import dataclasses
    import time

    from stepscope.run.storage import cached_memory_events

    monkeypatch.setenv("STEPSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    run = tmp_path / "logs" / "plugins" / "profile" / "r"
    run.mkdir(parents=True)
    source = run / "host.xplane.pb"
    shutil.copy(FIXTURES / XSPACE_WITH_MEMORY[0], source)
    model = open_run_model(run, engine="local")
    kept = cached_memory_events(source)
    assert kept is not None and len(kept)
    steps = model.hosts["host"].steps
    fresh = memory_events(load_file(source, use_cache=False), steps.step_num, steps.start_ns,
                          steps.end_ns)
    for f in dataclasses.fields(fresh):
        a, b = getattr(kept, f.name), getattr(fresh, f.name)
        if isinstance(b, np.ndarray):
            assert a.dtype == b.dtype, f.name
            np.testing.assert_array_equal(a, b, err_msg=f.name)
        else:
            assert a == b, f.name
    api = Api(tmp_path / "logs")
    for _ in range(1500):  # 202 while the run opens
        code, data = api.data("r", None, "memory_profile", {"width": "100"})
        if code != 202:
            break
        time.sleep(0.02)
    assert code == 200 and data["timeline"]["points"] > 0
