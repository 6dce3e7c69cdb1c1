"""The GPU timeline (``stepscope gpu``, ``analysis.gpu_timeline``) on real traces.

* Against HTA (``traceinsight``) on every Kineto GPU trace of ../shared/fixtures that HTA
  reads: temporal breakdown, idle time per stream and cause, communication/compute overlap and
  kernel launch statistics, each within 1 % of HTA's figure, or of the whole it is a small
  part of (the span; the stream's idle time), or 1 µs. What remains comes from HTA's reading:
  it counts GPU-side syncs as busy time, sums the negative gaps of ops that overlap on a
  stream (rounding) into kernel wait, compares float microseconds (a tie may fall either
  way), and gives a kernel whose launch is not in the trace the time of the trace's first
  event as its launch. HTA runs in its own virtual environment where it cannot share ours:
  ``STEPSCOPE_HTA_PYTHON`` names its Python (else ``/tmp/hta-venv/bin/python``, else this
  Python where it imports ``hta``); without one these tests skip, saying so.
* The critical path on the 8-rank DLRM job, and on a 3-rank gloo job recorded here with one
  rank doing forty times the others' compute: that rank's compute is on every rank's path.
* XSpace GPU profiles (TensorFlow on V100s, JAX on MI300X), the CLI, advice, and hostile input.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from stepscope.analysis.tools.advice import gpu_timeline_advice
from stepscope.analysis.tools.gpu_ops import gpu_ops
from stepscope.analysis.tools.gpu_timeline import (
    GpuTimeline,
    Options,
    gpu_timeline,
    gpu_timeline_of,
)
from stepscope.errors import StepscopeError
from stepscope.formats.run_reader import load

from conftest import FIXTURES

TESTS = Path(__file__).resolve().parent
DOCS = TESTS.parent / "docs" / "gpu-timeline.md"
DLRM = FIXTURES / "param/et_replay/tests/inputs/dlrm_kineto"
HTA_DATA = FIXTURES / "HolisticTraceAnalysis/tests/data"
# Runs of several ranks (one directory each); every other Kineto file is a run of its own.
MULTI_RANK = (DLRM, HTA_DATA / "trace_filter")
# HTA reads this trace but counts a CPU-side Triton op, which carries a stream argument, as
# device work (its span is then that op's): not a figure to compare with.
HTA_MISREADS = {"triton_example.json.gz"}
LAUNCH_CALLS = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cudaMemcpyAsync",
                "cudaMemsetAsync")  # the calls HTA's launch statistics count


def _kineto_runs() -> list[Path]:
    files = [p for d in ("HolisticTraceAnalysis", "TraceLens", "kineto", "param")
             for p in sorted((FIXTURES / d).rglob("*.json*"))
             if p.name.endswith((".json", ".json.gz")) and p.name != "SOURCES.md"]
    singles = [p for p in files if not any(m in p.parents for m in MULTI_RANK)]
    # PyTorch's own trace file of a real H200 capture (tests/test_gpu_captures.py)
    return [*singles, TESTS / "data" / "h200" / "torch_bridge.pt.trace.json.gz", *MULTI_RANK]


def _hta_python() -> str | None:
    chosen = os.environ.get("STEPSCOPE_HTA_PYTHON")
    if chosen:
        return chosen
    if Path("/tmp/hta-venv/bin/python").exists():
        return "/tmp/hta-venv/bin/python"
    try:
        import hta  # noqa: F401
    except ImportError:
        return None
    return sys.executable


@pytest.fixture(scope="module")
def hta(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    python = _hta_python()
    if python is None:
        pytest.skip("HTA (the traceinsight package) is not installed: set STEPSCOPE_HTA_PYTHON "
                    "to a Python that has it (pip install traceinsight in a venv of its own)")
    out = tmp_path_factory.mktemp("hta") / "hta.json"
    done = subprocess.run([python, str(TESTS / "hta_reference.py"), str(out),
                           *map(str, _kineto_runs())], capture_output=True, text=True,
                          timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    figures: dict[str, Any] = json.loads(out.read_text())
    return figures


def _close(ours: float, theirs: float, what: str, whole: float = 0.0) -> None:
    """Within 1 % of HTA's figure, or of the whole it is part of (a small part of it), or
    1 µs."""
    assert abs(ours - theirs) <= max(0.01 * abs(theirs), 0.01 * whole, 1.0), \
        f"{what}: {ours} vs HTA {theirs}"


@pytest.mark.parametrize("run", _kineto_runs(), ids=lambda p: p.name)
def test_matches_hta(run: Path, hta: dict[str, Any]) -> None:
    ref = hta[str(run)]
    if "error" in ref:
        pytest.skip(f"HTA cannot read this trace ({ref['error'][:120]})")
    if run.name in HTA_MISREADS:
        pytest.skip("HTA counts the CPU-side Triton op of this trace as device work")
    profile = load(run, use_cache=False)
    result = gpu_timeline(profile.run, {n: gpu_ops(n, profile.hosts[n]) for n in profile.hosts},
                          Options(hta_scope=True))
    by_rank = {d.rank if d.rank is not None else 0: d for d in result.devices}
    assert len(by_rank) == len(result.devices) == len(ref["ranks"])
    for rank, theirs in ref["ranks"].items():
        d = by_rank[int(rank)]
        b = d.breakdown
        what = f"{run.name} rank {rank}"
        _close(b.span_ns / 1e3, theirs["span_us"], f"{what} span")
        span = theirs["span_us"]
        _close(b.compute_ns / 1e3, theirs["compute_us"], f"{what} compute", span)
        _close((b.communication_ns + b.memory_ns) / 1e3, theirs["non_compute_us"],
               f"{what} non-compute", span)
        _close(b.idle_ns / 1e3, theirs["idle_us"], f"{what} idle", span)
        if b.comm_total_ns:
            _close(100.0 * b.comm_overlap_ns / b.comm_total_ns, theirs["overlap_percent"],
                   f"{what} overlap %")
        streams = {s.stream.split()[-1]: s for s in d.idle}
        for stream, causes in theirs["idle_streams"].items():
            ours = streams[stream]
            total = sum(causes.values())
            _close(ours.total_ns / 1e3, total, f"{what} stream {stream} idle")
            for cause, value in causes.items():
                mine = {"host_wait": ours.host_wait_ns, "kernel_wait": ours.kernel_wait_ns,
                        "other": ours.other_ns}[cause]
                _close(mine / 1e3, value, f"{what} stream {stream} {cause}", total)
        calls = [d.launches.by_call[c] for c in LAUNCH_CALLS if c in d.launches.by_call]
        launch = theirs["launch"]
        assert sum(c[0] for c in calls) == launch["count"], what
        for i, key in ((1, "cpu_duration_us"), (2, "launch_delay_us"), (3, "gpu_duration_us")):
            _close(sum(c[i] for c in calls) / 1e3, launch[key], f"{what} {key}")


def test_hta_reads_most_of_the_traces(hta: dict[str, Any]) -> None:
    read = [p for p, v in hta.items() if "error" not in v]
    assert len(read) >= 15, sorted(hta)


# --------------------------------------------------------------------------- invariants


@pytest.fixture(scope="module")
def dlrm() -> GpuTimeline:
    return gpu_timeline_of(load(DLRM, use_cache=False))


def _check_breakdowns(result: GpuTimeline) -> None:
    for d in result.devices:
        for b in [d.breakdown, *(s.breakdown for s in d.steps)]:
            assert min(b.compute_ns, b.communication_ns, b.memory_ns, b.idle_ns) >= 0
            assert b.compute_ns + b.communication_ns + b.memory_ns + b.idle_ns == b.span_ns
            assert 0 <= b.comm_overlap_ns <= b.comm_total_ns
            # Communication outside compute is the exposed part of the collectives' union.
            assert b.exposed_comm_ns == b.communication_ns


def test_breakdowns_add_up_and_sequences_are_counted_right(dlrm: GpuTimeline) -> None:
    _check_breakdowns(dlrm)
    d = dlrm.devices[0]
    profile = load(DLRM, use_cache=False)
    ops = gpu_ops(d.host, profile.hosts[d.host])
    # Each listed sequence, counted again the slow way over every stream's op names.
    streams: dict[int, list[str]] = {}
    for i in range(len(ops)):
        streams.setdefault(int(ops.stream[i]), []).append(ops.name(i))
    assert d.sequences
    for seq in d.sequences:
        n = len(seq.kernels)
        count = sum(1 for names in streams.values() for i in range(len(names) - n + 1)
                    if names[i:i + n] == seq.kernels)
        assert count == seq.count >= 2


def test_queue_length_matches_a_count_of_launched_not_started(dlrm: GpuTimeline) -> None:
    d = dlrm.devices[1]
    profile = load(DLRM, use_cache=False)
    table = profile.hosts[d.host]
    ops = gpu_ops(d.host, table)
    for q in d.queues:
        mine = [i for i in range(len(ops)) if table.line_name[int(ops.stream[i])] == q.stream
                and ops.launch[i] >= 0]
        # At each launch, how many of the stream's ops were launched and not yet started.
        most = 0
        for i in mine:
            t = int(table.start_ns[ops.launch[i]])
            most = max(most, sum(1 for j in mine if int(table.start_ns[ops.launch[j]]) <= t
                                 < int(ops.start[j])))
        assert q.max_length == most


# --------------------------------------------------------------------------- critical path


def test_dlrm_critical_path_names_the_rank_the_collectives_waited_for(
        dlrm: GpuTimeline) -> None:
    steps = dlrm.critical_path.steps()
    assert steps == [10]
    paths = [p for p in dlrm.critical_path.paths if p.step == 10]
    assert sorted(p.host for p in paths) == sorted({d.host for d in dlrm.devices})
    for p in paths:
        assert sum(p.shares("kind").values()) == pytest.approx(100.0, abs=0.05)
        on_own = [s for s in p.segments if s.host == p.host]
        assert all(a.start_ns <= b.start_ns for a, b in zip(on_own, on_own[1:], strict=False))
    # The rank that arrived last at the collectives is the one whose collectives took least
    # time (the others waited in theirs): it must be the one that bounds the step.
    late = min(dlrm.devices, key=lambda d: d.breakdown.comm_total_ns).host
    assert dlrm.critical_path.to_dict()["steps"][0]["bounded_by"] == late
    assert sum(1 for p in paths if any(s.host == late for s in p.segments)) >= 6


@pytest.fixture(scope="module")
def gloo_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("torch.distributed")
    out = tmp_path_factory.mktemp("gloo")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    done = subprocess.run([sys.executable, str(TESTS / "gloo_workload.py"), str(out),
                           str(port)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(list(out.glob("rank*.pt.trace.json"))) == 3
    return out


def test_slow_ranks_compute_is_on_every_ranks_path(gloo_run: Path) -> None:
    profile = load(gloo_run, use_cache=False)
    result = gpu_timeline_of(profile)
    assert result.devices == []  # CPU only: the path follows host-side collectives
    steps = result.critical_path.steps()
    assert len(steps) == 3
    # rank2's slow_compute ops, as the trace has them (one per step).
    slow_table = profile.hosts["rank2"]
    code = slow_table.names.index("slow_compute")
    rows = np.flatnonzero(slow_table.name == code)
    slow_ns = sorted(int(d) for d in slow_table.duration_ns[rows])
    assert len(slow_ns) == 3
    for step in steps:
        paths = [p for p in result.critical_path.paths if p.step == step]
        assert sorted(p.host for p in paths) == ["rank0", "rank1", "rank2"]
        for p in paths:
            slow = [s for s in p.segments if s.host == "rank2" and s.name == "slow_compute"]
            assert slow, (step, p.host, [(s.host, s.name) for s in p.segments])
            # The whole op, not a sliver of it.
            assert sum(s.duration_ns for s in slow) in slow_ns
        assert result.critical_path.to_dict()["steps"][steps.index(step)]["bounded_by"] \
            == "rank2"


# --------------------------------------------------------------------------- XSpace


def test_tensorflow_gpu_xspace() -> None:
    path = FIXTURES / "xprof/demo/plugins/profile/GPU-multi-worker"
    profile = load(path, use_cache=False)
    result = gpu_timeline_of(profile)
    devices = {d.device: d for d in result.devices}
    assert {"GPU:4", "GPU:6"} <= set(devices)
    _check_breakdowns(result)
    table = next(iter(profile.hosts.values()))
    for label in ("GPU:4", "GPU:6"):
        d = devices[label]
        plane = table.plane_index("/device:" + label)
        lines = {i for i, n in enumerate(table.line_name) if n.startswith("Stream #")}
        rows = np.flatnonzero((table.plane == plane) & np.isin(table.line, list(lines)))
        assert d.ops == len(rows)
        busy = int(table.duration_ns[rows].sum())
        b = d.breakdown
        assert 0 < b.compute_ns + b.communication_ns + b.memory_ns <= busy
        assert d.launches.cpu_duration.count > 0  # CUPTI's launches, by correlation id


def test_jax_rocm_xspace() -> None:
    path = FIXTURES / "TraceLens/tests/traces/mi300/jax_conv_minimal_08/tw003.xplane.pb"
    result = gpu_timeline_of(load(path, use_cache=False))
    assert result.devices
    _check_breakdowns(result)
    assert all(d.breakdown.compute_ns > 0 for d in result.devices)


# --------------------------------------------------------------------------- advice


def test_advice_from_the_timeline() -> None:
    rules = {r.rule: r for r in gpu_timeline_advice(gpu_timeline_of(load(DLRM)))}
    assert rules["exposed_communication"].evidence["most_often_bounding"] == \
        "worker7_step_12"
    assert rules["exposed_communication"].evidence["exposed_percent_of_span"] >= 5
    resnet = FIXTURES / ("kineto/tb_plugin/samples/resnet50_num_workers_0/"
                         "worker0.1623143089861.pt.trace.json.gz")
    rules = {r.rule: r for r in gpu_timeline_advice(gpu_timeline_of(load(resnet)))}
    assert "DataLoader" in rules["idle_waiting_on_host"].evidence["top_host_op_on_path"]
    assert "launch_bound" not in rules  # its queue is deep: the host ran ahead
    b200 = FIXTURES / "TraceLens/tests/traces/b200/eager_trace.json.gz"
    rules = {r.rule: r for r in gpu_timeline_advice(gpu_timeline_of(load(b200)))}
    assert rules["launch_bound"].evidence["short_kernels_percent"] >= 50
    graphs = FIXTURES / "TraceLens/tests/traces/inference/vllm_decode_full/graph_execution.json.gz"
    assert gpu_timeline_advice(gpu_timeline_of(load(graphs))) == []


# --------------------------------------------------------------------------- CLI, hostile


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "stepscope.cli", *args], capture_output=True,
                          text=True, timeout=600)


def _keys(value: Any, prefix: str = "") -> set[str]:
    out: set[str] = set()
    if isinstance(value, dict):
        for k, v in value.items():
            if prefix.endswith(("by_host", "by_kind", "evidence", "origin_ns")):
                continue  # keys are host names, kinds and a rule's own figures
            out.add(k)
            out |= _keys(v, k)
    elif isinstance(value, list) and value:
        out |= _keys(value[0], prefix)
    return out


def test_cli_json_keys_are_documented() -> None:
    done = _cli("gpu", str(DLRM), "--json", "--no-cache")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    doc = DOCS.read_text()
    missing = sorted(k for k in _keys(data) if f"`{k}`" not in doc and f"`{k}[]`" not in doc)
    assert not missing, missing
    text = _cli("gpu", str(DLRM), "--no-cache")
    assert text.returncode == 0 and "Critical path of step 10" in text.stdout
    one = json.loads(_cli("gpu", str(DLRM), "--json", "--host", "worker3_step_12").stdout)
    assert [d["host"] for d in one["devices"]] == ["worker3_step_12"]
    paths = [p for s in one["critical_path"]["steps"] for p in s["paths"]]
    assert [p["host"] for p in paths] == ["worker3_step_12"]
    assert any(seg["host"] != "worker3_step_12" for seg in paths[0]["segments"])


def test_cli_errors_are_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.pt.trace.json"
    bad.write_text('{"traceEvents": [{"ph": "X", "name": "k", "ts": 1, ')
    for args in (("gpu", str(bad)), ("gpu", str(tmp_path / "none")),
                 ("gpu", str(DLRM), "--host", "nope")):
        done = _cli(*args)
        assert done.returncode == 2, done.stderr
        assert done.stderr.strip().count("\n") == 0 and "Traceback" not in done.stderr


def test_cpu_only_and_empty_traces(tmp_path: Path) -> None:
    cpu = HTA_DATA / "cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"
    result = gpu_timeline_of(load(cpu, use_cache=False))
    assert result.devices == []
    json.dumps(result.to_dict(), allow_nan=False)
    empty = tmp_path / "empty.pt.trace.json"
    empty.write_text('{"traceEvents": []}')
    result = gpu_timeline_of(load(empty, use_cache=False))
    assert result.to_dict()["devices"] == [] and result.table()["device"] == []
    with pytest.raises(StepscopeError):
        gpu_timeline(result.run, {}, Options(min_sequence=4, max_sequence=2))


def test_table_has_a_row_per_device(dlrm: GpuTimeline) -> None:
    table = dlrm.table()
    lengths = Counter(len(v) for v in table.values())
    assert lengths == Counter({len(dlrm.devices): len(table)})
    assert table["rank"] == list(range(8))


def _random_trace(path: Path, rank: int, seed: int) -> None:
    """A Kineto trace of random events: overlapping ops on a stream, launches that point
    nowhere or twice, ops outside every step, zero and absurd times, collectives on one rank
    only."""
    rng = np.random.default_rng(seed)
    events: list[dict[str, Any]] = []
    t = 1_000_000.0
    for step in range(3):
        start = t
        for i in range(int(rng.integers(0, 40))):
            t += float(rng.integers(0, 50))
            corr = int(rng.integers(0, 30))
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel",
                           "pid": 10, "tid": 11, "ts": t, "dur": float(rng.integers(0, 9)),
                           "args": {"correlation": corr}})
            name = ["ncclKernel_AllReduce", "gemm", "Memcpy HtoD", "relu"][i % 4]
            cat = "gpu_memcpy" if name.startswith("Memcpy") else "kernel"
            events.append({"ph": "X", "cat": cat, "name": name, "pid": 0,
                           "tid": int(rng.integers(7, 10)),
                           "ts": t + float(rng.integers(-20, 400)),
                           "dur": float(rng.integers(0, 300)),
                           "args": {"correlation": corr, "stream": 7, "device": 0}})
        t += float(rng.integers(0, 100))
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}",
                       "pid": 10, "tid": 11, "ts": start, "dur": t - start})
    events.append({"ph": "X", "cat": "kernel", "name": "late", "pid": 0, "tid": 7,
                   "ts": 9e12, "dur": 1.0, "args": {"stream": 7, "device": 0}})
    path.write_text(json.dumps({"traceEvents": events,
                                "distributedInfo": {"rank": rank, "world_size": 2}}))


@pytest.mark.parametrize("seed", range(6))
def test_random_traces_give_answers_not_tracebacks(tmp_path: Path, seed: int) -> None:
    for rank in range(2):
        _random_trace(tmp_path / f"rank{rank}.pt.trace.json", rank, seed * 10 + rank)
    result = gpu_timeline_of(load(tmp_path, use_cache=False))
    assert len(result.devices) == 2 and result.critical_path.paths
    json.dumps(result.to_dict(), allow_nan=False)
    _check_breakdowns(result)
    for p in result.critical_path.paths:
        assert all(s.duration_ns > 0 for s in p.segments)
        assert sum(p.shares("host").values()) == pytest.approx(100.0, abs=0.05)
